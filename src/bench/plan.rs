//! Which hosts run how many ranks at each slot count, filled as a user would: the master's
//! slots first, then worker 1's, worker 2's, ... (1 GPU, then 4 on one node, then 4 on each
//! of 3 nodes); and the `horovodrun` command line for one slot count.

use std::net::IpAddr;

use serde::Serialize;

use super::{BadArgument, Settings, ALLREDUCE_SIZES_MIB};
use crate::render::HostSlots;

/// One host's share of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placed {
    pub name: String,
    #[serde(skip)]
    pub address: IpAddr,
    pub slots: u32,
}

/// One slot count: the hosts it fills, in order (their ranks are numbered in this order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub slots: u32,
    pub hosts: Vec<Placed>,
}

impl Step {
    /// The host rank `rank` runs on, as horovodrun numbers them (host by host).
    pub fn host_of(&self, rank: u32) -> Option<&str> {
        let mut first = 0;
        for h in &self.hosts {
            if rank < first + h.slots {
                return Some(&h.name);
            }
            first += h.slots;
        }
        None
    }
}

/// The worker number in `<cluster>-worker-<n>`; the master (and anything else) sorts first.
fn worker_number(name: &str) -> Option<u64> {
    let (_, n) = name.rsplit_once("-worker-")?;
    n.parse().ok()
}

/// The hosts in the order a user fills them: the master first, then workers by number
/// (worker-2 before worker-10).
pub fn user_order(hosts: &[HostSlots]) -> Vec<HostSlots> {
    let mut ordered = hosts.to_vec();
    ordered.sort_by_key(|h| (worker_number(h.name()).is_some(), worker_number(h.name())));
    ordered
}

/// 1, 2, 4, ... below `total`, then `total`.
pub fn default_counts(total: u32) -> Vec<u32> {
    let mut counts = Vec::new();
    let mut n = 1u32;
    while n < total {
        counts.push(n);
        n = n.saturating_mul(2);
    }
    counts.push(total.max(1));
    counts
}

/// The run for each slot count asked for (or the default list), hosts filled in order.
pub fn plan(hosts: &[HostSlots], asked: Option<&[u32]>) -> Result<Vec<Step>, BadArgument> {
    let hosts = user_order(hosts);
    let total: u32 = hosts.iter().map(|h| h.slots()).sum();
    if total == 0 {
        return Err(BadArgument("the cluster has no nodes to run on".into()));
    }
    let counts = match asked {
        Some(c) => c.to_vec(),
        None => default_counts(total),
    };
    let mut steps = Vec::new();
    for n in counts {
        if n > total {
            let shown: Vec<String> = counts_text(asked);
            return Err(BadArgument(format!(
                "--slots `{}`: {n} is more than the cluster's {total} slot(s) ({} node(s): {})",
                shown.join(","),
                hosts.len(),
                hosts
                    .iter()
                    .map(|h| format!("{} {}", h.name(), h.slots()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let mut left = n;
        let mut placed = Vec::new();
        for h in &hosts {
            if left == 0 {
                break;
            }
            let take = left.min(h.slots());
            placed.push(Placed {
                name: h.name().to_string(),
                address: h.address(),
                slots: take,
            });
            left -= take;
        }
        steps.push(Step {
            slots: n,
            hosts: placed,
        });
    }
    Ok(steps)
}

fn counts_text(asked: Option<&[u32]>) -> Vec<String> {
    asked
        .unwrap_or_default()
        .iter()
        .map(u32::to_string)
        .collect()
}

/// What a run needs beyond its step: the profile's collective and container port, and the
/// interfaces that hold the nodes' private addresses.
pub struct Launch<'a> {
    /// `--gloo` or `--mpi`.
    pub collective: &'a str,
    pub ssh_port: u16,
    pub ifaces: &'a [String],
    /// The job's path inside the containers.
    pub job: &'a str,
    /// A word unique to this run, on every rank's command line (to stop exactly it).
    pub run_id: &'a str,
}

/// The `horovodrun` command line (every word separate, to be shell-quoted) for one step.
pub fn horovodrun_argv(step: &Step, launch: &Launch<'_>, s: &Settings) -> Vec<String> {
    let mut argv: Vec<String> = [
        "horovodrun",
        launch.collective,
        "-p",
        &launch.ssh_port.to_string(),
        "-i",
        "/root/.ssh/id_ed25519",
    ]
    .map(String::from)
    .to_vec();
    // The master alone runs its ranks over 127.0.0.1, where horovodrun refuses an interface list.
    if step.hosts.len() > 1 {
        argv.extend(["--network-interfaces".into(), launch.ifaces.join(",")]);
    }
    let hosts: Vec<String> = step
        .hosts
        .iter()
        .map(|h| format!("{}:{}", h.address, h.slots))
        .collect();
    argv.extend([
        "-np".into(),
        step.slots.to_string(),
        "-H".into(),
        hosts.join(","),
        "python".into(),
        launch.job.into(),
        "--model".into(),
        s.model.into(),
        "--batch-size".into(),
        s.batch_size.to_string(),
        "--steps".into(),
        s.steps.to_string(),
        "--warmup".into(),
        s.warmup.to_string(),
        "--sizes-mib".into(),
        ALLREDUCE_SIZES_MIB.map(|m| m.to_string()).join(","),
        "--run-id".into(),
        launch.run_id.into(),
    ]);
    argv
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{Raw, Settings};

    fn host(name: &str, last: u8, slots: u32) -> HostSlots {
        HostSlots::new(name, IpAddr::from([10, 0, 0, last]), slots).unwrap()
    }

    fn shape(steps: &[Step]) -> Vec<(u32, Vec<(String, u32)>)> {
        steps
            .iter()
            .map(|s| {
                (
                    s.slots,
                    s.hosts.iter().map(|h| (h.name.clone(), h.slots)).collect(),
                )
            })
            .collect()
    }

    fn named(pairs: &[(&str, u32)]) -> Vec<(String, u32)> {
        pairs.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    }

    #[test]
    fn default_counts_double_up_to_every_slot() {
        assert_eq!(default_counts(1), vec![1]);
        assert_eq!(default_counts(2), vec![1, 2]);
        assert_eq!(default_counts(3), vec![1, 2, 3]);
        assert_eq!(default_counts(4), vec![1, 2, 4]);
        assert_eq!(default_counts(12), vec![1, 2, 4, 8, 12]);
        assert_eq!(default_counts(0), vec![1]);
    }

    #[test]
    fn the_notebook_way_master_first_then_workers_by_number() {
        // 4 slots on each of 3 nodes, listed out of order (worker-10 after worker-2).
        let hosts = [
            host("c-worker-10", 3, 4),
            host("c-master", 1, 4),
            host("c-worker-2", 2, 4),
        ];
        let steps = plan(&hosts, None).unwrap();
        assert_eq!(
            shape(&steps),
            vec![
                (1, named(&[("c-master", 1)])),
                (2, named(&[("c-master", 2)])),
                (4, named(&[("c-master", 4)])),
                (8, named(&[("c-master", 4), ("c-worker-2", 4)])),
                (
                    12,
                    named(&[("c-master", 4), ("c-worker-2", 4), ("c-worker-10", 4)])
                ),
            ]
        );
        assert_eq!(steps[4].host_of(0), Some("c-master"));
        assert_eq!(steps[4].host_of(4), Some("c-worker-2"));
        assert_eq!(steps[4].host_of(11), Some("c-worker-10"));
        assert_eq!(steps[4].host_of(12), None);
        let partial = plan(&hosts, Some(&[6])).unwrap();
        assert_eq!(
            shape(&partial),
            vec![(6, named(&[("c-master", 4), ("c-worker-2", 2)]))]
        );
    }

    #[test]
    fn one_slot_per_node() {
        let hosts = [host("c-master", 1, 1), host("c-worker-1", 2, 1)];
        assert_eq!(
            shape(&plan(&hosts, None).unwrap()),
            vec![
                (1, named(&[("c-master", 1)])),
                (2, named(&[("c-master", 1), ("c-worker-1", 1)]))
            ]
        );
    }

    #[test]
    fn more_slots_than_the_cluster_has_is_refused() {
        let hosts = [host("c-master", 1, 1), host("c-worker-1", 2, 1)];
        let e = plan(&hosts, Some(&[1, 3])).unwrap_err().0;
        assert!(
            e.starts_with("--slots `1,3`: 3 is more than the cluster's 2 slot(s)"),
            "{e}"
        );
        assert!(e.contains("c-master 1, c-worker-1 1"), "{e}");
        assert!(plan(&[], None).is_err());
    }

    #[test]
    fn the_command_line_names_only_the_planned_hosts() {
        let hosts = [host("c-master", 1, 2), host("c-worker-1", 2, 2)];
        let steps = plan(&hosts, Some(&[2, 3])).unwrap();
        let s = Settings::parse(&Raw::default()).unwrap();
        let ifaces = vec!["eth0".to_string()];
        let launch = Launch {
            collective: "--gloo",
            ssh_port: 12345,
            ifaces: &ifaces,
            job: "/etc/hvd-cluster/bench/bench_tensorflow.py",
            run_id: "hvdbench-00ff",
        };
        let one = horovodrun_argv(&steps[0], &launch, &s).join(" ");
        assert!(
            one.starts_with("horovodrun --gloo -p 12345 -i /root/.ssh/id_ed25519 -np 2 -H 10.0.0.1:2 python /etc/hvd-cluster/bench/bench_tensorflow.py --model resnet8"),
            "{one}"
        );
        assert!(
            one.ends_with("--sizes-mib 1,16 --run-id hvdbench-00ff"),
            "{one}"
        );
        let two = horovodrun_argv(&steps[1], &launch, &s).join(" ");
        assert!(
            two.contains("--network-interfaces eth0 -np 3 -H 10.0.0.1:2,10.0.0.2:1 python"),
            "{two}"
        );
    }
}
