//! What a command can fail with ([`Error`]): every lower layer's error, each with one
//! readable message, and the exit code scripts can rely on ([`Error::exit_code`]). Below the
//! commands, so the work they share ([`crate::cluster`], [`crate::converge`]) returns it too.

use crate::apply::ApplyError;
use crate::bootstrap::BootstrapError;
use crate::check::CheckError;
use crate::images::ImageError;
use crate::plan::Shortfall;
use crate::profile::ProfileError;
use crate::provider::ProviderError;
use crate::state::StateError;

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
    Autostop(#[from] crate::autostop::AutostopError),
    #[error(transparent)]
    Images(#[from] ImageError),
    /// Bad input (exit 2): a local-provider setting from the environment.
    #[error(transparent)]
    Local(#[from] crate::provider::local::SettingError),
    /// Bad input (exit 2): a registry's credentials or CA.
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
    /// A public Jupyter's certificate: the profile's files are bad input (exit 2).
    #[error(transparent)]
    JupyterTls(#[from] crate::jupyter_tls::TlsError),
    /// `push`, `pull`: a refused path or no room is bad input (exit 2).
    #[error(transparent)]
    Transfer(#[from] crate::transfer::TransferError),
    /// Bad arguments: exit 2.
    #[error("{0}")]
    Usage(String),
    /// Something failed while working (a tunnel, ssh, horovodrun, a cloud that kept a
    /// resource): exit 1, like every other runtime failure.
    #[error("{0}")]
    Runtime(String),
    #[error(
        "interrupted; the state is saved: run the same command again to resume, or `down` to remove everything"
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
            | Error::Registry(_)
            | Error::Provider(ProviderError::Resolve { .. }) => 2,
            Error::JupyterTls(e) if e.is_bad_input() => 2,
            Error::Transfer(e) if e.is_bad_input() => 2,
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
