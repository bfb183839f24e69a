//! Jobs: every `run` is a job on the master, numbered, run by a runner detached
//! from the CLI's SSH session (`templates/node/job_runner.sh`), one at a time in the order
//! submitted, its output kept on the master's disk. This module is the pure part: the job
//! number's grammar, the script that submits a job, the runner's listing read by its grammar,
//! and how a job is shown. The commands are in `cmd::run` and `cmd::jobs`.

use base64::Engine as _;
use serde::Serialize;

use crate::input;
use crate::ssh::shell_quote;

/// The jobs' folder on the master (root only; on the master's disk, kept across stop/start).
pub const JOBS_DIR: &str = "/var/lib/hvd-cluster/jobs";
/// The runner, written there by every `run` (the version of the binary that submits).
pub const RUNNER: &str = "/var/lib/hvd-cluster/jobs/job_runner.sh";

/// A job's number: 1 to 999,999,999, digits only, no leading zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct JobId(u32);

impl JobId {
    /// Checks a job number given by the user (or read from the master).
    pub fn parse(s: &str) -> Result<JobId, String> {
        let bad = || {
            format!(
                "`{}` is not a job number (`hvd-cluster jobs` lists them: 1, 2, ...)",
                input::shown(s)
            )
        };
        if s.is_empty()
            || s.len() > 9
            || s.starts_with('0')
            || !s.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        s.parse().map(JobId).map_err(|_| bad())
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting for the job before it to end.
    Queued,
    Running,
    Succeeded,
    /// Ended with a non-zero exit status.
    Failed,
    Cancelled,
    /// Ended by `stop --force`, or its runner is gone without recording an end: the master
    /// stopped, rebooted or was preempted while the job was queued or running.
    Interrupted,
}

impl State {
    pub fn ended(self) -> bool {
        !matches!(self, State::Queued | State::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Running => "running",
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
            State::Interrupted => "interrupted",
        }
    }
}

/// One job as the master's runner records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    pub id: JobId,
    pub state: State,
    /// horovodrun's exit status, once it ended.
    pub exit: Option<i32>,
    /// Seconds since the epoch (the master's clock).
    pub submitted: Option<u64>,
    pub started: Option<u64>,
    pub ended: Option<u64>,
    pub slots: u32,
    pub elastic: bool,
    /// The command every rank runs, as the user typed it.
    pub command: Vec<String>,
}

impl Job {
    /// The exit code `run` and `logs --follow` end with: the job's own, 1 when it was cancelled
    /// or interrupted (they say so in a line).
    pub fn exit_code(&self) -> u8 {
        match (self.state, self.exit) {
            (State::Succeeded, _) => 0,
            (State::Failed, Some(code)) => code.clamp(1, 255) as u8,
            _ => 1,
        }
    }

    /// "succeeded", "failed with exit status 3", ...
    pub fn how(&self) -> String {
        match (self.state, self.exit) {
            (State::Failed, Some(code)) => format!("failed with exit status {code}"),
            (state, _) => state.as_str().to_string(),
        }
    }

    /// The command as one line, shortened and escaped for a terminal.
    pub fn command_line(&self, max: usize) -> String {
        let words: Vec<String> = self
            .command
            .iter()
            .map(|w| {
                if !w.is_empty()
                    && w.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
                {
                    w.clone()
                } else {
                    shell_quote(w)
                }
            })
            .collect();
        input::shown_message(&words.join(" "), max)
    }
}

/// Reads one line of the runner's `list`: ten tab-separated fields, each by its grammar.
/// `None` for anything else (a master's output is not trusted).
pub fn parse_line(line: &str) -> Option<Job> {
    let f: Vec<&str> = line.split('\t').collect();
    if f.len() != 10 {
        return None;
    }
    let number = |s: &str| -> Option<Option<u64>> {
        if s.is_empty() {
            return Some(None);
        }
        if s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok().map(Some)
    };
    let id = JobId::parse(f[0]).ok()?;
    let alive = match f[8] {
        "1" => true,
        "0" => false,
        _ => return None,
    };
    let recorded = match f[1] {
        "queued" => State::Queued,
        "running" => State::Running,
        "succeeded" => State::Succeeded,
        "failed" => State::Failed,
        "cancelled" => State::Cancelled,
        "interrupted" => State::Interrupted,
        // submitted, its runner not started yet or never
        "" => State::Queued,
        _ => return None,
    };
    let state = if recorded.ended() || alive {
        recorded
    } else {
        State::Interrupted
    };
    let exit = match f[2] {
        "" => None,
        s if s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit()) => Some(s.parse().ok()?),
        _ => return None,
    };
    let slots = number(f[6])?.unwrap_or(0);
    let command: Vec<String> = if f[9].is_empty() {
        Vec::new()
    } else {
        serde_json::from_str(f[9]).ok()?
    };
    Some(Job {
        id,
        state,
        exit,
        submitted: number(f[3])?,
        started: number(f[4])?,
        ended: number(f[5])?,
        slots: u32::try_from(slots).ok()?,
        elastic: match f[7] {
            "1" => true,
            "0" | "" => false,
            _ => return None,
        },
        command,
    })
}

/// Every job of the runner's `list`, in number order, each once; an error names the first
/// line that is not a job's.
pub fn parse_list(out: &str) -> Result<Vec<Job>, String> {
    let mut jobs = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        match parse_line(line) {
            Some(job) => jobs.push(job),
            None => {
                return Err(format!(
                    "the master's job list has a line that is not a job's: {}",
                    input::shown_message(line, 120)
                ))
            }
        }
    }
    // the runner prints them unordered; a job twice (its end recorded twice) once
    jobs.sort_by_key(|j| j.id);
    jobs.dedup_by_key(|j| j.id);
    Ok(jobs)
}

/// The script (run as root on the master, after the runner is written there) that submits a
/// job: a new number, its words (horovodrun's `argv` NUL-separated, the user's `command` as
/// JSON, both in base64: no word reaches a shell), its slots; then the runner started in a
/// session of its own, so that it outlives this SSH connection. With `timeline`, the runner
/// records Horovod's timeline into the job's folder on /shared ([`timeline_path`]). Prints the
/// runner's `list` of the jobs before it, then `id=N` (read by [`parse_submitted`]). Pure.
pub fn submit_script(
    argv: &[String],
    command: &[String],
    slots: u32,
    elastic: bool,
    timeline: bool,
) -> String {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut nul_separated = Vec::new();
    for word in argv {
        nul_separated.extend_from_slice(word.as_bytes());
        nul_separated.push(0);
    }
    let command_json = serde_json::to_string(command).unwrap_or_else(|_| "[]".into());
    format!(
        "set -e\n\
         runner={runner}\n\
         bash \"$runner\" list || true\n\
         id=$(bash \"$runner\" new)\n\
         d={jobs}/$id\n\
         printf '%s' {argv} | base64 -d > \"$d/argv\"\n\
         printf '%s' {command} | base64 -d > \"$d/command.json\"\n\
         echo {slots} > \"$d/slots\"\n\
         echo {elastic} > \"$d/elastic\"\n\
         {timeline}\
         date +%s > \"$d/submitted\"\n\
         echo queued > \"$d/state\"\n\
         setsid -f bash \"$runner\" run \"$id\" < /dev/null > /dev/null 2>&1\n\
         for i in $(seq 50); do [ -s \"$d/runner.pid\" ] && break; sleep 0.1; done\n\
         echo \"id=$id\"\n",
        runner = shell_quote(RUNNER),
        jobs = shell_quote(JOBS_DIR),
        argv = shell_quote(&b64(&nul_separated)),
        command = shell_quote(&b64(command_json.as_bytes())),
        elastic = u8::from(elastic),
        timeline = if timeline {
            ": > \"$d/timeline\"\n"
        } else {
            ""
        },
    )
}

/// A job's folder on /shared, which every rank sees as `HVD_CLUSTER_JOB_DIR`: what the job
/// keeps there (its timeline, checkpoints) outlives the master's disk and comes back with
/// `pull`.
pub fn shared_dir(id: JobId) -> String {
    format!("/shared/jobs/{id}")
}

/// Where `run --timeline` has Horovod write the job's timeline (rank 0 writes it).
pub fn timeline_path(id: JobId) -> String {
    format!("{}/timeline.json", shared_dir(id))
}

/// The job's TensorBoard folder (`HVD_CLUSTER_LOG_DIR`): a run of its own below the folder
/// `hvd-cluster tensorboard` serves by default.
pub fn log_dir(id: JobId) -> String {
    format!("{LOGS_ROOT}/{id}")
}

/// The folder `hvd-cluster tensorboard` serves without one named: every job's log folder.
pub const LOGS_ROOT: &str = "/shared/logs";

/// What a submission printed: the jobs before it, and its number (`id=N`, last), each by its
/// grammar.
pub fn parse_submitted(out: &str) -> Result<(Vec<Job>, JobId), String> {
    let (before, last) = out
        .trim_end()
        .rsplit_once('\n')
        .unwrap_or(("", out.trim_end()));
    let id = last
        .trim()
        .strip_prefix("id=")
        .ok_or("no `id=` line")
        .and_then(|n| JobId::parse(n).map_err(|_| "no job number"))?;
    Ok((parse_list(before)?, id))
}

/// "job 3" or "jobs 3 and 4 (running, queued)": the jobs a new one waits for.
pub fn job_ahead_line(waiting: &[&Job]) -> Option<String> {
    let (last, rest) = waiting.split_last()?;
    let states: Vec<&str> = waiting.iter().map(|j| j.state.as_str()).collect();
    Some(if rest.is_empty() {
        format!("job {} ({})", last.id, states.join(", "))
    } else {
        let ids: Vec<String> = rest.iter().map(|j| j.id.to_string()).collect();
        format!(
            "jobs {} and {} ({})",
            ids.join(", "),
            last.id,
            states.join(", ")
        )
    })
}

/// How a command that takes every slot (the acceptance check, a bench step) stands to jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotClaim {
    /// `check` and `bench`: refused while a job is queued or running.
    Alone,
    /// The check of `up`, `scale` and `heal`: beside a running job on purpose (a `scale`
    /// under an elastic job); it waits for another check (up to 15 minutes).
    BesideJobs,
}

const SLOTS_BUSY: &str = "HVD_SLOTS_BUSY";
const JOBS_AHEAD: &str = "HVD_JOBS_AHEAD";

/// `command` (a root shell's, on the master) run holding the jobs' check lock
/// (`JOBS_DIR/.check`): while it runs, a job whose turn comes waits, since the runner looks
/// at that lock under its own before it marks a job running. With [`SlotClaim::Alone`] the
/// jobs are read under the runner's lock once the check lock is held, so that no job can
/// start between that look and the command: a queued or running one prints `HVD_JOBS_AHEAD`
/// and its `list` line instead of running the command. Another check holding the lock prints
/// `HVD_SLOTS_BUSY`. [`slots_refused`] reads both. Pure.
pub fn claim_slots(command: &str, claim: SlotClaim) -> String {
    let (wait, look) = match claim {
        SlotClaim::Alone => (
            "-n",
            format!(
                "if [ -e \"$runner\" ]; then\n\
                 live=$(flock \"$j/.lock\" bash \"$runner\" list < /dev/null | \
                 awk -F '\\t' '($2 == \"queued\" || $2 == \"running\" || $2 == \"\") && $9 == \"1\"') || exit 1\n\
                 if [ -n \"$live\" ]; then echo {JOBS_AHEAD}; printf '%s\\n' \"$live\"; exit 0; fi\n\
                 fi\n"
            ),
        ),
        SlotClaim::BesideJobs => ("-w 900", String::new()),
    };
    format!(
        "j={jobs}\n\
         runner={runner}\n\
         mkdir -p \"$j\" && chmod 700 \"$j\" || exit 1\n\
         exec 8>>\"$j/.check\"\n\
         flock {wait} 8 || {{ echo {SLOTS_BUSY}; exit 0; }}\n\
         {look}\
         {command}\n",
        jobs = shell_quote(JOBS_DIR),
        runner = shell_quote(RUNNER),
    )
}

/// Why a command wrapped by [`claim_slots`] did not run.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotsRefusal {
    /// Another check or bench step holds the slots.
    Busy,
    /// These jobs are queued or running.
    JobsAhead(Vec<Job>),
}

impl SlotsRefusal {
    /// "another check or bench step is using the slots", "job 3 (running) is using them".
    pub fn describe(&self) -> String {
        match self {
            SlotsRefusal::Busy => "another check or bench step is using the slots".into(),
            SlotsRefusal::JobsAhead(jobs) => {
                let live: Vec<&Job> = jobs.iter().collect();
                format!(
                    "{} is using them",
                    job_ahead_line(&live).unwrap_or_else(|| "a job".into())
                )
            }
        }
    }
}

/// What a command wrapped by [`claim_slots`] printed first: `Ok(None)` when it ran.
pub fn slots_refused(out: &str) -> Result<Option<SlotsRefusal>, String> {
    let mut lines = out.lines().skip_while(|l| l.trim().is_empty());
    match lines.next().map(str::trim) {
        Some(SLOTS_BUSY) => Ok(Some(SlotsRefusal::Busy)),
        Some(JOBS_AHEAD) => {
            let rest: Vec<&str> = lines.collect();
            let jobs = parse_list(&rest.join("\n"))?;
            Ok(Some(SlotsRefusal::JobsAhead(jobs)))
        }
        _ => Ok(None),
    }
}

/// The runner called as root on a node with `args` (ours: a subcommand and a job number).
pub fn runner_call(args: &str) -> String {
    format!("bash {} {args}", shell_quote(RUNNER))
}

/// What the runner's `kill` said on a node: (processes found, processes left).
pub fn parse_killed(out: &str) -> Option<(u32, u32)> {
    let line = out.lines().rev().find(|l| l.starts_with("killed="))?;
    let mut fields = line.split_whitespace();
    let killed = fields.next()?.strip_prefix("killed=")?.parse().ok()?;
    let left = fields.next()?.strip_prefix("left=")?.parse().ok()?;
    Some((killed, left))
}

/// `1m 05s`, `2h 03m`, `12s`.
pub fn duration(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The jobs as a table, newest last; `now` is the master's clock (seconds since the epoch).
pub fn table(jobs: &[Job], now: u64) -> String {
    let mut out = format!(
        "{:>4}  {:<28}  {:>5}  {:<10}  {}\n",
        "JOB", "STATE", "SLOTS", "TOOK", "COMMAND"
    );
    for j in jobs {
        let took = match (j.started, j.ended) {
            (Some(s), Some(e)) => duration(e.saturating_sub(s)),
            (Some(s), None) if j.state == State::Running => duration(now.saturating_sub(s)),
            _ => "-".into(),
        };
        let slots = if j.elastic {
            format!("{}e", j.slots)
        } else {
            j.slots.to_string()
        };
        out.push_str(&format!(
            "{:>4}  {:<28}  {:>5}  {:<10}  {}\n",
            j.id,
            j.how(),
            slots,
            took,
            j.command_line(80)
        ));
    }
    out
}

#[cfg(test)]
mod tests;
