use super::*;

const STAT: &str = "cpu  4705 356 584 3699 23 23 0 0 0 0";

#[test]
fn cpu_counts_idle_and_iowait_as_not_busy() {
    let t = parse_cpu(STAT).unwrap();
    assert_eq!(t.total, 4705 + 356 + 584 + 3699 + 23 + 23);
    assert_eq!(t.busy, t.total - 3699 - 23);
    assert_eq!(parse_cpu("cpu0 1 2 3 4"), None, "a single CPU's line");
    assert_eq!(parse_cpu("cpu 1 2 x 4"), None);
    assert_eq!(parse_cpu("cpu 1 2"), None);
    assert_eq!(parse_cpu(""), None);
}

#[test]
fn meminfo_reads_total_and_available() {
    let text = "MemTotal:       24609848 kB\nMemAvailable:   20000000 kB\n";
    assert_eq!(
        parse_meminfo(text),
        Some(Memory {
            total_kib: 24609848,
            available_kib: 20000000
        })
    );
    assert_eq!(parse_meminfo("MemTotal: 10 kB\n"), None, "no MemAvailable");
    assert_eq!(
        parse_meminfo("MemTotal: 10 kB\nMemAvailable: 11 kB\n"),
        None,
        "more available than there is"
    );
    assert_eq!(parse_meminfo("MemTotal: 10 MB\nMemAvailable: 1 kB\n"), None);
}

const NET_DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 9999999   100    0    0    0     0          0         0  9999999   100    0    0    0     0       0          0
  eth0: 1000      10    0    0    0     0          0         0     2000      20    0    0    0     0       0          0
  ens4: 300       3    0    0    0     0          0         0      400       4    0    0    0     0       0          0
docker0: 5555555  55    0    0    0     0          0         0  5555555      55    0    0    0     0       0          0
vethab12: 777     7    0    0    0     0          0         0      777       7    0    0    0     0       0          0
";

#[test]
fn net_dev_sums_the_nodes_own_interfaces() {
    assert_eq!(
        parse_net_dev(NET_DEV),
        Some(NetBytes {
            received: 1300,
            sent: 2400
        })
    );
    assert_eq!(
        parse_net_dev("  lo: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"),
        None
    );
    assert_eq!(parse_net_dev("eth0: 1 2 3\n"), None, "a line cut short");
}

#[test]
fn gpus_listed_unsupported_values_failed_and_absent() {
    assert_eq!(parse_gpus("none\n"), Gpus::None);
    assert_eq!(parse_gpus(""), Gpus::Unknown);
    let listed = parse_gpus(
        "rc=0\n0, 87, 30123, 40960, NVIDIA A100-SXM4-40GB\n1, [N/A], [N/A], 40960, NVIDIA A100, PCIe\n",
    );
    let Gpus::Listed { gpus } = listed else {
        panic!("{listed:?}")
    };
    assert_eq!(
        gpus[0],
        Gpu {
            index: 0,
            name: "NVIDIA A100-SXM4-40GB".into(),
            utilization_percent: Some(87),
            memory_used_mib: Some(30123),
            memory_total_mib: Some(40960),
        }
    );
    assert_eq!(gpus[1].utilization_percent, None);
    assert_eq!(gpus[1].memory_used_mib, None);
    assert_eq!(
        gpus[1].name, "NVIDIA A100, PCIe",
        "a comma in the name stays in it"
    );

    let failed = parse_gpus(
        "rc=9\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    );
    assert!(
        matches!(&failed, Gpus::Failed { message } if message.starts_with("nvidia-smi exited 9: NVIDIA-SMI has failed")),
        "{failed:?}"
    );
    let hostile = parse_gpus("rc=0\n0, 5, 1, 2, \u{1b}[2Jevil\n");
    let Gpus::Listed { gpus } = hostile else {
        panic!("{hostile:?}")
    };
    assert!(!gpus[0].name.contains('\u{1b}'), "{:?}", gpus[0].name);
    assert!(matches!(
        parse_gpus("rc=0\nnot, a gpu\n"),
        Gpus::Failed { .. }
    ));
    assert!(matches!(
        parse_gpus("rc=0\nx, 1, 2, 3, name\n"),
        Gpus::Failed { .. }
    ));
}

#[test]
fn disks_by_path_and_missing_ones_left_out() {
    let lines = [
        "path /shared 10.0.0.5:/shared 105088212992 2000 100000000000 2% /shared",
        "path /var/lib/docker ",
        "path /etc/passwd /dev/sda 1 1 1 1% /",
    ];
    assert_eq!(
        parse_disks(&lines),
        vec![Disk {
            path: "/shared".into(),
            size_bytes: 105088212992,
            available_bytes: 100000000000,
        }]
    );
}

#[test]
fn rates_from_tqdm_and_horovods_benchmarks() {
    assert_eq!(
        parse_rate(&[
            "Train Epoch     #1:  50%|#####     | 5/10 [00:02<00:02,  2.31it/s, loss=6.91]"
        ]),
        Some("2.31 it/s".into())
    );
    assert_eq!(
        parse_rate(&["Iter #3: 123.4 img/sec per GPU", "other"]),
        Some("123.4 img/sec".into())
    );
    assert_eq!(
        parse_rate(&["a\r10%| 1/10 [00:01<00:09, 1.5img/s]\r20%| 2/10 [00:02<00:08, 1.7img/s]"]),
        Some("1.7 img/s".into())
    );
    assert_eq!(parse_rate(&["epoch 3 loss 0.5"]), None);
    assert_eq!(parse_rate(&["NaN img/s"]), None);
}

fn reading_text(uptime: &str, stat: &str, rx: u64, tx: u64, master: bool) -> String {
    let mut s = format!(
        "noise before\n@hvd-top uptime\n{uptime} 10.0\n@hvd-top stat\n{stat}\n\
         @hvd-top meminfo\nMemTotal: 2048000 kB\nMemAvailable: 1024000 kB\n\
         @hvd-top net\n  eth0: {rx} 1 0 0 0 0 0 0 {tx} 1 0 0 0 0 0 0\n\
         @hvd-top gpu\nnone\n@hvd-top disk\n\
         path /shared 10.0.0.5:/shared 1000 10 990 1% /shared\n"
    );
    if master {
        s.push_str(
            "@hvd-top jobs\n7\trunning\t\t100\t110\t\t3\t0\t1\t[\"python\",\"train.py\"]\n\
             @hvd-top log\nstep 1\n\u{1b}[31mIter #2: 50.5 img/sec per GPU\n\n\
             @hvd-top now\n200\n",
        );
    }
    s.push_str("@hvd-top end\n@hvd-top uptime\n999\n");
    s
}

/// Two of the master's readings two seconds apart: 100 of 200 ticks busy, 2048 bytes in.
enum Moment {
    Before,
    Now,
}

fn master_reading(at: Moment) -> Reading {
    let text = match at {
        Moment::Before => reading_text("100.0", "cpu 100 0 100 800 0 0 0 0", 1000, 5000, true),
        Moment::Now => reading_text("102.0", "cpu 200 0 100 900 0 0 0 0", 3048, 5000, true),
    };
    parse_reading(&text).unwrap()
}

#[test]
fn a_reading_and_the_rates_between_two() {
    let before = master_reading(Moment::Before);
    let now = master_reading(Moment::Now);
    assert_eq!(
        now.uptime_secs,
        Some(102.0),
        "the first reading's, not the one after its end"
    );
    let job = now.job.clone().unwrap();
    assert_eq!(job.id, 7);
    assert_eq!(job.elapsed_secs, Some(90));
    assert_eq!(job.command, "python train.py");
    assert_eq!(job.rate.as_deref(), Some("50.5 img/sec"));
    let last = job.last_line.unwrap();
    assert!(
        last.ends_with("Iter #2: 50.5 img/sec per GPU") && !last.contains('\u{1b}'),
        "{last}"
    );

    let row = node_row("c-master", "master", Some(&before), &now);
    assert_eq!(row.cpu_percent, Some(50.0));
    assert_eq!(row.net_receive_bytes_per_sec, Some(1024.0));
    assert_eq!(row.net_send_bytes_per_sec, Some(0.0));
    assert_eq!(row.gpus, Gpus::None);
    let first = node_row("c-master", "master", None, &now);
    assert_eq!(first.cpu_percent, None, "no rate from one reading");

    assert_eq!(
        parse_reading("@hvd-top uptime\n1.0\n"),
        None,
        "cut off before its end"
    );
    let worker = parse_reading(&reading_text("1", "cpu 1 1 1 1", 0, 0, false)).unwrap();
    assert_eq!(worker.job, None);
    // a job line that does not fit the runner's grammar is no job
    let odd = reading_text("1", "cpu 1 1 1 1", 0, 0, true).replace("7\trunning", "x\trunning");
    assert_eq!(parse_reading(&odd).unwrap().job, None);
}

#[test]
fn the_table_shows_every_node_a_silent_one_and_the_job() {
    let now = master_reading(Moment::Now);
    let before = master_reading(Moment::Before);
    let snapshot = Snapshot {
        cluster: "c".into(),
        nodes: vec![
            node_row("c-master", "master", Some(&before), &now),
            silent_row("c-worker-1", "worker", "connection refused\n\u{1b}[2J"),
        ],
        job: now.job.clone(),
        read_secs: 0.25,
    };
    let text = table(&snapshot);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("NODE") && lines[0].contains("GPU"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("c-master")
            && lines[1].contains("50%")
            && lines[1].contains("1000.0 MiB/2.0 GiB")
            && lines[1].contains("no GPU")
            && lines[1].contains("1.0 KiB/s in, 0 B/s out")
            && lines[1].contains("/shared 990 B free"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("c-worker-1")
            && lines[2].contains("not answering: connection refused\\n"),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "{text}");
    assert!(
        lines[3].starts_with("job 7: running 1m 30s, python train.py, 50.5 img/sec"),
        "{text}"
    );
    let json = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(json["nodes"][0]["gpus"]["state"], "none");
    assert_eq!(json["nodes"][0]["cpu_percent"], 50.0);
    assert_eq!(json["job"]["id"], 7);
}

#[test]
fn the_probe_runs_on_this_machine_and_reads_back() {
    // The script as a node runs it (bash, this machine's /proc): every section parses.
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(probe_script(false))
        .output()
        .expect("bash");
    let text = String::from_utf8_lossy(&out.stdout);
    let r = parse_reading(&text).unwrap_or_else(|| panic!("{text}"));
    assert!(
        r.uptime_secs.is_some() && r.cpu.is_some() && r.memory.is_some(),
        "{text}"
    );
    assert!(
        matches!(
            r.gpus,
            Gpus::None | Gpus::Listed { .. } | Gpus::Failed { .. }
        ),
        "{text}"
    );
    assert!(probe_script(true).contains("@hvd-top jobs"));
    assert!(!probe_script(false).contains("@hvd-top jobs"));
}

/// The probe as a node runs it, here in this machine's bash: its output parses, with every
/// figure but the GPUs' (none here) and the master's job (no runner here).
#[test]
fn the_probe_runs_in_bash_and_its_output_parses() {
    for master in [false, true] {
        let out = std::process::Command::new("bash")
            .args(["-c", &probe_script(master)])
            .output()
            .expect("bash");
        let text = String::from_utf8_lossy(&out.stdout);
        let reading = parse_reading(&text).unwrap_or_else(|| panic!("{text}"));
        assert!(reading.uptime_secs.is_some_and(|u| u > 0.0), "{text}");
        assert!(reading.cpu.is_some_and(|c| c.total > 0), "{text}");
        assert!(reading.memory.is_some(), "{text}");
        assert!(reading.net.is_some(), "{text}");
        assert!(
            reading.disks.iter().any(|d| d.size_bytes > 0),
            "df of / holds at least one of the paths' file systems: {text}"
        );
        assert_eq!(reading.job, None, "{text}");
    }
}

#[test]
fn the_jobs_last_line_is_a_ranks_not_the_launchers_notices() {
    let job =
        jobs::parse_line("7\trunning\t\t100\t110\t\t3\t0\t1\t[\"python\",\"train.py\"]").unwrap();
    // Several ranks' lines, then what TensorFlow prints on an AVX-512 processor when
    // horovodrun's framework probe imports it: a notice over two lines, neither tagged.
    let log = [
        "[1]<stdout>:epoch 1: 12.5 img/sec",
        "[0]<stdout>:epoch 1: 12.5 img/sec",
        "2026-12-07 14:00:00.0: I tensorflow/core/platform/cpu_feature_guard.cc:182] This TensorFlow binary is optimized to use available CPU instructions in performance-critical operations.",
        "To enable the following instructions: AVX2 AVX512F AVX512_VNNI, in other operations, rebuild TensorFlow with the appropriate compiler flags.",
        "",
    ];
    let running = running_job(&job, &log, Some(120));
    assert_eq!(
        running.last_line.as_deref(),
        Some("[0]<stdout>:epoch 1: 12.5 img/sec")
    );
    assert_eq!(running.rate.as_deref(), Some("12.5 img/sec"));
    // Under MPI the tag has two numbers; a log with no rank's line yet shows its last line.
    assert!(is_rank_output("[1,0]<stderr>:x"));
    for untagged in [
        "[]<stdout>:x",
        "[a]<stdout>:x",
        "[0]<stdin>:x",
        "[0 <stdout>:x",
        "0]",
    ] {
        assert!(!is_rank_output(untagged), "{untagged}");
    }
    let launching = running_job(&job, &["Launching horovod task function", "  "], None);
    assert_eq!(
        launching.last_line.as_deref(),
        Some("Launching horovod task function")
    );
    assert_eq!(launching.rate, None);
    assert_eq!(launching.elapsed_secs, None);
}
