//! The local provider end to end, on this machine's real Docker engine: `up` builds the
//! images (cached), creates a master and 2 workers as containers, bootstraps them over SSH,
//! and passes the acceptance check (containers, /shared over NFS, Jupyter's title, an
//! allreduce where every rank reports its host); a real training job runs on all 3 hosts, sent
//! as a folder, Horovod's timeline recorded and brought back, its loss served by `tensorboard`
//! through the tunnel; a tree goes to /shared and back with `push` and `pull` (one SIGKILLed);
//! `up` again changes nothing; `stop` and `start` bring the same cluster back with /shared
//! as it was; a master host key changed behind the tool's back stops the next command with one
//! line; `bench` reports and stops on Ctrl-C (tests/common/bench_report.rs); `down` leaves no
//! container, network or volume.
//!
//! Needs Docker and debootstrap (scripts/test installs what is missing through .ci/run).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TestCluster;

/// The node image (built by scripts/build-images, as for the cluster test).
const NODE_IMAGE: &str = "hvd-cluster/node:bookworm";

fn labelled(what: &[&str], cluster: &str) -> Vec<String> {
    let filter = format!("label=hvd-cluster={cluster}");
    let mut args: Vec<&str> = what.to_vec();
    args.extend(["--filter", &filter, "-q"]);
    let out = Command::new("docker").args(&args).output().expect("docker");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn local_cluster_up_check_train_again_down() {
    assert!(
        Command::new("docker")
            .arg("info")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false),
        "this test needs a running Docker engine"
    );
    let c = TestCluster::new("local.toml", "t-local", |p| p);
    let (name, profile) = (c.name.as_str(), c.profile.as_str());

    // `--fanout 1`: the image goes down a chain, master -> worker-1 -> worker-2, so a worker
    // relays it to another while it loads it (with 2 workers the default tree is a star).
    let up = c.hvd(&["up", profile, "--fanout", "1"]);
    let stdout = String::from_utf8_lossy(&up.stdout).to_string();
    let stderr = String::from_utf8_lossy(&up.stderr).to_string();
    let result = std::panic::catch_unwind(|| {
        assert!(up.status.success(), "up succeeds");
        assert!(
            stderr.contains("image to the master over SSH (zstd -1)"),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "image master -> {name}-worker-1 over plain TCP :12346 (zstd), streamed into docker load, relayed to 1 more"
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "image {name}-worker-1 -> {name}-worker-2 over plain TCP :12346 (zstd)"
            )),
            "{stderr}"
        );
        assert!(stdout.contains("check: 3 container(s) running"), "{stdout}");
        assert!(
            stdout.contains(&format!("/shared read on {name}-worker-1")),
            "{stdout}"
        );
        assert!(
            stdout.contains("Jupyter answers \"JupyterLab\""),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "3 rank(s) joined on {name}-master, {name}-worker-1, {name}-worker-2"
            )),
            "{stdout}"
        );
        assert!(stdout.contains("allreduce  64 MiB"), "{stdout}");

        // The printed Jupyter URL answers 200 with JupyterLab's title, from this machine.
        let url = stdout
            .lines()
            .find_map(|l| l.strip_prefix("Jupyter Lab: "))
            .expect("a Jupyter URL")
            .trim()
            .to_string();
        assert!(
            url.starts_with("http://127.0.0.1:") && url.contains("/lab?token="),
            "{url}"
        );
        let page = Command::new("curl")
            .args(["-s", "-w", "\n%{http_code}", &url])
            .output()
            .expect("curl");
        let page = String::from_utf8_lossy(&page.stdout);
        assert!(
            page.trim_end().ends_with("200") && page.contains("<title>JupyterLab</title>"),
            "{page}"
        );
        let wrong = url.split("token=").next().unwrap().to_string() + "token=wrong";
        let api = wrong.replace("/lab?", "/api/contents?");
        let denied = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &api])
            .output()
            .expect("curl");
        assert_eq!(
            String::from_utf8_lossy(&denied.stdout),
            "403",
            "a wrong token is refused"
        );

        // A short real training job with every host's rank taking part, Horovod's timeline
        // recorded.
        let run = c.hvd_ok(&[
            "run",
            profile,
            "--timeline",
            "--send",
            "examples",
            "--",
            "python",
            "examples/train.py",
        ]);
        let said = String::from_utf8_lossy(&run.stderr);
        assert!(
            said.contains("job 1: Horovod's timeline goes to /shared/jobs/1/timeline.json"),
            "{said}"
        );
        let out = String::from_utf8_lossy(&run.stdout);
        let done = out
            .lines()
            .find(|l| l.contains("TRAIN_DONE"))
            .expect("the job finished");
        assert!(
            done.contains("size=3") && done.contains("weights_in_sync=True"),
            "{done}"
        );
        for host in ["master", "worker-1", "worker-2"] {
            assert!(done.contains(&format!("'{name}-{host}'")), "{done}");
        }

        timeline_of_a_three_rank_job(&c);
        tensorboard_serves_the_jobs_logs(&c);

        // That run was job 1: the jobs on this cluster.
        common::jobs::jobs_on_a_running_cluster(&c, &["master", "worker-1", "worker-2"], 3);

        // A dataset's way in and the results' way out.
        common::transfer::push_and_pull_on_a_running_cluster(&c, "worker-1");

        // The containers' key opens the containers' sshd, never a host's.
        let nodes: Vec<String> = ["master", "worker-1", "worker-2"]
            .iter()
            .map(|n| format!("{name}-{n}"))
            .collect();
        common::container_key::opens_no_host(&c, "debian", 12345, &nodes);

        // Converged: nothing to change, no bootstrap step applied.
        let again = c.hvd_ok(&["up", profile]);
        let err = String::from_utf8_lossy(&again.stderr);
        assert!(
            err.contains("nothing to change") && err.contains("bootstrap: 0 step(s) changed"),
            "{err}"
        );

        let check = c.hvd_ok(&["check", profile, "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
        assert_eq!(report["ranks"], 3);

        // A new build of the image that changes only its top layer: only that layer travels
        // (the nodes hold the others), and the cluster runs on the new image.
        let text = std::fs::read_to_string(profile).unwrap();
        let image = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("image = \""))
            .and_then(|rest| rest.split('"').next())
            .expect("the profile names its image")
            .to_string();
        let derived = format!("hvd-cluster/horovod:{name}-derived");
        let ctx = tempfile::tempdir().unwrap();
        std::fs::write(
            ctx.path().join("Dockerfile"),
            format!("FROM {image}\nRUN echo {name} > /opt/hvd/derived.txt\n"),
        )
        .unwrap();
        let built = Command::new("docker")
            .args(["build", "-q", "-t", &derived])
            .arg(ctx.path())
            .env("DOCKER_BUILDKIT", "0")
            .output()
            .expect("docker build");
        assert!(built.status.success(), "{built:?}");
        // The first `up` sent the image whole: the master keeps its archive for `scale` and
        // `heal`, with the image's id (as the master's Docker has it) beside it.
        let archived = |what: &str| c.on_node("master", &[what]).trim().to_string();
        assert_eq!(
            archived("sudo sh -c 'cat /var/tmp/hvd-cluster-image.tar*.id'"),
            archived(&format!(
                "sudo docker image inspect -f '{{{{.Id}}}}' {image}"
            )),
            "the master's archive is recorded as the image's"
        );
        std::fs::write(
            profile,
            text.replace(
                &format!("image = \"{image}\""),
                &format!("image = \"{derived}\""),
            )
            .replace("source = \"build\"", "source = \"transfer\""),
        )
        .unwrap();
        let changed = c.hvd(&["up", profile]);
        let _ = Command::new("docker").args(["rmi", &derived]).output();
        assert!(changed.status.success());
        let err = String::from_utf8_lossy(&changed.stderr);
        let layers = err
            .lines()
            .find(|l| l.contains("layer(s) already on every node that lacks the image"))
            .unwrap_or_else(|| panic!("no layer line in {err}"));
        let (held, all) = layers
            .split(": ")
            .nth(1)
            .and_then(|r| r.split_once(" of "))
            .map(|(h, rest)| {
                (
                    h.trim().parse::<u32>().unwrap(),
                    rest.split(' ').next().unwrap().parse::<u32>().unwrap(),
                )
            })
            .unwrap();
        assert_eq!(held + 1, all, "{layers}");
        let sent = err
            .lines()
            .find(|l| l.contains("to the master over SSH"))
            .unwrap_or_else(|| panic!("no transfer line in {err}"));
        assert!(
            sent.contains(" kB in "),
            "only the top layer travels: {sent}"
        );
        let out = String::from_utf8_lossy(&changed.stdout);
        assert!(out.contains("3 rank(s) joined"), "{out}");
        // An archive without the layers the nodes held is no image for a new worker: not kept,
        // and the old image's went before it came.
        assert_eq!(
            archived("ls /var/tmp | grep hvd-cluster-image.tar || true"),
            "",
            "no archive kept after a partial upload"
        );

        stop_and_start(&c);
        common::bench_report::bench_on_a_running_cluster(&c);
        down_says_what_goes_and_asks(&c);
    });

    let down = c.hvd(&["down", "--yes", profile]);
    assert!(down.status.success(), "down succeeds");
    assert_eq!(
        labelled(&["ps", "-a"], name),
        Vec::<String>::new(),
        "no container left"
    );
    assert_eq!(
        labelled(&["network", "ls"], name),
        Vec::<String>::new(),
        "no network left"
    );
    assert_eq!(
        labelled(&["volume", "ls"], name),
        Vec::<String>::new(),
        "no volume left"
    );
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Job 1's timeline (`run --timeline`, three ranks): written by rank 0 into the job's folder
/// on /shared and brought back by `pull`, in Chrome's trace format (a JSON array of events),
/// with allreduce negotiations that every rank took part in.
fn timeline_of_a_three_rank_job(c: &TestCluster) {
    let here = tempfile::tempdir().unwrap();
    let local = here.path().join("timeline.json");
    c.hvd_ok(&[
        "pull",
        &c.profile,
        "/shared/jobs/1/timeline.json",
        local.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&local).expect("the timeline came back");
    let events = common::timeline::events(&text);
    common::timeline::assert_every_rank_negotiated(&events, 3);
}

/// `tensorboard` over /shared/logs while the cluster runs: job 1 (examples/train.py, rank 0
/// logging each step's loss into HVD_CLUSTER_LOG_DIR) is a run with a `loss` scalar, read
/// through the printed URL with TensorBoard's own data API; Ctrl-C ends the command with exit
/// 0 and TensorBoard on the master.
fn tensorboard_serves_the_jobs_logs(c: &TestCluster) {
    use std::io::BufRead;
    let mut child = c
        .command(&["tensorboard", &c.profile])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("hvd-cluster tensorboard");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let url = rx
        .recv_timeout(std::time::Duration::from_secs(300))
        .ok()
        .and_then(|l| l.strip_prefix("TensorBoard: ").map(str::to_string));
    let result = std::panic::catch_unwind(|| {
        let url = url.expect("a `TensorBoard: URL` line within 300 s");
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        let (status, runs) = common::http_get(&format!("{url}data/runs"));
        assert!(status.contains(" 200"), "{status}");
        let runs: Vec<String> = serde_json::from_str(&runs).expect("the runs as JSON");
        assert!(runs.iter().any(|r| r == "1"), "job 1 is a run: {runs:?}");
        // TensorBoard reads the folder in the background: the scalars may take a reload.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        loop {
            let (_, tags) = common::http_get(&format!("{url}data/plugin/scalars/tags"));
            let tags: serde_json::Value = serde_json::from_str(&tags).unwrap_or_default();
            if tags["1"]["loss"].is_object() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no `loss` scalar in job 1's run: {tags}"
            );
            std::thread::sleep(std::time::Duration::from_secs(3));
        }
        let (_, points) =
            common::http_get(&format!("{url}data/plugin/scalars/scalars?run=1&tag=loss"));
        let points: Vec<serde_json::Value> = serde_json::from_str(&points).expect("the points");
        assert_eq!(
            points.len(),
            30,
            "a point per step (TRAIN_STEPS): {points:?}"
        );
        the_page_shows_the_run_and_its_tag(&url);
    });
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-INT", &pid]).status();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "Ctrl-C ends `tensorboard` with 0 within 30 s"
    );
    let left = c.on_node(
        "master",
        &[
            // a whole NUL-separated variable: sudo's own SUDO_COMMAND carries this text
            "sudo sh -c 'grep -lzx \"HVD_CLUSTER_TENSORBOARD=[0-9]*\" /proc/[0-9]*/environ 2>/dev/null | wc -l'",
        ],
    );
    assert_eq!(left.trim(), "0", "TensorBoard stopped on the master");
}

/// TensorBoard's page as a browser shows it (Debian's chromium, headless; .ci/run installs
/// it): the DOM after its scripts ran names job 1's run and its `loss` card; the screenshot
/// is kept in the test's folder under target/ and its path printed.
fn the_page_shows_the_run_and_its_tag(url: &str) {
    let page = format!("{url}#timeseries");
    let chromium = |extra: &[&str]| {
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--virtual-time-budget=20000",
                "--window-size=1280,900",
            ])
            .args(extra)
            .arg(&page)
            .output()
            .expect("chromium (Debian's package; .ci/run installs it)")
    };
    let dom = chromium(&["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains(">loss<") && dom.contains(">1<"),
        "the page names job 1's run and its loss card: {} bytes of DOM",
        dom.len()
    );
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("tensorboard.png");
    let _ = std::fs::remove_file(&shot);
    chromium(&[&format!("--screenshot={}", shot.display())]);
    assert!(
        std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000),
        "a screenshot at {}",
        shot.display()
    );
    eprintln!("TensorBoard's page: {}", shot.display());
}

/// `down` first says what goes (the servers by name, the network pieces, what /shared holds
/// and the jobs on record, read from the master) and deletes nothing without an answer:
/// refused without a terminal and without `--yes` (exit 2, one line naming both), and a `n`
/// typed on a terminal (`script` gives it one) leaves the cluster as it was.
fn down_says_what_goes_and_asks(c: &TestCluster) {
    let (name, profile) = (c.name.as_str(), c.profile.as_str());
    let running = || labelled(&["ps"], name).len();
    let refused = c
        .command(&["down", profile])
        .stdin(Stdio::null())
        .output()
        .expect("run hvd-cluster");
    let line = common::one_error_line(&refused, 2);
    assert!(
        line.contains("no terminal to ask on") && line.contains("--yes"),
        "{line}"
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    for part in [
        format!("3 servers: {name}-master, {name}-worker-1, {name}-worker-2"),
        "and 1 network".to_string(),
        " file(s), deleted with it".to_string(),
        "jobs on record: ".to_string(),
    ] {
        assert!(said.contains(&part), "{part:?} in {said}");
    }
    assert_eq!(running(), 3, "nothing deleted without an answer");

    let command = format!("'{}' down '{profile}'", env!("CARGO_BIN_EXE_hvd-cluster"));
    let mut asked = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("HVD_CLUSTER_STATE_DIR", &c.state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux)");
    asked.stdin.take().unwrap().write_all(b"n\n").unwrap();
    let asked = asked.wait_with_output().unwrap();
    let seen = String::from_utf8_lossy(&asked.stdout);
    assert_eq!(asked.status.code(), Some(1), "{seen}");
    assert!(
        seen.contains("Delete all of it? [y/N]") && seen.contains("nothing deleted"),
        "{seen}"
    );
    assert_eq!(running(), 3, "an answer of n deletes nothing");
}

/// `top` while job `running` runs: `--once --json` has every node's row (the master first)
/// with its CPU, memory and /shared's room, "no GPU" on nodes without `nvidia-smi` and figures
/// on worker-1, given a stand-in `nvidia-smi` (a script printing what a real one prints for
/// two GPUs, one of them `[N/A]`), and the job with its number, command, last line and the
/// rate that line prints. Then the live view in a real terminal (tmux): every node's row;
/// worker-2 frozen (`docker pause`: its sshd stops answering) is "not answering" within a refresh while the others still show; `q`
/// leaves with exit 0. (On the local provider a node's /proc is this machine's: CPU and memory
/// are the host's, the same on every node.)
fn top_shows_every_node_and_the_running_job(c: &TestCluster, running: u64) {
    let (name, profile) = (c.name.as_str(), c.profile.as_str());
    // no single quote: it travels inside printf '...' (whose \n are the file's lines)
    let stand_in = r##"#!/bin/sh\n# a stand-in for nvidia-smi: what a real one prints for --query-gpu\nprintf "0, 87, 30123, 40960, NVIDIA A100-SXM4-40GB\\n1, [N/A], [N/A], 40960, NVIDIA A100-SXM4-40GB\\n"\n"##;
    c.on_node(
        "worker-1",
        &[&format!(
            "printf '{stand_in}' | sudo tee /usr/local/bin/nvidia-smi >/dev/null && sudo chmod 755 /usr/local/bin/nvidia-smi"
        )],
    );
    // The job is `running` once its horovodrun starts; its ranks print only after horovodrun
    // has probed the hosts and its frameworks (TensorFlow's import, tens of seconds on a busy
    // machine): wait for the three ranks' lines before reading what `top` makes of them.
    let id = running.to_string();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let logs = c.hvd_ok(&["logs", profile, &id]);
        let printed = String::from_utf8_lossy(&logs.stdout);
        if printed.matches("<stdout>:epoch 1: 12.5 img/sec").count() == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job {id}'s ranks printed nothing in 300 s: {printed}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let once = c.hvd_ok(&["top", profile, "--once", "--json"]);
    let _ = c.on_node("worker-1", &["sudo rm -f /usr/local/bin/nvidia-smi"]);
    let snap: serde_json::Value =
        serde_json::from_slice(&once.stdout).expect("top --json prints JSON");
    let nodes = snap["nodes"].as_array().expect("nodes");
    let names: Vec<&str> = nodes.iter().filter_map(|n| n["node"].as_str()).collect();
    assert_eq!(
        names,
        [
            format!("{name}-master"),
            format!("{name}-worker-1"),
            format!("{name}-worker-2")
        ],
        "{snap:#}"
    );
    for n in nodes {
        assert_eq!(n["state"], "ok", "{snap:#}");
        assert!(
            n["cpu_percent"]
                .as_f64()
                .is_some_and(|c| (0.0..=100.0).contains(&c)),
            "{n:#}"
        );
        assert!(
            n["memory"]["total_kib"].as_u64().is_some_and(|m| m > 0),
            "{n:#}"
        );
        assert!(n["net_receive_bytes_per_sec"].as_f64().is_some(), "{n:#}");
        assert!(
            n["disks"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["path"] == "/shared"
                    && d["available_bytes"].as_u64().is_some_and(|a| a > 0))),
            "{n:#}"
        );
    }
    assert_eq!(nodes[0]["gpus"]["state"], "none", "{snap:#}");
    assert_eq!(nodes[1]["gpus"]["state"], "listed", "{snap:#}");
    assert_eq!(
        nodes[1]["gpus"]["gpus"][0]["utilization_percent"], 87,
        "{snap:#}"
    );
    assert_eq!(
        nodes[1]["gpus"]["gpus"][1]["utilization_percent"],
        serde_json::Value::Null,
        "{snap:#}"
    );
    assert_eq!(snap["job"]["id"], running, "{snap:#}");
    assert_eq!(
        snap["job"]["command"], "sh -c 'echo epoch 1: 12.5 img/sec; exec sleep 600'",
        "{snap:#}"
    );
    assert_eq!(snap["job"]["rate"], "12.5 img/sec", "{snap:#}");
    assert!(
        snap["job"]["last_line"]
            .as_str()
            .is_some_and(|l| l.ends_with("epoch 1: 12.5 img/sec")),
        "{snap:#}"
    );
    // On the local provider every node's /proc/stat is this machine's: busy, never idle.
    assert!(
        nodes
            .iter()
            .all(|n| n["cpu_percent"].as_f64().is_some_and(|c| c > 0.0)),
        "{snap:#}"
    );

    // The live view in a real terminal.
    let session = format!("top-{name}");
    let pane = |s: &str| -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", s])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let wait_for = |what: &dyn Fn(&str) -> bool, secs: u64| -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let screen = pane(&session);
            if what(&screen) || std::time::Instant::now() > deadline {
                return screen;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    };
    let exit_file = c.state.join("top-exit");
    let command = format!(
        "HVD_CLUSTER_STATE_DIR={} {} top {} --interval 1; echo $? > {}; sleep 30",
        c.state.display(),
        env!("CARGO_BIN_EXE_hvd-cluster"),
        profile,
        exit_file.display()
    );
    let started = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "200",
            "-y",
            "20",
            &command,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("tmux new-session");
    assert!(started.success());
    let result = std::panic::catch_unwind(|| {
        let rows = |s: &str| {
            [
                format!("{name}-master "),
                format!("{name}-worker-1 "),
                format!("{name}-worker-2 "),
            ]
            .iter()
            .all(|n| {
                s.lines()
                    .any(|l| l.starts_with(n.as_str()) && l.contains('%'))
            })
        };
        let screen = wait_for(&rows, 60);
        assert!(
            rows(&screen) && screen.contains(&format!("job {running}: running")),
            "{screen}"
        );
        let worker2 = format!("{name}-worker-2");
        assert!(Command::new("docker")
            .args(["pause", &worker2])
            .status()
            .expect("docker pause")
            .success());
        let silent = |s: &str| {
            s.lines()
                .any(|l| l.starts_with(&worker2) && l.contains("not answering"))
                && s.lines()
                    .any(|l| l.starts_with(&format!("{name}-master ")) && l.contains('%'))
        };
        let screen = wait_for(&silent, 30);
        let _ = Command::new("docker").args(["unpause", &worker2]).status();
        assert!(
            silent(&screen),
            "worker-2 frozen, the view goes on: {screen}"
        );
        let _ = Command::new("tmux")
            .args(["send-keys", "-t", &session, "q"])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !exit_file.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        assert_eq!(
            std::fs::read_to_string(&exit_file)
                .map(|s| s.trim().to_string())
                .ok()
                .as_deref(),
            Some("0"),
            "q leaves top with exit 0: {}",
            pane(&session)
        );
    });
    let _ = Command::new("docker")
        .args(["unpause", &format!("{name}-worker-2")])
        .output();
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", &session])
        .status();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// `stop` stops every node container (and says so); a second `stop` finds it stopped;
/// `status` says stopped; `start` brings the same cluster back to a passing check with what
/// /shared held before.
fn stop_and_start(c: &TestCluster) {
    let (name, profile) = (c.name.as_str(), c.profile.as_str());
    let mark = format!("written before stop by {name}");
    let wrote = c.hvd(&[
        "ssh",
        profile,
        "--",
        &format!("echo '{mark}' | sudo tee /shared/before-stop.txt"),
    ]);
    assert!(wrote.status.success(), "{wrote:?}");
    // A job still running when the cluster stops: `stop` refuses in one line, stopping
    // nothing; `stop --force` records it interrupted.
    // Every rank prints a line with a rate, then waits (what `top` reads of a running job).
    let running = c.hvd(&[
        "run",
        profile,
        "--detach",
        "--",
        "sh",
        "-c",
        "echo epoch 1: 12.5 img/sec; exec sleep 600",
    ]);
    assert!(running.status.success(), "{running:?}");
    let running: u64 = String::from_utf8_lossy(&running.stdout)
        .trim()
        .parse()
        .expect("the job's number");
    top_shows_every_node_and_the_running_job(c, running);
    let line = common::one_error_line(&c.hvd(&["stop", profile]), 1);
    assert!(
        line.contains(&format!(
            "has job {running} (running): `stop` would interrupt it"
        )) && line.contains("--force"),
        "{line}"
    );
    assert_eq!(
        c.status_json()["state"],
        "running",
        "a refused stop stops nothing"
    );

    let stop = c.hvd(&["stop", profile, "--force"]);
    let out = String::from_utf8_lossy(&stop.stdout);
    assert!(stop.status.success(), "{stop:?}");
    assert!(
        out.contains(&format!("cluster `{name}`: stopped 3 server(s)")),
        "{out}"
    );
    let err = String::from_utf8_lossy(&stop.stderr);
    assert!(
        err.contains(&format!(
            "--force: job {running} (running), recorded interrupted by this stop"
        )),
        "{err}"
    );
    let worker = err.find(&format!("stopped {name}-worker-1")).expect(&err);
    let master = err.find(&format!("stopped {name}-master")).expect(&err);
    assert!(worker < master, "workers first, the master last: {err}");
    for node in ["master", "worker-1", "worker-2"] {
        let running = Command::new("docker")
            .args([
                "inspect",
                "-f",
                "{{.State.Running}}",
                &format!("{name}-{node}"),
            ])
            .output()
            .expect("docker inspect");
        assert_eq!(
            String::from_utf8_lossy(&running.stdout).trim(),
            "false",
            "{node}"
        );
    }
    // `top` of a stopped cluster says so and ends well, as a table and as JSON.
    let top = c.hvd_ok(&["top", profile, "--once"]);
    let said = String::from_utf8_lossy(&top.stdout);
    assert!(
        said.contains(&format!("cluster `{name}` is stopped (3 of 3 server(s))")),
        "{said}"
    );
    let top = c.hvd_ok(&["top", profile, "--json"]);
    let top: serde_json::Value = serde_json::from_slice(&top.stdout).expect("JSON");
    assert_eq!(top["state"], "stopped", "{top}");
    let again = c.hvd_ok(&["stop", profile]);
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("already stopped (3 server(s))"),
        "{again:?}"
    );
    let status = c.hvd(&["status", profile, "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert_eq!(status["state"], "stopped", "{status}");
    assert_eq!(status["healthy"], false, "{status}");
    // Commands that need the nodes say it is stopped, at once.
    let check = c.hvd(&["check", profile]);
    assert_eq!(check.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&check.stderr).contains(&format!(
            "cluster `{name}` is stopped (3 of 3 server(s)); `hvd-cluster start"
        )),
        "{check:?}"
    );
    // `plan` keeps a stopped cluster whole: nothing to replace
    let plan = c.hvd(&["plan", profile, "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).expect("plan JSON");
    assert_eq!(plan["counts"]["replace"], 0, "{plan}");
    assert_eq!(plan["counts"]["create"], 0, "{plan}");

    let start = c.hvd(&["start", profile]);
    let out = String::from_utf8_lossy(&start.stdout);
    let err = String::from_utf8_lossy(&start.stderr);
    assert!(start.status.success(), "{out}\n{err}");
    assert!(
        err.contains(&format!(
            "cluster `{name}` is stopped: starting 3 server(s)"
        )),
        "{err}"
    );
    assert!(out.contains("3 rank(s) joined"), "{out}");
    assert!(out.contains("Jupyter Lab: http://127.0.0.1:"), "{out}");
    let read = c.hvd(&[
        "ssh",
        profile,
        "worker-2",
        "--",
        "cat /shared/before-stop.txt",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&read.stdout).trim(),
        mark,
        "{read:?}"
    );
    let status = c.hvd(&["status", profile, "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert_eq!(status["state"], "running", "{status}");
    // The jobs' record and output are on the master's disk: kept; the job the stop ended is
    // interrupted (its runner saw the mark `--force` left; or it stopped with the master
    // before recording anything), and the next job does not wait for it.
    let kept = common::jobs::jobs_json(c);
    assert!(kept.len() >= 8, "{kept:?}");
    let logs = c.hvd(&["logs", profile, "1"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("TRAIN_DONE"),
        "{logs:?}"
    );
    let ended = common::jobs::job(c, running);
    assert_eq!(ended["state"], "interrupted", "{ended}");
    let next = c.hvd(&["run", profile, "--", "true"]);
    assert!(next.status.success(), "{next:?}");

    // The master's host key changed behind the tool's back (`start` kept the keys: the
    // containers were only stopped): the next command stops at once with the line, and goes on
    // once the old key is forgotten as the line says.
    let master = format!("{name}-master");
    let offered = common::new_host_keys_behind_the_tools_back(&master);
    common::stops_on_changed_host_key(c, &master, &offered);
    c.on_node("master", &["true"]);
}

/// A container that carries the cluster's label but a name this cluster never gives (anyone
/// with access to the engine can make one) is neither a node nor a resource of the cluster:
/// `status` warns about it (escaped) and lists nothing, `down` leaves it alone, and neither
/// makes a cluster folder.
#[test]
fn a_labelled_container_with_a_foreign_name_is_ignored() {
    let c = TestCluster::new("local.toml", "t-intr", |p| p);
    let name = c.name.as_str();
    let label = format!("hvd-cluster={name}");
    let intruders = [format!("{name}-worker-07"), format!("{name}-intruder")];
    for intruder in &intruders {
        let made = Command::new("docker")
            .args(["create", "--label", &label, "--label", "hvd-role=master"])
            .args(["--name", intruder, NODE_IMAGE])
            .output()
            .expect("docker");
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
    }
    let result = std::panic::catch_unwind(|| {
        let mut status = c.command(&["status", "--cluster", name, "--json"]);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OS_") {
                status.env_remove(&key);
            }
        }
        let out = status.output().expect("run hvd-cluster");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["nodes"], serde_json::json!([]), "{report}");
        assert_eq!(report["resources"], serde_json::json!([]), "{report}");
        for intruder in &intruders {
            assert!(
                stderr.contains(&format!("named `{intruder}`")),
                "warned about {intruder}: {stderr}"
            );
        }
        let mut down = c.command(&["down", "--yes", "--cluster", name]);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OS_") {
                down.env_remove(&key);
            }
        }
        let out = down.output().expect("run hvd-cluster");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            labelled(&["ps", "-a"], name).len(),
            2,
            "down left the foreign containers alone"
        );
        assert!(!c.state.join(name).exists(), "no cluster folder was made");
    });
    // -v: the node image declares /var/lib/docker a volume, made anonymous for these
    for intruder in &intruders {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v", intruder])
            .output();
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
