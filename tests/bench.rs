//! `bench`'s arguments: every bad one exits 2 before anything is reached (no cluster, no state
//! folder). `bench` on a running cluster (the report at every slot count, the chart, Ctrl-C)
//! runs on tests/local_cluster.rs's cluster (`common::bench_report::bench_on_a_running_cluster`):
//! a cluster of its own cost the suite an `up` and a `down` more.

mod common;

use common::TestCluster;

/// A master and one worker, one slot each.
fn two_nodes(prefix: &str) -> TestCluster {
    TestCluster::new("local.toml", prefix, |p| {
        p.replace("count = 2", "count = 1")
    })
}

#[test]
fn bench_refuses_bad_arguments_before_reaching_anything() {
    // No cluster exists: each refusal comes from the arguments alone.
    let c = two_nodes("bench-a");
    for (args, says) in [
        (vec!["--slots", "1,1"], "--slots `1,1`: 1 is given twice"),
        (
            vec!["--slots", "0"],
            "--slots `0`: a slot count is at least 1",
        ),
        (
            vec!["--slots", "1,two"],
            "--slots `1,two`: `two` is not a whole number",
        ),
        (
            vec!["--slots", "1,\u{1b}[31m2\n"],
            "--slots `1,\\u{1b}[31m2\\n`",
        ),
        (
            vec!["--model", "vgg; reboot"],
            "--model `vgg; reboot`: not one of resnet8, resnet14, resnet20",
        ),
        (
            vec!["--batch-size=-1"],
            "--batch-size `-1`: not a whole number",
        ),
        (
            vec!["--batch-size", "0x20"],
            "--batch-size `0x20`: not a whole number",
        ),
        (vec!["--framework", "jax"], "--framework `jax`"),
    ] {
        let mut full = vec!["bench", c.profile.as_str()];
        full.extend(args.iter().copied());
        let out = c.command(&full).output().expect("run hvd-cluster");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains('\u{1b}'), "escaped: {err:?}");
    }
    assert!(!c.state.exists(), "no state folder was made");
}
