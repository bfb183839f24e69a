//! The diff: a profile's blueprint against what the cloud holds, into ordered actions.

use std::collections::BTreeMap;

use super::{Action, Blueprint, Health, Kind, Names, Observation, Observed, Plan};
use crate::profile::Profile;

/// Diffs the profile, as `blueprint` lays it out, against what the cloud holds.
pub fn plan(p: &Profile, blueprint: &dyn Blueprint, observed: &Observation) -> Plan {
    let names = Names(&p.name);
    // Two resources of one kind and name happen (a create whose answer was lost, then made
    // again): the healthiest one is the cluster's, the others are deleted below.
    let rank = |h: &Health| match h {
        Health::Ready => 0,
        Health::Pending | Health::Starting => 1,
        Health::Stopping | Health::Stopped => 2,
        Health::Failed(_) => 3,
    };
    let mut by_name: BTreeMap<(Kind, &str), &Observed> = BTreeMap::new();
    for o in &observed.resources {
        let key = (o.kind, o.name.as_str());
        match by_name.get(&key) {
            Some(have) if rank(&have.health) <= rank(&o.health) => {}
            _ => {
                by_name.insert(key, o);
            }
        }
    }
    let mut actions = Vec::new();
    // By id: a second resource under a claimed name is not claimed with it.
    let mut claimed: Vec<(Kind, &str)> = Vec::new();

    for d in blueprint.fixed(p) {
        let key = (d.kind(), d.name.as_str());
        match by_name.get(&key) {
            Some(o) => {
                claimed.push((o.kind, o.id.as_str()));
                actions.push(match &o.health {
                    // Kept data is never deleted to be made again: its error stays the cloud's.
                    Health::Failed(_) if o.kept => Action::Keep {
                        id: o.id.clone(),
                        desired: d,
                        pending: false,
                    },
                    Health::Failed(why) => Action::Replace {
                        old: (*o).clone(),
                        desired: d,
                        reason: why.clone(),
                    },
                    Health::Ready => Action::Keep {
                        id: o.id.clone(),
                        desired: d,
                        pending: false,
                    },
                    Health::Pending => Action::Keep {
                        id: o.id.clone(),
                        desired: d,
                        pending: true,
                    },
                    // Stopped on purpose: kept as it is (`up` starts it before applying).
                    Health::Stopping | Health::Stopped | Health::Starting => Action::Keep {
                        id: o.id.clone(),
                        desired: d,
                        pending: false,
                    },
                });
            }
            None => actions.push(Action::Create { desired: d }),
        }
    }

    // Workers: keep the healthy ones with the lowest numbers, drop the rest, and give new
    // ones numbers above any ever used.
    let mut workers: Vec<(u32, &Observed)> = observed
        .resources
        .iter()
        .filter(|o| o.kind == Kind::Server)
        .filter_map(|o| names.worker_index(&o.name).map(|i| (i, o)))
        .collect();
    workers.sort_by_key(|(i, _)| *i);
    let mut next = workers
        .iter()
        .map(|(i, _)| *i)
        .max()
        .unwrap_or(0)
        .max(observed.highest_worker_index)
        + 1;
    let mut kept = 0u32;
    for (index, o) in &workers {
        claimed.push((o.kind, o.id.as_str()));
        match &o.health {
            Health::Failed(why) if kept < p.workers.count => {
                actions.push(Action::Replace {
                    old: (*o).clone(),
                    desired: blueprint.worker(p, next),
                    reason: why.clone(),
                });
                next += 1;
                kept += 1;
            }
            health @ (Health::Ready
            | Health::Pending
            | Health::Stopping
            | Health::Stopped
            | Health::Starting)
                if kept < p.workers.count =>
            {
                actions.push(Action::Keep {
                    id: o.id.clone(),
                    desired: blueprint.worker(p, *index),
                    pending: *health == Health::Pending,
                });
                kept += 1;
            }
            _ => actions.push(Action::Delete { old: (*o).clone() }),
        }
    }
    while kept < p.workers.count {
        actions.push(Action::Create {
            desired: blueprint.worker(p, next),
        });
        next += 1;
        kept += 1;
    }

    // Anything else carrying the cluster's tag is no longer wanted; what is marked to be kept
    // stays (a profile that no longer names it leaves it where it is).
    for o in &observed.resources {
        if !claimed.contains(&(o.kind, o.id.as_str())) && !o.kept {
            actions.push(Action::Delete { old: o.clone() });
        }
    }
    Plan { actions }
}

/// `down`: every observed resource deleted, last level first, but those marked to be kept.
pub fn teardown(observed: &Observation) -> Plan {
    let mut actions: Vec<Action> = observed
        .resources
        .iter()
        .filter(|o| !o.kept)
        .map(|o| Action::Delete { old: o.clone() })
        .collect();
    actions.sort_by_key(|a| std::cmp::Reverse(a.kind().level()));
    Plan { actions }
}

/// What `down` deletes, a line per part: servers, volumes and shares by name (the ones a
/// user must recognise before saying yes; a long list shows its ends), the network pieces
/// counted. Names come from the cloud: shown escaped and shortened.
pub fn teardown_summary(observed: &Observation) -> Vec<String> {
    let of = |kind: Kind| -> Vec<&str> {
        let mut names: Vec<&str> = observed
            .resources
            .iter()
            .filter(|o| o.kind == kind && !o.kept)
            .map(|o| o.name.as_str())
            .collect();
        names.sort_unstable();
        names
    };
    let counted = |n: usize, label: &str| format!("{n} {label}{}", if n == 1 { "" } else { "s" });
    let mut lines = Vec::new();
    for kind in [Kind::Server, Kind::Volume, Kind::Share] {
        let names = of(kind);
        if names.is_empty() {
            continue;
        }
        let shown: Vec<String> = names.iter().map(|n| crate::input::shown(n)).collect();
        let listed = if shown.len() > 8 {
            format!(
                "{}, ... {} more ..., {}",
                shown[..3].join(", "),
                shown.len() - 5,
                shown[shown.len() - 2..].join(", ")
            )
        } else {
            shown.join(", ")
        };
        lines.push(format!("{}: {listed}", counted(names.len(), kind.label())));
    }
    let pieces: Vec<String> = [
        Kind::Network,
        Kind::Subnet,
        Kind::Router,
        Kind::SecurityGroup,
        Kind::FloatingIp,
        Kind::Keypair,
        Kind::VolumeAttachment,
    ]
    .into_iter()
    .map(|kind| (of(kind).len(), kind))
    .filter(|&(n, _)| n > 0)
    .map(|(n, kind)| counted(n, kind.label()))
    .collect();
    if !pieces.is_empty() {
        lines.push(format!("and {}", pieces.join(", ")));
    }
    for o in observed.resources.iter().filter(|o| o.kept) {
        lines.push(format!(
            "kept: {} {} ({}), marked storage.keep: the next `up` finds it with its files; \
             delete it by hand when it is no longer needed",
            o.kind.label(),
            crate::input::shown(o.shown_name()),
            crate::input::shown(&o.id)
        ));
    }
    lines
}
