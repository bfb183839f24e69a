//! TensorBoard on the master: the scripts that start and stop it in the master's container
//! and the grammar of what the start prints. Pure; `cmd::tensorboard` runs them and keeps the
//! tunnel.
//!
//! TensorBoard runs from the image's own Python (`python -m tensorboard.main`), listening on
//! the master's loopback only (the container shares the host's network), on a port the
//! master picks free. Its process carries `HVD_CLUSTER_TENSORBOARD=PORT` in its environment,
//! so the stop finds it by that, as a job's processes are found by their job number. The
//! folder it serves reaches it as an environment variable, never through a shell's words.

use crate::ssh::shell_quote;

/// What the start script found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// TensorBoard is starting on this port of the master's loopback.
    Port(u16),
    /// The image has no `tensorboard` module for its Python.
    NotInImage,
}

/// The script (root, on the master) that starts TensorBoard over `dir` (a path below /shared,
/// already checked by its grammar), its output in the container's /tmp. Prints `port=N`, or
/// `tensorboard=missing` when the image lacks it.
pub fn start_script(dir: &str) -> String {
    format!(
        "set -e\n\
         dir={dir}\n\
         mkdir -p \"$dir\"\n\
         if ! docker exec hvd python -c 'import tensorboard' >/dev/null 2>&1; then\n\
         \x20 echo tensorboard=missing; exit 0\n\
         fi\n\
         port=$(docker exec hvd python -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])')\n\
         docker exec -d -e HVD_CLUSTER_TENSORBOARD=\"$port\" -e HVD_TENSORBOARD_DIR=\"$dir\" hvd \
         sh -c 'exec python -m tensorboard.main --logdir \"$HVD_TENSORBOARD_DIR\" --host 127.0.0.1 \
         --port \"$HVD_CLUSTER_TENSORBOARD\" > \"/tmp/hvd-cluster-tensorboard-$HVD_CLUSTER_TENSORBOARD.log\" 2>&1'\n\
         echo \"port=$port\"\n",
        dir = shell_quote(dir),
    )
}

/// Reads the start script's last line.
pub fn parse_started(out: &str) -> Result<Started, String> {
    let last = out.trim_end().lines().last().unwrap_or("").trim();
    if last == "tensorboard=missing" {
        return Ok(Started::NotInImage);
    }
    last.strip_prefix("port=")
        .filter(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|&p| p > 0)
        .map(Started::Port)
        .ok_or_else(|| "no `port=N` line".to_string())
}

/// The script (root, on the master) that says whether TensorBoard on `port` still runs
/// (`alive=1`/`alive=0`) and, when it does not, prints the last lines of its output.
pub fn alive_script(port: u16) -> String {
    format!(
        "alive=0\n\
         for p in /proc/[0-9]*; do grep -qzx 'HVD_CLUSTER_TENSORBOARD={port}' \"$p/environ\" 2>/dev/null && {{ alive=1; break; }}; done\n\
         echo \"alive=$alive\"\n\
         [ \"$alive\" = 1 ] || docker exec hvd tail -n 5 /tmp/hvd-cluster-tensorboard-{port}.log 2>/dev/null || true\n"
    )
}

/// The script (root, on the master) that ends TensorBoard on `port`: TERM, then KILL for
/// what is left after 3 s.
pub fn stop_script(port: u16) -> String {
    format!(
        "pids() {{ for p in /proc/[0-9]*; do grep -qzx 'HVD_CLUSTER_TENSORBOARD={port}' \"$p/environ\" 2>/dev/null && echo \"${{p#/proc/}}\"; done; }}\n\
         set -- $(pids); [ $# -gt 0 ] && kill -TERM \"$@\" 2>/dev/null\n\
         for i in 1 2 3 4 5 6; do [ -z \"$(pids)\" ] && break; sleep 0.5; done\n\
         set -- $(pids); [ $# -gt 0 ] && kill -KILL \"$@\" 2>/dev/null\n\
         echo stopped\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hostile folder name reaches the script once, quoted, and TensorBoard reads it from
    /// its environment: no word of it is parsed by a shell.
    #[test]
    fn the_folder_is_quoted_once_and_passed_in_the_environment() {
        let dir = "/shared/it's $(id) `x`";
        let script = start_script(dir);
        assert!(
            script.contains(&format!("dir={}\n", shell_quote(dir))),
            "{script}"
        );
        assert_eq!(script.matches("$(id)").count(), 1, "{script}");
        assert!(
            script.contains("--logdir \"$HVD_TENSORBOARD_DIR\""),
            "{script}"
        );
        assert!(script.contains("--host 127.0.0.1"), "{script}");
    }

    #[test]
    fn the_start_says_its_port_or_that_the_image_lacks_tensorboard() {
        assert_eq!(parse_started("port=6006\n"), Ok(Started::Port(6006)));
        assert_eq!(
            parse_started("some noise\nport=40123"),
            Ok(Started::Port(40123))
        );
        assert_eq!(
            parse_started("tensorboard=missing\n"),
            Ok(Started::NotInImage)
        );
        for bad in [
            "",
            "port=",
            "port=0",
            "port=70000",
            "port=12a",
            "port=-1",
            "6006",
        ] {
            assert!(parse_started(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_stop_finds_the_process_by_its_mark_alone() {
        let script = stop_script(40123);
        assert!(script.contains("HVD_CLUSTER_TENSORBOARD=40123"), "{script}");
        assert!(
            script.contains("kill -TERM") && script.contains("kill -KILL"),
            "{script}"
        );
        assert!(alive_script(40123).contains("HVD_CLUSTER_TENSORBOARD=40123"));
    }
}
