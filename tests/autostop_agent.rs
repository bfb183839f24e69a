//! The autostop agent (templates/node/autostop_agent.py, what `up` leaves on the master) asked
//! for one look (`--once`) on this machine with the python3 a stock image has: idle with
//! nothing running; busy while a process named `horovodrun` runs; busy in the first minutes
//! after the host booted (after `start` unshelves the cluster, the agent must not stop it
//! again while start's bootstrap and check run). Nothing is stopped: `--once` only looks.
//! The agent runs in a PID namespace of its own (`unshare`, as root like CI), so the jobs of
//! other tests on this machine stay out of its sight.

use std::process::Command;

/// One look of the agent with `config`, in a fresh PID namespace where `job` (a shell
/// command, started in the background first) runs beside it: (busy reasons, idle seconds).
fn look(config: serde_json::Value, job: &str) -> (Vec<String>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let mut config = config;
    // Jupyter on a port nothing listens on; the log inside the temporary folder
    config["jupyter_port"] = 9.into();
    config["jupyter_token_file"] = dir.path().join("no-token").to_str().unwrap().into();
    config["log"] = dir.path().join("agent.log").to_str().unwrap().into();
    std::fs::write(&path, config.to_string()).unwrap();
    let script =
        format!("{job} sleep 0.3; exec python3 templates/node/autostop_agent.py \"$1\" --once");
    let out = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "bash",
            "-c",
            &script,
            "look",
        ])
        .arg(&path)
        .output()
        .expect("unshare runs the agent");
    assert!(out.status.success(), "{out:?}");
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let busy = said["busy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    (busy, said["idle_seconds"].as_u64().unwrap())
}

#[test]
fn the_agent_is_idle_busy_with_a_job_and_holds_after_a_boot() {
    let no_grace = serde_json::json!({"idle_seconds": 60, "boot_grace_seconds": 0});
    let (busy, _) = look(no_grace.clone(), "");
    assert_eq!(busy, Vec::<String>::new(), "nothing runs: idle");

    // A job: a process whose argv[0] is horovodrun, as `hvd-cluster run` starts one.
    let (busy, idle) = look(no_grace, "(exec -a horovodrun sleep 30) &");
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert!(
        busy[0].starts_with("job running: horovodrun (pid "),
        "{busy:?}"
    );
    assert_eq!(idle, 0, "busy now: no idle time");

    // Any host booted less than a billion seconds ago: inside the grace after a boot.
    let grace = serde_json::json!({"idle_seconds": 60, "boot_grace_seconds": 1_000_000_000u64});
    let (busy, idle) = look(grace, "");
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert!(
        busy[0].starts_with("just booted: holds until ") && busy[0].contains("bootstrap and check"),
        "{busy:?}"
    );
    assert_eq!(idle, 0);
}
