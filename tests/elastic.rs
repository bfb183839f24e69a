//! Elastic training on the local provider, read from the job's own output: an elastic run of
//! examples/elastic_train.py starts on 2 workers; `scale --workers 3` grows the world size to
//! 3; a worker container is killed (a preemption) and the job goes on with the survivors;
//! `heal` brings a replacement under a new name and the job grows back; the job ends with a
//! consistent step count and its checkpoint on /shared.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn hvd(state: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(args)
        .env("HVD_CLUSTER_STATE_DIR", state)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run hvd-cluster");
    eprintln!(
        "$ hvd-cluster {}\n--- exit {:?}\n{}{}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A rank-0 progress line: (step, size).
fn step_line(line: &str) -> Option<(u32, u32)> {
    let rest = &line[line.find("ELASTIC step=")?..];
    let field = |k: &str| {
        rest.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.parse().ok())
    };
    Some((field("step=")?, field("size=")?))
}

/// Waits until the job prints a step with world size `size` after `since`; returns that step.
fn wait_size(
    rx: &mpsc::Receiver<String>,
    seen: &mut Vec<(u32, u32)>,
    size: u32,
    limit: Duration,
) -> u32 {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "the job never reached world size {size}; steps seen: {:?}",
            seen.iter().rev().take(5).collect::<Vec<_>>()
        );
        if let Ok(line) = rx.recv_timeout(left.min(Duration::from_secs(5))) {
            if let Some((step, s)) = step_line(&line) {
                seen.push((step, s));
                if s == size {
                    return step;
                }
            }
        }
    }
}

#[test]
#[ignore = "issue 5 open: after heal the job does not grow back (the replacement likely reuses the blacklisted IP of the killed worker); run with --ignored"]
fn elastic_job_grows_survives_a_preemption_and_heals() {
    let name = format!("t-el-{}", std::process::id() % 10000);
    let dir = tempfile::tempdir().unwrap();
    let base =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/local.toml"))
            .unwrap();
    let profile = dir.path().join("elastic.toml");
    std::fs::write(
        &profile,
        base.replace("name = \"hvd-local\"", &format!("name = \"{name}\"")),
    )
    .unwrap();
    let profile = profile.to_str().unwrap().to_string();
    let state = dir.path().join("state");

    let result = std::panic::catch_unwind(|| {
        assert!(hvd(&state, &["up", &profile]).status.success());
        let mut job = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
            .args([
                "run",
                &profile,
                "--elastic",
                "--min-np",
                "1",
                "--max-np",
                "4",
                "--send",
                "examples/elastic_train.py",
            ])
            .args([
                "--",
                "env",
                "STEP_SLEEP=0.5",
                "TOTAL_STEPS=100000",
                "python",
                "elastic_train.py",
            ])
            .env("HVD_CLUSTER_STATE_DIR", &state)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = job.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("ELASTIC") || line.contains("RESET") {
                    eprintln!("[job] {line}");
                }
                let _ = tx.send(line.clone());
                all.push(line);
            }
            all
        });
        let mut seen = Vec::new();
        wait_size(&rx, &mut seen, 2, Duration::from_secs(240));

        let scale_started = Instant::now();
        let scale = hvd(&state, &["scale", &profile, "--workers", "3"]);
        assert!(scale.status.success());
        wait_size(&rx, &mut seen, 3, Duration::from_secs(120));
        eprintln!(
            "new worker joined the job {:.0}s after `scale` started",
            scale_started.elapsed().as_secs_f64()
        );

        // A preemption: the worker's machine disappears.
        assert!(Command::new("docker")
            .args(["kill", &format!("{name}-worker-1")])
            .status()
            .unwrap()
            .success());
        wait_size(&rx, &mut seen, 2, Duration::from_secs(180));

        let heal = hvd(&state, &["heal", &profile]);
        assert!(heal.status.success());
        let healed = String::from_utf8_lossy(&heal.stdout);
        assert!(healed.contains(&format!("{name}-worker-1")), "{healed}");
        wait_size(&rx, &mut seen, 3, Duration::from_secs(180));
        let status = hvd(&state, &["status", &profile, "--json"]);
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        let listed: Vec<&str> = status["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["in_discovery"] == true)
            .filter_map(|n| n["name"].as_str())
            .collect();
        assert_eq!(
            listed,
            [
                format!("{name}-worker-2"),
                format!("{name}-worker-3"),
                format!("{name}-worker-4")
            ]
        );

        // End the job and read its own account.
        let master = format!("{name}-master");
        assert!(Command::new("docker")
            .args(["exec", &master, "touch", "/shared/elastic_stop"])
            .status()
            .unwrap()
            .success());
        let exit = job.wait().unwrap();
        let lines = reader.join().unwrap();
        assert!(exit.success(), "the elastic job ends cleanly");
        for l in &lines {
            if let Some(s) = step_line(l) {
                seen.push(s);
            }
        }
        let done = lines
            .iter()
            .find(|l| l.contains("ELASTIC_DONE"))
            .expect("ELASTIC_DONE");
        let done_step: u32 = done
            .split("step=")
            .nth(1)
            .and_then(|s| s.trim().parse().ok())
            .unwrap();
        let last = seen.iter().map(|s| s.0).max().unwrap();
        assert_eq!(
            done_step, last,
            "the job's final step is its last printed step"
        );
        let sizes: Vec<u32> = seen.iter().map(|s| s.1).collect();
        assert!(sizes.contains(&2) && sizes.contains(&3));
        let checkpoint = Command::new("docker")
            .args(["exec", &master, "cat", "/shared/elastic_checkpoint.json"])
            .output()
            .unwrap();
        let checkpoint: serde_json::Value =
            serde_json::from_slice(&checkpoint.stdout).expect("checkpoint on /shared");
        assert_eq!(
            checkpoint["step"], done_step,
            "the checkpoint holds the final step"
        );
    });
    assert!(hvd(&state, &["down", &profile]).status.success());
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
