//! This machine's side of a tree: reading a local folder into entries (`.gitignore`,
//! `.hvdignore` and `--exclude` honoured, links kept as links, nothing followed out of it), and
//! hashing files when asked.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use sha2::{Digest, Sha256};

use super::diff::{Entry, EntryKind};
use super::paths::shown_bytes;
use super::TransferError;

/// The name of the ignore file read beside `.gitignore` in every folder of a pushed tree.
pub const IGNORE_FILE: &str = ".hvdignore";

/// The prefix of a file still being written (renamed to its name once whole).
pub const PART_PREFIX: &[u8] = b".hvd-part.";

/// `--exclude` patterns, in `.gitignore`'s grammar, matched on names relative to the root.
#[derive(Clone)]
pub struct Excludes(Gitignore);

impl Excludes {
    pub fn new(patterns: &[String]) -> Result<Excludes, TransferError> {
        let mut b = GitignoreBuilder::new("");
        for p in patterns {
            b.add_line(None, p).map_err(|e| {
                TransferError::Refused(format!("--exclude `{}`: {e}", crate::input::shown(p)))
            })?;
        }
        b.build()
            .map(Excludes)
            .map_err(|e| TransferError::Refused(format!("--exclude: {e}")))
    }

    /// Whether a relative name (or a folder above it) is excluded.
    pub fn excludes(&self, rel: &[u8], is_dir: bool) -> bool {
        !rel.is_empty()
            && self
                .0
                .matched_path_or_any_parents(Path::new(OsStr::from_bytes(rel)), is_dir)
                .is_ignore()
    }
}

/// What a local root is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootKind {
    Missing,
    Dir,
    File,
}

/// The kind of a local root, following a link the user named (a loop is refused).
pub fn root_kind(root: &Path) -> Result<RootKind, TransferError> {
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => Ok(RootKind::Dir),
        Ok(m) if m.is_file() => Ok(RootKind::File),
        Ok(_) => Err(TransferError::Refused(format!(
            "{}: not a file or a folder",
            shown_path(root)
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // a dangling link is not missing: say what it is
            match std::fs::symlink_metadata(root) {
                Ok(_) => Err(TransferError::Refused(format!(
                    "{}: a link to nothing",
                    shown_path(root)
                ))),
                Err(_) => Ok(RootKind::Missing),
            }
        }
        Err(e) => Err(TransferError::Refused(format!("{}: {e}", shown_path(root)))),
    }
}

pub fn shown_path(p: &Path) -> String {
    shown_bytes(p.as_os_str().as_bytes())
}

/// How a local tree is read.
pub struct ScanOptions<'a> {
    /// Read `.gitignore`, `.git/info/exclude` and `.hvdignore` (a pushed tree: yes; a pull's
    /// destination: no, every file there counts).
    pub ignore_files: bool,
    pub excludes: &'a Excludes,
    pub hashes: bool,
}

/// Every entry of the tree at `root` (a folder or a file; a file is one entry with an empty
/// name), sorted by name. Links are entries of their own, never followed.
pub fn scan(root: &Path, opts: &ScanOptions) -> Result<Vec<Entry>, TransferError> {
    let meta = std::fs::metadata(root).map_err(|e| local(root, "read", e))?;
    if meta.is_file() {
        return Ok(vec![entry(root, Vec::new(), &meta, opts.hashes)?]);
    }
    let mut walk = ignore::WalkBuilder::new(root);
    walk.standard_filters(false)
        .hidden(false)
        .git_ignore(opts.ignore_files)
        .git_exclude(opts.ignore_files)
        .require_git(false)
        .parents(opts.ignore_files)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.as_bytes().cmp(b.as_bytes()));
    if opts.ignore_files {
        walk.add_custom_ignore_filename(IGNORE_FILE);
    }
    let excludes = opts.excludes.clone();
    let top = root.to_path_buf();
    walk.filter_entry(move |e| {
        let rel = e.path().strip_prefix(&top).unwrap_or(e.path());
        let name = e.file_name().as_bytes();
        let is_dir = e.file_type().is_some_and(|t| t.is_dir());
        !name.starts_with(PART_PREFIX) && !excludes.excludes(rel.as_os_str().as_bytes(), is_dir)
    });
    let mut out = Vec::new();
    for item in walk.build() {
        let e = item.map_err(|e| TransferError::Refused(format!("cannot read the tree: {e}")))?;
        let rel = e
            .path()
            .strip_prefix(root)
            .map_err(|_| {
                TransferError::Refused(format!("{}: outside the tree", shown_path(e.path())))
            })?
            .as_os_str()
            .as_bytes()
            .to_vec();
        if rel.is_empty() {
            continue;
        }
        let meta = match std::fs::symlink_metadata(e.path()) {
            Ok(m) => m,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(local(e.path(), "read", err)),
        };
        if meta.is_dir() || meta.is_file() || meta.file_type().is_symlink() {
            out.push(entry(e.path(), rel, &meta, opts.hashes)?);
        }
        // sockets, fifos and devices are not part of a tree we copy
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn entry(
    path: &Path,
    rel: Vec<u8>,
    meta: &std::fs::Metadata,
    hashes: bool,
) -> Result<Entry, TransferError> {
    let kind = if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).map_err(|e| local(path, "read the link", e))?;
        EntryKind::Link(target.as_os_str().as_bytes().to_vec())
    } else if meta.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::File
    };
    let hash = if hashes && kind == EntryKind::File {
        Some(hash_file(path)?)
    } else {
        None
    };
    Ok(Entry {
        path: rel,
        mode: meta.permissions().mode() & 0o7777,
        size: if kind == EntryKind::File {
            meta.len()
        } else {
            0
        },
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        kind,
        hash,
    })
}

/// SHA-256 of a file's content.
pub fn hash_file(path: &Path) -> Result<Vec<u8>, TransferError> {
    let mut f = std::fs::File::open(path).map_err(|e| local(path, "read", e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(|e| local(path, "read", e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().to_vec())
}

/// A local file error, naming the file.
pub fn local(path: &Path, what: &str, e: std::io::Error) -> TransferError {
    TransferError::Local(format!("cannot {what} {}: {e}", shown_path(path)))
}

/// Bits per byte of a sample (8 for random bytes): whether compressing can pay.
pub fn entropy(sample: &[u8]) -> f64 {
    if sample.is_empty() {
        return 8.0;
    }
    let mut counts = [0u64; 256];
    for b in sample {
        counts[usize::from(*b)] += 1;
    }
    let n = sample.len() as f64;
    counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = *c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// Below this many bits per byte a sample is worth compressing (text, code, CSV, sparse
/// arrays: 2-6; JPEG, PNG, archives, random weights: 7.9 and up).
pub const COMPRESS_BELOW_BITS: f64 = 7.2;

#[cfg(test)]
mod tests {
    use super::*;

    fn names(entries: &[Entry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect()
    }

    #[test]
    fn ignore_files_and_excludes_leave_their_entries_out_and_links_stay_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tree");
        std::fs::create_dir_all(root.join("src/cache")).unwrap();
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::write(root.join(".gitignore"), "*.pyc\n/data/\n").unwrap();
        std::fs::write(root.join("src/.hvdignore"), "cache/\n").unwrap();
        std::fs::write(root.join("src/train.py"), "print(1)").unwrap();
        std::fs::write(root.join("src/train.pyc"), "x").unwrap();
        std::fs::write(root.join("src/cache/big"), "x").unwrap();
        std::fs::write(root.join("data/big"), "x").unwrap();
        std::fs::write(root.join("notes.tmp"), "x").unwrap();
        std::fs::write(root.join(".hvd-part.1.2"), "half").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        std::os::unix::fs::symlink(".", root.join("loop")).unwrap();
        let excludes = Excludes::new(&["*.tmp".into()]).unwrap();
        let opts = ScanOptions {
            ignore_files: true,
            excludes: &excludes,
            hashes: false,
        };
        let entries = scan(&root, &opts).unwrap();
        assert_eq!(
            names(&entries),
            [
                ".gitignore",
                "etc-link",
                "loop",
                "src",
                "src/.hvdignore",
                "src/train.py"
            ]
        );
        assert_eq!(entries[1].kind, EntryKind::Link(b"/etc".to_vec()));
        // a pull's destination counts every file but half ones
        let none = Excludes::new(&[]).unwrap();
        let all = scan(
            &root,
            &ScanOptions {
                ignore_files: false,
                excludes: &none,
                hashes: true,
            },
        )
        .unwrap();
        assert_eq!(all.len(), 12, "{:?}", names(&all));
        let train = all.iter().find(|e| e.path == b"src/train.py").unwrap();
        assert_eq!(train.hash.as_ref().map(Vec::len), Some(32));
    }

    #[test]
    fn a_root_is_a_file_a_folder_missing_or_refused_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("f"), "x").unwrap();
        std::os::unix::fs::symlink("self", p.join("self")).unwrap();
        std::os::unix::fs::symlink("nowhere", p.join("dangling")).unwrap();
        assert_eq!(root_kind(p).unwrap(), RootKind::Dir);
        assert_eq!(root_kind(&p.join("f")).unwrap(), RootKind::File);
        assert_eq!(root_kind(&p.join("none")).unwrap(), RootKind::Missing);
        for bad in ["self", "dangling"] {
            let e = root_kind(&p.join(bad)).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn entropy_tells_text_from_noise() {
        let text = b"epoch 1 loss 0.25 accuracy 0.91\n".repeat(100);
        assert!(entropy(&text) < 5.0);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let noise: Vec<u8> = (0..65536)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        assert!(entropy(&noise) > COMPRESS_BELOW_BITS, "{}", entropy(&noise));
        assert_eq!(entropy(&[]), 8.0);
    }
}
