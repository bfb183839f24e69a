//! `stage`: a folder or file below /shared copied onto every node's own disk (the flavor's
//! ephemeral disk where it has one, else the root disk), where training reads it at local disk
//! speed: `/staged/NAME` in the containers. What Horovod's tutorials do with one `scp -r` per
//! worker, at the time of one copy.
//!
//! Every node's manifest of its copy first (with the free space there), against the source's on
//! the master: only the nodes that lack something take part, each checked for room before a
//! byte moves. What any of them lacks travels once, as one stream (`tree_sync.py stage` on the
//! master, the records `receive` reads), down the same pipelined tree as the image
//! (`image_fetch.py`: each node passes the bytes on to its children while it writes its own
//! copy), over plain TCP inside the cluster's own network. A file reaches its name only whole;
//! an interrupted stage leaves no half file, and the same command again sends only what is
//! missing.

use super::*;
use crate::bootstrap::{fanout, NodeSession, NODE_DIR};
use futures::future::try_join_all;
use std::collections::BTreeMap;

/// Where a node keeps its staged copies: below its data disk's mount point (a plain folder on
/// the root disk where the flavor has no ephemeral disk). `tree_sync.py` names it too.
pub const STAGED_ON_NODE: &str = "/var/lib/hvd-cluster/data/staged";
/// Where the containers see them (`container.apply.sh` binds it).
pub const STAGED_IN_CONTAINER: &str = "/staged";
/// The port a node's relay listens on inside the cluster (the image's is 12346).
pub const STAGE_PORT: u16 = 12347;

/// Where a copy of `source` lands on a node: the staged folder, under the source's own name.
pub fn staged_root(source: &SharedPath) -> String {
    format!("{STAGED_ON_NODE}/{}", source.name())
}

/// Every action any of the nodes needs, once, in the order `receive` applies them
/// (deletions top-most first, then folders parent first, then links and files by name); a
/// file's content travels wherever one node lacks it (a node that had it whole writes it
/// again). Files and bytes count what travels. Pure.
pub fn union(all: &[&Changes]) -> Changes {
    let mut deletes = Vec::new();
    let mut dirs: BTreeMap<Vec<u8>, Action> = BTreeMap::new();
    let mut rest: BTreeMap<Vec<u8>, Action> = BTreeMap::new();
    for c in all {
        for a in &c.actions {
            match a {
                Action::Delete(p) => deletes.push(p.clone()),
                Action::Dir(e) => {
                    dirs.insert(e.path.clone(), a.clone());
                }
                Action::File(e) => {
                    rest.insert(e.path.clone(), a.clone());
                }
                Action::Link(e) | Action::Attrs(e) => {
                    rest.entry(e.path.clone()).or_insert_with(|| a.clone());
                }
            }
        }
    }
    let mut out = Changes::default();
    let deletes = diff::top_most(deletes);
    out.deleted = deletes.len() as u64;
    out.actions = deletes.into_iter().map(Action::Delete).collect();
    out.actions.extend(dirs.into_values());
    for a in rest.into_values() {
        if let Action::File(e) = &a {
            out.files += 1;
            out.bytes += e.size;
        }
        out.actions.push(a);
    }
    out
}

/// The nodes (name, free bytes where the copy lands) that cannot hold `bytes` more, each shown
/// with its free space. Every node that takes part writes all of them. Pure.
fn short_of_room(nodes: &[(&str, u64)], bytes: u64) -> Vec<String> {
    nodes
        .iter()
        .filter(|(_, free)| bytes > *free)
        .map(|(name, free)| format!("{name} ({:.1} MB free)", *free as f64 / 1e6))
        .collect()
}

/// The master's request: the source, where it lands, then what travels (a file by its name:
/// the master reads it).
fn request(source: &SharedPath, dest: &str, is_file: bool, actions: &[Action]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut root = Record::new(Kind::Root, source.as_str().as_bytes());
    root.mode = u32::from(is_file);
    root.encode(&mut out);
    Record::new(Kind::Root, dest.as_bytes()).encode(&mut out);
    for a in actions {
        let mut r = match a {
            Action::Delete(p) => Record::new(Kind::Delete, p),
            Action::Dir(e) | Action::Link(e) | Action::File(e) => e.record(),
            Action::Attrs(e) => {
                let mut r = e.record();
                r.kind = Kind::Attrs;
                r
            }
        };
        r.hash.clear();
        r.encode(&mut out);
    }
    Record::end().encode(&mut out);
    out
}

/// The `sudo bash` words that run `script` with pipefail.
fn bash(script: &str) -> String {
    format!("sudo -n bash -o pipefail -c {}", shell_quote(script))
}

/// `image_fetch.py` as a relay: reading from `parent` (`-`: standard input), passing every
/// chunk on to `children` (listening on `bind`), writing the stream to its standard output.
fn relay(parent: &str, bind: &str, children: &[String]) -> String {
    let mut words = vec![
        format!("python3 {NODE_DIR}/image_fetch.py"),
        shell_quote(parent),
        STAGE_PORT.to_string(),
        "-".into(),
        "/run/hvd-cluster-stage.report".into(),
    ];
    if !children.is_empty() {
        words.push(shell_quote(bind));
        words.extend(children.iter().map(|c| shell_quote(c)));
    }
    words.join(" ")
}

fn receive() -> String {
    format!("python3 {NODE_DIR}/tree_sync.py receive")
}

/// One node's copy as its manifest tells it.
struct NodeCopy<'a> {
    node: &'a NodeSession,
    changes: Changes,
    free: u64,
}

/// `source` (below /shared on the master) onto every node's own disk. `nodes`: the master
/// first, then the workers.
pub async fn stage(
    nodes: &[NodeSession],
    source: &SharedPath,
    opts: &Options,
    progress: &Progress,
) -> Result<Summary, TransferError> {
    let started = Instant::now();
    let Some(master) = nodes.first() else {
        return Err(TransferError::Remote("the cluster has no nodes".into()));
    };
    let dest = staged_root(source);
    let spinner = progress.spinner("stage");
    spinner.set_message(format!("reading {source} and every node's copy"));
    let (there, copies) = tokio::join!(
        manifest(&master.ssh, source.as_str(), opts.checksum),
        try_join_all(nodes.iter().map(|n| manifest(&n.ssh, &dest, opts.checksum)))
    );
    let there = there?;
    let copies = copies?;
    let is_file = match (there.kind, there.other) {
        (RootKind::Dir, false) => false,
        (RootKind::File, false) => true,
        _ => {
            return Err(TransferError::Missing(format!(
                "{source}: no such file or folder on the cluster; `hvd-cluster push` puts it there first"
            )))
        }
    };
    let mut needs = Vec::new();
    for (node, copy) in nodes.iter().zip(copies) {
        // A copy of the other kind is not replaced (receive refuses a file over a folder).
        let same_kind = match copy.kind {
            RootKind::Missing => true,
            RootKind::File => is_file,
            RootKind::Dir => !is_file,
        };
        if copy.other || !same_kind {
            return Err(TransferError::Refused(format!(
                "{}: its staged {} is not a {}; remove it from {STAGED_ON_NODE} first",
                node.node.name,
                source.name(),
                if is_file { "file" } else { "folder" }
            )));
        }
        let dest_entries = copy.entries;
        let changes = diff::changes(&there.entries, &dest_entries, opts.delete, opts.checksum);
        if let Some(p) = changes.kept_folders.first() {
            return Err(TransferError::Refused(format!(
                "{}: {} is a folder in its staged copy where {source} has a file; --delete replaces it",
                node.node.name,
                shown_bytes(p)
            )));
        }
        needs.push(NodeCopy {
            node,
            changes,
            free: copy.free,
        });
    }
    let receiving: Vec<&NodeCopy> = needs.iter().filter(|n| !n.changes.is_empty()).collect();
    let all = union(
        &receiving
            .iter()
            .map(|n| &n.changes)
            .collect::<Vec<&Changes>>(),
    );
    // The room check on every node that takes part, before a byte moves.
    let short = short_of_room(
        &receiving
            .iter()
            .map(|n| (n.node.node.name.as_str(), n.free))
            .collect::<Vec<_>>(),
        all.bytes,
    );
    if !short.is_empty() {
        return Err(TransferError::Refused(format!(
            "no room: {} file(s), {:.1} MB to stage, more than {} hold{} at {STAGED_ON_NODE}; nothing was sent",
            all.files,
            all.bytes as f64 / 1e6,
            short.join(", "),
            if short.len() == 1 { "s" } else { "" }
        )));
    }
    let to = format!(
        "{STAGED_IN_CONTAINER}/{} on {} node(s) ({} of them had it all)",
        source.name(),
        nodes.len(),
        nodes.len() - receiving.len()
    );
    let mut summary = summary_of("staged", source.to_string(), to, &all);
    // Entries of the source that no node lacked.
    let travelling = all
        .actions
        .iter()
        .filter(|a| !matches!(a, Action::Delete(_)))
        .count();
    summary.unchanged = there.entries.len().saturating_sub(travelling) as u64;
    if receiving.is_empty() {
        spinner.finish_and_clear();
        summary.secs = started.elapsed().as_secs_f64();
        return Ok(summary);
    }
    spinner.set_message(format!(
        "{} file(s), {:.1} MB to {} node(s) down a tree from the master",
        all.files,
        all.bytes as f64 / 1e6,
        receiving.len()
    ));
    // The scripts each node runs, written where the image's fan-out writes its own.
    try_join_all(
        nodes
            .iter()
            .filter(|n| {
                n.node.name == master.node.name
                    || receiving.iter().any(|r| r.node.node.name == n.node.name)
            })
            .map(|n| async move {
                n.ssh
                    .write_file(
                        &format!("{NODE_DIR}/image_fetch.py"),
                        crate::templates::IMAGE_FETCH.as_bytes(),
                        0o755,
                    )
                    .await?;
                n.ssh
                    .write_file(
                        &format!("{NODE_DIR}/tree_sync.py"),
                        crate::templates::TREE_SYNC.as_bytes(),
                        0o755,
                    )
                    .await
            }),
    )
    .await?;
    let master_receives = receiving
        .iter()
        .any(|r| r.node.node.name == master.node.name);
    let workers: Vec<&NodeSession> = receiving
        .iter()
        .map(|r| r.node)
        .filter(|n| n.node.name != master.node.name)
        .collect();
    let address = |i: usize| workers[i].host.address().to_string();
    let places = fanout::tree(workers.len(), fanout::DEGREE);
    let master_children: Vec<String> = fanout::master_children(workers.len(), fanout::DEGREE)
        .into_iter()
        .map(address)
        .collect();
    let master_ip = master.host.address().to_string();
    let mut master_script = format!("python3 {NODE_DIR}/tree_sync.py stage");
    if !master_children.is_empty() {
        master_script = format!(
            "{master_script} | {}",
            relay("-", &master_ip, &master_children)
        );
    }
    master_script = if master_receives {
        format!("{master_script} | {}", receive())
    } else {
        format!("{master_script} > /dev/null")
    };
    let input = request(source, &dest, is_file, &all.actions);
    let master_run =
        async { call_command(&master.ssh, &bash(&master_script), "stage", input).await };
    let worker_runs = try_join_all(workers.iter().zip(&places).map(|(w, place)| {
        let parent = place.parent.map_or_else(|| master_ip.clone(), address);
        let children: Vec<String> = place.children.iter().map(|&c| address(c)).collect();
        let script = format!(
            "{} | {}",
            relay(&parent, &w.host.address().to_string(), &children),
            receive()
        );
        async move { call_command(&w.ssh, &bash(&script), "receive", Vec::new()).await }
    }));
    let (master_out, worker_outs) = tokio::join!(master_run, worker_runs);
    let master_out = master_out?;
    let worker_outs = worker_outs?;
    spinner.finish_and_clear();
    // Each receiving node's own account: the files and bytes it wrote.
    let mut accounts: Vec<(String, Vec<u8>)> = Vec::new();
    if master_receives {
        accounts.push((master.node.name.clone(), master_out));
    }
    accounts.extend(workers.iter().map(|w| w.node.name.clone()).zip(worker_outs));
    for (name, out) in &accounts {
        let text = String::from_utf8_lossy(out);
        let files = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("files="))
            .and_then(|n| n.parse::<u64>().ok());
        if files.is_none_or(|f| f > all.files) {
            return Err(TransferError::Remote(format!(
                "{name}: the staged copy's receiver said {:?}",
                crate::input::shown_message(text.trim(), 120)
            )));
        }
    }
    summary.files = all.files;
    summary.bytes = all.bytes;
    summary.secs = started.elapsed().as_secs_f64();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::diff::changes;
    use crate::transfer::diff::tests::{dir, file, paths as shown};

    #[test]
    fn what_any_node_lacks_travels_once_in_receive_order() {
        let source = vec![
            dir("a"),
            file("a/1", 10, 5),
            file("a/2", 20, 5),
            dir("b"),
            file("b/3", 30, 5),
        ];
        // one node has it all, one lacks a/2, one has an old b/3 and nothing else of b
        let whole = changes(&source, &source, false, false);
        assert!(whole.is_empty());
        let lacks_one = changes(
            &source,
            &[dir("a"), file("a/1", 10, 5), dir("b"), file("b/3", 30, 5)],
            false,
            false,
        );
        let old = changes(
            &source,
            &[
                dir("a"),
                file("a/1", 10, 5),
                file("a/2", 20, 5),
                dir("b"),
                file("b/3", 29, 4),
            ],
            false,
            false,
        );
        let all = union(&[&lacks_one, &old]);
        assert_eq!(shown(&all), ["f a/2", "f b/3"]);
        assert_eq!((all.files, all.bytes), (2, 50));
        // a node with nothing: folders first, parents before children, then every file
        let empty = changes(&source, &[], false, false);
        let all = union(&[&lacks_one, &empty]);
        assert_eq!(shown(&all), ["d a", "d b", "f a/1", "f a/2", "f b/3"]);
        assert_eq!((all.files, all.bytes), (3, 60));
    }

    #[test]
    fn a_file_travels_where_another_node_needs_only_its_mode() {
        let source = vec![file("x", 10, 5)];
        let mut chmod = file("x", 10, 5);
        chmod.mode = 0o600;
        let attrs = changes(&source, &[chmod], false, false);
        assert_eq!(shown(&attrs), ["a x"]);
        let missing = changes(&source, &[], false, false);
        assert_eq!(shown(&union(&[&attrs, &missing])), ["f x"]);
        assert_eq!(shown(&union(&[&missing, &attrs])), ["f x"]);
        assert_eq!(shown(&union(&[&attrs])), ["a x"]);
    }

    #[test]
    fn deletions_are_top_most_across_nodes() {
        let source = vec![dir("keep")];
        let one = changes(
            &source,
            &[dir("keep"), dir("old"), file("old/f", 1, 1)],
            true,
            false,
        );
        let two = changes(&source, &[dir("keep"), file("old/f", 1, 1)], true, false);
        let all = union(&[&one, &two]);
        assert_eq!(shown(&all), ["x old"]);
        assert_eq!(all.deleted, 1);
    }

    #[test]
    fn the_request_names_source_and_copy_then_what_travels() {
        let source = SharedPath::parse("/shared/data set").unwrap();
        let dest = staged_root(&source);
        assert_eq!(dest, "/var/lib/hvd-cluster/data/staged/data set");
        let mut e = file("a/1", 10, 5);
        e.hash = Some(vec![1; 32]);
        let bytes = request(
            &source,
            &dest,
            false,
            &[Action::File(e), Action::Delete(b"z".to_vec())],
        );
        let mut rd = &bytes[..];
        let kinds: Vec<(Kind, Vec<u8>, usize)> = std::iter::from_fn(|| {
            let r = wire::read_record(&mut rd).ok()?;
            Some((r.kind, r.path, r.hash.len()))
        })
        .collect();
        assert_eq!(
            kinds,
            [
                (Kind::Root, b"/shared/data set".to_vec(), 0),
                (Kind::Root, dest.as_bytes().to_vec(), 0),
                (Kind::File, b"a/1".to_vec(), 0),
                (Kind::Delete, b"z".to_vec(), 0),
                (Kind::End, Vec::new(), 0),
            ]
        );
    }

    #[test]
    fn every_container_sees_the_staged_copies() {
        let r = crate::render::Renderer::new().unwrap();
        let hosts: Vec<crate::render::HostSlots> = Vec::new();
        for runtime in ["image", "tool"] {
            for role in ["master", "worker"] {
                let values = serde_json::json!({"role": role, "gpus": 0, "config_hash": "abc",
                    "ssh_port": 12345, "image": "img:1", "hosts": hosts, "runtime": runtime,
                    "kit_dir": "/opt/k"});
                let script = r.render("container.apply.sh", &values).unwrap();
                assert!(
                    script.contains(&format!("-v {STAGED_ON_NODE}:{STAGED_IN_CONTAINER} ")),
                    "{runtime} {role}: {script}"
                );
                assert!(script.contains(&format!("install -d -m 755 {STAGED_ON_NODE}\n")));
            }
        }
        assert!(crate::templates::TREE_SYNC.contains(&format!("STAGED = b\"{STAGED_ON_NODE}\"\n")));
    }

    #[test]
    fn every_node_that_takes_part_is_checked_for_room() {
        let nodes = [("m", 5_000_000), ("w1", 4_999_999), ("w2", 9_000_000)];
        assert_eq!(short_of_room(&nodes, 5_000_000), ["w1 (5.0 MB free)"]);
        assert!(short_of_room(&nodes, 4_000_000).is_empty());
        assert_eq!(short_of_room(&nodes, 9_000_001).len(), 3);
    }

    #[test]
    fn relays_quote_every_address() {
        assert_eq!(
            relay("-", "10.0.0.5", &["10.0.0.6".into(), "10.0.0.7".into()]),
            "python3 /etc/hvd-cluster/image_fetch.py '-' 12347 - /run/hvd-cluster-stage.report '10.0.0.5' '10.0.0.6' '10.0.0.7'"
        );
        assert_eq!(
            relay("10.0.0.5", "10.0.0.6", &[]),
            "python3 /etc/hvd-cluster/image_fetch.py '10.0.0.5' 12347 - /run/hvd-cluster-stage.report"
        );
    }
}
