//! `bench`: a synthetic ResNet training job with `horovodrun` at each slot count, from the
//! master's container, its output read line by line (progress, every rank's images/s,
//! allreduce timings); then the table (or `--json`) and an SVG chart in the cluster's folder.
//! Ctrl-C (or no output for [`SILENCE`]) stops the job on every node. The pure parts are
//! [`crate::bench`].

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::future::join_all;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::jobs::{refuse_beside_jobs, slots_taken};
use super::output::emit;
use crate::bench::output::JobOutput;
use crate::bench::plan::{self, Launch, Step};
use crate::bench::report::{self, Report};
use crate::bench::{self, svg, Framework, Raw, Settings};
use crate::bootstrap::{BootstrapError, NodeSession, NODE_DIR};
use crate::cluster::{self, Existing};
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::jobs::{claim_slots, slots_refused, SlotClaim, SlotsRefusal};
use crate::profile::Collective;
use crate::render::HostSlots;
use crate::ssh::shell_quote;
use crate::state;

/// A job that prints nothing for this long is stopped.
pub const SILENCE: Duration = Duration::from_secs(600);
/// Without a terminal, the most often a step is reported as a line.
const LINE_EVERY: Duration = Duration::from_secs(5);
/// Lines of a failed job's output shown in the error.
const TAIL: usize = 15;

pub async fn bench(ctx: &Context, file: &Path, raw: &Raw<'_>, json: bool) -> Result<u8, Error> {
    // Every argument by its grammar before any file, cloud or node is touched.
    let settings = Settings::parse(raw).map_err(|e| Error::Usage(e.0))?;
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| Error::Runtime(format!("cannot watch for Ctrl-C: {e}")))?;
    let stopped_early =
        || Error::Stopped("interrupted before the benchmark started; nothing ran".into());

    let existing = tokio::select! {
        e = cluster::existing(ctx, file) => e?,
        _ = interrupt.recv() => return Err(stopped_early()),
    };
    let hosts = planned_hosts(&existing).map_err(Error::Runtime)?;
    let steps = plan::plan(&hosts, settings.slots.as_deref()).map_err(|e| Error::Usage(e.0))?;
    let shown = input::shown(&file.to_string_lossy());
    let prepared = tokio::select! {
        p = prepare(ctx, &existing, &settings, &shown) => p?,
        _ = interrupt.recv() => return Err(stopped_early()),
    };
    let Prepared {
        opened,
        framework,
        job,
    } = &prepared;
    let ifaces: Vec<String> = opened
        .sessions
        .iter()
        .map(|s| s.iface.clone())
        .filter(|i| !i.is_empty() && i != "docker0")
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let p = &existing.profile;
    let collective = match p.container.collective {
        Collective::Gloo => "--gloo",
        Collective::Mpi => "--mpi",
    };
    let mut rows = Vec::new();
    for step in &steps {
        let run_id = format!("hvdbench-{:016x}", rand::random::<u64>());
        let launch = Launch {
            collective,
            ssh_port: p.container.ssh_port,
            ifaces: &ifaces,
            job,
            run_id: &run_id,
        };
        let argv = plan::horovodrun_argv(step, &launch, &settings);
        let refused = |r: &SlotsRefusal| slots_taken(r, &p.name, &shown, "bench");
        let out = run_step(
            ctx,
            &opened.sessions,
            step,
            &argv,
            &run_id,
            &mut interrupt,
            &refused,
        )
        .await?;
        let row = report::read_job(step, &out).map_err(|e| Error::Runtime(e.to_string()))?;
        ctx.progress.line(format!(
            "{} slot(s): {:.1} images/s ({:.1} per slot) from {} rank(s)",
            row.slots,
            row.images_per_sec,
            row.images_per_sec_per_slot,
            row.ranks.len()
        ));
        rows.push(row);
    }

    let mut report = Report::new(&p.name, *framework, &settings, rows);
    // The chart's name is made of checked words only; the folder is the cluster's own.
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let chart = existing
        .dir
        .path
        .join(format!("bench-{framework}-{stamp}.svg"));
    state::write_atomic(&chart, svg::render(&report).as_bytes(), 0o600)?;
    report.chart = Some(chart.display().to_string());
    emit(json, &report, || print!("{}", report.table()));
    Ok(0)
}

/// The cluster's hosts with their slots, from what the provider reported (checked again
/// here: a name or address that is not one never reaches a command line).
fn planned_hosts(existing: &Existing) -> Result<Vec<HostSlots>, String> {
    existing
        .nodes
        .iter()
        .map(|n| {
            let given = n.private_ip.clone().unwrap_or_default();
            let ip = given.parse().map_err(|_| {
                format!(
                    "{}: the provider gave `{}` as its private address",
                    input::shown(&n.name),
                    input::shown(&given)
                )
            })?;
            HostSlots::new(&n.name, ip, n.slots)
                .map_err(|e| format!("a node from the provider: {e}"))
        })
        .collect()
}

struct Prepared {
    opened: cluster::Opened,
    framework: Framework,
    /// The job's path inside the containers.
    job: String,
}

/// Sessions to every node, the framework (asked for, or what the image carries), and the
/// job written to every node (the containers see `NODE_DIR` read-only).
async fn prepare(
    ctx: &Context,
    existing: &Existing,
    s: &Settings,
    shown: &str,
) -> Result<Prepared, Error> {
    let opened = existing.open(ctx).await?;
    let master = opened.master();
    // Its jobs take the slots they measure: never beside a job.
    refuse_beside_jobs(master, &existing.profile.name, shown, "bench").await?;
    let spinner = ctx.progress.spinner("bench");
    spinner.set_message("which frameworks the image carries");
    let asked = bench::probe_modules(s.framework);
    let probe = format!(
        "docker exec hvd python -c {} 2>&1 || true",
        shell_quote(&bench::probe_script(&asked))
    );
    let said = master
        .ssh
        .sudo(&probe)
        .await
        .map_err(|e| Error::Runtime(format!("probing the Horovod image: {e}")))?;
    spinner.finish_and_clear();
    let framework = bench::choose_framework(s.framework, &said).map_err(Error::Usage)?;
    ctx.progress.line(format!(
        "bench: {framework}, {}, batch {} per slot, {} step(s) after {} warm-up",
        s.model, s.batch_size, s.steps, s.warmup
    ));
    let (name, body) = framework.job();
    let path = format!("{NODE_DIR}/bench/{name}");
    futures::future::try_join_all(
        opened
            .sessions
            .iter()
            .map(|n| n.ssh.write_file(&path, body.as_bytes(), 0o644)),
    )
    .await
    .map_err(BootstrapError::from)?;
    Ok(Prepared {
        opened,
        framework,
        job: path,
    })
}

/// Runs one slot count's job from the master's container, streaming its output into the
/// progress; returns the whole output once horovodrun exits 0. It holds the master's check
/// lock: a job whose turn comes meanwhile waits, and one that took the slots since the last
/// look is `refused`.
async fn run_step(
    ctx: &Context,
    sessions: &[NodeSession],
    step: &Step,
    argv: &[String],
    run_id: &str,
    interrupt: &mut Signal,
    refused: &dyn Fn(&SlotsRefusal) -> Error,
) -> Result<String, Error> {
    let master = &sessions[0];
    let what = format!("{} slot(s) on {} host(s)", step.slots, step.hosts.len());
    ctx.progress.line(format!("$ {}", argv.join(" ")));
    let spinner = ctx.progress.spinner(&what);
    spinner.set_message("starting the ranks");
    let quoted: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
    // The exit code travels in the output, so a failure still shows what horovodrun said.
    let script = format!(
        "docker exec -w /shared hvd {} 2>&1; rc=$?; echo; echo HVD_EXIT=$rc",
        quoted.join(" ")
    );
    let mut child = master
        .ssh
        .session()
        .raw_command(format!(
            "sudo -n bash -c {}",
            shell_quote(&claim_slots(&script, SlotClaim::Alone))
        ))
        .stdin(openssh::Stdio::null())
        .stdout(openssh::Stdio::piped())
        .stderr(openssh::Stdio::null())
        .spawn()
        .await
        .map_err(|e| Error::Runtime(format!("starting horovodrun on the master: {e}")))?;
    let stdout = child
        .stdout()
        .take()
        .ok_or_else(|| Error::Runtime("no output stream from the master".into()))?;
    let mut lines = BufReader::new(stdout).lines();
    let mut kept = JobOutput::default();
    let started = Instant::now();
    let mut heard = Instant::now();
    let mut shown: Option<Instant> = None;
    loop {
        let silence = tokio::time::sleep_until((heard + SILENCE).into());
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => {
                    heard = Instant::now();
                    if let Some(p) = report::progress_line(&line) {
                        let msg = format!(
                            "{} {}/{}, {:.0}s",
                            if p.warmup { "warm-up step" } else { "step" },
                            p.step,
                            p.steps,
                            started.elapsed().as_secs_f64()
                        );
                        // Without a terminal, a line for the first and last step of a
                        // phase and one every few seconds between.
                        let due = shown.is_none_or(|t: Instant| t.elapsed() >= LINE_EVERY);
                        if !ctx.progress.is_terminal() && (p.step <= 1 || p.step == p.steps || due) {
                            ctx.progress.line(format!("{what}: {msg}"));
                            shown = Some(Instant::now());
                        }
                        spinner.set_message(msg);
                    }
                    kept.push(line);
                }
                Ok(None) => break,
                Err(e) => {
                    spinner.finish_and_clear();
                    stop_everywhere(ctx, sessions, run_id).await;
                    return Err(Error::Runtime(format!("reading the job's output: {e}")));
                }
            },
            _ = interrupt.recv() => {
                spinner.finish_and_clear();
                ctx.progress.line(format!("interrupted at {what}: stopping the job on every node"));
                let stopped = stop_everywhere(ctx, sessions, run_id).await;
                return Err(Error::Stopped(format!(
                    "interrupted at {what}; the job was stopped on {stopped} of {} node(s)",
                    sessions.len()
                )));
            }
            _ = silence => {
                spinner.finish_and_clear();
                stop_everywhere(ctx, sessions, run_id).await;
                return Err(Error::Runtime(format!(
                    "bench at {what}: no output for {}s; the job was stopped",
                    SILENCE.as_secs()
                )));
            }
        }
    }
    spinner.finish_and_clear();
    let _ = child.wait().await;
    if !kept.exited_zero() {
        if let Ok(Some(refusal)) = slots_refused(&kept.text()) {
            return Err(refused(&refusal));
        }
        return Err(Error::Runtime(format!(
            "bench at {what}: `{}` failed:\n{}",
            argv.join(" "),
            kept.tail(TAIL)
        )));
    }
    Ok(kept.text())
}

/// Stops this run's horovodrun and ranks in every node's container: every process whose
/// command line carries the run's word (TERM, then KILL). Returns on how many nodes that
/// worked; each node gets 30 seconds.
async fn stop_everywhere(ctx: &Context, sessions: &[NodeSession], run_id: &str) -> usize {
    // `[x]` in the pattern: it matches the run's word but not the command carrying it.
    let (first, rest) = run_id.split_at(run_id.len() - 1);
    let pattern = format!("{first}[{rest}]");
    let q = shell_quote(&pattern);
    let script = format!(
        "docker exec hvd pkill -TERM -f {q}; sleep 2; docker exec hvd pkill -KILL -f {q}; true"
    );
    let results = join_all(sessions.iter().map(|s| {
        let script = &script;
        async move {
            let done = tokio::time::timeout(Duration::from_secs(30), s.ssh.sudo(script)).await;
            match done {
                Ok(Ok(_)) => true,
                Ok(Err(e)) => {
                    ctx.progress
                        .line(format!("{}: could not stop the job: {e}", s.node.name));
                    false
                }
                Err(_) => {
                    ctx.progress
                        .line(format!("{}: stopping the job took over 30s", s.node.name));
                    false
                }
            }
        }
    }))
    .await;
    results.into_iter().filter(|ok| *ok).count()
}
