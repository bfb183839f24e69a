//! `lifecycle.autostop`: how long a cluster may be idle before it stops itself. A whole number
//! and one unit (`90s`, `30m`, `2h`), or `off`. At least a minute (the agent looks every few
//! seconds, and a shorter time would stop a cluster between two jobs), at most a week.

use std::time::Duration;

use super::{shown, Refused};

const SHORTEST: u64 = 60;
const LONGEST: u64 = 7 * 24 * 3600;

/// `None` for `off`; the idle time otherwise.
pub fn parse_idle_time(value: &str) -> Result<Option<Duration>, Refused> {
    if value == "off" {
        return Ok(None);
    }
    let refused = |why: &str| {
        Err(Refused(format!(
            "`{}` is not an idle time: {why}",
            shown(value)
        )))
    };
    // the last character is the unit (at a character boundary: the value is anyone's text)
    let at = value.char_indices().last().map_or(0, |(i, _)| i);
    let (digits, unit) = value.split_at(at);
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return refused("write a whole number and s, m or h (\"30m\"), or \"off\""),
    };
    if digits.is_empty()
        || digits.len() > 6
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || digits.starts_with('0')
    {
        return refused("write a whole number and s, m or h (\"30m\"), or \"off\"");
    }
    let seconds = digits
        .parse::<u64>()
        .unwrap_or(u64::MAX)
        .saturating_mul(per);
    if !(SHORTEST..=LONGEST).contains(&seconds) {
        return refused("it must be from 1 minute (\"60s\", \"1m\") to 7 days (\"168h\")");
    }
    Ok(Some(Duration::from_secs(seconds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_off() {
        assert_eq!(parse_idle_time("off").unwrap(), None);
        assert_eq!(
            parse_idle_time("90s").unwrap(),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_idle_time("30m").unwrap(),
            Some(Duration::from_secs(1800))
        );
        assert_eq!(
            parse_idle_time("2h").unwrap(),
            Some(Duration::from_secs(7200))
        );
        assert_eq!(
            parse_idle_time("168h").unwrap(),
            Some(Duration::from_secs(LONGEST))
        );
    }

    #[test]
    fn everything_else_is_refused_with_the_value_shown() {
        for bad in [
            "",
            "30",
            "m",
            "30 m",
            "30M",
            "1.5h",
            "-5m",
            "05m",
            "30mm",
            "59s",
            "169h",
            "9999999h",
            "30m;reboot",
            "off ",
            "Off",
            "3\u{0}m",
            "30é",
        ] {
            let err = parse_idle_time(bad).unwrap_err().0;
            assert!(err.contains("is not an idle time"), "{bad:?}: {err}");
        }
    }
}
