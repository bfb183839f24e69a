//! Hostile and malformed input: `--cluster` values and profiles that try to reach outside the
//! state folder, run shell text, flood or fake the terminal. Each must exit 2 with the
//! argument or field named, and leave everything as it was: no file outside the state folder
//! touched (contents and modes), no other cluster's folder or key touched, nothing executed
//! (a canary file stays absent), no connection to the cloud (a listener this test owns, named
//! by clouds.yaml and OS_AUTH_URL, accepts nothing). No cloud, Docker or network needed (the
//! look at an absent local cluster asks Docker when there is one, and holds without it).

use std::collections::BTreeMap;
use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_hvd-cluster");

/// A temp folder holding the state root, a sibling folder outside it, another cluster's
/// folder with its key, a canary path, and a cloud endpoint that must never be called.
struct Sandbox {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    state: PathBuf,
    sibling: PathBuf,
    canary: PathBuf,
    cloud: TcpListener,
    clouds_yaml: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let state = root.join("state");
        let sibling = root.join("sibling");
        fs::create_dir_all(&sibling).unwrap();
        fs::write(sibling.join("data"), "precious\n").unwrap();
        fs::set_permissions(&sibling, fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(sibling.join("data"), fs::Permissions::from_mode(0o640)).unwrap();
        // Another cluster with its private key: it must never be read through `..`, changed or removed.
        let other = state.join("other");
        fs::create_dir_all(&other).unwrap();
        fs::write(
            other.join("id_ed25519"),
            "-----BEGIN OPENSSH PRIVATE KEY-----\n",
        )
        .unwrap();
        fs::write(other.join("state.json"), "{\"cluster\": \"other\"}").unwrap();
        fs::set_permissions(&other, fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(other.join("id_ed25519"), fs::Permissions::from_mode(0o600)).unwrap();
        // A valid name whose folder is a link out of the state folder.
        std::os::unix::fs::symlink(&sibling, state.join("linked")).unwrap();
        fs::create_dir_all(root.join("home")).unwrap();

        let cloud = TcpListener::bind("127.0.0.1:0").unwrap();
        cloud.set_nonblocking(true).unwrap();
        let port = cloud.local_addr().unwrap().port();
        let clouds_yaml = root.join("clouds.yaml");
        fs::write(
            &clouds_yaml,
            format!(
                "clouds:\n  trap:\n    auth:\n      auth_url: http://127.0.0.1:{port}/v3\n      username: u\n      password: p\n      project_name: p\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n"
            ),
        )
        .unwrap();
        Sandbox {
            _tmp: tmp,
            state,
            sibling,
            canary: root.join("canary"),
            cloud,
            clouds_yaml,
            root,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(&self.state, true).args(args).output().unwrap()
    }

    /// The binary with a clean environment, `--state-dir state`, and the trap cloud selected
    /// (`cloud`) or no cloud at all (then a cluster without state is looked for locally).
    fn command(&self, state: &Path, cloud: bool) -> Command {
        let port = self.cloud.local_addr().unwrap().port();
        let mut cmd = Command::new(BIN);
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy().into_owned();
            if key.starts_with("OS_") || key.starts_with("HVD_CLUSTER") || key == "XDG_STATE_HOME" {
                cmd.env_remove(&key);
            }
        }
        cmd.env("HOME", self.root.join("home"));
        if cloud {
            cmd.env("OS_CLIENT_CONFIG_FILE", &self.clouds_yaml)
                .env("OS_CLOUD", "trap")
                .env("OS_AUTH_URL", format!("http://127.0.0.1:{port}/v3"));
        }
        cmd.current_dir(&self.root).arg("--state-dir").arg(state);
        cmd
    }

    /// Every path under the sandbox with its kind, mode and contents (links not followed),
    /// but for the profiles folder (megabytes of hostile text, read 100 times over).
    fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        walk(&self.root, &self.root, &mut out);
        out.retain(|path, _| !path.starts_with("profiles/"));
        out
    }

    fn assert_untouched(&self, before: &BTreeMap<PathBuf, String>, case: &str) {
        let after = self.snapshot();
        assert_eq!(&after, before, "{case}: the sandbox changed");
        assert!(!self.canary.exists(), "{case}: shell text was executed");
        match self.cloud.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("{case}: the cloud was contacted: {other:?}"),
        }
    }

    /// A profile file (not in the state folder) with `text`.
    fn profile(&self, n: usize, text: &str) -> PathBuf {
        let dir = self.root.join("profiles");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("p{n}.toml"));
        fs::write(&path, text).unwrap();
        path
    }
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let meta = fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o7777;
        let rel = path.strip_prefix(base).unwrap().to_path_buf();
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).unwrap();
            out.insert(rel, format!("link {mode:o} -> {}", target.display()));
        } else if meta.is_dir() {
            out.insert(rel.clone(), format!("dir {mode:o}"));
            if rel != Path::new("profiles") {
                walk(base, &path, out);
            }
        } else {
            let body = fs::read(&path).unwrap();
            out.insert(
                rel,
                format!("file {mode:o} {}", String::from_utf8_lossy(&body)),
            );
        }
    }
}

/// What every refusal must look like on stderr: exit 2, short, one error, nothing raw.
fn assert_refused(out: &Output, case: &str, must_name: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{case}: {stderr}");
    assert!(
        stderr.contains(must_name),
        "{case}: `{must_name}` not named in {stderr:?}"
    );
    assert!(
        stderr.len() < 1200,
        "{case}: {} bytes of error",
        stderr.len()
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "{case}: raw escape in {stderr:?}"
    );
    assert!(stderr.lines().count() <= 3, "{case}: {stderr:?}");
    assert!(
        out.stdout.is_empty(),
        "{case}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn hostile_names(sandbox: &Sandbox) -> Vec<(String, String)> {
    let canary = sandbox.canary.display().to_string();
    let named = |label: &str, value: String| (label.to_string(), value);
    vec![
        named("empty", String::new()),
        named("dot", ".".into()),
        named("dot-dot", "..".into()),
        named("parent then other", "../state/other".into()),
        named("other's folder via ..", "x/../other".into()),
        named("a/../b", "a/../b".into()),
        named("relative path", "../sibling".into()),
        named("absolute path", sandbox.sibling.display().to_string()),
        named("absolute root", "/".into()),
        named("trailing slash", "other/".into()),
        named("dot slash", "./other".into()),
        named("command substitution", format!("$(touch {canary})")),
        named("semicolon", format!("a;touch {canary}")),
        named("backticks", format!("`touch {canary}`")),
        named("newline", format!("a\ntouch {canary}")),
        named("ansi escape", "\u{1b}[31mred\u{1b}[0m".into()),
        named("terminal title", "\u{1b}]0;pwned\u{7}".into()),
        // One argument may not exceed 128 KiB on Linux; profiles carry the 5 MB case.
        named("100 KB", "a".repeat(100 * 1024)),
        named("leading dash", "-rf".into()),
        named("option lookalike", "--help".into()),
        named("cyrillic lookalike", "dеmo".into()),
        named("fullwidth lookalike", "ｄemo".into()),
        named("uppercase", "Other".into()),
        named("glob", "*".into()),
        named("41 characters", "a".repeat(41)),
    ]
}

#[test]
fn status_stop_and_down_refuse_every_hostile_cluster_name_and_touch_nothing() {
    let sandbox = Sandbox::new();
    let before = sandbox.snapshot();
    for (label, name) in hostile_names(&sandbox) {
        for command in ["status", "stop", "down"] {
            let arg = format!("--cluster={name}");
            let out = sandbox.run(&[command, &arg]);
            let case = format!("{command} --cluster <{label}>");
            assert_refused(&out, &case, "--cluster");
            sandbox.assert_untouched(&before, &case);
        }
    }
    // The same with `--cloud`, which must not let the name through either.
    let out = sandbox.run(&["down", "--cluster=..", "--cloud", "trap"]);
    assert_refused(&out, "down --cluster .. --cloud trap", "--cluster");
    sandbox.assert_untouched(&before, "--cloud");
}

#[test]
fn a_valid_name_whose_folder_is_a_symlink_is_not_followed() {
    let sandbox = Sandbox::new();
    let before = sandbox.snapshot();
    for command in ["status", "stop", "down"] {
        let out = sandbox.run(&[command, "--cluster", "linked"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {stderr}");
        assert!(stderr.contains("not a plain folder"), "{stderr}");
        sandbox.assert_untouched(&before, &format!("{command} --cluster linked"));
    }
}

#[test]
fn looking_at_a_valid_but_absent_cluster_creates_no_folder() {
    // No cloud configured: a cluster without state is looked for on the local provider
    // (Docker). With Docker they find nothing and exit 0; without it they fail (exit 1).
    // Either way nothing may be left behind: no cluster folder, not even the state root.
    let sandbox = Sandbox::new();
    let state = sandbox.root.join("fresh-root");
    let local = sandbox.profile(
        0,
        "name = \"absent\"\nprovider = \"local\"\n[master]\n[workers]\ncount = 1\n",
    );
    let local = local.to_str().unwrap();
    let before = sandbox.snapshot();
    for args in [
        vec!["status", "--cluster", "absent"],
        vec!["status", "--cluster", "absent", "--json"],
        vec!["down", "--cluster", "absent"],
        vec!["stop", "--cluster", "absent"],
        vec!["status", local],
        vec!["plan", local],
        vec!["down", local],
    ] {
        let out = sandbox.command(&state, false).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let case = args.join(" ");
        assert!(
            matches!(out.status.code(), Some(0 | 1 | 10)),
            "{case}: {stderr}"
        );
        assert!(!state.exists(), "{case} created {}", state.display());
        sandbox.assert_untouched(&before, &case);
    }
    // Commands that need the cluster's key say where it should be, and make no folder.
    for command in ["check", "ssh-config"] {
        let out = sandbox
            .command(&state, false)
            .args([command, local])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {stderr}");
        assert!(stderr.contains("has no folder on this machine"), "{stderr}");
        assert!(!state.exists(), "{command} created {}", state.display());
        sandbox.assert_untouched(&before, command);
    }
}

#[test]
fn a_state_folder_ssh_config_cannot_carry_is_refused_before_anything_happens() {
    let sandbox = Sandbox::new();
    let profile = sandbox.profile(0, BASE);
    let profile = profile.to_str().unwrap();
    let before = sandbox.snapshot();
    for bad in [
        "state \"quoted\"",
        "state\nProxyCommand touch x",
        "state\\x",
    ] {
        let state = sandbox.root.join(bad);
        for command in ["up", "check", "ssh-config"] {
            let out = sandbox
                .command(&state, true)
                .args([command, profile])
                .output()
                .unwrap();
            let case = format!("{command} with --state-dir {bad:?}");
            assert_refused(&out, &case, "--state-dir");
            sandbox.assert_untouched(&before, &case);
        }
    }
}

const BASE: &str = r#"name = "demo"
cloud = "trap"

[master]
flavor = "m1.small"
image = "debian"

[workers]
count = 2
flavor = "m1.small"

[network]
cidr = "10.42.0.0/24"
external_network = "public"
"#;

/// (label, profile text, the field the error must name).
fn hostile_profiles(sandbox: &Sandbox) -> Vec<(String, String, String)> {
    let canary = sandbox.canary.display().to_string();
    let huge = "a".repeat(5 * 1024 * 1024);
    let with = |from: &str, to: &str| BASE.replacen(from, to, 1);
    let name = |value: &str| with("name = \"demo\"", &format!("name = {value}"));
    let image = |value: &str| {
        with(
            "[network]",
            &format!("[container]\nimage = {value}\n\n[network]"),
        )
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "name: command substitution",
            name(&format!("\"$(touch {canary})\"")),
            "name",
        ),
        ("name: dot-dot", name("\"..\""), "name"),
        ("name: a/../b", name("\"a/../b\""), "name"),
        (
            "name: absolute path",
            name(&format!("\"{}\"", sandbox.sibling.display())),
            "name",
        ),
        ("name: newline", name("\"a\\nb\""), "name"),
        ("name: ansi escape", name("\"\\u001b[31mred\""), "name"),
        ("name: 5 MB", name(&format!("\"{huge}\"")), "name"),
        ("name: leading dash", name("\"-rf\""), "name"),
        ("name: cyrillic lookalike", name("\"dеmo\""), "name"),
        ("name: empty", name("\"\""), "name"),
        ("name: a number", name("42"), "name"),
        (
            "image: semicolon",
            image(&format!("\"img; touch {canary}\"")),
            "container.image",
        ),
        (
            "image: command substitution",
            image(&format!("\"$(touch {canary})\"")),
            "container.image",
        ),
        (
            "image: backticks",
            image(&format!("\"`touch {canary}`\"")),
            "container.image",
        ),
        (
            "image: option",
            image("\"--privileged\""),
            "container.image",
        ),
        (
            "image: space",
            image("\"img -v /:/host\""),
            "container.image",
        ),
        (
            "image: template syntax",
            image("\"img:{{ x }}\""),
            "container.image",
        ),
        (
            "image: newline",
            image("\"img\\ntouch x\""),
            "container.image",
        ),
        (
            "image: 5 MB",
            image(&format!("\"{huge}\"")),
            "container.image",
        ),
        (
            "ssh_user: shell",
            with(
                "[master]",
                &format!("ssh_user = \"root;touch {canary}\"\n[master]"),
            ),
            "ssh_user",
        ),
        (
            "ssh_user: option",
            with("[master]", "ssh_user = \"-oProxyCommand=id\"\n[master]"),
            "ssh_user",
        ),
        (
            "interface: unknown",
            with("[master]", "interface = \"publik\"\n[master]"),
            "interface",
        ),
        (
            "region: terminal title",
            with("[master]", "region = \"\\u001b]0;pwned\\u0007\"\n[master]"),
            "region",
        ),
        (
            "flavor: newline",
            with("flavor = \"m1.small\"", "flavor = \"m1\\nsmall\""),
            "master.flavor",
        ),
        (
            "cidr: whole internet",
            with("10.42.0.0/24", "0.0.0.0/0"),
            "network.cidr",
        ),
        (
            "cidr: too small",
            with("10.42.0.0/24", "10.42.0.0/30"),
            "network.cidr",
        ),
        (
            "cidr: loopback",
            with("10.42.0.0/24", "127.0.0.0/24"),
            "network.cidr",
        ),
        (
            "cidr: not a cidr",
            with("10.42.0.0/24", "10.42.0.0/24; id"),
            "network.cidr",
        ),
        ("missing [master]", with("[master]", "[mastr]"), "mastr"),
        (
            "missing [master] table",
            BASE.replace("[master]\nflavor = \"m1.small\"\nimage = \"debian\"\n", ""),
            "master",
        ),
        (
            "huge unknown key",
            with("[master]", &format!("{huge} = 1\n[master]")),
            "unknown field",
        ),
    ];
    cases
        .into_iter()
        .map(|(l, t, f)| (l.to_string(), t, f.to_string()))
        .collect()
}

#[test]
fn validate_status_stop_start_down_and_bake_refuse_hostile_profiles_with_the_field_named() {
    let sandbox = Sandbox::new();
    let cases = hostile_profiles(&sandbox);
    let files: Vec<PathBuf> = (0..cases.len())
        .map(|i| sandbox.profile(i, &cases[i].1))
        .collect();
    let before = sandbox.snapshot();
    for ((label, _, field), file) in cases.iter().zip(&files) {
        let file = file.to_str().unwrap();
        for command in ["validate", "status", "stop", "start", "down", "bake"] {
            let out = sandbox.run(&[command, file]);
            let case = format!("{command} <{label}>");
            assert_refused(&out, &case, field);
            let stderr = String::from_utf8_lossy(&out.stderr);
            // file:line:col, like a compiler.
            let place = stderr
                .split_once(".toml:")
                .map(|(_, rest)| rest.split(':').take(2).all(|n| n.parse::<u32>().is_ok()));
            assert_eq!(place, Some(true), "{case}: no line:col in {stderr:?}");
            sandbox.assert_untouched(&before, &case);
        }
    }
}

#[test]
fn the_base_profile_is_valid_so_each_case_fails_for_its_own_reason() {
    let sandbox = Sandbox::new();
    let file = sandbox.profile(0, BASE);
    let before = sandbox.snapshot();
    let out = sandbox.run(&["validate", file.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sandbox.assert_untouched(&before, "validate BASE");
}

/// `up` of a local profile with `var` set to each of `values` (given the sandbox's canary
/// path): refused by the variable's own grammar (exit 2, the variable named) before any file
/// is written, any image built or any container made.
fn up_refuses_env_before_anything_happens(
    var: &str,
    values: impl Fn(&str) -> Vec<std::ffi::OsString>,
) {
    let sandbox = Sandbox::new();
    let canary = sandbox.canary.display().to_string();
    let profile = sandbox.profile(
        0,
        "name = \"demo\"\nprovider = \"local\"\n\n[master]\n\n[workers]\ncount = 1\n",
    );
    let profile = profile.to_str().unwrap();
    let before = sandbox.snapshot();
    for bad in values(&canary) {
        let out = sandbox
            .command(&sandbox.state, false)
            .env(var, &bad)
            .args(["up", profile])
            .output()
            .unwrap();
        let shown = bad.to_string_lossy();
        let case = format!(
            "up with {var}={:?}",
            shown.chars().take(40).collect::<String>()
        );
        assert_refused(&out, &case, var);
        sandbox.assert_untouched(&before, &case);
    }
}

/// The local nodes' CPU share comes from the environment and reaches `docker run --cpus`:
/// checked by its own grammar before anything happens.
#[test]
fn a_hostile_local_cpu_share_is_refused_before_anything_happens() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    up_refuses_env_before_anything_happens("HVD_CLUSTER_LOCAL_CPUS", |canary| {
        vec![
            OsString::from("-1"),
            OsString::from("0"),
            OsString::from("1e3"),
            OsString::from(format!("0.25; touch {canary}")),
            OsString::from("0.25 --privileged"),
            OsString::from("9".repeat(4096)),
            OsString::from("\u{1b}[31m1"),
            OsString::from_vec(b"0.5\xff".to_vec()),
        ]
    });
}

/// How long nodes get to answer SSH comes from the environment when `--ssh-wait` is not given:
/// checked by its own grammar before anything happens.
#[test]
fn a_hostile_ssh_wait_is_refused_before_anything_happens() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    up_refuses_env_before_anything_happens("HVD_CLUSTER_SSH_WAIT", |canary| {
        vec![
            OsString::from("9"),
            OsString::from("7201"),
            OsString::from("-600"),
            OsString::from("600s"),
            OsString::from(format!("600; touch {canary}")),
            OsString::from("600\n700"),
            OsString::from("9".repeat(4096)),
            OsString::from("\u{1b}[31m600"),
            OsString::from_vec(b"60\xff".to_vec()),
        ]
    });
}

/// The Debian mirror for the image builds comes from the environment: checked by its own
/// grammar before anything happens (it would reach apt sources and a `sed` replacement in the
/// build script).
#[test]
fn a_hostile_apt_mirror_is_refused_before_anything_happens() {
    up_refuses_env_before_anything_happens("HVD_CLUSTER_APT_MIRROR", |canary| {
        [
            format!("http://deb.debian.org/debian|touch {canary}"),
            format!("http://x/$(touch {canary})"),
            "http://x/debian\nURIs: http://evil/debian".to_string(),
            "ftp://deb.debian.org/debian".to_string(),
            "http://x/../../etc".to_string(),
            format!("http://x/{}", "a".repeat(4096)),
            "http://x/\u{1b}[31mred".to_string(),
        ]
        .into_iter()
        .map(Into::into)
        .collect()
    });
}

/// `push`, `pull`, `stage` and `tensorboard`: a path on the cluster outside /shared, or one
/// that climbs, runs shell text or fakes the terminal, and a local path that is missing, a link to nothing
/// or a loop of links, are refused by their own grammar (exit 2, named) before the profile,
/// the cloud or a node is read or asked anything.
#[test]
fn push_pull_stage_and_tensorboard_refuse_hostile_paths_before_anything_happens() {
    let sandbox = Sandbox::new();
    let canary = sandbox.canary.display().to_string();
    let profile = sandbox.profile(0, BASE);
    let profile = profile.to_str().unwrap();
    let data = sandbox.root.join("data");
    fs::create_dir_all(&data).unwrap();
    fs::write(data.join("x"), "x").unwrap();
    std::os::unix::fs::symlink("loop", sandbox.root.join("loop")).unwrap();
    std::os::unix::fs::symlink("nowhere", sandbox.root.join("dangling")).unwrap();
    let data = data.to_str().unwrap();
    let before = sandbox.snapshot();
    let remotes = [
        "/etc/passwd".to_string(),
        "/shared".into(),
        "/shared/".into(),
        "/shared/../etc".into(),
        "/shared/a/../../root".into(),
        "../x".into(),
        "a//b".into(),
        "/sharedx/y".into(),
        format!("/shared/$(touch {canary})\nx"),
        "/shared/\u{1b}]0;pwned\u{7}".into(),
        format!("/shared/{}", "a\n".repeat(50_000)),
    ];
    for remote in &remotes {
        let case = format!("push to {:?}", remote.chars().take(40).collect::<String>());
        assert_refused(&sandbox.run(&["push", profile, data, remote]), &case, "`");
        sandbox.assert_untouched(&before, &case);
        let case = format!("pull of {:?}", remote.chars().take(40).collect::<String>());
        assert_refused(&sandbox.run(&["pull", profile, remote, data]), &case, "`");
        sandbox.assert_untouched(&before, &case);
        let case = format!("stage of {:?}", remote.chars().take(40).collect::<String>());
        assert_refused(&sandbox.run(&["stage", profile, remote]), &case, "`");
        sandbox.assert_untouched(&before, &case);
        let case = format!(
            "tensorboard over {:?}",
            remote.chars().take(40).collect::<String>()
        );
        assert_refused(&sandbox.run(&["tensorboard", profile, remote]), &case, "`");
        sandbox.assert_untouched(&before, &case);
    }
    for (local, says) in [
        ("loop", "loop"),
        ("dangling", "a link to nothing"),
        ("missing", "no such file or folder"),
    ] {
        let path = sandbox.root.join(local);
        let case = format!("push of {local}");
        let out = sandbox.run(&["push", profile, path.to_str().unwrap(), "/shared/x"]);
        assert_refused(&out, &case, says);
        sandbox.assert_untouched(&before, &case);
    }
}

#[test]
fn bake_refuses_a_hostile_image_name_to_make_or_delete_before_anything_happens() {
    let sandbox = Sandbox::new();
    let canary = sandbox.canary.display().to_string();
    let profile = sandbox.profile(0, BASE);
    let profile = profile.to_str().unwrap();
    let before = sandbox.snapshot();
    for name in [
        String::new(),
        "-rf".into(),
        "../other-project".into(),
        format!("x;touch {canary}"),
        "a\nb".into(),
        "\u{1b}]0;pwned\u{7}".into(),
        "x".repeat(101),
    ] {
        let case = format!(
            "bake --name {:?}",
            name.chars().take(40).collect::<String>()
        );
        for flag in ["--name", "--delete"] {
            let arg = format!("{flag}={name}");
            let case = format!("{case} ({flag})");
            assert_refused(
                &sandbox.run(&["bake", profile, &arg]),
                &case,
                "cannot name a bake",
            );
            sandbox.assert_untouched(&before, &case);
        }
    }
}
