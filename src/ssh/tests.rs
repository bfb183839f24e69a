use super::*;

fn hosts() -> Vec<Host> {
    vec![
        Host {
            alias: "c-master".into(),
            address: "203.0.113.5".into(),
            user: "debian".into(),
            jump: None,
        },
        Host {
            alias: "c-worker-1".into(),
            address: "10.42.0.7".into(),
            user: "debian".into(),
            jump: Some("c-master".into()),
        },
    ]
}

#[test]
fn config_routes_workers_through_the_master() {
    let text = render_config(Path::new("/state/c"), &hosts()).unwrap();
    assert!(text.contains("Host c-master\n  HostName 203.0.113.5\n  User debian\n  IdentityFile \"/state/c/id_ed25519\""), "{text}");
    assert!(text.contains("UserKnownHostsFile \"/state/c/known_hosts\""));
    let worker = text.split("Host c-worker-1").nth(1).unwrap();
    assert!(worker.contains("ProxyJump c-master"));
    assert!(!text
        .split("Host c-worker-1")
        .next()
        .unwrap()
        .contains("ProxyJump"));
}

#[test]
fn config_paths_are_quoted_for_ssh_config() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("my state %d #1").join("c");
    let text = render_config(&dir, &hosts()).unwrap();
    let shown = dir.display().to_string().replace('%', "%%");
    assert!(
        text.contains(&format!("  IdentityFile \"{shown}/id_ed25519\"\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("  UserKnownHostsFile \"{shown}/known_hosts\"\n")),
        "{text}"
    );
    // ssh itself reads the paths back whole, spaces, `%` and `#` included.
    let config = state.path().join("ssh_config");
    std::fs::write(&config, &text).unwrap();
    let out = std::process::Command::new("ssh")
        .arg("-G")
        .arg("-F")
        .arg(&config)
        .arg("c-worker-1")
        .output()
        .expect("ssh (openssh-client) is installed");
    let resolved = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{resolved}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `ssh -G` prints IdentityFile before expanding `%` tokens (it expands them when it
    // loads the key, with the same code that expanded UserKnownHostsFile below).
    assert!(
        resolved.contains(&format!("identityfile {shown}/id_ed25519\n")),
        "{resolved}"
    );
    assert!(
        resolved.contains(&format!(
            "userknownhostsfile {}/known_hosts\n",
            dir.display()
        )),
        "{resolved}"
    );
    assert!(resolved.contains("hostname 10.42.0.7\n"), "{resolved}");
    assert!(resolved.contains("proxyjump c-master\n"), "{resolved}");

    // A relative folder becomes absolute (ssh would read it from the home folder).
    let relative = render_config(Path::new("rel/c"), &hosts()).unwrap();
    let cwd = std::env::current_dir().unwrap();
    assert!(
        relative.contains(&format!(
            "IdentityFile \"{}/rel/c/id_ed25519\"",
            cwd.display()
        )),
        "{relative}"
    );
}

#[test]
fn config_refuses_what_it_cannot_carry() {
    for dir in [
        "/state/a\"b/c",
        "/state/a\nProxyCommand touch x/c",
        "/state/a\\b/c",
        "/state/${HOME}/c",
        "/state/a\u{1b}[2J/c",
    ] {
        let e = render_config(Path::new(dir), &hosts())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot carry") && e.contains("--state-dir"),
            "{e}"
        );
        assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e:?}");
    }
    let with = |f: &dyn Fn(&mut Host)| {
        let mut h = hosts();
        f(&mut h[1]);
        render_config(Path::new("/state/c"), &h)
    };
    assert!(with(&|h| h.alias = "c-worker-1\n  ProxyCommand id".into()).is_err());
    assert!(with(&|h| h.jump = Some("x -oProxyCommand=id".into())).is_err());
    assert!(with(&|h| h.address = "10.0.0.1 -oProxyCommand=id".into()).is_err());
    assert!(with(&|h| h.user = "root\nHost *".into()).is_err());
}

#[test]
fn ssh_errors_become_reasons() {
    assert_eq!(
        why_no_ssh("ssh: connect to host 10.0.0.5 port 22: Connection refused"),
        "the address answers but sshd is not listening yet"
    );
    assert_eq!(
        why_no_ssh("debian@1.2.3.4: Permission denied (publickey)."),
        "sshd refuses the cluster key (not installed yet, or wrong ssh_user)"
    );
    assert_eq!(
        why_no_ssh("ssh: connect to host x port 22: No route to host"),
        "no route to the address yet"
    );
    assert_eq!(why_no_ssh("weird\nlast words\n"), "last words");
}

#[test]
fn quoting() {
    assert_eq!(shell_quote("it's"), "'it'\\''s'");
}
