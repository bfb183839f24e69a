//! hvd-cluster: one TOML profile in, a working Horovod cluster out, and removed again.
//!
//! The flow runs one way: [`profile`] (parse + validate) → [`plan`] (the provider's
//! blueprint against what it observes; pure) → [`apply`] (provider calls, state saved after
//! each step) → [`bootstrap`] (a list of steps over SSH) → [`check`].
//!
//! The modules stand in layers, each importing only from its own layer and the ones below
//! (`tests/layers.rs` checks it, and that no folder's modules import one another in a circle):
//! 1. input grammars and small tools: [`input`], [`wait`], [`progress`], [`ssh`] and
//!    [`host_keys`] (what a node's pinned, offered and console-shown keys are), the
//!    [`openstack`] client, [`interrupt`] (Ctrl-C while the cloud is making something);
//! 2. the cluster's model: [`templates`], [`images`], [`registry`], [`profile`], [`plan`],
//!    [`state`], [`render`], [`mpi`], [`jobs`] (the jobs on the master: their grammar and
//!    the runner's words);
//! 3. the providers: [`provider`] (the only code that talks to a cloud);
//! 4. the engines: [`apply`], [`bootstrap`], [`check`], [`bench`](mod@bench), [`transfer`]
//!    (`push` and `pull` of a tree to and from `/shared`);
//! 5. what commands share: [`context`] (the options every command runs with), [`error`]
//!    (what a command fails with, and its exit code), [`cluster`] (a cluster that exists:
//!    its nodes, ssh_config and sessions);
//! 6. [`converge`]: the `up` that `scale` and `heal` run too, returning what it did, and
//!    [`lifecycle`]: stopping a cluster and starting it again;
//! 7. [`cmd`]: one file per command, and the one printer ([`cmd::output`]);
//! 8. [`args`]: the command line, and which command runs.
//!
//! Where the outside world is reached: the cloud only through [`provider`] (the
//! [`openstack`] client, or this machine's Docker engine for the local provider); the nodes
//! over SSH through [`ssh`] (from [`bootstrap`], [`check`], [`cluster`] and [`converge`]);
//! this machine's Docker also in [`images`] and `bootstrap::image`; files in [`state`] (the
//! cluster's folder) and [`profile`] (reading the profile; `scale` writes it). Pure, no I/O:
//! [`plan`], [`bench`](mod@bench), [`render`], [`templates`], [`input`], [`args`], [`wait`]
//! apart from its sleep.

pub mod apply;
pub mod args;
pub mod autostop;
pub mod bake;
pub mod bench;
pub mod bootstrap;
pub mod check;
pub mod cluster;
pub mod cmd;
pub mod context;
pub mod converge;
pub mod error;
pub mod host_keys;
pub mod images;
pub mod input;
pub mod interrupt;
pub mod jobs;
pub mod jupyter_tls;
pub mod lifecycle;
pub mod mpi;
pub mod openstack;
pub mod plan;
pub mod profile;
pub mod progress;
pub mod provider;
pub mod registry;
pub mod render;
pub mod ssh;
pub mod state;
pub mod templates;
pub mod tensorboard;
pub mod top;
pub mod transfer;
pub mod wait;
