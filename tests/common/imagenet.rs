//! Horovod's own elastic ImageNet example, `pytorch_imagenet_resnet50_elastic.py`, as its
//! authors wrote it: read from `../shared/fixtures/horovod-examples` (never copied into the
//! project, never edited), on a tiny-imagenet-shaped ImageFolder this test makes. The script
//! says nothing of the world's size, but rank 0's progress bar does: each epoch's first bar
//! counts `ceil(train images / size)` batches of one image (`ElasticSampler` shards them).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::TestCluster;

pub const SCRIPT: &str = "pytorch_imagenet_resnet50_elastic.py";
pub const CLASSES: usize = 3;
pub const TRAIN_PER_CLASS: usize = 10;
pub const VAL_PER_CLASS: usize = 2;

/// `shared/fixtures/horovod-examples` beside the project (or any folder above it): the tests
/// run Horovod's examples from there.
pub fn horovod_examples() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .map(|dir| dir.join("shared/fixtures/horovod-examples"))
        .find(|dir| dir.join(SCRIPT).is_file())
        .unwrap_or_else(|| {
            panic!(
                "Horovod's examples (shared/fixtures/horovod-examples/{SCRIPT}) beside {} or above it",
                manifest.display()
            )
        })
}

/// `dir/{train,val}/nNNNNNNNN/*.JPEG`: small JPEGs (64x64, each class its own tint over noise),
/// written by `image`'s Pillow in a throwaway container (this machine has no Python imaging).
pub fn make_tiny_imagenet(dir: &Path, image: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let script = format!(
        "import os, random
from PIL import Image
random.seed(7)
for split, n in (('train', {TRAIN_PER_CLASS}), ('val', {VAL_PER_CLASS})):
    for c in range({CLASSES}):
        d = '/out/%s/n%08d' % (split, c)
        os.makedirs(d)
        for i in range(n):
            px = bytes(min(255, random.randrange(128) + (120 if k % 3 == c % 3 else 0)) for k in range(64 * 64 * 3))
            Image.frombytes('RGB', (64, 64), px).save('%s/n%08d_%d.JPEG' % (d, c, i), quality=90)
"
    );
    let out = python_in(image, &format!("{}:/out", dir.display()), &script);
    assert!(
        out.status.success(),
        "the tiny ImageFolder: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `script` run by `image`'s Python in a throwaway container without a network, `volume`
/// (`HOST:CONTAINER[:ro]`) mounted.
pub fn python_in(image: &str, volume: &str, script: &str) -> std::process::Output {
    Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "python",
            "-v",
        ])
        .args([volume, image, "-c", script])
        .output()
        .expect("docker")
}

/// The world size an epoch's first progress bar says (`total` batches of one image).
pub fn size_of_epoch(total: usize) -> Option<u32> {
    let images = CLASSES * TRAIN_PER_CLASS;
    (1..=8u32).find(|&size| images.div_ceil(size as usize) == total)
}

/// `(epoch, total)` of a progress bar segment: `Train Epoch     #3:   0%|   | 0/15 [...]`.
pub fn train_bar(segment: &str) -> Option<(u32, usize)> {
    let rest = &segment[segment.find("Train Epoch")?..];
    let epoch = rest
        .split('#')
        .nth(1)?
        .split(':')
        .next()?
        .trim()
        .parse()
        .ok()?;
    let total = rest.split_whitespace().find_map(|w| {
        let (done, total) = w.split_once('/')?;
        done.parse::<usize>().ok()?;
        total.parse().ok()
    })?;
    Some((epoch, total))
}

/// The tutorial under `run --elastic`, read as it goes.
pub struct TutorialJob {
    child: Child,
    lines: mpsc::Receiver<String>,
    reader: JoinHandle<Vec<String>>,
    /// The highest epoch whose first bar was seen, and the size it said.
    pub epochs: Vec<(u32, u32)>,
}

impl TutorialJob {
    /// `/shared/tutorial` holds the examples (`push`), `/staged/tiny-imagenet` the dataset;
    /// checkpoints and TensorBoard's logs go to `/shared` itself (CI's copy of the examples
    /// has no write bits, and `push` keeps modes: `/shared/tutorial` arrives read-only). Batches of one image,
    /// a commit after each (a lost worker costs one batch), as many epochs as the test lets it.
    pub fn start(cluster: &TestCluster, max_np: u32) -> TutorialJob {
        let max_np = max_np.to_string();
        let script = format!("/shared/tutorial/{SCRIPT}");
        let argv = [
            "run",
            &cluster.profile,
            "--elastic",
            "--min-np",
            "1",
            "--max-np",
            &max_np,
            "--",
            "python",
            &script,
            "--train-dir",
            "/staged/tiny-imagenet/train",
            "--val-dir",
            "/staged/tiny-imagenet/val",
            "--log-dir",
            "/shared/tutorial-logs",
            "--checkpoint-format",
            "/shared/checkpoint-{epoch}.pth.tar",
            "--epochs",
            "1000",
            "--batch-size",
            "1",
            "--val-batch-size",
            "2",
            "--batches-per-commit",
            "1",
        ];
        // tqdm redraws its bar with carriage returns: one segment per redraw
        let (child, lines, reader) = super::follow(cluster.command(&argv), |line| {
            line.split('\r').map(str::to_string).collect()
        });
        TutorialJob {
            child,
            lines,
            reader,
            epochs: Vec::new(),
        }
    }

    /// Waits for an epoch that starts at world size `size`; returns its number.
    pub fn wait_size(&mut self, size: u32, limit: Duration) -> u32 {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no epoch started at world size {size} in {limit:?}; epochs and sizes so far: {:?}",
                self.epochs
            );
            let Ok(segment) = self.lines.recv_timeout(left.min(Duration::from_secs(5))) else {
                continue;
            };
            let Some((epoch, total)) = train_bar(&segment) else {
                continue;
            };
            if self.epochs.last().is_some_and(|&(seen, _)| seen >= epoch) {
                continue; // the same epoch again, resumed after a reset: part of it is done
            }
            let said = size_of_epoch(total)
                .unwrap_or_else(|| panic!("epoch {epoch}'s first bar counts {total}: {segment}"));
            eprintln!("[tutorial] epoch {epoch} starts at world size {said}");
            self.epochs.push((epoch, said));
            if said == size {
                return epoch;
            }
        }
    }

    /// Ends the job with `cancel` (its epochs are as many as the test lets it run); returns
    /// every line it printed.
    pub fn cancel(self, cluster: &TestCluster) -> Vec<String> {
        let TutorialJob {
            mut child, reader, ..
        } = self;
        let cancel = cluster.hvd(&["cancel", &cluster.profile, "--all"]);
        assert!(cancel.status.success(), "{cancel:?}");
        let exit = child.wait().unwrap();
        assert!(!exit.success(), "a cancelled job is not a success");
        reader.join().unwrap()
    }
}

impl TutorialJob {
    /// A preemption under the tutorial at world size 3: `worker`'s machine disappears
    /// (`docker kill`), the job goes on at 2, `heal` names and replaces it, the job is back at
    /// 3 within `regrow`. (Rank 0 as the job started prints the bars: `worker` must not be the node it runs on.)
    /// Returns what `heal` said on stderr.
    pub fn preempt_and_heal(&mut self, c: &TestCluster, worker: &str, regrow: Duration) -> String {
        let killed = format!("{}-{worker}", c.name);
        assert!(Command::new("docker")
            .args(["kill", &killed])
            .status()
            .expect("docker")
            .success());
        self.wait_size(2, Duration::from_secs(300));
        let heal = c.hvd(&["heal", &c.profile]);
        assert!(heal.status.success(), "{heal:?}");
        let healed = String::from_utf8_lossy(&heal.stdout);
        assert!(healed.contains(&killed), "{healed}");
        self.wait_size(3, regrow);
        String::from_utf8_lossy(&heal.stderr).into_owned()
    }
}

/// `dir`'s files by path below it, each with its SHA-256 (hex), sorted.
pub fn digests(dir: &Path) -> Vec<(String, String)> {
    use sha2::{Digest, Sha256};
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let hash = Sha256::digest(std::fs::read(&path).unwrap());
                let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                out.push((rel, hex));
            }
        }
    }
    out.sort();
    out
}

/// The same list, read on `node` below `remote` (`sha256sum` in the node's container).
pub fn digests_on(c: &TestCluster, node: &str, remote: &str) -> Vec<(String, String)> {
    let listing = c.on_node(
        node,
        &[&format!(
            "sudo docker exec -w {remote} hvd find . -type f -exec sha256sum {{}} +"
        )],
    );
    let mut out: Vec<(String, String)> = listing
        .lines()
        .filter_map(|l| {
            let (hex, path) = l.split_once("  ")?;
            Some((path.trim_start_matches("./").to_string(), hex.to_string()))
        })
        .collect();
    out.sort();
    out
}
