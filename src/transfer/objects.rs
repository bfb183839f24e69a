//! `[[data]] object_store`: datasets from the cloud's object store into /shared, copied by the
//! master itself, inside the cloud (`templates/node/object_fetch.py`: many objects at once,
//! resumable, the room check first, each object checked against its ETag).
//!
//! The master reads with a credential of its own that can only list and read the containers
//! the profile names ([`crate::provider::Provider::data_credential`]: an application
//! credential with access rules). It goes from this process's memory to a root-only file on
//! the master over SSH's stdin, never in argv, a log, the state folder or output, and is made
//! again only when the containers (or where the master reaches the cloud) change: the master
//! keeps a fingerprint of the file without the secret. `down` deletes it with the cluster.

use std::time::Instant;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::input::paths::{ObjectSource, SharedPath};
use crate::profile::Profile;
use crate::progress::Progress;
use crate::provider::{DataTarget, Provider, ProviderError};
use crate::ssh::{shell_quote, Ssh, SshError};
use crate::templates;

use super::TransferError;

/// The credential's folder on the master (root only).
pub const CREDENTIAL_DIR: &str = "/var/lib/hvd-cluster/objects";

/// Objects fetched at once by the master.
const THREADS: u32 = 16;

/// The credential file without its secret: what the fingerprint covers. The profile's
/// `lifecycle.identity_url` (where the master reaches Keystone) wins over the cloud's own.
pub fn credential_config(p: &Profile, target: &DataTarget, containers: &[String]) -> Value {
    let mut config = json!({
        "cluster": p.name.as_str(),
        "identity_url": p.lifecycle.identity_url.as_deref().unwrap_or(&target.identity_url),
        "object_store_url": target.object_store_url,
        "containers": containers,
    });
    target.tls.add_to(&mut config);
    config
}

/// The fingerprint of an installed credential file.
pub fn fingerprint(config: &Value) -> String {
    hex::encode(Sha256::digest(config.to_string().as_bytes()))
}

fn with_secret(config: &Value, id: &str, secret: &str) -> String {
    let mut full = config.clone();
    full["credential_id"] = json!(id);
    full["credential_secret"] = json!(secret);
    full.to_string()
}

/// What [`converge_credential`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialOutcome {
    /// No entry reads the object store, and the master held no credential for it.
    None,
    /// The master holds the credential for the same containers.
    InPlace,
    /// A new credential (this name) is on the master.
    Installed(String),
    /// No entry reads the object store any more: the credential is gone.
    Removed,
}

/// Puts on the master the credential its copies need (or removes it when none is needed),
/// changing nothing when it already holds one for the same containers.
pub async fn converge_credential(
    p: &Profile,
    provider: &dyn Provider,
    master: &Ssh,
) -> Result<CredentialOutcome, TransferError> {
    let containers = p.object_containers();
    let have = master
        .sudo(&format!(
            "cat {CREDENTIAL_DIR}/fingerprint 2>/dev/null || true"
        ))
        .await?
        .trim()
        .to_owned();
    if containers.is_empty() {
        if have.is_empty() {
            return Ok(CredentialOutcome::None);
        }
        master.sudo(&format!("rm -rf {CREDENTIAL_DIR}")).await?;
        provider
            .delete_data_credentials(p.name.as_str())
            .await
            .map_err(provider_error)?;
        return Ok(CredentialOutcome::Removed);
    }
    let target = provider.data_target().await.map_err(provider_error)?;
    let config = credential_config(p, &target, &containers);
    let want = fingerprint(&config);
    if have == want {
        return Ok(CredentialOutcome::InPlace);
    }
    let credential = provider
        .data_credential(p.name.as_str(), &containers)
        .await
        .map_err(provider_error)?;
    master
        .sudo(&format!(
            "install -d -m 700 {CREDENTIAL_DIR}; rm -f {CREDENTIAL_DIR}/fingerprint"
        ))
        .await?;
    let text = with_secret(&config, &credential.id, credential.secret.expose());
    master
        .write_file(
            &format!("{CREDENTIAL_DIR}/credential.json"),
            text.as_bytes(),
            0o600,
        )
        .await?;
    // last: a write cut short before this point is done again by the next command
    master
        .write_file(
            &format!("{CREDENTIAL_DIR}/fingerprint"),
            want.as_bytes(),
            0o600,
        )
        .await?;
    Ok(CredentialOutcome::Installed(credential.name))
}

fn provider_error(e: ProviderError) -> TransferError {
    TransferError::Remote(format!("object store: {e}"))
}

/// What one copy did.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    pub files: u64,
    pub bytes: u64,
    /// Objects already there (same size and time), not fetched again.
    pub skipped: u64,
    pub seconds: f64,
}

/// The numbers of an `ok`/`plan` line: `files=N bytes=N skipped=N`.
fn counts(line: &str) -> Option<(u64, u64, u64)> {
    let mut files = None;
    let mut bytes = None;
    let mut skipped = None;
    for word in line.split_whitespace().skip(1) {
        let (k, v) = word.split_once('=')?;
        let v: u64 = v.parse().ok()?;
        match k {
            "files" => files = Some(v),
            "bytes" => bytes = Some(v),
            "skipped" => skipped = Some(v),
            _ => return None,
        }
    }
    Some((files?, bytes?, skipped?))
}

/// The master's `refused:` line is bad input (exit 2); anything else a failure, said with its
/// last line.
fn fetch_failed(node: &str, e: SshError) -> TransferError {
    match e {
        SshError::Command { code, stderr, .. } => {
            let last = super::last_word(&stderr);
            match (code.as_str(), last.strip_prefix("refused: ")) {
                ("2", Some(why)) => TransferError::Refused(format!("{node}: object store: {why}")),
                _ => TransferError::Remote(format!(
                    "{node}: the copy from the object store failed (exit {code}): {}",
                    last.strip_prefix("failed: ").unwrap_or(&last)
                )),
            }
        }
        other => TransferError::Ssh(other),
    }
}

/// Copies `source`'s objects into `dest` on the master with the credential
/// [`converge_credential`] put there: only what is not there already, with a bar.
pub async fn fetch(
    master: &Ssh,
    source: &ObjectSource,
    dest: &SharedPath,
    progress: &Progress,
) -> Result<Fetched, TransferError> {
    let request = json!({
        "container": source.container,
        "prefix": source.prefix,
        "dest": dest.as_str(),
        "threads": THREADS,
    });
    // The request is one line of JSON (no raw line break can be in it), behind a quoted
    // heredoc marker: passed as it is, never read by the shell.
    let script = format!(
        "exec python3 -c {} {CREDENTIAL_DIR}/credential.json <<'HVD_REQUEST'\n{request}\nHVD_REQUEST\n",
        shell_quote(templates::OBJECT_FETCH)
    );
    let bar = progress.bytes_bar(&format!("object store {source}"), 0);
    let started = Instant::now();
    let mut got_files = 0u64;
    let mut got_bytes = 0u64;
    let mut planned = (0u64, 0u64, 0u64);
    let out = master
        .sudo_streaming("copy from the object store", &script, |line| {
            if let Some(n) = line
                .strip_prefix("got ")
                .and_then(|n| n.parse::<u64>().ok())
            {
                got_files += 1;
                got_bytes += n;
                bar.set_position(got_bytes);
                bar.set_message(format!("{got_files}/{} files", planned.0));
            } else if line.starts_with("plan ") {
                if let Some(c) = counts(line) {
                    planned = c;
                    bar.set_length(c.1);
                }
            }
        })
        .await;
    bar.finish_and_clear();
    let out = out.map_err(|e| fetch_failed(&master.node, e))?;
    let (files, bytes, skipped) = out
        .lines()
        .rev()
        .find(|l| l.starts_with("ok "))
        .and_then(counts)
        .ok_or_else(|| {
            TransferError::Remote(format!(
                "{}: the copy from the object store ended without its summary",
                master.node
            ))
        })?;
    Ok(Fetched {
        files,
        bytes,
        skipped,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// One summary line: `object store: ds/train -> /shared/train: 51 files, 1.3 MB in 0.4 s (12 already there)`.
pub fn summary(source: &ObjectSource, dest: &SharedPath, f: &Fetched) -> String {
    let mut line = format!(
        "object store: {source} -> {dest}: {} file(s), {} in {:.1} s",
        f.files,
        indicatif::HumanBytes(f.bytes),
        f.seconds
    );
    if f.skipped > 0 {
        line.push_str(&format!(" ({} already there)", f.skipped));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(data: &str) -> Profile {
        let text = format!(
            "name = \"demo\"\ncloud = \"c\"\n[master]\nflavor = \"f\"\nimage = \"i\"\n[workers]\ncount = 1\nflavor = \"f\"\n[network]\nexternal_network = \"public\"\n{data}"
        );
        crate::profile::parse(std::path::Path::new("p.toml"), &text).expect("a valid profile")
    }

    fn target() -> DataTarget {
        DataTarget {
            identity_url: "http://127.0.0.1:5000/v3".into(),
            object_store_url: "http://203.0.113.1:8080/v1/AUTH_p1".into(),
            tls: Default::default(),
        }
    }

    #[test]
    fn the_clouds_ca_bundle_is_in_the_credential_file_and_its_fingerprint() {
        let p = profile("[[data]]\nobject_store = \"ds/train\"\n");
        let plain = credential_config(&p, &target(), &p.object_containers());
        assert!(plain.get("ca_pem").is_none());
        let mut private = target();
        private.tls.ca_pem = Some("-----BEGIN CERTIFICATE-----\nMIIB\n".into());
        let with_ca = credential_config(&p, &private, &p.object_containers());
        assert_eq!(with_ca["ca_pem"], "-----BEGIN CERTIFICATE-----\nMIIB\n");
        assert_ne!(fingerprint(&plain), fingerprint(&with_ca));
    }

    #[test]
    fn the_containers_are_each_named_once_and_only_object_store_entries_count() {
        let p = profile(
            "[[data]]\nobject_store = \"ds/train\"\n[[data]]\nobject_store = \"ds/val\"\n[[data]]\nobject_store = \"models\"\n[[data]]\nlocal = \"code\"\n",
        );
        assert_eq!(p.object_containers(), ["ds", "models"]);
        assert!(profile("").object_containers().is_empty());
    }

    #[test]
    fn a_new_container_or_url_changes_the_fingerprint_and_the_secret_is_never_in_it() {
        let p = profile("[[data]]\nobject_store = \"ds/train\"\n");
        let base = credential_config(&p, &target(), &p.object_containers());
        assert_eq!(base["containers"][0], "ds");
        assert!(base.get("credential_secret").is_none());
        let fp = fingerprint(&base);
        assert_eq!(
            fp,
            fingerprint(&credential_config(&p, &target(), &p.object_containers()))
        );
        assert_ne!(
            fp,
            fingerprint(&credential_config(
                &p,
                &target(),
                &["ds".into(), "more".into()]
            ))
        );
        let moved = profile(
            "[[data]]\nobject_store = \"ds/train\"\n[lifecycle]\nidentity_url = \"http://203.0.113.1:5000/v3\"\n",
        );
        let c = credential_config(&moved, &target(), &moved.object_containers());
        assert_eq!(
            c["identity_url"], "http://203.0.113.1:5000/v3",
            "the profile's URL wins"
        );
        assert_ne!(fp, fingerprint(&c));
        let text = with_secret(&base, "cid", "s3\"cr\net");
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back["credential_secret"], "s3\"cr\net",
            "JSON-quoted, read back whole"
        );
    }

    #[test]
    fn the_masters_lines_are_read_by_their_grammar() {
        assert_eq!(counts("ok files=3 bytes=10 skipped=2"), Some((3, 10, 2)));
        assert_eq!(counts("plan files=0 bytes=0 skipped=51"), Some((0, 0, 51)));
        for bad in [
            "ok files=3 bytes=10",
            "ok files=x bytes=10 skipped=0",
            "ok files=1 bytes=1 skipped=1 evil=1",
            "ok",
        ] {
            assert_eq!(counts(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_refusal_is_bad_input_and_a_failure_is_not_and_both_are_escaped() {
        let refused = fetch_failed(
            "demo-master",
            SshError::Command {
                node: "demo-master".into(),
                what: "copy".into(),
                code: "2".into(),
                stderr: "refused: object a/\\x1b[31m..: `..` cannot be a folder\n".into(),
            },
        );
        assert!(refused.is_bad_input(), "{refused}");
        assert!(refused
            .to_string()
            .starts_with("demo-master: object store: object a/"));
        let failed = fetch_failed(
            "demo-master",
            SshError::Command {
                node: "demo-master".into(),
                what: "copy".into(),
                code: "1".into(),
                stderr: "failed: object x: its content does not match its ETag\u{1b}[0m\n".into(),
            },
        );
        assert!(!failed.is_bad_input());
        let text = failed.to_string();
        assert!(text.contains("does not match its ETag"), "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
    }
}
