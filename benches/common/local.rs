//! What the local-provider benchmarks share: a cluster of the local provider deleted when
//! dropped, timing after `sync`, medians, an ImageNet-shaped dataset of random bytes.
#![allow(dead_code)] // each benchmark uses its part

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub struct Cluster {
    pub name: String,
    pub profile: PathBuf,
    pub state: PathBuf,
}

impl Cluster {
    /// What the command printed on stdout; a failure panics with its stderr.
    pub fn hvd(&self, args: &[&str]) -> String {
        self.run(args).0
    }

    /// (stdout, stderr) of a command that succeeded; a failure panics with its stderr.
    pub fn run(&self, args: &[&str]) -> (String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
            .args(args)
            .env("HVD_CLUSTER_STATE_DIR", &self.state)
            .output()
            .expect("run hvd-cluster");
        assert!(
            out.status.success(),
            "hvd-cluster {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn master(&self) -> String {
        format!("{}-master", self.name)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
            .args(["down", "--yes", self.profile.to_str().unwrap_or_default()])
            .env("HVD_CLUSTER_STATE_DIR", &self.state)
            .status();
    }
}

pub fn sh(script: &str) {
    let ok = Command::new("bash")
        .args(["-o", "pipefail", "-c", script])
        .status()
        .expect("bash")
        .success();
    assert!(ok, "failed: {script}");
}

/// Seconds `f` takes, after `sync`: the previous run's written bytes are on disk first.
pub fn timed(f: impl FnOnce()) -> f64 {
    sh("sync");
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// 20-200 KB of random bytes per file, 100 files a folder.
pub fn make_dataset(root: &Path, files: usize) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut total = 0;
    for i in 0..files {
        let dir = root.join(format!("n{:05}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        let len = 20_000 + (next() % 180_000) as usize;
        let mut body = Vec::with_capacity(len + 8);
        while body.len() < len {
            body.extend_from_slice(&next().to_le_bytes());
        }
        body.truncate(len);
        std::fs::write(dir.join(format!("img_{i:06}.JPEG")), &body).unwrap();
        total += len as u64;
    }
    total
}
