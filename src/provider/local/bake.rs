//! A bake on this machine: the node container committed as an image (`hvd-cluster/bake:NAME`,
//! the bake's properties as its labels) and the node's Docker data volume copied to a volume of
//! the bake's own (`hvd-bake-NAME-docker`); a node made from the bake starts from that image
//! with its Docker volume seeded from that copy, so the Horovod image is already in its engine.
//! The image is made last: an image is a finished bake, a volume without one is what a bake
//! cut short left.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{docker, is_missing, LABEL, NODE_IMAGE};
use crate::bake::{BakedImage, TakenBy, KEY_PROPERTY};
use crate::input::shown;
use crate::provider::ProviderError;

/// The repository of every local bake; the bake's name is the tag (its grammar,
/// [`crate::bake::check_name`], is within a tag's).
pub const BAKE_REPOSITORY: &str = "hvd-cluster/bake";

pub fn image_ref(name: &str) -> String {
    format!("{BAKE_REPOSITORY}:{name}")
}

/// The volume holding the bake's copy of the node's Docker data.
pub fn volume(name: &str) -> String {
    format!("hvd-bake-{name}-docker")
}

/// The image a local node is made from, by tag and id (`hvd-cluster/node:bookworm@sha256:...`):
/// a rebuilt node image, or a bake made again under its name, is another source.
pub async fn source(bake: Option<&str>) -> Result<String, ProviderError> {
    let image = bake.map_or_else(|| NODE_IMAGE.to_string(), image_ref);
    let id = docker(&["image", "inspect", "-f", "{{.Id}}", &image]).await?;
    Ok(format!("{image}@{}", id.trim()))
}

/// `LABEL key="value"` for `docker commit --change` (a Dockerfile instruction: the value
/// quoted, its backslashes and quotes escaped, control characters dropped).
fn label_change(key: &str, value: &str) -> String {
    let value: String = value
        .chars()
        .filter(|c| !c.is_control())
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    format!("LABEL {key}=\"{value}\"")
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspected {
    id: String,
    #[serde(default)]
    repo_tags: Vec<String>,
    #[serde(default)]
    created: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    config: InspectedConfig,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct InspectedConfig {
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

impl Inspected {
    /// The bake's name: the tag under [`BAKE_REPOSITORY`] that passes the name's grammar.
    fn name(&self) -> Option<&str> {
        self.repo_tags.iter().find_map(|t| {
            t.strip_prefix(BAKE_REPOSITORY)?
                .strip_prefix(':')
                .filter(|n| crate::bake::check_name(n).is_ok())
        })
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.config.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn baked(&self) -> Option<BakedImage> {
        let label = |k: &str| self.label(k).map(str::to_string);
        Some(BakedImage {
            id: self.id.clone(),
            name: self.name()?.to_string(),
            size: Some(self.size),
            created: Some(self.created.clone()).filter(|c| !c.is_empty()),
            cluster: label("hvd_bake_cluster"),
            node: label("hvd_bake_node"),
            holds: label("hvd_bake_horovod_image"),
        })
    }
}

/// The local images carrying a bake's key label (all of them, or those with this `key`).
async fn inspect_bakes(key: Option<&str>) -> Result<Vec<Inspected>, ProviderError> {
    let filter = match key {
        Some(k) => format!("label={KEY_PROPERTY}={k}"),
        None => format!("label={KEY_PROPERTY}"),
    };
    let ids = docker(&["image", "ls", "-q", "--no-trunc", "--filter", &filter]).await?;
    let mut ids: Vec<&str> = ids.split_whitespace().collect();
    ids.sort_unstable();
    ids.dedup();
    inspect(&ids).await
}

/// `docker image inspect` of these images (ids or references), read.
async fn inspect(images: &[&str]) -> Result<Vec<Inspected>, ProviderError> {
    if images.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec!["image", "inspect"];
    args.extend(images);
    let out = docker(&args).await?;
    serde_json::from_str(&out)
        .map_err(|e| ProviderError::Cloud(format!("docker image inspect: unreadable reply: {e}")))
}

async fn volume_exists(name: &str) -> Result<bool, ProviderError> {
    match docker(&["volume", "inspect", &volume(name)]).await {
        Ok(_) => Ok(true),
        Err(e) if is_missing(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The finished bake with this key (an image with its volume); an image whose volume is
/// gone is no bake: removed.
pub async fn find_bake(key: &str) -> Result<Option<BakedImage>, ProviderError> {
    for image in inspect_bakes(Some(key)).await? {
        if image.label(KEY_PROPERTY) != Some(key) {
            continue;
        }
        let Some(baked) = image.baked() else { continue };
        if volume_exists(&baked.name).await? {
            return Ok(Some(baked));
        }
        docker(&["image", "rm", &image_ref(&baked.name)]).await?;
    }
    Ok(None)
}

pub async fn list_bakes() -> Result<Vec<BakedImage>, ProviderError> {
    let mut bakes: Vec<BakedImage> = inspect_bakes(None)
        .await?
        .iter()
        .filter_map(Inspected::baked)
        .collect();
    bakes.sort_by(|a, b| b.created.cmp(&a.created).then(a.name.cmp(&b.name)));
    Ok(bakes)
}

pub async fn bake_name_taken(name: &str) -> Result<Option<TakenBy>, ProviderError> {
    match docker(&["image", "inspect", "-f", "{{.Id}}", &image_ref(name)]).await {
        Ok(id) => Ok(Some(TakenBy {
            what: format!(
                "this machine's bake {}, holding another Horovod image or Docker",
                shown(id.trim())
            ),
            own_bake: true,
        })),
        Err(e) if is_missing(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The node containers (of any cluster) made from each of these bake images.
pub async fn servers_booted_from(
    image_ids: &[String],
) -> Result<BTreeMap<String, Vec<String>>, ProviderError> {
    let mut by_image = BTreeMap::new();
    for id in image_ids {
        let out = docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label={LABEL}"),
            "--filter",
            &format!("ancestor={id}"),
            "--format",
            "{{.Names}}",
        ])
        .await?;
        let mut names: Vec<String> = out.lines().map(shown).collect();
        if !names.is_empty() {
            names.sort();
            by_image.insert(id.clone(), names);
        }
    }
    Ok(by_image)
}

/// The bake `name`'s image and volume removed (either already gone is no error).
pub async fn delete_bake(name: &str) -> Result<(), ProviderError> {
    for removal in [
        ["image", "rm", &image_ref(name)],
        ["volume", "rm", &volume(name)],
    ] {
        match docker(&removal).await {
            Err(e) if !is_missing(&e) => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Copies one Docker volume's files into another (owners, modes, links kept), in a
/// throw-away container of the node image.
async fn copy_volume(from: &str, to: &str) -> Result<(), ProviderError> {
    docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "cp",
        "-v",
        &format!("{from}:/from:ro"),
        "-v",
        &format!("{to}:/to"),
        NODE_IMAGE,
        "-a",
        "/from/.",
        "/to/",
    ])
    .await
    .map(drop)
}

/// The node's Docker data copied to the bake's volume, then the container committed with the
/// bake's properties as labels and without the login key its environment carried.
pub async fn bake(
    node: &str,
    name: &str,
    properties: &BTreeMap<String, String>,
) -> Result<BakedImage, ProviderError> {
    let vol = volume(name);
    // what a bake of this name cut short left
    if volume_exists(name).await? {
        docker(&["volume", "rm", &vol]).await?;
    }
    docker(&["volume", "create", "--label", "hvd-bake=1", &vol]).await?;
    copy_volume(&format!("{node}-docker"), &vol).await?;
    let mut args: Vec<String> = vec!["commit".into()];
    // the cluster's login key is in the container's environment: not in the bake
    for change in std::iter::once("ENV SSH_AUTHORIZED_KEYS=".to_string())
        .chain(properties.iter().map(|(k, v)| label_change(k, v)))
    {
        args.push("--change".into());
        args.push(change);
    }
    args.push(node.into());
    args.push(image_ref(name));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    docker(&argv).await?;
    let made = inspect(&[&image_ref(name)])
        .await?
        .iter()
        .find_map(Inspected::baked);
    made.ok_or_else(|| {
        ProviderError::Cloud(format!(
            "the bake's image {} is not there after its commit",
            image_ref(name)
        ))
    })
}

/// A new node's Docker volume seeded from the bake `name` (before its container starts).
pub async fn seed_node_volume(name: &str, node_volume: &str) -> Result<(), ProviderError> {
    copy_volume(&volume(name), node_volume).await
}

/// The bakes the profile's nodes boot from must be here (returned); else one line naming the
/// missing one and the bakes there are.
pub async fn check_profile_bakes(
    images: &[(&str, &str)],
) -> Result<Vec<BakedImage>, ProviderError> {
    if images.is_empty() {
        return Ok(Vec::new());
    }
    let bakes = list_bakes().await?;
    let mut used = Vec::new();
    for (field, wanted) in images {
        let found = bakes.iter().find(|b| b.name == *wanted);
        if let (Some(bake), true) = (found, volume_exists(wanted).await?) {
            used.push(bake.clone());
        } else {
            let names: Vec<String> = bakes.iter().map(|b| shown(&b.name)).collect();
            return Err(ProviderError::Resolve {
                what: format!("{field} `{}`", shown(wanted)),
                detail: format!(
                    "no bake of that name on this machine (the local provider boots nodes from \
                     bakes only; bakes: {})",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            });
        }
    }
    Ok(used)
}

/// `plan`'s line for a kind of local node made from a bake. Pure.
pub fn bake_line(role: &str, bake: &BakedImage) -> String {
    format!(
        "{role}: made from the bake `{}` (the image {}; its Docker data, the Horovod image {} in \
         it, copied into each new node's: not sent where that is the profile's image)",
        shown(&bake.name),
        image_ref(&shown(&bake.name)),
        bake.holds
            .as_deref()
            .map_or_else(|| "?".to_string(), crate::bake::short_image_id)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_quoted_for_the_commit() {
        assert_eq!(
            label_change("hvd_bake_tool", "hvd-cluster 0.1.0"),
            "LABEL hvd_bake_tool=\"hvd-cluster 0.1.0\""
        );
        assert_eq!(label_change("k", "a\"b\\c\nd"), "LABEL k=\"a\\\"b\\\\cd\"");
    }

    #[test]
    fn a_bake_is_read_from_its_image() {
        let json = r#"[{"Id":"sha256:1","RepoTags":["other:x","hvd-cluster/bake:b-1"],
            "Created":"2026-12-04T10:00:00Z","Size":5,
            "Config":{"Labels":{"hvd_bake_key":"k","hvd_bake_node":"c-worker-1",
            "hvd_bake_cluster":"c","hvd_bake_horovod_image":"sha256:2"}}},
            {"Id":"sha256:3","RepoTags":["hvd-cluster/bake:-bad"],"Config":{"Labels":null}}]"#;
        let images: Vec<Inspected> = serde_json::from_str(json).unwrap();
        let b = images[0].baked().unwrap();
        assert_eq!(
            (b.name.as_str(), b.node.as_deref(), b.holds.as_deref()),
            ("b-1", Some("c-worker-1"), Some("sha256:2"))
        );
        assert_eq!(images[0].label(KEY_PROPERTY), Some("k"));
        assert!(images[1].baked().is_none(), "a tag outside the grammar");
        assert_eq!(image_ref("b-1"), "hvd-cluster/bake:b-1");
        assert_eq!(volume("b-1"), "hvd-bake-b-1-docker");
        assert_eq!(
            bake_line("workers", &b),
            "workers: made from the bake `b-1` (the image hvd-cluster/bake:b-1; its Docker data, \
             the Horovod image sha256:2 in it, copied into each new node's: not sent where that \
             is the profile's image)"
        );
    }
}
