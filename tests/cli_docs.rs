//! `hvd-cluster completions SHELL` and `hvd-cluster man`, as a user's shell and `man` read
//! them: the bash script loaded by a real bash registers the completion and completes the
//! commands; the man page renders with `man -l`; a shell clap does not know is bad input.

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
    assert_eq!(got, ["start", "status", "stop"], "{said}");
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
