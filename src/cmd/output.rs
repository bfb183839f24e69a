//! What the commands print: the human lines and the `--json` documents, in one place. Values
//! that come from the cloud (names, ids, fault messages) are escaped for the terminal.

use serde::Serialize;

use crate::check::CheckReport;
use crate::input;
use crate::plan::{self, Health, Plan};
use crate::state::{self, ClusterState};

/// Pretty JSON; a value that cannot be encoded says so instead of panicking.
pub fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot encode output: {e}\"}}"))
}

/// `bytes` on stdout, whole (a generated script, page or schema); a closed pipe (`| head`)
/// is no failure of ours.
pub fn print_whole(bytes: &[u8]) -> Result<u8, crate::error::Error> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(crate::error::Error::Runtime(format!(
            "cannot write to stdout: {e}"
        ))),
    }
}

/// The one way a command prints its result: `value` as JSON with `--json`, else `human`.
pub fn emit(json: bool, value: &impl Serialize, human: impl FnOnce()) {
    if json {
        println!("{}", to_json(value));
    } else {
        human();
    }
}

/// `plan --json`.
#[derive(Serialize)]
pub struct PlanReport<'a> {
    pub cluster: &'a str,
    pub plan: &'a Plan,
    pub counts: plan::PlanCounts,
    pub quota_shortfalls: &'a [plan::Shortfall],
    /// What the profile asks for that works, but not as meant (e.g. GPUs with a CPU image).
    pub warnings: &'a [String],
    /// Each kind of server's disks (root disk or volume, ephemeral disk), a line each.
    pub disks: &'a [String],
}

/// The nodes `up` made, with their addresses.
pub fn print_nodes(cluster: &str, st: &ClusterState) {
    println!("cluster `{cluster}` resources:");
    for n in &st.nodes {
        println!(
            "  {:<24} {:<7} private {:<15} public {}",
            n.name,
            n.role,
            n.private_ip.as_deref().unwrap_or("-"),
            n.public_ip.as_deref().unwrap_or("-")
        );
    }
}

/// The acceptance check's result, and the allreduce bandwidth for each size.
pub fn print_check(r: &CheckReport) {
    println!(
        "check: {} container(s) running; /shared read on {}{}; Jupyter answers \"{}\"; {} rank(s) joined on {}",
        r.containers,
        r.shared_read_on.as_deref().unwrap_or("-"),
        if r.shared_kernel_mounts.is_empty() {
            String::new()
        } else {
            format!(", kernel NFS on {}", r.shared_kernel_mounts.join(", "))
        },
        r.jupyter_title.as_deref().unwrap_or("-"),
        r.ranks,
        r.hosts.join(", ")
    );
    if !r.controller.is_empty() {
        println!("  controller: {} on every rank", r.controller);
    }
    for b in &r.bandwidth {
        println!(
            "  allreduce {:>3} MiB: {:>8.1} ms, algbw {:>7.1} MiB/s, busbw {:>7.1} MiB/s",
            b.size_mib, b.ms, b.algbw_mibps, b.busbw_mibps
        );
    }
}

/// `status --json`.
#[derive(Serialize)]
pub struct StatusReport<'a> {
    pub cluster: &'a str,
    /// running, stopping, stopped, starting, degraded or absent (see [`plan::servers_state`]).
    pub state: &'static str,
    pub resources: &'a [plan::Observed],
    pub nodes: &'a [state::Node],
    pub healthy: bool,
    /// What the master's autostop agent last said (as the cloud keeps it), if one ran.
    pub autostop: Option<String>,
}

/// `status`: every resource with its health, then every node.
pub fn print_status(
    name: &str,
    observed: &[plan::Observed],
    nodes: &[state::Node],
    autostop: Option<&str>,
) {
    if observed.is_empty() {
        println!("cluster `{name}`: nothing exists");
        return;
    }
    println!("cluster `{name}`: {}", plan::servers_state(observed));
    if let Some(said) = autostop {
        // the agent's words as the cloud kept them: escaped for the terminal
        println!("  autostop: {}", input::shown_message(said, 255));
    }
    let mut sorted = observed.to_vec();
    sorted.sort_by_key(|o| (o.kind.level(), o.name.clone()));
    for o in &sorted {
        let health = match &o.health {
            Health::Ready if o.kind == plan::Kind::Server => "running".to_string(),
            Health::Ready => "ready".to_string(),
            Health::Pending => "building".to_string(),
            Health::Failed(why) => format!("FAILED: {}", input::shown_message(why, 300)),
            Health::Stopping => "stopping".to_string(),
            Health::Stopped => "stopped".to_string(),
            Health::Starting => "starting".to_string(),
        };
        // Names, ids and fault messages are the cloud's words: escaped for the terminal.
        println!(
            "  {:<18} {:<28} {:<38} {health}",
            o.kind,
            input::shown(&o.name),
            input::shown(&o.id)
        );
    }
    for n in nodes {
        let elastic = match n.in_discovery {
            Some(true) => "  elastic: listed",
            Some(false) => "  elastic: not listed",
            None => "",
        };
        println!(
            "  node {:<23} {:<7} private {:<15} public {}{elastic}",
            n.name,
            n.role,
            n.private_ip.as_deref().unwrap_or("-"),
            n.public_ip.as_deref().unwrap_or("-")
        );
    }
}

/// `stop`: what stopped and what it handed back.
pub fn print_stopped(name: &str, r: &crate::lifecycle::StopReport) {
    if r.stopped.is_empty() {
        println!(
            "cluster `{name}`: already stopped ({} server(s)); `start` brings it back",
            r.already.len()
        );
        return;
    }
    let f = &r.freed;
    let gpus = if f.gpus > 0 {
        format!(", {} GPU(s)", f.gpus)
    } else {
        String::new()
    };
    println!(
        "cluster `{name}`: stopped {} server(s); handed back {} server(s), {} vCPU(s), {:.1} GiB RAM{gpus}",
        r.stopped.len(),
        f.servers,
        f.vcpus,
        f.ram_mib as f64 / 1024.0,
    );
    if !f.kept_on_host.is_empty() {
        println!(
            "  this cloud keeps shelved servers on their host (its shelved_offload_time is not 0, \
             and offloading is for admins): {} still hold their resources",
            f.kept_on_host.join(", ")
        );
    }
    println!(
        "  kept: disks, addresses, network, security groups, keys, /shared; `start` brings it back"
    );
}
