//! A baked node image, as pure values: what identifies a bake (its key), the properties the
//! image carries, its name's grammar, and the commands the bake runs on the node it is made
//! from (the script is `templates/node/bake.sh`; each command runs as root). `cmd::bake` does
//! the I/O.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::input::{shown, Refused};
use crate::ssh::shell_quote;

/// Where the node script runs from: a tmpfs of its own, so nothing it sets aside is on a disk.
pub const BAKE_DIR: &str = "/run/hvd-bake";
pub const BAKE_SCRIPT: &str = "/run/hvd-bake/bake.sh";
/// What a node booted from a bake finds (the bake's name and the Horovod image's id).
pub const MARKER: &str = "/etc/hvd-cluster-bake";

/// The image property that identifies a bake (the key below), and the others it carries.
pub const KEY_PROPERTY: &str = "hvd_bake_key";

/// What goes into a bake's key: the same inputs find the same bake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BakeInputs {
    /// The image the node's server booted from (its id), or `volume` for a volume-backed one.
    pub source_image: String,
    /// The Horovod image's id in the node's Docker (`sha256:...`).
    pub horovod_image_id: String,
    /// Docker's version on the node.
    pub docker_version: String,
    /// The NVIDIA driver's version on the node, `none` without one.
    pub gpu_driver: String,
}

/// The bake's layout: a change here makes earlier bakes unfindable, as it should.
const FORMAT: &str = "hvd-bake-1";

impl BakeInputs {
    /// 16 hex digits of the inputs' hash: the same cluster image on the same server image,
    /// with the same Docker and driver, is the same bake.
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        for part in [
            FORMAT,
            &self.source_image,
            &self.horovod_image_id,
            &self.docker_version,
            &self.gpu_driver,
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        h.finalize()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The image's properties (Glance keeps each value up to 255 characters; every value
    /// here is a name, an id or a version the node reported, cut to fit).
    pub fn properties(&self, cluster: &str, node: &str) -> BTreeMap<String, String> {
        let cut = |v: &str| v.chars().take(255).collect::<String>();
        BTreeMap::from([
            (KEY_PROPERTY.to_string(), self.key()),
            ("hvd_bake_cluster".to_string(), cut(cluster)),
            ("hvd_bake_node".to_string(), cut(node)),
            ("hvd_bake_source_image".to_string(), cut(&self.source_image)),
            (
                "hvd_bake_horovod_image".to_string(),
                cut(&self.horovod_image_id),
            ),
            ("hvd_bake_docker".to_string(), cut(&self.docker_version)),
            ("hvd_bake_gpu_driver".to_string(), cut(&self.gpu_driver)),
            (
                "hvd_bake_tool".to_string(),
                format!("hvd-cluster {}", env!("CARGO_PKG_VERSION")),
            ),
        ])
    }
}

/// The bake's name when `--name` is not given.
pub fn default_name(cluster: &str) -> String {
    format!("{cluster}-bake")
}

/// A bake's image name: 1-100 ASCII letters, digits, `.`, `_` and `-`, starting with a letter
/// or digit; a name a profile can carry and any shell or URL takes as it is.
pub fn check_name(value: &str) -> Result<(), Refused> {
    let refuse = |why: &str| {
        Err(Refused(format!(
            "`{}` cannot name a bake: {why}",
            shown(value)
        )))
    };
    if value.is_empty() {
        return refuse("it is empty");
    }
    if value.len() > 100 {
        return refuse("longer than 100 characters");
    }
    if !value.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return refuse("it must start with a letter or digit");
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return refuse(&format!("`{}` is not allowed", shown(&bad.to_string())));
    }
    Ok(())
}

/// What `bake --delete` takes: a bake's name, or an id (a cloud's UUID passes the name's
/// grammar; a local bake's is `sha256:` and hex digits).
pub fn check_name_or_id(value: &str) -> Result<(), Refused> {
    let local_id = value.strip_prefix("sha256:").is_some_and(|hex| {
        (1..=64).contains(&hex.len()) && hex.chars().all(|c| c.is_ascii_hexdigit())
    });
    if local_id {
        Ok(())
    } else {
        check_name(value)
    }
}

/// Mounts the script's tmpfs (a second bake finds it mounted).
pub fn mount_command() -> String {
    format!(
        "mkdir -p {BAKE_DIR} && {{ mountpoint -q {BAKE_DIR} || mount -t tmpfs -o mode=0700,size=64m tmpfs {BAKE_DIR}; }}"
    )
}

/// Sets aside what belongs to the cluster or the boot; exit 3 with one line when the node
/// cannot be baked whole.
pub fn prepare_command(name: &str, image_id: &str) -> String {
    format!(
        "/bin/sh {BAKE_SCRIPT} prepare {} {}",
        shell_quote(name),
        shell_quote(image_id)
    )
}

/// What `bake.sh prepare` said of the disk's freed blocks (`set aside N path(s); freed blocks
/// ...`, its last line): whether a snapshot reads zeros there. Shortened and escaped. Pure.
pub fn freed_blocks(said: &str) -> Option<String> {
    let last = said.lines().rev().find(|l| l.starts_with("set aside "))?;
    let (_, note) = last.split_once("; ")?;
    Some(crate::input::shown_message(note.trim(), 120))
}

/// Puts it all back, then unmounts the tmpfs (the script's copy goes with it).
pub fn restore_command() -> String {
    format!(
        "/bin/sh {BAKE_SCRIPT} restore && {{ umount {BAKE_DIR} 2>/dev/null; rmdir {BAKE_DIR} 2>/dev/null; true; }}"
    )
}

/// What the key needs from the node, and whether its cluster's containers run: one
/// `KEY=VALUE` line each (see [`parse_facts`]).
pub fn facts_command(image: &str) -> String {
    format!(
        "printf 'image=%s\\n' \"{}\"; \
         printf 'docker=%s\\n' \"$(docker version -f '{{{{.Server.Version}}}}' 2>/dev/null)\"; \
         printf 'driver=%s\\n' \"$(cat /sys/module/nvidia/version 2>/dev/null || echo none)\"; \
         printf 'containers=%s\\n' \"$(docker ps -q --filter label=hvd-cluster.config 2>/dev/null | wc -l)\"",
        crate::images::node_image_id(image)
    )
}

/// What a node says for its bake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub image_id: String,
    pub docker_version: String,
    pub gpu_driver: String,
    /// The cluster's containers running there (none after a bake cut short).
    pub containers: u32,
}

/// The facts [`facts_command`] printed; `None` for a node without the image or without
/// Docker, which has nothing to bake.
pub fn parse_facts(out: &str) -> Option<NodeFacts> {
    let get = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    Some(NodeFacts {
        image_id: get("image").filter(|v| v.starts_with("sha256:"))?,
        docker_version: get("docker")?,
        gpu_driver: get("driver").unwrap_or_else(|| "none".into()),
        containers: get("containers").and_then(|n| n.parse().ok()).unwrap_or(0),
    })
}

/// `sha256:0123456789ab`: an image id as the bake's lines show it (shown escaped).
pub fn short_image_id(id: &str) -> String {
    let shown = shown(id);
    shown.get(..19).unwrap_or(&shown).to_string()
}

/// A bake's image, as the cloud holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BakedImage {
    pub id: String,
    pub name: String,
    /// Bytes, when the cloud says.
    pub size: Option<u64>,
    /// When the cloud made it, as it says (RFC 3339).
    pub created: Option<String>,
    /// The cluster and node it was baked from, and the Horovod image's id it holds, as its
    /// properties say.
    pub cluster: Option<String>,
    pub node: Option<String>,
    pub holds: Option<String>,
}

/// What already holds a name a bake would take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenBy {
    /// One phrase naming it, the cloud's values escaped (`image ID of another project`).
    pub what: String,
    /// An earlier bake of this project or machine, which `bake --delete` removes.
    pub own_bake: bool,
}

/// An image's size as people read it.
pub fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000_000 => format!("{:.1} GB", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.0} MB", b as f64 / 1e6),
        b => format!("{b} bytes"),
    }
}

/// One bake as `bake --list` shows it: name, id, size, when and where it was baked, what it
/// holds, which of the profile's kinds of server boot from it (`roles`) and which servers run
/// from it. Every value from the cloud shown escaped.
pub fn listing_line(image: &BakedImage, roles: &[&str], servers: &[String]) -> String {
    let mut line = format!("{} ({})", shown(&image.name), shown(&image.id));
    if let Some(bytes) = image.size {
        line.push_str(&format!(", {}", size(bytes)));
    }
    if let Some(made) = &image.created {
        line.push_str(&format!(", made {}", shown(made)));
    }
    if let Some(node) = &image.node {
        line.push_str(&format!(" from {}", shown(node)));
    }
    if let Some(holds) = &image.holds {
        line.push_str(&format!(", holds {}", short_image_id(holds)));
    }
    if !roles.is_empty() {
        line.push_str(&format!(
            "; this profile's {} boot from it",
            roles.join(" and ")
        ));
    }
    if !servers.is_empty() {
        line.push_str(&format!("; servers from it: {}", servers.join(", ")));
    }
    line
}

/// The bake `wanted` names (its name or id) among `bakes`: one, or a line that says why not
/// (none of that name, with the names there are; two of that name, with their ids).
pub fn pick<'a>(bakes: &'a [BakedImage], wanted: &str) -> Result<&'a BakedImage, String> {
    let by_id: Vec<&BakedImage> = bakes.iter().filter(|b| b.id == wanted).collect();
    let found: Vec<&BakedImage> = if by_id.is_empty() {
        bakes.iter().filter(|b| b.name == wanted).collect()
    } else {
        by_id
    };
    match found.as_slice() {
        [one] => Ok(one),
        [] => {
            let names: Vec<String> = bakes.iter().map(|b| shown(&b.name)).collect();
            Err(format!(
                "bake: no bake `{}` in this project (bakes: {}); nothing deleted",
                shown(wanted),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        }
        many => Err(format!(
            "bake: {} bakes are named `{}`: {}; name one by its id; nothing deleted",
            many.len(),
            shown(wanted),
            many.iter()
                .map(|b| shown(&b.id))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod freed_tests {
    use super::freed_blocks;

    #[test]
    fn the_prepare_says_whether_freed_blocks_were_discarded() {
        assert_eq!(
            freed_blocks("set aside 12 path(s); freed blocks discarded\n").as_deref(),
            Some("freed blocks discarded")
        );
        assert_eq!(freed_blocks("set aside 3 path(s)\n"), None);
        assert_eq!(freed_blocks("restored\n"), None);
        let hostile = freed_blocks("set aside 1 path(s); \u{1b}[2Jx").unwrap();
        assert!(!hostile.contains('\u{1b}'), "{hostile}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> BakeInputs {
        BakeInputs {
            source_image: "0c6c1e5b-1f40-4d7a-b1f5-7e0b2a7a6d10".into(),
            horovod_image_id: "sha256:abc".into(),
            docker_version: "20.10.24".into(),
            gpu_driver: "none".into(),
        }
    }

    #[test]
    fn the_same_inputs_make_the_same_key_and_any_change_another() {
        let a = inputs();
        assert_eq!(a.key(), inputs().key());
        assert_eq!(a.key().len(), 16);
        let mut b = inputs();
        b.horovod_image_id = "sha256:abd".into();
        let mut c = inputs();
        c.gpu_driver = "535.54.03".into();
        let mut d = inputs();
        d.source_image = "volume".into();
        for other in [b, c, d] {
            assert_ne!(a.key(), other.key());
        }
    }

    #[test]
    fn properties_carry_the_key_and_what_is_inside() {
        let p = inputs().properties("hvd-vms", "hvd-vms-worker-1");
        assert_eq!(p[KEY_PROPERTY], inputs().key());
        assert_eq!(p["hvd_bake_horovod_image"], "sha256:abc");
        assert_eq!(p["hvd_bake_node"], "hvd-vms-worker-1");
        assert!(p["hvd_bake_tool"].starts_with("hvd-cluster "));
        assert!(p.values().all(|v| v.chars().count() <= 255));
    }

    #[test]
    fn bake_names_are_checked() {
        assert!(check_name("hvd-local-bake").is_ok());
        assert!(check_name("Debian_12.bake-2").is_ok());
        for bad in [
            "",
            "-x",
            ".hidden",
            "a b",
            "a/b",
            "a;rm",
            "a\u{0}b",
            &"x".repeat(101),
        ] {
            let e = check_name(bad).unwrap_err().0;
            assert!(e.contains("cannot name a bake"), "{e}");
            assert!(!e.contains('\u{0}'), "shown escaped: {e}");
            assert!(check_name_or_id(bad).is_err());
        }
        assert!(check_name_or_id("sha256:09ead39879ba").is_ok());
        assert!(check_name_or_id("0c6c1e5b-1f40-4d7a-b1f5-7e0b2a7a6d10").is_ok());
        for bad in [
            "sha256:",
            "sha256:xyz",
            "sha256:1;rm",
            &format!("sha256:{}", "a".repeat(65)),
        ] {
            assert!(check_name_or_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_node_commands_quote_what_they_carry() {
        let c = prepare_command("it's", "sha256:1");
        assert!(c.ends_with("prepare 'it'\\''s' 'sha256:1'"), "{c}");
        assert!(facts_command("a b").contains("'a b'"));
    }

    #[test]
    fn facts_are_read_from_their_lines() {
        let out = "image=sha256:0123\ndocker=20.10.24+dfsg1\ndriver=none\ncontainers=1\n";
        assert_eq!(
            parse_facts(out),
            Some(NodeFacts {
                image_id: "sha256:0123".into(),
                docker_version: "20.10.24+dfsg1".into(),
                gpu_driver: "none".into(),
                containers: 1,
            })
        );
        let cut_short = parse_facts("image=sha256:1\ndocker=20\ncontainers=0\n").unwrap();
        assert_eq!(
            (cut_short.containers, cut_short.gpu_driver.as_str()),
            (0, "none")
        );
        assert_eq!(parse_facts("image=\ndocker=20\ndriver=none"), None);
        assert_eq!(parse_facts("image=sha256:1\ndocker=\n"), None);
        assert_eq!(parse_facts("image=rm -rf\ndocker=1\n"), None);
    }

    fn bake(name: &str, id: &str) -> BakedImage {
        BakedImage {
            id: id.into(),
            name: name.into(),
            size: Some(2_345_678_901),
            created: Some("2026-12-04T10:00:00Z".into()),
            cluster: Some("hvd".into()),
            node: Some("hvd-worker-1".into()),
            holds: Some("sha256:0123456789abcdef".into()),
        }
    }

    #[test]
    fn a_listing_line_says_what_where_and_who_boots_from_it() {
        let line = listing_line(
            &bake("hvd-bake", "b1"),
            &["workers"],
            &["hvd-worker-3".to_string()],
        );
        assert_eq!(
            line,
            "hvd-bake (b1), 2.3 GB, made 2026-12-04T10:00:00Z from hvd-worker-1, holds \
             sha256:0123456789ab; this profile's workers boot from it; servers from it: \
             hvd-worker-3"
        );
        let mut bare = bake("x", "b2");
        bare.size = None;
        bare.created = None;
        bare.node = None;
        bare.holds = None;
        assert_eq!(listing_line(&bare, &[], &[]), "x (b2)");
        let hostile = bake("a\u{1b}[2J", "\u{7}");
        let line = listing_line(&hostile, &[], &[]);
        assert!(
            !line.contains('\u{1b}') && !line.contains('\u{7}'),
            "{line}"
        );
    }

    #[test]
    fn a_bake_is_picked_by_id_or_by_a_name_only_it_has() {
        let bakes = [bake("a", "id-1"), bake("b", "id-2"), bake("b", "id-3")];
        assert_eq!(pick(&bakes, "a").map(|b| b.id.as_str()), Ok("id-1"));
        assert_eq!(pick(&bakes, "id-3").map(|b| b.id.as_str()), Ok("id-3"));
        let two = pick(&bakes, "b").unwrap_err();
        assert!(two.contains("2 bakes are named `b`: id-2, id-3"), "{two}");
        let none = pick(&bakes, "c").unwrap_err();
        assert!(
            none.contains("no bake `c` in this project (bakes: a, b, b)"),
            "{none}"
        );
        assert!(pick(&[], "c").unwrap_err().contains("(bakes: none)"));
    }
}
