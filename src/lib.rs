//! hvd-cluster: one TOML profile in, a working Horovod cluster out, and removed again.
//!
//! The flow runs one way: [`profile`] (parse + validate) → [`plan`] (desired vs observed,
//! pure) → [`apply`] (provider calls, state saved after each step) → bootstrap → check.
//! Only [`openstack`] and the provider modules talk to the outside world.

pub mod apply;
pub mod args;
pub mod bootstrap;
pub mod check;
pub mod cluster;
pub mod cmd;
pub mod converge;
pub mod images;
pub mod input;
pub mod openstack;
pub mod plan;
pub mod profile;
pub mod progress;
pub mod provider;
pub mod render;
pub mod ssh;
pub mod state;
pub mod wait;
