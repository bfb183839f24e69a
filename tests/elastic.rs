//! Elastic training on the local provider, read from the job's own output: an elastic run of
//! examples/elastic_train.py starts on 2 workers; `scale --workers 3` grows the world size to
//! 3; a worker container is killed (a preemption) and the job goes on with the survivors;
//! `heal` brings a replacement under a new name and the job grows back; the job ends with a
//! consistent step count and its checkpoint on /shared.

mod common;

use std::time::{Duration, Instant};

use common::{ElasticJob, TestCluster};

#[test]
fn elastic_job_grows_survives_a_preemption_and_heals() {
    let c = TestCluster::new("local.toml", "t-el", |p| p);
    let result = std::panic::catch_unwind(|| {
        assert!(c.hvd(&["up", &c.profile]).status.success());
        let mut job = ElasticJob::start(&c, 4);
        job.wait_size(2, Duration::from_secs(240));

        let scale_started = Instant::now();
        assert!(c
            .hvd(&["scale", &c.profile, "--workers", "3"])
            .status
            .success());
        job.wait_size(3, Duration::from_secs(120));
        eprintln!(
            "new worker joined the job {:.0}s after `scale` started",
            scale_started.elapsed().as_secs_f64()
        );

        // A preemption: the worker's machine disappears; `heal` replaces it.
        job.preempt_worker_1_and_heal(&c, Duration::from_secs(180));
        assert_eq!(
            c.listed_in_discovery(),
            [2, 3, 4].map(|i| format!("{}-worker-{i}", c.name))
        );

        let sizes = job.stop_and_verify(&c);
        assert!(sizes.contains(&2) && sizes.contains(&3), "{sizes:?}");
    });
    assert!(c.hvd(&["down", &c.profile]).status.success());
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
