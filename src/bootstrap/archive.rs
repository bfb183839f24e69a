//! The image as a file on the master (zstd when every end has it), kept after a delivery for
//! the next `scale` or `heal` with the image's id beside it (a second `docker save` costs
//! minutes under emulation): served again only while that id is the image's there, removed
//! when it is not, and by `stop` and the autostop agent before a shelve (it would go into
//! the master's snapshot).

use super::{BootstrapError, NodeSession};
use crate::ssh;

/// The image as a file on the master, waiting for the workers: zstd-compressed when every end
/// has zstd (a third of the bytes on every link and on the master's disk), else the plain tar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageFile {
    pub zstd: bool,
}

impl ImageFile {
    pub fn path(self) -> &'static str {
        if self.zstd {
            "/var/tmp/hvd-cluster-image.tar.zst"
        } else {
            "/var/tmp/hvd-cluster-image.tar"
        }
    }
    /// The command that turns the file's bytes (a path argument or stdin) back into the tar.
    pub fn decompress(self) -> &'static str {
        if self.zstd {
            "zstd -d -q -c"
        } else {
            "cat"
        }
    }
    /// Beside the file, the id of the image it holds whole: written once the file is complete
    /// and whole (no layer left out), so that `scale` and `heal` serve it again instead of
    /// saving the image anew (minutes under emulation); removed first by whatever writes it.
    pub fn id_path(self) -> String {
        format!("{}.id", self.path())
    }
}

/// Every archive of an image the master may hold, either kind, with their ids (a shell glob).
pub const ARCHIVES: &str = "/var/tmp/hvd-cluster-image.tar*";

/// What `stop` runs on the master first (the autostop agent does the same with [`ARCHIVES`]):
/// its archive of the image would go into the shelve snapshot. Prints the bytes removed.
pub fn drop_archives_command() -> String {
    let (plain, zstd) = (
        ImageFile { zstd: false }.path(),
        ImageFile { zstd: true }.path(),
    );
    format!(
        "b=$(du -cb {plain} {zstd} 2>/dev/null | tail -n 1 | cut -f 1); rm -f {ARCHIVES} && echo \"dropped=${{b:-0}}\""
    )
}

/// The shell line that sets `id` to the image's id on the node (`set -e` fails on an image
/// the node lacks).
fn id_line(quoted_image: &str) -> String {
    format!("id=$(docker image inspect -f '{{{{.Id}}}}' {quoted_image})")
}

/// The shell line that records `id` (set by [`id_line`]) beside `file`: written last, once the
/// file is complete and whole.
fn record_line(file: ImageFile) -> String {
    format!("echo \"$id\" > {}", file.id_path())
}

/// The master's command that says `kept` when `file` holds the image whole as the master has
/// it now (the id beside it is the image's), and otherwise removes every archive there: a stale
/// one would be served, and would take the room the next one needs.
fn reusable_archive_command(quoted_image: &str, file: ImageFile) -> String {
    format!(
        "id=$(docker image inspect -f '{{{{.Id}}}}' {quoted_image} 2>/dev/null || true)\n\
         if [ -n \"$id\" ] && [ -s {path} ] && [ \"$(cat {id_path} 2>/dev/null)\" = \"$id\" ]; then echo kept; else rm -f {ARCHIVES}; fi\n",
        path = file.path(),
        id_path = file.id_path(),
    )
}

/// Whether the master's `file` holds the image whole from an earlier delivery (then served
/// again, no `docker save`, no room for it); any other archive there is removed first.
pub async fn reusable_archive(
    master: &NodeSession,
    image: &str,
    file: ImageFile,
) -> Result<bool, BootstrapError> {
    let out = master
        .ssh
        .sudo(&reusable_archive_command(&ssh::shell_quote(image), file))
        .await?;
    Ok(out.trim() == "kept")
}

/// Said when the master serves the archive it kept from an earlier delivery.
pub fn kept_line(master: &NodeSession) -> String {
    format!(
        "{}: the image's archive kept from an earlier delivery serves the workers (not saved again)",
        master.node.name
    )
}

/// The master's command that loads the file it received; when the file is `whole` (no layer
/// left out), the image's id it now has is recorded beside it, so that `scale` and `heal` serve
/// it again.
pub fn master_load_command(quoted_image: &str, file: ImageFile, whole: bool) -> String {
    let record = if whole {
        format!("{}\n{}\n", id_line(quoted_image), record_line(file))
    } else {
        String::new()
    };
    format!(
        "set -e -o pipefail\n{} {} | docker load -q >/dev/null\n{record}",
        file.decompress(),
        file.path()
    )
}

/// The end of a delivery, whatever its outcome: the master's file stays when it holds the
/// image whole (its id beside it), for the next `scale` or `heal` until `stop`; else it goes.
pub async fn settle_archive(master: &NodeSession, file: ImageFile) {
    let _ = master
        .ssh
        .sudo(&format!("[ -s {} ] || rm -f {ARCHIVES}", file.id_path()))
        .await;
}

/// The master's command that readies `file` for the workers and prints `bytes=`: checks it
/// when `ready`, else saves the image into it (every other archive removed first) and writes
/// its id beside it last, so that a save cut short leaves an archive no later delivery serves.
pub(super) fn prepare_command(quoted_image: &str, file: ImageFile, ready: bool) -> String {
    let path = file.path();
    let save = if ready {
        format!("test -s {path}")
    } else {
        let to_file = if file.zstd {
            format!("docker save {quoted_image} | zstd -1 -T0 -q -c > {path}")
        } else {
            format!("docker save -o {path} {quoted_image}")
        };
        format!(
            "rm -f {ARCHIVES}\n{}\n{to_file}\n{}",
            id_line(quoted_image),
            record_line(file)
        )
    };
    format!("set -e -o pipefail\n{save}\necho \"bytes=$(stat -c %s {path})\"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The master's archive: saved with its id written last, served again only while that id
    /// is the image's there, any other archive removed before the room is read.
    #[test]
    fn the_master_keeps_a_whole_archive_by_the_image_id() {
        let zstd = ImageFile { zstd: true };
        assert_eq!(zstd.id_path(), "/var/tmp/hvd-cluster-image.tar.zst.id");
        let save = prepare_command("'img:1'", zstd, false);
        let lines: Vec<&str> = save.lines().collect();
        assert_eq!(
            lines,
            [
                "set -e -o pipefail",
                "rm -f /var/tmp/hvd-cluster-image.tar*",
                "id=$(docker image inspect -f '{{.Id}}' 'img:1')",
                "docker save 'img:1' | zstd -1 -T0 -q -c > /var/tmp/hvd-cluster-image.tar.zst",
                "echo \"$id\" > /var/tmp/hvd-cluster-image.tar.zst.id",
                "echo \"bytes=$(stat -c %s /var/tmp/hvd-cluster-image.tar.zst)\"",
            ]
        );
        let plain = prepare_command("'img:1'", ImageFile { zstd: false }, false);
        assert!(
            plain.contains("docker save -o /var/tmp/hvd-cluster-image.tar 'img:1'\necho \"$id\" > /var/tmp/hvd-cluster-image.tar.id"),
            "{plain}"
        );
        let ready = prepare_command("'img:1'", zstd, true);
        assert!(
            ready.contains("test -s /var/tmp/hvd-cluster-image.tar.zst\n")
                && !ready.contains("docker save"),
            "{ready}"
        );
        let reuse = reusable_archive_command("'img:1'", zstd);
        assert!(
            reuse.contains("id=$(docker image inspect -f '{{.Id}}' 'img:1' 2>/dev/null || true)"),
            "{reuse}"
        );
        assert!(
            reuse.contains("if [ -n \"$id\" ] && [ -s /var/tmp/hvd-cluster-image.tar.zst ] && [ \"$(cat /var/tmp/hvd-cluster-image.tar.zst.id 2>/dev/null)\" = \"$id\" ]; then echo kept; else rm -f /var/tmp/hvd-cluster-image.tar*; fi"),
            "{reuse}"
        );
    }

    /// The commands on the master's archive, run by a real shell in a scratch folder: kept
    /// only while the id beside it is the image's, every archive gone otherwise, and the
    /// stop's removal says how many bytes went.
    #[test]
    fn the_archive_commands_do_what_they_say_in_a_shell() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display().to_string();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        // a `docker` that knows one image, by the id in $ID
        std::fs::write(
            bin.join("docker"),
            "#!/bin/sh\n[ -n \"$ID\" ] && echo \"$ID\" || exit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(
            bin.join("docker"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let run = |command: &str, id: &str| -> String {
            let command = command.replace("/var/tmp", &root);
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(&command)
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env("ID", id)
                .output()
                .unwrap();
            assert!(out.status.success(), "{command}: {out:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let file = ImageFile { zstd: true };
        let archive = dir.path().join("hvd-cluster-image.tar.zst");
        let id = dir.path().join("hvd-cluster-image.tar.zst.id");
        let plain = dir.path().join("hvd-cluster-image.tar");
        std::fs::write(&archive, b"1234").unwrap();
        std::fs::write(&id, "sha256:a\n").unwrap();
        std::fs::write(&plain, b"stale").unwrap();
        let reuse = reusable_archive_command("'img:1'", file);
        assert_eq!(run(&reuse, "sha256:a").trim(), "kept");
        assert!(archive.exists() && plain.exists(), "kept: nothing removed");
        // the image changed: every archive goes
        assert_eq!(run(&reuse, "sha256:b").trim(), "");
        assert!(!archive.exists() && !id.exists() && !plain.exists());
        // an archive without its id (a save cut short) is never served
        std::fs::write(&archive, b"1234").unwrap();
        assert_eq!(run(&reuse, "sha256:a").trim(), "");
        assert!(!archive.exists());
        // the master without the image: nothing is kept
        std::fs::write(&archive, b"1234").unwrap();
        std::fs::write(&id, "\n").unwrap();
        assert_eq!(run(&reuse, "").trim(), "");
        assert!(!archive.exists());
        // the stop's removal counts the archives' bytes, not their ids
        std::fs::write(&archive, b"1234").unwrap();
        std::fs::write(&id, "sha256:a\n").unwrap();
        std::fs::write(&plain, b"56").unwrap();
        assert_eq!(run(&drop_archives_command(), "").trim(), "dropped=6");
        assert!(!archive.exists() && !id.exists() && !plain.exists());
        assert_eq!(run(&drop_archives_command(), "").trim(), "dropped=0");
    }
}
