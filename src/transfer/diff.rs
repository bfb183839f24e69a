//! What a transfer sends: the source tree's entries against the destination's, by size and
//! mtime (or content hash on request). Only new or changed files travel; deletions only when
//! asked. Pure: plain values in, plain values out.

use std::collections::BTreeMap;

use super::wire::{Kind, Record};

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    Dir,
    File,
    /// A symbolic link and its target (kept as a link, never followed).
    Link(Vec<u8>),
}

/// One entry of a tree: its name relative to the root (empty: the root itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: Vec<u8>,
    pub kind: EntryKind,
    /// Permission bits.
    pub mode: u32,
    pub size: u64,
    pub mtime_ns: i64,
    /// SHA-256 of the content, when hashes were asked for.
    pub hash: Option<Vec<u8>>,
}

impl Entry {
    /// The entry as a manifest or stream record (a file's body is not part of it).
    pub fn record(&self) -> Record {
        let mut r = Record::new(
            match self.kind {
                EntryKind::Dir => Kind::Dir,
                EntryKind::File => Kind::File,
                EntryKind::Link(_) => Kind::Link,
            },
            &self.path,
        );
        r.mode = self.mode;
        r.size = self.size;
        r.mtime_ns = self.mtime_ns;
        if let EntryKind::Link(target) = &self.kind {
            r.link = target.clone();
        }
        r.hash = self.hash.clone().unwrap_or_default();
        r
    }

    /// An entry from a manifest record; `None` for records that are not entries.
    pub fn from_record(r: Record) -> Option<Entry> {
        let kind = match r.kind {
            Kind::Dir => EntryKind::Dir,
            Kind::File => EntryKind::File,
            Kind::Link => EntryKind::Link(r.link),
            _ => return None,
        };
        Some(Entry {
            path: r.path,
            kind,
            mode: r.mode,
            size: r.size,
            mtime_ns: r.mtime_ns,
            hash: (!r.hash.is_empty()).then_some(r.hash),
        })
    }
}

/// One thing to do at the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Delete this entry (a folder with everything in it).
    Delete(Vec<u8>),
    /// Make the folder, or set its mode.
    Dir(Entry),
    Link(Entry),
    /// Send the file's content.
    File(Entry),
    /// The content is there: set mode and mtime only.
    Attrs(Entry),
}

/// A transfer's whole work, in the order it is done: deletions, then folders (a parent before
/// its children), then links and files by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub actions: Vec<Action>,
    /// Files to send and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Entries already the same at the destination.
    pub unchanged: u64,
    /// Entries deleted at the destination (top-most only: a folder counts once).
    pub deleted: u64,
    /// Folders at the destination where the source has a file or link: replaced only with
    /// `--delete`, otherwise left and named.
    pub kept_folders: Vec<Vec<u8>>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}

/// Whether two mtimes are the same: to the nanosecond, or to the second where one side keeps
/// whole seconds only (some file systems do).
fn same_mtime(a: i64, b: i64) -> bool {
    const NS: i64 = 1_000_000_000;
    a == b || ((a % NS == 0 || b % NS == 0) && a.div_euclid(NS) == b.div_euclid(NS))
}

/// What to do so that `dest` holds what `source` holds. `by_hash`: files are the same when
/// their hashes are (both sides hashed), not their size and mtime.
pub fn changes(source: &[Entry], dest: &[Entry], delete: bool, by_hash: bool) -> Changes {
    let there: BTreeMap<&[u8], &Entry> = dest.iter().map(|e| (e.path.as_slice(), e)).collect();
    let mut wanted: Vec<&Entry> = source.iter().collect();
    wanted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut out = Changes::default();
    let mut deletes: Vec<Vec<u8>> = Vec::new();
    let mut dirs = Vec::new();
    let mut rest = Vec::new();
    for e in wanted {
        let have = there.get(e.path.as_slice());
        match (&e.kind, have.map(|h| &h.kind)) {
            (EntryKind::Dir, Some(EntryKind::Dir)) => {
                // The root's own mode is left as it is at the destination.
                if have.is_some_and(|h| h.mode != e.mode) && !e.path.is_empty() {
                    dirs.push(Action::Dir(e.clone()));
                } else {
                    out.unchanged += 1;
                }
            }
            (EntryKind::Dir, _) => dirs.push(Action::Dir(e.clone())),
            (_, Some(EntryKind::Dir)) if !delete => {
                out.kept_folders.push(e.path.clone());
            }
            (_, Some(EntryKind::Dir)) => {
                deletes.push(e.path.clone());
                rest.push(content_action(e, &mut out));
            }
            (EntryKind::Link(target), Some(EntryKind::Link(had))) if target == had => {
                out.unchanged += 1
            }
            (EntryKind::Link(_), _) => rest.push(Action::Link(e.clone())),
            (EntryKind::File, Some(EntryKind::File)) => {
                let Some(h) = have else { continue };
                let same_content = if by_hash {
                    e.hash.is_some() && e.hash == h.hash
                } else {
                    e.size == h.size && same_mtime(e.mtime_ns, h.mtime_ns)
                };
                if !same_content {
                    rest.push(content_action(e, &mut out));
                } else if e.mode != h.mode || !same_mtime(e.mtime_ns, h.mtime_ns) {
                    rest.push(Action::Attrs(e.clone()));
                } else {
                    out.unchanged += 1;
                }
            }
            (EntryKind::File, _) => rest.push(content_action(e, &mut out)),
        }
    }
    if delete {
        let kept: std::collections::BTreeSet<&[u8]> =
            source.iter().map(|e| e.path.as_slice()).collect();
        deletes.extend(
            dest.iter()
                .map(|e| e.path.as_slice())
                .filter(|p| !p.is_empty() && !kept.contains(p))
                .map(<[u8]>::to_vec),
        );
    }
    let deletes = top_most(deletes);
    out.deleted = deletes.len() as u64;
    out.actions = deletes.into_iter().map(Action::Delete).collect();
    out.actions.extend(dirs);
    out.actions.extend(rest);
    out
}

/// The deletions sorted, each once, and only the top-most: a deleted folder takes its entries
/// with it.
pub fn top_most(mut deletes: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    deletes.sort();
    deletes.dedup();
    let mut top: Vec<Vec<u8>> = Vec::new();
    let mut tops: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    for p in deletes {
        let under = p
            .iter()
            .enumerate()
            .any(|(i, b)| *b == b'/' && tops.contains(&p[..i]));
        if !under {
            tops.insert(p.clone());
            top.push(p);
        }
    }
    top
}

fn content_action(e: &Entry, out: &mut Changes) -> Action {
    match e.kind {
        EntryKind::File => {
            out.files += 1;
            out.bytes += e.size;
            Action::File(e.clone())
        }
        _ => Action::Link(e.clone()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn file(path: &str, size: u64, mtime: i64) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            kind: EntryKind::File,
            mode: 0o644,
            size,
            mtime_ns: mtime,
            hash: None,
        }
    }

    pub(crate) fn dir(path: &str) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            kind: EntryKind::Dir,
            mode: 0o755,
            size: 0,
            mtime_ns: 1,
            hash: None,
        }
    }

    /// Each action as `x|d|l|f|a PATH`.
    pub(crate) fn paths(c: &Changes) -> Vec<String> {
        c.actions
            .iter()
            .map(|a| match a {
                Action::Delete(p) => format!("x {}", String::from_utf8_lossy(p)),
                Action::Dir(e) => format!("d {}", String::from_utf8_lossy(&e.path)),
                Action::Link(e) => format!("l {}", String::from_utf8_lossy(&e.path)),
                Action::File(e) => format!("f {}", String::from_utf8_lossy(&e.path)),
                Action::Attrs(e) => format!("a {}", String::from_utf8_lossy(&e.path)),
            })
            .collect()
    }

    #[test]
    fn a_second_push_of_the_same_tree_sends_nothing() {
        let tree = vec![dir("a"), file("a/x", 5, 10), file("b", 7, 20)];
        let c = changes(&tree, &tree, true, false);
        assert!(c.is_empty(), "{c:?}");
        assert_eq!(c.unchanged, 3);
    }

    #[test]
    fn only_new_and_changed_files_travel_parents_first() {
        let source = vec![
            file("z", 1, 1),
            file("new/deep", 3, 1),
            dir("new"),
            file("same", 2, 5),
            file("grown", 9, 5),
            file("touched", 2, 6),
        ];
        let dest = vec![
            file("same", 2, 5),
            file("grown", 8, 5),
            file("touched", 2, 5),
        ];
        let c = changes(&source, &dest, false, false);
        assert_eq!(
            paths(&c),
            ["d new", "f grown", "f new/deep", "f touched", "f z"]
        );
        assert_eq!((c.files, c.bytes, c.unchanged), (4, 9 + 3 + 2 + 1, 1));
    }

    #[test]
    fn deletions_only_when_asked_and_a_folder_once() {
        let source = vec![file("keep", 1, 1)];
        let dest = vec![
            file("keep", 1, 1),
            dir("old"),
            file("old-sibling", 1, 1),
            file("old/a", 1, 1),
            file("old/b", 1, 1),
            file("stale", 1, 1),
        ];
        assert!(changes(&source, &dest, false, false).is_empty());
        let c = changes(&source, &dest, true, false);
        assert_eq!(paths(&c), ["x old", "x old-sibling", "x stale"]);
        assert_eq!(c.deleted, 3);
    }

    #[test]
    fn a_folder_in_the_way_of_a_file_is_replaced_only_with_delete() {
        let source = vec![file("thing", 1, 1)];
        let dest = vec![dir("thing"), file("thing/inside", 1, 1)];
        let kept = changes(&source, &dest, false, false);
        assert!(kept.is_empty());
        assert_eq!(kept.kept_folders, vec![b"thing".to_vec()]);
        assert_eq!(
            paths(&changes(&source, &dest, true, false)),
            ["x thing", "f thing"]
        );
    }

    #[test]
    fn mode_or_mtime_alone_is_set_without_sending_the_content() {
        let mut moved = file("x", 4, 7);
        moved.mode = 0o755;
        let c = changes(&[moved], &[file("x", 4, 7)], false, false);
        assert_eq!(paths(&c), ["a x"]);
        assert_eq!(c.bytes, 0);
        // a file system with whole seconds only keeps 3 s for 3.5 s: the same file
        let c = changes(
            &[file("x", 4, 3_500_000_000)],
            &[file("x", 4, 3_000_000_000)],
            false,
            false,
        );
        assert!(c.is_empty());
    }

    #[test]
    fn by_hash_a_touched_file_is_not_sent_and_a_same_size_edit_is() {
        let with = |e: Entry, h: u8| Entry {
            hash: Some(vec![h; 32]),
            ..e
        };
        let source = vec![with(file("t", 4, 9), 1), with(file("e", 4, 5), 2)];
        let dest = vec![with(file("t", 4, 5), 1), with(file("e", 4, 5), 3)];
        assert_eq!(paths(&changes(&source, &dest, false, true)), ["f e", "a t"]);
        // by size and mtime the touched file travels and the edit is missed
        assert_eq!(paths(&changes(&source, &dest, false, false)), ["f t"]);
    }

    #[test]
    fn links_are_kept_as_links_and_sent_when_their_target_changed() {
        let link = |t: &str| Entry {
            kind: EntryKind::Link(t.as_bytes().to_vec()),
            ..file("l", 0, 1)
        };
        assert!(changes(&[link("a")], &[link("a")], false, false).is_empty());
        assert_eq!(
            paths(&changes(&[link("b")], &[link("a")], false, false)),
            ["l l"]
        );
        assert_eq!(
            paths(&changes(&[link("b")], &[file("l", 1, 1)], false, false)),
            ["l l"]
        );
    }
}
