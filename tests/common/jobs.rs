//! Jobs on a running cluster, for the tests that have one: every `run` is a job on
//! the master that outlives the CLI, numbered, queued, followed, cancelled and on record.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::TestCluster;

/// `jobs --json`, parsed.
pub fn jobs_json(c: &TestCluster) -> Vec<serde_json::Value> {
    let out = c.hvd(&["jobs", &c.profile, "--json"]);
    assert!(out.status.success(), "jobs --json: {out:?}");
    serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).expect("jobs --json is a list")
}

/// The job numbered `id` in `jobs --json`.
pub fn job(c: &TestCluster, id: u64) -> serde_json::Value {
    jobs_json(c)
        .into_iter()
        .find(|j| j["id"] == id)
        .unwrap_or_else(|| panic!("no job {id}"))
}

/// Waits until job `id` is in `state` (or ended, when `state` is "ended").
fn wait_for(c: &TestCluster, id: u64, state: &str, limit: Duration) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        let j = job(c, id);
        let now = j["state"].as_str().unwrap_or("");
        let ended = !matches!(now, "queued" | "running");
        if now == state || (state == "ended" && ended) {
            return j;
        }
        assert!(Instant::now() < deadline, "job {id} never {state}: {j}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// `run --detach`: the job's number (its only line on stdout).
fn detach(c: &TestCluster, command: &[&str]) -> u64 {
    let mut args = vec!["run", c.profile.as_str(), "--detach", "--"];
    args.extend_from_slice(command);
    let out = c.hvd(&args);
    assert!(out.status.success(), "run --detach: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("run --detach prints the number: {out:?}"))
}

/// The command lines of every process on `node` (its containers' too), read from /proc.
fn processes(c: &TestCluster, node: &str) -> String {
    c.on_node(
        node,
        &["sudo sh -c 'for p in /proc/[0-9]*; do tr \"\\0\" \" \" < $p/cmdline 2>/dev/null; echo; done'"],
    )
}

/// Every stage on one running cluster whose nodes are `nodes` (master first) and whose slots
/// are `slots`, after the training `run` that was job 1.
pub fn jobs_on_a_running_cluster(c: &TestCluster, nodes: &[&str], slots: u64) {
    let profile = c.profile.as_str();
    // The training run before this was a job too, followed to its end.
    let first = job(c, 1);
    assert_eq!(first["state"], "succeeded", "{first}");
    assert_eq!(first["exit"], 0, "{first}");
    assert_eq!(first["slots"], slots, "{first}");
    // sent as a file (`python train.py`) or in a folder (`python examples/train.py`)
    assert_eq!(first["command"][0], "python", "{first}");
    assert!(
        first["command"][1]
            .as_str()
            .is_some_and(|s| s.ends_with("train.py")),
        "{first}"
    );
    let logs = c.hvd(&["logs", profile, "1"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("TRAIN_DONE"),
        "the training job's output is kept: {logs:?}"
    );

    // Every word reaches every rank as typed, never a shell; every rank carries the job's
    // number.
    let hostile = ["it's", "$HOME", ";", "a\"b", "`id`"];
    let mut args = vec![
        "run",
        profile,
        "--",
        "python",
        "-c",
        "import os, sys; print('ARGV', os.environ['HVD_CLUSTER_JOB'], sys.argv[1:])",
    ];
    args.extend_from_slice(&hostile);
    let out = c.hvd(&args);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    let argv_lines: Vec<&str> = said.lines().filter(|l| l.contains("ARGV")).collect();
    assert_eq!(argv_lines.len() as u64, slots, "one line per rank: {said}");
    for l in &argv_lines {
        assert!(
            l.ends_with(r#"ARGV 2 ["it's", '$HOME', ';', 'a"b', '`id`']"#),
            "{l}"
        );
    }

    // Attached, then the CLI and its SSH connections killed (-9): the job goes on, finishes,
    // and `logs --follow` from another command shows every line and ends with its status.
    // Rank 0 fails last, 10 s after its ticks: the remote ranks start seconds after it on a
    // loaded machine, and horovodrun ends the others when one fails (seen: 13 ticks of 15).
    let ticks = "for i in 1 2 3 4 5; do echo tick $i rank $HOROVOD_RANK; sleep 2; done; \
                 if [ \"$HOROVOD_RANK\" = 0 ]; then sleep 10; exit 3; fi";
    let mut attached = c
        .command(&["run", profile, "--", "sh", "-c", ticks])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run");
    let mut first_line = String::new();
    let mut reader = BufReader::new(attached.stdout.take().expect("stdout"));
    while !first_line.contains("tick 1") {
        first_line.clear();
        assert!(
            reader.read_line(&mut first_line).expect("the job's output") > 0,
            "the job printed no tick"
        );
    }
    let _ = Command::new("kill")
        .args(["-9", &attached.id().to_string()])
        .status();
    let _ = attached.wait();
    // the CLI's SSH connections: every ssh process that uses the cluster's folder
    let _ = Command::new("pkill")
        .args(["-9", "-f", &format!("ssh.*{}", c.state.display())])
        .status();
    let id = 3;
    assert_eq!(job(c, id)["state"], "running", "the job outlived the CLI");
    let followed = c.hvd(&["logs", profile, &id.to_string(), "--follow"]);
    let text = String::from_utf8_lossy(&followed.stdout);
    assert_eq!(
        text.lines().filter(|l| l.contains("tick ")).count() as u64,
        5 * slots,
        "every line, from the first: {text}"
    );
    let ended = job(c, id);
    assert_eq!(ended["state"], "failed", "{ended}");
    let exit = ended["exit"].as_i64().expect("an exit status");
    assert!(exit != 0, "{ended}");
    assert_eq!(
        followed.status.code().map(i64::from),
        Some(exit),
        "`logs --follow` ends with the job's exit status"
    );

    // One at a time, in order: the second waits for the first.
    let a = detach(c, &["sh", "-c", "sleep 6; echo A"]);
    let b = detach(c, &["sh", "-c", "echo B"]);
    assert_eq!((a, b), (4, 5));
    let queued = job(c, b);
    assert_eq!(queued["state"], "queued", "{queued}");
    let a_done = wait_for(c, a, "ended", Duration::from_secs(120));
    let b_done = wait_for(c, b, "ended", Duration::from_secs(120));
    assert_eq!(a_done["state"], "succeeded");
    assert_eq!(b_done["state"], "succeeded");
    assert!(
        b_done["started"].as_u64() >= a_done["ended"].as_u64(),
        "B started once A ended: {a_done} {b_done}"
    );

    // Cancel in the middle of a job on every node: no process of it is left anywhere, and
    // the next job runs at once.
    let mark = format!("jobs-cancel-{}", c.name);
    let long = detach(
        c,
        &[
            "python",
            "-c",
            "import time; time.sleep(600)",
            mark.as_str(),
        ],
    );
    wait_for(c, long, "running", Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(60);
    for node in nodes {
        while !processes(c, node).contains(&mark) {
            assert!(
                Instant::now() < deadline,
                "job {long}'s rank never showed on {node}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    // `check` and `bench` would take the same slots: refused in one line, before they run.
    for (args, what) in [
        (["check", profile], "`check`"),
        (["bench", profile], "`bench`"),
    ] {
        let line = super::one_error_line(&c.hvd(&args), 1);
        assert!(
            line.contains(&format!(
                "has job {long} (running): {what} would run beside it"
            )),
            "{line}"
        );
    }
    let cancel = c.hvd(&["cancel", profile, &long.to_string()]);
    assert!(cancel.status.success(), "{cancel:?}");
    let said = String::from_utf8_lossy(&cancel.stderr);
    assert!(
        said.contains(&format!("job {long} cancelled:"))
            && said.contains(&format!("on {} node(s), none left", nodes.len())),
        "{said}"
    );
    for node in nodes {
        assert!(
            !processes(c, node).contains(&mark),
            "no process of job {long} on {node}"
        );
    }
    assert_eq!(job(c, long)["state"], "cancelled");
    let next = c.hvd(&["run", profile, "--", "true"]);
    assert!(next.status.success(), "{next:?}");
    // Cancelling an ended job says how it ended.
    let again = c.hvd(&["cancel", profile, "1"]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("job 1 had already ended: succeeded"),
        "{again:?}"
    );

    // A check holds the master's check lock while its horovodrun runs: a second `check`
    // is refused in one line, and a job submitted meanwhile waits for it. The lock is held
    // here by a stand-in for that first check (flock and sleep in the master's node; the
    // local nodes are containers), so that neither depends on how long a check takes.
    let master = format!("{}-master", c.name);
    let holder = "/var/lib/hvd-cluster/jobs/.check";
    let held = Command::new("docker")
        .args(["exec", "-d", &master, "flock", "-o", holder, "sleep", "171"])
        .output()
        .expect("docker exec");
    assert!(held.status.success(), "{held:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let free = Command::new("docker")
            .args(["exec", &master, "flock", "-n", holder, "true"])
            .status()
            .expect("docker exec");
        if !free.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stand-in never held the lock"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let line = super::one_error_line(&c.hvd(&["check", profile]), 1);
    assert!(
        line.contains("another `check` or `bench` is using every slot"),
        "{line}"
    );
    let waiting = detach(c, &["true"]);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        job(c, waiting)["state"],
        "queued",
        "job {waiting} started beside a check"
    );
    let released = Command::new("docker")
        .args(["exec", &master, "pkill", "-f", "^sleep 171$"])
        .output()
        .expect("docker exec");
    assert!(released.status.success(), "{released:?}");
    let ran = wait_for(c, waiting, "ended", Duration::from_secs(60));
    assert_eq!(ran["state"], "succeeded", "{ran}");

    // Bad numbers: exit 2, one line.
    for (bad, words) in [("99", "has no job 99"), ("1x", "is not a job number")] {
        for args in [vec!["logs", profile, bad], vec!["cancel", profile, bad]] {
            let line = super::one_error_line(&c.hvd(&args), 2);
            assert!(line.contains(words), "{args:?}: {line}");
        }
    }
    let table = c.hvd(&["jobs", profile]);
    let shown = String::from_utf8_lossy(&table.stdout);
    assert!(
        shown.lines().count() >= 8
            && shown.contains("cancelled")
            && shown.contains("failed with exit status"),
        "{shown}"
    );
    bench_lines(c);
}

/// Benchmark lines (not asserted): `jobs` with a thousand jobs on record against the few
/// there are, and `run --detach` returning against an SSH round trip to the master.
fn bench_lines(c: &TestCluster) {
    let profile = c.profile.as_str();
    let timed = |args: &[&str]| {
        let started = Instant::now();
        let out = c.command(args).output().expect("hvd-cluster");
        assert!(out.status.success(), "{args:?}: {out:?}");
        (started.elapsed().as_secs_f64(), out)
    };
    let (few_took, few) = timed(&["jobs", profile, "--json"]);
    let few: Vec<serde_json::Value> = serde_json::from_slice(&few.stdout).expect("jobs --json");
    // A thousand ended jobs on record, as the runner leaves them (numbers 1000 to 1999): their
    // fields, and the line `list` prints for each, in its folder and in the file `ended`.
    c.on_node(
        "master",
        &["sudo bash -c 'cd /var/lib/hvd-cluster/jobs && cp -p ended ended.kept && for n in $(seq 1000 1999); do            mkdir $n && echo succeeded > $n/state && echo 0 > $n/exit && echo 1 > $n/submitted            && echo 2 > $n/started && echo 3 > $n/ended && echo 3 > $n/slots && echo 0 > $n/elastic            && echo [] > $n/command.json            && printf \"%s\\tsucceeded\\t0\\t1\\t2\\t3\\t3\\t0\\t0\\t[]\\n\" $n | tee $n/record >> ended; done'"],
    );
    let (many_took, many) = timed(&["jobs", profile, "--json"]);
    let many: Vec<serde_json::Value> = serde_json::from_slice(&many.stdout).expect("jobs --json");
    assert_eq!(many.len(), few.len() + 1000);
    let (ssh_took, _) = timed(&["ssh", profile, "--", "true"]);
    let (detach_took, _) = timed(&["run", profile, "--detach", "--", "true"]);
    eprintln!(
        "bench: `jobs --json` with {} jobs on record {many_took:.2}s, with {} {few_took:.2}s ({:.2}x); `run --detach` returned in {detach_took:.2}s, `ssh -- true` {ssh_took:.2}s ({:.2}x)",
        many.len(),
        few.len(),
        many_took / few_took.max(0.001),
        detach_took / ssh_took.max(0.001)
    );
    c.on_node(
        "master",
        &["sudo bash -c 'cd /var/lib/hvd-cluster/jobs && rm -rf $(seq 1000 1999) && mv ended.kept ended'"],
    );
}
