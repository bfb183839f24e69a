//! The cluster's local folder: resource ids, addresses, the cluster's SSH key pair.
//!
//! Written atomically (temp file + rename) after every step, locked against a second `up`.
//! Losing it is not fatal: the cloud-side tag finds every resource again; only the key pair
//! (and so SSH access to existing nodes) is lost with it.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use fs4::fs_std::FileExt;
use serde::{Deserialize, Serialize};

use crate::input::ClusterName;
use crate::plan::Kind;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{path} is not a valid state file ({source}); move it away and run the command again: the cloud-side tags find the resources")]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("another hvd-cluster command is changing cluster `{cluster}` ({holder}); wait for it or stop it")]
    Locked { cluster: String, holder: String },
    #[error("{path} is not a plain folder (it is a symbolic link or a file); hvd-cluster only changes or deletes folders it made itself under the state folder")]
    NotAFolder { path: PathBuf },
    #[error("cluster `{cluster}` has no folder on this machine ({path}); its SSH key is kept there: run `hvd-cluster up` with its profile here first")]
    NoFolder { cluster: String, path: PathBuf },
    #[error("ssh-keygen failed to make the cluster key at {path}: {detail}")]
    Keygen { path: PathBuf, detail: String },
    #[error("{path} was written by hvd-cluster {written_by} in state format {format}; this is hvd-cluster {ours}, which reads format {STATE_FORMAT} and would lose what it cannot read: use hvd-cluster {written_by} or newer for this cluster", ours = env!("CARGO_PKG_VERSION"))]
    Newer {
        path: PathBuf,
        format: u32,
        /// The writer's version as the file says it, shortened and escaped.
        written_by: String,
    },
}

/// The state file's format. A tool reads its own format and every older one (each field
/// added since has a default); it refuses a newer one, whose fields it would drop on its
/// next save. Raised with a change that an older tool cannot read whole; a change that needs
/// more than defaults says so when it migrates a file (the CHANGELOG lists each format).
pub const STATE_FORMAT: u32 = 1;

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StateError + 'a {
    move |source| StateError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// One resource the cluster owns, as last seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    pub kind: Kind,
    pub id: String,
}

/// A create call under way: what it makes, and when it was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub kind: Kind,
    /// Seconds since the Unix epoch, this machine's clock.
    pub sent_at: u64,
}

/// What a command did to a server that may give it a new host key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Renewal {
    StartedAgain,
    MadeAnew,
}

impl Renewal {
    /// As the vouch line says it of the command that does it.
    pub fn by_this_command(self) -> &'static str {
        match self {
            Renewal::StartedAgain => "started again by this command",
            Renewal::MadeAnew => "made anew by this command",
        }
    }

    /// As it is said of a command that stopped before the vouch.
    pub fn by_an_unfinished_command(self) -> &'static str {
        match self {
            Renewal::StartedAgain => "started again by a command that did not finish",
            Renewal::MadeAnew => "made anew by a command that did not finish",
        }
    }
}

/// A node's addresses, for SSH and the hostfile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Node {
    pub name: String,
    pub role: crate::plan::Role,
    pub private_ip: Option<String>,
    pub public_ip: Option<String>,
    pub slots: u32,
    #[serde(default)]
    pub gpus: u32,
    /// The flavor's ephemeral disk (GB), where Docker's data goes; 0: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ephemeral_gb: u32,
    /// Listed in the elastic discovery file on the master (status only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_discovery: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ClusterState {
    pub cluster: String,
    /// The clouds.yaml entry used, so `down --cluster NAME` needs no profile.
    #[serde(default)]
    pub cloud: Option<String>,
    #[serde(default)]
    pub provider: Option<crate::profile::ProviderKind>,
    /// The nodes' login user, for SSH without the profile.
    #[serde(default)]
    pub ssh_user: Option<String>,
    /// Resources by name.
    #[serde(default)]
    pub resources: BTreeMap<String, Resource>,
    #[serde(default)]
    pub highest_worker_index: u32,
    /// Creates sent to the cloud whose new id is not recorded yet, by resource name. A
    /// command killed between the two leaves one, and the cloud may still be making the
    /// resource: the next command's look waits for it rather than make a second.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub in_flight: BTreeMap<String, InFlight>,
    /// Servers a command started again or made anew, recorded before the call and cleared
    /// once every node's host key is vouched for: a command stopped in between leaves them
    /// here, and the next one may still vouch for their new keys against their consoles.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub renewing: BTreeMap<String, Renewal>,
    #[serde(default)]
    pub nodes: Vec<Node>,
    /// The workers hvd-cluster last wrote into the master's elastic discovery file (what
    /// `status` shows without asking the master).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Vec<String>>,
    /// Node name -> the interface holding its private address, as the last bootstrap found
    /// them: `run` builds horovodrun's arguments from these with a session to the master
    /// alone (checked again where they are read).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ifaces: BTreeMap<String, String>,
    /// The folders and files below /shared that `stage` copied onto every node's own disk:
    /// every later bootstrap (`scale`, `heal`, `start`, `up` again) stages them onto the nodes
    /// that lack them before elastic discovery lists those (checked again where read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub staged: Vec<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    /// The state file's format ([`STATE_FORMAT`] when this tool wrote it; 0: written before
    /// formats were numbered, read as format 1, which only added this field and the next).
    #[serde(default)]
    pub format: u32,
    /// The version of hvd-cluster that last wrote the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<String>,
}

/// Where every cluster's folder lives: `$HVD_CLUSTER_STATE_DIR`, else
/// `$XDG_STATE_HOME/hvd-cluster`, else `~/.local/state/hvd-cluster`.
pub fn default_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("HVD_CLUSTER_STATE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(dir).join("hvd-cluster");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/state/hvd-cluster")
}

/// One cluster's folder (mode 0700).
#[derive(Debug, Clone)]
pub struct ClusterDir {
    pub path: PathBuf,
    pub cluster: String,
    /// False when a read-only look found no folder: then nothing is written or removed, so
    /// looking at a cluster (`status`, `plan`, `down` of one made elsewhere) leaves no trace.
    on_disk: bool,
}

impl ClusterDir {
    /// Opens (creating it 0700 when missing) `<root>/<cluster>`. A valid name cannot leave
    /// the root; a cluster folder that is a symbolic link or a file is refused, never followed.
    pub fn open(root: &Path, cluster: &ClusterName) -> Result<ClusterDir, StateError> {
        fs::create_dir_all(root).map_err(io_err("cannot create", root))?;
        let path = root.join(cluster.as_str());
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_dir() => {}
            Ok(_) => return Err(StateError::NotAFolder { path }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&path)
                    .map_err(io_err("cannot create", &path))?;
            }
            Err(e) => return Err(io_err("cannot read", &path)(e)),
        }
        // chmod through a handle opened without following a link, so the folder checked
        // above is the one changed even if the path were swapped in between.
        let folder = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY)
            .open(&path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                    StateError::NotAFolder { path: path.clone() }
                }
                _ => io_err("cannot open", &path)(e),
            })?;
        folder
            .set_permissions(fs::Permissions::from_mode(0o700))
            .map_err(io_err("cannot protect", &path))?;
        Ok(ClusterDir {
            path,
            cluster: cluster.to_string(),
            on_disk: true,
        })
    }

    /// `<root>/<cluster>` for commands that only read: never creates or changes it (nor the
    /// root). A missing folder reads as empty state and every write to it is skipped; a
    /// symbolic link or a file in its place is refused, as by [`ClusterDir::open`].
    pub fn look(root: &Path, cluster: &ClusterName) -> Result<ClusterDir, StateError> {
        let path = root.join(cluster.as_str());
        let on_disk = match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_dir() => true,
            Ok(_) => return Err(StateError::NotAFolder { path }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(io_err("cannot read", &path)(e)),
        };
        Ok(ClusterDir {
            path,
            cluster: cluster.to_string(),
            on_disk,
        })
    }

    /// Whether the folder existed when it was opened or looked at.
    pub fn exists(&self) -> bool {
        self.on_disk
    }

    /// The folder, required: commands that reach the nodes need the key kept in it.
    pub fn required(self) -> Result<ClusterDir, StateError> {
        if self.on_disk {
            Ok(self)
        } else {
            Err(StateError::NoFolder {
                cluster: self.cluster,
                path: self.path,
            })
        }
    }

    pub fn state_file(&self) -> PathBuf {
        self.path.join("state.json")
    }
    /// The profile `bake --temporary` writes for its one-server cluster (removed with it).
    pub fn temporary_profile(&self) -> PathBuf {
        self.path.join("profile.toml")
    }
    pub fn private_key(&self) -> PathBuf {
        self.path.join("id_ed25519")
    }
    pub fn public_key_file(&self) -> PathBuf {
        self.path.join("id_ed25519.pub")
    }
    /// The key horovodrun uses between the Horovod containers (and a Jupyter terminal with
    /// it): its public half opens only the containers' sshd, never a host's, so code in a
    /// container gets no login on the hosts, where the login user has sudo.
    pub fn container_key(&self) -> PathBuf {
        self.path.join("container_ed25519")
    }
    pub fn container_key_public(&self) -> PathBuf {
        self.path.join("container_ed25519.pub")
    }

    /// The saved state, or an empty one when there is none yet.
    pub fn load(&self) -> Result<ClusterState, StateError> {
        let path = self.state_file();
        let mut text = String::new();
        match File::open(&path) {
            Ok(mut f) => f
                .read_to_string(&mut text)
                .map_err(io_err("cannot read", &path))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(ClusterState {
                    cluster: self.cluster.clone(),
                    ..ClusterState::default()
                })
            }
            Err(e) => return Err(io_err("cannot read", &path)(e)),
        };
        let state: ClusterState =
            serde_json::from_str(&text).map_err(|source| StateError::Corrupt {
                path: path.clone(),
                source,
            })?;
        if state.format > STATE_FORMAT {
            let written_by = state
                .written_by
                .as_deref()
                .map_or_else(|| "(a newer version)".to_string(), crate::input::shown);
            return Err(StateError::Newer {
                path,
                format: state.format,
                written_by,
            });
        }
        Ok(state)
    }

    /// Replaces the state file atomically: a reader sees the old or the new file, never half.
    pub fn save(&self, state: &ClusterState) -> Result<(), StateError> {
        if !self.on_disk {
            return Ok(());
        }
        let mut state = state.clone();
        state.updated_at = Some(chrono::Utc::now().to_rfc3339());
        state.format = STATE_FORMAT;
        state.written_by = Some(env!("CARGO_PKG_VERSION").to_string());
        let body = serde_json::to_vec_pretty(&state).map_err(|e| StateError::Io {
            action: "cannot encode",
            path: self.state_file(),
            source: io::Error::other(e),
        })?;
        write_atomic(&self.state_file(), &body, 0o600)
    }

    /// Takes the cluster's lock for the life of the returned guard; fails at once if held.
    pub fn lock(&self) -> Result<LockGuard, StateError> {
        if !self.on_disk {
            // No folder, no state to guard; making one just for the lock would leave a trace.
            return Ok(LockGuard { _file: None });
        }
        let path = self.path.join("lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            // Never truncate or write through a link planted in the folder.
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io_err("cannot open", &path))?;
        match FileExt::try_lock_exclusive(&file) {
            Ok(true) => {}
            Ok(false) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = if holder.trim().is_empty() {
                    "pid unknown".to_string()
                } else {
                    format!("pid {}", holder.trim())
                };
                return Err(StateError::Locked {
                    cluster: self.cluster.clone(),
                    holder,
                });
            }
            Err(e) => return Err(io_err("cannot lock", &path)(e)),
        }
        file.set_len(0).map_err(io_err("cannot write", &path))?;
        write!(file, "{}", std::process::id()).map_err(io_err("cannot write", &path))?;
        Ok(LockGuard { _file: Some(file) })
    }

    /// The cluster's SSH key pair for the hosts' login user, generated on first use; returns
    /// the public key line.
    pub fn ensure_keypair(&self) -> Result<String, StateError> {
        self.ensure_key(self.private_key(), self.public_key_file(), "")
    }

    /// The containers' key pair ([`Self::container_key`]), generated on first use; returns
    /// the public key line.
    pub fn ensure_container_keypair(&self) -> Result<String, StateError> {
        self.ensure_key(
            self.container_key(),
            self.container_key_public(),
            "-containers",
        )
    }

    fn ensure_key(&self, key: PathBuf, public: PathBuf, tag: &str) -> Result<String, StateError> {
        if !key.exists() {
            let out = std::process::Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C"])
                .arg(format!("hvd-cluster-{}{tag}", self.cluster))
                .arg("-f")
                .arg(&key)
                .output()
                .map_err(|e| StateError::Keygen {
                    path: key.clone(),
                    detail: e.to_string(),
                })?;
            if !out.status.success() {
                return Err(StateError::Keygen {
                    path: key.clone(),
                    detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                });
            }
        }
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600))
            .map_err(io_err("cannot protect", &key))?;
        let line = fs::read_to_string(&public).map_err(io_err("cannot read", &public))?;
        Ok(line.trim().to_string())
    }

    /// Removes the folder after `down` (keys included: the nodes are gone). Only a real
    /// folder is removed: a symbolic link in its place is refused, never followed.
    pub fn remove(self) -> Result<(), StateError> {
        if !self.on_disk {
            return Ok(());
        }
        match fs::symlink_metadata(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("cannot read", &self.path)(e)),
            Ok(meta) if !meta.file_type().is_dir() => {
                Err(StateError::NotAFolder { path: self.path })
            }
            Ok(_) => match fs::remove_dir_all(&self.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(io_err("cannot remove", &self.path)(e))
                }
                _ => Ok(()),
            },
        }
    }
}

/// Holds the cluster lock until dropped (the OS releases it if the process dies).
#[derive(Debug)]
pub struct LockGuard {
    _file: Option<File>,
}

/// Writes `body` to `path` through a temp file in the same folder, fsynced, then renamed.
pub fn write_atomic(path: &Path, body: &[u8], mode: u32) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io_err("cannot create", &tmp))?;
    f.write_all(body).map_err(io_err("cannot write", &tmp))?;
    f.sync_all().map_err(io_err("cannot sync", &tmp))?;
    fs::rename(&tmp, path).map_err(io_err("cannot replace", path))?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> ClusterName {
        ClusterName::parse("demo").unwrap()
    }

    #[test]
    fn a_symlinked_cluster_folder_is_never_followed() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::set_permissions(outside.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(outside.path().join("keep"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("demo")).unwrap();
        let e = ClusterDir::open(root.path(), &demo()).unwrap_err();
        assert!(matches!(e, StateError::NotAFolder { .. }), "{e}");
        let mode = fs::metadata(outside.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755, "the link's target was not chmod-ed");
        let dir = ClusterDir {
            path: root.path().join("demo"),
            cluster: "demo".into(),
            on_disk: true,
        };
        assert!(matches!(dir.remove(), Err(StateError::NotAFolder { .. })));
        assert!(outside.path().join("keep").exists());
    }

    #[test]
    fn a_look_creates_nothing_and_writes_nothing() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("state");
        let dir = ClusterDir::look(&root, &demo()).unwrap();
        assert!(!dir.exists());
        assert_eq!(dir.load().unwrap().cluster, "demo");
        dir.save(&dir.load().unwrap()).unwrap();
        let guard = dir.lock().unwrap();
        drop(guard);
        assert!(matches!(
            dir.clone().required(),
            Err(StateError::NoFolder { .. })
        ));
        dir.remove().unwrap();
        assert!(!root.exists(), "neither the root nor the folder was made");

        // An existing folder is read as is: not chmod-ed, and still refused when a link.
        fs::create_dir_all(root.join("demo")).unwrap();
        fs::set_permissions(root.join("demo"), fs::Permissions::from_mode(0o755)).unwrap();
        let dir = ClusterDir::look(&root, &demo()).unwrap();
        assert!(dir.exists());
        let mode = fs::metadata(&dir.path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("linked")).unwrap();
        let linked = ClusterName::parse("linked").unwrap();
        assert!(matches!(
            ClusterDir::look(&root, &linked),
            Err(StateError::NotAFolder { .. })
        ));
    }

    #[test]
    fn a_file_in_place_of_the_folder_is_refused() {
        let root = tempfile::tempdir().unwrap();
        fs::write(root.path().join("demo"), "x").unwrap();
        let e = ClusterDir::open(root.path(), &demo()).unwrap_err();
        assert!(matches!(e, StateError::NotAFolder { .. }), "{e}");
    }

    #[test]
    fn save_load_round_trip_and_permissions() {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::open(root.path(), &demo()).unwrap();
        assert_eq!(dir.load().unwrap().cluster, "demo");
        let mut s = dir.load().unwrap();
        s.resources.insert(
            "demo-net".into(),
            Resource {
                kind: Kind::Network,
                id: "n1".into(),
            },
        );
        s.highest_worker_index = 4;
        dir.save(&s).unwrap();
        let back = dir.load().unwrap();
        assert_eq!(back.resources, s.resources);
        assert_eq!(back.highest_worker_index, 4);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path), 0o700);
        assert_eq!(mode(&dir.state_file()), 0o600);
    }

    #[test]
    fn the_state_says_which_version_wrote_it_and_an_older_file_still_reads() {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::open(root.path(), &demo()).unwrap();
        // a file from before formats were numbered: no `format`, no `written_by`
        fs::write(
            dir.state_file(),
            r#"{"cluster":"demo","resources":{},"highest_worker_index":2,"nodes":[]}"#,
        )
        .unwrap();
        let old = dir.load().unwrap();
        assert_eq!((old.format, old.highest_worker_index), (0, 2));
        dir.save(&old).unwrap();
        let text = fs::read_to_string(dir.state_file()).unwrap();
        let saved: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(saved["format"], STATE_FORMAT);
        assert_eq!(saved["written_by"], env!("CARGO_PKG_VERSION"));
        assert_eq!(dir.load().unwrap().highest_worker_index, 2);
    }

    #[test]
    fn a_newer_format_is_refused_with_its_writer_escaped() {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::open(root.path(), &demo()).unwrap();
        let newer = format!(
            r#"{{"cluster":"demo","format":{},"written_by":"9.9.9\u001b[31m{}"}}"#,
            STATE_FORMAT + 1,
            "x".repeat(500)
        );
        fs::write(dir.state_file(), newer).unwrap();
        let e = dir.load().unwrap_err();
        assert!(matches!(e, StateError::Newer { .. }), "{e}");
        let said = e.to_string();
        assert!(
            said.contains("written by hvd-cluster 9.9.9\\u{1b}[31m")
                && said.contains(&format!("reads format {STATE_FORMAT}"))
                && said.contains("(510 bytes)")
                && !said.contains('\u{1b}'),
            "{said}"
        );
    }

    #[test]
    fn corrupt_state_says_what_to_do() {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::open(root.path(), &demo()).unwrap();
        fs::write(dir.state_file(), "{not json").unwrap();
        let e = dir.load().unwrap_err().to_string();
        assert!(
            e.contains("not a valid state file") && e.contains("tags find"),
            "{e}"
        );
    }

    #[test]
    fn second_lock_fails_while_first_is_held() {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::open(root.path(), &demo()).unwrap();
        let guard = dir.lock().unwrap();
        let e = dir.lock().unwrap_err();
        assert!(matches!(e, StateError::Locked { .. }), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        drop(guard);
        assert!(dir.lock().is_ok());
    }

    #[test]
    fn keypair_is_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::open(root.path(), &demo()).unwrap();
        let public = dir.ensure_keypair().unwrap();
        assert!(public.starts_with("ssh-ed25519 "), "{public}");
        assert_eq!(
            fs::metadata(dir.private_key())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        assert_eq!(
            dir.ensure_keypair().unwrap(),
            public,
            "second call keeps the key"
        );
    }

    #[test]
    fn the_containers_key_is_another_key() {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::open(root.path(), &demo()).unwrap();
        let login = dir.ensure_keypair().unwrap();
        let containers = dir.ensure_container_keypair().unwrap();
        assert!(containers.starts_with("ssh-ed25519 "), "{containers}");
        let blob = |line: &str| {
            line.split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string()
        };
        assert_ne!(blob(&login), blob(&containers), "two different keys");
        assert!(containers.ends_with("-containers"), "{containers}");
        assert_eq!(
            fs::metadata(dir.container_key())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        assert_eq!(dir.ensure_container_keypair().unwrap(), containers, "kept");
        assert_eq!(
            dir.ensure_keypair().unwrap(),
            login,
            "the login key untouched"
        );
    }
}
