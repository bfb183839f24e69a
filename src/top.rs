//! `top`: what every node of a cluster is doing, read over the cluster's own SSH by one small
//! script per node and refresh (nothing installed on the nodes, nothing listening there). This
//! module is the pure part: the script, the grammar of what it prints, the rates between two
//! readings of a node, and the snapshot's rows; the command (`cmd/top.rs`) runs the script.
//!
//! A node's output is not trusted: every section is read by its own grammar, a line that does
//! not fit is left out (the field shows as unknown), nothing of it reaches a terminal unescaped.

use serde::Serialize;

use crate::input;
use crate::jobs::{self, Job, State};

/// The paths whose free room is shown: `/shared` and Docker's data (the node's data disk where
/// the flavor has one, else its root disk).
pub const DISKS: [&str; 2] = ["/shared", "/var/lib/docker"];

/// The bash script a node runs (as root: the master's job runner is root's) for one reading.
/// Sections start with a line `@hvd-top NAME`; `uptime` is the node's own monotonic clock,
/// for the rates.
pub fn probe_script(master: bool) -> String {
    // Builtins wherever bash has one: at a refresh a second, every process started on the
    // node is its CPU (the figures come from /proc files read with `read`; `df` once per
    // disk; `nvidia-smi` only where it exists).
    let mut s = String::from(
        "echo '@hvd-top uptime'; read -r l < /proc/uptime; printf '%s\\n' \"$l\"\n\
         echo '@hvd-top stat'; read -r l < /proc/stat; printf '%s\\n' \"$l\"\n\
         echo '@hvd-top meminfo'\n\
         while read -r k v u; do case $k in MemTotal: | MemAvailable:) printf '%s %s %s\\n' \"$k\" \"$v\" \"$u\" ;; esac; done < /proc/meminfo\n\
         echo '@hvd-top net'; while IFS= read -r l; do printf '%s\\n' \"$l\"; done < /proc/net/dev\n\
         echo '@hvd-top gpu'\n\
         if command -v nvidia-smi >/dev/null 2>&1; then\n\
           out=$(timeout 5 nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,name \
         --format=csv,noheader,nounits 2>&1); echo \"rc=$?\"; printf '%s\\n' \"$out\" | head -n 16\n\
         else echo none; fi\n\
         echo '@hvd-top disk'\n",
    );
    for path in DISKS {
        // df's second line, without a pipe: its header and anything after are cut in bash
        s.push_str(&format!(
            "out=$(df -P -B1 {path} 2>/dev/null); l=${{out#*$'\\n'}}; [ \"$l\" = \"$out\" ] && l=; \
             printf 'path %s %s\\n' {path} \"${{l%%$'\\n'*}}\"\n"
        ));
    }
    if master {
        // The running job: its list line, then its output's last lines (the runner keeps
        // them in the job's folder).
        s.push_str(&format!(
            "echo '@hvd-top jobs'\n\
             line=\n\
             while IFS= read -r l; do f=${{l#*$'\\t'}}; [ \"${{f%%$'\\t'*}}\" = running ] && line=$l; done < <({list} 2>/dev/null)\n\
             printf '%s\\n' \"$line\"\n\
             id=${{line%%$'\\t'*}}\n\
             echo '@hvd-top log'\n\
             case $id in ''|*[!0-9]*) ;; *) tail -c 8192 {dir}/$id/log 2>/dev/null | tail -n 40 ;; esac\n\
             echo '@hvd-top now'; printf '%(%s)T\\n' -1\n",
            list = jobs::runner_call("list"),
            dir = jobs::JOBS_DIR,
        ));
    }
    s.push_str("echo '@hvd-top end'\n");
    s
}

/// The CPU's time counters of `/proc/stat`'s first line, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    pub busy: u64,
    pub total: u64,
}

/// Memory in KiB as `/proc/meminfo` states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Memory {
    pub total_kib: u64,
    pub available_kib: u64,
}

/// Bytes received and sent over the node's own interfaces since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetBytes {
    pub received: u64,
    pub sent: u64,
}

/// One GPU as `nvidia-smi --query-gpu` reports it; a value it gives as `[N/A]` or
/// `[Not Supported]` is `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    pub utilization_percent: Option<u32>,
    pub memory_used_mib: Option<u64>,
    pub memory_total_mib: Option<u64>,
}

/// What a node says of its GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Gpus {
    /// No `nvidia-smi` on the node.
    None,
    Listed {
        gpus: Vec<Gpu>,
    },
    /// `nvidia-smi` failed (no driver loaded, a GPU fallen off the bus): its first line.
    Failed {
        message: String,
    },
    /// The section was missing or unreadable.
    Unknown,
}

/// Room on one of [`DISKS`], in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Disk {
    pub path: String,
    pub size_bytes: u64,
    pub available_bytes: u64,
}

/// The running job as the master's runner lists it, with its output's last line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunningJob {
    pub id: u32,
    pub elapsed_secs: Option<u64>,
    pub command: String,
    pub last_line: Option<String>,
    /// images/s, samples/s, steps/s, ... read from its last lines, where the job prints one.
    pub rate: Option<String>,
}

/// One reading of a node: every field the script's sections gave, each by its grammar.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub uptime_secs: Option<f64>,
    pub cpu: Option<CpuTimes>,
    pub memory: Option<Memory>,
    pub net: Option<NetBytes>,
    pub gpus: Gpus,
    pub disks: Vec<Disk>,
    pub job: Option<RunningJob>,
}

/// The sections of a reading by name; lines before the first marker are dropped. Only the
/// first `@hvd-top end` ends it (a second reading after it is not this one's).
fn sections(out: &str) -> Vec<(&str, Vec<&str>)> {
    let mut all: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in out.lines() {
        if let Some(name) = line.strip_prefix("@hvd-top ") {
            if name == "end" {
                break;
            }
            all.push((name, Vec::new()));
        } else if let Some((_, lines)) = all.last_mut() {
            lines.push(line);
        }
    }
    all
}

/// Reads one run of [`probe_script`]: `None` when its end marker is missing (the node's
/// answer was cut off).
pub fn parse_reading(out: &str) -> Option<Reading> {
    if !out.lines().any(|l| l == "@hvd-top end") {
        return None;
    }
    let sections = sections(out);
    let get = |name: &str| -> Option<&[&str]> {
        sections
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, l)| l.as_slice())
    };
    let now = get("now")
        .and_then(|l| l.first())
        .and_then(|l| l.trim().parse::<u64>().ok());
    let job = get("jobs")
        .and_then(|l| l.first())
        .and_then(|line| jobs::parse_line(line))
        .filter(|j| j.state == State::Running)
        .map(|j| running_job(&j, get("log").unwrap_or(&[]), now));
    Some(Reading {
        uptime_secs: get("uptime").and_then(|l| parse_uptime(&l.join("\n"))),
        cpu: get("stat")
            .and_then(|l| l.first())
            .and_then(|l| parse_cpu(l)),
        memory: get("meminfo").and_then(|l| parse_meminfo(&l.join("\n"))),
        net: get("net").and_then(|l| parse_net_dev(&l.join("\n"))),
        gpus: get("gpu")
            .map(|l| parse_gpus(&l.join("\n")))
            .unwrap_or(Gpus::Unknown),
        disks: get("disk").map(parse_disks).unwrap_or_default(),
        job,
    })
}

/// `/proc/uptime`'s first field: seconds since boot.
pub fn parse_uptime(text: &str) -> Option<f64> {
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then_some(secs)
}

/// `/proc/stat`'s `cpu` line: user nice system idle iowait irq softirq steal (guest time is
/// counted in user already); idle and iowait are not busy.
pub fn parse_cpu(line: &str) -> Option<CpuTimes> {
    let mut words = line.split_whitespace();
    if words.next()? != "cpu" {
        return None;
    }
    let fields: Vec<u64> = words
        .take(8)
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    if fields.len() < 4 {
        return None;
    }
    let total = fields.iter().try_fold(0u64, |a, &b| a.checked_add(b))?;
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Some(CpuTimes {
        busy: total.checked_sub(idle)?,
        total,
    })
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo` (kB, which the kernel means as KiB).
pub fn parse_meminfo(text: &str) -> Option<Memory> {
    let value = |key: &str| -> Option<u64> {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            let mut words = rest.split_whitespace();
            let n = words.next()?.parse().ok()?;
            matches!(words.next(), Some("kB") | None).then_some(n)
        })
    };
    let total_kib = value("MemTotal")?;
    let available_kib = value("MemAvailable")?;
    (available_kib <= total_kib).then_some(Memory {
        total_kib,
        available_kib,
    })
}

/// Whether an interface of `/proc/net/dev` carries the node's own traffic: not loopback, and
/// not the bridges and virtual ends that Docker and container networks add (counted there
/// again as the host's interface carries it).
fn own_interface(name: &str) -> bool {
    !(name == "lo"
        || name.starts_with("docker")
        || name.starts_with("veth")
        || name.starts_with("br-")
        || name.starts_with("virbr")
        || name.starts_with("tap"))
}

/// `/proc/net/dev`: the bytes received and sent over the node's own interfaces.
pub fn parse_net_dev(text: &str) -> Option<NetBytes> {
    let mut total = NetBytes {
        received: 0,
        sent: 0,
    };
    let mut any = false;
    for line in text.lines() {
        let Some((name, counters)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        let fields: Vec<u64> = match counters
            .split_whitespace()
            .map(|w| w.parse().ok())
            .collect::<Option<Vec<u64>>>()
        {
            Some(f) if f.len() >= 16 => f,
            _ => continue,
        };
        if !own_interface(name) {
            continue;
        }
        any = true;
        total.received = total.received.saturating_add(fields[0]);
        total.sent = total.sent.saturating_add(fields[8]);
    }
    any.then_some(total)
}

/// The `gpu` section: `none`, or `rc=N` then `nvidia-smi`'s CSV (`index, utilization.gpu,
/// memory.used, memory.total, name`, no header, no units) or its error.
pub fn parse_gpus(text: &str) -> Gpus {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(first) = lines.next() else {
        return Gpus::Unknown;
    };
    if first.trim() == "none" {
        return Gpus::None;
    }
    let Some(rc) = first.trim().strip_prefix("rc=") else {
        return Gpus::Unknown;
    };
    let rest: Vec<&str> = lines.collect();
    if rc != "0" {
        let message = rest.first().copied().unwrap_or("no output");
        return Gpus::Failed {
            message: format!(
                "nvidia-smi exited {}: {}",
                input::shown(rc),
                input::shown_message(message.trim(), 100)
            ),
        };
    }
    let mut gpus = Vec::new();
    for line in rest {
        let fields: Vec<&str> = line.splitn(5, ',').map(str::trim).collect();
        let [index, util, used, total, name] = fields[..] else {
            return Gpus::Failed {
                message: format!(
                    "nvidia-smi printed a line that is not a GPU's: {}",
                    input::shown_message(line, 100)
                ),
            };
        };
        let Ok(index) = index.parse() else {
            return Gpus::Failed {
                message: format!(
                    "nvidia-smi printed a line that is not a GPU's: {}",
                    input::shown_message(line, 100)
                ),
            };
        };
        gpus.push(Gpu {
            index,
            name: input::shown_message(name, 60),
            utilization_percent: util.parse().ok().filter(|u| *u <= 100),
            memory_used_mib: used.parse().ok(),
            memory_total_mib: total.parse().ok(),
        });
    }
    Gpus::Listed { gpus }
}

/// The `disk` section: `path P` then `df -P -B1`'s line for it (nothing after `path P` where
/// the path does not exist).
pub fn parse_disks(lines: &[&str]) -> Vec<Disk> {
    let mut disks = Vec::new();
    for line in lines {
        let Some(rest) = line.strip_prefix("path ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let Some(path) = words.next().filter(|p| DISKS.contains(p)) else {
            continue;
        };
        // filesystem, size, used, available, capacity, mount point
        let fields: Vec<&str> = words.collect();
        if fields.len() < 5 {
            continue;
        }
        if let (Ok(size), Ok(available)) = (fields[1].parse(), fields[3].parse()) {
            disks.push(Disk {
                path: path.to_string(),
                size_bytes: size,
                available_bytes: available,
            });
        }
    }
    disks
}

/// A rate a training script prints on its last lines: a number followed by `img/sec`,
/// `images/s`, `samples/s`, `steps/s`, `it/s`, ... (tqdm, Horovod's examples), the last one
/// found; `None` where there is none.
pub fn parse_rate(lines: &[&str]) -> Option<String> {
    const UNITS: [&str; 10] = [
        "img/sec",
        "img/s",
        "images/sec",
        "images/s",
        "samples/sec",
        "samples/s",
        "steps/sec",
        "steps/s",
        "it/s",
        "s/it",
    ];
    for line in lines.iter().rev() {
        // tqdm redraws with carriage returns: the last draw is the line's end
        let line = line.rsplit('\r').next().unwrap_or(line);
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
            .filter(|w| !w.is_empty())
            .collect();
        for (i, w) in words.iter().enumerate().rev() {
            // "12.3img/s" (tqdm) or "12.3 img/sec"
            for unit in UNITS {
                let number = if let Some(n) = w.strip_suffix(unit) {
                    if n.is_empty() {
                        i.checked_sub(1).map(|p| words[p])
                    } else {
                        Some(n)
                    }
                } else {
                    None
                };
                if let Some(n) = number.and_then(|n| n.parse::<f64>().ok()) {
                    if n.is_finite() && n >= 0.0 {
                        return Some(format!("{n} {unit}"));
                    }
                }
            }
        }
    }
    None
}

/// Whether horovodrun tagged the line as a rank's output: `[0]<stdout>:` (Gloo) or
/// `[1,0]<stderr>:` (`mpirun --tag-output`).
fn is_rank_output(line: &str) -> bool {
    let Some(rest) = line.strip_prefix('[') else {
        return false;
    };
    let Some((rank, rest)) = rest.split_once(']') else {
        return false;
    };
    !rank.is_empty()
        && rank.chars().all(|c| c.is_ascii_digit() || c == ',')
        && (rest.starts_with("<stdout>:") || rest.starts_with("<stderr>:"))
}

fn running_job(job: &Job, log: &[&str], now: Option<u64>) -> RunningJob {
    // The job's last line is the last one a rank printed: horovodrun's own lines and those
    // of what it starts beside the ranks (its framework probes print TensorFlow's CPU
    // notices on some processors) come after the ranks' lines and say nothing of the job.
    let lines: Vec<&str> = log
        .iter()
        .rev()
        .map(|l| l.rsplit('\r').next().unwrap_or(l).trim())
        .filter(|l| !l.is_empty())
        .collect();
    let last = lines
        .iter()
        .find(|l| is_rank_output(l))
        .or_else(|| lines.first())
        .copied();
    RunningJob {
        id: job.id.get(),
        elapsed_secs: now.zip(job.started).map(|(n, s)| n.saturating_sub(s)),
        command: job.command_line(60),
        last_line: last.map(|l| input::shown_message(l, 120)),
        rate: parse_rate(log),
    }
}

/// What a node's row shows, from two readings of it (`before` older): rates need both.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRow {
    pub node: String,
    pub role: String,
    /// `ok`, or why the node gave no reading (`not answering: ...`).
    pub state: String,
    pub cpu_percent: Option<f64>,
    pub memory: Option<Memory>,
    pub net_receive_bytes_per_sec: Option<f64>,
    pub net_send_bytes_per_sec: Option<f64>,
    pub gpus: Gpus,
    pub disks: Vec<Disk>,
}

/// A row from a node's readings; `state` is `ok`.
pub fn node_row(node: &str, role: &str, before: Option<&Reading>, now: &Reading) -> NodeRow {
    let cpu_percent = before.and_then(|b| b.cpu.zip(now.cpu)).and_then(|(b, n)| {
        let total = n.total.checked_sub(b.total)?;
        let busy = n.busy.checked_sub(b.busy)?;
        (total > 0).then(|| (busy as f64 * 100.0 / total as f64).min(100.0))
    });
    let elapsed = before
        .and_then(|b| b.uptime_secs.zip(now.uptime_secs))
        .map(|(b, n)| n - b)
        .filter(|e| *e > 0.0);
    let rate = |pick: fn(&NetBytes) -> u64| -> Option<f64> {
        let (b, n) = before.and_then(|b| b.net).zip(now.net)?;
        let delta = pick(&n).checked_sub(pick(&b))?;
        Some(delta as f64 / elapsed?)
    };
    NodeRow {
        node: node.to_string(),
        role: role.to_string(),
        state: "ok".into(),
        cpu_percent,
        memory: now.memory,
        net_receive_bytes_per_sec: rate(|n| n.received),
        net_send_bytes_per_sec: rate(|n| n.sent),
        gpus: now.gpus.clone(),
        disks: now.disks.clone(),
    }
}

/// A row for a node that gave no reading: `why` in a few words.
pub fn silent_row(node: &str, role: &str, why: &str) -> NodeRow {
    NodeRow {
        node: node.to_string(),
        role: role.to_string(),
        state: format!("not answering: {}", input::shown_message(why, 80)),
        cpu_percent: None,
        memory: None,
        net_receive_bytes_per_sec: None,
        net_send_bytes_per_sec: None,
        gpus: Gpus::Unknown,
        disks: Vec::new(),
    }
}

/// The whole snapshot (`top --once --json` prints it as JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    pub cluster: String,
    pub nodes: Vec<NodeRow>,
    pub job: Option<RunningJob>,
    /// The wall time of this reading of every node, side by side (connections already open
    /// after the first): how stale the rows are, and what one refresh costs at this size.
    pub read_secs: f64,
}

fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A row's cells: node, CPU, memory, GPU, network, disks.
pub fn cells(row: &NodeRow) -> [String; 6] {
    if row.state != "ok" {
        return [
            row.node.clone(),
            row.state.clone(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ];
    }
    let cpu = row
        .cpu_percent
        .map(|c| format!("{c:.0}%"))
        .unwrap_or_else(|| "?".into());
    let memory = row
        .memory
        .map(|m| {
            format!(
                "{}/{}",
                bytes(((m.total_kib - m.available_kib) * 1024) as f64),
                bytes((m.total_kib * 1024) as f64)
            )
        })
        .unwrap_or_else(|| "?".into());
    let gpu = match &row.gpus {
        Gpus::None => "no GPU".to_string(),
        Gpus::Unknown => "?".to_string(),
        Gpus::Failed { message } => message.clone(),
        Gpus::Listed { gpus } if gpus.is_empty() => "no GPU".to_string(),
        Gpus::Listed { gpus } => gpus
            .iter()
            .map(|g| {
                let util = g
                    .utilization_percent
                    .map(|u| format!("{u}%"))
                    .unwrap_or_else(|| "n/a".into());
                let mem = match (g.memory_used_mib, g.memory_total_mib) {
                    (Some(u), Some(t)) => format!(
                        " {}/{}",
                        bytes((u * 1024 * 1024) as f64),
                        bytes((t * 1024 * 1024) as f64)
                    ),
                    _ => String::new(),
                };
                format!("{}:{util}{mem}", g.index)
            })
            .collect::<Vec<_>>()
            .join(" "),
    };
    let net = match (row.net_receive_bytes_per_sec, row.net_send_bytes_per_sec) {
        (Some(r), Some(s)) => format!("{}/s in, {}/s out", bytes(r), bytes(s)),
        _ => "?".into(),
    };
    let disks = row
        .disks
        .iter()
        .map(|d| format!("{} {} free", d.path, bytes(d.available_bytes as f64)))
        .collect::<Vec<_>>()
        .join(", ");
    [row.node.clone(), cpu, memory, gpu, net, disks]
}

/// The snapshot as a plain table (`top --once`).
pub fn table(snapshot: &Snapshot) -> String {
    let header = ["NODE", "CPU", "MEMORY", "GPU", "NETWORK", "FREE"].map(String::from);
    let rows: Vec<[String; 6]> = std::iter::once(header)
        .chain(snapshot.nodes.iter().map(cells))
        .collect();
    let mut widths = [0usize; 6];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    match &snapshot.job {
        Some(j) => {
            out.push_str(&format!(
                "job {}: running {}, {}",
                j.id,
                j.elapsed_secs
                    .map(jobs::duration)
                    .unwrap_or_else(|| "?".into()),
                j.command
            ));
            if let Some(rate) = &j.rate {
                out.push_str(&format!(", {rate}"));
            }
            out.push('\n');
            if let Some(last) = &j.last_line {
                out.push_str(&format!("  {last}\n"));
            }
        }
        None => out.push_str("no job running\n"),
    }
    out
}

#[cfg(test)]
mod tests;
