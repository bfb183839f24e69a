//! Horovod's timeline as `run --timeline` records it: Chrome's trace format, a JSON array of
//! events in which each tensor is a "process" (`pid`), named by a `process_name` metadata
//! event; a collective's negotiation is a `NEGOTIATE_<OP>` span whose `X` ticks are named by
//! the rank that said it was ready.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The events, from a file that must be valid JSON as it is (Horovod closes the array after
/// every event).
pub fn events(text: &str) -> Vec<Value> {
    let parsed: Value = serde_json::from_str(text).unwrap_or_else(|e| {
        panic!(
            "the timeline is not valid JSON ({e}); it ends with {:?}",
            &text[text.len().saturating_sub(200)..]
        )
    });
    parsed
        .as_array()
        .unwrap_or_else(|| panic!("the timeline is not a JSON array"))
        .clone()
}

/// Some tensor's allreduce negotiation has a tick from each of ranks 0..size, and an
/// allreduce ran.
pub fn assert_every_rank_negotiated(events: &[Value], size: u32) {
    let mut negotiating: BTreeSet<i64> = BTreeSet::new();
    let mut ticks: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    let mut allreduces = 0;
    for e in events {
        let (Some(ph), Some(pid)) = (e["ph"].as_str(), e["pid"].as_i64()) else {
            continue;
        };
        let name = e["name"].as_str().unwrap_or("");
        match ph {
            "B" if name == "NEGOTIATE_ALLREDUCE" => {
                negotiating.insert(pid);
            }
            "B" if name == "ALLREDUCE" => allreduces += 1,
            "X" if negotiating.contains(&pid) => {
                ticks.entry(pid).or_default().insert(name.to_string());
            }
            "E" => {
                negotiating.remove(&pid);
            }
            _ => {}
        }
    }
    let all: BTreeSet<String> = (0..size).map(|r| r.to_string()).collect();
    let complete = ticks.values().filter(|seen| all.is_subset(seen)).count();
    assert!(
        complete > 0,
        "no allreduce negotiation with a tick from each of ranks 0..{size}: {ticks:?} ({} events)",
        events.len()
    );
    assert!(
        allreduces > 0,
        "no ALLREDUCE span in {} events",
        events.len()
    );
}
