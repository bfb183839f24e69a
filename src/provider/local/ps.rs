//! The local provider's listing of its node containers (`docker ps`): the fields it reads, and
//! only those.

use serde::Deserialize;

/// `docker ps --format` for [`PsLine`]: one JSON object per container naming only the fields
/// read. Not `{{json .}}`: a template that touches `.Size` makes the docker CLI ask the engine
/// for every container's disk usage (`--size` implied), seconds per node on fuse-overlayfs,
/// which made `status` take ~15 s.
pub(super) const PS_FORMAT: &str = r#"{"ID":{{json .ID}},"Names":{{json .Names}},"State":{{json .State}},"Status":{{json .Status}}}"#;

/// The containers in `docker ps --format PS_FORMAT` output; a line that does not parse is
/// left out.
pub(super) fn ps_lines(out: &str) -> Vec<PsLine> {
    out.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[derive(Debug, Deserialize)]
pub(super) struct PsLine {
    #[serde(rename = "ID")]
    pub(super) id: String,
    #[serde(rename = "Names")]
    pub(super) names: String,
    #[serde(rename = "State")]
    pub(super) state: String,
    #[serde(rename = "Status", default)]
    pub(super) status: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps_format_names_only_the_fields_read() {
        // Every `.Field` the template touches; `.Size` (or a bare `.`) would imply `--size`.
        let fields: Vec<&str> = PS_FORMAT
            .split("{{json .")
            .skip(1)
            .map(|rest| rest.split("}}").next().unwrap_or(rest))
            .collect();
        assert_eq!(fields, ["ID", "Names", "State", "Status"]);
        assert_eq!(PS_FORMAT.matches("{{").count(), fields.len());
    }

    #[test]
    fn ps_lines_as_docker_prints_them() {
        // What `docker ps -a --no-trunc --format PS_FORMAT` printed for a stopped node.
        let out = concat!(
            r#"{"ID":"4e3c1970be70847132f10cab86f9d6218e65bed62530ab2948bffe57fa23d167","Names":"st-fix-worker-1","State":"exited","Status":"Exited (0) 4 minutes ago"}"#,
            "\n",
            "not json\n",
            r#"{"ID":"691d","Names":"st-fix-master","State":"running","Status":"Up 2 minutes"}"#,
            "\n",
        );
        let lines = ps_lines(out);
        let got: Vec<(&str, &str, &str)> = lines
            .iter()
            .map(|l| (l.names.as_str(), l.state.as_str(), l.status.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("st-fix-worker-1", "exited", "Exited (0) 4 minutes ago"),
                ("st-fix-master", "running", "Up 2 minutes")
            ]
        );
        assert!(lines[0].id.starts_with("4e3c1970be70"));
    }
}
