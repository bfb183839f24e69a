//! SSH to the nodes through the openssh crate, multiplexed, over a generated per-cluster
//! ssh_config: the master by its public address, workers through the master (ProxyJump),
//! the cluster key, and a known-hosts file in the cluster folder.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use openssh::{KnownHosts, Session, SessionBuilder, Stdio};
use tokio::io::AsyncWriteExt;

use crate::wait::{wait_until, Probe, WaitError};

#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("{node}: cannot connect over SSH: {reason}")]
    Connect { node: String, reason: String },
    #[error("{node}: still no SSH after {secs}s; last reason: {reason}")]
    Timeout {
        node: String,
        secs: u64,
        reason: String,
    },
    #[error("{node}: `{what}` failed (exit {code}): {stderr}")]
    Command {
        node: String,
        what: String,
        code: String,
        stderr: String,
    },
    /// The node offered a host key other than the one pinned for it: never retried, never
    /// accepted in silence (see [`crate::host_keys`]).
    #[error(
        "{node}: its SSH host key changed: {known_hosts} pins {pinned}, the node now offers {offered}. \
         If you know why (the server was rebuilt or replaced, or its address moved to another), \
         forget the old key with `ssh-keygen -f {known_hosts} -R {node}` and run the command \
         again; if you do not, someone may be between you and the node"
    )]
    HostKeyChanged {
        node: String,
        pinned: String,
        offered: String,
        /// The known_hosts path, quoted for a shell.
        known_hosts: String,
    },
    #[error("cannot write the cluster's ssh_config: {0}")]
    Config(String),
    #[error("{node}: {what}: {source}")]
    Io {
        node: String,
        what: String,
        source: std::io::Error,
    },
}

/// One node as ssh_config sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The alias used on the command line: the node's name.
    pub alias: String,
    pub address: String,
    pub user: String,
    /// Alias of the jump host (the master) for nodes without a public address.
    pub jump: Option<String>,
}

/// The cluster's ssh_config text. `dir` holds the key and the known-hosts file.
///
/// Every value is checked or quoted for ssh_config, which reads a line as words: host names
/// and the login name by their grammars, addresses as IPs, paths in double quotes (see
/// [`config_path_word`]). A value that cannot be written safely is an error, never a line
/// that could start another option.
pub fn render_config(dir: &Path, hosts: &[Host]) -> Result<String, SshError> {
    let refused = |e: crate::input::Refused| SshError::Config(e.0);
    let identity = config_path_word(&dir.join("id_ed25519"))?;
    let known_hosts = config_path_word(&dir.join("known_hosts"))?;
    let mut out = String::from("# Written by hvd-cluster; regenerated on every command.\n");
    for h in hosts {
        crate::input::check_host_label(&h.alias).map_err(refused)?;
        crate::input::check_login_name(&h.user).map_err(refused)?;
        let address: std::net::IpAddr = h.address.parse().map_err(|_| {
            SshError::Config(format!(
                "`{}` (the address of {}) is not an IP address",
                crate::input::shown(&h.address),
                h.alias
            ))
        })?;
        let _ = writeln!(out, "Host {}", h.alias);
        let _ = writeln!(out, "  HostName {address}");
        let _ = writeln!(out, "  User {}", h.user);
        let _ = writeln!(out, "  IdentityFile {identity}");
        let _ = writeln!(out, "  IdentitiesOnly yes");
        let _ = writeln!(out, "  UserKnownHostsFile {known_hosts}");
        // A new server's host key is learnt on first contact, then pinned in known_hosts under
        // the node's name: workers are never renamed, and an address a deleted worker had may
        // come back on its replacement.
        let _ = writeln!(out, "  HostKeyAlias {}", h.alias);
        let _ = writeln!(out, "  StrictHostKeyChecking accept-new");
        // Never wait for a password or a prompt: no answer is an error we can report.
        let _ = writeln!(out, "  BatchMode yes");
        let _ = writeln!(out, "  ConnectTimeout 10");
        let _ = writeln!(out, "  ServerAliveInterval 15");
        let _ = writeln!(out, "  LogLevel ERROR");
        if let Some(jump) = &h.jump {
            crate::input::check_host_label(jump).map_err(refused)?;
            let _ = writeln!(out, "  ProxyJump {jump}");
        }
    }
    Ok(out)
}

/// A file path as one ssh_config word: made absolute (ssh reads a relative IdentityFile from
/// the home folder), `%` doubled (ssh expands `%d`, `%h`... in these paths), and in double
/// quotes so spaces stay inside it. ssh_config has no portable escape for `"` or `\`, and a
/// line break would end the option, so a path holding one of those, any other control
/// character, or `${` (expanded as an environment variable) is refused.
pub fn config_path_word(path: &Path) -> Result<String, SshError> {
    let absolute = std::path::absolute(path).map_err(|e| {
        SshError::Config(format!(
            "cannot make {} absolute: {e}",
            crate::input::shown(&path.to_string_lossy())
        ))
    })?;
    let text = absolute.to_str().ok_or_else(|| {
        SshError::Config(format!(
            "the path {} is not UTF-8",
            crate::input::shown(&absolute.to_string_lossy())
        ))
    })?;
    let bad = if text.contains('"') {
        Some("a double quote (`\"`)")
    } else if text.contains('\\') {
        Some("a backslash")
    } else if text.contains(['\n', '\r']) {
        Some("a line break")
    } else if text.chars().any(char::is_control) {
        Some("a control character")
    } else if text.contains("${") {
        Some("`${`, which ssh expands as an environment variable")
    } else {
        None
    };
    if let Some(bad) = bad {
        return Err(SshError::Config(format!(
            "the path `{}` holds {bad}, which ssh_config cannot carry; choose a --state-dir (or HVD_CLUSTER_STATE_DIR) without it",
            crate::input::shown(text)
        )));
    }
    Ok(format!("\"{}\"", text.replace('%', "%%")))
}

/// Words a user can act on, from ssh's own error text.
pub fn why_no_ssh(stderr: &str) -> String {
    let s = stderr.to_lowercase();
    let reason = if s.contains("no route to host") || s.contains("network is unreachable") {
        "no route to the address yet"
    } else if s.contains("connection refused") {
        "the address answers but sshd is not listening yet"
    } else if s.contains("permission denied") {
        "sshd refuses the cluster key (not installed yet, or wrong ssh_user)"
    } else if s.contains("host key verification failed")
        || s.contains("remote host identification has changed")
    {
        "the node's host key differs from the one pinned in known_hosts"
    } else if s.contains("timed out") {
        "no answer (firewall, or the server is still booting)"
    } else if s.contains("could not resolve") {
        "the host name does not resolve"
    } else {
        return stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("unknown")
            .trim()
            .to_string();
    };
    reason.to_string()
}

/// A multiplexed SSH connection to one node.
pub struct Ssh {
    pub node: String,
    session: Session,
}

impl Ssh {
    pub async fn connect(config: &Path, node: &str) -> Result<Ssh, SshError> {
        let mut b = SessionBuilder::default();
        b.config_file(config)
            .known_hosts_check(KnownHosts::Add)
            .connect_timeout(Duration::from_secs(10));
        // The control socket lives beside the config, unless the path holds `%`: ssh expands
        // tokens in the socket path (`-S`) and the crate cannot escape them; the crate's own
        // default folder is used then.
        if let Some(dir) = config
            .parent()
            .filter(|d| !d.to_string_lossy().contains('%'))
        {
            b.control_directory(dir);
        }
        match b.connect_mux(node).await {
            Ok(session) => Ok(Ssh {
                node: node.to_string(),
                session,
            }),
            Err(e) => {
                let text = error_chain(&e);
                match crate::host_keys::changed_in(&text) {
                    Some(changed) => Err(host_key_changed(config, node, changed)),
                    None => Err(SshError::Connect {
                        node: node.to_string(),
                        reason: why_no_ssh(&text),
                    }),
                }
            }
        }
    }

    /// Retries until the node answers or the deadline passes; `status` hears why it waits.
    pub async fn wait(
        config: &Path,
        node: &str,
        deadline: Duration,
        status: impl Fn(&str),
    ) -> Result<Ssh, SshError> {
        let status = &status;
        wait_until(deadline, Duration::from_secs(2), move || async move {
            let why = match Ssh::connect(config, node).await {
                Ok(ssh) => match ssh.run("true").await {
                    Ok(_) => return Probe::Ready(ssh),
                    Err(e) => e.to_string(),
                },
                Err(SshError::Connect { reason, .. }) => reason,
                // a changed host key, as any other error, ends the wait at once
                Err(e) => return Probe::Failed(e),
            };
            status(&why);
            Probe::Waiting(why)
        })
        .await
        .map_err(|e| match e {
            WaitError::Failed(e) => e,
            WaitError::TimedOut { last, secs } => SshError::Timeout {
                node: node.to_string(),
                secs,
                reason: last,
            },
        })
    }

    /// Runs a bash script (sent on stdin, so any length and no quoting) and returns stdout.
    pub async fn run(&self, script: &str) -> Result<String, SshError> {
        self.run_as(script, false).await
    }

    /// As [`Ssh::run`], as root through sudo.
    pub async fn sudo(&self, script: &str) -> Result<String, SshError> {
        self.run_as(script, true).await
    }

    async fn run_as(&self, script: &str, root: bool) -> Result<String, SshError> {
        let program = if root { "sudo -n bash -s" } else { "bash -s" };
        self.feed(program, &first_line(script), script.as_bytes(), 15)
            .await
    }

    /// As [`Ssh::sudo`] (an error names `what`), handing every line of stdout to `on_line` as it comes (the steps of a
    /// build that runs for minutes); returns the whole stdout. The script is sent while the
    /// output is read, so neither side can fill a pipe and wait on the other.
    pub async fn sudo_streaming(
        &self,
        what: &str,
        script: &str,
        mut on_line: impl FnMut(&str),
    ) -> Result<String, SshError> {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
        let mut child = self.spawn_piped("sudo -n bash -s").await?;
        let (stdin, stdout, stderr) = (
            child.stdin().take(),
            child.stdout().take(),
            child.stderr().take(),
        );
        let send = async {
            if let Some(mut stdin) = stdin {
                stdin.write_all(script.as_bytes()).await?;
                stdin.shutdown().await?;
            }
            Ok::<(), std::io::Error>(())
        };
        let read = async {
            let mut all = String::new();
            if let Some(stdout) = stdout {
                let mut reader = BufReader::new(stdout);
                let mut line = Vec::new();
                while reader.read_until(b'\n', &mut line).await? > 0 {
                    // a node's output is not trusted to be UTF-8
                    let text = String::from_utf8_lossy(&line);
                    on_line(text.trim_end_matches(['\n', '\r']));
                    all.push_str(&text);
                    line.clear();
                }
            }
            Ok::<String, std::io::Error>(all)
        };
        let errors = async {
            let mut buf = Vec::new();
            if let Some(mut stderr) = stderr {
                stderr.read_to_end(&mut buf).await?;
            }
            Ok::<Vec<u8>, std::io::Error>(buf)
        };
        let (sent, all, errors) = tokio::join!(send, read, errors);
        let status = child
            .wait()
            .await
            .map_err(|e| self.io("run a remote command", e))?;
        let errors = errors.unwrap_or_default();
        if !status.success() {
            return Err(SshError::Command {
                node: self.node.clone(),
                what: what.to_string(),
                code: status.code().map_or("signal".into(), |c| c.to_string()),
                stderr: tail(&String::from_utf8_lossy(&errors), 20),
            });
        }
        sent.map_err(|e| self.io_plain("send input", e))?;
        all.map_err(|e| self.io_plain("read output", e))
    }

    /// Writes `content` to `path` on the node (as root), with `mode`.
    pub async fn write_file(&self, path: &str, content: &[u8], mode: u32) -> Result<(), SshError> {
        // The path may end in a user's file name (`run --send`): quoted, never spliced raw.
        let quoted = shell_quote(path);
        let script = format!(
            "set -e; d=$(dirname -- {quoted}); mkdir -p -- \"$d\"; t=$(mktemp \"$d/.hvd.XXXXXX\"); cat > \"$t\"; chmod {mode:o} \"$t\"; mv -- \"$t\" {quoted}"
        );
        let command = format!("sudo -n bash -c {}", shell_quote(&script));
        self.feed(&command, &format!("write {path}"), content, 5)
            .await
            .map(drop)
    }

    /// Streams a local reader into a remote command's stdin (e.g. `docker save | docker load`).
    pub async fn pipe_into(
        &self,
        command: &str,
        input: impl tokio::io::AsyncRead + Unpin,
    ) -> Result<String, SshError> {
        self.feed_from(command, command, input, 10).await
    }

    /// Runs `command` with `input` on its stdin; its stdout, or an error naming `what` with the
    /// last `tail_lines` of stderr.
    async fn feed(
        &self,
        command: &str,
        what: &str,
        input: &[u8],
        tail_lines: usize,
    ) -> Result<String, SshError> {
        self.feed_from(command, what, input, tail_lines).await
    }

    async fn feed_from(
        &self,
        command: &str,
        what: &str,
        mut input: impl tokio::io::AsyncRead + Unpin,
        tail_lines: usize,
    ) -> Result<String, SshError> {
        let mut child = self.spawn_piped(command).await?;
        if let Some(mut stdin) = child.stdin().take() {
            tokio::io::copy(&mut input, &mut stdin)
                .await
                .map_err(|e| self.io_plain("send input", e))?;
            stdin
                .shutdown()
                .await
                .map_err(|e| self.io_plain("send input", e))?;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| self.io("run a remote command", e))?;
        if !out.status.success() {
            return Err(SshError::Command {
                node: self.node.clone(),
                what: what.to_string(),
                code: out.status.code().map_or("signal".into(), |c| c.to_string()),
                stderr: tail(&String::from_utf8_lossy(&out.stderr), tail_lines),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `command` on the node with stdin, stdout and stderr piped.
    async fn spawn_piped(&self, command: &str) -> Result<openssh::Child<&Session>, SshError> {
        self.session
            .raw_command(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .await
            .map_err(|e| self.io("start a remote command", e))
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    pub async fn close(self) {
        let _ = self.session.close().await;
    }

    fn io(&self, what: &str, e: openssh::Error) -> SshError {
        SshError::Io {
            node: self.node.clone(),
            what: what.to_string(),
            source: std::io::Error::other(error_chain(&e)),
        }
    }

    fn io_plain(&self, what: &str, e: std::io::Error) -> SshError {
        SshError::Io {
            node: self.node.clone(),
            what: what.to_string(),
            source: e,
        }
    }
}

/// The known_hosts file beside a cluster's ssh_config (see [`render_config`]).
pub fn known_hosts_path(config: &Path) -> PathBuf {
    config
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("known_hosts")
}

/// The error for a changed host key: the node ssh named (the master, when a worker's jump
/// through it failed), what known_hosts pins for it and what it offered now.
fn host_key_changed(config: &Path, node: &str, changed: crate::host_keys::Changed) -> SshError {
    let path = known_hosts_path(config);
    let node = changed.alias.unwrap_or_else(|| node.to_string());
    let pinned = std::fs::read_to_string(&path)
        .map(|text| crate::host_keys::fingerprints(&crate::host_keys::pinned(&text, &node)))
        .unwrap_or_else(|_| "none".into());
    SshError::HostKeyChanged {
        node,
        pinned,
        offered: changed
            .offered
            .unwrap_or_else(|| "a key ssh did not show".into()),
        known_hosts: shell_quote(&path.to_string_lossy()),
    }
}

/// An error and its sources, one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

fn first_line(script: &str) -> String {
    let line = script
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("set "))
        .unwrap_or("script");
    let mut s: String = line.chars().take(80).collect();
    if line.len() > 80 {
        s.push('…');
    }
    s
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Single-quotes a string for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The path of a cluster's ssh_config.
pub fn config_path(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join("ssh_config")
}

#[cfg(test)]
mod tests;
