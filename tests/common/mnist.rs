//! examples/pytorch_mnist.py's own report: every rank's rank and host, every epoch's loss.

use std::collections::BTreeSet;

use super::TestCluster;

/// `key=value` of the first word starting with `key=` in `line`.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The (rank, host) of every `PT_RANK` line and the loss of every `PT_EPOCH` line.
pub fn mnist_report(out: &str) -> (BTreeSet<(u32, String)>, Vec<f64>) {
    let mut ranks = BTreeSet::new();
    let mut losses = Vec::new();
    for line in out.lines() {
        if let Some(at) = line.find("PT_RANK ") {
            let l = &line[at..];
            if let (Some(rank), Some(host)) = (field(l, "rank"), field(l, "host")) {
                ranks.insert((rank.parse().unwrap(), host.to_string()));
            }
        } else if let Some(at) = line.find("PT_EPOCH ") {
            if let Some(loss) = field(&line[at..], "loss") {
                losses.push(loss.parse().unwrap());
            }
        }
    }
    (ranks, losses)
}

/// Every one of `nodes` ranks (the master's, then worker-1's, ...) reported its rank and host,
/// and the loss fell over `epochs`.
pub fn assert_mnist_ran_everywhere(c: &TestCluster, out: &str, epochs: usize, nodes: u32) {
    let (ranks, losses) = mnist_report(out);
    let expected: BTreeSet<(u32, String)> = (0..nodes)
        .map(|r| match r {
            0 => (0, format!("{}-master", c.name)),
            r => (r, format!("{}-worker-{r}", c.name)),
        })
        .collect();
    assert_eq!(ranks, expected, "every rank reports its rank and host");
    assert_eq!(losses.len(), epochs, "{losses:?}");
    assert!(
        losses[epochs - 1] < 0.7 * losses[0],
        "the loss falls: {losses:?}"
    );
}

/// examples/pytorch_mnist.py sent and run as a job for `epochs`, `run`'s `options` before
/// `--send`; the job must succeed. What `run` printed.
pub fn run_mnist(c: &TestCluster, options: &[&str], epochs: usize) -> String {
    let epochs_arg = epochs.to_string();
    let mut args = vec!["run", c.profile.as_str()];
    args.extend_from_slice(options);
    args.extend_from_slice(&[
        "--send",
        "examples/pytorch_mnist.py",
        "--",
        "python",
        "pytorch_mnist.py",
        "--epochs",
        &epochs_arg,
    ]);
    String::from_utf8_lossy(&c.hvd_ok(&args).stdout).into_owned()
}

/// examples/pytorch_mnist.py sent and run as a job under horovodrun --mpi for `epochs`, the
/// user's `mpi_args` passed through (they must hold `--display-map`): it succeeds, mpirun shows
/// the map it launched, and every one of `nodes` ranks took part.
pub fn run_mnist_under_mpi(c: &TestCluster, mpi_args: &str, epochs: usize, nodes: u32) {
    let out = run_mnist(c, &["--mpi-args", mpi_args], epochs);
    assert!(
        out.contains("Data for JOB"),
        "mpirun's --display-map: {out}"
    );
    assert_mnist_ran_everywhere(c, &out, epochs, nodes);
}
