//! Both ends of a transfer, for real, without a cluster: this machine's [`write_stream`] into
//! the master's own `tree_sync.py` (the shipped text, its `/shared` pointed at a temporary
//! folder: the one line a test changes), and `tree_sync.py send` into [`apply_stream`]. Names
//! with spaces, line breaks and bytes that are not UTF-8; an interrupted stream; hostile
//! streams both ways.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::*;
use crate::transfer::diff::{changes, Entry, EntryKind};
use crate::transfer::tree::{scan, Excludes, ScanOptions};
use crate::transfer::wire::{self, Kind, Record};

/// The node's program with `/shared` at `shared` and its staged copies at `staged`.
fn program_at(shared: &Path, staged: &Path) -> String {
    let mut text = crate::templates::TREE_SYNC.to_string();
    for (line, at) in [
        ("SHARED = b\"/shared\"", shared),
        ("STAGED = b\"/var/lib/hvd-cluster/data/staged\"", staged),
    ] {
        assert!(
            text.contains(line),
            "tree_sync.py names its bases in one line each"
        );
        let name = line.split(' ').next().unwrap();
        text = text.replace(
            line,
            &format!("{name} = {:?}.encode()", at.to_str().unwrap()),
        );
    }
    text
}

/// Runs tree_sync.py VERB with `input`: (exit code, stdout, stderr).
fn node(shared: &Path, verb: &str, input: &[u8]) -> (i32, Vec<u8>, String) {
    node_at(shared, &shared.with_file_name("staged"), verb, input)
}

/// The same with the node's staged copies at `staged`.
fn node_at(shared: &Path, staged: &Path, verb: &str, input: &[u8]) -> (i32, Vec<u8>, String) {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(program_at(shared, staged))
        .arg(verb)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut stdin = child.stdin.take().unwrap();
    // the node may refuse before reading everything: a broken pipe is its answer, not ours
    let _ = stdin.write_all(input);
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn root_record(path: &Path, mode: u32) -> Record {
    let mut r = Record::new(Kind::Root, path.as_os_str().as_bytes());
    r.mode = mode;
    r
}

fn all(root: &Path) -> Vec<Entry> {
    let none = Excludes::new(&[]).unwrap();
    scan(
        root,
        &ScanOptions {
            ignore_files: false,
            excludes: &none,
            hashes: true,
        },
    )
    .unwrap()
}

/// A tree as comparable values: name -> (kind, mode, size, mtime, hash).
type Snapshot = BTreeMap<Vec<u8>, (EntryKind, u32, u64, i64, Option<Vec<u8>>)>;

fn snapshot(root: &Path) -> Snapshot {
    all(root)
        .into_iter()
        .map(|e| {
            // a link's own mtime and mode are not carried
            let (mode, mtime) = match e.kind {
                EntryKind::Link(_) => (0, 0),
                EntryKind::Dir => (e.mode, 0),
                EntryKind::File => (e.mode, e.mtime_ns),
            };
            (e.path, (e.kind, mode, e.size, mtime, e.hash))
        })
        .collect()
}

/// A tree with names people and programs really make.
fn hostile_tree(root: &Path) {
    let p = |name: &[u8]| root.join(std::ffi::OsStr::from_bytes(name));
    std::fs::create_dir_all(p(b"sub dir/deeper")).unwrap();
    std::fs::create_dir_all(p(b"line\nbreak")).unwrap();
    std::fs::write(p(b"a b.txt"), "spaces").unwrap();
    std::fs::write(p(b"line\nbreak/in\tside"), "tab").unwrap();
    std::fs::write(p(b"latin-\xe9t\xe9.csv"), "not utf-8").unwrap();
    std::fs::write(p(b"empty"), "").unwrap();
    std::fs::write(p(b"sub dir/deeper/run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(
        p(b"sub dir/deeper/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    // three chunks and a bit
    let big: Vec<u8> = (0..(3 * wire::CHUNK + 17))
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    std::fs::write(p(b"sub dir/big.bin"), big).unwrap();
    std::os::unix::fs::symlink("../../etc/passwd", p(b"sub dir/escape")).unwrap();
    std::os::unix::fs::symlink("a b.txt", p(b"inside-link")).unwrap();
}

/// A temporary folder with `local` (the hostile tree) and an empty `shared` in it.
fn local_and_shared() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let (local, shared) = (t.path().join("local"), t.path().join("shared"));
    std::fs::create_dir_all(&local).unwrap();
    std::fs::create_dir_all(&shared).unwrap();
    hostile_tree(&local);
    (t, local, shared)
}

/// The stream a push of `local` into `dest` (below shared) sends, against `there`.
fn push_stream(local: &Path, dest: &Path, there: &[Entry], delete: bool) -> Vec<u8> {
    let c = changes(&all(local), there, delete, false);
    let mut out = Vec::new();
    write_stream(
        &mut out,
        local,
        &root_record(dest, 0),
        &c.actions,
        &Counters::default(),
    )
    .unwrap();
    out
}

fn manifest_of(shared: &Path, dest: &Path) -> Vec<Entry> {
    let mut req = Vec::new();
    root_record(dest, 0).encode(&mut req);
    let (code, out, err) = node(shared, "manifest", &req);
    assert_eq!(code, 0, "{err}");
    let mut rd = &out[..];
    assert_eq!(wire::read_record(&mut rd).unwrap().kind, Kind::Root);
    let mut entries = Vec::new();
    loop {
        let r = wire::read_record(&mut rd).unwrap();
        if r.kind == Kind::End {
            return entries;
        }
        entries.extend(Entry::from_record(r));
    }
}

#[test]
fn a_pushed_tree_arrives_whole_with_its_names_modes_times_and_links_and_a_second_push_sends_nothing(
) {
    let (_t, local, shared) = local_and_shared();
    let dest = shared.join("data set");
    let (code, out, err) = node(&shared, "receive", &push_stream(&local, &dest, &[], false));
    assert_eq!(code, 0, "{err}");
    assert!(
        String::from_utf8_lossy(&out).starts_with("ok files=6 "),
        "{out:?}"
    );
    assert_eq!(snapshot(&dest), snapshot(&local));
    assert_eq!(
        std::fs::read_link(dest.join("sub dir/escape")).unwrap(),
        Path::new("../../etc/passwd"),
        "a link is kept as a link, not followed"
    );
    // the manifest reads the same tree back: nothing to send the second time
    let there = manifest_of(&shared, &dest);
    let again = changes(&all(&local), &there, true, false);
    assert!(again.is_empty(), "{again:?}");
    // one changed file is all that travels; --delete takes what the source lost
    std::fs::write(local.join("a b.txt"), "changed!").unwrap();
    std::fs::remove_dir_all(local.join("line\nbreak")).unwrap();
    let next = changes(&all(&local), &there, true, false);
    assert_eq!((next.files, next.deleted), (1, 1));
    let (code, _, err) = node(
        &shared,
        "receive",
        &push_stream(&local, &dest, &there, true),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(snapshot(&dest), snapshot(&local));
}

#[test]
fn an_interrupted_push_leaves_no_half_file_and_the_next_one_sends_only_what_is_missing() {
    let (_t, local, shared) = local_and_shared();
    let dest = shared.join("d");
    let full = push_stream(&local, &dest, &[], false);
    // cut in the middle of big.bin's body (the largest file: its chunks are most of the stream)
    let cut = full.len() / 2;
    let (code, _, err) = node(&shared, "receive", &full[..cut]);
    assert_eq!(code, 3, "a stream that ends early fails: {err}");
    let arrived = snapshot(&dest);
    assert!(
        !arrived.contains_key(b"sub dir/big.bin".as_slice()),
        "no half file under its name"
    );
    let parts: Vec<_> = all(&dest)
        .into_iter()
        .filter(|e| e.path.windows(10).any(|w| w == b".hvd-part."))
        .collect();
    assert!(parts.is_empty(), "{parts:?}");
    // what arrived before the cut is whole and is not sent again
    let there = manifest_of(&shared, &dest);
    let rest = changes(&all(&local), &there, false, false);
    assert_eq!(
        rest.files, 2,
        "big.bin and run.sh come after the cut: {rest:?}"
    );
    let (code, _, err) = node(
        &shared,
        "receive",
        &push_stream(&local, &dest, &there, false),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(snapshot(&dest), snapshot(&local));
}

#[test]
fn the_node_refuses_roots_outside_shared_names_that_climb_and_links_in_the_way() {
    let t = tempfile::tempdir().unwrap();
    let (shared, outside) = (t.path().join("shared"), t.path().join("outside"));
    std::fs::create_dir_all(shared.join("d")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, shared.join("d/planted")).unwrap();
    std::os::unix::fs::symlink(&outside, shared.join("planted-root")).unwrap();
    let stream = |root: &Path, path: &[u8]| {
        let mut s = Vec::new();
        root_record(root, 0).encode(&mut s);
        let mut f = Record::new(Kind::File, path);
        f.mode = 0o644;
        f.encode(&mut s);
        s.extend_from_slice(&wire::chunk_header(4));
        s.extend_from_slice(b"evil");
        s.extend_from_slice(&wire::body_end(true, 0));
        Record::end().encode(&mut s);
        s
    };
    let cases: [(&Path, &[u8]); 5] = [
        (&outside, b"x"),
        (&shared, b"x"),
        (&shared.join("d/../../outside"), b"x"),
        (&shared.join("d"), b"../../outside/x"),
        (&shared.join("d"), b"planted/x"),
    ];
    for (root, path) in cases {
        let (code, _, err) = node(&shared, "receive", &stream(root, path));
        assert_eq!(code, 2, "{root:?} {path:?}: {err}");
        assert!(
            err.starts_with("refused: ") && err.trim().lines().count() == 1,
            "{err}"
        );
    }
    let (code, _, err) = node(
        &shared,
        "receive",
        &stream(&shared.join("planted-root/sub"), b"x"),
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing landed outside"
    );
}

fn pull_into(
    shared: &Path,
    remote: &Path,
    wanted: &[Entry],
    local: &Path,
) -> Result<Vec<Vec<u8>>, TransferError> {
    let mut req = Vec::new();
    root_record(remote, 0).encode(&mut req);
    for e in wanted {
        Record::new(e.record().kind, &e.path).encode(&mut req);
    }
    Record::end().encode(&mut req);
    let (code, out, err) = node(shared, "send", &req);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out[0], b'P', "no zstd asked for: plain");
    let mut dest = LocalDest::new(local.to_path_buf(), false);
    std::fs::create_dir_all(local).unwrap();
    apply_stream(&mut &out[1..], &mut dest, &Counters::default())
}

#[test]
fn a_pulled_tree_comes_back_identical_and_an_entry_gone_meanwhile_is_said() {
    let t = tempfile::tempdir().unwrap();
    let shared = t.path().join("shared");
    let remote = shared.join("results");
    std::fs::create_dir_all(&remote).unwrap();
    hostile_tree(&remote);
    let mut wanted = all(&remote);
    let mut gone = wanted[0].clone();
    gone.path = b"deleted meanwhile".to_vec();
    wanted.push(gone);
    let local = t.path().join("here");
    let vanished = pull_into(&shared, &remote, &wanted, &local).unwrap();
    assert_eq!(vanished, vec![b"deleted meanwhile".to_vec()]);
    assert_eq!(snapshot(&local), snapshot(&remote));
}

#[test]
fn a_hostile_master_cannot_write_outside_the_pulled_folder() {
    let t = tempfile::tempdir().unwrap();
    let (local, outside) = (t.path().join("here"), t.path().join("outside"));
    std::fs::create_dir_all(&local).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let file = |path: &[u8]| {
        let mut s = Vec::new();
        Record::new(Kind::File, path).encode(&mut s);
        s.extend_from_slice(&wire::chunk_header(4));
        s.extend_from_slice(b"evil");
        s.extend_from_slice(&wire::body_end(true, 0));
        s
    };
    // a link to outside, then a file through it
    let mut through_link = Vec::new();
    let mut link = Record::new(Kind::Link, b"a");
    link.link = outside.as_os_str().as_bytes().to_vec();
    link.encode(&mut through_link);
    through_link.extend(file(b"a/passwd"));
    Record::end().encode(&mut through_link);
    let mut climbing = file(b"../outside/x");
    Record::end().encode(&mut climbing);
    let mut absolute = file(outside.join("y").as_os_str().as_bytes());
    Record::end().encode(&mut absolute);
    for stream in [through_link, climbing, absolute] {
        let mut dest = LocalDest::new(local.clone(), false);
        let e = apply_stream(&mut &stream[..], &mut dest, &Counters::default()).unwrap_err();
        assert!(!e.to_string().contains('\n'), "{e}");
    }
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing landed outside"
    );
    // a truncated stream is an error, and leaves no half file
    let mut cut = file(b"half");
    cut.truncate(cut.len() - 6);
    let mut dest = LocalDest::new(local.clone(), false);
    assert!(apply_stream(&mut &cut[..], &mut dest, &Counters::default()).is_err());
    let left: Vec<_> = std::fs::read_dir(&local)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.iter()
            .all(|n| n != "half" && !n.as_bytes().starts_with(PART_PREFIX)),
        "{left:?}"
    );
}

/// `stage` for real on this machine: the master's `tree_sync.py stage` into its relay
/// (`image_fetch.py` reading standard input), which passes the stream to a child's
/// `image_fetch.py` over TCP on 127.0.0.1 while its own `receive` writes the master's copy.
/// On a cluster every node's copy has the same path; here the child's stream is kept and
/// received below a base of its own (its root record, the one thing that names a path, set
/// to that base). Both copies are the source: names, modes, times and links.
#[test]
fn a_staged_tree_reaches_the_master_and_a_child_through_the_relay() {
    use crate::transfer::diff::Action;
    use crate::transfer::stage::union;
    let (t, local, shared) = local_and_shared();
    let source = shared.join("data set");
    let (code, _, err) = node(
        &shared,
        "receive",
        &push_stream(&local, &source, &[], false),
    );
    assert_eq!(code, 0, "{err}");
    let (master_staged, child_staged) = (t.path().join("m-staged"), t.path().join("c-staged"));
    let dest = master_staged.join("data set");
    // what both copies lack: everything
    let all = union(&[&changes(&manifest_of(&shared, &source), &[], false, false)]);
    let mut req = Vec::new();
    root_record(&source, 0).encode(&mut req);
    root_record(&dest, 0).encode(&mut req);
    for a in &all.actions {
        let (Action::Dir(e) | Action::Link(e) | Action::File(e)) = a else {
            panic!("nothing else travels to empty copies: {a:?}");
        };
        let mut r = e.record();
        r.hash.clear();
        r.encode(&mut req);
    }
    Record::end().encode(&mut req);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let dir = t.path().display().to_string();
    // the child first: its relay connects to the master's as soon as that listens
    let child = Command::new("bash")
        .args([
            "-c",
            &format!("set -o pipefail; python3 -c \"$FETCH\" 127.0.0.1 {port} - '{dir}/c.report' > '{dir}/c.stream'"),
        ])
        .env("FETCH", crate::templates::IMAGE_FETCH)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut master = Command::new("bash")
        .args([
            "-c",
            &format!("set -o pipefail; python3 -c \"$NODE\" stage | python3 -c \"$FETCH\" - {port} - '{dir}/m.report' 127.0.0.1 127.0.0.1 | python3 -c \"$NODE\" receive"),
        ])
        .env("FETCH", crate::templates::IMAGE_FETCH)
        .env("NODE", program_at(&shared, &master_staged))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    master.stdin.take().unwrap().write_all(&req).unwrap();
    let out = master.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("ok files=6 "),
        "{out:?}"
    );
    let fetched = child.wait_with_output().unwrap();
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert_eq!(snapshot(&dest), snapshot(&local), "the master's copy");
    // the child's stream, received below its own base
    let stream = std::fs::read(t.path().join("c.stream")).unwrap();
    let mut rd = &stream[..];
    let head = wire::read_record(&mut rd).unwrap();
    assert_eq!(
        (head.kind, head.path.as_slice()),
        (Kind::Root, dest.as_os_str().as_bytes())
    );
    let mut again = Vec::new();
    root_record(&child_staged.join("data set"), 0).encode(&mut again);
    again.extend_from_slice(rd);
    let (code, _, err) = node_at(&shared, &child_staged, "receive", &again);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        snapshot(&child_staged.join("data set")),
        snapshot(&local),
        "the child's copy"
    );
}

/// A stage request that names anything but a source below /shared and a copy below the
/// staged folder is refused, nothing written.
#[test]
fn a_stage_request_outside_its_two_places_is_refused() {
    let (t, _local, shared) = local_and_shared();
    let staged = t.path().join("staged");
    std::fs::create_dir_all(shared.join("src")).unwrap();
    for (from, to) in [
        (t.path().join("elsewhere"), staged.join("x")),
        (shared.join("src"), shared.join("copy")),
        (shared.join("src"), t.path().join("x")),
        (staged.join("y"), staged.join("x")),
    ] {
        let mut req = Vec::new();
        root_record(&from, 0).encode(&mut req);
        root_record(&to, 0).encode(&mut req);
        Record::end().encode(&mut req);
        let (code, out, err) = node_at(&shared, &staged, "stage", &req);
        assert_eq!(code, 2, "{from:?} -> {to:?}: {err}");
        assert!(err.starts_with("refused: "), "{err}");
        assert!(out.is_empty(), "nothing sent: {out:?}");
    }
    let mut climb = Vec::new();
    root_record(&staged.join(".."), 0).encode(&mut climb);
    Record::end().encode(&mut climb);
    let (code, _, err) = node_at(&shared, &staged, "receive", &climb);
    assert_eq!(code, 2, "{err}");
    assert!(!t.path().join("x").exists());
}
