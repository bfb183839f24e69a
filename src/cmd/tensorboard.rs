//! `tensorboard`: TensorBoard in the master's container over a folder of /shared (every job's
//! `HVD_CLUSTER_LOG_DIR` is a run below /shared/logs, the default), reached through an SSH
//! tunnel on 127.0.0.1 as Jupyter is. The URL is printed once TensorBoard answers through the
//! tunnel; Ctrl-C closes the tunnel and stops TensorBoard on the master.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};

use super::jobs::master_only;
use crate::bootstrap::{BootstrapError, NodeSession};
use crate::cluster;
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::jobs::LOGS_ROOT;
use crate::tensorboard::{self, Started};
use crate::transfer::paths::SharedPath;

/// How long TensorBoard may take to answer (it imports TensorFlow's pieces first: tens of
/// seconds on a small node).
const READY_WITHIN: Duration = Duration::from_secs(180);

pub async fn tensorboard(ctx: &Context, file: &Path, logdir: Option<&str>) -> Result<u8, Error> {
    let dir = match logdir {
        Some(raw) => SharedPath::parse(raw)
            .map_err(|e| Error::Usage(format!("the folder to serve: {}", e.0)))?
            .as_str()
            .to_string(),
        None => LOGS_ROOT.to_string(),
    };
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| Error::Runtime(format!("cannot listen for Ctrl-C: {e}")))?;
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|e| Error::Runtime(format!("cannot listen for SIGTERM: {e}")))?;
    let existing = cluster::existing(ctx, file).await?;
    let master = master_only(ctx, &existing).await?;
    let out = master
        .ssh
        .sudo(&tensorboard::start_script(&dir))
        .await
        .map_err(BootstrapError::from)?;
    let port = match tensorboard::parse_started(&out) {
        Ok(Started::Port(port)) => port,
        Ok(Started::NotInImage) => {
            return Err(Error::Runtime(format!(
                "the image {} has no TensorBoard for its Python: add it to the image (`pip install tensorboard`), or serve the logs from a machine that has it after `hvd-cluster pull {} {dir}`",
                input::shown(&existing.profile.container.image),
                input::shown(&file.to_string_lossy()),
            )))
        }
        Err(e) => {
            return Err(Error::Runtime(format!(
                "the master did not start TensorBoard: {e}: {}",
                input::shown_message(out.trim(), 200)
            )))
        }
    };
    // From here on, TensorBoard runs on the master: every way out stops it.
    let served = tokio::select! {
        served = serve(ctx, &master, port, &dir) => served,
        _ = interrupt.recv() => Ok(()),
        _ = terminate.recv() => Ok(()),
    };
    let stopped = tokio::time::timeout(
        Duration::from_secs(10),
        master.ssh.sudo(&tensorboard::stop_script(port)),
    )
    .await;
    served?;
    match stopped {
        Ok(Ok(_)) => ctx.progress.line("TensorBoard stopped on the master"),
        _ => ctx.progress.line(format!(
            "TensorBoard on the master (port {port}) may still run: it did not answer the stop within 10 s"
        )),
    }
    Ok(0)
}

/// The tunnel, the wait for TensorBoard's first answer through it, the URL; then waits for
/// Ctrl-C (the caller's), watching that TensorBoard still runs.
async fn serve(ctx: &Context, master: &NodeSession, port: u16, dir: &str) -> Result<(), Error> {
    let local = cluster::tunnel_to(&master.ssh, port, "TensorBoard").await?;
    let url = format!("http://127.0.0.1:{local}/");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .no_proxy()
        .build()
        .map_err(|e| Error::Runtime(format!("no HTTP client: {e}")))?;
    let spinner = ctx
        .progress
        .spinner(&format!("TensorBoard starting on the master over {dir}"));
    let started = Instant::now();
    let mut last_look = Instant::now();
    loop {
        let answered = http
            .get(format!("{url}data/environment"))
            .send()
            .await
            .map(|r| r.status().is_success())
            .unwrap_or(false);
        if answered {
            break;
        }
        if last_look.elapsed() > Duration::from_secs(5) {
            last_look = Instant::now();
            ensure_alive(master, port).await?;
        }
        if started.elapsed() > READY_WITHIN {
            return Err(Error::Runtime(format!(
                "TensorBoard did not answer within {}s on the master",
                READY_WITHIN.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    spinner.finish_and_clear();
    println!("TensorBoard: {url}");
    ctx.progress.line(format!(
        "serving {dir} on the master (a run per folder; every job's HVD_CLUSTER_LOG_DIR is one); the tunnel stays open until Ctrl-C"
    ));
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        ensure_alive(master, port).await?;
    }
}

/// An error with TensorBoard's last lines when its process on the master has ended.
async fn ensure_alive(master: &NodeSession, port: u16) -> Result<(), Error> {
    let out = master
        .ssh
        .sudo(&tensorboard::alive_script(port))
        .await
        .map_err(BootstrapError::from)?;
    let mut lines = out.lines();
    if lines.next().map(str::trim) == Some("alive=1") {
        return Ok(());
    }
    let said: Vec<&str> = lines.collect();
    Err(Error::Runtime(format!(
        "TensorBoard ended on the master: {}",
        input::shown_message(said.join(" | ").trim(), 400)
    )))
}
