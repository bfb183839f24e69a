//! The "data disk" step's scripts (templates/node/data_disk.{apply,check}.sh, rendered by the
//! library as `up` renders them) on a real block device: a loop device over a sparse file of
//! the flavor's size, formatted `ephemeral0` as Nova formats an ephemeral disk, seen by a stock
//! Debian 12 (hvd-cluster/debian:bookworm: debootstrap's minbase, whose util-linux and
//! e2fsprogs are what a cloud image has) in a container given that device and the right to
//! mount, with no network. Nothing of ours is in the container but the scripts. A stand-in for a guest in one
//! way: no systemd and no Docker run there (the script's stop and start of Docker are skipped,
//! as on any node without systemd), so Docker's data is files we lay out.
//! - a stock node: the disk becomes hvd-data, /var/lib/docker and /var/tmp bound from it, the
//!   check passes, nothing copied;
//! - a node booted from a bake: Docker's data on its root disk (owners, modes and
//!   links kept) is copied onto the blank disk before the bind, so Docker finds it there; the
//!   root disk keeps its copy, and the blank disk a `start` brings gets it again;
//! - `bake.sh prepare` on such a node is refused (exit 3, one line): a snapshot of the root disk
//!   leaves Docker's data on the ephemeral disk out;
//! - `bake.sh prepare` on a master (the disk here a stand-in for its root disk, under one of
//!   the paths it sets aside): a credential, /shared's export and /shared's fstab line are
//!   gone while the snapshot reads the disk, and the credential's bytes are not in the disk's
//!   freed blocks either (read raw, past the page cache); a journal larger than the tmpfs the
//!   bake mounts first goes aside whole (the tmpfs grows to it); `restore` puts all of them back.
//!
//! Needs Docker and the images (`scripts/build-images`).

use std::process::{Command, Output};

use hvd_cluster::render::Renderer;
use hvd_cluster::templates;
use serde_json::json;

const IMAGE: &str = "hvd-cluster/debian:bookworm";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A loop device on this machine over a sparse file of 1 GiB, detached when dropped.
struct LoopDisk {
    dev: String,
    _file: tempfile::NamedTempFile,
}

impl LoopDisk {
    fn new() -> LoopDisk {
        let file = tempfile::NamedTempFile::new().expect("a disk file");
        file.as_file().set_len(1 << 30).expect("size the disk file");
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(file.path())
            .output()
            .expect("losetup");
        assert!(out.status.success(), "losetup: {}", text(&out.stderr));
        LoopDisk {
            dev: text(&out.stdout).trim().to_string(),
            _file: file,
        }
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// Runs `body` as root in a container of the stock image given the loop device (`$dev`) and
/// what mount needs (not `--privileged`, which this machine's Docker refuses), with the
/// rendered scripts in /w.
fn in_guest(body: &str) -> Output {
    let disk = LoopDisk::new();
    let r = Renderer::new().expect("templates");
    let values = json!({ "ephemeral_gb": 1 });
    let work = tempfile::tempdir().expect("a work dir");
    let write = |name: &str, content: &str| {
        std::fs::write(work.path().join(name), content).expect("write a script");
    };
    write(
        "apply.sh",
        &r.script(templates::DATA_DISK_APPLY.name, &values)
            .expect("apply"),
    );
    write(
        "check.sh",
        &r.script(templates::DATA_DISK_CHECK.name, &values)
            .expect("check"),
    );
    write("bake.sh", templates::BAKE_SCRIPT);
    let script = format!(
        r#"set -eu
cleanup() {{
  for m in /var/tmp /var/lib/docker /var/lib/hvd-cluster/data /run/hvd-bake /var/lib/hvd-cluster; do
    umount "$m" 2>/dev/null || true
  done
}}
trap cleanup EXIT
blank_ephemeral() {{ mkfs.ext4 -q -F -L ephemeral0 "$dev"; }}
{body}
"#
    );
    let mount = format!("{}:/w", work.path().display());
    let device = format!("--device={}", disk.dev);
    let dev = format!("dev={}", disk.dev);
    Command::new("docker")
        .args([
            "run",
            "--rm",
            "--cap-add=SYS_ADMIN",
            "--security-opt=apparmor=unconfined",
            "--security-opt=seccomp=unconfined",
            &device,
            "-e",
            &dev,
            "--network",
            "none",
            "-v",
            &mount,
            IMAGE,
            "bash",
            "-c",
            &script,
        ])
        .output()
        .expect("docker run")
}

fn require_image() {
    let ok = Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(ok, "{IMAGE} is not built: run scripts/build-images");
}

#[test]
fn a_stock_node_gets_its_data_disk_and_copies_nothing() {
    require_image();
    let out = in_guest(
        r#"blank_ephemeral
sh /w/check.sh && { echo "the check passed before apply"; exit 1; }
sh /w/apply.sh
sh /w/check.sh
echo "docker: $(findmnt -n -o SOURCE /var/lib/docker)"
echo "tmp: $(findmnt -n -o SOURCE /var/tmp)"
echo "label: $(blkid -o value -s LABEL "$dev")"
echo "files: $(ls -A /var/lib/docker | wc -l)"
grep -c hvd-data /etc/fstab
"#,
    );
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(said.contains("label: hvd-data"), "{said}");
    assert!(
        said.contains("docker: /dev/loop") && said.contains("[/docker]"),
        "{said}"
    );
    assert!(said.contains("[/tmp]"), "{said}");
    assert!(said.contains("files: 0"), "nothing copied: {said}");
    assert!(!said.contains("from the bake"), "{said}");
    assert!(
        said.contains(
            "hvd-note: Docker's data and /var/tmp are on the flavor's 1 GB ephemeral disk"
        ),
        "{said}"
    );
}

#[test]
fn a_node_booted_from_a_bake_keeps_docker_data_on_its_ephemeral_disk() {
    require_image();
    let out = in_guest(
        r#"# what a bake leaves on the root disk: its marker and Docker's data
printf 'bake=b\nimage=sha256:1\n' > /etc/hvd-cluster-bake
mkdir -p /var/lib/docker/image/overlay2 /var/lib/docker/overlay2/l1/diff/usr/bin
echo '{"Repositories":{}}' > /var/lib/docker/image/overlay2/repositories.json
echo layer > /var/lib/docker/overlay2/l1/diff/usr/bin/tool
chmod 4755 /var/lib/docker/overlay2/l1/diff/usr/bin/tool
chown 1000:1000 /var/lib/docker/overlay2/l1/diff/usr/bin
ln -s ../l1/diff /var/lib/docker/overlay2/link
state() {
  echo "owner: $(stat -c %u:%g /var/lib/docker/overlay2/l1/diff/usr/bin)"
  echo "mode: $(stat -c %a /var/lib/docker/overlay2/l1/diff/usr/bin/tool)"
  echo "link: $(readlink /var/lib/docker/overlay2/link)"
  echo "repos: $(cat /var/lib/docker/image/overlay2/repositories.json)"
}
blank_ephemeral
sh /w/apply.sh
sh /w/check.sh
echo "== first boot"; state
# a bake of this node is refused: its Docker data is not on the root disk
mkdir -p /run/hvd-bake && mount -t tmpfs tmpfs /run/hvd-bake && cp /w/bake.sh /run/hvd-bake/
rc=0; sh /run/hvd-bake/bake.sh prepare b sha256:1 2> /tmp/bake.err || rc=$?
echo "bake: rc=$rc $(cat /tmp/bake.err)"
[ ! -e /run/hvd-bake/aside ] || echo "bake: set something aside"
umount /run/hvd-bake
# the root disk keeps its copy
umount /var/tmp /var/lib/docker
echo "root: $(cat /var/lib/docker/image/overlay2/repositories.json)"
umount /var/lib/hvd-cluster/data
# `start`: the same root disk, a blank ephemeral disk
blank_ephemeral
sh /w/apply.sh
sh /w/check.sh
echo "== after start"; state
"#,
    );
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    let copied = "hvd-note: Docker's data from the bake (";
    assert_eq!(
        said.matches(copied).count(),
        2,
        "copied at each blank disk: {said}"
    );
    assert!(
        said.contains(") copied from the root disk onto the ephemeral disk"),
        "{said}"
    );
    for phase in ["== first boot", "== after start"] {
        let after = said.split(phase).nth(1).unwrap_or_default();
        for want in [
            "owner: 1000:1000",
            "mode: 4755",
            "link: ../l1/diff",
            r#"repos: {"Repositories":{}}"#,
        ] {
            assert!(after.contains(want), "{phase}: {want}: {said}");
        }
    }
    assert!(
        said.contains(r#"root: {"Repositories":{}}"#),
        "the root disk keeps its copy: {said}"
    );
    let bake = said
        .lines()
        .find(|l| l.starts_with("bake: "))
        .unwrap_or_default();
    assert!(
        bake.starts_with("bake: rc=3 Docker's data (the image) is on the flavor's ephemeral disk"),
        "{said}"
    );
    assert!(!said.contains("bake: set something aside"), "{said}");
}

#[test]
fn a_bake_leaves_the_masters_shared_and_no_credential_on_the_disk_and_puts_them_back() {
    require_image();
    let out = in_guest(
        &r#"# the disk under one of the paths a bake sets aside (an autostop credential)
mkfs.ext4 -q -F "$dev"
mkdir -p /var/lib/hvd-cluster && mount "$dev" /var/lib/hvd-cluster
mkdir -p /var/lib/hvd-cluster/autostop /etc/exports.d /etc/hvd-cluster
secret=hvd-test-credential-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$secret" > /var/lib/hvd-cluster/autostop/credential
echo '{"node":"m"}' > /etc/hvd-cluster/node.json
printf '/shared 10.63.0.0/24(rw)\n' > /etc/exports.d/hvd-cluster.exports
printf 'LABEL=root / ext4 defaults 0 1\nUUID=0000-1111 /shared auto defaults,nofail 0 2\n' > /etc/fstab
sync
raw() { dd if="$dev" iflag=direct bs=1M status=none | grep -a -c -F "$secret" || true; }
echo "before: $(raw)"
# a journal larger than the tmpfs the bake mounts at first (64 MB)
mkdir -p /var/log/journal/m && head -c 80M /dev/urandom > /var/log/journal/m/system.journal
sum=$(md5sum < /var/log/journal/m/system.journal)
MOUNT_TMPFS && cp /w/bake.sh /run/hvd-bake/
sh /run/hvd-bake/bake.sh prepare b sha256:1
[ ! -e /var/log/journal ] || echo "left: the journal"
sync
echo "during: $(raw)"
echo "fstab: $(grep -c ' /shared ' /etc/fstab || true) $(grep -c ' / ' /etc/fstab)"
for p in /var/lib/hvd-cluster/autostop /etc/exports.d/hvd-cluster.exports /etc/hvd-cluster; do
  [ ! -e "$p" ] || echo "left: $p"
done
echo "marker: $(tr '\n' ' ' < /etc/hvd-cluster-bake)"
sh /run/hvd-bake/bake.sh restore
[ "$(md5sum < /var/log/journal/m/system.journal)" = "$sum" ] || echo "left: the journal's bytes"
echo "after: $(grep -c -F "$secret" /var/lib/hvd-cluster/autostop/credential) $(grep -c ' /shared ' /etc/fstab) $(cat /etc/exports.d/hvd-cluster.exports) $(cat /etc/hvd-cluster/node.json)"
[ ! -e /etc/hvd-cluster-bake ] || echo "left: the marker"
"#
        .replace("MOUNT_TMPFS", &hvd_cluster::bake::mount_command()),
    );
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    let line = |what: &str| {
        said.lines()
            .find_map(|l| l.strip_prefix(what))
            .unwrap_or_else(|| panic!("no {what} line: {said}"))
            .to_string()
    };
    assert_ne!(
        line("before: "),
        "0",
        "the credential is on the disk: {said}"
    );
    assert_eq!(
        line("during: "),
        "0",
        "no byte of the credential on the disk a snapshot reads, freed blocks included: {said}"
    );
    assert_eq!(line("fstab: "), "0 1", "only /shared's line out: {said}");
    assert!(!said.contains("left: "), "{said}");
    assert_eq!(line("marker: "), "bake=b image=sha256:1 ");
    assert_eq!(
        line("after: "),
        r#"1 1 /shared 10.63.0.0/24(rw) {"node":"m"}"#,
        "everything put back: {said}"
    );
}
