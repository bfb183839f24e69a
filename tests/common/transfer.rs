//! `push` and `pull` on a running cluster, riding a cluster a test already made: a
//! tree with names people really make (spaces, a line break, Latin-1 bytes, an executable, a
//! link pointing out of the tree, ignored files) goes to /shared and is read on a worker
//! through NFS; a second push sends nothing, a changed file alone travels; a push killed with
//! SIGKILL in the middle of a file leaves no half file and the same command finishes it; the
//! tree comes back identical with `pull`; bad paths are refused in one line with exit 2.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use super::TestCluster;

/// A tree as comparable values: name -> (what, mode, content or link target, mtime in ns).
type Snapshot = BTreeMap<Vec<u8>, (char, u32, Vec<u8>, i64)>;

/// Every entry below `root`, links not followed.
pub fn snapshot(root: &Path) -> Snapshot {
    fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec();
            let m = std::fs::symlink_metadata(&path).unwrap();
            let mode = m.permissions().mode() & 0o7777;
            if m.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, ('l', 0, target.as_os_str().as_bytes().to_vec(), 0));
            } else if m.is_dir() {
                out.insert(rel, ('d', mode, Vec::new(), 0));
                walk(root, &path, out);
            } else {
                let mtime = m.mtime() * 1_000_000_000 + m.mtime_nsec();
                out.insert(rel, ('f', mode, std::fs::read(&path).unwrap(), mtime));
            }
        }
    }
    let mut out = Snapshot::new();
    walk(root, root, &mut out);
    out
}

fn at(root: &Path, name: &[u8]) -> std::path::PathBuf {
    root.join(OsStr::from_bytes(name))
}

/// Bytes no compressor shrinks (a JPEG's, a checkpoint's).
fn noise(len: usize, mut x: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The tree: 120 small files in 4 folders, hostile names, a link out, ignored files, and
/// `big` bytes of noise in one file (the one a SIGKILL lands in).
fn make_tree(root: &Path, big: usize) {
    for d in 0..4 {
        let dir = root.join(format!("class {d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..30 {
            std::fs::write(
                dir.join(format!("img_{i:03}.jpg")),
                noise(2000 + i * 37, (d * 100 + i + 1) as u64),
            )
            .unwrap();
        }
    }
    std::fs::write(at(root, b"line\nbreak.txt"), "a name with a line break").unwrap();
    std::fs::write(at(root, b"latin-\xe9t\xe9.csv"), "epoch,loss\n1,0.5\n").unwrap();
    std::fs::write(root.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("../../etc/passwd", root.join("out-link")).unwrap();
    std::fs::write(root.join(".gitignore"), "*.pyc\n").unwrap();
    std::fs::write(root.join("cache.pyc"), "ignored").unwrap();
    std::fs::write(root.join(".hvdignore"), "scratch/\n").unwrap();
    std::fs::create_dir_all(root.join("scratch")).unwrap();
    std::fs::write(root.join("scratch/tmp"), "ignored").unwrap();
    std::fs::write(root.join("zz-big.bin"), noise(big, 42)).unwrap();
}

/// The tree as it should arrive: without what the ignore files leave out.
fn sent_part(mut s: Snapshot) -> Snapshot {
    s.retain(|k, _| k != b"cache.pyc" && !k.starts_with(b"scratch"));
    s
}

fn refused(c: &TestCluster, args: &[&str], says: &str) {
    let out = c.hvd(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    let last = err.trim().lines().last().unwrap_or("");
    assert!(
        last.starts_with("error: ") && last.contains(says),
        "{args:?}: {err}"
    );
}

fn summary(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn push_and_pull_on_a_running_cluster(c: &TestCluster, worker: &str) {
    let profile = c.profile.as_str();
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("dataset");
    std::fs::create_dir_all(&tree).unwrap();
    make_tree(&tree, 96 << 20);
    let tree_arg = tree.to_str().unwrap();

    // Bad input: one line, exit 2, nothing sent.
    refused(
        c,
        &["push", profile, tree_arg, "/etc/x"],
        "only paths below /shared",
    );
    refused(
        c,
        &["push", profile, tree_arg, "/shared/../etc"],
        "`.` and `..` are not allowed",
    );
    refused(
        c,
        &["push", profile, "/nonexistent-hvd-dir"],
        "no such file or folder",
    );
    refused(
        c,
        &["pull", profile, "/shared/nothing-here-hvd"],
        "no such file or folder on the cluster",
    );
    refused(c, &["pull", profile, "/shared"], "not /shared itself");

    // A push killed (SIGKILL) while the big file travels: no half file under its name, and
    // the same command again finishes without sending again what arrived.
    let master = format!("{}-master", c.name);
    let mut killed = c
        .command(&["push", profile, tree_arg, "/shared/data set"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The kill comes once the push has read 24 MB of this machine's files (its own count in
    // /proc): the big file (96 MB: a bigger one only cost the suite time), the
    // last sent, is then on its way and cannot be whole.
    let started = Instant::now();
    let io = format!("/proc/{}/io", killed.id());
    let mid_file = loop {
        let read: u64 = std::fs::read_to_string(&io)
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("rchar: ")?.trim().parse().ok())
            })
            .unwrap_or(0);
        if read > 24 << 20 {
            break true;
        }
        if started.elapsed() > Duration::from_secs(120) || killed.try_wait().unwrap().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let _ = killed.kill();
    let _ = killed.wait();
    assert!(mid_file, "the push was killed while the big file travelled");
    let ls = std::process::Command::new("docker")
        .args(["exec", &master, "ls", "-a", "/shared/data set"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&ls.stdout);
    assert!(
        !listing.lines().any(|l| l == "zz-big.bin"),
        "no half file: {listing}"
    );
    let resumed = summary(&c.hvd(&["push", profile, tree_arg, "/shared/data set"]));
    assert!(resumed.starts_with("pushed "), "{resumed}");
    // the 120 images went before the big file: none travels again
    let sent: u32 = resumed["pushed ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(sent < 120, "only what was missing travels: {resumed}");
    let leftover = std::process::Command::new("docker")
        .args([
            "exec",
            &master,
            "sh",
            "-c",
            "find /shared -name '.hvd-part.*' | wc -l",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&leftover.stdout).trim(),
        "0",
        "no part file left"
    );

    // Unchanged: nothing travels. One changed file: it alone.
    let again = summary(&c.hvd(&["push", profile, tree_arg, "/shared/data set"]));
    assert!(again.starts_with("pushed 0 file(s), 0.0 MB"), "{again}");
    std::fs::write(tree.join("class 1/img_007.jpg"), "edited").unwrap();
    let one = summary(&c.hvd(&["push", profile, tree_arg, "/shared/data set"]));
    assert!(one.starts_with("pushed 1 file(s)"), "{one}");

    // A worker reads it through /shared (NFS), names and all.
    let seen = c.on_node(worker, &["cat", "'/shared/data set/class 1/img_007.jpg'"]);
    assert_eq!(seen, "edited");

    // Onto every node's own disk (`stage`): in every container at /staged, the same bytes and
    // names as /shared; a second stage sends nothing, a changed file alone travels.
    refused(
        c,
        &["stage", profile, "/shared/nothing-here-hvd"],
        "no such file or folder on the cluster",
    );
    let staged = summary(&c.hvd(&["stage", profile, "/shared/data set"]));
    assert!(
        staged.starts_with("staged ") && staged.contains("(0 of them had it all)"),
        "{staged}"
    );
    let sums = |node: &str, root: &str| {
        c.on_node(
            node,
            &[&format!(
                "sudo docker exec hvd sh -c \"cd '{root}/data set' && find . -type f -print0 | sort -z | xargs -0 sha256sum\""
            )],
        )
    };
    let on_shared = sums("master", "/shared");
    assert!(on_shared.contains("zz-big.bin"), "{on_shared}");
    for node in ["master", worker] {
        assert_eq!(sums(node, "/staged"), on_shared, "{node}'s staged copy");
    }
    let none = summary(&c.hvd(&["stage", profile, "/shared/data set"]));
    assert!(none.starts_with("staged 0 file(s)"), "{none}");
    std::fs::write(tree.join("class 1/img_008.jpg"), "edited too").unwrap();
    summary(&c.hvd(&["push", profile, tree_arg, "/shared/data set"]));
    let one = summary(&c.hvd(&["stage", profile, "/shared/data set"]));
    assert!(one.starts_with("staged 1 file(s)"), "{one}");
    let seen = c.on_node(
        worker,
        &["sudo docker exec hvd cat '/staged/data set/class 1/img_008.jpg'"],
    );
    assert_eq!(seen, "edited too");

    // Back again, identical: names, bytes, modes, mtimes, the link as a link.
    let back = t.path().join("back");
    let pulled = summary(&c.hvd(&["pull", profile, "/shared/data set", back.to_str().unwrap()]));
    assert!(pulled.starts_with("pulled "), "{pulled}");
    assert_eq!(snapshot(&back), sent_part(snapshot(&tree)));
    let twice = summary(&c.hvd(&["pull", profile, "/shared/data set", back.to_str().unwrap()]));
    assert!(twice.starts_with("pulled 0 file(s)"), "{twice}");

    // --delete: what the source lost goes at the destination, and only then.
    std::fs::remove_dir_all(tree.join("class 3")).unwrap();
    let kept = summary(&c.hvd(&["push", profile, tree_arg, "/shared/data set"]));
    assert!(!kept.contains("deleted"), "{kept}");
    let deleted = summary(&c.hvd(&["push", profile, tree_arg, "/shared/data set", "--delete"]));
    assert!(deleted.contains("1 deleted"), "{deleted}");
    let mirrored = summary(&c.hvd(&[
        "pull",
        profile,
        "/shared/data set",
        back.to_str().unwrap(),
        "--delete",
    ]));
    assert!(mirrored.contains("1 deleted"), "{mirrored}");
    assert_eq!(snapshot(&back), sent_part(snapshot(&tree)));
    let gone = summary(&c.hvd(&["stage", profile, "/shared/data set", "--delete"]));
    assert!(gone.contains("1 deleted"), "{gone}");
    assert_eq!(sums(worker, "/staged"), sums("master", "/shared"));

    // Text compresses: it travels through zstd both ways, and comes back the same.
    let logs = t.path().join("train-logs");
    std::fs::create_dir_all(&logs).unwrap();
    for i in 0..8 {
        let text: String = (0..20_000)
            .map(|s| format!("step {s} loss 0.{:04}\n", (s * 7919 + i) % 10_000))
            .collect();
        std::fs::write(logs.join(format!("run-{i}.log")), text).unwrap();
    }
    let up = summary(&c.hvd(&["push", profile, logs.to_str().unwrap()]));
    assert!(up.contains(", zstd)"), "{up}");
    let logs_back = t.path().join("logs-back");
    let down = summary(&c.hvd(&[
        "pull",
        profile,
        "/shared/train-logs",
        logs_back.to_str().unwrap(),
    ]));
    assert!(down.contains(", zstd)"), "{down}");
    assert_eq!(snapshot(&logs_back), snapshot(&logs));

    // One file each way, to a folder that exists.
    let file = summary(&c.hvd(&[
        "pull",
        profile,
        "/shared/data set/run.sh",
        t.path().to_str().unwrap(),
    ]));
    assert!(file.starts_with("pulled 1 file(s)"), "{file}");
    assert_eq!(
        std::fs::read(t.path().join("run.sh")).unwrap(),
        b"#!/bin/sh\necho hi\n"
    );
    let _ = c.on_node(
        "master",
        &[
            "sudo",
            "rm",
            "-rf",
            "'/shared/data set'",
            "/shared/train-logs",
        ],
    );
    for node in ["master", worker] {
        let _ = c.on_node(
            node,
            &[
                "sudo",
                "rm",
                "-rf",
                "'/var/lib/hvd-cluster/data/staged/data set'",
            ],
        );
    }
}
