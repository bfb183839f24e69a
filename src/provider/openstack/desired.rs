//! What a cluster on OpenStack is made of: a keypair, two security groups (the nodes' own,
//! open only to its members, and the master's, open to `access.allowed_cidrs`), a network,
//! subnet and router unless an existing network is named, the share or volume `/shared`
//! needs, the master (with a floating IP) and the workers. Pure: the profile in, resources out.

use crate::plan::{Blueprint, Desired, Names, Role, RootVolume, Rule, RuleSource, Spec};
use crate::profile::{JupyterAccess, Profile, StorageKind};

/// The OpenStack layout of a cluster.
pub struct OpenStackBlueprint;

impl Blueprint for OpenStackBlueprint {
    fn fixed(&self, p: &Profile) -> Vec<Desired> {
        let n = Names(&p.name);
        let mut out = vec![Desired {
            name: n.keypair(),
            spec: Spec::Keypair,
        }];

        let nodes = n.nodes_group();
        out.push(Desired {
            name: nodes.clone(),
            spec: Spec::SecurityGroup {
                rules: vec![Rule {
                    protocol: None,
                    ports: None,
                    from: RuleSource::Group(nodes.clone()),
                }],
            },
        });
        let mut master_rules = Vec::new();
        for cidr in &p.access.allowed_cidrs {
            master_rules.push(Rule {
                protocol: Some("tcp".into()),
                ports: Some((22, 22)),
                from: RuleSource::Cidr(cidr.clone()),
            });
            if p.access.jupyter == JupyterAccess::Public {
                master_rules.push(Rule {
                    protocol: Some("tcp".into()),
                    ports: Some((8888, 8888)),
                    from: RuleSource::Cidr(cidr.clone()),
                });
            }
            master_rules.push(Rule {
                protocol: Some("icmp".into()),
                ports: None,
                from: RuleSource::Cidr(cidr.clone()),
            });
        }
        out.push(Desired {
            name: n.master_group(),
            spec: Spec::SecurityGroup {
                rules: master_rules,
            },
        });

        let network = match &p.network.existing {
            Some(existing) => existing.clone(),
            None => {
                out.push(Desired {
                    name: n.network(),
                    spec: Spec::Network,
                });
                out.push(Desired {
                    name: n.subnet(),
                    spec: Spec::Subnet {
                        network: n.network(),
                        cidr: p.subnet_cidr().to_string(),
                        dns_nameservers: p.network.dns_nameservers.clone(),
                    },
                });
                if let Some(ext) = &p.network.external_network {
                    out.push(Desired {
                        name: n.router(),
                        spec: Spec::Router {
                            external_network: ext.clone(),
                            subnet: n.subnet(),
                        },
                    });
                }
                n.network()
            }
        };

        match p.storage.kind {
            StorageKind::Manila => out.push(Desired {
                name: n.share(),
                spec: Spec::Share {
                    // A taken share has its own size; it is no new quota (see quota.rs).
                    size_gb: if p.storage.share.is_some() {
                        0
                    } else {
                        p.storage.size_gb.unwrap_or(10)
                    },
                    share_type: p.storage.share_type.clone(),
                    access_cidr: share_access_cidr(p),
                    network: network.clone(),
                    keep: p.storage.keep || p.storage.share.is_some(),
                    existing: p.storage.share.clone(),
                },
            }),
            StorageKind::MasterNfs => {
                let volume = match (&p.storage.volume, p.storage.volume_gb) {
                    (Some(existing), _) => Some(Spec::Volume {
                        size_gb: 0,
                        volume_type: None,
                        keep: true,
                        existing: Some(existing.clone()),
                    }),
                    (None, Some(size_gb)) => Some(Spec::Volume {
                        size_gb,
                        volume_type: p.storage.volume_type.clone(),
                        keep: p.storage.keep,
                        existing: None,
                    }),
                    (None, None) => None,
                };
                if let Some(spec) = volume {
                    out.push(Desired {
                        name: n.volume(),
                        spec,
                    });
                    out.push(Desired {
                        name: n.volume_attachment(),
                        spec: Spec::VolumeAttachment {
                            volume: n.volume(),
                            server: n.master(),
                        },
                    });
                }
            }
            StorageKind::None => {}
        }

        out.push(Desired {
            name: n.master(),
            spec: Spec::Server {
                role: Role::Master,
                index: 0,
                flavor: p.master.flavor.clone().unwrap_or_default(),
                image: p.master.image.clone().unwrap_or_default(),
                security_groups: vec![nodes.clone(), n.master_group()],
                network: network.clone(),
                root_volume: RootVolume::of(p.master.root_volume_gb, &p.master.volume_type),
            },
        });
        if let Some(fip) = &p.floating_ip {
            out.push(Desired {
                name: n.floating_ip(),
                spec: Spec::FloatingIp {
                    pool: fip.pool.clone(),
                    server: n.master(),
                },
            });
        }
        out
    }

    fn worker(&self, p: &Profile, index: u32) -> Desired {
        let n = Names(&p.name);
        let network = p.network.existing.clone().unwrap_or_else(|| n.network());
        let security_groups = vec![n.nodes_group()];
        Desired {
            name: n.worker(index),
            spec: Spec::Server {
                role: Role::Worker,
                index,
                flavor: p.workers.flavor.clone().unwrap_or_default(),
                image: p.worker_image().unwrap_or_default().to_string(),
                security_groups,
                network,
                root_volume: RootVolume::of(p.workers.root_volume_gb, &p.workers.volume_type),
            },
        }
    }
}

/// The network a Manila share is opened to: the existing network's `cidr`, else the subnet
/// the cluster makes. Pure.
pub fn share_access_cidr(p: &Profile) -> String {
    p.network
        .cidr
        .clone()
        .unwrap_or_else(|| p.subnet_cidr().to_string())
}
