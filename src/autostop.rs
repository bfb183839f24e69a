//! Autostop (`[lifecycle] autostop = "30m"`): an agent on the master stops the cluster once it
//! has been idle that long, with the user's machine offline (`templates/node/autostop_agent.py`
//! says what idle means). This module puts the agent in place at the end of `up`, `scale`,
//! `heal` and `start`, or removes it when autostop is off.
//!
//! The agent's credential is made by the provider for exactly the cluster's servers
//! ([`Provider::autostop_credential`]) and goes from this process's memory to a root-only
//! file on the master, over SSH's stdin: never in argv, a log, the state folder or output.
//! Keystone cannot change a credential, so a new one is made only when what the agent must
//! stop changed: the master keeps a fingerprint of the agent's config without the secret.

use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::bootstrap::{ARCHIVES, NODE_DIR};
use crate::profile::Profile;
use crate::provider::{AutostopTarget, Provider, ProviderError};
use crate::ssh::{Ssh, SshError};
use crate::templates;

/// The agent's folder on the master (root only): the agent, its config with the credential,
/// the fingerprint of what is installed.
pub const AGENT_DIR: &str = "/var/lib/hvd-cluster/autostop";
/// The agent's log on the master (kept in the master's disk across stop/start).
pub const AGENT_LOG: &str = "/var/log/hvd-cluster/autostop.log";

#[derive(Debug, thiserror::Error)]
pub enum AutostopError {
    #[error("autostop: {0}")]
    Provider(#[from] ProviderError),
    #[error("autostop: {0}")]
    Ssh(#[from] SshError),
    #[error("autostop: the master has no python3, which its agent needs (install it in the image, or leave autostop off)")]
    NoPython,
}

/// What [`converge`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Autostop is off and nothing of it was on the master.
    Off,
    /// The agent was in place with the same config.
    InPlace,
    /// A new credential and config were installed and the agent (re)started.
    Installed {
        credential: String,
        restricted: bool,
    },
    /// Autostop was turned off: the agent and its credentials are gone. `said_off` is false
    /// where the master could not publish "off" (`status` then shows its last word).
    Removed { said_off: bool },
}

/// How often the agent looks: a sixth of the idle time, from 5 to 30 seconds.
pub fn tick_for(idle: Duration) -> u64 {
    (idle.as_secs() / 6).clamp(5, 30)
}

/// The agent's config without the credential: what the fingerprint covers. The profile's
/// URLs (where the master reaches the APIs) win over the cloud's own.
pub fn agent_config(p: &Profile, idle: Duration, target: &AutostopTarget) -> Value {
    let servers: Vec<Value> = target
        .servers
        .iter()
        .enumerate()
        .map(|(i, (name, id))| {
            json!({"name": name, "id": id, "role": if i == 0 { "master" } else { "worker" }})
        })
        .collect();
    let mut config = json!({
        "cluster": p.name.as_str(),
        "idle_seconds": idle.as_secs(),
        "tick_seconds": tick_for(idle),
        "identity_url": p.lifecycle.identity_url.as_deref().unwrap_or(&target.identity_url),
        "compute_url": p.lifecycle.compute_url.as_deref().unwrap_or(&target.compute_url),
        "servers": servers,
        "state_key": crate::provider::openstack::credential::STATE_KEY,
        "jupyter_port": 8888,
        "jupyter_token_file": format!("{NODE_DIR}/jupyter/token"),
        "log": AGENT_LOG,
        // the image's archive kept for `scale` and `heal`: not into the master's snapshot
        "drop_before_shelve": ARCHIVES,
    });
    target.tls.add_to(&mut config);
    config
}

/// The fingerprint of an installed agent: its config (no secret) and its program.
pub fn fingerprint(config: &Value) -> String {
    let mut h = Sha256::new();
    h.update(config.to_string().as_bytes());
    h.update(b"\0");
    h.update(templates::AUTOSTOP_AGENT.as_bytes());
    hex::encode(h.finalize())
}

/// The config file's text: the public part with the credential added.
fn with_credential(config: &Value, id: &str, secret: &str) -> String {
    let mut full = config.clone();
    full["credential_id"] = json!(id);
    full["credential_secret"] = json!(secret);
    full.to_string()
}

/// Starts (or restarts) the agent: a systemd service that survives reboots and restarts
/// after a crash; without systemd (a container standing for a host), a detached process.
fn start_script() -> String {
    format!(
        r#"set -e
dir={AGENT_DIR}
unit=/etc/systemd/system/hvd-cluster-autostop.service
if [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]; then
  cat > "$unit.tmp" <<EOF
[Unit]
Description=hvd-cluster autostop: stops this cluster when it has been idle
After=network-online.target
Wants=network-online.target
[Service]
ExecStart=/usr/bin/env python3 $dir/agent.py $dir/config.json
Restart=always
RestartSec=30
[Install]
WantedBy=multi-user.target
EOF
  mv "$unit.tmp" "$unit"
  systemctl daemon-reload
  systemctl enable -q hvd-cluster-autostop
  systemctl restart hvd-cluster-autostop
else
  pkill -f "$dir/agent.py" || true
  setsid nohup python3 "$dir/agent.py" "$dir/config.json" >/dev/null 2>&1 < /dev/null &
fi
"#
    )
}

fn remove_script() -> String {
    format!(
        r#"unit=/etc/systemd/system/hvd-cluster-autostop.service
if [ -f "$unit" ]; then systemctl disable -q --now hvd-cluster-autostop || true; rm -f "$unit"; systemctl daemon-reload || true; fi
pkill -f "{AGENT_DIR}/agent.py" || true
# `status` reads the master's last word: say "off" while the credential still works, and only
# once the agent is gone, or its next word (e.g. "just booted" after a start) would win
if ! python3 {AGENT_DIR}/agent.py {AGENT_DIR}/config.json --publish off 2>/dev/null; then echo not-said-off; fi
rm -rf {AGENT_DIR}
"#
    )
}

/// What the master has: the installed fingerprint ("" for none), whether the agent runs,
/// whether python3 is there.
async fn installed(master: &Ssh) -> Result<(String, bool, bool), SshError> {
    let out = master
        .sudo(&format!(
            "echo \"fp=$(cat {AGENT_DIR}/fingerprint 2>/dev/null)\"\n\
             if pgrep -f '{AGENT_DIR}/agent.py' >/dev/null; then echo running; fi\n\
             if command -v python3 >/dev/null; then echo python3; fi\n"
        ))
        .await?;
    let fp = out
        .lines()
        .find_map(|l| l.strip_prefix("fp="))
        .unwrap_or("")
        .trim()
        .to_owned();
    Ok((
        fp,
        out.lines().any(|l| l == "running"),
        out.lines().any(|l| l == "python3"),
    ))
}

/// Puts the agent in place as the profile says (or removes it), changing nothing when the
/// master already has it for the same servers.
pub async fn converge(
    p: &Profile,
    provider: &dyn Provider,
    master: &Ssh,
) -> Result<Outcome, AutostopError> {
    let (fp, running, python) = installed(master).await?;
    let Some(idle) = p.lifecycle.autostop_after() else {
        if fp.is_empty() && !running {
            return Ok(Outcome::Off);
        }
        let out = master.sudo(&remove_script()).await?;
        provider.delete_credentials(p.name.as_str()).await?;
        return Ok(Outcome::Removed {
            said_off: !out.lines().any(|l| l == "not-said-off"),
        });
    };
    if !python {
        return Err(AutostopError::NoPython);
    }
    let target = provider.autostop_target(p.name.as_str()).await?;
    let config = agent_config(p, idle, &target);
    let want = fingerprint(&config);
    if fp == want && running {
        return Ok(Outcome::InPlace);
    }
    let credential = provider
        .autostop_credential(
            p.name.as_str(),
            &target,
            p.lifecycle.unrestricted_credential,
        )
        .await?;
    master
        .sudo(&format!(
            "install -d -m 700 {AGENT_DIR}; rm -f {AGENT_DIR}/fingerprint"
        ))
        .await?;
    master
        .write_file(
            &format!("{AGENT_DIR}/agent.py"),
            templates::AUTOSTOP_AGENT.as_bytes(),
            0o755,
        )
        .await?;
    let text = with_credential(&config, &credential.id, credential.secret.expose());
    master
        .write_file(&format!("{AGENT_DIR}/config.json"), text.as_bytes(), 0o600)
        .await?;
    master.sudo(&start_script()).await?;
    // last: an install cut short before this point is done again by the next command
    master
        .write_file(&format!("{AGENT_DIR}/fingerprint"), want.as_bytes(), 0o644)
        .await?;
    Ok(Outcome::Installed {
        credential: credential.name,
        restricted: credential.restricted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> AutostopTarget {
        AutostopTarget {
            servers: vec![
                ("demo-master".into(), "id-m".into()),
                ("demo-worker-1".into(), "id-1".into()),
            ],
            identity_url: "http://127.0.0.1:5000/v3".into(),
            compute_url: "http://127.0.0.1:8774/v2.1".into(),
            tls: Default::default(),
        }
    }

    fn profile(lifecycle: &str) -> Profile {
        let text = format!(
            "name = \"demo\"\ncloud = \"c\"\n[master]\nflavor = \"f\"\nimage = \"i\"\n[workers]\ncount = 1\nflavor = \"f\"\n[network]\nexternal_network = \"public\"\n[lifecycle]\n{lifecycle}\n"
        );
        crate::profile::parse(std::path::Path::new("p.toml"), &text).expect("a valid profile")
    }

    #[test]
    fn the_config_names_the_servers_in_stop_order_and_the_profiles_urls_win() {
        let p = profile("autostop = \"2m\"\ncompute_url = \"http://203.0.113.1:8774/v2.1\"");
        let idle = p.lifecycle.autostop_after().unwrap();
        let c = agent_config(&p, idle, &target());
        assert_eq!(c["idle_seconds"], 120);
        assert_eq!(c["tick_seconds"], 20);
        assert_eq!(c["servers"][0]["role"], "master");
        assert_eq!(c["servers"][1]["role"], "worker");
        assert_eq!(c["servers"][1]["id"], "id-1");
        assert_eq!(c["identity_url"], "http://127.0.0.1:5000/v3");
        assert_eq!(c["compute_url"], "http://203.0.113.1:8774/v2.1");
        assert!(c.get("credential_secret").is_none());
    }

    #[test]
    fn a_new_server_or_idle_time_changes_the_fingerprint_and_the_secret_never_does() {
        let p = profile("autostop = \"2m\"");
        let idle = p.lifecycle.autostop_after().unwrap();
        let base = fingerprint(&agent_config(&p, idle, &target()));
        assert_eq!(base, fingerprint(&agent_config(&p, idle, &target())));
        let mut healed = target();
        healed.servers[1].1 = "id-1-new".into();
        assert_ne!(base, fingerprint(&agent_config(&p, idle, &healed)));
        assert_ne!(
            base,
            fingerprint(&agent_config(&p, Duration::from_secs(300), &target()))
        );
        let text = with_credential(&agent_config(&p, idle, &target()), "cid", "s3cr\"et");
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back["credential_secret"], "s3cr\"et",
            "JSON-quoted, read back whole"
        );
    }

    #[test]
    fn the_clouds_ca_bundle_goes_to_the_agent_and_none_leaves_the_config_as_it_was() {
        let p = profile("autostop = \"2m\"");
        let idle = p.lifecycle.autostop_after().unwrap();
        let plain = agent_config(&p, idle, &target());
        assert!(plain.get("ca_pem").is_none() && plain.get("insecure").is_none());
        let mut private = target();
        private.tls.ca_pem = Some("-----BEGIN CERTIFICATE-----\nMIIB\n".into());
        let with_ca = agent_config(&p, idle, &private);
        assert_eq!(with_ca["ca_pem"], "-----BEGIN CERTIFICATE-----\nMIIB\n");
        assert_ne!(
            fingerprint(&plain),
            fingerprint(&with_ca),
            "a new CA reinstalls the agent"
        );
        private.tls.insecure = true;
        assert_eq!(agent_config(&p, idle, &private)["insecure"], true);
    }

    #[test]
    fn ticks_stay_between_5_and_30_seconds() {
        assert_eq!(tick_for(Duration::from_secs(60)), 10);
        assert_eq!(tick_for(Duration::from_secs(20)), 5);
        assert_eq!(tick_for(Duration::from_secs(3600)), 30);
    }
}
