use super::*;

/// The plan for a profile, laid out as its provider does.
fn plan(p: &Profile, observed: &Observation) -> Plan {
    super::plan(p, crate::provider::blueprint(p.provider), observed)
}

#[test]
fn node_roles_follow_the_naming_rule_exactly() {
    let n = Names("demo");
    assert_eq!(n.node_role("demo-master"), Some(Role::Master));
    assert_eq!(n.node_role("demo-worker-12"), Some(Role::Worker));
    assert_eq!(n.worker_index("demo-worker-12"), Some(12));
    for foreign in [
        "demo-worker-07",
        "demo-worker-+7",
        "demo-worker-",
        "demo-worker-1 ",
        "demo-master-1",
        "demo-workers-1",
        "other-master",
        "demo-worker-99999999999",
        "demo-worker-1\nHost *",
    ] {
        assert_eq!(n.node_role(foreign), None, "{foreign:?}");
    }
}
use crate::profile::{self, Profile};
use std::path::Path;

fn profile(workers: u32) -> Profile {
    let text = format!(
        r#"
name = "demo"
[master]
flavor = "m1.small"
image = "img"
[workers]
count = {workers}
flavor = "m1.medium"
[network]
external_network = "public"
[floating_ip]
pool = "public"
[access]
allowed_cidrs = ["198.51.100.0/24"]
[storage]
kind = "manila"
"#
    );
    profile::parse(Path::new("t.toml"), &text).unwrap()
}

fn observed_all(p: &Profile) -> Observation {
    let plan = plan(p, &Observation::default());
    let resources = plan
        .actions
        .iter()
        .map(|a| match a {
            Action::Create { desired } => Observed {
                kind: desired.kind(),
                name: desired.name.clone(),
                id: format!("id-{}", desired.name),
                health: Health::Ready,
                kept: false,
                called: None,
            },
            other => panic!("fresh plan must only create, got {other:?}"),
        })
        .collect();
    Observation {
        resources,
        highest_worker_index: 0,
    }
}

fn names_of(plan: &Plan, f: impl Fn(&Action) -> bool) -> Vec<String> {
    plan.actions
        .iter()
        .filter(|a| f(a))
        .map(|a| match a {
            Action::Create { desired } | Action::Keep { desired, .. } => desired.name.clone(),
            Action::Replace { old, desired, .. } => format!("{}->{}", old.name, desired.name),
            Action::Delete { old } => old.name.clone(),
        })
        .collect()
}

#[test]
fn fresh_cluster_creates_everything_in_levels() {
    let p = profile(3);
    let plan = plan(&p, &Observation::default());
    let c = plan.counts();
    // key, 2 groups, net, subnet, router, share, master, fip, 3 workers
    assert_eq!(
        c,
        PlanCounts {
            create: 12,
            keep: 0,
            replace: 0,
            delete: 0
        }
    );
    let levels = plan.creation_levels();
    let kinds: Vec<Vec<Kind>> = levels
        .iter()
        .map(|l| l.iter().map(|d| d.kind()).collect())
        .collect();
    assert_eq!(
        kinds[0],
        vec![
            Kind::Keypair,
            Kind::SecurityGroup,
            Kind::SecurityGroup,
            Kind::Network
        ]
    );
    assert_eq!(kinds[1], vec![Kind::Subnet]);
    assert_eq!(kinds[2], vec![Kind::Router, Kind::Share]);
    assert_eq!(kinds[3], vec![Kind::Server; 4]);
    assert_eq!(kinds[4], vec![Kind::FloatingIp]);
    let workers = names_of(
        &plan,
        |a| matches!(a, Action::Create { desired } if desired.name.contains("worker")),
    );
    assert_eq!(workers, ["demo-worker-1", "demo-worker-2", "demo-worker-3"]);
}

#[test]
fn complete_cluster_is_a_noop() {
    let p = profile(3);
    let plan = plan(&p, &observed_all(&p));
    assert!(plan.is_noop(), "{plan}");
    assert_eq!(plan.counts().keep, 12);
}

#[test]
fn scale_up_uses_new_numbers_and_scale_down_drops_highest() {
    let p = profile(3);
    let mut obs = observed_all(&p);
    obs.highest_worker_index = 7; // worker 4..7 existed once
    let up = plan(&profile(5), &obs);
    let created = names_of(&up, |a| matches!(a, Action::Create { .. }));
    assert_eq!(created, ["demo-worker-8", "demo-worker-9"]);

    let down = plan(&profile(1), &observed_all(&p));
    let deleted = names_of(&down, |a| matches!(a, Action::Delete { .. }));
    assert_eq!(deleted, ["demo-worker-2", "demo-worker-3"]);
}

#[test]
fn failed_worker_is_replaced_under_a_new_name() {
    let p = profile(2);
    let mut obs = observed_all(&p);
    for o in &mut obs.resources {
        if o.name == "demo-worker-1" {
            o.health = Health::Failed("NoValidHost".into());
        }
    }
    let plan = plan(&p, &obs);
    assert_eq!(
        names_of(&plan, |a| matches!(a, Action::Replace { .. })),
        ["demo-worker-1->demo-worker-3"]
    );
    assert_eq!(plan.deletions().len(), 1);
    assert_eq!(plan.counts().create, 0);
}

#[test]
fn a_stopped_cluster_is_kept_whole_never_replaced() {
    let p = profile(2);
    let mut obs = observed_all(&p);
    let healths = [Health::Stopped, Health::Stopping, Health::Starting];
    for (i, o) in obs
        .resources
        .iter_mut()
        .filter(|o| o.kind == Kind::Server)
        .enumerate()
    {
        o.health = healths[i % 3].clone();
    }
    let kept = plan(&p, &obs);
    assert!(kept.is_noop(), "{kept}");
    assert_eq!(kept.counts().keep, observed_all(&p).resources.len());
    // fewer workers wanted: a stopped one goes like a running one
    let down = plan(&profile(1), &obs);
    assert_eq!(
        names_of(&down, |a| matches!(a, Action::Delete { .. })),
        ["demo-worker-2"]
    );
}

#[test]
fn servers_state_says_where_the_cluster_stands() {
    let p = profile(1);
    let all = |h: Health| {
        let mut obs = observed_all(&p);
        for o in obs.resources.iter_mut().filter(|o| o.kind == Kind::Server) {
            o.health = h.clone();
        }
        obs.resources
    };
    assert_eq!(servers_state(&[]), "absent");
    assert_eq!(servers_state(&all(Health::Ready)), "running");
    assert_eq!(servers_state(&all(Health::Stopped)), "stopped");
    assert_eq!(servers_state(&all(Health::Starting)), "starting");
    let mut half = all(Health::Stopped);
    let first = half.iter().position(|o| o.kind == Kind::Server).unwrap();
    half[first].health = Health::Stopping;
    assert_eq!(servers_state(&half), "stopping");
    half[first].health = Health::Ready;
    assert_eq!(servers_state(&half), "degraded");
    half[first].health = Health::Failed("ERROR".into());
    assert_eq!(servers_state(&half), "degraded");
    // the network being ready says nothing about the servers
    let network_only: Vec<Observed> = all(Health::Ready)
        .into_iter()
        .filter(|o| o.kind != Kind::Server)
        .collect();
    assert_eq!(servers_state(&network_only), "absent");
}

#[test]
fn failed_master_is_recreated_with_its_name() {
    let p = profile(1);
    let mut obs = observed_all(&p);
    for o in &mut obs.resources {
        if o.name == "demo-master" {
            o.health = Health::Failed("ERROR".into());
        }
    }
    let plan = plan(&p, &obs);
    assert_eq!(
        names_of(&plan, |a| matches!(a, Action::Replace { .. })),
        ["demo-master->demo-master"]
    );
}

#[test]
fn tagged_leftovers_are_deleted_and_pending_kept() {
    let p = profile(1);
    let mut obs = observed_all(&p);
    obs.resources.push(Observed {
        kind: Kind::Volume,
        name: "demo-shared-volume".into(),
        id: "v".into(),
        health: Health::Ready,
        kept: false,
        called: None,
    });
    for o in &mut obs.resources {
        if o.name == "demo-worker-1" {
            o.health = Health::Pending;
        }
    }
    let plan = plan(&p, &obs);
    assert_eq!(
        names_of(&plan, |a| matches!(a, Action::Delete { .. })),
        ["demo-shared-volume"]
    );
    assert!(plan
        .actions
        .iter()
        .any(|a| matches!(a, Action::Keep { pending: true, .. })));
}

/// An interrupted `up` can leave a second, untagged router under the cluster's router name
/// (seen in tests/cloud_cli.rs under load): the tagged one is kept, the other deleted, in
/// either order of observation.
#[test]
fn a_duplicate_under_a_claimed_name_is_deleted() {
    let p = profile(1);
    for first in [true, false] {
        let mut obs = observed_all(&p);
        let stray = Observed {
            kind: Kind::Router,
            name: "demo-router".into(),
            id: "stray".into(),
            health: Health::Failed("left incomplete by an interrupted run".into()),
            kept: false,
            called: None,
        };
        if first {
            obs.resources.insert(0, stray);
        } else {
            obs.resources.push(stray);
        }
        let plan = plan(&p, &obs);
        let deleted: Vec<&str> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { old } => Some(old.id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deleted, ["stray"], "{plan:?}");
        assert!(plan.actions.iter().any(
            |a| matches!(a, Action::Keep { id, desired, .. } if id == "id-demo-router" && desired.name == "demo-router")
        ));
        assert!(!plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::Replace { .. })));
    }
}

#[test]
fn existing_network_creates_no_network() {
    let mut p = profile(1);
    p.network.existing = Some("private".into());
    p.network.external_network = None;
    let plan = plan(&p, &Observation::default());
    assert!(plan
        .actions
        .iter()
        .all(|a| !matches!(a.kind(), Kind::Network | Kind::Subnet | Kind::Router)));
    let server_net = plan.actions.iter().find_map(|a| match a {
        Action::Create {
            desired:
                Desired {
                    spec: Spec::Server { network, .. },
                    ..
                },
        } => Some(network.clone()),
        _ => None,
    });
    assert_eq!(server_net.as_deref(), Some("private"));
}

#[test]
fn local_cluster_is_a_network_a_volume_and_containers() {
    let text = "name = \"loc\"\nprovider = \"local\"\n[master]\n[workers]\ncount = 2\n";
    let p = profile::parse(Path::new("l.toml"), text).unwrap();
    let plan = plan(&p, &Observation::default());
    let created = names_of(&plan, |a| matches!(a, Action::Create { .. }));
    assert_eq!(
        created,
        [
            "loc-net",
            "loc-shared-volume",
            "loc-master",
            "loc-worker-1",
            "loc-worker-2"
        ]
    );
    assert!(plan
        .actions
        .iter()
        .all(|a| !matches!(a.kind(), Kind::SecurityGroup | Kind::Keypair)));
}

#[test]
fn teardown_deletes_in_reverse_level_order() {
    let p = profile(1);
    let plan = teardown(&observed_all(&p));
    let levels: Vec<u8> = plan.actions.iter().map(|a| a.kind().level()).collect();
    let mut sorted = levels.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(levels, sorted);
    assert_eq!(
        plan.actions.first().map(Action::kind),
        Some(Kind::FloatingIp)
    );
}

#[test]
fn teardown_summary_names_servers_and_disks_and_counts_the_network_pieces() {
    let p = profile(2);
    let lines = teardown_summary(&observed_all(&p));
    assert_eq!(
        lines[0],
        format!("3 servers: {0}-master, {0}-worker-1, {0}-worker-2", p.name)
    );
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("and 1 network, 1 subnet, 1 router, 2 security groups"),
        "{last}"
    );
    assert!(teardown_summary(&Observation::default()).is_empty());
}

#[test]
fn teardown_summary_shortens_long_lists_and_escapes_the_clouds_names() {
    let server = |name: String| Observed {
        kind: Kind::Server,
        id: name.clone(),
        name,
        health: Health::Ready,
        kept: false,
        called: None,
    };
    let mut resources: Vec<Observed> = (10..30).map(|i| server(format!("c-worker-{i}"))).collect();
    resources.push(server("c-master\n\u{1b}[2Jx".into()));
    let lines = teardown_summary(&Observation {
        resources,
        highest_worker_index: 0,
    });
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("21 servers: c-master\\n\\u{1b}[2Jx, c-worker-10, c-worker-11, ... 16 more ..., c-worker-28, c-worker-29"),
        "{}",
        lines[0]
    );
    assert!(!lines[0].contains('\n') && !lines[0].contains('\u{1b}'));
}

#[test]
fn quota_shortfall_has_the_numbers() {
    let p = profile(3);
    let plan = plan(&p, &Observation::default());
    let delta = QuotaDelta::of(&plan, |f| match f {
        "m1.small" => Some(FlavorSize {
            vcpus: 1,
            ram_mb: 2048,
        }),
        "m1.medium" => Some(FlavorSize {
            vcpus: 2,
            ram_mb: 4096,
        }),
        _ => None,
    });
    assert_eq!(delta.instances, 4);
    assert_eq!(delta.cores, 7);
    assert_eq!(delta.ram_mb, 2048 + 3 * 4096);
    assert_eq!(delta.security_group_rules, 1 + 2 + 2 * 2);
    let mut quotas = BTreeMap::new();
    quotas.insert(
        "instances",
        Quota {
            limit: 5,
            in_use: 2,
        },
    );
    quotas.insert(
        "cores",
        Quota {
            limit: -1,
            in_use: 100,
        },
    );
    quotas.insert(
        "floating_ips",
        Quota {
            limit: 10,
            in_use: 0,
        },
    );
    let short = shortfalls(&delta, &quotas);
    assert_eq!(short.len(), 1);
    assert_eq!(
        short[0].to_string(),
        "instances: needs 4 more, 2 of 5 in use (3 free)"
    );
}

/// The rules of the security group the plan creates under `group`.
fn created_group_rules(plan: &Plan, group: &str) -> Vec<Rule> {
    plan.actions
        .iter()
        .find_map(|a| match a {
            Action::Create {
                desired:
                    Desired {
                        name,
                        spec: Spec::SecurityGroup { rules },
                    },
            } if name == group => Some(rules.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the plan creates no security group {group}"))
}

#[test]
fn master_group_never_opens_to_anyone_else() {
    let p = profile(1);
    let plan = plan(&p, &Observation::default());
    let rules = created_group_rules(&plan, "demo-master-access");
    assert!(rules
        .iter()
        .all(|r| r.from == RuleSource::Cidr("198.51.100.0/24".into())));
    assert!(
        !rules.iter().any(|r| r.ports == Some((8888, 8888))),
        "jupyter is tunnel-only by default"
    );
}

#[test]
fn nodes_group_admits_the_image_port_and_nfs_only_from_its_own_members() {
    // The master's image server (bootstrap::IMAGE_PORT), NFS (2049) and Horovod's ports
    // travel inside the cluster: one rule, every port, from the group itself.
    let p = profile(1);
    let plan = plan(&p, &Observation::default());
    let rules = created_group_rules(&plan, "demo-nodes");
    assert_eq!(
        rules,
        vec![Rule {
            protocol: None,
            ports: None,
            from: RuleSource::Group("demo-nodes".into()),
        }]
    );
    let _ = crate::bootstrap::IMAGE_PORT;
}

#[test]
fn a_manila_share_is_granted_to_the_clusters_subnet() {
    let p = profile(1);
    let share = |p: &Profile| {
        plan(p, &Observation::default())
            .actions
            .iter()
            .find_map(|a| match a {
                Action::Create {
                    desired:
                        Desired {
                            spec: Spec::Share { access_cidr, .. },
                            ..
                        },
                } => Some(access_cidr.clone()),
                _ => None,
            })
            .unwrap()
    };
    assert_eq!(share(&p), p.subnet_cidr());
    let mut with_cidr = p.clone();
    with_cidr.network.cidr = Some("10.64.0.0/24".into());
    assert_eq!(share(&with_cidr), "10.64.0.0/24");
}

#[test]
fn roles_are_spelled_as_state_files_and_templates_have_them() {
    assert_eq!(serde_json::to_string(&Role::Master).unwrap(), "\"master\"");
    let saved: Role = serde_json::from_str("\"worker\"").unwrap();
    assert_eq!(saved, Role::Worker);
    assert_eq!(format!("{:<7}|", Role::Master), "master |");
    assert_eq!(Role::Worker.as_str(), "worker");
}

/// Root volumes: each server's own, counted in the volume quotas, shown in the plan; a
/// worker's replacement gets one too.
#[test]
fn root_volumes_are_shown_and_counted() {
    let mut p = profile(2);
    p.master.root_volume_gb = Some(40);
    p.workers.root_volume_gb = Some(25);
    p.workers.volume_type = Some("ssd\u{1b}[31m".into());
    let plan = plan(&p, &Observation::default());
    let delta = QuotaDelta::of(&plan, |_| None);
    assert_eq!((delta.volumes, delta.volume_gigabytes), (3, 40 + 2 * 25));
    let shown = plan.to_string();
    assert!(
        shown.contains("server             demo-master (boots from a 40 GB volume)\n"),
        "{shown}"
    );
    assert!(
        shown.contains("demo-worker-2 (boots from a 25 GB volume of type ssd\\u{1b}[31m)"),
        "the type is shown escaped: {shown}"
    );
    // Without root volumes nothing is said and nothing counted.
    let plain = super::plan(
        &profile(2),
        crate::provider::blueprint(crate::profile::ProviderKind::OpenStack),
        &Observation::default(),
    );
    assert_eq!(QuotaDelta::of(&plain, |_| None).volumes, 0);
    assert!(!plain.to_string().contains("volume)"));
}

/// A profile with /shared on a kept volume (`storage.keep`).
fn kept_volume_profile() -> Profile {
    let mut p = profile(1);
    p.storage.kind = profile::StorageKind::MasterNfs;
    p.storage.volume_gb = Some(20);
    p.storage.volume_type = Some("ceph".into());
    p.storage.keep = true;
    p
}

/// `down` leaves a kept volume and says so; a plan never deletes it, not even when it failed
/// or the profile no longer names it; the next `up` after `down` keeps it and attaches it.
#[test]
fn a_kept_volume_outlives_down_and_every_plan() {
    let p = kept_volume_profile();
    let fresh = plan(&p, &Observation::default());
    assert!(fresh.actions.iter().any(|a| matches!(
        a,
        Action::Create { desired: Desired { spec: Spec::Volume { size_gb: 20, volume_type: Some(t), keep: true, existing: None }, .. } } if t == "ceph"
    )));
    let mut obs = observed_all(&p);
    for o in &mut obs.resources {
        o.kept = o.kind == Kind::Volume;
    }
    let down = teardown(&obs);
    assert!(down.actions.iter().all(|a| a.kind() != Kind::Volume));
    assert!(down
        .actions
        .iter()
        .any(|a| a.kind() == Kind::VolumeAttachment));
    let said = teardown_summary(&obs);
    assert!(said.iter().all(|l| !l.contains("1 volume:")), "{said:?}");
    assert!(
        said.last().unwrap().starts_with(
            "kept: volume demo-shared-volume (id-demo-shared-volume), marked storage.keep"
        ),
        "{said:?}"
    );

    // After `down`: only the volume is there; `up` makes the rest and keeps it.
    let left = Observation {
        resources: obs.resources.iter().filter(|o| o.kept).cloned().collect(),
        highest_worker_index: 0,
    };
    let again = plan(&p, &left);
    assert!(again
        .actions
        .iter()
        .any(|a| matches!(a, Action::Keep { id, .. } if id == "id-demo-shared-volume")));
    assert!(again.actions.iter().any(
        |a| matches!(a, Action::Create { desired } if desired.kind() == Kind::VolumeAttachment)
    ));

    // Failed, or no longer in the profile: still not deleted.
    let mut failed = left.clone();
    failed.resources[0].health = Health::Failed("volume status error".into());
    assert!(plan(&p, &failed)
        .actions
        .iter()
        .all(|a| !matches!(a, Action::Delete { .. } | Action::Replace { .. })));
    let mut without = p.clone();
    without.storage.volume_gb = None;
    without.storage.volume_type = None;
    without.storage.keep = false;
    assert!(plan(&without, &left)
        .actions
        .iter()
        .all(|a| !matches!(a, Action::Delete { .. })));
}

/// `storage.volume`: the volume is taken, not made (kept); once taken it goes by the cluster's
/// volume name, so the next plan keeps it and deletes nothing.
#[test]
fn an_existing_volume_is_taken_and_then_kept() {
    let mut p = profile(1);
    p.storage.kind = profile::StorageKind::MasterNfs;
    p.storage.volume = Some("datasets".into());
    let fresh = plan(&p, &Observation::default());
    assert!(fresh.actions.iter().any(|a| matches!(
        a,
        Action::Create { desired: Desired { name, spec: Spec::Volume { size_gb: 0, keep: true, existing: Some(e), .. } } }
            if e == "datasets" && name == "demo-shared-volume"
    )));
    let mut obs = observed_all(&p);
    for o in &mut obs.resources {
        o.kept = o.kind == Kind::Volume;
        if o.kept {
            o.called = Some("datasets".into());
        }
    }
    let again = plan(&p, &obs);
    assert!(again.is_noop(), "{again:?}");
    assert!(teardown(&obs)
        .actions
        .iter()
        .all(|a| a.kind() != Kind::Volume));
    // `down` names it as the user did, not by the cluster's name for it
    let said = teardown_summary(&obs);
    assert!(
        said.last()
            .unwrap()
            .starts_with("kept: volume datasets (id-demo-shared-volume), marked storage.keep"),
        "{said:?}"
    );
}

/// `storage.share` and a kept share: the share is taken (or made) marked to be kept, costs no
/// quota when taken, and neither the next plan nor `down` deletes it.
#[test]
fn an_existing_share_is_taken_and_a_kept_share_outlives_down() {
    let mut p = profile(1);
    p.storage.share = Some("datasets".into());
    let fresh = plan(&p, &Observation::default());
    assert!(fresh.actions.iter().any(|a| matches!(
        a,
        Action::Create { desired: Desired { name, spec: Spec::Share { keep: true, existing: Some(e), .. } } }
            if e == "datasets" && name == "demo-share"
    )));
    let q = QuotaDelta::of(&fresh, |_| None);
    assert_eq!(
        (q.shares, q.share_gigabytes),
        (0, 0),
        "a taken share is no new quota"
    );

    let mut kept = profile(1);
    kept.storage.keep = true;
    let made = plan(&kept, &Observation::default());
    assert!(made.actions.iter().any(|a| matches!(
        a,
        Action::Create {
            desired: Desired {
                spec: Spec::Share {
                    keep: true,
                    existing: None,
                    size_gb: 10,
                    ..
                },
                ..
            }
        }
    )));
    assert_eq!(QuotaDelta::of(&made, |_| None).shares, 1);
    let mut obs = observed_all(&kept);
    for o in &mut obs.resources {
        o.kept = o.kind == Kind::Share;
    }
    assert!(plan(&kept, &obs).is_noop());
    let down = teardown(&obs);
    assert!(
        down.actions.iter().all(|a| a.kind() != Kind::Share),
        "{down:?}"
    );
    assert!(teardown_summary(&obs)
        .iter()
        .any(|l| l.starts_with("kept: share demo-share (")));
}
