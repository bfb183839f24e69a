//! The commands, one file each (as tokio's mini-redis keeps `src/cmd/`): each reads top to
//! bottom as the flow profile → plan → apply → bootstrap → report. What several share lives
//! elsewhere: [`crate::converge`] (the `up` that `scale` and `heal` run too),
//! [`crate::cluster`] (an opened cluster: its nodes, ssh_config and sessions) and [`output`]
//! (what is printed, for people and as JSON). The arguments are parsed in [`crate::args`].

mod bench;
mod check;
mod down;
mod heal;
mod jupyter;
pub mod output;
mod plan;
mod run;
mod scale;
mod ssh;
mod ssh_config;
mod status;
mod up;
mod validate;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::apply::{Applier, ApplyError};
use crate::args::Command;
use crate::bootstrap::BootstrapError;
use crate::check::CheckError;
use crate::images::ImageError;
use crate::input;
use crate::plan::Shortfall;
use crate::profile::ProfileError;
use crate::progress::Progress;
use crate::provider::{Provider, ProviderError};
use crate::state::{self, ClusterDir, ClusterState, StateError};

/// Everything a command can fail with, each with one readable message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Profile(#[from] ProfileError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("not enough quota for this plan; nothing was created:\n{}", list(.0))]
    Quota(Vec<Shortfall>),
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error(transparent)]
    Images(#[from] ImageError),
    /// Bad input (exit 2): a local-provider setting from the environment.
    #[error(transparent)]
    Local(#[from] crate::provider::local::SettingError),
    /// Bad arguments: exit 2.
    #[error("{0}")]
    Usage(String),
    /// Something failed while working (a tunnel, ssh, horovodrun, a cloud that kept a
    /// resource): exit 1, like every other runtime failure.
    #[error("{0}")]
    Runtime(String),
    #[error(
        "interrupted; the state is saved: run `up` again to resume, or `down` to remove everything"
    )]
    Interrupted,
    /// Interrupted, by a command that cleans up after itself (`bench`): exit 130.
    #[error("{0}")]
    Stopped(String),
}

fn list(items: &[Shortfall]) -> String {
    items
        .iter()
        .map(|s| format!("  {s}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Profile(_)
            | Error::Usage(_)
            | Error::Images(ImageError::Mirror(_))
            | Error::Local(_)
            | Error::Provider(ProviderError::Resolve { .. }) => 2,
            Error::Quota(_) | Error::Provider(ProviderError::Quota(_)) => 3,
            Error::Apply(ApplyError::Step {
                source: ProviderError::Quota(_),
                ..
            }) => 3,
            Error::Interrupted | Error::Stopped(_) => 130,
            _ => 1,
        }
    }
}

/// Options shared by every command.
pub struct Context {
    pub state_root: PathBuf,
    pub progress: Progress,
    pub quiet: bool,
    /// Most concurrent cloud calls inside one dependency level.
    pub parallel: usize,
    /// How long workers dropped from elastic discovery get to leave a job before deletion.
    pub drain_grace: Duration,
    /// `heal`: servers the cloud calls healthy are also probed over SSH (container, sshd).
    pub probe_workers: bool,
    /// Children per node in the image's fan-out tree.
    pub fanout: usize,
}

impl Context {
    pub fn new(state_dir: Option<PathBuf>, quiet: bool, parallel: usize) -> Context {
        Context {
            state_root: state_dir.unwrap_or_else(state::default_root),
            progress: Progress::new(quiet),
            quiet,
            parallel: parallel.max(1),
            drain_grace: Duration::from_secs(20),
            probe_workers: false,
            fanout: crate::bootstrap::fanout::DEGREE,
        }
    }

    pub fn applier<'a>(
        &'a self,
        provider: &'a dyn Provider,
        dir: &'a ClusterDir,
        state: ClusterState,
    ) -> Applier<'a> {
        let mut applier = Applier::new(provider, dir, &self.progress, state);
        applier.deadlines.parallel = self.parallel;
        applier
    }
}

/// What `status` and `down` act on.
pub enum Target {
    Profile(PathBuf),
    Cluster { name: String, cloud: Option<String> },
}

/// `plan` exit code when changes are pending (like `terraform plan -detailed-exitcode`).
pub const PLAN_HAS_CHANGES: u8 = 10;

/// Whether the command handles Ctrl-C itself (stopping what it started on the nodes), so
/// that `main` must not drop it at the first signal.
pub fn handles_interrupt(command: &Command) -> bool {
    matches!(command, Command::Bench { .. })
}

/// Runs one parsed command.
pub async fn dispatch(ctx: &mut Context, command: Command) -> Result<u8, Error> {
    match command {
        Command::Validate { file } => validate::validate(ctx, &file).await,
        Command::Plan { file, json } => plan::plan(ctx, &file, json).await,
        Command::Up { file, infra_only } => up::up(ctx, &file, infra_only).await,
        Command::Scale {
            file,
            workers,
            drain_grace,
        } => {
            ctx.drain_grace = Duration::from_secs(drain_grace);
            scale::scale(ctx, &file, workers).await
        }
        Command::Heal {
            file,
            watch,
            drain_grace,
        } => {
            ctx.drain_grace = Duration::from_secs(drain_grace);
            heal::heal(ctx, &file, watch.map(Duration::from_secs)).await
        }
        Command::Check { file, json } => check::check(ctx, &file, json).await,
        Command::Run {
            file,
            elastic,
            min_np,
            max_np,
            send,
            mpi_args,
            command,
        } => {
            run::run(
                ctx,
                &file,
                elastic.then_some((min_np, max_np)),
                &send,
                mpi_args.as_deref(),
                &command,
            )
            .await
        }
        Command::Bench {
            file,
            slots,
            model,
            batch_size,
            framework,
            steps,
            warmup,
            json,
        } => {
            let raw = crate::bench::Raw {
                slots: slots.as_deref(),
                model: model.as_deref(),
                batch_size: batch_size.as_deref(),
                framework: framework.as_deref(),
                steps: steps.as_deref(),
                warmup: warmup.as_deref(),
            };
            bench::bench(ctx, &file, &raw, json).await
        }
        Command::Ssh {
            file,
            node,
            command,
        } => ssh::ssh(ctx, &file, node.as_deref(), &command).await,
        Command::SshConfig { file } => ssh_config::ssh_config(ctx, &file).await,
        Command::Jupyter { file } => jupyter::jupyter(ctx, &file).await,
        Command::Status { target, json } => status::status(ctx, target.into(), json).await,
        Command::Down { target } => down::down(ctx, target.into()).await,
    }
}

/// A path from the command line, as it may appear in a message (shortened, escaped).
pub(crate) fn shown_path(path: &Path) -> String {
    input::shown(&path.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_exits_2_and_runtime_failures_exit_1() {
        assert_eq!(Error::Usage("--cluster: bad".into()).exit_code(), 2);
        assert_eq!(
            Error::Runtime("still present after delete: server x".into()).exit_code(),
            1
        );
        assert_eq!(
            Error::Runtime("cannot open an SSH tunnel to Jupyter".into()).exit_code(),
            1
        );
        assert_eq!(Error::Interrupted.exit_code(), 130);
        assert_eq!(
            Error::Stopped("interrupted at 2 slot(s)".into()).exit_code(),
            130
        );
    }
}
