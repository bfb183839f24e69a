use super::*;

fn line(fields: [&str; 10]) -> String {
    fields.join("\t")
}

#[test]
fn a_job_number_is_checked_by_its_grammar() {
    assert_eq!(JobId::parse("1").map(JobId::get), Ok(1));
    assert_eq!(JobId::parse("999999999").map(JobId::get), Ok(999_999_999));
    for bad in [
        "",
        "0",
        "01",
        "-1",
        "+1",
        "1a",
        "1 ",
        " 1",
        "1\n",
        "1;rm -rf /",
        "$(id)",
        "1000000000",
        "١",
        "1e3",
        "../1",
    ] {
        let err = JobId::parse(bad).expect_err(bad);
        assert!(err.contains("is not a job number"), "{err}");
        assert!(!err.contains('\n'), "one line: {err:?}");
    }
}

#[test]
fn the_runners_lines_are_read_by_their_grammar() {
    let done = line([
        "3",
        "failed",
        "2",
        "1700000000",
        "1700000005",
        "1700000065",
        "3",
        "0",
        "0",
        r#"["python","train.py","--lr","0.1"]"#,
    ]);
    let job = parse_line(&done).expect("a job");
    assert_eq!(job.id.get(), 3);
    assert_eq!(job.state, State::Failed);
    assert_eq!(job.exit, Some(2));
    assert_eq!(job.exit_code(), 2);
    assert_eq!(job.how(), "failed with exit status 2");
    assert_eq!(
        (job.started, job.ended),
        (Some(1_700_000_005), Some(1_700_000_065))
    );
    assert_eq!(job.command, ["python", "train.py", "--lr", "0.1"]);

    // queued or running with its runner alive: as recorded; with the runner gone: interrupted
    let running = line(["4", "running", "", "1", "2", "", "3", "1", "1", "[]"]);
    let job = parse_line(&running).expect("a job");
    assert_eq!(
        (job.state, job.elastic, job.exit_code()),
        (State::Running, true, 1)
    );
    let gone = line(["4", "running", "", "1", "2", "", "3", "1", "0", "[]"]);
    assert_eq!(parse_line(&gone).map(|j| j.state), Some(State::Interrupted));
    let gone = line(["5", "queued", "", "1", "", "", "3", "0", "0", "[]"]);
    assert_eq!(parse_line(&gone).map(|j| j.state), Some(State::Interrupted));
    // an ended job stays as it ended, its runner long gone
    let ok = line(["6", "succeeded", "0", "1", "2", "3", "3", "0", "0", "[]"]);
    assert_eq!(parse_line(&ok).map(|j| j.exit_code()), Some(0));
    // `stop --force` under it: recorded interrupted, exit code 1 whatever horovodrun said
    let stopped = line([
        "7",
        "interrupted",
        "137",
        "1",
        "2",
        "3",
        "3",
        "0",
        "0",
        "[]",
    ]);
    let job = parse_line(&stopped).expect("a job");
    assert_eq!(
        (job.state, job.exit_code(), job.how()),
        (State::Interrupted, 1, "interrupted".to_string())
    );

    for bad in [
        line(["x", "failed", "2", "1", "2", "3", "3", "0", "0", "[]"]),
        line(["3", "exploded", "2", "1", "2", "3", "3", "0", "0", "[]"]),
        line(["3", "failed", "-2", "1", "2", "3", "3", "0", "0", "[]"]),
        line(["3", "failed", "2", "soon", "2", "3", "3", "0", "0", "[]"]),
        line(["3", "failed", "2", "1", "2", "3", "3", "0", "2", "[]"]),
        line([
            "3",
            "failed",
            "2",
            "1",
            "2",
            "3",
            "99999999999",
            "0",
            "0",
            "[]",
        ]),
        line(["3", "failed", "2", "1", "2", "3", "3", "0", "0", "[1, 2"]),
        "3\tfailed\t2".to_string(),
        String::new(),
    ] {
        assert_eq!(parse_line(&bad), None, "{bad:?}");
    }
    let err = parse_list(&format!("{ok}\nrm -rf /\x1b[2J\n")).expect_err("a bad line");
    assert!(
        err.contains("not a job's") && !err.contains('\x1b'),
        "{err:?}"
    );
    let both = parse_list(&format!("{ok}\n{done}\n{ok}\n\n")).expect("two jobs");
    assert_eq!(
        both.iter().map(|j| j.id.get()).collect::<Vec<_>>(),
        [3, 6],
        "in number order, each once"
    );
}

#[test]
fn a_submission_carries_every_word_exactly_and_no_word_reaches_a_shell() {
    let hostile: Vec<String> = [
        "python",
        "-c",
        "import sys; print(sys.argv)",
        "it's",
        "$HOME",
        "`id`",
        ";",
        "a\nb",
        "",
        "--lr=0.1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let argv: Vec<String> = ["horovodrun", "-np", "3"]
        .iter()
        .map(|s| s.to_string())
        .chain(hostile.iter().cloned())
        .collect();
    let script = submit_script(&argv, &hostile, 3, false, false);
    assert!(!script.contains("timeline"), "{script}");
    for word in [
        "import sys; print(sys.argv)",
        "it's",
        "$HOME",
        "`id`",
        "a\nb",
    ] {
        assert!(!script.contains(word), "{word:?} reached the script raw");
    }
    // the two base64 payloads decode to the words
    let payloads: Vec<Vec<u8>> = script
        .lines()
        .filter_map(|l| l.strip_prefix("printf '%s' '"))
        .filter_map(|l| l.split('\'').next())
        .map(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b)
                .expect("base64")
        })
        .collect();
    assert_eq!(payloads.len(), 2, "{script}");
    let words: Vec<String> = payloads[0]
        .split(|b| *b == 0)
        .map(|w| String::from_utf8(w.to_vec()).expect("utf-8"))
        .collect();
    assert_eq!(
        words[..words.len() - 1],
        argv[..],
        "NUL-separated, ending in one"
    );
    let command: Vec<String> = serde_json::from_slice(&payloads[1]).expect("json");
    assert_eq!(command, hostile);
    assert!(script.contains("setsid -f bash"), "{script}");
    // and bash reads it, and the runner
    for text in [script.as_str(), crate::templates::JOB_RUNNER] {
        assert_eq!(crate::render::bash_syntax_error(text), None);
    }
    // what it prints: the jobs before it, then its number
    let before = "4\tsucceeded\t0\t1\t2\t3\t3\t0\t0\t[]\n3\trunning\t\t1\t2\t\t3\t0\t1\t[]";
    let (ahead, id) = parse_submitted(&format!("{before}\nid=12\n")).expect("submitted");
    assert_eq!(id.get(), 12);
    assert_eq!(
        ahead
            .iter()
            .map(|j| (j.id.get(), j.state))
            .collect::<Vec<_>>(),
        [(3, State::Running), (4, State::Succeeded)]
    );
    assert_eq!(
        parse_submitted("id=1").map(|(a, id)| (a.len(), id.get())),
        Ok((0, 1))
    );
    for bad in [
        "",
        "id=",
        "id=0",
        "id=12; rm",
        "id=-3",
        "id=12\nnoise",
        "noise\nid=12",
    ] {
        assert!(parse_submitted(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_kill_report_and_a_table_are_read_and_shown() {
    assert_eq!(parse_killed("killed=4 left=0\n"), Some((4, 0)));
    assert_eq!(parse_killed("x\nkilled=0 left=1"), Some((0, 1)));
    for bad in ["", "killed=a left=0", "killed=1", "left=0 killed=1"] {
        assert_eq!(parse_killed(bad), None, "{bad:?}");
    }
    assert_eq!(duration(5), "5s");
    assert_eq!(duration(65), "1m 05s");
    assert_eq!(duration(7380), "2h 03m");
    let jobs = parse_list(
        &[
            line([
                "1",
                "succeeded",
                "0",
                "100",
                "110",
                "175",
                "3",
                "0",
                "0",
                r#"["python","a.py"]"#,
            ]),
            line([
                "2",
                "running",
                "",
                "100",
                "180",
                "",
                "3",
                "1",
                "1",
                r#"["python","b c.py","\u001b[31m"]"#,
            ]),
            line([
                "3",
                "queued",
                "",
                "100",
                "",
                "",
                "3",
                "0",
                "1",
                r#"["sleep","1"]"#,
            ]),
        ]
        .join("\n"),
    )
    .expect("jobs");
    let shown = table(&jobs, 200);
    let rows: Vec<&str> = shown.lines().collect();
    assert_eq!(rows.len(), 4, "{shown}");
    assert!(rows[0].starts_with(" JOB  STATE"), "{shown}");
    assert!(
        rows[1].contains("succeeded")
            && rows[1].contains("1m 05s")
            && rows[1].ends_with("python a.py"),
        "{shown}"
    );
    assert!(
        rows[2].contains("running") && rows[2].contains("3e") && rows[2].contains("20s"),
        "{shown}"
    );
    assert!(
        rows[2].contains("'b c.py'") && !shown.contains('\x1b'),
        "{shown:?}"
    );
    assert!(
        rows[3].contains("queued") && rows[3].contains(" -  "),
        "{shown}"
    );
}

/// The check lock's script and the runner, run by bash in a folder of their own (the jobs'
/// folder moved there): a running job refuses the claim, a held lock says so, and a job
/// whose turn comes waits while a claim holds the lock.
#[test]
fn a_claim_on_the_slots_and_the_runner_keep_out_of_each_others_way() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = dir.path().join("jobs");
    let jobs_s = jobs.to_str().expect("utf-8 path");
    let moved = |text: &str| text.replace(JOBS_DIR, jobs_s);
    let claim = |claim: SlotClaim| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(moved(&claim_slots("echo RAN", claim)))
            .output()
            .expect("bash");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // no runner yet (no job ever submitted): the command runs
    assert_eq!(claim(SlotClaim::Alone).trim(), "RAN");
    let runner = jobs.join("job_runner.sh");
    std::fs::write(&runner, moved(crate::templates::JOB_RUNNER)).expect("runner");
    assert_eq!(claim(SlotClaim::Alone).trim(), "RAN", "no job: it runs");

    // job 1 running: a process whose command line is its runner's
    let job1 = jobs.join("1");
    std::fs::create_dir(&job1).expect("job 1");
    let mut runner1 = Command::new("bash")
        .args(["-c", "sleep 30; :", "job_runner.sh", "run", "1", "x"])
        .spawn()
        .expect("runner of job 1");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    for (file, text) in [
        ("runner.pid", runner1.id().to_string()),
        ("boot", boot.trim().to_string()),
        ("state", "running".into()),
        ("slots", "2".into()),
        ("command.json", "[\"python\",\"train.py\"]".into()),
    ] {
        std::fs::write(job1.join(file), format!("{text}\n")).expect("job file");
    }
    let out = claim(SlotClaim::Alone);
    match slots_refused(&out) {
        Ok(Some(SlotsRefusal::JobsAhead(ahead))) => {
            assert_eq!(ahead.len(), 1, "{out}");
            assert_eq!((ahead[0].id.get(), ahead[0].state), (1, State::Running));
        }
        other => panic!("not refused for job 1: {other:?}\n{out}"),
    }
    assert!(!out.contains("RAN"), "{out}");
    // beside jobs (the check of `scale`): it runs
    assert_eq!(claim(SlotClaim::BesideJobs).trim(), "RAN");
    let _ = runner1.kill();
    let _ = runner1.wait();
    // job 1's runner gone: no longer live, the claim runs
    assert_eq!(claim(SlotClaim::Alone).trim(), "RAN");
    std::fs::write(job1.join("state"), "succeeded\n").expect("state");

    // another claim holds the lock: refused at once
    let lock = jobs.join(".check");
    // -o: flock alone holds the lock (not its sleep), so that killing it frees the lock
    let mut holder = Command::new("flock")
        .arg("-o")
        .arg(&lock)
        .args(["sleep", "30"])
        .spawn()
        .expect("flock");
    let held = Instant::now();
    while claim(SlotClaim::Alone).trim() != "HVD_SLOTS_BUSY" {
        assert!(
            held.elapsed() < Duration::from_secs(10),
            "the lock never taken"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        slots_refused("HVD_SLOTS_BUSY\n"),
        Ok(Some(SlotsRefusal::Busy))
    );

    // job 2 queued while the lock is held: its runner waits for the claim to end
    let job2 = jobs.join("2");
    std::fs::create_dir(&job2).expect("job 2");
    std::fs::write(job2.join("argv"), b"true\0").expect("argv");
    std::fs::write(job2.join("state"), "queued\n").expect("state");
    let mut runner2 = Command::new("bash")
        .arg(&runner)
        .args(["run", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("runner of job 2");
    std::thread::sleep(Duration::from_secs(5));
    let state = || {
        std::fs::read_to_string(job2.join("state"))
            .expect("state")
            .trim()
            .to_string()
    };
    assert_eq!(state(), "queued", "job 2 started beside a held claim");
    let _ = holder.kill();
    let _ = holder.wait();
    let freed = Instant::now();
    while state() == "queued" {
        assert!(
            freed.elapsed() < Duration::from_secs(15),
            "job 2 still queued after the claim ended"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = runner2.kill();
    let _ = runner2.wait();
}

/// `run --timeline` marks the job before its runner starts (the runner reads the mark when
/// the job's turn comes); the job's folders on /shared are named by its number alone.
#[test]
fn a_timeline_is_marked_before_the_runner_starts() {
    let argv = vec!["horovodrun".to_string()];
    let script = submit_script(&argv, &[], 2, false, true);
    let mark = script.find(": > \"$d/timeline\"").expect("the mark");
    let runner = script.find("setsid -f bash").expect("the runner");
    assert!(mark < runner, "{script}");
    let id = JobId::parse("12").unwrap();
    assert_eq!(shared_dir(id), "/shared/jobs/12");
    assert_eq!(timeline_path(id), "/shared/jobs/12/timeline.json");
    assert_eq!(log_dir(id), "/shared/logs/12");
}
