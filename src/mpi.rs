//! `collective = "mpi"`: the Open MPI arguments hvd-cluster gives `horovodrun --mpi-args`, and
//! the check a user's own `run --mpi-args` passes first. Pure: no I/O.

use crate::profile::Collective;

/// Why a user's `--mpi-args` cannot be passed on. horovodrun pastes its `--mpi-args` string
/// unquoted into the `mpirun` line it hands to `/bin/sh -c` inside the container, so only
/// words of option characters pass (`--mca btl ^openib`, `-x FOO=bar`, `--display-map`):
/// nothing a shell would act on (`;|&$\`<>()*?[]{}!~#'\"` and backslashes, newlines).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MpiArgsError {
    #[error("--mpi-args is empty")]
    Empty,
    #[error("--mpi-args is {0} bytes; at most 2000")]
    TooLong(usize),
    #[error(
        "--mpi-args may hold only letters, digits, spaces and - _ . , : = / + @ % ^; not {0:?}"
    )]
    Character(char),
    #[error("--mpi-args needs collective = \"mpi\" in the profile (this cluster runs Gloo)")]
    NotMpi,
    #[error("--mpi-args does not apply to --elastic: Horovod's elastic mode runs on Gloo only")]
    Elastic,
}

/// Checks a user's `--mpi-args` (see [`MpiArgsError`]) for a run with `collective`.
pub fn check_mpi_args(
    args: &str,
    collective: Collective,
    elastic: bool,
) -> Result<(), MpiArgsError> {
    if collective != Collective::Mpi {
        return Err(MpiArgsError::NotMpi);
    }
    if elastic {
        return Err(MpiArgsError::Elastic);
    }
    if args.len() > 2000 {
        return Err(MpiArgsError::TooLong(args.len()));
    }
    if let Some(c) = args
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || " -_.,:=/+@%^".contains(*c)))
    {
        return Err(MpiArgsError::Character(c));
    }
    if args.trim().is_empty() {
        return Err(MpiArgsError::Empty);
    }
    Ok(())
}

/// The Open MPI arguments hvd-cluster adds under `collective = "mpi"`: Open MPI's own
/// out-of-band channel kept on the private interfaces (horovodrun sets the TCP transport's,
/// `btl_tcp_if_include`, from `--network-interfaces`, and the ssh port and key through
/// `plm_rsh_args`, and runs as root). Every node container also has docker0 with the same
/// address, where a daemon would look for its peers in vain.
pub fn mpi_args(ifaces: &[String], user: Option<&str>) -> Option<String> {
    let mut words: Vec<String> = Vec::new();
    if !ifaces.is_empty() {
        words.push(format!("-mca oob_tcp_if_include {}", ifaces.join(",")));
    }
    if let Some(user) = user {
        words.push(user.trim().to_string());
    }
    (!words.is_empty()).then(|| words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mpi_args_pass_option_words_only_and_only_under_mpi() {
        let mpi = Collective::Mpi;
        let tutorial = "--mca orte_keep_fqdn_hostnames t --allow-run-as-root --display-map \
                        --tag-output --timestamp-output";
        assert_eq!(check_mpi_args(tutorial, mpi, false), Ok(()));
        assert_eq!(
            check_mpi_args("-mca btl ^openib -x A=b/c", mpi, false),
            Ok(())
        );
        for bad in [
            "-x A=$(id)",
            "a; rm -rf /",
            "a|b",
            "`x`",
            "a\nb",
            "'q'",
            "\"q\"",
            "a\\b",
            "*",
        ] {
            assert!(
                matches!(
                    check_mpi_args(bad, mpi, false),
                    Err(MpiArgsError::Character(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(check_mpi_args("  ", mpi, false), Err(MpiArgsError::Empty));
        assert_eq!(
            check_mpi_args(&"-x ".repeat(700), mpi, false),
            Err(MpiArgsError::TooLong(2100))
        );
        assert_eq!(
            check_mpi_args("--display-map", Collective::Gloo, false),
            Err(MpiArgsError::NotMpi)
        );
        assert_eq!(
            check_mpi_args("--display-map", mpi, true),
            Err(MpiArgsError::Elastic)
        );
    }

    #[test]
    fn mpi_args_keep_open_mpi_on_the_private_interfaces_then_the_users() {
        let ifaces = vec!["eth0".to_string(), "ens3".to_string()];
        assert_eq!(
            mpi_args(&ifaces, Some(" --display-map ")).as_deref(),
            Some("-mca oob_tcp_if_include eth0,ens3 --display-map")
        );
        assert_eq!(
            mpi_args(&ifaces, None).as_deref(),
            Some("-mca oob_tcp_if_include eth0,ens3")
        );
        assert_eq!(mpi_args(&[], None), None);
        assert_eq!(mpi_args(&[], Some("-x A=1")).as_deref(), Some("-x A=1"));
    }
}
