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
        Ok(())
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
