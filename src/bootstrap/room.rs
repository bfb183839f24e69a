//! Room for the image: before a byte of it is sent to a node, the free space where that
//! node's Docker keeps images is compared with what the image needs there. `docker load`
//! first unpacks the whole archive into Docker's own tmp folder, then each layer, so a node
//! needs about twice the image's unpacked size; the master also keeps the archive in /var/tmp
//! while the workers fetch it. A node with too little is named in one line, with the profile
//! key that gives it room, and nothing is sent anywhere.

use futures::future::try_join_all;

use super::{BootstrapError, NodeSession};
use crate::plan::Role;

/// What one node needs and has, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Free where Docker keeps images (`/var/lib/docker`).
    pub docker_free: u64,
    /// Free in `/var/tmp` (the master's archive).
    pub tmp_free: u64,
    /// `/var/lib/docker` and `/var/tmp` are one filesystem.
    pub same_filesystem: bool,
}

/// The command a node answers with its [`Room`]: `docker=N tmp=N same=0|1`.
/// Before Docker is installed its folder is not there yet: its parent's filesystem counts.
pub const ROOM_PROBE: &str = "set -e; p=/var/lib/docker; [ -e $p ] || p=/var/lib; \
d=$(df -P -B1 $p | awk 'NR==2 {print $4}'); \
t=$(df -P -B1 /var/tmp | awk 'NR==2 {print $4}'); \
s=0; [ \"$(stat -c %d $p)\" != \"$(stat -c %d /var/tmp)\" ] || s=1; \
echo \"docker=$d tmp=$t same=$s\"";

impl Room {
    /// Parses the probe's answer; `None` for anything else.
    pub fn parse(answer: &str) -> Option<Room> {
        let field = |key: &str| {
            answer
                .split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
        };
        Some(Room {
            docker_free: field("docker")?,
            tmp_free: field("tmp")?,
            same_filesystem: match field("same")? {
                0 => false,
                1 => true,
                _ => return None,
            },
        })
    }

    /// `Some((free, needed))` in the tighter place when `docker` bytes do not fit where
    /// Docker keeps images or `tmp` bytes in /var/tmp (together, on one filesystem). Pure.
    pub fn shortfall(&self, docker: u64, tmp: u64) -> Option<(u64, u64)> {
        if self.same_filesystem {
            let need = docker.saturating_add(tmp);
            return (need > self.docker_free).then_some((self.docker_free, need));
        }
        if docker > self.docker_free {
            return Some((self.docker_free, docker));
        }
        (tmp > self.tmp_free).then_some((self.tmp_free, tmp))
    }
}

/// What loading an image of `unpacked` bytes needs where Docker keeps images: the unpacked
/// archive, then the layers (twice), plus a tenth for Docker's own. Pure.
pub fn load_needs(unpacked: u64) -> u64 {
    unpacked.saturating_mul(2).saturating_add(unpacked / 10)
}

/// The archive of an image of `unpacked` bytes as the master keeps it: about half with zstd
/// (our images compress to a third), the whole tar without. Pure.
pub fn archive_needs(unpacked: u64, zstd: bool) -> u64 {
    if zstd {
        unpacked / 2
    } else {
        unpacked
    }
}

/// One node to check: what it needs where Docker keeps images and in /var/tmp, in bytes.
struct Need<'a> {
    node: &'a NodeSession,
    docker: u64,
    tmp: u64,
}

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

/// The room check of one delivery from this machine, before a byte is sent: every node in
/// `loading` (the master among them when it lacks the image) loads it, and the master keeps
/// the archive for the workers. Nothing to check when the image is not here (the caller says
/// why it cannot send it).
pub async fn check_delivery(
    image: &str,
    master: &NodeSession,
    loading: &[&NodeSession],
    zstd: bool,
) -> Result<(), BootstrapError> {
    let Some(unpacked) = crate::images::local_image_bytes(image).await else {
        return Ok(());
    };
    let mut needs: Vec<Need> = loading
        .iter()
        .map(|node| Need {
            node,
            docker: load_needs(unpacked),
            tmp: 0,
        })
        .collect();
    let archive = archive_needs(unpacked, zstd);
    match needs
        .iter_mut()
        .find(|n| n.node.node.name == master.node.name)
    {
        Some(m) => m.tmp = archive,
        None => needs.insert(
            0,
            Need {
                node: master,
                docker: 0,
                tmp: archive,
            },
        ),
    }
    check(image, unpacked, &needs).await
}

/// Asks every node for its room and refuses, naming each node short of it, when the image
/// (`unpacked` bytes) does not fit.
async fn check(image: &str, unpacked: u64, needs: &[Need<'_>]) -> Result<(), BootstrapError> {
    let answers = try_join_all(needs.iter().map(|n| n.node.ssh.sudo(ROOM_PROBE))).await?;
    let mut short = Vec::new();
    for (n, answer) in needs.iter().zip(answers) {
        let name = &n.node.node.name;
        let Some(room) = Room::parse(&answer) else {
            return Err(BootstrapError::Other(format!(
                "{name}: could not read the free space where Docker keeps images: {}",
                crate::input::shown_message(answer.trim(), 200)
            )));
        };
        if let Some((free, need)) = room.shortfall(n.docker, n.tmp) {
            let key = match n.node.node.role {
                Role::Master => "[master] root_volume_gb",
                Role::Worker => "[workers] root_volume_gb",
            };
            short.push(format!(
                "{name}: {} free where Docker keeps images, and {image} needs {} there ({} unpacked{}); give it room with {key} = {}, or a flavor with an ephemeral disk",
                gb(free),
                gb(need),
                gb(unpacked),
                match (n.docker > 0, n.tmp > 0) {
                    (true, true) => ", loaded through a copy of itself, and the archive the master keeps",
                    (true, false) => ", loaded through a copy of itself",
                    _ => ": the archive the master keeps for the workers",
                },
                suggested_gb(need),
            ));
        }
    }
    if short.is_empty() {
        Ok(())
    } else {
        Err(BootstrapError::NoRoom(short))
    }
}

/// A root volume that holds the system (10 GB) and what the image needs, in whole GB.
fn suggested_gb(need: u64) -> u64 {
    10 + need.div_ceil(1_000_000_000) + 5
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    #[test]
    fn the_probe_answer_is_read_or_refused() {
        assert_eq!(
            Room::parse("docker=1000 tmp=2000 same=1\n"),
            Some(Room {
                docker_free: 1000,
                tmp_free: 2000,
                same_filesystem: true
            })
        );
        for bad in [
            "",
            "docker=1000 tmp=2000",
            "docker=-1 tmp=2000 same=1",
            "docker=1000 tmp=2000 same=2",
            "df: /var/lib/docker: No such file or directory",
        ] {
            assert_eq!(Room::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_node_needs_twice_the_image_and_the_master_its_archive() {
        assert_eq!(load_needs(3 * GB), 6 * GB + 3 * GB / 10);
        assert_eq!(archive_needs(3 * GB, true), 3 * GB / 2);
        assert_eq!(archive_needs(3 * GB, false), 3 * GB);
        let one = Room {
            docker_free: 7 * GB,
            tmp_free: 7 * GB,
            same_filesystem: true,
        };
        // one filesystem: the two needs add up
        assert_eq!(one.shortfall(6 * GB, 0), None);
        assert_eq!(one.shortfall(6 * GB, 2 * GB), Some((7 * GB, 8 * GB)));
        // two filesystems: each on its own
        let two = Room {
            same_filesystem: false,
            tmp_free: GB,
            ..one
        };
        assert_eq!(two.shortfall(6 * GB, GB), None);
        assert_eq!(two.shortfall(8 * GB, 0), Some((7 * GB, 8 * GB)));
        assert_eq!(two.shortfall(6 * GB, 2 * GB), Some((GB, 2 * GB)));
        assert_eq!(suggested_gb(6 * GB + 1), 22);
    }
}
