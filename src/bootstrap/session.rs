//! SSH sessions to a cluster's nodes: the master first (workers go through it), each waited
//! for with a deadline, with the interface that holds the node's private address.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::future::try_join_all;

use super::BootstrapError;
use crate::host_keys;
use crate::plan::Role;
use crate::progress::Progress;
use crate::provider::Provider;
use crate::render::HostSlots;
use crate::ssh::{Ssh, SshError};
use crate::state::Node;

/// How long a node's console is read for the block of host keys (cloud-init prints it late
/// in the boot, after sshd is up; under emulation minutes later).
const CONSOLE_DEADLINE: Duration = Duration::from_secs(300);

/// Who may vouch for a changed host key: the nodes this command started again or made anew
/// (the tool knows why their key may have changed), and the cloud that shows their consoles.
/// The same consoles explain a node of this command that never answers SSH.
pub struct Vouch<'a> {
    pub provider: &'a dyn Provider,
    pub cluster: &'a str,
    /// Node name → what was done to it that may have changed its key ("started again by this
    /// command", "made anew by a command that did not finish", ...).
    pub renewed: &'a BTreeMap<String, &'static str>,
    /// One re-pin of known_hosts at a time (workers connect side by side).
    pub lock: tokio::sync::Mutex<()>,
}

/// A connected node and what bootstrap learnt about it.
pub struct NodeSession {
    pub node: Node,
    pub ssh: Ssh,
    /// The interface holding the node's private address (for Gloo / NCCL), never docker0.
    pub iface: String,
    /// The node's name and private address, checked, for the hostfile and discovery.
    pub host: HostSlots,
}

/// Connects to every node (master first: workers go through it), waiting with a deadline and
/// showing why each is still waited for. A node whose host key changed stops it, unless
/// `vouch` names the node and its console vouches for the key it offers.
pub async fn connect_all(
    config: &Path,
    nodes: &[Node],
    progress: &Progress,
    deadline: Duration,
    vouch: Option<&Vouch<'_>>,
) -> Result<Vec<NodeSession>, BootstrapError> {
    let mut ordered: Vec<&Node> = nodes.iter().collect();
    ordered.sort_by_key(|n| n.role != Role::Master);
    let (master, workers) = ordered
        .split_first()
        .ok_or_else(|| BootstrapError::Other("no nodes".into()))?;
    let mut sessions = vec![connect_one(config, master, progress, deadline, vouch).await?];
    let rest = try_join_all(
        workers
            .iter()
            .map(|n| connect_one(config, n, progress, deadline, vouch)),
    )
    .await?;
    sessions.extend(rest);
    Ok(sessions)
}

async fn connect_one(
    config: &Path,
    node: &Node,
    progress: &Progress,
    deadline: Duration,
    vouch: Option<&Vouch<'_>>,
) -> Result<NodeSession, BootstrapError> {
    let bar = progress.spinner(&format!("ssh {}", node.name));
    let mut vouched = false;
    let ssh = loop {
        let waited = Ssh::wait(config, &node.name, deadline, |why| {
            bar.set_message(why.to_string())
        })
        .await;
        match (waited, vouch) {
            // once per node: a key its console vouched for that still does not match is refused
            (Err(e @ SshError::HostKeyChanged { .. }), Some(v)) if !vouched => {
                bar.set_message("its host key changed: reading its console for the new one");
                let line = vouch_for(v, config, e).await?;
                progress.line(line);
                vouched = true;
            }
            // Its console says whether it booted at all, and how far: a user's first question.
            (Err(e @ SshError::Timeout { .. }), Some(v)) => {
                bar.set_message("no SSH in time: reading its console");
                return Err(with_console(v, &node.name, e).await);
            }
            (waited, _) => break waited?,
        }
    };
    bar.set_message("connected");
    let given = node.private_ip.clone().unwrap_or_default();
    // The cloud's answer reaches shell commands and the hostfile: it must be an address
    // (checked where it entered too; this is the last gate before it is used).
    let Ok(ip) = given.parse::<std::net::IpAddr>() else {
        return Err(BootstrapError::Other(format!(
            "{}: the cloud gave `{}` as its private address",
            crate::input::shown(&node.name),
            crate::input::shown(&given)
        )));
    };
    let host = HostSlots::new(&node.name, ip, node.slots)
        .map_err(|e| BootstrapError::Other(format!("a node from the cloud: {e}")))?;
    // The interface that holds the private address, as Gloo and NCCL need its name.
    let iface = ssh
        .run(&format!("ip -o -4 addr show | awk '{{ split($4, a, \"/\"); if (a[1] == \"{ip}\") print $2 }}' | head -n1"))
        .await?
        .trim()
        .to_string();
    bar.finish_and_clear();
    if iface.is_empty() {
        return Err(BootstrapError::Other(format!(
            "{}: no interface holds its private address {ip}",
            node.name
        )));
    }
    // It goes into `ip ... dev IFACE` and horovodrun's arguments.
    crate::input::check_interface_name(&iface)
        .map_err(|e| BootstrapError::Other(format!("{}: {e}", node.name)))?;
    Ok(NodeSession {
        node: node.clone(),
        ssh,
        iface,
        host,
    })
}

/// The last lines of its console shown: as many as a reader takes in at a glance.
const CONSOLE_TAIL_LINES: usize = 12;

/// A node's SSH timeout with the last lines of its console, read through the cloud; the
/// timeout alone where the provider has no console.
async fn with_console(v: &Vouch<'_>, node: &str, error: SshError) -> BootstrapError {
    let console = match v.provider.console(v.cluster, node).await {
        Ok(Some(text)) => console_said(&text),
        Ok(None) => return error.into(),
        Err(e) => format!("  its console could not be read: {e}"),
    };
    BootstrapError::NoSsh { error, console }
}

/// What a node's console shows, for an error: its last non-blank lines, each escaped (the
/// console is the guest's, any bytes at all: terminal escapes, carriage returns) and
/// shortened; or that it is empty, which says the server never booted far enough to print.
fn console_said(console: &str) -> String {
    let lines: Vec<&str> = console
        .lines()
        .map(|l| {
            l.rsplit('\r')
                .find(|part| !part.trim().is_empty())
                .unwrap_or("")
        })
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.is_empty() {
        return "  its console, read through the cloud, is empty: the server has not booted \
                far enough to print anything"
            .into();
    }
    let from = lines.len().saturating_sub(CONSOLE_TAIL_LINES);
    let mut out = format!(
        "  the last {} line(s) of its console, read through the cloud:",
        lines.len() - from
    );
    for line in &lines[from..] {
        out.push_str("\n    ");
        out.push_str(&crate::input::shown_message(line.trim_end(), 160));
    }
    out
}

/// Re-pins a node's changed host key when this command started or re-made that server and its
/// console, read through the cloud, shows the key the node offers; otherwise the error stands,
/// with what the console showed. Returns the line that says what was accepted and why.
async fn vouch_for(
    v: &Vouch<'_>,
    config: &Path,
    error: SshError,
) -> Result<String, BootstrapError> {
    let SshError::HostKeyChanged {
        ref node,
        ref offered,
        ..
    } = error
    else {
        return Err(error.into());
    };
    let (node, offered) = (node.clone(), offered.clone());
    let refuse = |why: String| BootstrapError::Other(format!("{error}; {why}"));
    let Some(done) = v.renewed.get(&node) else {
        return Err(error.into());
    };
    let started = Instant::now();
    let mut seen: Option<Vec<host_keys::HostKey>> = None;
    loop {
        let console = v
            .provider
            .console(v.cluster, &node)
            .await
            .map_err(|e| refuse(format!("its console could not be read: {e}")))?;
        let Some(console) = console else {
            return Err(refuse("the cloud shows no console for it".into()));
        };
        if let Some(keys) = host_keys::on_console(&console) {
            if keys.iter().any(|k| k.fingerprint() == offered) {
                let _one_at_a_time = v.lock.lock().await;
                let path = crate::ssh::known_hosts_path(config);
                // Another error than a missing file must not make us drop the other pins.
                let text = match std::fs::read_to_string(&path) {
                    Ok(text) => text,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                    Err(e) => {
                        return Err(refuse(format!("cannot read {}: {e}", path.display())));
                    }
                };
                crate::state::write_atomic(
                    &path,
                    host_keys::repin(&text, &node, &keys).as_bytes(),
                    0o600,
                )?;
                return Ok(format!(
                    "{node}: new SSH host key {offered} (the server was {done}), vouched for by its console"
                ));
            }
            seen = Some(keys);
        }
        if started.elapsed() > CONSOLE_DEADLINE {
            return Err(refuse(match seen {
                Some(keys) => format!(
                    "its console vouches for {} only, not the key it offers",
                    host_keys::fingerprints(&keys)
                ),
                None => format!(
                    "its console showed no host keys in {}s, so the new one cannot be vouched for",
                    CONSOLE_DEADLINE.as_secs()
                ),
            }));
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consoles_last_lines_are_shown_escaped_and_shortened() {
        let mut console = String::new();
        for i in 0..30 {
            console.push_str(&format!("[   {i}.000] booting step {i}\n"));
        }
        console.push_str("\n   \n");
        console.push_str("cloud-init: 40%\rcloud-init: 100%\r\n");
        console.push_str("login: \u{1b}[31mred\u{1b}]0;title\u{7}\n");
        console.push_str(&format!("{}\n", "x".repeat(500)));
        let said = console_said(&console);
        let lines: Vec<&str> = said.lines().collect();
        assert_eq!(
            lines[0],
            "  the last 12 line(s) of its console, read through the cloud:"
        );
        assert_eq!(lines.len(), 13, "{said}");
        // the twelve last non-blank lines: steps 21-29, then the three below
        assert_eq!(lines[1], "    [   21.000] booting step 21");
        // a carriage return's overwritten text is left out, as a terminal would show it
        assert_eq!(lines[10], "    cloud-init: 100%");
        // terminal escapes and a bell cannot reach the user's terminal
        assert_eq!(lines[11], "    login: \\u{1b}[31mred\\u{1b}]0;title\\u{7}");
        assert!(!said.contains('\u{1b}') && !said.contains('\u{7}'));
        // a long line is cut (its end kept), never shown whole
        assert!(lines[12].chars().count() < 180, "{}", lines[12]);
        assert!(lines[12].ends_with("xxxx"), "{}", lines[12]);
    }

    #[test]
    fn an_empty_console_says_the_server_never_printed() {
        for console in ["", "\n\n", " \r\n\t\n"] {
            let said = console_said(console);
            assert!(said.contains("is empty"), "{console:?}: {said}");
            assert!(said.contains("has not booted"), "{said}");
        }
    }

    #[test]
    fn a_short_console_is_shown_whole() {
        let said = console_said("FAKE CONSOLE OUTPUT\nANOTHER\nLAST LINE");
        assert_eq!(
            said,
            "  the last 3 line(s) of its console, read through the cloud:\n    FAKE CONSOLE \
             OUTPUT\n    ANOTHER\n    LAST LINE"
        );
    }
}
