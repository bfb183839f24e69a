//! The README and the guide under `docs/` (an mdBook) as a reader follows them: every page in
//! `docs/SUMMARY.md`, every relative link and anchor resolving, the command list the same in
//! both, and a self-test that the checker can fail. CI checks these without mdbook.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files under `dir`, its folders included, in a stable order.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    let mut found = Vec::new();
    for path in entries {
        if path.is_dir() {
            found.extend(markdown_files(&path));
        } else if path.extension().and_then(|e| e.to_str()) == Some("md") {
            found.push(path);
        }
    }
    found
}

/// The text with every line of a fenced code block, its ``` lines included, made empty: the
/// line numbers stay as they were.
fn without_fences(text: &str) -> String {
    let mut inside = false;
    text.split('\n')
        .map(|line| {
            if line.trim_start().starts_with("```") {
                inside = !inside;
                ""
            } else if inside {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<&str>>()
        .join("\n")
}

/// Where `needle` first occurs in `hay` at or after `from`.
fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

/// How many backticks follow one another from `at` on.
fn backtick_run(bytes: &[u8], at: usize) -> usize {
    bytes[at..].iter().take_while(|&&b| b == b'`').count()
}

/// The text with every inline code span, its backticks included, blanked (line breaks kept).
/// A run of N backticks opens a span that the next run of exactly N backticks in the same
/// paragraph closes, across a line break too; a run that nothing closes is plain text, as in
/// CommonMark.
fn without_code_spans(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = backtick_run(bytes, i);
        let paragraph_end = find(bytes, i + run, b"\n\n").unwrap_or(bytes.len());
        let mut k = i + run;
        let mut close = None;
        while k < paragraph_end {
            if bytes[k] == b'`' {
                let n = backtick_run(bytes, k);
                if n == run {
                    close = Some(k + n);
                    break;
                }
                k += n;
            } else {
                k += 1;
            }
        }
        match close {
            Some(end) => {
                for b in &mut out[i..end] {
                    if *b != b'\n' {
                        *b = b' ';
                    }
                }
                i = end;
            }
            None => i += run,
        }
    }
    // Only whole characters between two backticks were blanked.
    String::from_utf8(out).expect("still UTF-8")
}

/// Whether the `]` at `close` ends a bracketed text: a `[` before it in the same paragraph,
/// the brackets between them balanced.
fn opens_before(bytes: &[u8], close: usize) -> bool {
    let mut depth = 0usize;
    let mut k = close;
    while k > 0 {
        k -= 1;
        match bytes[k] {
            b']' => depth += 1,
            b'[' if depth == 0 => return true,
            b'[' => depth -= 1,
            b'\n' if k > 0 && bytes[k - 1] == b'\n' => return false,
            _ => {}
        }
    }
    false
}

/// The `)` that ends a link target starting at `from`: parentheses inside it balanced, on the
/// same line.
fn closing_paren(bytes: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, &b) in bytes.iter().enumerate().skip(from) {
        match b {
            b'(' => depth += 1,
            b')' if depth == 0 => return Some(k),
            b')' => depth -= 1,
            b'\n' => return None,
            _ => {}
        }
    }
    None
}

/// A link in a Markdown file: the line it starts on (from 1) and its target as written.
#[derive(Debug, PartialEq, Eq)]
struct Link {
    line: usize,
    target: String,
}

/// Every inline link `[text](target)` and image `![alt](target)` of a Markdown text, outside
/// fenced code blocks and inline code spans. A title after the target (`"..."`) is dropped;
/// `<...>` around the target too.
fn links(markdown: &str) -> Vec<Link> {
    let text = without_code_spans(&without_fences(markdown));
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = find(bytes, from, b"](") {
        from = at + 2;
        if !opens_before(bytes, at) {
            continue;
        }
        let Some(close) = closing_paren(bytes, at + 2) else {
            continue;
        };
        let written = text[at + 2..close].trim();
        let target = match written.strip_prefix('<') {
            Some(rest) => rest.split('>').next().unwrap_or(""),
            None => written.split_whitespace().next().unwrap_or(""),
        };
        let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
        found.push(Link {
            line,
            target: target.to_string(),
        });
    }
    found
}

/// The anchor GitHub and mdBook give a heading: lowercase; letters, digits, `-` and `_` kept;
/// a space becomes `-`; everything else (backticks, `*`, punctuation) is dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c)
            } else if c == ' ' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The text of an ATX heading line (`## Title`, at most three spaces before it) without its
/// closing `#`s; `None` for any other line.
fn heading_text(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let level = rest.len() - rest.trim_start_matches('#').len();
    if level == 0 || level > 6 {
        return None;
    }
    let text = &rest[level..];
    if !(text.is_empty() || text.starts_with(' ') || text.starts_with('\t')) {
        return None;
    }
    let text = text.trim();
    let unclosed = text.trim_end_matches('#');
    if unclosed.is_empty() || unclosed.ends_with(' ') || unclosed.ends_with('\t') {
        Some(unclosed.trim_end())
    } else {
        Some(text)
    }
}

/// The anchors of a Markdown text's headings (outside fenced code blocks); a heading seen
/// before gets `-1`, `-2`, ... after its anchor, as on GitHub and in mdBook.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut found = BTreeSet::new();
    let visible = without_fences(markdown);
    for line in visible.lines() {
        let Some(text) = heading_text(line) else {
            continue;
        };
        let base = anchor(text);
        let times = seen.entry(base.clone()).or_insert(0);
        found.insert(if *times == 0 {
            base
        } else {
            format!("{base}-{times}")
        });
        *times += 1;
    }
    found
}

/// `path` with its `.` and `..` taken away, without asking the file system.
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with the relative links of the Markdown file `file`, whose text is `text`
/// (handed in, so that a test can check a text of its own), each as `file:line: target (why)`.
/// A link's path is taken from the file's folder (an empty one is the file itself) and must
/// name something inside the repository `root`; a `#fragment` on a Markdown file must be
/// the anchor of one of its headings. `http://`, `https://` and `mailto:` links are left
/// alone.
fn broken_links(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let root = normalized(root);
    let shown = file
        .strip_prefix(&root)
        .unwrap_or(file)
        .display()
        .to_string();
    let folder = file.parent().unwrap_or(&root);
    let mut broken = Vec::new();
    for Link { line, target } in links(text) {
        if ["http://", "https://", "mailto:"]
            .iter()
            .any(|scheme| target.starts_with(scheme))
        {
            continue;
        }
        let mut say = |why: String| broken.push(format!("{shown}:{line}: {target} ({why})"));
        if target.is_empty() {
            say("an empty target".to_string());
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            normalized(file)
        } else {
            normalized(&folder.join(path))
        };
        if !resolved.starts_with(&root) {
            say("outside the repository".to_string());
            continue;
        }
        if !path.is_empty() && !resolved.exists() {
            say("no such file".to_string());
            continue;
        }
        let Some(fragment) = fragment else {
            continue;
        };
        if resolved.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let headings = if path.is_empty() {
            anchors(text)
        } else {
            match std::fs::read_to_string(&resolved) {
                Ok(other) => anchors(&other),
                Err(e) => {
                    say(format!("cannot be read: {e}"));
                    continue;
                }
            }
        };
        if !headings.contains(fragment) {
            say(format!("no heading with the anchor `{fragment}`"));
        }
    }
    broken
}

#[test]
fn every_guide_page_is_in_the_summary() {
    let root = repo_root();
    let docs = root.join("docs");
    let summary_file = docs.join("SUMMARY.md");
    let summary = std::fs::read_to_string(&summary_file).expect("docs/SUMMARY.md");
    let listed = links(&summary);
    let mut problems = Vec::new();
    let mut times: BTreeMap<PathBuf, usize> = BTreeMap::new();
    for Link { line, target } in &listed {
        let page = normalized(&docs.join(target.split('#').next().unwrap_or("")));
        if !page.is_file() {
            problems.push(format!("docs/SUMMARY.md:{line}: {target} (no such file)"));
        }
        *times.entry(page).or_insert(0) += 1;
    }
    let first = listed.first().map(|l| l.target.as_str());
    if first != Some("guide/introduction.md") {
        problems.push(format!(
            "docs/SUMMARY.md: the first entry is {first:?}, not guide/introduction.md"
        ));
    }
    let pages = markdown_files(&docs);
    for page in &pages {
        if *page == summary_file {
            continue;
        }
        let shown = page
            .strip_prefix(&root)
            .unwrap_or(page)
            .display()
            .to_string();
        match times.get(&normalized(page)).copied().unwrap_or(0) {
            1 => {}
            0 => problems.push(format!("{shown}: not in docs/SUMMARY.md")),
            n => problems.push(format!("{shown}: {n} times in docs/SUMMARY.md")),
        }
    }
    assert!(pages.len() >= 10, "only {} pages under docs/", pages.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn links_in_readme_and_guide_resolve() {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    files.extend(markdown_files(&root.join("docs")));
    let mut broken = Vec::new();
    let mut seen = 0;
    for file in &files {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        seen += links(&text).len();
        broken.extend(broken_links(&root, file, &text));
    }
    // The README and the guide link to one another on every page: a checker that finds few
    // links is not looking.
    assert!(seen >= 50, "only {seen} links in README.md and docs/");
    assert!(
        broken.is_empty(),
        "{} broken link(s) in README.md and docs/:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_link_checker_finds_links_and_flags_broken_ones() {
    let root = repo_root();
    let file = root.join("docs/guide/link-checker-self-test.md");
    let markdown = r#"# A heading

```sh
[fenced](nowhere-fenced.md)
```

Not a link: `[spanned](nowhere-spanned.md)`, nor ``a `[double](nowhere-double.md)` over
two lines``.

A lone ` backtick, then [a good link](#a-heading) all the same.

To [the README](../../README.md#commands), [a bad anchor](#no-such-heading), and
[another page's bad anchor](../../README.md#no-such-part), [a missing page](no-such-page.md),
![a missing image](../../no-such-image.png) and [a way out](../../../outside.md);
[the web](https://example.org/nowhere.md) is left alone.

## A heading
"#;
    let found = links(markdown);
    let got: Vec<(usize, &str)> = found.iter().map(|l| (l.line, l.target.as_str())).collect();
    let expected: [(usize, &str); 8] = [
        (10, "#a-heading"),
        (12, "../../README.md#commands"),
        (12, "#no-such-heading"),
        (13, "../../README.md#no-such-part"),
        (13, "no-such-page.md"),
        (14, "../../no-such-image.png"),
        (14, "../../../outside.md"),
        (15, "https://example.org/nowhere.md"),
    ];
    assert_eq!(got, expected);
    let at = "docs/guide/link-checker-self-test.md";
    assert_eq!(
        broken_links(&root, &file, markdown),
        [
            format!("{at}:12: #no-such-heading (no heading with the anchor `no-such-heading`)"),
            format!(
                "{at}:13: ../../README.md#no-such-part (no heading with the anchor `no-such-part`)"
            ),
            format!("{at}:13: no-such-page.md (no such file)"),
            format!("{at}:14: ../../no-such-image.png (no such file)"),
            format!("{at}:14: ../../../outside.md (outside the repository)"),
        ]
    );
    // the second `# A heading` is `a-heading-1`
    let both = anchors(markdown);
    assert!(
        both.contains("a-heading") && both.contains("a-heading-1"),
        "{both:?}"
    );

    assert_eq!(
        anchor("GPUs: the CUDA image and the GPU runtime"),
        "gpus-the-cuda-image-and-the-gpu-runtime"
    );
    assert_eq!(
        anchor("Benchmarks (`cargo bench`)"),
        "benchmarks-cargo-bench"
    );
    assert_eq!(anchor("Stop, start & autostop"), "stop-start--autostop");
    assert_eq!(anchor("The tutorials' commands"), "the-tutorials-commands");
    assert_eq!(anchor("Über *this* snake_case"), "über-this-snake_case");
    assert_eq!(heading_text("## Exit codes ##"), Some("Exit codes"));
    assert_eq!(heading_text("# C#"), Some("C#"));
    assert_eq!(heading_text("#:schema ./profile.schema.json"), None);
    assert_eq!(heading_text("    # indented: code"), None);
}

/// The lines of the first fenced code block after the line `heading`.
fn block_after(markdown: &str, heading: &str) -> Option<String> {
    let mut lines = markdown.lines().skip_while(|l| l.trim_end() != heading);
    lines.next()?;
    let mut lines = lines.skip_while(|l| !l.trim_start().starts_with("```"));
    lines.next()?;
    let block: Vec<&str> = lines
        .take_while(|l| !l.trim_start().starts_with("```"))
        .collect();
    Some(block.join("\n"))
}

#[test]
fn the_command_list_is_the_same_in_readme_and_guide() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let guide = std::fs::read_to_string(root.join("docs/guide/commands.md"))
        .expect("docs/guide/commands.md");
    let in_readme = block_after(&readme, "## Commands").expect("README.md: ## Commands, a block");
    let in_guide = block_after(&guide, "## The command list")
        .expect("docs/guide/commands.md: ## The command list, a block");
    assert!(in_readme.lines().count() >= 20, "{in_readme}");
    assert!(
        in_readme == in_guide,
        "the command list of README.md (## Commands) and of docs/guide/commands.md (## The \
         command list) differ: make them the same"
    );
}
