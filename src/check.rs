//! The acceptance check, also the last step of `up`: the Horovod container runs on every
//! node, a file written to /shared on the master is read on a worker (over NFS where the
//! master serves it), Jupyter answers with its page title, and a real `horovodrun` over every
//! slot allreduces a known tensor with every rank reporting its host.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use crate::bootstrap::{host_slots, NodeSession, NODE_DIR};
use crate::jobs::{claim_slots, slots_refused, SlotClaim, SlotsRefusal};
use crate::mpi::mpi_args;
use crate::profile::{Collective, Profile, StorageKind};
use crate::ssh::shell_quote;
use crate::wait::{wait_until, Probe, WaitError};

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("check `{check}` failed: {detail}")]
    Failed { check: &'static str, detail: String },
    /// Its horovodrun did not start: jobs or another check hold the slots.
    #[error("the check's horovodrun did not start: {}", .0.describe())]
    SlotsTaken(SlotsRefusal),
}

fn failed(check: &'static str, detail: impl Into<String>) -> CheckError {
    CheckError::Failed {
        check,
        detail: detail.into(),
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Bandwidth {
    pub size_mib: u32,
    pub ms: f64,
    pub algbw_mibps: f64,
    pub busbw_mibps: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct CheckReport {
    pub containers: usize,
    pub shared_read_on: Option<String>,
    /// Nodes whose /shared is a kernel NFS mount, as `node (fstype source)`; checked on
    /// every node whose bootstrap chose kernel NFS (container nodes use the stand-in).
    pub shared_kernel_mounts: Vec<String>,
    pub jupyter_title: Option<String>,
    pub ranks: usize,
    pub hosts: Vec<String>,
    pub bandwidth: Vec<Bandwidth>,
    /// The controller every rank said Horovod ran on (`mpi` or `gloo`).
    pub controller: String,
}

/// What horovodrun's command line needs of a node: its slots and the interface that holds
/// its private address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchNode<'a> {
    pub slots: u32,
    pub iface: &'a str,
}

/// The launch facts of connected nodes.
pub fn launch_nodes(sessions: &[NodeSession]) -> Vec<LaunchNode<'_>> {
    sessions
        .iter()
        .map(|s| LaunchNode {
            slots: s.host.slots(),
            iface: &s.iface,
        })
        .collect()
}

/// The `horovodrun` command line for every slot of `nodes` (master first), the master's
/// included. `user_mpi_args`: the user's own Open MPI arguments, already checked by
/// [`check_mpi_args`]. Pure.
pub fn horovodrun_args(
    p: &Profile,
    nodes: &[LaunchNode<'_>],
    elastic: Option<(u32, u32)>,
    user_mpi_args: Option<&str>,
) -> Vec<String> {
    let slots: u32 = nodes.iter().map(|n| n.slots).sum();
    let mut ifaces: Vec<String> = nodes
        .iter()
        .map(|n| n.iface.to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    ifaces.retain(|i| !i.is_empty() && i != "docker0");
    // Horovod's elastic mode runs on Gloo whatever the profile says.
    let mpi = p.container.collective == Collective::Mpi && elastic.is_none();
    let mut args = vec![
        "horovodrun".to_string(),
        if mpi { "--mpi" } else { "--gloo" }.into(),
        "-p".into(),
        p.container.ssh_port.to_string(),
        "-i".into(),
        "/root/.ssh/id_ed25519".into(),
    ];
    // With the master alone, horovodrun runs every rank locally over 127.0.0.1 and rejects an
    // interface list; an elastic job may gain remote hosts, so it always gets one.
    let remote = nodes.len() > 1 || elastic.is_some();
    if remote {
        args.extend(["--network-interfaces".into(), ifaces.join(",")]);
    }
    if mpi {
        let ifaces = if remote { &ifaces[..] } else { &[] };
        if let Some(extra) = mpi_args(ifaces, user_mpi_args) {
            args.extend(["--mpi-args".into(), extra]);
        }
    }
    match elastic {
        None => {
            args.extend([
                "-np".into(),
                slots.to_string(),
                "--hostfile".into(),
                format!("{NODE_DIR}/hostfile"),
            ]);
        }
        Some((min, max)) => {
            args.extend([
                "-np".into(),
                min.max(1).to_string(),
                "--min-np".into(),
                min.max(1).to_string(),
                "--max-np".into(),
                max.to_string(),
                "--start-timeout".into(),
                "600".into(),
                "--host-discovery-script".into(),
                format!("{NODE_DIR}/discover_hosts.sh"),
            ]);
        }
    }
    args
}

/// Seconds Gloo waits for the other ranks in the check's job.
pub const GLOO_TIMEOUT_SECS: u32 = 300;

/// What a failed job said that tells why: the lines naming a cause (a C++ exception's
/// `what()`, an error, a timeout, an abort), wherever they are in the output (the ranks'
/// lines come before horovodrun's own traceback), then the last lines; at most 25.
pub fn failure_excerpt(out: &str) -> String {
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail_from = lines.len().saturating_sub(12);
    let telling = |l: &&&str| {
        let l = l.to_ascii_lowercase();
        [
            "terminate called",
            "what()",
            "error",
            "timeout",
            "timed out",
            "abort",
            "killed",
            "exception",
        ]
        .iter()
        .any(|k| l.contains(k))
            && !l.contains("traceback")
    };
    let mut picked: Vec<&str> = lines[..tail_from].iter().filter(telling).copied().collect();
    picked.truncate(13);
    if picked.len() < tail_from && !picked.is_empty() {
        picked.push("...");
    }
    picked.extend(&lines[tail_from..]);
    picked.join("\n")
}

/// Parses the check job's output into the ranks' hosts and the bandwidth lines.
pub fn parse_job_output(out: &str) -> (Vec<(u32, String, bool)>, Vec<Bandwidth>) {
    let field = |line: &str, key: &str| -> Option<String> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_string))
    };
    let mut ranks = Vec::new();
    let mut bw = Vec::new();
    for line in out.lines() {
        if let Some(i) = line.find("HVD_RANK ") {
            let l = &line[i..];
            if let (Some(rank), Some(host), Some(ok)) =
                (field(l, "rank"), field(l, "host"), field(l, "ok"))
            {
                if let Ok(rank) = rank.parse() {
                    ranks.push((rank, host, ok == "True"));
                }
            }
        } else if let Some(i) = line.find("HVD_BW ") {
            let l = &line[i..];
            let num = |k: &str| field(l, k).and_then(|v| v.parse::<f64>().ok());
            if let (Some(size), Some(ms), Some(alg), Some(bus)) = (
                num("size_mib"),
                num("ms"),
                num("algbw_mibps"),
                num("busbw_mibps"),
            ) {
                bw.push(Bandwidth {
                    size_mib: size as u32,
                    ms,
                    algbw_mibps: alg,
                    busbw_mibps: bus,
                });
            }
        }
    }
    ranks.sort();
    ranks.dedup_by_key(|r| r.0);
    (ranks, bw)
}

/// Where this machine reaches Jupyter (a tunnel, a published port, the floating IP), and for
/// HTTPS the SHA-256 fingerprint of the only certificate accepted there.
#[derive(Debug, Clone, Copy)]
pub struct JupyterAt<'a> {
    pub url: &'a str,
    pub fingerprint: Option<&'a str>,
}

/// Runs the four checks.
pub async fn run(
    p: &Profile,
    sessions: &[NodeSession],
    jupyter: Option<JupyterAt<'_>>,
    claim: SlotClaim,
) -> Result<CheckReport, CheckError> {
    let mut report = CheckReport::default();
    let master = sessions
        .first()
        .ok_or_else(|| failed("nodes", "the cluster has no nodes"))?;

    // 1. The Horovod container runs on every node.
    for s in sessions {
        let state = s
            .ssh
            .sudo("docker inspect -f '{{.State.Running}}' hvd")
            .await
            .map_err(|e| failed("containers", e.to_string()))?;
        if state.trim() != "true" {
            return Err(failed(
                "containers",
                format!("the Horovod container is not running on {}", s.node.name),
            ));
        }
        report.containers += 1;
    }

    // 2. A file written on the master's /shared is read on a worker.
    if p.storage.kind != StorageKind::None {
        let token = format!("hvd-check-{:016x}", rand::random::<u64>());
        let file = format!("/shared/.hvd-check-{}", &token[10..]);
        master
            .ssh
            .sudo(&format!("docker exec hvd sh -c 'echo {token} > {file}'"))
            .await
            .map_err(|e| failed("shared", e.to_string()))?;
        let reader = sessions.get(1).unwrap_or(master);
        let master_ip = master.node.private_ip.clone().unwrap_or_default();
        // Over the NFS protocol where the master serves it (userspace client: no kernel NFS needed).
        let nfs_read = if p.storage.kind == StorageKind::MasterNfs {
            format!(
                "nfs-cat {} 2>/dev/null || docker exec hvd cat {file}",
                shell_quote(&format!("nfs://{master_ip}{file}?version=4"))
            )
        } else {
            format!("docker exec hvd cat {file}")
        };
        let got = reader
            .ssh
            .sudo(&nfs_read)
            .await
            .map_err(|e| failed("shared", e.to_string()))?;
        let _ = master.ssh.sudo(&format!("rm -f {file}")).await;
        if got.trim() != token {
            return Err(failed(
                "shared",
                format!(
                    "{} read {:?} from {file}, not what the master wrote",
                    reader.node.name,
                    got.trim()
                ),
            ));
        }
        report.shared_read_on = Some(reader.node.name.clone());
    }

    // 2b. Where bootstrap mounted /shared with the kernel client (VMs; Manila everywhere),
    // it is an NFS mount of the master's export (or of the share) on every such node.
    if p.storage.kind != StorageKind::None {
        let master_ip = master.node.private_ip.clone().unwrap_or_default();
        let mounters: Vec<&NodeSession> = if p.storage.kind == StorageKind::Manila {
            sessions.iter().collect()
        } else {
            sessions.iter().skip(1).collect()
        };
        for s in mounters {
            let out = s
                .ssh
                .sudo(&format!(
                    "echo \"mode=$(cat {NODE_DIR}/shared-mode 2>/dev/null)\"; findmnt -n -t nfs,nfs4 -o FSTYPE,SOURCE --mountpoint /shared || true"
                ))
                .await
                .map_err(|e| failed("shared", e.to_string()))?;
            if let Some(mount) = kernel_mount_problem(&out, p.storage.kind, &master_ip)
                .map_err(|why| failed("shared", format!("{}: {why}", s.node.name)))?
            {
                report
                    .shared_kernel_mounts
                    .push(format!("{} ({mount})", s.node.name));
            }
        }
    }

    // 3. Jupyter answers with its page title.
    if let Some(at) = jupyter {
        report.jupyter_title = Some(jupyter_title(at).await?);
    }

    // 4. A real horovodrun over every slot: all ranks join, each on its own host.
    let args = horovodrun_args(p, &launch_nodes(sessions), None, None);
    // The exit code travels in the output so that a failure still shows what horovodrun said.
    // Gloo's connect timeout (30 s by default) is shorter than the skew between ranks'
    // start-up on a busy or emulated node (TensorFlow's import alone takes a minute there);
    // horovodrun passes the variable on to every rank.
    let command = format!(
        "docker exec -e HOROVOD_GLOO_TIMEOUT_SECONDS={GLOO_TIMEOUT_SECS} hvd {} python {NODE_DIR}/check.py 2>&1; echo HVD_EXIT=$?",
        args.iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let out = master
        .ssh
        .sudo(&claim_slots(&command, claim))
        .await
        .map_err(|e| failed("horovodrun", e.to_string()))?;
    if let Some(refusal) = slots_refused(&out).map_err(|e| failed("horovodrun", e))? {
        return Err(CheckError::SlotsTaken(refusal));
    }
    let (ranks, bandwidth) = parse_job_output(&out);
    if !out.contains("HVD_EXIT=0") {
        return Err(failed(
            "horovodrun",
            format!("`{}` failed:\n{}", args.join(" "), failure_excerpt(&out)),
        ));
    }
    let expected: u32 = host_slots(sessions).iter().map(|h| h.slots()).sum();
    let joined: BTreeSet<String> = ranks.iter().map(|r| r.1.clone()).collect();
    let missing: Vec<&str> = sessions
        .iter()
        .map(|s| s.node.name.as_str())
        .filter(|n| !joined.contains(*n))
        .collect();
    if ranks.len() as u32 != expected || !missing.is_empty() {
        return Err(failed(
            "horovodrun",
            format!(
                "{} of {expected} ranks joined; no rank on: {}",
                ranks.len(),
                if missing.is_empty() {
                    "-".into()
                } else {
                    missing.join(", ")
                }
            ),
        ));
    }
    if let Some(bad) = ranks.iter().find(|r| !r.2) {
        return Err(failed(
            "horovodrun",
            format!("rank {} on {} got a wrong allreduce result", bad.0, bad.1),
        ));
    }
    let wanted = match p.container.collective {
        Collective::Gloo => "gloo",
        Collective::Mpi => "mpi",
    };
    let said = controllers(&out);
    if said.len() != 1 || !said.contains(wanted) {
        return Err(failed(
            "horovodrun",
            format!(
                "the ranks ran on controller(s) {:?}, not {wanted} as the profile's collective says",
                said
            ),
        ));
    }
    report.controller = wanted.to_string();
    report.ranks = ranks.len();
    report.hosts = joined.into_iter().collect();
    report.bandwidth = bandwidth;
    Ok(report)
}

/// The `controller=` values the check job's ranks printed (older check scripts print none).
pub fn controllers(out: &str) -> BTreeSet<String> {
    out.lines()
        .filter_map(|l| Some(&l[l.find("HVD_RANK ")?..]))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("controller=").map(str::to_string))
        })
        .collect()
}

/// Reads what a node reported about /shared (`mode=kernel-nfs|stand-in` then findmnt's
/// `FSTYPE SOURCE`): `Ok(Some("nfs4 10.0.0.2:/shared"))` for a right kernel mount,
/// `Ok(None)` for a stand-in node, `Err(why)` when a kernel-NFS node has no right mount.
pub fn kernel_mount_problem(
    report: &str,
    storage: StorageKind,
    master_ip: &str,
) -> Result<Option<String>, String> {
    let mut lines = report.lines();
    let mode = lines
        .next()
        .and_then(|l| l.strip_prefix("mode="))
        .unwrap_or("")
        .trim();
    if mode != "kernel-nfs" {
        return if storage == StorageKind::Manila {
            Err(format!(
                "/shared was not mounted from the Manila share (mode `{mode}`)"
            ))
        } else {
            Ok(None)
        };
    }
    let mount = lines
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>();
    match mount.as_slice() {
        [fstype, source] if matches!(*fstype, "nfs" | "nfs4") => {
            if storage == StorageKind::MasterNfs && *source != format!("{master_ip}:/shared") {
                return Err(format!(
                    "/shared is mounted from {source}, not from the master ({master_ip}:/shared)"
                ));
            }
            Ok(Some(format!("{fstype} {source}")))
        }
        _ => Err("/shared is not a kernel NFS mount (findmnt -t nfs,nfs4 finds none)".into()),
    }
}

/// GETs the Jupyter URL until it answers 200 with a `<title>`, for up to five minutes; over
/// HTTPS only from a server that offers the pinned certificate (the token is in the URL).
/// Five, not two: Jupyter Lab's first start on a busy or emulated node (its imports, its
/// extensions) took over a minute here, and a slow answer is no reason to fail a whole `up`.
pub async fn jupyter_title(at: JupyterAt<'_>) -> Result<String, CheckError> {
    let url = at.url;
    let timeout = Duration::from_secs(10);
    let client = match at.fingerprint {
        Some(pin) => crate::jupyter_tls::pinned_client(pin, timeout),
        None => reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| e.to_string()),
    }
    .map_err(|e| failed("jupyter", e))?;
    let client = &client;
    let waited = wait_until(
        Duration::from_secs(300),
        Duration::from_secs(2),
        move || async move {
            match client.get(url).send().await {
                Ok(resp) if resp.status().is_success() => {
                    let body = resp.text().await.unwrap_or_default();
                    match body
                        .split("<title>")
                        .nth(1)
                        .and_then(|t| t.split("</title>").next())
                    {
                        Some(title) => Probe::Ready(title.trim().to_string()),
                        None => Probe::Waiting("a page without a title".into()),
                    }
                }
                Ok(resp) => Probe::Waiting(format!("HTTP {}", resp.status())),
                Err(e) if e.is_connect() => Probe::Waiting("connection refused".into()),
                Err(e) => Probe::<String, ()>::Waiting(e.to_string()),
            }
        },
    )
    .await;
    waited.map_err(|e| {
        let last = match e {
            WaitError::TimedOut { last, .. } => last,
            WaitError::Failed(()) => String::new(),
        };
        // The URL carries the token: name only its origin.
        let origin = url.split('?').next().unwrap_or(url);
        failed(
            "jupyter",
            format!("{origin} did not answer with a page title within 120s (last: {last})"),
        )
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn kernel_nfs_nodes_must_show_an_nfs_mount_of_the_master() {
        let m = StorageKind::MasterNfs;
        assert_eq!(
            kernel_mount_problem("mode=kernel-nfs\nnfs4 10.0.0.2:/shared\n", m, "10.0.0.2"),
            Ok(Some("nfs4 10.0.0.2:/shared".into()))
        );
        assert_eq!(
            kernel_mount_problem("mode=stand-in\n", m, "10.0.0.2"),
            Ok(None)
        );
        assert!(kernel_mount_problem("mode=kernel-nfs\n", m, "10.0.0.2").is_err());
        assert!(
            kernel_mount_problem("mode=kernel-nfs\nnfs4 10.0.0.9:/shared\n", m, "10.0.0.2")
                .is_err()
        );
        let manila = StorageKind::Manila;
        assert_eq!(
            kernel_mount_problem(
                "mode=kernel-nfs\nnfs 10.254.0.7:/shares/s1\n",
                manila,
                "10.0.0.2"
            ),
            Ok(Some("nfs 10.254.0.7:/shares/s1".into()))
        );
        assert!(kernel_mount_problem("mode=\n", manila, "10.0.0.2").is_err());
    }
    use super::*;

    #[test]
    fn a_failed_job_shows_why_not_only_horovodrun_traceback() {
        let mut out = String::from("[1]<stderr>:2026 importing tensorflow\n");
        out.push_str(
            "[0]<stderr>:terminate called after throwing an instance of 'gloo::IoException'\n",
        );
        out.push_str(
            "[0]<stderr>:  what():  [gloo/transport/tcp/pair.cc:446] Timed out waiting for peer\n",
        );
        for i in 0..30 {
            out.push_str(&format!("  File \"launch.py\", line {i}, in run\n"));
        }
        out.push_str("Process 0 exit with status code 134.\nHVD_EXIT=1\n");
        let e = failure_excerpt(&out);
        assert!(e.contains("gloo::IoException"), "{e}");
        assert!(e.contains("Timed out waiting for peer"), "{e}");
        assert!(!e.contains("importing tensorflow"), "{e}");
        assert!(e.ends_with("HVD_EXIT=1"), "{e}");
        assert!(e.lines().count() <= 26, "{e}");
        // a short output is shown whole
        assert_eq!(failure_excerpt("a\n\nb\n"), "a\nb");
    }

    #[test]
    fn parses_ranks_and_bandwidth_from_horovodrun_output() {
        let out = "[1]<stdout>:HVD_RANK rank=1 size=3 host=c-worker-1 sum=6 expected=6 ok=True\n\
                   [0]<stdout>:HVD_RANK rank=0 size=3 host=c-master sum=6 expected=6 ok=True\n\
                   noise\n\
                   [2]<stdout>:HVD_RANK rank=2 size=3 host=c-worker-2 sum=5 expected=6 ok=False\n\
                   [0]<stdout>:HVD_BW size_mib=16 ms=80.5 algbw_mibps=198.8 busbw_mibps=265.0 ok=True\n";
        let (ranks, bw) = parse_job_output(out);
        assert!(controllers(out).is_empty());
        let mpi = "[1,0]<stdout>:HVD_RANK rank=0 size=2 host=m sum=3 expected=3 ok=True controller=mpi\n\
                   [1,1]<stdout>:HVD_RANK rank=1 size=2 host=w sum=3 expected=3 ok=True controller=mpi\n";
        assert_eq!(controllers(mpi), BTreeSet::from(["mpi".to_string()]));
        assert_eq!(parse_job_output(mpi).0.len(), 2);
        assert_eq!(ranks.len(), 3);
        assert_eq!(ranks[0], (0, "c-master".into(), true));
        assert_eq!(ranks[2], (2, "c-worker-2".into(), false));
        assert_eq!(
            bw,
            vec![Bandwidth {
                size_mib: 16,
                ms: 80.5,
                algbw_mibps: 198.8,
                busbw_mibps: 265.0
            }]
        );
    }
}
