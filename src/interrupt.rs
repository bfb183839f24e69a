//! Ctrl-C while the cloud is making something. Dropping the command at once abandons a create
//! call the cloud still finishes: the resource appears after the next `up` has looked for it,
//! and that `up` makes a second one (seen with a router under load, tests/cloud_cli.rs). So a
//! create is a [`Call`] from before its request to after its id is recorded in the state; on
//! Ctrl-C no new one starts, and the command is dropped once none is under way (`main.rs`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Whether Ctrl-C was pressed, and how many calls are under way.
pub struct Gate {
    requested: AtomicBool,
    under_way: AtomicUsize,
}

/// The process's gate: `main.rs` requests, the engines' creates begin calls.
pub static GATE: Gate = Gate::new();

impl Gate {
    const fn new() -> Gate {
        Gate {
            requested: AtomicBool::new(false),
            under_way: AtomicUsize::new(0),
        }
    }

    /// Ctrl-C was pressed: calls not yet started are not started.
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
    }

    /// How many [`Call`]s are under way.
    pub fn under_way(&self) -> usize {
        self.under_way.load(Ordering::SeqCst)
    }

    /// `None` once Ctrl-C was pressed: the caller skips the call. Counted before the check,
    /// so a command dropped when [`Gate::under_way`] reads 0 has no call between the two.
    pub fn begin(&self) -> Option<Call<'_>> {
        self.under_way.fetch_add(1, Ordering::SeqCst);
        if self.requested.load(Ordering::SeqCst) {
            self.under_way.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Call(self))
    }
}

/// A call under way, counted until dropped (after its result is recorded).
pub struct Call<'a>(&'a Gate);

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.0.under_way.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_until_dropped_and_none_starts_after_a_request() {
        let gate = Gate::new();
        let first = gate.begin().expect("before Ctrl-C a call starts");
        let second = gate.begin().expect("two at once");
        assert_eq!(gate.under_way(), 2);
        drop(first);
        gate.request();
        assert!(gate.begin().is_none(), "after Ctrl-C no call starts");
        assert_eq!(gate.under_way(), 1, "the one under way is still counted");
        drop(second);
        assert_eq!(gate.under_way(), 0);
    }
}
