//! `top`: every node's CPU, memory, GPUs, network and free room, and the running job, read
//! over the cluster's own SSH ([`crate::top`] is the pure part: the script each node runs,
//! its grammar, the rates, the table). One connection per node, kept for the whole view
//! (workers through the master, as every command reaches them); nothing is installed on the
//! nodes and nothing listens there. `--once` (or `--json`) prints one snapshot, from two
//! readings a second apart for the rates; without it a view refreshed every `--interval`
//! seconds until `q` or Ctrl-C, which leave the terminal as it was.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::time::Duration;

use futures::future::join_all;

use crate::cluster::{self, Existing};
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::plan::Role;
use crate::ssh::{self, Ssh};
use crate::state::Node;
use crate::top::{self, NodeRow, Reading, Snapshot};

/// How long a node may take to connect or to answer one reading before its row says it is
/// not answering: the view never waits longer on one node.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the live view asks the cloud (or Docker) which nodes the cluster has, so that a
/// node `scale` adds or removes shows up.
const NODES_EVERY: Duration = Duration::from_secs(15);

/// One node as the view knows it: its connection (none until one succeeds, dropped when it
/// fails) and its last reading, for the rates.
struct Watched {
    node: Node,
    ssh: Option<Ssh>,
    last: Option<Reading>,
}

impl Watched {
    fn new(node: Node) -> Watched {
        Watched {
            node,
            ssh: None,
            last: None,
        }
    }

    fn role(&self) -> &'static str {
        if self.node.role == Role::Master {
            "master"
        } else {
            "worker"
        }
    }

    /// One reading (connecting first where needed), bounded by [`NODE_TIMEOUT`] for each
    /// step: the node's row, and the job when this is the master.
    async fn refresh(&mut self, config: &Path) -> (NodeRow, Option<top::RunningJob>) {
        match self.read(config).await {
            Ok(reading) => {
                let row = top::node_row(&self.node.name, self.role(), self.last.as_ref(), &reading);
                let job = reading.job.clone();
                self.last = Some(reading);
                (row, job)
            }
            Err(why) => {
                // a new connection next time; no rate across the gap
                if let Some(ssh) = self.ssh.take() {
                    tokio::spawn(ssh.close());
                }
                self.last = None;
                (top::silent_row(&self.node.name, self.role(), &why), None)
            }
        }
    }

    async fn read(&mut self, config: &Path) -> Result<Reading, String> {
        if self.ssh.is_none() {
            let connected =
                tokio::time::timeout(NODE_TIMEOUT, Ssh::connect(config, &self.node.name))
                    .await
                    .map_err(|_| format!("no SSH within {}s", NODE_TIMEOUT.as_secs()))?
                    .map_err(|e| ssh::why_no_ssh(&e.to_string()))?;
            self.ssh = Some(connected);
        }
        let Some(ssh) = &self.ssh else {
            return Err("no SSH".into());
        };
        // Root only on the master, for the job runner's folder; a worker's figures are
        // readable by the SSH user, and a sudo a second would fill its auth log.
        let master = self.node.role == Role::Master;
        let script = top::probe_script(master);
        let reply = async {
            if master {
                ssh.sudo(&script).await
            } else {
                ssh.run(&script).await
            }
        };
        let out = tokio::time::timeout(NODE_TIMEOUT, reply)
            .await
            .map_err(|_| format!("no reply within {}s", NODE_TIMEOUT.as_secs()))?
            .map_err(|e| ssh::why_no_ssh(&ssh::error_chain(&e)))?;
        top::parse_reading(&out).ok_or_else(|| "its reply was cut off".to_string())
    }
}

/// Every node's reading at once; the rows in the cluster's order (master first).
async fn refresh_all(watched: &mut [Watched], config: &Path, cluster: &str) -> Snapshot {
    let started = std::time::Instant::now();
    let results = join_all(watched.iter_mut().map(|w| w.refresh(config))).await;
    let read_secs = started.elapsed().as_secs_f64();
    let mut job = None;
    let mut nodes = Vec::new();
    for (row, j) in results {
        job = job.or(j);
        nodes.push(row);
    }
    Snapshot {
        cluster: cluster.to_string(),
        nodes,
        job,
        read_secs,
    }
}

/// The nodes the provider lists now, those already watched keeping their connection.
fn follow_nodes(watched: Vec<Watched>, now: Vec<Node>) -> Vec<Watched> {
    let mut old = watched;
    let mut next: Vec<Watched> = now
        .into_iter()
        .map(|n| match old.iter().position(|w| w.node.name == n.name) {
            Some(i) => {
                let mut w = old.swap_remove(i);
                w.node = n;
                w
            }
            None => Watched::new(n),
        })
        .collect();
    for gone in old {
        if let Some(ssh) = gone.ssh {
            tokio::spawn(ssh.close());
        }
    }
    next.sort_by(|a, b| {
        (a.node.role != Role::Master, &a.node.name)
            .cmp(&(b.node.role != Role::Master, &b.node.name))
    });
    next
}

pub async fn top(
    ctx: &Context,
    file: &Path,
    once: bool,
    json: bool,
    interval: u64,
) -> Result<u8, Error> {
    if !(1..=60).contains(&interval) {
        return Err(Error::Usage(format!(
            "--interval: {} seconds; give 1 to 60",
            interval
        )));
    }
    let existing = match cluster::existing_or(ctx, file, Error::Stopped).await {
        Ok(existing) => existing,
        // A stopped cluster has nothing to show: say so, as `status` would.
        Err(Error::Stopped(message)) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "state": "stopped", "message": message })
                );
            } else {
                println!("{message}");
            }
            return Ok(0);
        }
        Err(e) => return Err(e),
    };
    let Existing {
        profile,
        provider,
        nodes,
        ..
    } = &existing;
    let reach = existing.reach();
    let config = reach.ssh_config().map_err(Error::from)?;
    let mut watched = follow_nodes(Vec::new(), nodes.clone());
    let cluster = profile.name.to_string();

    if once || json {
        refresh_all(&mut watched, &config, &cluster).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let snapshot = refresh_all(&mut watched, &config, &cluster).await;
        close_all(watched).await;
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(&snapshot)
                    .map_err(|e| Error::Runtime(format!("top --json: {e}")))?
            );
        } else {
            print!("{}", top::table(&snapshot));
        }
        return Ok(0);
    }

    let screen = Screen::enter();
    let mut keys = screen.keys();
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    let mut listed = tokio::time::Instant::now();
    loop {
        if listed.elapsed() >= NODES_EVERY {
            listed = tokio::time::Instant::now();
            if let Ok(now) = provider.nodes(&profile.name).await {
                let now = cluster::nodes_with_slots(profile, now);
                if !now.is_empty() {
                    let reach = cluster::Reach {
                        dir: reach.dir,
                        user: reach.user,
                        nodes: &now,
                    };
                    // a node `scale` added is reached through the same config, rewritten
                    if reach.ssh_config().is_ok() {
                        watched = follow_nodes(watched, now);
                    }
                }
            }
        }
        let started = tokio::time::Instant::now();
        let snapshot = refresh_all(&mut watched, &config, &cluster).await;
        screen.draw(&snapshot, interval);
        let next = started + Duration::from_secs(interval);
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = &mut ctrl_c => break,
            key = next_key(&mut keys) => match key {
                Some(b'q' | b'Q' | 3) => break,
                Some(_) => {}
                // stdin closed: no more keys, Ctrl-C still ends the view
                None => keys = None,
            },
        }
    }
    drop(screen);
    close_all(watched).await;
    Ok(0)
}

/// The next key, or never when the keyboard is not read.
async fn next_key(keys: &mut Option<tokio::sync::mpsc::Receiver<u8>>) -> Option<u8> {
    match keys {
        Some(k) => k.recv().await,
        None => std::future::pending().await,
    }
}

/// Closes the connections, waiting at most a few seconds: a node that stopped answering must
/// not hold the command.
async fn close_all(watched: Vec<Watched>) {
    let closing = join_all(watched.into_iter().filter_map(|w| w.ssh).map(|s| s.close()));
    let _ = tokio::time::timeout(Duration::from_secs(3), closing).await;
}

/// The terminal of the live view: on a terminal, the alternate screen with the cursor hidden
/// and the keyboard read key by key without echo; all of it given back when dropped (also
/// when the command ends with an error). Elsewhere (a pipe), each snapshot printed in turn.
struct Screen {
    interactive: bool,
    saved: Option<libc::termios>,
}

impl Screen {
    fn enter() -> Screen {
        let interactive = std::io::stdout().is_terminal();
        let mut saved = None;
        if interactive {
            print!("\x1b[?1049h\x1b[?25l");
            let _ = std::io::stdout().flush();
            if std::io::stdin().is_terminal() {
                saved = raw_keys();
            }
        }
        Screen { interactive, saved }
    }

    /// The keys typed, one byte each, from a thread of their own (stdin blocks); `None` when
    /// the keyboard is not read (no terminal).
    fn keys(&self) -> Option<tokio::sync::mpsc::Receiver<u8>> {
        self.saved?;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        {
            std::thread::spawn(move || {
                let mut byte = [0u8; 1];
                let mut stdin = std::io::stdin();
                while let Ok(1) = stdin.read(&mut byte) {
                    if tx.blocking_send(byte[0]).is_err() {
                        break;
                    }
                }
            });
        }
        Some(rx)
    }

    fn draw(&self, snapshot: &Snapshot, interval: u64) {
        let now = chrono::Local::now().format("%H:%M:%S");
        let head = format!(
            "hvd-cluster top: {}  {now}  every {interval}s (read in {:.2}s){}\n\n",
            input::shown(&snapshot.cluster),
            snapshot.read_secs,
            if self.saved.is_some() {
                ", q to quit"
            } else {
                ""
            }
        );
        let mut out = std::io::stdout().lock();
        if self.interactive {
            // home, the table, then clear whatever an older, longer table left below
            let body = top::table(snapshot).replace('\n', "\x1b[K\r\n");
            let _ = write!(
                out,
                "\x1b[H{}{body}\x1b[J",
                head.replace('\n', "\x1b[K\r\n")
            );
        } else {
            let _ = writeln!(out, "{head}{}", top::table(snapshot));
        }
        let _ = out.flush();
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        if let Some(saved) = self.saved.take() {
            // SAFETY: tcsetattr on stdin with the attributes tcgetattr gave for it.
            unsafe {
                libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &saved);
            }
        }
        if self.interactive {
            print!("\x1b[?25h\x1b[?1049l");
            let _ = std::io::stdout().flush();
        }
    }
}

/// The terminal's keys one at a time, unechoed (Ctrl-C still a signal); the attributes to
/// restore, `None` when stdin's cannot be read or set.
fn raw_keys() -> Option<libc::termios> {
    // SAFETY: a zeroed termios is a valid out-parameter; both calls act on stdin only.
    unsafe {
        let mut saved: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(libc::STDIN_FILENO, &mut saved) != 0 {
            return None;
        }
        let mut raw = saved;
        raw.c_lflag &= !(libc::ICANON | libc::ECHO);
        raw.c_cc[libc::VMIN] = 1;
        raw.c_cc[libc::VTIME] = 0;
        if libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) != 0 {
            return None;
        }
        Some(saved)
    }
}
