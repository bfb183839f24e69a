//! `hvd-cluster completions SHELL` and `hvd-cluster man`, as a user's shell and `man` read
//! them: the bash script loaded by a real bash registers the completion and completes the
//! commands; the man page renders with `man -l`; a shell clap does not know is bad input.
//! The profile's JSON Schema against the types and the shipped profiles. (The README and the
//! guide's links: tests/guide_links.rs.)

use std::process::{Command, Output};

fn hvd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(args)
        .env(
            "HVD_CLUSTER_STATE_DIR",
            std::env::temp_dir().join("hvd-cli-docs-none"),
        )
        .output()
        .expect("run hvd-cluster")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("text")
}

#[test]
fn bash_loads_the_completions_and_completes_commands_and_options() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hvd-cluster.bash");
    std::fs::write(&script, stdout(&hvd(&["completions", "bash"]))).unwrap();
    // Load the script as bash-completion would, then ask its function what `hvd-cluster st`
    // and `hvd-cluster down --` complete to.
    let probe = r#"
        source "$1" || exit 1
        complete -p hvd-cluster || exit 1
        fn=$(complete -p hvd-cluster | sed -E 's/.*-F ([^ ]+).*/\1/')
        COMP_WORDS=(hvd-cluster st); COMP_CWORD=1; COMP_LINE='hvd-cluster st'; COMP_POINT=${#COMP_LINE}
        "$fn" hvd-cluster st hvd-cluster
        echo "commands: ${COMPREPLY[*]}"
        COMP_WORDS=(hvd-cluster down --); COMP_CWORD=2; COMP_LINE='hvd-cluster down --'; COMP_POINT=${#COMP_LINE}
        "$fn" hvd-cluster -- down
        echo "options: ${COMPREPLY[*]}"
    "#;
    let out = Command::new("bash")
        .args(["-c", probe, "probe"])
        .arg(&script)
        .output()
        .expect("bash");
    let said = stdout(&out);
    assert!(
        said.lines().any(|l| l.starts_with("complete ")
            && l.contains(" -F ")
            && l.ends_with(" hvd-cluster")),
        "{said}"
    );
    let commands = said
        .lines()
        .find_map(|l| l.strip_prefix("commands: "))
        .unwrap_or_default();
    let mut got: Vec<&str> = commands.split_whitespace().collect();
    got.sort();
    assert_eq!(got, ["stage", "start", "status", "stop"], "{said}");
    let options = said
        .lines()
        .find_map(|l| l.strip_prefix("options: "))
        .unwrap_or_default();
    assert!(
        options.contains("--cluster") && options.contains("--cloud"),
        "{said}"
    );
}

#[test]
fn every_shell_gets_a_script() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout(&hvd(&["completions", shell]));
        assert!(
            script.contains("hvd-cluster") && script.contains("ssh-config"),
            "{shell}: {}",
            &script[..script.len().min(400)]
        );
    }
}

#[test]
fn an_unknown_shell_is_bad_input() {
    let out = hvd(&["completions", "tcsh;rm -rf /"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid value") && err.contains("bash"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn the_man_page_renders_with_man() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("hvd-cluster.1");
    let roff = stdout(&hvd(&["man"]));
    std::fs::write(&page, &roff).unwrap();
    let out = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("man");
    let text = stdout(&out);
    for expected in [
        "NAME",
        "SYNOPSIS",
        "hvd-cluster",
        "SUBCOMMANDS",
        "completions",
        "down",
    ] {
        assert!(text.contains(expected), "no {expected} in:\n{text}");
    }
    // rendered, not the roff source
    assert!(!text.contains(".TH"), "{text}");
}

// ---- the profile's JSON Schema (`hvd-cluster schema`, profiles/profile.schema.json)

fn profiles_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles")
}

fn validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(profiles_dir().join("profile.schema.json"))
        .expect("profiles/profile.schema.json");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("the schema is JSON");
    jsonschema::validator_for(&schema).expect("a valid JSON Schema")
}

/// A TOML profile as the JSON document a schema checks (what taplo does).
fn as_json(toml_text: &str) -> serde_json::Value {
    let value: toml::Value = toml::from_str(toml_text).expect("TOML");
    serde_json::to_value(value).expect("JSON")
}

fn errors(v: &jsonschema::Validator, toml_text: &str) -> Vec<String> {
    v.iter_errors(&as_json(toml_text))
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect()
}

#[test]
fn the_shipped_schema_is_the_one_the_types_give() {
    let shipped = std::fs::read_to_string(profiles_dir().join("profile.schema.json")).unwrap();
    let generated = stdout(&hvd(&["schema"]));
    assert!(
        shipped == generated,
        "profiles/profile.schema.json is not what `hvd-cluster schema` prints: run\n  cargo run -- schema > profiles/profile.schema.json"
    );
    let schema: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert_eq!(schema["title"], "hvd-cluster profile");
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
}

#[test]
fn every_shipped_profile_names_the_schema_and_passes_it() {
    let v = validator();
    let mut seen = 0;
    for entry in std::fs::read_dir(profiles_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.lines().next(),
            Some("#:schema ./profile.schema.json"),
            "{}: its first line names the schema for taplo",
            path.display()
        );
        let errs = errors(&v, &text);
        assert!(errs.is_empty(), "{}: {errs:?}", path.display());
        seen += 1;
    }
    assert!(seen >= 8, "only {seen} profiles under profiles/");
}

#[test]
fn a_wrong_key_type_or_value_is_flagged() {
    let v = validator();
    let good = std::fs::read_to_string(profiles_dir().join("local.toml")).unwrap();
    assert!(errors(&v, &good).is_empty());
    let cases = [
        // a misspelt key in a table
        (
            "[workers]\n",
            "[workers]\nflavour = \"m1.small\"\n",
            "flavour",
        ),
        // a key at the top that no profile has
        ("name = ", "nmae = \"x\"\nname = ", "nmae"),
        // a number where text belongs, text where a number belongs
        ("count = ", "count = \"three\"\n#", "three"),
        // a value outside an enumeration
        ("provider = \"local\"", "provider = \"aws\"", "aws"),
        // a cluster name outside its grammar
        ("name = \"", "name = \"Bad_Name\"\n#", "Bad_Name"),
    ];
    for (anchor, replacement, shown) in cases {
        assert!(good.contains(anchor), "local.toml has no `{anchor}`");
        let bad = good.replacen(anchor, replacement, 1);
        let errs = errors(&v, &bad);
        assert!(
            errs.iter().any(|e| e.contains(shown)),
            "`{replacement}` was not flagged: {errs:?}"
        );
    }
}
