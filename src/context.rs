//! The options every command runs with ([`Context`]): where clusters keep their folders,
//! progress, parallelism and the few knobs a command sets for the work it shares.

use std::path::PathBuf;
use std::time::Duration;

use crate::apply::Applier;
use crate::progress::Progress;
use crate::provider::Provider;
use crate::state::{self, ClusterDir, ClusterState};

/// How long a node gets to answer SSH unless `--ssh-wait` says otherwise.
pub const DEFAULT_SSH_WAIT: Duration = Duration::from_secs(600);

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
    /// How long each node of a connected cluster gets to answer SSH (`--ssh-wait`).
    pub ssh_wait: Duration,
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
            ssh_wait: DEFAULT_SSH_WAIT,
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
