//! Local provider: `up` (resources + bootstrap + check) wall time for 1 and 4 nodes with the
//! images already built, and Horovod allreduce bandwidth (from the check) against a raw TCP
//! stream between the same two node containers in the same run (the baseline: what the
//! network itself carries). Reports ratios, asserts nothing about time.
//!
//!   cargo bench --bench bootstrap          # HVD_BENCH_NODES=1,4 by default

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn hvd(state: &Path, args: &[&str]) -> (f64, String) {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_hvd-cluster"))
        .args(args)
        .env("HVD_CLUSTER_STATE_DIR", state)
        .output()
        .expect("run hvd-cluster");
    let secs = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        panic!(
            "hvd-cluster {} failed:\n{stdout}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (secs, stdout)
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// MiB/s of one TCP stream of `mib` MiB from node `from` to node `to` (python sockets).
fn raw_tcp(from: &str, to: &str, mib: u32) -> f64 {
    let ip = docker(&[
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        to,
    ]);
    let server = "import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('0.0.0.0',15001));s.listen(1)\nc,_=s.accept();n=0;t=time.perf_counter();b=bytearray(1<<20)\nwhile True:\n  k=c.recv_into(b)\n  if not k: break\n  n+=k\nprint(n/(time.perf_counter()-t)/2**20)";
    let rx = Command::new("docker")
        .args(["exec", to, "python3", "-c", server])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("receiver");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let client = format!("import socket\ns=socket.create_connection(('{ip}',15001));b=b'\\0'*(1<<20)\nfor _ in range({mib}): s.sendall(b)\ns.close()");
    docker(&["exec", from, "python3", "-c", &client]);
    let out = rx.wait_with_output().expect("receiver output");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0.0)
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let nodes: Vec<u32> = std::env::var("HVD_BENCH_NODES")
        .unwrap_or_else(|_| "1,4".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let base =
        std::fs::read_to_string(root.join("profiles/local.toml")).expect("profiles/local.toml");
    let dir = tempfile::tempdir().expect("temp dir");
    for n in nodes {
        let name = format!("bench-boot-{n}");
        let text = base
            .replace("name = \"hvd-local\"", &format!("name = \"{name}\""))
            .replace("count = 2", &format!("count = {}", n - 1));
        let profile = dir.path().join(format!("{name}.toml"));
        std::fs::write(&profile, text).expect("write profile");
        let p = profile.to_str().expect("utf-8 path");
        let (up, out) = hvd(dir.path(), &["up", p]);
        let (again, _) = hvd(dir.path(), &["up", p]);
        println!("{n} node(s): up {up:.1}s (images cached), up again {again:.1}s");
        for line in out.lines().filter(|l| l.contains("allreduce")) {
            println!("  {}", line.trim());
        }
        if n >= 2 {
            let bus: f64 = out
                .lines()
                .filter(|l| l.contains("allreduce  64 MiB"))
                .find_map(|l| {
                    l.split("busbw")
                        .nth(1)?
                        .split_whitespace()
                        .next()?
                        .parse()
                        .ok()
                })
                .unwrap_or(0.0);
            let tcp = raw_tcp(&format!("{name}-master"), &format!("{name}-worker-1"), 512);
            println!("  raw TCP master -> worker-1: {tcp:.1} MiB/s; allreduce 64 MiB busbw / raw TCP = {:.2}", bus / tcp);
        }
        hvd(dir.path(), &["down", p]);
    }
}
