//! The local provider's per-node CPU share (`HVD_CLUSTER_LOCAL_CPUS`), by its own grammar.

use std::fmt;

use super::{shown, Refused};

/// One node's share of this machine's CPUs on the local provider (`HVD_CLUSTER_LOCAL_CPUS`,
/// passed to `docker run --cpus`), kept in thousandths so what reaches docker is written by us,
/// not copied from the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuShare {
    millis: u32,
}

/// The smallest share: Docker refuses `--cpus` below 0.01.
const CPU_SHARE_MIN_MILLIS: u32 = 10;

impl CpuShare {
    /// A plain decimal (`0.25`, `1`, `1.5`): 1-3 digits, then optionally `.` and 1-3 digits;
    /// at least 0.01 (Docker's least) and at most `machine_cpus`. No sign, exponent, space,
    /// `inf` or `NaN` can pass.
    pub fn parse(value: &str, machine_cpus: usize) -> Result<CpuShare, Refused> {
        let refused =
            |why: String| Refused(format!("`{}` is not a CPU share: {why}", shown(value)));
        let (whole, fraction) = match value.split_once('.') {
            Some((w, f)) => (w, f),
            None => (value, ""),
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty()
            || whole.len() > 3
            || fraction.len() > 3
            || (value.contains('.') && fraction.is_empty())
            || !digits(whole)
            || !digits(fraction)
        {
            return Err(refused(
                "use a plain decimal number of CPUs such as 0.25, 1 or 1.5 (at most 3 digits after the point)".into(),
            ));
        }
        // At most 3 + 3 digits: no overflow in u32.
        let mut millis: u32 = 0;
        for b in whole.bytes().chain(format!("{fraction:0<3}").bytes()) {
            millis = millis * 10 + u32::from(b - b'0');
        }
        if millis < CPU_SHARE_MIN_MILLIS {
            return Err(refused("it must be at least 0.01".into()));
        }
        if millis as usize > machine_cpus.saturating_mul(1000) {
            return Err(refused(format!(
                "this machine has {machine_cpus} CPU(s); a node cannot have more"
            )));
        }
        Ok(CpuShare { millis })
    }

    /// Thousandths of a CPU.
    pub fn millis(self) -> u32 {
        self.millis
    }
}

/// `0.25`, `1`, `1.5`: the form `docker run --cpus` takes.
impl fmt::Display for CpuShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, fraction) = (self.millis / 1000, self.millis % 1000);
        if fraction == 0 {
            write!(f, "{whole}")
        } else {
            let digits = format!("{fraction:03}");
            write!(f, "{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}
