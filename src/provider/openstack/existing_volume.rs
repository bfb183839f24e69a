//! `storage.volume`: a volume the project already has, taken as /shared's. Found by id or
//! by its one name, checked (not another cluster's, not attached elsewhere), then marked with
//! the cluster (and kept) so that every later look finds it under the cluster's volume name.

use std::collections::BTreeMap;

use super::{OpenStackProvider, KEEP_KEY, META_KEY};
use crate::openstack::{OpenStackError, Volume};
use crate::provider::ProviderError;

/// Cinder metadata: the name a taken volume goes by in the cluster (its own name stays).
pub const NAME_KEY: &str = "hvd-name";

impl OpenStackProvider {
    /// The availability zone of the volume `volume_gb` made for cluster `cluster`'s /shared,
    /// when it exists (found by the cluster's mark and its name, never a root volume).
    pub(super) async fn own_shared_volume_zone(
        &self,
        cluster: &str,
    ) -> Result<Option<String>, ProviderError> {
        let meta = BTreeMap::from([(META_KEY.to_string(), cluster.to_string())]);
        let volumes = match self.os.volume().list_volumes(&meta).await {
            Ok(v) => v,
            Err(OpenStackError::Catalog { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let own = crate::plan::Names(cluster).volume();
        Ok(volumes
            .into_iter()
            .filter(|v| !v.metadata.contains_key(super::ROOT_OF_KEY))
            .find(|v| v.name.as_deref() == Some(own.as_str()) && !v.status.starts_with("error"))
            .and_then(|v| v.availability_zone))
    }

    /// The volume `wanted` names (an id, else exactly one volume of that name), checked for
    /// `cluster` (see [`takeable`]).
    pub(super) async fn find_existing_volume(
        &self,
        cluster: &str,
        wanted: &str,
    ) -> Result<Volume, ProviderError> {
        let all = self.os.volume().list_volumes(&BTreeMap::new()).await?;
        let one = named(
            FIELD,
            "volume",
            &all,
            wanted,
            |v| &v.id,
            |v| v.name.as_deref(),
        )?;
        takeable(one, cluster).map_err(|why| refused(FIELD, wanted, why))?;
        Ok(one.clone())
    }

    /// Takes the volume: marks it with the cluster, kept, under `name`; returns its id. The
    /// one `resolve` found is looked at again by id (it may have changed since), not searched.
    pub(super) async fn take_existing_volume(
        &self,
        cluster: &str,
        name: &str,
        wanted: &str,
    ) -> Result<String, ProviderError> {
        let api = self.os.volume();
        let v = match &self.resolved.existing_volume {
            Some(id) => {
                let v = api.get_volume(id).await?.ok_or_else(|| {
                    refused(
                        FIELD,
                        wanted,
                        "it was deleted since it was looked up".into(),
                    )
                })?;
                takeable(&v, cluster).map_err(|why| refused(FIELD, wanted, why))?;
                v
            }
            None => self.find_existing_volume(cluster, wanted).await?,
        };
        api.add_metadata(&v.id, &marks(cluster, name)).await?;
        Ok(v.id)
    }
}

/// A taken volume's own name, where the cluster calls it by another ([`NAME_KEY`]).
pub fn called(v: &Volume) -> Option<String> {
    own_name_if_other(&v.metadata, v.name.as_ref())
}

/// A taken volume's or share's own name (`name`) where its [`NAME_KEY`] is another. Pure.
pub(super) fn own_name_if_other(
    metadata: &BTreeMap<String, String>,
    name: Option<&String>,
) -> Option<String> {
    let ours = metadata.get(NAME_KEY)?;
    name.filter(|own| *own != ours).cloned()
}

/// The profile's key this module serves.
const FIELD: &str = "storage.volume";

/// The one of `all` that `wanted` names (its id, else the only one of that name), or why
/// not: no such name (with the names there are), or several of it. For `storage.volume`
/// and `storage.share` alike. Pure.
pub(super) fn named<'a, T>(
    field: &str,
    kind: &str,
    all: &'a [T],
    wanted: &str,
    id: impl Fn(&T) -> &str,
    name: impl Fn(&T) -> Option<&str>,
) -> Result<&'a T, ProviderError> {
    let by_id: Vec<&T> = all.iter().filter(|x| id(x) == wanted).collect();
    let found: Vec<&T> = if by_id.is_empty() {
        all.iter().filter(|x| name(x) == Some(wanted)).collect()
    } else {
        by_id
    };
    match found.as_slice() {
        [one] => Ok(one),
        [] => {
            let names: Vec<&str> = all.iter().filter_map(&name).collect();
            Err(super::resolve::not_found(kind, wanted, &names))
        }
        many => Err(refused(
            field,
            wanted,
            format!("{} {kind}s have this name; use its id", many.len()),
        )),
    }
}

/// `storage.volume` or `storage.share` refused, with why.
pub(super) fn refused(field: &str, wanted: &str, detail: String) -> ProviderError {
    ProviderError::Resolve {
        what: format!("{field} `{}`", crate::input::shown(wanted)),
        detail,
    }
}

/// The metadata that makes a taken volume or share the cluster's /shared, kept.
pub(super) fn marks(cluster: &str, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (META_KEY.to_string(), cluster.to_string()),
        (KEEP_KEY.to_string(), "true".to_string()),
        (NAME_KEY.to_string(), name.to_string()),
    ])
}

/// Whether `cluster` may take this volume: not marked for another cluster (whose /shared it
/// is), usable (available, or in use by this cluster already), not a server's root volume.
/// The reason, shortened and escaped, when not. Pure.
pub fn takeable(v: &Volume, cluster: &str) -> Result<(), String> {
    let shown = crate::input::shown;
    if let Some(owner) = v.metadata.get(META_KEY).filter(|o| o.as_str() != cluster) {
        return Err(format!(
            "it is cluster `{}`'s (its `{META_KEY}` mark); a volume is one cluster's /shared at a time",
            shown(owner)
        ));
    }
    if v.metadata.contains_key(super::ROOT_OF_KEY) {
        return Err("it is a server's root volume".to_string());
    }
    let ours = v.metadata.get(META_KEY).is_some_and(|o| o == cluster);
    match v.status.as_str() {
        "available" => Ok(()),
        "in-use" | "attaching" | "reserved" if ours => Ok(()),
        "in-use" | "attaching" | "reserved" => Err(format!(
            "it is attached to server {}; detach it first",
            v.attachments
                .first()
                .and_then(|a| a.server_id.as_deref())
                .map(shown)
                .unwrap_or_else(|| "?".into())
        )),
        other => Err(format!("its status is `{}`, not available", shown(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openstack::volume::VolumeAttachmentInfo;

    fn volume(status: &str, meta: &[(&str, &str)]) -> Volume {
        Volume {
            id: "v-1".into(),
            name: Some("datasets".into()),
            status: status.into(),
            size: 100,
            metadata: meta
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            attachments: vec![VolumeAttachmentInfo {
                server_id: Some("srv\n\u{1b}[2J".into()),
                ..VolumeAttachmentInfo::default()
            }],
            ..Volume::default()
        }
    }

    #[test]
    fn a_volume_is_taken_only_when_free_and_no_other_clusters() {
        assert_eq!(takeable(&volume("available", &[]), "demo"), Ok(()));
        assert_eq!(
            takeable(&volume("in-use", &[("hvd-cluster", "demo")]), "demo"),
            Ok(())
        );
        let other = takeable(&volume("available", &[("hvd-cluster", "other\n")]), "demo");
        assert!(
            other
                .as_ref()
                .is_err_and(|e| e.starts_with("it is cluster `other\\n`'s")),
            "{other:?}"
        );
        let attached = takeable(&volume("in-use", &[]), "demo").unwrap_err();
        assert!(
            attached.contains("attached to server srv\\n\\u{1b}[2J")
                && !attached.contains('\u{1b}'),
            "{attached}"
        );
        assert!(takeable(&volume("available", &[("hvd-root-of", "x")]), "demo").is_err());
        assert!(takeable(&volume("error", &[]), "demo")
            .is_err_and(|e| e.contains("`error`, not available")));
        assert_eq!(
            marks("demo", "demo-shared-volume"),
            BTreeMap::from([
                ("hvd-cluster".to_string(), "demo".to_string()),
                ("hvd-keep".to_string(), "true".to_string()),
                ("hvd-name".to_string(), "demo-shared-volume".to_string()),
            ])
        );
    }

    /// A taken volume is shown by its own name; one the cluster made (or never took) has none
    /// other than the cluster's.
    #[test]
    fn a_taken_volume_keeps_its_own_name_for_the_user() {
        let taken = volume("in-use", &[("hvd-name", "demo-shared-volume")]);
        assert_eq!(called(&taken), Some("datasets".to_string()));
        let made = Volume {
            name: Some("demo-shared-volume".into()),
            ..volume("in-use", &[("hvd-name", "demo-shared-volume")])
        };
        assert_eq!(called(&made), None);
        assert_eq!(called(&volume("in-use", &[])), None);
    }
}
