//! What the end-to-end tests share: running the hvd-cluster binary, and an elastic training
//! job (examples/elastic_train.py) whose own output says how big the world is.
#![allow(dead_code)] // each test binary uses its part

pub mod bench_report;
pub mod cloud;
pub mod container_key;
pub mod gpu_repo;
pub mod imagenet;
pub mod interrupt;
pub mod jobs;
pub mod jupyter;
pub mod mnist;
pub mod registry;
pub mod timeline;
pub mod transfer;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `docker ARGS`: its stdout trimmed, or a line with its stderr.
pub fn docker_text(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The last `n` lines a command wrote to stderr, for an assertion's message: CI shows the end
/// of a failed run's output, where the panic is, so the reason must travel with it.
pub fn said_last(out: &Output, n: usize) -> String {
    let said = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = said.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A node's private address (`NAME-node`'s, from `status --json`).
pub fn private_ip(c: &TestCluster, node: &str) -> String {
    let status = c.status_json();
    let name = format!("{}-{node}", c.name);
    status["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["name"] == name.as_str()))
        .and_then(|n| n["private_ip"].as_str())
        .unwrap_or_else(|| panic!("{name}'s private address in status --json: {status}"))
        .to_string()
}

/// A cluster the test owns: a copy of a shipped profile under a unique name, its own state.
pub struct TestCluster {
    pub name: String,
    pub profile: String,
    pub state: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestCluster {
    /// `profiles/<shipped>` renamed to `<prefix>-<pid>`, with `edit` applied to its text.
    pub fn new(shipped: &str, prefix: &str, edit: impl Fn(String) -> String) -> TestCluster {
        let name = format!("{prefix}-{}", std::process::id() % 10000);
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("profiles")
                .join(shipped),
        )
        .unwrap();
        let original = text
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.split('"').next())
            .expect("a name line")
            .to_string();
        let text = edit(text.replace(
            &format!("name = \"{original}\""),
            &format!("name = \"{name}\""),
        ));
        let profile = dir.path().join(shipped);
        std::fs::write(&profile, text).unwrap();
        TestCluster {
            name,
            profile: profile.to_str().unwrap().to_string(),
            state: dir.path().join("state"),
            _dir: dir,
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"));
        c.args(args)
            .env("HVD_CLUSTER_STATE_DIR", &self.state)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        c
    }

    /// Runs `hvd-cluster ARGS` (the profile is not added), echoing what it said.
    pub fn hvd(&self, args: &[&str]) -> Output {
        let started = Instant::now();
        let out = self.command(args).output().expect("run hvd-cluster");
        eprintln!(
            "$ hvd-cluster {}\n--- exit {:?} after {:.0}s\n{}{}",
            args.join(" "),
            out.status.code(),
            started.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// `hvd` that must succeed: a failure panics with the command and its last lines of
    /// stderr in the message (the suite's failure summary shows a panic's message, not the
    /// captured output above it).
    pub fn hvd_ok(&self, args: &[&str]) -> Output {
        let out = self.hvd(args);
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<&str> = stderr.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            panic!(
                "hvd-cluster {} exited {:?}; its last lines:\n{tail}",
                args.join(" "),
                out.status.code()
            );
        }
        out
    }

    /// A command on a node over the tool's own SSH path; its stdout.
    pub fn on_node(&self, node: &str, command: &[&str]) -> String {
        let mut args = vec!["ssh", &self.profile, node, "--"];
        args.extend_from_slice(command);
        let out = self.hvd(&args);
        assert!(out.status.success(), "ssh {node} {command:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `status --json`, parsed.
    pub fn status_json(&self) -> serde_json::Value {
        let out = self.hvd(&["status", &self.profile, "--json"]);
        serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
    }

    /// The workers `status --live` sees listed in the master's discovery file; a plain
    /// `status` (no SSH: what hvd-cluster kept when it wrote the file) must say the same.
    pub fn listed_in_discovery(&self) -> Vec<String> {
        let listed = |args: &[&str]| -> Vec<String> {
            let out = self.hvd(args);
            let status: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("status --json prints JSON");
            status["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["in_discovery"] == true)
                .filter_map(|n| n["name"].as_str().map(String::from))
                .collect()
        };
        let live = listed(&["status", &self.profile, "--json", "--live"]);
        let kept = listed(&["status", &self.profile, "--json"]);
        assert_eq!(
            kept, live,
            "status without SSH agrees with the master's file"
        );
        live
    }
}

/// A rank-0 progress line of examples/elastic_train.py: (step, world size).
pub fn step_line(line: &str) -> Option<(u32, u32)> {
    let rest = &line[line.find("ELASTIC step=")?..];
    let field = |k: &str| {
        rest.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.parse().ok())
    };
    Some((field("step=")?, field("size=")?))
}

/// Spawns `cmd` with its stdout read on a thread, line by line: the pieces `split` makes of
/// each line go to the receiver as they come, and all of them are the thread's result.
pub fn follow(
    mut cmd: Command,
    split: fn(&str) -> Vec<String>,
) -> (Child, mpsc::Receiver<String>, JoinHandle<Vec<String>>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
            for piece in split(&String::from_utf8_lossy(&line)) {
                let _ = tx.send(piece.clone());
                all.push(piece);
            }
        }
        all
    });
    (child, lines, reader)
}

/// `hvd-cluster run --elastic` of examples/elastic_train.py, read line by line.
pub struct ElasticJob {
    child: Child,
    lines: mpsc::Receiver<String>,
    reader: JoinHandle<Vec<String>>,
    /// Every (step, size) read so far.
    pub seen: Vec<(u32, u32)>,
}

impl ElasticJob {
    pub fn start(cluster: &TestCluster, max_np: u32) -> ElasticJob {
        ElasticJob::start_example(cluster, max_np, "elastic_train.py", &[])
    }

    /// `examples/<script>` (which prints the same `ELASTIC step=` lines, the same
    /// checkpoint, and stops on the same file) with `args`.
    pub fn start_example(
        cluster: &TestCluster,
        max_np: u32,
        script: &str,
        args: &[&str],
    ) -> ElasticJob {
        let max_np = max_np.to_string();
        let send = format!("examples/{script}");
        let mut argv = vec![
            "run",
            &cluster.profile,
            "--elastic",
            "--min-np",
            "1",
            "--max-np",
            &max_np,
            "--send",
            &send,
            "--",
            "env",
            "STEP_SLEEP=0.5",
            "TOTAL_STEPS=100000",
            "python",
            script,
        ];
        argv.extend_from_slice(args);
        let (child, lines, reader) = follow(cluster.command(&argv), |line| {
            if line.contains("ELASTIC") || line.contains("RESET") {
                eprintln!("[job] {line}");
            }
            vec![line.to_string()]
        });
        ElasticJob {
            child,
            lines,
            reader,
            seen: Vec::new(),
        }
    }

    /// Waits until the job prints a step with world size `size`; returns that step.
    pub fn wait_size(&mut self, size: u32, limit: Duration) -> u32 {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the job never reached world size {size} in {limit:?}; last steps: {:?}",
                self.seen.iter().rev().take(5).collect::<Vec<_>>()
            );
            if let Ok(line) = self.lines.recv_timeout(left.min(Duration::from_secs(5))) {
                if let Some((step, s)) = step_line(&line) {
                    self.seen.push((step, s));
                    if s == size {
                        return step;
                    }
                }
            }
        }
    }

    /// A preemption and its repair, with the job running at 3: worker-1's machine disappears
    /// (`docker kill`), the job goes on at 2, `heal` names and replaces it, the job is back at
    /// 3 within `regrow`.
    pub fn preempt_worker_1_and_heal(&mut self, c: &TestCluster, regrow: Duration) {
        let killed = format!("{}-worker-1", c.name);
        assert!(Command::new("docker")
            .args(["kill", &killed])
            .status()
            .expect("docker")
            .success());
        self.wait_size(2, Duration::from_secs(180));
        let heal = c.hvd(&["heal", &c.profile]);
        assert!(heal.status.success());
        let healed = String::from_utf8_lossy(&heal.stdout);
        assert!(healed.contains(&killed), "{healed}");
        self.wait_size(3, regrow);
    }

    /// Ends the job through its stop file on /shared and checks its own account: a clean
    /// exit, a final step equal to the last step printed, the checkpoint on /shared holding
    /// it. Returns every world size the job ran at.
    pub fn stop_and_verify(mut self, cluster: &TestCluster) -> Vec<u32> {
        cluster.on_node("master", &["sudo", "touch", "/shared/elastic_stop"]);
        let exit = self.child.wait().unwrap();
        let lines = self.reader.join().unwrap();
        assert!(exit.success(), "the elastic job ends cleanly");
        for l in &lines {
            if let Some(s) = step_line(l) {
                self.seen.push(s);
            }
        }
        let done_step: u32 = lines
            .iter()
            .filter(|l| l.contains("ELASTIC_DONE"))
            .find_map(|l| l.split("step=").nth(1))
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .expect("the job prints ELASTIC_DONE step=N");
        let last = self.seen.iter().map(|s| s.0).max().unwrap();
        assert_eq!(
            done_step, last,
            "the job's final step is its last printed step"
        );
        let checkpoint = cluster.on_node("master", &["cat", "/shared/elastic_checkpoint.json"]);
        let checkpoint: serde_json::Value =
            serde_json::from_str(checkpoint.trim()).expect("a JSON checkpoint on /shared");
        assert_eq!(
            checkpoint["step"], done_step,
            "the checkpoint holds the final step"
        );
        self.seen.iter().map(|s| s.1).collect()
    }
}

/// Asserts that a command's stderr (`scale`, `heal`) says `master` served the image's archive
/// it kept from an earlier delivery, with no second `docker save` there.
pub fn assert_kept_archive_served(said: &str, master: &str) {
    assert!(
        said.contains(&format!(
            "{master}: the image's archive kept from an earlier delivery serves the workers"
        )) && !said.contains(&format!("{master}: saved ")),
        "{said}"
    );
}

/// A command that failed as it should: exit `code` and exactly one `error:` line on stderr,
/// returned.
pub fn one_error_line(out: &Output, code: i32) -> String {
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    errors[0].to_string()
}

/// A plain HTTP/1.0 GET of `url` from this machine (the Jupyter URL): (status line, body).
pub fn http_get(url: &str) -> (String, String) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = std::net::TcpStream::connect(host).expect("connect to the Jupyter URL");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET /{path} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// Gives the node container `container` new SSH host keys behind the tool's back (sshd reloads
/// them on SIGHUP); returns the fingerprint of its new ED25519 key.
pub fn new_host_keys_behind_the_tools_back(container: &str) -> String {
    let out = Command::new("docker")
        .args([
            "exec",
            container,
            "sh",
            "-ec",
            "rm -f /etc/ssh/ssh_host_*; ssh-keygen -A >/dev/null; pkill -HUP -o -x sshd; \
             ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub",
        ])
        .output()
        .expect("docker exec");
    assert!(
        out.status.success(),
        "new host keys in {container}: {out:?}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let fingerprint = text
        .split_whitespace()
        .find(|w| w.starts_with("SHA256:"))
        .unwrap_or_else(|| panic!("no fingerprint in {text}"))
        .to_string();
    // sshd re-executes itself on SIGHUP: a moment before it listens again
    std::thread::sleep(Duration::from_secs(2));
    fingerprint
}

/// A command that meets a node whose host key changed behind the tool's back stops at once
/// (not after its SSH wait) with one line: the node, the pinned and the offered fingerprint,
/// and the `ssh-keygen -R` that forgets the old key. Running that, as the line says, lets the
/// next command learn the new key.
pub fn stops_on_changed_host_key(c: &TestCluster, node: &str, offered: &str) {
    let check = c.hvd(&["check", &c.profile]);
    let err = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("its SSH host key changed"))
        .unwrap_or_else(|| panic!("no host key line: {err}"));
    assert!(
        line.contains(&format!("{node}: its SSH host key changed: ")),
        "{line}"
    );
    assert!(line.contains(&format!("now offers {offered}")), "{line}");
    let known_hosts = c.state.join(&c.name).join("known_hosts");
    assert!(line.contains(" pins SHA256:"), "{line}");
    assert!(
        line.contains(&format!(
            "`ssh-keygen -f '{}' -R {node}`",
            known_hosts.display()
        )),
        "{line}"
    );
    assert!(!err.contains("still no SSH"), "it waited: {err}");
    let forget = Command::new("ssh-keygen")
        .arg("-f")
        .arg(&known_hosts)
        .args(["-R", node])
        .output()
        .expect("ssh-keygen -R");
    assert!(forget.status.success(), "{forget:?}");
}

/// The first private line of a key file (its base64 body): bytes no file of the bake may hold.
pub fn key_body(text: &str) -> String {
    text.lines()
        .find(|l| !l.starts_with("-----") && l.len() > 40)
        .unwrap_or_else(|| panic!("no key body in {} bytes", text.len()))
        .to_string()
}

/// What `search` (a shell command on this machine, given `$PATTERNS`: a file of `secrets`, one
/// a line, for `grep -F -f`) prints; it must end well (it read everything).
pub fn searched(search: &str, secrets: &[String]) -> String {
    let patterns = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(patterns.path(), secrets.join("\n") + "\n").unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; PATTERNS={}; {search}",
            patterns.path().display()
        ))
        .output()
        .expect("run the search");
    assert!(out.status.success(), "{search}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What no byte of a bake may hold: the cluster's login key (its private body and its public
/// blob, which is the `authorized_keys` line), the containers' key, and the baked node's SSH
/// host key (private body and public blob).
pub fn bake_secrets(c: &TestCluster, host_private: &str, host_public: &str) -> Vec<String> {
    let folder = c.state.join(&c.name);
    let read = |f: &str| std::fs::read_to_string(folder.join(f)).expect(f);
    let blob = |line: &str| {
        line.split_whitespace()
            .nth(1)
            .expect("a public key line")
            .to_string()
    };
    vec![
        key_body(&read("id_ed25519")),
        key_body(&read("container_ed25519")),
        blob(&read("id_ed25519.pub")),
        key_body(host_private),
        blob(host_public),
    ]
}

/// What `bake` of one node said, once it made its image.
pub struct BakeMade {
    /// What `bake` printed on stderr (the progress lines).
    pub said: String,
    /// The `check:` line of the `up` that set the node back.
    pub check: String,
    /// The image's id, from `bake: NAME (ID), ... from NODE in Ns`.
    pub id: String,
}

/// `hvd-cluster bake` of `node` (its full name) with `args` after the profile, timed in a bench
/// line: it succeeds, says the node was prepared and set back, its `up` prints the check, and
/// it names the image `name` made from `node`.
pub fn bake_node(c: &TestCluster, node: &str, name: &str, args: &[&str]) -> BakeMade {
    let mut all = vec!["bake", c.profile.as_str()];
    all.extend_from_slice(args);
    let started = Instant::now();
    let bake = c.hvd(&all);
    eprintln!(
        "bench: bake of {node} took {:.0}s",
        started.elapsed().as_secs_f64()
    );
    let out = String::from_utf8_lossy(&bake.stdout).into_owned();
    let said = String::from_utf8_lossy(&bake.stderr).into_owned();
    assert!(bake.status.success(), "bake fails: {said}");
    assert!(
        said.contains(&format!("bake: {node} prepared")) && said.contains("set back"),
        "{said}"
    );
    let check = out
        .lines()
        .find(|l| l.starts_with("check:"))
        .unwrap_or_else(|| panic!("the bake's `up` checks the cluster: {out}"))
        .to_string();
    let made = out
        .lines()
        .find(|l| l.starts_with(&format!("bake: {name} (")))
        .unwrap_or_else(|| panic!("no bake line in {out}"));
    assert!(made.contains(&format!("from {node} in ")), "{made}");
    let id = made
        .split_once('(')
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(id, _)| id.to_string())
        .expect("the image's id");
    BakeMade { said, check, id }
}
