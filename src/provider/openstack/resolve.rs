//! Names a profile uses (flavors, images, networks) resolved to cloud ids before any change;
//! an unknown name is an error listing what the cloud has, with the nearest suggested.

use std::collections::BTreeMap;

use super::OpenStackProvider;
use crate::openstack::{OpenStackError, Query};
use crate::plan::FlavorSize;
use crate::profile::{nearest, Profile};
use crate::provider::ProviderError;

impl OpenStackProvider {
    /// Looks up every flavor, image and network the profile names; an unknown one is an
    /// error that lists what the cloud has and suggests the nearest.
    pub async fn resolve(&mut self, p: &Profile) -> Result<(), ProviderError> {
        let compute = self.os.compute();
        let flavors = compute.list_flavors().await?;
        let mut wanted_flavors: Vec<&str> = p.master.flavor.iter().map(String::as_str).collect();
        if p.workers.count > 0 {
            wanted_flavors.extend(p.workers.flavor.as_deref());
        }
        for name in wanted_flavors {
            let found = flavors
                .iter()
                .find(|f| f.name == name || f.id == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = flavors.iter().map(|f| f.name.as_str()).collect();
                    not_found("flavor", name, &names)
                })?;
            self.resolved
                .flavors
                .insert(name.to_string(), found.clone());
        }

        let image = self.os.image();
        let mut wanted_images: Vec<&str> = p.master.image.iter().map(String::as_str).collect();
        if p.workers.count > 0 {
            wanted_images.extend(p.worker_image());
        }
        for name in wanted_images {
            if self.resolved.images.contains_key(name) {
                continue;
            }
            match image.find_image(name).await {
                Ok(found) => {
                    self.resolved
                        .image_needs_gb
                        .insert(name.to_string(), image_need_gb(&found));
                    if found.hvd_bake_key.is_some() {
                        let holds = found.hvd_bake_horovod_image.clone().unwrap_or_default();
                        self.resolved.bakes.insert(name.to_string(), holds);
                    }
                    self.resolved.images.insert(name.to_string(), found.id);
                }
                Err(e) if e.is_not_found() || matches!(e, OpenStackError::NoSuchName { .. }) => {
                    let all = image.list_active_by_name("").await.unwrap_or_default();
                    let names: Vec<&str> = all.iter().filter_map(|i| i.name.as_deref()).collect();
                    return Err(not_found("image", name, &names));
                }
                Err(e) => return Err(e.into()),
            }
        }

        let network = self.os.network();
        let mut wanted_networks: Vec<&str> = Vec::new();
        wanted_networks.extend(p.network.external_network.as_deref());
        wanted_networks.extend(p.floating_ip.as_ref().map(|f| f.pool.as_str()));
        wanted_networks.extend(p.network.existing.as_deref());
        if !wanted_networks.is_empty() {
            let all = network.list_networks(&Query::new()).await?;
            for name in wanted_networks {
                let found = all
                    .iter()
                    .filter(|n| n.name == name || n.id == name)
                    .collect::<Vec<_>>();
                match found.as_slice() {
                    [one] => {
                        self.resolved
                            .networks
                            .insert(name.to_string(), one.id.clone());
                    }
                    [] => {
                        let names: Vec<&str> = all.iter().map(|n| n.name.as_str()).collect();
                        return Err(not_found("network", name, &names));
                    }
                    many => {
                        return Err(ProviderError::Resolve {
                            what: format!("network `{name}`"),
                            detail: format!("{} networks have this name; use its id", many.len()),
                        })
                    }
                }
            }
        }
        // An existing volume for /shared: found and checked before anything is made.
        if let Some(wanted) = &p.storage.volume {
            let found = self.find_existing_volume(&p.name, wanted).await?;
            if let Some(zone) = found.availability_zone.as_deref() {
                // A cloud whose policy hides the zones leaves the master where Nova puts it.
                let nova = compute.list_availability_zones().await.unwrap_or_default();
                self.resolved.master_zone = Some(master_zone(zone, &nova));
            }
            self.resolved.existing_volume_gb = Some(found.size);
            self.resolved.existing_volume = Some(found.id);
        } else if p.storage.volume_gb.is_some() {
            // The cluster's own volume, already there (kept across `down`, or beside a master
            // being replaced): the master goes into its zone, as for storage.volume.
            if let Some(zone) = self.own_shared_volume_zone(&p.name).await? {
                let nova = compute.list_availability_zones().await.unwrap_or_default();
                self.resolved.master_zone = Some(master_zone(&zone, &nova));
            }
        }
        if let Some(wanted) = &p.storage.share {
            let found = self.find_existing_share(&p.name, wanted).await?;
            self.resolved.existing_share_gb = found.size;
            self.resolved.existing_share = Some(found.id);
        }
        self.check_object_containers(p).await?;
        Ok(())
    }

    /// The object store's containers `[[data]]` reads: the catalog has an object store, and
    /// each container is there for this user (checked before anything is made).
    async fn check_object_containers(&self, p: &Profile) -> Result<(), ProviderError> {
        let containers = p.object_containers();
        if containers.is_empty() {
            return Ok(());
        }
        self.os
            .endpoint(crate::openstack::Service::ObjectStore)
            .await
            .map_err(|e| {
                ProviderError::Cloud(format!(
                    "[[data]] object_store: this cloud's catalog has no object store ({e})"
                ))
            })?;
        for c in &containers {
            let head =
                crate::openstack::Request::get(crate::openstack::Service::ObjectStore, c.as_str())
                    .query("format", "json")
                    .query("limit", "1");
            match self.os.request(&head).await {
                Ok(_) => {}
                Err(e) if e.status() == Some(404) => {
                    return Err(ProviderError::Resolve {
                        what: format!(
                            "[[data]] object_store: container `{}`",
                            crate::input::shown(c)
                        ),
                        detail: "not found in this project's object store".into(),
                    })
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// A root volume for the master and workers whose flavor has no root disk (Nova refuses
    /// an image-backed server there) and whose profile names no size: sized by
    /// [`auto_root_volume_gb`]. One line per role that got one.
    pub fn complete_profile(&self, p: &mut Profile, container_bytes: Option<u64>) -> Vec<String> {
        let mut said = Vec::new();
        let workers = p.workers.count > 0;
        let image_of_workers = p.worker_image().map(str::to_string);
        for (role, flavor, image, size, wanted) in [
            (
                "master",
                p.master.flavor.clone(),
                p.master.image.clone(),
                &mut p.master.root_volume_gb,
                true,
            ),
            (
                "workers",
                p.workers.flavor.clone(),
                image_of_workers,
                &mut p.workers.root_volume_gb,
                workers,
            ),
        ] {
            let (Some(flavor), Some(image)) = (flavor, image) else {
                continue;
            };
            let diskless = self
                .resolved
                .flavors
                .get(&flavor)
                .is_some_and(|f| f.disk == 0);
            if !wanted || size.is_some() || !diskless {
                continue;
            }
            let need = self
                .resolved
                .image_needs_gb
                .get(&image)
                .copied()
                .unwrap_or(0);
            let gb = auto_root_volume_gb(need, container_bytes);
            *size = Some(gb);
            let who = if role == "master" {
                "the master boots"
            } else {
                "every worker boots"
            };
            said.push(format!(
                "flavor `{}` has no root disk: {who} from a new {gb} GB volume (the image's {} GB and {} GB for Docker); set [{role}] root_volume_gb to choose",
                crate::input::shown(&flavor),
                need.max(MIN_SYSTEM_GB),
                gb.saturating_sub(need.max(MIN_SYSTEM_GB) as u32),
            ));
        }
        said
    }

    /// The master's and the workers' disks (see [`disk_line`]).
    pub fn disks(&self, p: &Profile) -> Vec<String> {
        let mut out = Vec::new();
        let roles = [
            (
                "master",
                p.master.flavor.as_deref(),
                p.master.root_volume_gb,
                &p.master.volume_type,
                true,
            ),
            (
                "workers",
                p.workers.flavor.as_deref(),
                p.workers.root_volume_gb,
                &p.workers.volume_type,
                p.workers.count > 0,
            ),
        ];
        for (role, flavor, volume, volume_type, wanted) in roles {
            let (Some(name), true) = (flavor, wanted) else {
                continue;
            };
            if let Some(f) = self.resolved.flavors.get(name) {
                out.push(disk_line(role, f, volume, volume_type.as_deref()));
            }
        }
        for (role, image, flavor, wanted) in [
            (
                "master",
                p.master.image.as_deref(),
                p.master.flavor.as_deref(),
                true,
            ),
            (
                "workers",
                p.worker_image(),
                p.workers.flavor.as_deref(),
                p.workers.count > 0,
            ),
        ] {
            let (Some(image), true) = (image, wanted) else {
                continue;
            };
            let ephemeral = flavor
                .and_then(|f| self.resolved.flavors.get(f))
                .is_some_and(|f| f.ephemeral > 0);
            if let Some(holds) = self.resolved.bakes.get(image) {
                out.push(super::bake::bake_line(role, image, holds, ephemeral));
            }
        }
        out.extend(shared_line(p));
        let shown = crate::input::shown;
        out.extend(self.resolved.master_zone.as_ref().map(|z| match z {
            MasterZone::Pinned(zone) => format!(
                "master: in availability zone `{}`, the zone of /shared's volume",
                shown(zone)
            ),
            MasterZone::Unpinned { volume_zone } => format!(
                "master: where Nova puts it; /shared's volume is in Cinder's zone `{}`, which \
                 Nova does not list (the cloud must allow attaching across zones)",
                shown(volume_zone)
            ),
        }));
        out
    }

    /// The availability zone the master is created in, when `storage.volume` needs one.
    pub(super) fn master_zone(&self) -> Option<String> {
        match &self.resolved.master_zone {
            Some(MasterZone::Pinned(zone)) => Some(zone.clone()),
            _ => None,
        }
    }

    /// Quota size of a resolved flavor.
    pub fn flavor_size(&self, name: &str) -> Option<FlavorSize> {
        self.resolved.flavors.get(name).map(|f| FlavorSize {
            vcpus: f.vcpus,
            ram_mb: f.ram,
        })
    }

    /// GPUs a flavor carries, read from its extra specs.
    pub fn flavor_gpus(&self, name: &str) -> u32 {
        self.resolved
            .flavors
            .get(name)
            .map(|f| gpus_in_extra_specs(&f.extra_specs))
            .unwrap_or(0)
    }
}

/// One kind of server's disks: `workers (m1.large): the flavor's 40 GB root disk; Docker's
/// data on its 100 GB ephemeral disk`. Pure.
pub fn disk_line(
    role: &str,
    flavor: &crate::openstack::Flavor,
    root_volume_gb: Option<u32>,
    volume_type: Option<&str>,
) -> String {
    let root = match root_volume_gb {
        Some(gb) => {
            let of_type = volume_type
                .map(|t| format!(" of type {}", crate::input::shown(t)))
                .unwrap_or_default();
            format!("boots from a {gb} GB volume{of_type}")
        }
        None => format!("the flavor's {} GB root disk", flavor.disk),
    };
    let ephemeral = if flavor.ephemeral > 0 {
        format!(
            "; Docker's data on its {} GB ephemeral disk",
            flavor.ephemeral
        )
    } else {
        String::new()
    };
    format!(
        "{role} ({}): {root}{ephemeral}",
        crate::input::shown(&flavor.name)
    )
}

/// The least a root volume holds for the system itself (GiB).
pub const MIN_SYSTEM_GB: u64 = 10;
/// Room for Docker when the container image's size is not known here (a pulled image).
pub const DEFAULT_DOCKER_ROOM_GB: u64 = 30;

/// GiB an image needs as a root volume: its `min_disk`, else its size rounded up.
fn image_need_gb(image: &crate::openstack::Image) -> u64 {
    const GIB: u64 = 1 << 30;
    let size = image.size.unwrap_or(0).div_ceil(GIB);
    image.min_disk.unwrap_or(0).max(size)
}

/// Where the master goes for `storage.volume`'s volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterZone {
    /// Into the volume's zone, which Nova has too.
    Pinned(String),
    /// Where Nova puts it: it lists no zone of the volume's name.
    Unpinned { volume_zone: String },
}

/// The master goes into the zone of the volume it attaches when Nova has a zone of that name
/// that takes servers: a cloud that refuses attaching across zones (Nova's `cross_az_attach =
/// False`) needs it, and any other is served as well. Else Nova chooses, and `plan` says why.
/// Pure.
pub fn master_zone(
    volume_zone: &str,
    nova: &[crate::openstack::compute::AvailabilityZone],
) -> MasterZone {
    if nova
        .iter()
        .any(|z| z.zone_name == volume_zone && z.zone_state.available)
    {
        MasterZone::Pinned(volume_zone.to_string())
    } else {
        MasterZone::Unpinned {
            volume_zone: volume_zone.to_string(),
        }
    }
}

/// Where /shared lives and what `stop` and `down` do to it, for `plan`. Pure.
pub fn shared_line(p: &Profile) -> Option<String> {
    use crate::profile::StorageKind;
    let names = crate::plan::Names(&p.name);
    if let (StorageKind::MasterNfs, Some(existing)) = (p.storage.kind, &p.storage.volume) {
        return Some(format!(
            "/shared: the existing volume `{}`, attached to the master, formatted only if blank; \
             never deleted (`down` leaves it, marked for the cluster)",
            crate::input::shown(existing)
        ));
    }
    if let (StorageKind::Manila, Some(existing)) = (p.storage.kind, &p.storage.share) {
        return Some(format!(
            "/shared: the existing Manila share `{}`, opened to the cluster's network; never \
             deleted (`down` leaves it, marked for the cluster, and takes back only its access rule)",
            crate::input::shown(existing)
        ));
    }
    Some(match (p.storage.kind, p.storage.volume_gb) {
        (StorageKind::None, _) => return None,
        (StorageKind::Manila, _) => format!(
            "/shared: the Manila share {} ({} GB), {}",
            names.share(),
            p.storage.size_gb.unwrap_or(10),
            if p.storage.keep {
                "kept by `down` (storage.keep) and mounted again by the next `up`"
            } else {
                "deleted by `down` (storage.keep = true keeps it)"
            }
        ),
        (StorageKind::MasterNfs, None) => "/shared: on the master's root disk, so in every \
             snapshot `stop` makes of the master, and deleted by `down`; storage.volume_gb = N \
             gives it a volume of its own (and storage.keep = true keeps that across `down`)"
            .to_string(),
        (StorageKind::MasterNfs, Some(gb)) => format!(
            "/shared: its own {gb} GB volume {}{}, attached to the master; {}",
            names.volume(),
            p.storage
                .volume_type
                .as_deref()
                .map(|t| format!(" (type {t})"))
                .unwrap_or_default(),
            if p.storage.keep {
                "kept by `down` (storage.keep) and attached again by the next `up`"
            } else {
                "deleted by `down` (storage.keep = true keeps it)"
            }
        ),
    })
}

/// The size of a root volume nobody asked for: the system's (`image_need_gb`, at least
/// [`MIN_SYSTEM_GB`]) plus Docker's room for the container image: twice its size where it
/// is known (the unpacked layers, and the archive the master keeps while workers fetch it),
/// plus 5 GB of slack; else [`DEFAULT_DOCKER_ROOM_GB`]. Pure.
pub fn auto_root_volume_gb(image_need_gb: u64, container_bytes: Option<u64>) -> u32 {
    const GIB: u64 = 1 << 30;
    let docker = container_bytes.map_or(DEFAULT_DOCKER_ROOM_GB, |b| (2 * b).div_ceil(GIB) + 5);
    let total = image_need_gb.max(MIN_SYSTEM_GB) + docker;
    u32::try_from(total)
        .unwrap_or(u32::MAX)
        .min(crate::profile::MAX_ROOT_VOLUME_GB)
}

pub(super) fn not_found(what: &str, name: &str, available: &[&str]) -> ProviderError {
    let mut detail = String::from("not found on this cloud");
    if let Some(best) = nearest(name, available) {
        detail.push_str(&format!("; did you mean `{best}`?"));
    }
    if !available.is_empty() {
        let mut sorted: Vec<&str> = available.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        detail.push_str(&format!(" (available: {})", sorted.join(", ")));
    }
    ProviderError::Resolve {
        what: format!("{what} `{}`", crate::input::shown(name)),
        detail,
    }
}

/// GPUs named in a flavor's extra specs: `pci_passthrough:alias` ("a100:2,t4:1"),
/// `resources:VGPU` / `resources:PGPU`, or a cloud's own `gpu:count` / `gpus`.
pub fn gpus_in_extra_specs(specs: &BTreeMap<String, String>) -> u32 {
    if let Some(alias) = specs.get("pci_passthrough:alias") {
        let n: u32 = alias
            .split(',')
            .filter_map(|a| {
                a.rsplit_once(':')
                    .and_then(|(_, n)| n.trim().parse::<u32>().ok())
            })
            .sum();
        if n > 0 {
            return n;
        }
    }
    for key in [
        "resources:VGPU",
        "resources:PGPU",
        "gpu:count",
        "gpus",
        "gpu_count",
    ] {
        if let Some(n) = specs.get(key).and_then(|v| v.trim().parse::<u32>().ok()) {
            return n;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn an_unasked_root_volume_holds_the_system_and_docker() {
        // a small cloud image, a pulled (unknown) container image
        assert_eq!(auto_root_volume_gb(2, None), 10 + 30);
        // min_disk above the floor, a 3 GiB container image: twice that and 5 of slack
        assert_eq!(auto_root_volume_gb(20, Some(3 * GIB)), 20 + 6 + 5);
        // a byte over a GiB rounds up
        assert_eq!(auto_root_volume_gb(0, Some(GIB / 2 + 1)), 10 + 2 + 5);
        // never above what the profile accepts
        assert_eq!(
            auto_root_volume_gb(u64::MAX / 2, Some(u64::MAX / 4)),
            crate::profile::MAX_ROOT_VOLUME_GB
        );
    }

    #[test]
    fn each_kind_of_server_says_its_disks() {
        let flavor = |disk, ephemeral| crate::openstack::Flavor {
            name: "g1.x".into(),
            disk,
            ephemeral,
            ..Default::default()
        };
        assert_eq!(
            disk_line("workers", &flavor(40, 100), None, None),
            "workers (g1.x): the flavor's 40 GB root disk; Docker's data on its 100 GB ephemeral disk"
        );
        assert_eq!(
            disk_line("master", &flavor(0, 0), Some(60), Some("ssd")),
            "master (g1.x): boots from a 60 GB volume of type ssd"
        );
    }

    #[test]
    fn an_image_needs_its_min_disk_or_its_size() {
        let image = |min_disk, size| crate::openstack::Image {
            min_disk,
            size,
            ..Default::default()
        };
        assert_eq!(image_need_gb(&image(Some(8), Some(GIB))), 8);
        assert_eq!(image_need_gb(&image(None, Some(3 * GIB + 1))), 4);
        assert_eq!(image_need_gb(&image(None, None)), 0);
    }

    #[test]
    fn the_master_goes_into_the_volumes_zone_where_nova_has_it() {
        use crate::openstack::compute::{AvailabilityZone, ZoneState};
        let zone = |name: &str, available: bool| AvailabilityZone {
            zone_name: name.into(),
            zone_state: ZoneState { available },
        };
        let nova = [
            zone("nova", true),
            zone("gpu-hall", true),
            zone("down-hall", false),
        ];
        assert_eq!(
            master_zone("gpu-hall", &nova),
            MasterZone::Pinned("gpu-hall".into())
        );
        assert_eq!(
            master_zone("down-hall", &nova),
            MasterZone::Unpinned {
                volume_zone: "down-hall".into()
            },
            "a zone that takes no servers is not one to pin"
        );
        assert_eq!(
            master_zone("ceph-az", &[]),
            MasterZone::Unpinned {
                volume_zone: "ceph-az".into()
            }
        );
        let parsed: Vec<AvailabilityZone> = serde_json::from_str(
            r#"[{"zoneName": "nova", "zoneState": {"available": true}, "hosts": null}]"#,
        )
        .unwrap();
        assert_eq!(parsed, vec![zone("nova", true)]);
    }

    /// `plan` says where /shared lives: the root disk (and so the shelve snapshot), a volume
    /// deleted or kept by `down`, or the share.
    #[test]
    fn plan_says_where_shared_lives() {
        let base = "name = \"demo\"\n[master]\nflavor = \"f\"\nimage = \"i\"\n[workers]\ncount = 0\n\
                    [network]\nexternal_network = \"public\"\n[access]\nallowed_cidrs = [\"10.0.0.0/8\"]\n";
        let line = |storage: &str| {
            let p = crate::profile::parse(
                std::path::Path::new("p.toml"),
                &format!("{base}[storage]\n{storage}"),
            )
            .unwrap();
            shared_line(&p)
        };
        let root = line("kind = \"master-nfs\"").unwrap();
        assert!(
            root.contains("on the master's root disk, so in every snapshot `stop` makes"),
            "{root}"
        );
        let volume = line("kind = \"master-nfs\"\nvolume_gb = 50\nvolume_type = \"ceph\"").unwrap();
        assert_eq!(volume, "/shared: its own 50 GB volume demo-shared-volume (type ceph), attached to the master; deleted by `down` (storage.keep = true keeps it)");
        let kept = line("kind = \"master-nfs\"\nvolume_gb = 50\nkeep = true").unwrap();
        assert!(
            kept.ends_with("kept by `down` (storage.keep) and attached again by the next `up`"),
            "{kept}"
        );
        let share = line("kind = \"manila\"\nsize_gb = 20").unwrap();
        assert_eq!(
            share,
            "/shared: the Manila share demo-share (20 GB), deleted by `down` (storage.keep = true keeps it)"
        );
        let kept = line("kind = \"manila\"\nkeep = true").unwrap();
        assert!(
            kept.ends_with("kept by `down` (storage.keep) and mounted again by the next `up`"),
            "{kept}"
        );
        let taken = line("kind = \"manila\"\nshare = \"datasets\"").unwrap();
        assert!(
            taken.starts_with("/shared: the existing Manila share `datasets`"),
            "{taken}"
        );
        assert_eq!(line("kind = \"none\""), None);
        let existing = line("kind = \"master-nfs\"\nvolume = \"datasets\"").unwrap();
        assert!(
            existing.starts_with("/shared: the existing volume `datasets`"),
            "{existing}"
        );
    }
}
