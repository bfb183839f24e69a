//! Room for the image: before a byte of it is sent to a node, the free space where that
//! node's Docker keeps images is compared with what the image needs there. `docker load`
//! first unpacks the whole archive into Docker's own tmp folder, then each layer, so a node
//! needs about twice the image's unpacked size; the master also keeps the archive in /var/tmp
//! for the workers (until `stop`: `scale` and `heal` serve it again, with no room to find). A node with too little is named in one line, with the profile
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

/// The unpacked size of layers of `compressed` bytes, as a registry serves them (gzip):
/// about two and a half times (Docker Hub's images unpack to 2 to 3 times their compressed
/// size). An estimate: the manifest tells only the compressed sizes. Pure.
pub fn unpacked_estimate(compressed: u64) -> u64 {
    compressed.saturating_mul(5) / 2
}

/// What pulling layers of `compressed` bytes needs where Docker keeps images: the layers as
/// downloaded (kept until each one is unpacked) and unpacked. Pure.
pub fn pull_needs(compressed: u64) -> u64 {
    compressed.saturating_add(unpacked_estimate(compressed))
}

/// The compressed bytes of an image (its layers and config) from what `docker manifest
/// inspect --verbose` prints: one manifest (an object), or one per platform (an array), of
/// which the `linux/amd64` one counts (the nodes' platform). `None` when there is no such
/// manifest or no size. Pure.
pub fn manifest_bytes(inspected: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_str(inspected).ok()?;
    let entry = match &value {
        serde_json::Value::Array(entries) => entries.iter().find(|e| {
            let platform = &e["Descriptor"]["platform"];
            platform["os"] == "linux" && platform["architecture"] == "amd64"
        })?,
        one => one,
    };
    let manifest = ["SchemaV2Manifest", "OCIManifest"]
        .iter()
        .map(|key| &entry[key])
        .find(|m| m.is_object())?;
    let layers = manifest["layers"].as_array()?;
    let mut total = manifest["config"]["size"].as_u64()?;
    for layer in layers {
        total = total.checked_add(layer["size"].as_u64()?)?;
    }
    Some(total)
}

/// One node to check: what it needs where Docker keeps images and in /var/tmp, in bytes.
struct Need<'a> {
    node: &'a NodeSession,
    docker: u64,
    tmp: u64,
}

/// How the image comes to the nodes, for the line that explains a refusal.
#[derive(Clone, Copy)]
enum Arrival {
    /// Sent from here, or from the master that built it: its unpacked size is known.
    Sent { unpacked: u64 },
    /// Pulled from a registry: its compressed size is the manifest's.
    Pulled { compressed: u64, way: PullRoom },
    /// Built on the master from nothing (`build-remote`): the measured estimate.
    Built,
}

impl Arrival {
    fn size(self) -> String {
        match self {
            Arrival::Sent { unpacked } => format!("{} unpacked", gb(unpacked)),
            Arrival::Pulled { compressed, .. } => format!(
                "{} of layers in the registry, about {} unpacked",
                gb(compressed),
                gb(unpacked_estimate(compressed))
            ),
            Arrival::Built => "built on the master from nothing".into(),
        }
    }

    fn how(self, need: &Need) -> &'static str {
        if matches!(self, Arrival::Built) {
            return ": the base's tree, the build stage and the image";
        }
        let pulled = matches!(self, Arrival::Pulled { .. });
        if let Arrival::Pulled {
            way: PullRoom::Mirror,
            ..
        } = self
        {
            return match (need.docker > 0, need.tmp > 0) {
                (true, true) => {
                    ", pulled, and the layers the master's mirror keeps for the workers"
                }
                (true, false) => ", pulled",
                _ => ": the layers the master's mirror keeps for the workers",
            };
        }
        match (need.docker > 0, need.tmp > 0, pulled) {
            (true, true, true) => ", pulled, and the archive the master keeps for the workers",
            (true, false, true) if matches!(need.node.node.role, Role::Master) => ", pulled",
            (true, true, false) => {
                ", loaded through a copy of itself, and the archive the master keeps"
            }
            (true, _, _) => ", loaded through a copy of itself",
            _ => ": the archive the master keeps for the workers",
        }
    }
}

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

/// The room check of one delivery from this machine, before a byte is sent: every node in
/// `loading` (the master among them when it lacks the image) loads it, and the master keeps
/// the archive for the workers (unless `archive_kept`: it holds it already). Nothing to check
/// when the image is not here (the caller says why it cannot send it).
pub async fn check_delivery(
    image: &str,
    master: &NodeSession,
    loading: &[&NodeSession],
    zstd: bool,
    archive_kept: bool,
) -> Result<(), BootstrapError> {
    let Some(unpacked) = crate::images::local_image_bytes(image).await else {
        return Ok(());
    };
    check_loads(image, master, loading, unpacked, zstd, archive_kept).await
}

/// The room check of an image of `unpacked` bytes that the master passes on: every node in
/// `loading` loads it, and the master keeps its archive for the workers (unless
/// `archive_kept`: it holds it already, kept whole from an earlier delivery).
pub async fn check_loads(
    image: &str,
    master: &NodeSession,
    loading: &[&NodeSession],
    unpacked: u64,
    zstd: bool,
    archive_kept: bool,
) -> Result<(), BootstrapError> {
    let mut needs: Vec<Need> = loading
        .iter()
        .map(|node| Need {
            node,
            docker: load_needs(unpacked),
            tmp: 0,
        })
        .collect();
    if !archive_kept {
        keeps_archive(&mut needs, master, archive_needs(unpacked, zstd));
    }
    check(image, Arrival::Sent { unpacked }, &needs).await
}

/// What building our image on the master from nothing (`container.source = "build-remote"`)
/// needs where Docker keeps images: the base, the build stage (compilers, the framework's
/// wheels, Horovod's build tree) and the image, as `docker system df` counted them after
/// scripts/build-images from nothing on an empty engine, the larger variant, with a fifth
/// more (docs/profile.md#room-for-the-image).
pub const BUILD_DOCKER_NEEDS: u64 = 9_000_000_000;
/// ... and in /var/tmp: debootstrap's tree of the base and the build's logs.
pub const BUILD_TMP_NEEDS: u64 = 1_000_000_000;

/// The room check of a build on the master from nothing, before it starts.
pub async fn check_build(image: &str, master: &NodeSession) -> Result<(), BootstrapError> {
    let need = Need {
        node: master,
        docker: BUILD_DOCKER_NEEDS,
        tmp: BUILD_TMP_NEEDS,
    };
    check(image, Arrival::Built, &[need]).await
}

/// How a pulled image reaches the nodes, for its room check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullRoom {
    /// Each node pulls from the registry.
    EveryNode,
    /// Each node pulls from the master's mirror, which keeps the compressed blobs meanwhile.
    Mirror,
    /// The master pulls and keeps an archive for the workers, which load it.
    MasterArchive,
}

/// The room check of a pull, before a byte is pulled: the image's layers are `compressed`
/// bytes (the registry's manifest); each of `lacking` pulls them, or (`MasterArchive`) loads
/// the master's archive; the master keeps the mirror's blobs or the archive in /var/tmp
/// (unless `archive_kept`: it holds that archive already).
pub async fn check_pull(
    image: &str,
    master: &NodeSession,
    lacking: &[&NodeSession],
    way: PullRoom,
    compressed: u64,
    archive_kept: bool,
) -> Result<(), BootstrapError> {
    let unpacked = unpacked_estimate(compressed);
    let is_master = |n: &NodeSession| n.node.name == master.node.name;
    let mut needs: Vec<Need> = lacking
        .iter()
        .map(|node| Need {
            node,
            docker: if way != PullRoom::MasterArchive || is_master(node) {
                pull_needs(compressed)
            } else {
                load_needs(unpacked)
            },
            tmp: 0,
        })
        .collect();
    let workers = lacking.iter().filter(|n| !is_master(n)).count();
    match way {
        PullRoom::EveryNode => {}
        PullRoom::Mirror => keeps_archive(&mut needs, master, compressed),
        PullRoom::MasterArchive if workers > 0 && !archive_kept => {
            keeps_archive(&mut needs, master, archive_needs(unpacked, true))
        }
        PullRoom::MasterArchive => {}
    }
    check(image, Arrival::Pulled { compressed, way }, &needs).await
}

/// The master keeps the archive (`archive` bytes in /var/tmp) for the workers: added to its
/// need, or a need of its own when it holds the image already.
fn keeps_archive<'a>(needs: &mut Vec<Need<'a>>, master: &'a NodeSession, archive: u64) {
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
}

/// Asks every node for its room and refuses, naming each node short of it, when the image
/// does not fit.
async fn check(image: &str, arrival: Arrival, needs: &[Need<'_>]) -> Result<(), BootstrapError> {
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
                "{name}: {} free where Docker keeps images, and {image} needs {} there ({}{}); give it room with {key} = {}, or a flavor with an ephemeral disk",
                gb(free),
                gb(need),
                arrival.size(),
                arrival.how(n),
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

    /// What `docker manifest inspect --verbose` printed for an image in Debian's
    /// docker-registry (tests/registry/start): one amd64 manifest, one layer.
    const INSPECTED: &str =
        include_str!("../../tests/fixtures/docker/manifest-inspect-verbose.json");

    #[test]
    fn a_pull_needs_its_layers_and_what_they_unpack_to() {
        assert_eq!(manifest_bytes(INSPECTED), Some(1169 + 32_596_419));
        // a list: the linux/amd64 entry counts, whatever its place
        let one: serde_json::Value = serde_json::from_str(INSPECTED).unwrap();
        let mut arm = one.clone();
        arm["Descriptor"]["platform"]["architecture"] = "arm64".into();
        arm["SchemaV2Manifest"]["layers"][0]["size"] = 7.into();
        let list = serde_json::json!([arm, one]).to_string();
        assert_eq!(manifest_bytes(&list), Some(1169 + 32_596_419));
        assert_eq!(manifest_bytes(&serde_json::json!([arm]).to_string()), None);
        // an OCI manifest
        let mut oci = one.clone();
        oci["OCIManifest"] = oci["SchemaV2Manifest"].take();
        assert_eq!(manifest_bytes(&oci.to_string()), Some(1169 + 32_596_419));
        // no sizes, a size that is not a number, not JSON at all
        let mut bad = one.clone();
        bad["SchemaV2Manifest"]["layers"][0]["size"] = "big".into();
        for bad in [
            bad.to_string(),
            "{}".into(),
            "[]".into(),
            "no such manifest".into(),
        ] {
            assert_eq!(manifest_bytes(&bad), None, "{bad}");
        }
        // the image above unpacks to 81.7 MB: two and a half times its layers
        assert_eq!(unpacked_estimate(32_596_419), 81_491_047);
        assert_eq!(pull_needs(2 * GB), 7 * GB);
    }
}
