//! `push` and `pull` on the local provider (images already built), against the ways a user
//! has without them, in the same run and over the same ssh_config: one raw `tar | ssh tar`
//! stream (the link's limit), `scp -r` (the tutorials' way) and `rsync -a` (needs rsync here;
//! the master gets Debian's if it lacks it). A dataset shaped like ImageNet's
//! JPEGs (`HVD_BENCH_FILES` files, 10,000 by default, of 20-200 KB of random bytes: 1.1 GB)
//! goes to a cluster of a master and one worker, first on the plain link, then with 20 ms of
//! round-trip delay added, as a user's link to a cloud has: netem on the cluster's Docker
//! bridge where the kernel has it, else a relay in this program that every connection to the
//! master's sshd passes through (an iptables REDIRECT; benches/common/delay.rs). Prints, per run,
//!
//!   transfer link=L way=W files=N mb=M secs=S
//!
//! then, per link, the ratios
//!
//!   transfer ratio link=L push/raw=R pull/raw=R scp/push=R rsync/push=R
//!   transfer link=plain second_push_secs=S one_changed_secs=S
//!
//! Each of push, pull and the raw streams is the median of three runs taken in turn, each after
//! `sync`. `scp -r` and `rsync -a` on the delayed link cost round trips per file: they are
//! timed on a tenth of the folders, and so is a push of that tenth for their ratios. Asserts
//! nothing about time. Needs root (iptables) for the relay.
//!
//!   cargo bench --bench transfer
//!   HVD_BENCH_FILES=2000 cargo bench --bench transfer    # a smaller tree

#[path = "common/delay.rs"]
mod delay;
#[path = "common/local.rs"]
mod local;

use std::path::{Path, PathBuf};
use std::process::Command;

use local::{make_dataset, median, sh, timed, Cluster};

const DELAY_MS: u32 = 20;

/// Whether this kernel has netem (`tc qdisc ... netem`); some sandboxes' kernels do not.
fn has_netem() -> bool {
    Command::new("tc")
        .args(["qdisc", "add", "dev", "lo", "root", "netem", "delay", "0ms"])
        .status()
        .is_ok_and(|s| s.success())
        && Command::new("tc")
            .args(["qdisc", "del", "dev", "lo", "root"])
            .status()
            .is_ok_and(|s| s.success())
}

const ROUNDS: usize = 3;
/// The cluster's Docker bridge (where netem adds the delay).
fn bridge(cluster: &str) -> String {
    let out = Command::new("docker")
        .args(["network", "ls", "-q", "--no-trunc", "--filter"])
        .arg(format!("label=hvd-cluster={cluster}"))
        .output()
        .expect("docker");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(id.len() >= 12, "the cluster's network: {id:?}");
    format!("br-{}", &id[..12])
}

struct Ways<'a> {
    c: &'a Cluster,
    cfg: String,
    data: &'a Path,
    mb: f64,
    files: usize,
}

impl Ways<'_> {
    fn say(&self, link: &str, way: &str, files: usize, mb: f64, secs: f64) {
        println!("transfer link={link} way={way} files={files} mb={mb:.0} secs={secs:.2}");
    }

    fn clean(&self) {
        sh(&format!(
            "ssh -F {} {} 'sudo rm -rf /shared/b-*'",
            self.cfg,
            self.c.master()
        ));
    }

    fn raw_push(&self, from: &Path, to: &str) -> f64 {
        let (parent, name) = (from.parent().unwrap(), from.file_name().unwrap());
        timed(|| {
            sh(&format!(
                "tar -C {} -cf - {} | ssh -F {} {} 'sudo mkdir -p /shared/{to} && sudo tar -C /shared/{to} -xf -'",
                parent.display(),
                name.to_string_lossy(),
                self.cfg,
                self.c.master()
            ))
        })
    }

    fn push(&self, from: &Path, to: &str) -> f64 {
        let p = self.c.profile.to_str().unwrap();
        timed(|| {
            self.c
                .hvd(&["push", p, from.to_str().unwrap(), &format!("/shared/{to}")]);
        })
    }

    fn scp(&self, from: &Path, to: &str) -> f64 {
        timed(|| {
            sh(&format!(
                "scp -q -r -F {} {} {}:/shared/{to}",
                self.cfg,
                from.display(),
                self.c.master()
            ))
        })
    }

    fn rsync(&self, from: &Path, to: &str) -> f64 {
        timed(|| {
            sh(&format!(
                "rsync -a -e 'ssh -F {}' --rsync-path='sudo rsync' {}/ {}:/shared/{to}/",
                self.cfg,
                from.display(),
                self.c.master()
            ))
        })
    }

    fn raw_pull(&self, from: &str, to: &Path) -> f64 {
        std::fs::create_dir_all(to).unwrap();
        timed(|| {
            sh(&format!(
                "ssh -F {} {} 'sudo tar -C /shared -cf - {from}' | tar -C {} -xf -",
                self.cfg,
                self.c.master(),
                to.display()
            ))
        })
    }

    fn pull(&self, from: &str, to: &Path) -> f64 {
        let p = self.c.profile.to_str().unwrap();
        timed(|| {
            self.c
                .hvd(&["pull", p, &format!("/shared/{from}"), to.to_str().unwrap()]);
        })
    }

    /// Raw, push, pull and raw pull on one link, each the median of [`ROUNDS`] runs taken in
    /// turn, then scp and rsync once; returns (push/raw, pull/raw, scp/push, rsync/push).
    fn link(
        &self,
        link: &str,
        local: &Path,
        scp_on: &Path,
        scp_files: usize,
        scp_mb: f64,
    ) -> (f64, f64, f64, f64) {
        let (mut raw, mut push, mut pull, mut raw_pull) = (vec![], vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            raw.push(self.raw_push(self.data, "b-raw"));
            push.push(self.push(self.data, "b-push"));
            let back = local.join(format!("{link}-pull"));
            pull.push(self.pull("b-push", &back));
            let raw_back = local.join(format!("{link}-raw-pull"));
            raw_pull.push(self.raw_pull("b-push", &raw_back));
            let _ = std::fs::remove_dir_all(&back);
            let _ = std::fs::remove_dir_all(&raw_back);
            self.clean();
        }
        let (raw, push, pull, raw_pull) =
            (median(raw), median(push), median(pull), median(raw_pull));
        self.say(link, "raw-tar-ssh", self.files, self.mb, raw);
        self.say(link, "push", self.files, self.mb, push);
        self.say(link, "pull", self.files, self.mb, pull);
        self.say(link, "raw-ssh-tar-pull", self.files, self.mb, raw_pull);
        let scp = self.scp(scp_on, "b-scp");
        self.say(link, "scp-r", scp_files, scp_mb, scp);
        let rsync = self.rsync(scp_on, "b-rsync");
        self.say(link, "rsync-a", scp_files, scp_mb, rsync);
        let scp_push = if scp_on == self.data {
            push
        } else {
            let s = self.push(scp_on, "b-push-part");
            self.say(link, "push", scp_files, scp_mb, s);
            s
        };
        self.clean();
        (
            push / raw,
            pull / raw_pull,
            scp / scp_push,
            rsync / scp_push,
        )
    }
}

fn main() {
    let files: usize = std::env::var("HVD_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let name = format!("bx-{}", std::process::id() % 10_000);
    let profile = dir.path().join("bench.toml");
    let text = std::fs::read_to_string(root.join("profiles/local.toml"))
        .unwrap()
        .replace("name = \"hvd-local\"", &format!("name = \"{name}\""))
        .replace("count = 2", "count = 1");
    std::fs::write(&profile, text).unwrap();
    let c = Cluster {
        name: name.clone(),
        profile: profile.clone(),
        state: dir.path().join("state"),
    };
    c.hvd(&["up", profile.to_str().unwrap()]);
    let cfg = dir.path().join("ssh_config");
    let cfg_text = c.hvd(&["ssh-config", profile.to_str().unwrap()]);
    std::fs::write(&cfg, &cfg_text).unwrap();
    // rsync's other end: Debian's, as a user would add it
    sh(&format!(
        "ssh -F {} {} 'command -v rsync || {{ sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q rsync; }} >/dev/null'",
        cfg.display(),
        c.master()
    ));

    let data = dir.path().join("dataset");
    let bytes = make_dataset(&data, files);
    let mb = bytes as f64 / 1e6;
    // this machine's side reads from the page cache in every run, the first included
    sh(&format!("tar -C {} -cf - . > /dev/null", data.display()));
    let ways = Ways {
        c: &c,
        cfg: cfg.display().to_string(),
        data: &data,
        mb,
        files,
    };

    let plain = ways.link("plain", dir.path(), &data, files, mb);
    // Incremental: unchanged, then one file touched.
    let p = profile.to_str().unwrap();
    ways.push(&data, "b-inc");
    let second = timed(|| {
        c.hvd(&["push", p, data.to_str().unwrap(), "/shared/b-inc"]);
    });
    let first_dir = data.join("n00000");
    let touched = std::fs::read_dir(&first_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(&touched, b"changed").unwrap();
    let one = timed(|| {
        c.hvd(&["push", p, data.to_str().unwrap(), "/shared/b-inc"]);
    });
    ways.clean();
    println!(
        "transfer ratio link=plain push/raw={:.2} pull/raw={:.2} scp/push={:.1} rsync/push={:.1}",
        plain.0, plain.1, plain.2, plain.3
    );
    println!("transfer link=plain second_push_secs={second:.2} one_changed_secs={one:.2}");

    // The same with 20 ms of round trip added; scp and rsync on a tenth of the folders.
    let netem = has_netem();
    let relay = if netem {
        sh(&format!(
            "tc qdisc add dev {} root netem delay {DELAY_MS}ms",
            bridge(&name)
        ));
        None
    } else {
        let to = delay::ssh_target(&cfg_text, &c.master());
        Some(delay::DelayedLink::new(
            to,
            std::time::Duration::from_millis(DELAY_MS.into()),
        ))
    };
    let by = if netem { "netem" } else { "relay" };
    let part = dir.path().join("tenth");
    std::fs::create_dir_all(&part).unwrap();
    let mut part_files = 0;
    let mut part_bytes = 0u64;
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    folders.sort();
    for f in folders.iter().take(folders.len().div_ceil(10)) {
        let to = part.join(f.file_name().unwrap());
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(f).unwrap() {
            let e = e.unwrap();
            part_bytes += e.metadata().unwrap().len();
            part_files += 1;
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
    let link = format!("delay{DELAY_MS}ms-{by}");
    let delayed = std::panic::catch_unwind(|| {
        ways.link(
            &link,
            dir.path(),
            &part,
            part_files,
            part_bytes as f64 / 1e6,
        )
    });
    if netem {
        sh(&format!("tc qdisc del dev {} root", bridge(&name)));
    }
    drop(relay);
    let delayed = delayed.unwrap_or_else(|p| std::panic::resume_unwind(p));
    println!(
        "transfer ratio link={link} push/raw={:.2} pull/raw={:.2} scp/push={:.1} rsync/push={:.1}",
        delayed.0, delayed.1, delayed.2, delayed.3
    );
}
