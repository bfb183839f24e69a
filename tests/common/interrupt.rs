//! A command interrupted where its own progress says it is: started, its stderr read line by
//! line until a marker shows, then signalled.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Spawns `cmd` (stderr piped, stdout dropped), waits up to `within` for a stderr line that
/// contains `marker`, then sends `signal` (`-INT`, `-KILL`) and waits for it to end. Returns
/// the stderr lines it printed. Ctrl-C must end it with 130.
pub fn at_marker(mut cmd: Command, signal: &str, marker: &str, within: Duration) -> Vec<String> {
    let what = format!("{:?}", cmd.get_args().collect::<Vec<_>>());
    let mut child = cmd
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run hvd-cluster");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[interrupted] {line}");
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + within;
    let mut said = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(line) => {
                let hit = line.contains(marker);
                said.push(line);
                if hit {
                    break;
                }
            }
            _ if Instant::now() > deadline => {
                let _ = child.kill();
                panic!("{what} never printed {marker:?}")
            }
            _ => {}
        }
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args([signal, &pid])
        .status()
        .expect("run kill")
        .success());
    let status = child.wait().expect("wait for hvd-cluster");
    assert!(!status.success(), "{what} was interrupted");
    if signal == "-INT" {
        assert_eq!(status.code(), Some(130), "Ctrl-C exits 130");
    }
    let _ = reader.join();
    said.extend(rx.try_iter());
    said
}
