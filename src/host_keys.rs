//! SSH host keys: what a cluster's known_hosts pins for a node, what ssh says a node offered
//! when the two differ, and the keys a server's console vouches for (the block cloud-init
//! prints at boot). Pure: text in, values out; [`crate::ssh`] and the bootstrap's connect do
//! the reading and writing.
//!
//! A changed key is never accepted in silence. Where the tool itself knows why a node's key
//! changed (it unshelved or re-created the server), the new key is taken only from the
//! server's console, read through the cloud's API, and only when it is the key the node
//! offers.

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The key types a known_hosts line or a console block may carry (what OpenSSH's sshd makes).
const KEY_TYPES: &[&str] = &[
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
];

/// cloud-init's console block (its `keys_to_console` module), and the same from our node
/// image's entrypoint.
pub const CONSOLE_BEGIN: &str = "-----BEGIN SSH HOST KEY KEYS-----";
pub const CONSOLE_END: &str = "-----END SSH HOST KEY KEYS-----";

/// One public host key: its type and its base64 body, both checked, and its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKey {
    pub kind: String,
    pub body: String,
    fingerprint: String,
}

impl HostKey {
    /// `TYPE BASE64 [comment]`, checked: a known type, a body that decodes and names the
    /// same type inside (as every SSH public key does).
    pub fn parse(line: &str) -> Option<HostKey> {
        let mut words = line.split_whitespace();
        let kind = words.next()?;
        let body = words.next()?;
        if !KEY_TYPES.contains(&kind) || body.len() > 4096 {
            return None;
        }
        let blob = base64::engine::general_purpose::STANDARD
            .decode(body)
            .ok()?;
        // The blob starts with the type as an SSH string: u32 length, then the name.
        let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
        if blob.get(4..4 + len)? != kind.as_bytes() {
            return None;
        }
        // OpenSSH's fingerprint: `SHA256:` and the unpadded base64 of the blob's SHA-256.
        let fingerprint = format!(
            "SHA256:{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(Sha256::digest(&blob))
        );
        Some(HostKey {
            kind: kind.to_string(),
            body: body.to_string(),
            fingerprint,
        })
    }

    /// The key's fingerprint as `ssh-keygen -l` prints it (`SHA256:...`).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// The keys known_hosts pins under `alias` (plain host patterns, as our ssh_config writes them
/// through `HostKeyAlias`; hashed or marker lines are not ours and are left alone).
pub fn pinned(known_hosts: &str, alias: &str) -> Vec<HostKey> {
    known_hosts
        .lines()
        .filter_map(|line| {
            let (hosts, key) = line.trim().split_once(char::is_whitespace)?;
            names_alias(hosts, alias)
                .then(|| HostKey::parse(key))
                .flatten()
        })
        .collect()
}

fn names_alias(hosts: &str, alias: &str) -> bool {
    hosts.split(',').any(|h| h == alias)
}

/// known_hosts with `alias`'s lines replaced by `keys` (one line each, at the end); every
/// other line kept as it was.
pub fn repin(known_hosts: &str, alias: &str, keys: &[HostKey]) -> String {
    let mut out: String = known_hosts
        .lines()
        .filter(|line| {
            line.trim()
                .split_once(char::is_whitespace)
                .is_none_or(|(hosts, _)| !names_alias(hosts, alias))
        })
        .map(|line| format!("{line}\n"))
        .collect();
    for key in keys {
        out.push_str(&format!("{alias} {} {}\n", key.kind, key.body));
    }
    out
}

/// What ssh printed when a pinned key did not match: the node it named (`Host key for NAME has
/// changed`) and the fingerprint the node offered (`...sent by the remote host is\nSHA256:...`).
/// None when the text is not that error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// The alias ssh named, when it did (with ProxyJump, the failing hop may be the master).
    pub alias: Option<String>,
    pub offered: Option<String>,
}

pub fn changed_in(ssh_stderr: &str) -> Option<Changed> {
    // ASCII lowercase keeps every byte where it was: an index into it is one into the text
    let lower = ssh_stderr.to_ascii_lowercase();
    let said = lower.contains("remote host identification has changed")
        || (lower.contains("host key for ") && lower.contains(" has changed"));
    if !said {
        return None;
    }
    // OpenSSH: "ED25519 host key for NAME has changed and you have requested strict checking."
    const FOR: &str = "host key for ";
    let alias = lower
        .find(FOR)
        .and_then(|at| ssh_stderr.get(at + FOR.len()..))
        .and_then(|rest| {
            let name = rest.split_whitespace().next()?;
            crate::input::check_host_label(name)
                .is_ok()
                .then(|| name.to_string())
        });
    let offered = ssh_stderr.split("SHA256:").skip(1).find_map(|rest| {
        let body: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '+' || *c == '/')
            .collect();
        (body.len() == 43).then(|| format!("SHA256:{body}"))
    });
    Some(Changed { alias, offered })
}

/// The host keys of the last complete block a console shows (a server that booted twice
/// printed two; the newest is the one that counts). Lines that are not keys are skipped;
/// None when the console shows no complete block.
pub fn on_console(console: &str) -> Option<Vec<HostKey>> {
    let mut last = None;
    let mut current: Option<Vec<HostKey>> = None;
    for line in console.lines() {
        let line = line.trim_matches(|c: char| c.is_whitespace() || c == '\r');
        if line.ends_with(CONSOLE_BEGIN) {
            current = Some(Vec::new());
        } else if line.ends_with(CONSOLE_END) {
            if let Some(keys) = current.take() {
                if !keys.is_empty() {
                    last = Some(keys);
                }
            }
        } else if let Some(keys) = current.as_mut() {
            if let Some(key) = HostKey::parse(line) {
                keys.push(key);
            }
        }
    }
    last
}

/// Fingerprints for a message: `SHA256:a, SHA256:b`, or `none`.
pub fn fingerprints(keys: &[HostKey]) -> String {
    if keys.is_empty() {
        return "none".into();
    }
    keys.iter()
        .map(HostKey::fingerprint)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Two real public keys (made with ssh-keygen for these tests) and their fingerprints as
    // `ssh-keygen -l` prints them.
    const ED: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKB1q6Jokl0MAFotu63C+lE3lL6StifMxPQTdi0q9OXV root@a";
    const ED_FP: &str = "SHA256:ttTjziGCeL/VYjsHHTmvyT4S36604crUx5o87GXuPOQ";
    const EC: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBIanPuDP9spYTyBL5sk1IwzHXLbOt9s0gUnLNnOVSoNEUSgyWXv7DiJI8a5Bf315vfIBuI0aA/H3C04AeVzYmYQ= root@a";

    #[test]
    fn keys_parse_and_fingerprint_as_ssh_keygen_does() {
        let key = HostKey::parse(ED).expect("an ed25519 key");
        assert_eq!(key.kind, "ssh-ed25519");
        assert_eq!(key.fingerprint(), ED_FP);
        assert!(HostKey::parse(EC).is_some());
    }

    #[test]
    fn hostile_key_lines_are_not_keys() {
        for bad in [
            "",
            "ssh-ed25519",
            "ssh-dss AAAAB3NzaC1kc3MAAACBAP",
            "ssh-ed25519 not-base64!",
            // a body that names another type inside
            &EC.replacen("ecdsa-sha2-nistp256", "ssh-ed25519", 1),
            "Host * ProxyCommand sh -c id",
        ] {
            assert_eq!(HostKey::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn pinned_keys_are_the_aliases_own() {
        let text = format!(
            "c-master {ED}\nc-worker-1 {EC}\n|1|hashed= ssh-ed25519 AAAA\nc-master-2 {EC}\n"
        );
        let keys = pinned(&text, "c-master");
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].fingerprint(), ED_FP);
        assert!(pinned(&text, "c-worker-2").is_empty());
    }

    #[test]
    fn repin_replaces_only_the_aliases_lines() {
        let text = format!("c-master {ED}\nc-worker-1 {EC}\n");
        let new = HostKey::parse(EC).unwrap();
        let out = repin(&text, "c-master", std::slice::from_ref(&new));
        assert_eq!(pinned(&out, "c-master"), vec![new.clone()]);
        assert_eq!(pinned(&out, "c-worker-1"), vec![new]);
        assert_eq!(out.lines().count(), 2);
    }

    #[test]
    fn ssh_s_changed_key_message_is_read() {
        let stderr = "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
            @    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n\
            @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
            IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n\
            The fingerprint for the ED25519 key sent by the remote host is\n\
            SHA256:ttTjziGCeL/VYjsHHTmvyT4S36604crUx5o87GXuPOQ.\n\
            Please contact your system administrator.\n\
            ED25519 host key for c-master has changed and you have requested strict checking.\n\
            Host key verification failed.";
        let seen = changed_in(stderr).expect("the changed-key error");
        assert_eq!(seen.alias.as_deref(), Some("c-master"));
        assert_eq!(seen.offered.as_deref(), Some(ED_FP));
        assert_eq!(changed_in("Connection refused"), None);
        // a hostile name in the text is not taken as a node
        let odd = changed_in("Host key for $(id) has changed").expect("still the error");
        assert_eq!(odd.alias, None);
    }

    #[test]
    fn the_console_s_last_complete_block_counts() {
        let console = format!(
            "[    1.0] booting\r\n{CONSOLE_BEGIN}\r\n{EC}\r\n{CONSOLE_END}\r\n\
             second boot\n{CONSOLE_BEGIN}\n{ED}\nnot a key\n{EC}\n{CONSOLE_END}\n\
             {CONSOLE_BEGIN}\n{ED}\n"
        );
        let keys = on_console(&console).expect("a block");
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].fingerprint(), ED_FP);
        assert_eq!(on_console("no keys here\n"), None);
        assert_eq!(
            on_console(&format!("{CONSOLE_BEGIN}\n{CONSOLE_END}\n")),
            None
        );
    }
}
