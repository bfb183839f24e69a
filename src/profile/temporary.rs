//! The profile of the one-server cluster `bake --temporary` makes, bakes and deletes: derived
//! from the user's profile, written into that cluster's own folder, read back as any profile.

use std::path::Path;

use super::{LifecycleSpec, MasterSpec, Profile, StorageKind, StorageSpec};
use crate::input::{ClusterName, Refused};

/// What the temporary cluster's name adds to the profile's.
const SUFFIX: &str = "-baking";

impl Profile {
    /// The temporary cluster of `bake --temporary`: `<name>-baking`, whose master has the
    /// workers' flavor, image and root disk (a bake is what workers boot from; a GPU flavor's
    /// driver comes with it), with no workers, no /shared, no data, no autostop, and no
    /// certificate files (its Jupyter is never shown). `folder` is the profile's own folder,
    /// absolute: `container.registry_ca` is made absolute from it, as the temporary profile
    /// lives in another folder. Pure.
    pub fn for_a_temporary_bake(&self, folder: &Path) -> Result<Profile, Refused> {
        let name = format!("{}{SUFFIX}", self.name.as_str());
        let name = ClusterName::parse(&name).map_err(|e| {
            Refused(format!(
                "the temporary cluster's name: {}; bake a node of a running cluster instead \
                 (`up`, then `bake` without --temporary)",
                e.0
            ))
        })?;
        let mut p = self.clone();
        p.name = name;
        p.master = MasterSpec {
            flavor: self
                .workers
                .flavor
                .clone()
                .or_else(|| self.master.flavor.clone()),
            image: self.worker_image().map(str::to_string),
            slots: None,
            root_volume_gb: self.workers.root_volume_gb,
            volume_type: self.workers.volume_type.clone(),
        };
        p.workers.count = 0;
        p.storage = StorageSpec {
            kind: StorageKind::None,
            ..StorageSpec::default()
        };
        p.data.clear();
        p.lifecycle = LifecycleSpec::default();
        p.access.jupyter_cert = None;
        p.access.jupyter_key = None;
        p.container.registry_ca = self
            .container
            .registry_ca
            .as_ref()
            .map(|ca| folder.join(ca).to_string_lossy().into_owned());
        Ok(p)
    }

    /// The profile as TOML, which [`super::parse`] reads back as the same profile.
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }
}
