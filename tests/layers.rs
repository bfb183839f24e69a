//! The house's floor plan, checked from the code's own imports: every `crate::` and `super::`
//! path in `src/` (comments, strings and `#[cfg(test)]` modules left out) is an edge from the
//! module that writes it to the module it names. Two rules hold:
//! - layers: a module imports only from its own layer or the ones below it (the table
//!   [`LAYERS`], bottom first, as the guide's docs/guide/how-it-works.md draws it);
//! - no circles: inside every folder, its modules (each with everything below it) import one
//!   another without a circle. A module and its own submodules are one room: `mod.rs` using its
//!   children and the children using `super::` is how Rust modules are built, not a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules of `src/`, bottom layer first. A module may import from its own layer
/// (without a circle) and from any layer below.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "input grammars and small tools",
        &[
            "input",
            "wait",
            "progress",
            "ssh",
            "host_keys",
            "openstack",
            "interrupt",
        ],
    ),
    (
        "the cluster's model",
        &[
            "templates",
            "images",
            "bake",
            "registry",
            "profile",
            "jupyter_tls",
            "plan",
            "state",
            "render",
            "mpi",
            "jobs",
            "top",
            "tensorboard",
        ],
    ),
    ("providers", &["provider"]),
    (
        "engines",
        &[
            "apply",
            "bootstrap",
            "check",
            "bench",
            "autostop",
            "transfer",
        ],
    ),
    ("what commands share", &["context", "error", "cluster"]),
    ("the shared up", &["converge", "lifecycle"]),
    ("commands and the printer", &["cmd"]),
    ("arguments", &["args"]),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// `src/bootstrap/steps.rs` → `["bootstrap", "steps"]`; `src/plan/mod.rs` → `["plan"]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments, string and char literals, and without its
/// `#[cfg(test)]` modules (a test may reach anywhere).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |e| e + 2);
        } else if let Some(hashes) = raw_string_start(rest) {
            let open = 1 + hashes + 1 + usize::from(rest.starts_with("br"));
            let close = format!("\"{}", "#".repeat(hashes));
            i += open
                + rest[open..]
                    .find(&close)
                    .map_or(rest.len(), |e| e + close.len());
            out.push_str("\"\"");
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() && rest.as_bytes()[j] != b'"' {
                j += if rest.as_bytes()[j] == b'\\' { 2 } else { 1 };
            }
            i += (j + 1).min(rest.len());
            out.push_str("\"\"");
        } else if let Some(len) = char_literal(rest) {
            i += len;
            out.push_str("' '");
        } else if rest.starts_with("#[cfg(test)]") {
            // the item it guards: up to its closing brace or semicolon
            i += skip_item(rest);
        } else {
            let c = rest.chars().next().expect("not at the end");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"`, `r#"`, `br##"`...: the number of `#`.
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s);
    let s = s.strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

/// `'a'`, `'\n'`, `'\''`, `'\u{1F600}'`: its length; a lifetime (`'a`) is not one.
fn char_literal(s: &str) -> Option<usize> {
    if !s.starts_with('\'') {
        return None;
    }
    let mut chars = s.char_indices().skip(1);
    let (_, c) = chars.next()?;
    if c == '\\' {
        let end = s[2..].find('\'')?;
        // `'\''`: the escaped quote is not the end
        let end = if end == 0 {
            s[3..].find('\'')? + 1
        } else {
            end
        };
        return Some(2 + end + 1);
    }
    let (i, close) = chars.next()?;
    (close == '\'').then_some(i + 1)
}

/// The length of `#[cfg(test)] <item>`: to the end of its `{ ... }` block, or its `;`.
fn skip_item(s: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in s.char_indices().skip("#[cfg(test)]".len()) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            ';' if depth == 0 => return i + 1,
            _ => {}
        }
    }
    s.len()
}

/// Every path written after `crate::` or `super::` (with `use` groups expanded), resolved
/// from `here` (the module path of the file).
fn referenced_paths(code: &str, here: &[String], is_mod_file: bool) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let tokens = code.as_bytes();
    for anchor in ["crate::", "super::"] {
        let mut start = 0;
        while let Some(pos) = code[start..].find(anchor) {
            let at = start + pos;
            start = at + anchor.len();
            if at > 0 && (tokens[at - 1].is_ascii_alphanumeric() || tokens[at - 1] == b'_') {
                continue;
            }
            if anchor == "super::" && at >= 7 && &code[at - 7..at] == "super::" {
                continue; // the second `super` of `super::super::`, taken with the first
            }
            let mut base: Vec<String> = if anchor == "crate::" {
                Vec::new()
            } else {
                // `super` of a file `a/b.rs` (module a::b) is `a`; of `a/b/mod.rs` also `a`.
                let _ = is_mod_file;
                let mut b = here.to_vec();
                b.pop();
                b
            };
            let mut rest = &code[start..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            for tail in expand_use_tree(rest) {
                let mut path = base.clone();
                path.extend(tail);
                found.push(path);
            }
        }
    }
    found
}

/// `a::b::{c, d::e}` → `[a,b,c]`, `[a,b,d,e]`; `a::B` → `[a,B]`.
fn expand_use_tree(s: &str) -> Vec<Vec<String>> {
    let s = s.trim_start();
    if let Some(inner) = s.strip_prefix('{') {
        let mut depth = 1;
        let mut end = inner.len();
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let body = &inner[..end];
        let mut parts = Vec::new();
        let (mut depth, mut from) = (0, 0);
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&body[from..i]);
                    from = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&body[from..]);
        return parts
            .into_iter()
            .filter(|p| !p.trim().is_empty())
            .flat_map(expand_use_tree)
            .collect();
    }
    let ident_len = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    if ident_len == 0 {
        return vec![Vec::new()];
    }
    let ident = s[..ident_len].to_string();
    let after = &s[ident_len..];
    if ident == "self" {
        return vec![Vec::new()];
    }
    match after.strip_prefix("::") {
        Some(more) => expand_use_tree(more)
            .into_iter()
            .map(|mut tail| {
                tail.insert(0, ident.clone());
                tail
            })
            .collect(),
        None => vec![vec![ident]],
    }
}

/// The longest prefix of `path` that is a module of the crate.
fn resolve(path: &[String], modules: &BTreeSet<Vec<String>>) -> Vec<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
        .unwrap_or_default()
}

struct Graph {
    /// (from module, to module) → the files that make the edge
    edges: BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>>,
}

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(&src, f)).collect();
    let mut edges: BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let here = module_path(&src, file);
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
        // `mod tests;` files behind #[cfg(test)], and the binary's main
        if name.as_deref() == Some("tests.rs") || here.is_empty() {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a source file");
        let is_mod = name.as_deref() == Some("mod.rs");
        for path in referenced_paths(&code_only(&text), &here, is_mod) {
            let target = resolve(&path, &modules);
            if target.is_empty() || target == here {
                continue;
            }
            let shown = file
                .strip_prefix(&src)
                .unwrap_or(file)
                .display()
                .to_string();
            edges
                .entry((here.clone(), target))
                .or_default()
                .insert(shown);
        }
    }
    Graph { edges }
}

#[test]
fn every_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let missing: BTreeSet<String> = files
        .iter()
        .map(|f| module_path(&src, f))
        .filter_map(|m| m.first().cloned())
        .filter(|top| layer_of(top).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "give these modules a layer in LAYERS (and in docs/guide/how-it-works.md's drawing): {missing:?}"
    );
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let g = graph();
    let mut upward = Vec::new();
    for ((from, to), files) in &g.edges {
        let (Some(a), Some(b)) = (
            from.first().and_then(|m| layer_of(m)),
            to.first().and_then(|m| layer_of(m)),
        ) else {
            continue;
        };
        if b > a {
            upward.push(format!(
                "{} ({}) -> {} ({}) in {}",
                from.join("::"),
                LAYERS[a].0,
                to.join("::"),
                LAYERS[b].0,
                files.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    assert!(
        upward.is_empty(),
        "imports from a higher layer:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_import_circle_inside_any_folder() {
    let g = graph();
    // Each edge seen from the folder that holds both ends: a::b::c -> a::d is b -> d in a.
    let mut by_folder: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut why: BTreeMap<(Vec<String>, String, String), BTreeSet<String>> = BTreeMap::new();
    for ((from, to), files) in &g.edges {
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common == from.len() || common == to.len() {
            continue; // a module and one of its own submodules
        }
        let folder = from[..common].to_vec();
        let (a, b) = (from[common].clone(), to[common].clone());
        by_folder
            .entry(folder.clone())
            .or_default()
            .entry(a.clone())
            .or_default()
            .insert(b.clone());
        why.entry((folder, a, b))
            .or_default()
            .extend(files.iter().cloned());
    }
    let mut circles = Vec::new();
    for (folder, edges) in &by_folder {
        for circle in circles_in(edges) {
            let steps: Vec<String> = circle
                .windows(2)
                .map(|w| {
                    let files = &why[&(folder.clone(), w[0].clone(), w[1].clone())];
                    format!(
                        "{} -> {} ({})",
                        w[0],
                        w[1],
                        files.iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                })
                .collect();
            let place = if folder.is_empty() {
                "src/".to_string()
            } else {
                format!("src/{}/", folder.join("/"))
            };
            circles.push(format!("in {place}: {}", steps.join("; ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// One circle (first node repeated at the end) for every strongly connected part with more
/// than one module.
fn circles_in(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges
        .keys()
        .chain(edges.values().flat_map(|v| v.iter()))
        .collect();
    let reaches = |from: &String, to: &String| -> Option<Vec<String>> {
        // breadth-first path from `from` to `to`
        let mut prev: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([from.clone()]);
        while let Some(n) = queue.pop_front() {
            for m in edges.get(&n).into_iter().flatten() {
                if m == to {
                    let mut path = vec![to.clone(), n.clone()];
                    let mut at = n.clone();
                    while let Some(p) = prev.get(&at) {
                        path.push(p.clone());
                        at = p.clone();
                    }
                    path.reverse();
                    return Some(path);
                }
                if !prev.contains_key(m) && m != from {
                    prev.insert(m.clone(), n.clone());
                    queue.push_back(m.clone());
                }
            }
        }
        None
    };
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::new();
    for n in nodes {
        if seen.contains(n) {
            continue;
        }
        if let Some(circle) = reaches(n, n) {
            seen.extend(circle.iter().cloned());
            out.push(circle);
        }
    }
    out
}

#[test]
fn the_reader_of_imports_reads_what_rust_writes() {
    let code = code_only(
        "use crate::a::{b, c::{D, e}};\n// crate::commented\nlet s = \"crate::in_string\";\n\
         let r = r#\"crate::raw\"#; let q = '\"'; fn f<'a>() {}\n\
         use super::super::g;\n#[cfg(test)]\nmod tests { use crate::only_tests; }\n",
    );
    let here = vec!["x".to_string(), "y".to_string(), "z".to_string()];
    let paths = referenced_paths(&code, &here, false);
    let shown: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(shown, ["a::b", "a::c::D", "a::c::e", "x::g"], "{code}");
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    edges.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    assert!(circles_in(&edges).is_empty());
    edges.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(circles_in(&edges), [["a", "b", "c", "a"]]);
}
