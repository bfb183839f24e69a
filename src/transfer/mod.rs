//! `push` and `pull`: a tree (or one file) between this machine and `/shared` on the master,
//! over the cluster's own SSH, as one stream of many files (never a round trip per file).
//!
//! Two calls to the master each way, both to `tree_sync.py` (sent with the call, Python's
//! standard library): first the destination's manifest (every entry's size, mtime, mode; hashes
//! on request) and the free space where it lands; then, when anything differs, one stream of
//! just what is new or changed ([`diff::changes`]), compressed with zstd where a sample of it
//! says it pays (`--adapt`: zstd picks its level by how fast the link takes the bytes). The
//! room check comes before a byte moves. A file reaches its name only whole, so an interrupted
//! transfer leaves no half file, and the same command again sends only what is missing.
//!
//! The flow: [`paths`] and [`tree`] check and read what is given, [`diff`] decides (pure),
//! [`stream`] reads or writes the local files on a thread of its own, this module talks to
//! the master.

pub mod diff;
pub mod objects;
mod pull;
pub mod stage;
pub mod stream;
pub mod tree;
pub mod wire;

pub use crate::input::paths;
pub use pull::pull;
pub use stage::stage;

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openssh::Stdio;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::progress::Progress;
use crate::ssh::{shell_quote, Ssh};
use diff::{Action, Changes, Entry};
use paths::{shown_bytes, SharedPath};
use stream::{Counters, LocalDest};
use tree::{Excludes, RootKind, ScanOptions};
use wire::{Kind, Record};

/// Why a transfer did not happen, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// Bad input, said before anything was sent (exit 2): a path, a pattern, no room.
    #[error("{0}")]
    Refused(String),
    /// What was to be copied is not on the cluster (exit 2, as bad input).
    #[error("{0}")]
    Missing(String),
    /// A local file could not be read or written.
    #[error("{0}")]
    Local(String),
    /// The master failed, or sent what we do not accept.
    #[error("{0}")]
    Remote(String),
    #[error(transparent)]
    Ssh(#[from] crate::ssh::SshError),
}

impl TransferError {
    /// Whether the error is bad input (exit 2) rather than a failure while working.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, TransferError::Refused(_) | TransferError::Missing(_))
    }
}

/// How a transfer goes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Delete at the destination what the source does not have.
    pub delete: bool,
    /// Files are the same when their content hashes are, not their size and mtime.
    pub checksum: bool,
    /// Patterns in `.gitignore`'s grammar left out (and never deleted).
    pub excludes: Vec<String>,
    /// Never compress.
    pub no_compress: bool,
}

/// What a transfer did: its one summary line.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub verb: &'static str,
    pub from: String,
    pub to: String,
    pub files: u64,
    pub bytes: u64,
    pub unchanged: u64,
    pub deleted: u64,
    pub secs: f64,
    pub compressed: bool,
    /// Entries gone before their turn came (names, shown).
    pub vanished: Vec<String>,
    /// Files changed while they were read (sent as read; the next transfer sends them again).
    pub changed: Vec<String>,
    /// Folders left where the source has a file (replaced only with --delete).
    pub kept_folders: Vec<String>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mb = self.bytes as f64 / 1e6;
        write!(
            f,
            "{} {} file(s), {mb:.1} MB, {} -> {} in {:.1} s",
            self.verb, self.files, self.from, self.to, self.secs
        )?;
        if self.bytes > 0 {
            write!(f, " ({:.1} MB/s", mb / self.secs.max(1e-3))?;
            f.write_str(if self.compressed { ", zstd)" } else { ")" })?;
        }
        write!(f, "; {} unchanged", self.unchanged)?;
        if self.deleted > 0 {
            write!(f, ", {} deleted", self.deleted)?;
        }
        let list = |names: &[String]| {
            let mut s = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
            if names.len() > 5 {
                s.push_str(&format!(" and {} more", names.len() - 5));
            }
            s
        };
        if !self.vanished.is_empty() {
            write!(f, "; gone before their turn: {}", list(&self.vanished))?;
        }
        if !self.changed.is_empty() {
            write!(
                f,
                "; changed while read (sent again next time): {}",
                list(&self.changed)
            )?;
        }
        if !self.kept_folders.is_empty() {
            write!(
                f,
                "; folders left where a file goes (--delete replaces them): {}",
                list(&self.kept_folders)
            )?;
        }
        Ok(())
    }
}

/// The master's end, as a `python3 -c` word.
fn tree_sync(verb: &str) -> String {
    format!(
        "sudo -n python3 -c {} {verb}",
        shell_quote(crate::templates::TREE_SYNC)
    )
}

/// What the master's manifest says of a root.
struct RemoteTree {
    kind: RootKind,
    /// A root that is something other than a file or folder.
    other: bool,
    free: u64,
    entries: Vec<Entry>,
}

/// Runs a call on the master with `input` on stdin; its stdout, or the error it said.
async fn call(ssh: &Ssh, verb: &str, input: Vec<u8>) -> Result<Vec<u8>, TransferError> {
    call_command(ssh, &tree_sync(verb), verb, input).await
}

/// Runs `command` on a node with `input` on stdin; its stdout, or the error it said (`verb`
/// names the call in it).
async fn call_command(
    ssh: &Ssh,
    command: &str,
    verb: &str,
    input: Vec<u8>,
) -> Result<Vec<u8>, TransferError> {
    let mut child = ssh
        .session()
        .raw_command(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .await
        .map_err(|e| remote_io(ssh, verb, &e))?;
    if let Some(mut stdin) = child.stdin().take() {
        stdin
            .write_all(&input)
            .await
            .map_err(|e| remote_io(ssh, verb, &e))?;
        stdin
            .shutdown()
            .await
            .map_err(|e| remote_io(ssh, verb, &e))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| remote_io(ssh, verb, &e))?;
    if !out.status.success() {
        return Err(remote_failed(ssh, verb, out.status.code(), &out.stderr));
    }
    Ok(out.stdout)
}

fn remote_io(ssh: &Ssh, verb: &str, e: &dyn std::fmt::Display) -> TransferError {
    TransferError::Remote(format!("{}: tree_sync.py {verb}: {e}", ssh.node))
}

/// The master's error: its `refused:` line is bad input (exit 2), anything else a failure.
fn remote_failed(ssh: &Ssh, verb: &str, code: Option<i32>, stderr: &[u8]) -> TransferError {
    let last = last_word(&String::from_utf8_lossy(stderr));
    match (code, last.strip_prefix("refused: ")) {
        (Some(2), Some(why)) => TransferError::Refused(format!("{}: {why}", ssh.node)),
        _ => TransferError::Remote(format!(
            "{}: tree_sync.py {verb} failed (exit {}): {last}",
            ssh.node,
            code.map_or("signal".into(), |c| c.to_string())
        )),
    }
}

/// A node program's last non-empty line of stderr (its `refused: ...` or `failed: ...`),
/// escaped and shortened for a message.
fn last_word(stderr: &str) -> String {
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    crate::input::shown_message(last.trim(), 300)
}

async fn manifest(ssh: &Ssh, root: &str, hashes: bool) -> Result<RemoteTree, TransferError> {
    let mut request = Vec::new();
    let mut r = Record::new(Kind::Root, root.as_bytes());
    r.mode = u32::from(hashes);
    r.encode(&mut request);
    let out = call(ssh, "manifest", request).await?;
    let mut rd = &out[..];
    let bad =
        |e: wire::WireError| TransferError::Remote(format!("{}: the manifest: {e}", ssh.node));
    let head = wire::read_record(&mut rd).map_err(bad)?;
    if head.kind != Kind::Root {
        return Err(TransferError::Remote(format!(
            "{}: the manifest does not start with its root",
            ssh.node
        )));
    }
    let (kind, other) = match head.mode {
        1 => (RootKind::Dir, false),
        2 => (RootKind::File, false),
        0 => (RootKind::Missing, false),
        _ => (RootKind::Missing, true),
    };
    let mut entries = Vec::new();
    loop {
        let r = wire::read_record(&mut rd).map_err(bad)?;
        if r.kind == Kind::End {
            break;
        }
        paths::check_relative(&r.path).map_err(|e| TransferError::Remote(e.0))?;
        entries.extend(Entry::from_record(r));
    }
    Ok(RemoteTree {
        kind,
        other,
        free: head.size,
        entries,
    })
}

fn local_has_zstd() -> bool {
    std::process::Command::new("zstd")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A sample of the files a push sends (up to 16 files, 64 KiB each), for the compression choice.
fn sample(root: &Path, actions: &[Action]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    for e in actions
        .iter()
        .filter_map(|a| match a {
            Action::File(e) => Some(e),
            _ => None,
        })
        .take(16)
    {
        let path = if e.path.is_empty() {
            root.to_path_buf()
        } else {
            root.join(std::ffi::OsStr::from_bytes(&e.path))
        };
        if let Ok(f) = std::fs::File::open(path) {
            let _ = f.take(1 << 16).read_to_end(&mut out);
        }
    }
    out
}

/// A bytes bar with the files' count in its message, ticking from the counters until `work` ends.
async fn with_progress<T>(
    progress: &Progress,
    what: &str,
    files: u64,
    bytes: u64,
    counters: &Counters,
    work: impl std::future::Future<Output = T>,
) -> T {
    let bar = progress.bytes_bar(what, bytes);
    let tick = async {
        loop {
            bar.set_position(counters.bytes.load(Ordering::Relaxed));
            bar.set_message(format!(
                "{}/{files} files",
                counters.files.load(Ordering::Relaxed)
            ));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let out = tokio::select! {
        out = work => out,
        () = tick => unreachable!("the ticker never ends"),
    };
    bar.finish_and_clear();
    out
}

/// A local tree being read for a push: checked at once (bad input before the cloud or a node
/// is asked anything), read on a thread of its own while the cluster is reached.
pub struct Source {
    root: PathBuf,
    kind: RootKind,
    entries: tokio::task::JoinHandle<Result<Vec<Entry>, TransferError>>,
}

impl Source {
    /// Checks the local path and the patterns, then starts reading the tree.
    pub fn read(local_root: &Path, opts: &Options) -> Result<Source, TransferError> {
        let kind = tree::root_kind(local_root)?;
        if kind == RootKind::Missing {
            return Err(TransferError::Refused(format!(
                "{}: no such file or folder",
                tree::shown_path(local_root)
            )));
        }
        let excludes = Excludes::new(&opts.excludes)?;
        let root = local_root.to_path_buf();
        let checksum = opts.checksum;
        let entries = tokio::task::spawn_blocking(move || {
            tree::scan(
                &root,
                &ScanOptions {
                    ignore_files: true,
                    excludes: &excludes,
                    hashes: checksum,
                },
            )
        });
        Ok(Source {
            root: local_root.to_path_buf(),
            kind,
            entries,
        })
    }
}

/// A local folder or file (being read by `source`) into `remote` on the master.
pub async fn push(
    ssh: &Ssh,
    source: Source,
    remote: &SharedPath,
    opts: &Options,
    progress: &Progress,
) -> Result<Summary, TransferError> {
    let started = Instant::now();
    let Source {
        root: local_root,
        kind,
        entries,
    } = source;
    let local_root = local_root.as_path();
    let (source, there) = tokio::join!(entries, manifest(ssh, remote.as_str(), opts.checksum));
    let source = source.map_err(|e| TransferError::Local(format!("reading the tree: {e}")))??;
    let there = there?;
    match (kind, there.kind, there.other) {
        (_, _, true) => {
            return Err(TransferError::Refused(format!(
                "{remote} exists and is neither a file nor a folder"
            )))
        }
        (RootKind::Dir, RootKind::File, _) => {
            return Err(TransferError::Refused(format!(
                "{remote} is a file on the cluster: a folder cannot replace it"
            )))
        }
        (RootKind::File, RootKind::Dir, _) => {
            return Err(TransferError::Refused(format!(
            "{remote} is a folder on the cluster: name the file's path in it (e.g. {remote}/{})",
            tree::shown_path(Path::new(local_root.file_name().unwrap_or_default()))
        )))
        }
        _ => {}
    }
    let dest = if kind == RootKind::Dir && there.kind == RootKind::Missing {
        Vec::new()
    } else {
        there.entries
    };
    let changes = diff::changes(&source, &dest, opts.delete, opts.checksum);
    // The room check: what will be written (a replaced file's old copy stays until the new
    // one is whole) against the free space where it lands.
    if changes.bytes > there.free {
        return Err(TransferError::Refused(format!(
            "no room: {} file(s), {:.1} MB to send, {:.1} MB free where {remote} lands; nothing was sent",
            changes.files,
            changes.bytes as f64 / 1e6,
            there.free as f64 / 1e6
        )));
    }
    let from = tree::shown_path(local_root);
    let mut summary = summary_of("pushed", from, remote.to_string(), &changes);
    if changes.is_empty() {
        summary.secs = started.elapsed().as_secs_f64();
        return Ok(summary);
    }
    let mut root_record = Record::new(Kind::Root, remote.as_str().as_bytes());
    root_record.mode = u32::from(kind == RootKind::File);
    let compress = !opts.no_compress && changes.bytes > 0 && {
        let root = local_root.to_path_buf();
        let actions = changes.actions.clone();
        tokio::task::spawn_blocking(move || {
            tree::entropy(&sample(&root, &actions)) < tree::COMPRESS_BELOW_BITS && local_has_zstd()
        })
        .await
        .unwrap_or(false)
    };
    summary.compressed = compress;
    let counters = Arc::new(Counters::default());
    // The stream's way out: a pipe straight into the SSH channel, or zstd's output.
    let (stdin_fd, writer, mut zstd): (OwnedFd, Box<dyn std::io::Write + Send>, _) = if compress {
        let mut z = std::process::Command::new("zstd")
            .args(["-q", "-c", "--adapt=min=1,max=12", "-T0"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| TransferError::Local(format!("cannot start zstd: {e}")))?;
        let (Some(input), Some(output)) = (z.stdin.take(), z.stdout.take()) else {
            return Err(TransferError::Local("zstd gave no pipes".into()));
        };
        (OwnedFd::from(output), Box::new(input), Some(z))
    } else {
        let (reader, writer) = std::io::pipe()
            .map_err(|e| TransferError::Local(format!("cannot make a pipe: {e}")))?;
        (OwnedFd::from(reader), Box::new(writer), None)
    };
    let command = if compress {
        format!(
            "bash -o pipefail -c {}",
            shell_quote(&format!("zstd -d -q -c | {}", tree_sync("receive")))
        )
    } else {
        tree_sync("receive")
    };
    let child = ssh
        .session()
        .raw_command(command)
        .stdin(Stdio::from(stdin_fd))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .await
        .map_err(|e| remote_io(ssh, "receive", &e))?;
    let producer = {
        let root = local_root.to_path_buf();
        let actions = changes.actions.clone();
        let counters = counters.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = std::io::BufWriter::with_capacity(1 << 20, writer);
            stream::write_stream(&mut out, &root, &root_record, &actions, &counters)
        })
    };
    let finished = with_progress(
        progress,
        "push",
        changes.files,
        changes.bytes,
        &counters,
        child.wait_with_output(),
    )
    .await
    .map_err(|e| remote_io(ssh, "receive", &e))?;
    let produced = producer
        .await
        .map_err(|e| TransferError::Local(format!("the sender: {e}")))?;
    if let Some(z) = zstd.as_mut() {
        let _ = z.wait();
    }
    // A refusal is the master's word; a stream cut short by a local error is ours (the master
    // only saw it end early); a pipe the master closed is the master's.
    let local_failure = match &produced {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Some(TransferError::Local(format!("reading the files: {e}")))
        }
        _ => None,
    };
    if !finished.status.success() {
        let remote = remote_failed(ssh, "receive", finished.status.code(), &finished.stderr);
        return Err(match local_failure {
            Some(local) if !remote.is_bad_input() => local,
            _ => remote,
        });
    }
    if let Some(local) = local_failure {
        return Err(local);
    }
    let notes = produced.map_err(|e| TransferError::Local(format!("reading the files: {e}")))?;
    let said = String::from_utf8_lossy(&finished.stdout);
    if !said.starts_with("ok ") {
        return Err(TransferError::Remote(format!(
            "{}: the receiver did not say it finished: {}",
            ssh.node,
            crate::input::shown_message(said.trim(), 200)
        )));
    }
    summary.files = counters.files.load(Ordering::Relaxed);
    summary.bytes = counters.bytes.load(Ordering::Relaxed);
    summary.vanished = notes.vanished.iter().map(|p| shown_bytes(p)).collect();
    summary.changed = notes.changed.iter().map(|p| shown_bytes(p)).collect();
    summary.secs = started.elapsed().as_secs_f64();
    Ok(summary)
}

fn summary_of(verb: &'static str, from: String, to: String, c: &Changes) -> Summary {
    Summary {
        verb,
        from,
        to,
        files: 0,
        bytes: 0,
        unchanged: c.unchanged,
        deleted: c.deleted,
        secs: 0.0,
        compressed: false,
        vanished: Vec::new(),
        changed: Vec::new(),
        kept_folders: c.kept_folders.iter().map(|p| shown_bytes(p)).collect(),
    }
}
