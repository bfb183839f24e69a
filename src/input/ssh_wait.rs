//! `--ssh-wait` and `HVD_CLUSTER_SSH_WAIT`: how long each node gets to answer SSH, in whole
//! seconds, by its own grammar (the variable is anyone's text; the flag's too).

use std::ffi::OsStr;
use std::time::Duration;

use super::{shown, Refused};

/// The environment variable that sets the wait when `--ssh-wait` is not given.
pub const SSH_WAIT_VAR: &str = "HVD_CLUSTER_SSH_WAIT";
/// Ten seconds is one SSH connect attempt; two hours outlasts the slowest bare-metal boot.
const SHORTEST: u64 = 10;
const LONGEST: u64 = 7200;

/// 1-4 ASCII digits, from 10 to 7200 seconds: no sign, unit, space or exponent can pass.
pub fn parse_ssh_wait(value: &str) -> Result<Duration, Refused> {
    let refused = |why: &str| Refused(format!("`{}` is not an SSH wait: {why}", shown(value)));
    if value.is_empty() || value.len() > 4 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refused("write whole seconds, such as 600"));
    }
    // At most 4 digits: no overflow.
    let secs: u64 = value.bytes().fold(0, |n, b| n * 10 + u64::from(b - b'0'));
    if !(SHORTEST..=LONGEST).contains(&secs) {
        return Err(refused(&format!(
            "it must be from {SHORTEST} to {LONGEST} seconds"
        )));
    }
    Ok(Duration::from_secs(secs))
}

/// The wait the variable names, None when it is unset or empty; refused with the variable
/// named (not UTF-8, or not by [`parse_ssh_wait`]'s grammar).
pub fn ssh_wait_from(value: Option<&OsStr>) -> Result<Option<Duration>, Refused> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let named = |r: Refused| Refused(format!("{SSH_WAIT_VAR}: {r}"));
    let text = value.to_str().ok_or_else(|| {
        named(Refused(format!(
            "`{}` is not UTF-8",
            shown(&value.to_string_lossy())
        )))
    })?;
    parse_ssh_wait(text).map(Some).map_err(named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn whole_seconds_within_the_range_pass() {
        assert_eq!(parse_ssh_wait("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_ssh_wait("600"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_ssh_wait("7200"), Ok(Duration::from_secs(7200)));
        assert_eq!(ssh_wait_from(None), Ok(None));
        assert_eq!(ssh_wait_from(Some(OsStr::new(""))), Ok(None));
        assert_eq!(
            ssh_wait_from(Some(OsStr::new("900"))),
            Ok(Some(Duration::from_secs(900)))
        );
    }

    #[test]
    fn anything_else_is_refused_shown_escaped_and_short() {
        let long = "9".repeat(4096);
        for bad in [
            "9",
            "7201",
            "0600x",
            "-600",
            "+600",
            " 600",
            "600s",
            "6e2",
            "1.5",
            "٣٠٠",
            &long,
            "600; reboot",
            "\u{1b}[31m600",
        ] {
            let e = parse_ssh_wait(bad).expect_err(bad).0;
            assert!(e.contains("is not an SSH wait"), "{bad}: {e}");
            assert!(!e.contains('\u{1b}') && e.len() < 200, "{bad}: {e}");
        }
        let e = ssh_wait_from(Some(&OsString::from_vec(b"60\xff".to_vec())))
            .expect_err("not UTF-8")
            .0;
        assert!(e.starts_with("HVD_CLUSTER_SSH_WAIT: "), "{e}");
        assert!(e.contains("not UTF-8"), "{e}");
        let e = ssh_wait_from(Some(OsStr::new("5")))
            .expect_err("too short")
            .0;
        assert!(
            e.starts_with("HVD_CLUSTER_SSH_WAIT: `5` is not an SSH wait"),
            "{e}"
        );
    }
}
