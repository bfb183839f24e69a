//! Runs a [`Plan`] against a [`Provider`]: deletions last level first, then creations level by
//! level, in parallel inside a level with a bound, saving state after every step, waiting
//! with deadlines and one list call per resource kind per tick.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt, TryStreamExt};

use crate::plan::{Desired, Health, Kind, Observation, Observed, Plan};
use crate::progress::Progress;
use crate::provider::{Provider, ProviderError};
use crate::state::{ClusterDir, ClusterState, InFlight, Resource, StateError};
use crate::wait::{wait_until, Probe, WaitError};

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("{action} {kind} {name}: {source}")]
    Step {
        action: &'static str,
        kind: Kind,
        name: String,
        source: ProviderError,
    },
    #[error("observing the cluster: {0}")]
    Observe(ProviderError),
    #[error("timed out after {secs}s waiting for {what}")]
    Timeout { what: String, secs: u64 },
    #[error("{kind} {name} failed: {reason}")]
    Failed {
        kind: Kind,
        name: String,
        reason: String,
    },
    #[error(transparent)]
    State(#[from] StateError),
}

/// How long each kind of wait may take, and how often to poll.
#[derive(Debug, Clone)]
pub struct Deadlines {
    pub server_active: Duration,
    pub share_available: Duration,
    pub deleted: Duration,
    pub tick: Duration,
    /// How many times a resource that fails while being made (a server in ERROR, a share
    /// left without its access rule) is deleted and created again.
    pub recreate_retries: u32,
    /// Most concurrent calls inside one level.
    pub parallel: usize,
    /// How long after a create was sent the cloud may still show its resource for the
    /// first time: the API client's own request timeout, after which the command that sent
    /// it would have stopped waiting for the answer too.
    pub in_flight: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            server_active: Duration::from_secs(600),
            share_available: Duration::from_secs(300),
            deleted: Duration::from_secs(300),
            tick: Duration::from_secs(2),
            recreate_retries: 2,
            parallel: 8,
            in_flight: Duration::from_secs(120),
        }
    }
}

/// Kinds whose creation is asynchronous in the cloud and must be waited for.
fn waits_for_ready(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Server | Kind::Share | Kind::Volume | Kind::VolumeAttachment
    )
}

/// What [`Applier::wait_ready`] still waits for, and how often each was made again.
struct Waiting {
    left: BTreeMap<String, Desired>,
    retries: BTreeMap<String, u32>,
}

pub struct Applier<'a> {
    pub provider: &'a dyn Provider,
    pub dir: &'a ClusterDir,
    pub progress: &'a Progress,
    pub deadlines: Deadlines,
    state: Mutex<ClusterState>,
}

impl<'a> Applier<'a> {
    pub fn new(
        provider: &'a dyn Provider,
        dir: &'a ClusterDir,
        progress: &'a Progress,
        state: ClusterState,
    ) -> Self {
        Applier {
            provider,
            dir,
            progress,
            deadlines: Deadlines::default(),
            state: Mutex::new(state),
        }
    }

    /// The state as applied so far. A poisoned lock still holds the real state (ids of
    /// everything created): never an empty one, which `up` would save over the saved ids.
    pub fn state(&self) -> ClusterState {
        self.lock_state().clone()
    }

    /// Observes the cluster and folds what was found into the local state. Called before a
    /// command changes anything: a create the state records as under way was sent by a
    /// command that stopped before its answer, and the cloud may not show it yet (nova shows a
    /// server only once its API has finished the call): it is waited for, up to
    /// [`Deadlines::in_flight`] after it was sent, so the plan does not make it a second time.
    pub async fn observe(&self) -> Result<Observation, ApplyError> {
        let cluster = self.dir.cluster.clone();
        let look = || async {
            self.provider
                .observe(&cluster)
                .await
                .map_err(ApplyError::Observe)
        };
        let mut resources = look().await?;
        let in_flight = self.lock_state().in_flight.clone();
        let now = unix_now();
        let missing = |resources: &[Observed]| -> Vec<(String, Kind, u64)> {
            unseen_in_flight(&in_flight, resources, now, self.deadlines.in_flight)
        };
        let waiting = missing(&resources);
        if let Some(longest) = waiting.iter().map(|(_, _, left)| *left).max() {
            for (name, kind, left) in &waiting {
                self.progress.line(format!(
                    "  ? {kind} {name}: its create was under way when the last command stopped; \
                     waiting up to {left}s for the cloud to show it"
                ));
            }
            let deadline = Instant::now() + Duration::from_secs(longest);
            while !missing(&resources).is_empty() && Instant::now() < deadline {
                tokio::time::sleep(self.deadlines.tick).await;
                resources = look().await?;
            }
            for (name, kind, _) in &waiting {
                let seen = resources.iter().any(|o| &o.name == name && o.kind == *kind);
                self.progress.line(if seen {
                    format!("  = {kind} {name}: found, made by the stopped command")
                } else {
                    format!(
                        "  ? {kind} {name}: not there; the stopped command's create did not take"
                    )
                });
            }
        }
        let highest = {
            let mut st = self.lock_state();
            // Found or given up on: nothing of an earlier command is under way any more.
            st.in_flight.clear();
            st.resources.retain(|name, r| {
                resources
                    .iter()
                    .any(|o| &o.name == name && o.kind == r.kind)
            });
            for o in &resources {
                st.resources.insert(
                    o.name.clone(),
                    Resource {
                        kind: o.kind,
                        id: o.id.clone(),
                    },
                );
            }
            let names = crate::plan::Names(&cluster);
            let seen = resources
                .iter()
                .filter_map(|o| names.worker_index(&o.name))
                .max()
                .unwrap_or(0);
            st.highest_worker_index = st.highest_worker_index.max(seen);
            st.highest_worker_index
        };
        self.save()?;
        Ok(Observation {
            resources,
            highest_worker_index: highest,
        })
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, ClusterState> {
        // A panic while holding the lock would poison it; the data is still the best we have.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn save(&self) -> Result<(), StateError> {
        let snapshot = self.lock_state().clone();
        self.dir.save(&snapshot)
    }

    fn record(&self, name: &str, kind: Kind, id: Option<&str>) -> Result<(), StateError> {
        {
            let mut st = self.lock_state();
            st.in_flight.remove(name);
            match id {
                Some(id) => {
                    st.resources.insert(
                        name.to_string(),
                        Resource {
                            kind,
                            id: id.to_string(),
                        },
                    );
                    if let Some(i) = crate::plan::Names(&st.cluster.clone()).worker_index(name) {
                        st.highest_worker_index = st.highest_worker_index.max(i);
                    }
                }
                None => {
                    st.resources.remove(name);
                }
            }
        }
        self.save()
    }

    /// Records, before the call, that `d` is being created (cleared by [`Applier::record`]).
    fn sending(&self, d: &Desired) -> Result<(), StateError> {
        self.lock_state().in_flight.insert(
            d.name.clone(),
            InFlight {
                kind: d.kind(),
                sent_at: unix_now(),
            },
        );
        self.save()
    }

    fn ids(&self) -> BTreeMap<String, String> {
        self.lock_state()
            .resources
            .iter()
            .map(|(n, r)| (n.clone(), r.id.clone()))
            .collect()
    }

    /// Runs the plan to the end. Returns the number of changes made.
    pub async fn apply(&self, plan: &Plan) -> Result<usize, ApplyError> {
        let mut changes = 0;
        // Deletions first: they free quota (and addresses) the creations may need.
        let deletions = plan.deletions();
        let mut by_level: BTreeMap<std::cmp::Reverse<u8>, Vec<&Observed>> = BTreeMap::new();
        for old in deletions {
            by_level
                .entry(std::cmp::Reverse(old.kind.level()))
                .or_default()
                .push(old);
        }
        for (_, level) in by_level {
            changes += level.len();
            self.delete_level(&level).await?;
        }

        // Resources kept but still building are waited for with their level.
        let mut pending: BTreeMap<u8, Vec<Desired>> = BTreeMap::new();
        for a in &plan.actions {
            if let crate::plan::Action::Keep {
                desired,
                pending: true,
                ..
            } = a
            {
                pending
                    .entry(desired.kind().level())
                    .or_default()
                    .push(desired.clone());
            }
        }
        let levels = plan.creation_levels();
        let all_levels: BTreeSet<u8> = levels
            .iter()
            .filter_map(|l| l.first().map(|d| d.kind().level()))
            .chain(pending.keys().copied())
            .collect();
        for level in all_levels {
            let create: Vec<&Desired> = levels
                .iter()
                .flatten()
                .filter(|d| d.kind().level() == level)
                .copied()
                .collect();
            changes += create.len();
            let waiting = pending.remove(&level).unwrap_or_default();
            self.create_level(&create, &waiting).await?;
        }
        Ok(changes)
    }

    async fn create_level(
        &self,
        create: &[&Desired],
        pending: &[Desired],
    ) -> Result<(), ApplyError> {
        let cluster = self.dir.cluster.clone();
        let ids = self.ids();
        stream::iter(create.iter().map(|d| {
            let ids = &ids;
            let cluster = &cluster;
            async move {
                // After Ctrl-C nothing new is made; a create under way finishes and is
                // recorded before the command ends (crate::interrupt).
                let Some(_call) = crate::interrupt::GATE.begin() else {
                    return Ok(());
                };
                let started = Instant::now();
                self.sending(d)?;
                let id = self
                    .provider
                    .create(cluster, d, ids)
                    .await
                    .map_err(|source| ApplyError::Step {
                        action: "creating",
                        kind: d.kind(),
                        name: d.name.clone(),
                        source,
                    })?;
                self.record(&d.name, d.kind(), Some(&id))?;
                self.progress.line(format!(
                    "  + {} {} ({id}) in {:.1}s",
                    d.kind(),
                    d.name,
                    started.elapsed().as_secs_f64()
                ));
                Ok::<(), ApplyError>(())
            }
        }))
        .buffer_unordered(self.deadlines.parallel.max(1))
        .try_collect::<Vec<()>>()
        .await?;

        let mut waiting: BTreeMap<Kind, Vec<Desired>> = BTreeMap::new();
        for d in create.iter().copied().chain(pending.iter()) {
            if waits_for_ready(d.kind()) {
                waiting.entry(d.kind()).or_default().push(d.clone());
            }
        }
        for (kind, desired) in waiting {
            self.wait_ready(kind, desired).await?;
        }
        Ok(())
    }

    /// Polls one list call per tick until every named resource is ready. One that fails is
    /// deleted and created again, a bounded number of times.
    async fn wait_ready(&self, kind: Kind, desired: Vec<Desired>) -> Result<(), ApplyError> {
        let deadline = match kind {
            Kind::Server => self.deadlines.server_active,
            _ => self.deadlines.share_available,
        };
        let target = match kind {
            Kind::Server => "ACTIVE",
            Kind::VolumeAttachment => "attached",
            _ => "available",
        };
        let bar = self
            .progress
            .bar(&format!("{kind}s {target}"), desired.len() as u64);
        let started = Instant::now();
        let waiting = Mutex::new(Waiting {
            left: desired.into_iter().map(|d| (d.name.clone(), d)).collect(),
            retries: BTreeMap::new(),
        });
        let (waiting, bar_ref) = (&waiting, &bar);
        let waited = wait_until(deadline, self.deadlines.tick, move || async move {
            self.ready_tick(kind, waiting, bar_ref)
                .await
                .unwrap_or_else(Probe::Failed)
        })
        .await;
        match waited {
            Ok(()) => {
                bar.finish_and_clear();
                self.progress.line(format!(
                    "  ✓ {kind}s {target} after {:.0}s",
                    started.elapsed().as_secs_f64()
                ));
                Ok(())
            }
            Err(WaitError::Failed(e)) => Err(e),
            Err(WaitError::TimedOut { last, secs }) => {
                bar.abandon();
                Err(ApplyError::Timeout {
                    what: format!("{kind}s to be {target}: {last}"),
                    secs,
                })
            }
        }
    }

    /// One poll of [`Applier::wait_ready`]: ready resources leave `waiting`, failed ones are
    /// deleted and created again (or end the wait once out of retries).
    async fn ready_tick(
        &self,
        kind: Kind,
        waiting: &Mutex<Waiting>,
        bar: &indicatif::ProgressBar,
    ) -> Result<Probe<(), ApplyError>, ApplyError> {
        let cluster = self.dir.cluster.clone();
        let lock = || waiting.lock().unwrap_or_else(|p| p.into_inner());
        let seen = self
            .provider
            .poll(&cluster, kind)
            .await
            .map_err(ApplyError::Observe)?;
        let mut status = Vec::new();
        let left = lock().left.clone();
        for (name, d) in left {
            match seen.iter().find(|o| o.name == name) {
                Some(Observed {
                    health: Health::Ready,
                    ..
                }) => {
                    lock().left.remove(&name);
                    bar.inc(1);
                }
                Some(
                    o @ Observed {
                        health: Health::Failed(reason),
                        ..
                    },
                ) => {
                    let tries = {
                        let mut w = lock();
                        let tries = w.retries.entry(name.clone()).or_insert(0);
                        if *tries >= self.deadlines.recreate_retries {
                            bar.abandon();
                            return Err(ApplyError::Failed {
                                kind,
                                name,
                                reason: reason.clone(),
                            });
                        }
                        *tries += 1;
                        *tries
                    };
                    self.progress.line(format!("  ! {kind} {name} failed ({reason}); deleting and creating it again ({tries}/{})", self.deadlines.recreate_retries));
                    self.delete_and_wait(&[o]).await?;
                    let ids = self.ids();
                    let id = self
                        .provider
                        .create(&cluster, &d, &ids)
                        .await
                        .map_err(|source| ApplyError::Step {
                            action: "re-creating",
                            kind,
                            name: name.clone(),
                            source,
                        })?;
                    self.record(&name, kind, Some(&id))?;
                }
                Some(_) => status.push(name),
                // Not listed yet (eventual consistency right after create): keep waiting.
                None => status.push(name),
            }
        }
        let w = lock();
        if w.left.is_empty() {
            return Ok(Probe::Ready(()));
        }
        bar.set_message(format!("waiting for {}", status.join(", ")));
        Ok(Probe::Waiting(
            w.left.keys().cloned().collect::<Vec<_>>().join(", "),
        ))
    }

    async fn delete_level(&self, level: &[&Observed]) -> Result<(), ApplyError> {
        self.delete_and_wait(level).await
    }

    /// Deletes in parallel (bounded), then polls until the cloud lists none of them.
    async fn delete_and_wait(&self, olds: &[&Observed]) -> Result<(), ApplyError> {
        stream::iter(olds.iter().map(|old| async move {
            self.provider
                .delete(old)
                .await
                .map_err(|source| ApplyError::Step {
                    action: "deleting",
                    kind: old.kind,
                    name: old.name.clone(),
                    source,
                })?;
            self.progress
                .line(format!("  - {} {} ({})", old.kind, old.name, old.id));
            Ok::<(), ApplyError>(())
        }))
        .buffer_unordered(self.deadlines.parallel.max(1))
        .try_collect::<Vec<()>>()
        .await?;

        let cluster = self.dir.cluster.clone();
        let kinds: BTreeSet<Kind> = olds.iter().map(|o| o.kind).collect();
        for kind in kinds {
            let left: BTreeSet<&str> = olds
                .iter()
                .filter(|o| o.kind == kind)
                .map(|o| o.id.as_str())
                .collect();
            let bar = self
                .progress
                .bar(&format!("{kind}s gone"), left.len() as u64);
            let left = Mutex::new(left);
            let (left, bar_ref, cluster) = (&left, &bar, &cluster);
            let waited = wait_until(
                self.deadlines.deleted,
                self.deadlines.tick,
                move || async move {
                    let seen = match self.provider.poll(cluster, kind).await {
                        Ok(seen) => seen,
                        Err(e) => return Probe::Failed(ApplyError::Observe(e)),
                    };
                    let mut left = left.lock().unwrap_or_else(|p| p.into_inner());
                    let before = left.len();
                    left.retain(|id| seen.iter().any(|o| o.id == *id));
                    bar_ref.inc((before - left.len()) as u64);
                    if left.is_empty() {
                        Probe::Ready(())
                    } else {
                        Probe::Waiting(left.iter().copied().collect::<Vec<_>>().join(", "))
                    }
                },
            )
            .await;
            match waited {
                Ok(()) => {}
                Err(WaitError::Failed(e)) => return Err(e),
                Err(WaitError::TimedOut { last, secs }) => {
                    bar.abandon();
                    return Err(ApplyError::Timeout {
                        what: format!("{kind}s to be deleted: {last}"),
                        secs,
                    });
                }
            }
            bar.finish_and_clear();
            for old in olds.iter().filter(|o| o.kind == kind) {
                self.record(&old.name, kind, None)?;
            }
        }
        Ok(())
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The creates under way that `resources` does not show yet and the cloud may still show:
/// (name, kind, seconds left of `window` after each was sent). Pure.
fn unseen_in_flight(
    in_flight: &BTreeMap<String, InFlight>,
    resources: &[Observed],
    now: u64,
    window: Duration,
) -> Vec<(String, Kind, u64)> {
    in_flight
        .iter()
        .filter(|(name, f)| {
            !resources
                .iter()
                .any(|o| &o.name == *name && o.kind == f.kind)
        })
        .filter_map(|(name, f)| {
            // A clock set back since the call is no reason to wait longer than the window.
            let left = f
                .sent_at
                .saturating_add(window.as_secs())
                .checked_sub(now)?
                .min(window.as_secs());
            (left > 0).then(|| (name.clone(), f.kind, left))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;

    struct Nothing;

    impl Provider for Nothing {
        fn blueprint(&self) -> &'static dyn crate::plan::Blueprint {
            &crate::provider::local::LocalBlueprint
        }
        fn set_public_key(&mut self, _: String) {}
        fn observe<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Vec<Observed>, ProviderError>> {
            Box::pin(async { Ok(vec![]) })
        }
        fn poll<'a>(
            &'a self,
            _: &'a str,
            _: Kind,
        ) -> BoxFuture<'a, Result<Vec<Observed>, ProviderError>> {
            Box::pin(async { Ok(vec![]) })
        }
        fn create<'a>(
            &'a self,
            _: &'a str,
            _: &'a Desired,
            _: &'a BTreeMap<String, String>,
        ) -> BoxFuture<'a, Result<String, ProviderError>> {
            Box::pin(async { Err(ProviderError::Cloud("not in this test".into())) })
        }
        fn delete<'a>(&'a self, _: &'a Observed) -> BoxFuture<'a, Result<(), ProviderError>> {
            Box::pin(async { Ok(()) })
        }
        fn nodes<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Vec<crate::state::Node>, ProviderError>> {
            Box::pin(async { Ok(vec![]) })
        }
    }

    #[test]
    fn a_poisoned_lock_still_gives_the_real_state() {
        let root = tempfile::tempdir().unwrap();
        let name = crate::input::ClusterName::parse("demo").unwrap();
        let dir = ClusterDir::open(root.path(), &name).unwrap();
        let progress = Progress::new(true);
        let mut saved = ClusterState {
            cluster: "demo".into(),
            ..ClusterState::default()
        };
        saved.resources.insert(
            "demo-net".into(),
            Resource {
                kind: Kind::Network,
                id: "net-1".into(),
            },
        );
        let applier = Applier::new(&Nothing, &dir, &progress, saved.clone());
        let poisoned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = applier.state.lock().unwrap();
            panic!("a step panicked while holding the state");
        }));
        assert!(poisoned.is_err() && applier.state.is_poisoned());
        assert_eq!(applier.state().resources, saved.resources);
    }

    /// Shows nothing for the first `hidden` looks, then one server named `demo-master`.
    struct Late {
        hidden: usize,
        looks: std::sync::atomic::AtomicUsize,
    }

    impl Provider for Late {
        fn blueprint(&self) -> &'static dyn crate::plan::Blueprint {
            Nothing.blueprint()
        }
        fn set_public_key(&mut self, _: String) {}
        fn observe<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<Vec<Observed>, ProviderError>> {
            let n = self.looks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let shown = n >= self.hidden;
            Box::pin(async move {
                Ok(if shown {
                    vec![Observed {
                        kind: Kind::Server,
                        name: "demo-master".into(),
                        id: "late-1".into(),
                        health: Health::Pending,
                        kept: false,
                        called: None,
                    }]
                } else {
                    vec![]
                })
            })
        }
        fn poll<'a>(
            &'a self,
            c: &'a str,
            k: Kind,
        ) -> BoxFuture<'a, Result<Vec<Observed>, ProviderError>> {
            Nothing.poll(c, k)
        }
        fn create<'a>(
            &'a self,
            c: &'a str,
            d: &'a Desired,
            ids: &'a BTreeMap<String, String>,
        ) -> BoxFuture<'a, Result<String, ProviderError>> {
            Nothing.create(c, d, ids)
        }
        fn delete<'a>(&'a self, o: &'a Observed) -> BoxFuture<'a, Result<(), ProviderError>> {
            Nothing.delete(o)
        }
        fn nodes<'a>(
            &'a self,
            c: &'a str,
        ) -> BoxFuture<'a, Result<Vec<crate::state::Node>, ProviderError>> {
            Nothing.nodes(c)
        }
    }

    fn in_flight(name: &str, kind: Kind, sent_at: u64) -> BTreeMap<String, InFlight> {
        BTreeMap::from([(name.to_string(), InFlight { kind, sent_at })])
    }

    fn demo_dir(root: &std::path::Path) -> ClusterDir {
        let name = crate::input::ClusterName::parse("demo").unwrap();
        ClusterDir::open(root, &name).unwrap()
    }

    /// A command killed after sending a server's create: the next look waits for the cloud
    /// to show it (seen in tests/cloud_cli.rs: the resumed `up` made a second master).
    #[tokio::test]
    async fn a_create_under_way_is_waited_for_not_made_again() {
        let root = tempfile::tempdir().unwrap();
        let dir = demo_dir(root.path());
        let progress = Progress::new(true);
        let provider = Late {
            hidden: 3,
            looks: Default::default(),
        };
        let state = ClusterState {
            cluster: "demo".into(),
            in_flight: in_flight("demo-master", Kind::Server, unix_now()),
            ..ClusterState::default()
        };
        let mut applier = Applier::new(&provider, &dir, &progress, state);
        applier.deadlines.tick = Duration::from_millis(10);
        let seen = applier.observe().await.unwrap();
        assert_eq!(seen.resources.len(), 1, "{seen:?}");
        assert_eq!(provider.looks.load(std::sync::atomic::Ordering::SeqCst), 4);
        let saved = dir.load().unwrap();
        assert!(saved.in_flight.is_empty(), "{saved:?}");
        assert_eq!(saved.resources["demo-master"].id, "late-1");
    }

    /// One sent longer ago than the window is not waited for: one look, and it is forgotten.
    #[tokio::test]
    async fn a_create_sent_long_ago_is_not_waited_for() {
        let root = tempfile::tempdir().unwrap();
        let dir = demo_dir(root.path());
        let progress = Progress::new(true);
        let provider = Late {
            hidden: usize::MAX,
            looks: Default::default(),
        };
        let state = ClusterState {
            cluster: "demo".into(),
            in_flight: in_flight("demo-master", Kind::Server, unix_now() - 121),
            ..ClusterState::default()
        };
        let applier = Applier::new(&provider, &dir, &progress, state);
        let seen = applier.observe().await.unwrap();
        assert!(seen.resources.is_empty());
        assert_eq!(provider.looks.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(dir.load().unwrap().in_flight.is_empty());
    }

    #[test]
    fn unseen_in_flight_counts_from_the_send() {
        let window = Duration::from_secs(120);
        let shown = [Observed {
            kind: Kind::Server,
            name: "demo-master".into(),
            id: "1".into(),
            health: Health::Ready,
            kept: false,
            called: None,
        }];
        let f = in_flight("demo-master", Kind::Server, 1000);
        assert!(unseen_in_flight(&f, &shown, 1010, window).is_empty());
        assert_eq!(
            unseen_in_flight(&f, &[], 1010, window),
            [("demo-master".to_string(), Kind::Server, 110)]
        );
        assert!(unseen_in_flight(&f, &[], 1120, window).is_empty());
        // Same name, other kind: not the one under way.
        let volume = in_flight("demo-master", Kind::Volume, 1000);
        assert_eq!(unseen_in_flight(&volume, &shown, 1000, window).len(), 1);
        // The clock set back by an hour: still no more than the window.
        let later = in_flight("demo-master", Kind::Server, 10_000);
        assert_eq!(
            unseen_in_flight(&later, &[], 10_000 - 3600, window)[0].2,
            120
        );
    }
}
