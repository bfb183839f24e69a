//! Nodes that must reboot before the bootstrap can go on (the GPU driver installed by the
//! `gpu runtime` step loads only after one): a failed apply that asks for it
//! ([`steps::gpu::reboot_reason`]) becomes a [`RebootRequest`], every node that asked in one
//! pass goes into one [`BootstrapError::RebootRequired`], and what to reboot and when to give
//! up is decided here ([`to_reboot`], [`sessions_to_remake`]; pure). The reboot itself is the
//! provider's; [`wait_back`] then waits until the node answers SSH from a new boot.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use super::steps::gpu;
use super::BootstrapError;
use crate::plan::Role;
use crate::ssh::{Ssh, SshError};
use crate::state::Node;
use crate::wait::{wait_until, Probe, WaitError};

/// A node's step that cannot finish before the node reboots, and why (shortened, escaped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootRequest {
    pub node: String,
    pub step: String,
    pub reason: String,
}

impl fmt::Display for RebootRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.node, self.step, self.reason)
    }
}

/// The reboot request in an apply's failure, if it is one.
pub(super) fn request(node: &str, step: &str, failure: &SshError) -> Option<RebootRequest> {
    let SshError::Command { code, stderr, .. } = failure else {
        return None;
    };
    let reason = gpu::reboot_reason(code, stderr)?;
    Some(RebootRequest {
        node: node.to_string(),
        step: step.to_string(),
        reason: crate::input::shown_message(&reason, 300),
    })
}

/// How one node's chain of steps ended in a pass.
#[derive(Debug)]
pub(super) enum NodePass {
    /// Every step done; how many changed something.
    Done(usize),
    /// Stopped at a step that needs the node rebooted first.
    Reboot(Vec<RebootRequest>),
}

/// One pass over the nodes: the steps changed, summed, or every node's reboot request in one
/// error (the other nodes finished their chain meanwhile, so one reboot round serves them all).
pub(super) fn tally(passes: Vec<NodePass>) -> Result<usize, BootstrapError> {
    let mut changed = 0;
    let mut asked = Vec::new();
    for pass in passes {
        match pass {
            NodePass::Done(n) => changed += n,
            NodePass::Reboot(nodes) => asked.extend(nodes),
        }
    }
    if asked.is_empty() {
        Ok(changed)
    } else {
        Err(BootstrapError::RebootRequired { nodes: asked })
    }
}

/// The nodes to reboot for `asked`, given those this run has rebooted already (`rebooted`):
/// every asking node the first time; never a second round (the bootstrap runs again once
/// after a reboot, and a driver that still does not load will not after another).
pub fn to_reboot(
    asked: &[RebootRequest],
    rebooted: &[String],
) -> Result<Vec<String>, BootstrapError> {
    if !rebooted.is_empty() {
        return Err(BootstrapError::RebootDidNotHelp {
            nodes: asked.to_vec(),
            rebooted: rebooted.to_vec(),
        });
    }
    let mut names: Vec<String> = Vec::new();
    for r in asked {
        if !names.contains(&r.node) {
            names.push(r.node.clone());
        }
    }
    Ok(names)
}

/// The message of [`BootstrapError::RebootDidNotHelp`]: one line per node.
pub(super) fn did_not_help(nodes: &[RebootRequest], rebooted: &[String]) -> String {
    nodes
        .iter()
        .map(|r| {
            if rebooted.contains(&r.node) {
                format!(
                    "{}: step `{}` still cannot finish after the node was rebooted: {} \
                     (the driver does not load even after a reboot: see `dmesg` and `dkms status` on the node)",
                    r.node, r.step, r.reason
                )
            } else {
                format!(
                    "{}: step `{}` asks for a reboot only after the other nodes were rebooted: {} \
                     (run `up` again)",
                    r.node, r.step, r.reason
                )
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The nodes whose SSH sessions a reboot of `rebooted` kills: theirs, and every node's when
/// the master is among them (workers are reached through the master). In `nodes`' order.
pub fn sessions_to_remake(nodes: &[Node], rebooted: &[String]) -> Vec<String> {
    let master_reboots = nodes
        .iter()
        .any(|n| n.role == Role::Master && rebooted.contains(&n.name));
    nodes
        .iter()
        .filter(|n| master_reboots || rebooted.contains(&n.name))
        .map(|n| n.name.clone())
        .collect()
}

/// Prints what tells one boot of a node from the next: the kernel's boot id and the start
/// time of its PID 1 (a container node's restart keeps its host's boot id but starts a new
/// PID 1). The comm field of /proc/1/stat may hold spaces: fields are counted after its `)`.
pub const BOOT_MARK: &str =
    "cat /proc/sys/kernel/random/boot_id && sed 's/.*) //' /proc/1/stat | cut -d' ' -f20";

/// What the node runs now, to tell its next boot from it (see [`wait_back`]).
pub async fn boot_mark(ssh: &Ssh) -> Result<String, SshError> {
    Ok(ssh.run(BOOT_MARK).await?.trim().to_string())
}

/// Waits until `node` answers SSH from a boot other than `before` (SSH may still answer from
/// the old boot while the node shuts down), each try a fresh connection; `status` hears why
/// it still waits.
pub async fn wait_back(
    config: &Path,
    node: &str,
    before: &str,
    deadline: Duration,
    status: impl Fn(&str),
) -> Result<(), BootstrapError> {
    let status = &status;
    wait_until(deadline, Duration::from_secs(3), move || async move {
        let why = match Ssh::connect(config, node).await {
            Ok(ssh) => {
                let mark = boot_mark(&ssh).await;
                ssh.close().await;
                match mark {
                    Ok(now) if now != before => return Probe::Ready(()),
                    Ok(_) => "it still answers from the boot before the reboot".to_string(),
                    Err(e) => e.to_string(),
                }
            }
            Err(e) => e.to_string(),
        };
        status(&why);
        Probe::<(), ()>::Waiting(why)
    })
    .await
    .map_err(|e| {
        let (last, secs) = match e {
            WaitError::TimedOut { last, secs } => (last, secs),
            WaitError::Failed(()) => (String::new(), deadline.as_secs()),
        };
        BootstrapError::NotBack {
            node: node.to_string(),
            secs,
            last,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(node: &str) -> RebootRequest {
        RebootRequest {
            node: node.into(),
            step: "gpu runtime".into(),
            reason: "the driver does not load in the running kernel (6.1.0-9)".into(),
        }
    }

    fn node(name: &str, role: Role) -> Node {
        Node {
            name: name.into(),
            role,
            private_ip: Some("10.0.0.5".into()),
            public_ip: None,
            slots: 1,
            gpus: 1,
            ephemeral_gb: 0,
            in_discovery: None,
        }
    }

    fn failed(code: &str, stderr: &str) -> SshError {
        SshError::Command {
            node: "c-worker-1".into(),
            what: "#!/bin/bash".into(),
            code: code.into(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn only_the_gpu_steps_request_is_a_reboot_request() {
        let line = format!("{} the driver does not load\x1b[31m", gpu::REBOOT_MARKER);
        let r = request("c-worker-1", "gpu runtime", &failed("75", &line)).expect("a request");
        assert_eq!(r.node, "c-worker-1");
        assert_eq!(r.step, "gpu runtime");
        // from the node: shown escaped, like every other message from outside
        assert_eq!(r.reason, "the driver does not load\\u{1b}[31m");
        assert_eq!(
            r.to_string(),
            "c-worker-1: gpu runtime: the driver does not load\\u{1b}[31m"
        );
        assert!(request("n", "gpu runtime", &failed("1", &line)).is_none());
        assert!(request("n", "gpu runtime", &failed("75", "E: dpkg was interrupted")).is_none());
        let lost = SshError::Connect {
            node: "n".into(),
            reason: line.clone(),
        };
        assert!(request("n", "gpu runtime", &lost).is_none());
    }

    #[test]
    fn every_node_that_asked_in_a_pass_is_in_one_request() {
        let pass = vec![
            NodePass::Done(2),
            NodePass::Reboot(vec![asked("c-worker-1")]),
            NodePass::Done(1),
            NodePass::Reboot(vec![asked("c-worker-3")]),
        ];
        match tally(pass) {
            Err(BootstrapError::RebootRequired { nodes }) => {
                let names: Vec<&str> = nodes.iter().map(|r| r.node.as_str()).collect();
                assert_eq!(names, ["c-worker-1", "c-worker-3"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            tally(vec![NodePass::Done(2), NodePass::Done(1)]),
            Ok(3)
        ));
        assert!(matches!(tally(vec![]), Ok(0)));
    }

    #[test]
    fn the_first_request_reboots_every_asking_node_once() {
        let first = to_reboot(
            &[asked("c-master"), asked("c-worker-2"), asked("c-master")],
            &[],
        );
        assert_eq!(
            first.ok(),
            Some(vec!["c-master".into(), "c-worker-2".into()])
        );
    }

    #[test]
    fn a_second_request_gives_up_and_says_why_per_node() {
        let rebooted = vec!["c-worker-1".to_string()];
        let e = to_reboot(&[asked("c-worker-1"), asked("c-worker-2")], &rebooted)
            .expect_err("no second round");
        assert!(
            matches!(e, BootstrapError::RebootDidNotHelp { .. }),
            "{e:?}"
        );
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with(
                "c-worker-1: step `gpu runtime` still cannot finish after the node was rebooted: the driver does not load"
            ),
            "{text}"
        );
        assert!(lines[0].contains("dkms status"), "{text}");
        assert!(
            lines[1].starts_with("c-worker-2: step `gpu runtime` asks for a reboot only after"),
            "{text}"
        );
        assert!(lines[1].ends_with("(run `up` again)"), "{text}");
    }

    #[test]
    fn a_rebooting_master_takes_every_session_with_it() {
        let nodes = [
            node("c-master", Role::Master),
            node("c-worker-1", Role::Worker),
            node("c-worker-2", Role::Worker),
        ];
        assert_eq!(
            sessions_to_remake(&nodes, &["c-worker-2".into()]),
            ["c-worker-2"]
        );
        assert_eq!(
            sessions_to_remake(&nodes, &["c-master".into()]),
            ["c-master", "c-worker-1", "c-worker-2"]
        );
        assert!(sessions_to_remake(&nodes, &[]).is_empty());
    }

    #[test]
    fn the_boot_mark_tells_a_reboot_and_a_container_restart_apart_from_the_same_boot() {
        let dir = std::env::temp_dir().join(format!("hvd-boot-mark-{}", std::process::id()));
        let proc1 = dir.join("stat");
        std::fs::create_dir_all(&dir).expect("dir");
        // a comm with a space and a `)`, as a process may name itself
        std::fs::write(
            &proc1,
            "1 (my init) x) S 0 1 1 0 -1 4194560 1 2 0 0 0 0 0 0 20 0 1 0 98765 1000 10\n",
        )
        .expect("stat");
        let script = BOOT_MARK
            .replace("/proc/sys/kernel/random/boot_id", "/dev/null")
            .replace("/proc/1/stat", &proc1.to_string_lossy());
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
            .expect("bash");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(out.status.success());
        // field 22 of /proc/PID/stat: the start time
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "98765");
    }
}
