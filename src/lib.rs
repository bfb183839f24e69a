//! hvd-cluster: one TOML profile in, a working Horovod cluster out, and removed again.
//!
//! The flow runs one way: [`profile`] (parse + validate) → [`plan`] (the provider's
//! blueprint against what it observes; pure) → [`apply`] (provider calls, state saved after
//! each step) → [`bootstrap`] (a list of steps over SSH) → [`check`]. [`cmd`] holds one file
//! per command and [`args`] their clap definitions; [`converge`] is the work `up`, `scale`
//! and `heal` share, [`cluster`] what commands need of a cluster that exists.
//!
//! Where the outside world is reached: the cloud only through [`provider`] (the
//! [`openstack`] client, or this machine's Docker engine for the local provider); the nodes
//! over SSH through [`ssh`] (from [`bootstrap`], [`check`], [`cluster`] and [`converge`]);
//! this machine's Docker also in [`images`] and `bootstrap::image`; files in [`state`] (the
//! cluster's folder) and [`profile`] (reading the profile; `scale` writes it). Pure, no I/O:
//! [`plan`], [`bench`](mod@bench), [`render`], [`input`], [`args`], [`wait`] apart from its sleep.

pub mod apply;
pub mod args;
pub mod bench;
pub mod bootstrap;
pub mod check;
pub mod cluster;
pub mod cmd;
pub mod converge;
pub mod images;
pub mod input;
pub mod mpi;
pub mod openstack;
pub mod plan;
pub mod profile;
pub mod progress;
pub mod provider;
pub mod render;
pub mod ssh;
pub mod state;
pub mod wait;
