//! The two ends of a stream on this machine, both blocking (they run on a thread of their own
//! while the remote end runs over SSH): [`write_stream`] reads local files into records for
//! `push`, [`apply_stream`] writes the records `pull` receives into a local folder. A file
//! reaches its name only whole (written as `.hvd-part.*`, renamed once complete), and nothing
//! is written through a link: every folder on the way is checked to be one.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::diff::Action;
use super::paths::{check_relative, shown_bytes};
use super::tree::{local, shown_path, PART_PREFIX};
use super::wire::{self, Kind, Piece, Record};
use super::TransferError;

/// What has gone by so far, read by the progress bar.
#[derive(Debug, Default)]
pub struct Counters {
    pub files: AtomicU64,
    pub bytes: AtomicU64,
}

/// Files the sender could not send as they were asked for: said in the summary, not fatal.
#[derive(Debug, Default)]
pub struct Notes {
    /// Gone before their turn came.
    pub vanished: Vec<Vec<u8>>,
    /// Changed while they were read: sent, and sent again by the next push.
    pub changed: Vec<Vec<u8>>,
}

/// The local path of a name below `root` (the root itself for the empty name).
fn joined(root: &Path, rel: &[u8]) -> PathBuf {
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(OsStr::from_bytes(rel))
    }
}

fn mtime_ns(m: &std::fs::Metadata) -> i64 {
    m.mtime() * 1_000_000_000 + m.mtime_nsec()
}

/// Writes the stream of a push: the root's record, every action (files with their bodies),
/// the end. A file that vanished is left out; one that changed while read is sent as read
/// with the mtime it had before, so the next push sends it again.
pub fn write_stream(
    out: &mut impl Write,
    root: &Path,
    root_record: &Record,
    actions: &[Action],
    counters: &Counters,
) -> Result<Notes, std::io::Error> {
    let mut buf = Vec::with_capacity(4096);
    root_record.encode(&mut buf);
    out.write_all(&buf)?;
    let mut notes = Notes::default();
    let mut chunk = vec![0u8; wire::CHUNK];
    for action in actions {
        buf.clear();
        match action {
            Action::Delete(p) => Record::new(Kind::Delete, p).encode(&mut buf),
            Action::Dir(e) | Action::Link(e) => e.record().encode(&mut buf),
            Action::Attrs(e) => {
                let mut r = e.record();
                r.kind = Kind::Attrs;
                r.hash.clear();
                r.encode(&mut buf);
            }
            Action::File(e) => {
                let path = joined(root, &e.path);
                let mut f = match OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                {
                    Ok(f) => f,
                    Err(err)
                        if err.kind() == std::io::ErrorKind::NotFound
                            || err.raw_os_error() == Some(libc::ELOOP) =>
                    {
                        notes.vanished.push(e.path.clone());
                        continue;
                    }
                    Err(err) => return Err(err),
                };
                let before = f.metadata()?;
                let mut r = e.record();
                r.hash.clear();
                r.mode = before.permissions().mode() & 0o7777;
                r.size = before.len();
                r.mtime_ns = mtime_ns(&before);
                r.encode(&mut buf);
                out.write_all(&buf)?;
                loop {
                    let n = f.read(&mut chunk)?;
                    if n == 0 {
                        break;
                    }
                    out.write_all(&wire::chunk_header(n))?;
                    out.write_all(&chunk[..n])?;
                    counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
                let after = f.metadata()?;
                if after.len() != before.len() || mtime_ns(&after) != mtime_ns(&before) {
                    notes.changed.push(e.path.clone());
                }
                out.write_all(&wire::body_end(true, r.mtime_ns))?;
                counters.files.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        }
        out.write_all(&buf)?;
    }
    buf.clear();
    Record::end().encode(&mut buf);
    out.write_all(&buf)?;
    out.flush()?;
    Ok(notes)
}

/// A local destination of a pull: a folder (every name below it), or one file.
pub struct LocalDest {
    pub root: PathBuf,
    pub is_file: bool,
    /// Folders (relative names) already checked to be folders, not links.
    checked: HashSet<Vec<u8>>,
    parts: u64,
}

impl LocalDest {
    pub fn new(root: PathBuf, is_file: bool) -> LocalDest {
        LocalDest {
            root,
            is_file,
            checked: HashSet::new(),
            parts: 0,
        }
    }

    /// The folder holding a name and the name's own path; every folder on the way below the
    /// root is checked to be a folder (made when missing), never a link.
    fn parent(&mut self, rel: &[u8]) -> Result<(PathBuf, PathBuf), TransferError> {
        check_relative(rel).map_err(|e| TransferError::Remote(e.0))?;
        if rel.is_empty() {
            let holder = self
                .root
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            return Ok((holder, self.root.clone()));
        }
        if self.is_file {
            return Err(TransferError::Remote(format!(
                "`{}`: an entry below a file",
                shown_bytes(rel)
            )));
        }
        let parts: Vec<&[u8]> = rel.split(|b| *b == b'/').collect();
        let mut dir = self.root.clone();
        for i in 0..parts.len() - 1 {
            dir.push(OsStr::from_bytes(parts[i]));
            let key = parts[..=i].join(&b'/');
            if self.checked.contains(&key) {
                continue;
            }
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(TransferError::Remote(format!(
                        "{} is a link or a file here, not a folder: nothing is written through it",
                        shown_path(&dir)
                    )))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir(&dir).map_err(|e| local(&dir, "make the folder", e))?;
                }
                Err(e) => return Err(local(&dir, "read", e)),
            }
            self.checked.insert(key);
        }
        Ok((dir, joined(&self.root, rel)))
    }

    fn part(&mut self, holder: &Path) -> PathBuf {
        self.parts += 1;
        let mut name = PART_PREFIX.to_vec();
        name.extend_from_slice(format!("{}.{}", std::process::id(), self.parts).as_bytes());
        holder.join(OsStr::from_bytes(&name))
    }
}

fn system_time(ns: i64) -> SystemTime {
    let secs = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + secs
    } else {
        UNIX_EPOCH - secs
    }
}

fn refuse_folder(path: &Path) -> Result<(), TransferError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Err(TransferError::Refused(format!(
            "{} is a folder here: pull with --delete to replace it",
            shown_path(path)
        ))),
        _ => Ok(()),
    }
}

/// Deletes an entry (a folder with everything in it; a link itself, never what it names).
pub fn delete(dest: &mut LocalDest, rel: &[u8]) -> Result<(), TransferError> {
    let (_, path) = dest.parent(rel)?;
    let removed = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
        Ok(_) => std::fs::remove_file(&path),
        Err(_) => Ok(()),
    };
    removed.map_err(|e| local(&path, "delete", e))
}

/// Sets a file's mode and mtime (its content is already the same).
pub fn set_attrs(
    dest: &mut LocalDest,
    rel: &[u8],
    mode: u32,
    mtime: i64,
) -> Result<(), TransferError> {
    let (_, path) = dest.parent(rel)?;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| local(&path, "open", e))?;
    f.set_permissions(std::fs::Permissions::from_mode(mode & 0o1777))
        .and_then(|()| f.set_modified(system_time(mtime)))
        .map_err(|e| local(&path, "set the mode and time of", e))
}

/// Writes a pull's stream into `dest`: records until the end; returns the names the master
/// said vanished.
pub fn apply_stream(
    input: &mut impl Read,
    dest: &mut LocalDest,
    counters: &Counters,
) -> Result<Vec<Vec<u8>>, TransferError> {
    let wire_err = |e: wire::WireError| TransferError::Remote(format!("the master's stream: {e}"));
    let mut vanished = Vec::new();
    let mut chunk = Vec::with_capacity(wire::CHUNK);
    loop {
        let r = wire::read_record(input).map_err(wire_err)?;
        match r.kind {
            Kind::End => return Ok(vanished),
            Kind::Vanished => vanished.push(r.path),
            Kind::Dir => {
                let (_, path) = dest.parent(&r.path)?;
                match std::fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        std::fs::remove_file(&path).map_err(|e| local(&path, "replace", e))?;
                        std::fs::create_dir(&path).map_err(|e| local(&path, "make", e))?;
                    }
                    Err(_) => std::fs::create_dir(&path).map_err(|e| local(&path, "make", e))?,
                }
                // this machine's user keeps the right to write into what it fetched
                std::fs::set_permissions(
                    &path,
                    std::fs::Permissions::from_mode((r.mode & 0o1777) | 0o700),
                )
                .map_err(|e| local(&path, "set the mode of", e))?;
            }
            Kind::Link => {
                let (holder, path) = dest.parent(&r.path)?;
                refuse_folder(&path)?;
                let tmp = dest.part(&holder);
                std::os::unix::fs::symlink(OsStr::from_bytes(&r.link), &tmp)
                    .and_then(|()| std::fs::rename(&tmp, &path))
                    .map_err(|e| {
                        let _ = std::fs::remove_file(&tmp);
                        local(&path, "make the link", e)
                    })?;
            }
            Kind::File => {
                let (holder, path) = dest.parent(&r.path)?;
                let tmp = dest.part(&holder);
                let written = receive_file(input, &tmp, &path, r.mode, &mut chunk, counters);
                if written.is_err() {
                    let _ = std::fs::remove_file(&tmp);
                }
                if written? {
                    counters.files.fetch_add(1, Ordering::Relaxed);
                }
            }
            other => {
                return Err(TransferError::Remote(format!(
                    "the master's stream: a {other:?} record where entries were expected"
                )))
            }
        }
    }
}

/// One file's body into `tmp`, renamed to `path` once whole; `false` when the sender gave it up.
fn receive_file(
    input: &mut impl Read,
    tmp: &Path,
    path: &Path,
    mode: u32,
    chunk: &mut Vec<u8>,
    counters: &Counters,
) -> Result<bool, TransferError> {
    let wire_err = |e: wire::WireError| TransferError::Remote(format!("the master's stream: {e}"));
    let mut f: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(tmp)
        .map_err(|e| local(tmp, "write", e))?;
    loop {
        match wire::read_piece(input, chunk).map_err(wire_err)? {
            Piece::Chunk(n) => {
                f.write_all(&chunk[..n])
                    .map_err(|e| local(tmp, "write", e))?;
                counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Piece::GivenUp => {
                drop(f);
                let _ = std::fs::remove_file(tmp);
                return Ok(false);
            }
            Piece::Whole { mtime_ns } => {
                f.set_permissions(std::fs::Permissions::from_mode(mode & 0o1777))
                    .and_then(|()| f.set_modified(system_time(mtime_ns)))
                    .map_err(|e| local(tmp, "set the mode and time of", e))?;
                drop(f);
                refuse_folder(path)?;
                std::fs::rename(tmp, path).map_err(|e| local(path, "write", e))?;
                return Ok(true);
            }
        }
    }
}

/// Removes what an interrupted pull left (`.hvd-part.*`) below a folder, never following links.
pub fn sweep_parts(dir: &Path) -> Result<(), TransferError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(local(dir, "read", e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| local(dir, "read", e))?;
        let name = entry.file_name();
        let kind = entry
            .file_type()
            .map_err(|e| local(&entry.path(), "read", e))?;
        if name.as_bytes().starts_with(PART_PREFIX) && !kind.is_dir() {
            let _ = std::fs::remove_file(entry.path());
        } else if kind.is_dir() {
            sweep_parts(&entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
