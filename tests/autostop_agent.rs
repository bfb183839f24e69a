//! The autostop agent (templates/node/autostop_agent.py, what `up` leaves on the master) asked
//! for one look (`--once`) on this machine with the python3 a stock image has: idle with
//! nothing running; busy while a process named `horovodrun` runs, or the runner of a job of
//! `hvd-cluster run` that waits its turn; busy in the first minutes
//! after the host booted (after `start` unshelves the cluster, the agent must not stop it
//! again while start's bootstrap and check run). Nothing is stopped: `--once` only looks.
//! The agent runs in a PID namespace of its own (`unshare`, as root like CI), so the jobs of
//! other tests on this machine stay out of its sight. A second test gives it a real Jupyter
//! Server (the one in our Horovod image, as the master runs it): answering with no kernel
//! busy is idle; a kernel executing a cell is busy.

use std::process::Command;
use std::time::{Duration, Instant};

/// The image whose Jupyter Server the second test runs (scripts/build-images).
const IMAGE: &str = "hvd-cluster/horovod:tf2.12.1-hvd0.28.1";

/// One look of the agent with `config`, in a fresh PID namespace where `job` (a shell
/// command, started in the background first) runs beside it: (busy reasons, idle seconds,
/// whether Jupyter answered).
fn look(config: serde_json::Value, job: &str) -> (Vec<String>, u64, bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let mut config = config;
    // Unless the test gives one: Jupyter on a port nothing listens on; the log inside the
    // temporary folder
    if config.get("jupyter_port").is_none() {
        config["jupyter_port"] = 9.into();
        config["jupyter_token_file"] = dir.path().join("no-token").to_str().unwrap().into();
    }
    config["log"] = dir.path().join("agent.log").to_str().unwrap().into();
    std::fs::write(&path, config.to_string()).unwrap();
    let script =
        format!("{job} sleep 0.3; exec python3 templates/node/autostop_agent.py \"$1\" --once");
    let out = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "bash",
            "-c",
            &script,
            "look",
        ])
        .arg(&path)
        .output()
        .expect("unshare runs the agent");
    assert!(out.status.success(), "{out:?}");
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let busy = said["busy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    (
        busy,
        said["idle_seconds"].as_u64().unwrap(),
        said["jupyter"].as_bool().unwrap(),
    )
}

#[test]
fn the_agent_is_idle_busy_with_a_job_and_holds_after_a_boot() {
    let no_grace = serde_json::json!({"idle_seconds": 60, "boot_grace_seconds": 0});
    let (busy, _, jupyter) = look(no_grace.clone(), "");
    assert_eq!(busy, Vec::<String>::new(), "nothing runs: idle");
    assert!(!jupyter, "nothing listens on port 9");

    // A job: a process whose argv[0] is horovodrun, as `hvd-cluster run` starts one.
    let (busy, idle, _) = look(no_grace, "(exec -a horovodrun sleep 30) &");
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert!(
        busy[0].starts_with("job running: horovodrun (pid "),
        "{busy:?}"
    );
    assert_eq!(idle, 0, "busy now: no idle time");

    // A job of `hvd-cluster run` waiting its turn: no horovodrun yet, its runner alive.
    let (busy, _, _) = look(
        serde_json::json!({"idle_seconds": 60, "boot_grace_seconds": 0}),
        "d=$(mktemp -d); echo 'sleep 30' > $d/job_runner.sh; bash $d/job_runner.sh run 7 &",
    );
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert!(
        busy[0].starts_with("job running: job 7 queued or running (pid "),
        "{busy:?}"
    );

    // Any host booted less than a billion seconds ago: inside the grace after a boot.
    let grace = serde_json::json!({"idle_seconds": 60, "boot_grace_seconds": 1_000_000_000u64});
    let (busy, idle, _) = look(grace, "");
    assert_eq!(busy.len(), 1, "{busy:?}");
    assert!(
        busy[0].starts_with("just booted: holds until ") && busy[0].contains("bootstrap and check"),
        "{busy:?}"
    );
    assert_eq!(idle, 0);
}

/// Sends one cell to a new kernel of the Jupyter Server on 127.0.0.1:PORT (argv: port, token)
/// over the kernel's websocket, as JupyterLab does, and returns once the kernel says it is
/// busy with it. Runs inside the server's container (tornado comes with Jupyter Server).
const BUSY_KERNEL: &str = r#"
import datetime, json, sys, urllib.request, uuid
from tornado import httpclient, ioloop, websocket
port, token = sys.argv[1], sys.argv[2]
auth = {"Authorization": "token " + token}
req = urllib.request.Request("http://127.0.0.1:%s/api/kernels" % port, data=b"{}", method="POST",
                             headers=dict(auth, **{"Content-Type": "application/json"}))
kernel = json.load(urllib.request.urlopen(req, timeout=60))["id"]
async def main():
    ws = await websocket.websocket_connect(httpclient.HTTPRequest(
        "ws://127.0.0.1:%s/api/kernels/%s/channels" % (port, kernel), headers=auth))
    msg_id = uuid.uuid4().hex
    await ws.write_message(json.dumps({
        "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3",
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat()},
        "parent_header": {}, "metadata": {}, "buffers": [], "channel": "shell",
        "content": {"code": "import time\ntime.sleep(90)", "silent": False,
                    "store_history": False, "user_expressions": {}, "allow_stdin": False,
                    "stop_on_error": True}}))
    while True:
        m = await ws.read_message()
        if m is None:
            sys.exit("the kernel's websocket closed")
        m = json.loads(m)
        if (m.get("msg_type") == "status" and m.get("parent_header", {}).get("msg_id") == msg_id
                and m["content"].get("execution_state") == "busy"):
            print("busy", kernel)
            return
ioloop.IOLoop.current().run_sync(main, timeout=180)
"#;

/// A Jupyter Server of our image on this machine's loopback, removed when dropped.
struct Jupyter {
    container: String,
    port: u16,
    token: String,
}

impl Jupyter {
    fn start() -> Jupyter {
        let built = Command::new("docker")
            .args(["image", "inspect", IMAGE])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(built, "{IMAGE} is not built here: run scripts/build-images");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let token = hex::encode(rand::random::<[u8; 16]>());
        let container = format!("hvd-test-agent-jupyter-{}", std::process::id());
        let out = Command::new("docker")
            .args([
                "run",
                "-d",
                "--rm",
                "--name",
                &container,
                "--network",
                "host",
            ])
            .args(["--label", "hvd-cluster-test=autostop-agent"])
            .args(["--entrypoint", "/opt/hvd/venv/bin/jupyter", IMAGE, "server"])
            .args(["--allow-root", "--no-browser", "--ip=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg("--ServerApp.port_retries=0")
            .arg("--ServerApp.root_dir=/tmp")
            .arg(format!("--IdentityProvider.token={token}"))
            .output()
            .expect("docker run");
        assert!(out.status.success(), "docker run: {out:?}");
        let j = Jupyter {
            container,
            port,
            token,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while !j.answers() {
            assert!(
                Instant::now() < deadline,
                "Jupyter Server did not answer on 127.0.0.1:{port} within 120 s: {}",
                j.logs()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        j
    }

    fn answers(&self) -> bool {
        Command::new("curl")
            .args(["-sf", "-o", "/dev/null", "-H"])
            .arg(format!("Authorization: token {}", self.token))
            .arg(format!("http://127.0.0.1:{}/api/status", self.port))
            .status()
            .is_ok_and(|s| s.success())
    }

    fn logs(&self) -> String {
        Command::new("docker")
            .args(["logs", "--tail", "30", &self.container])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .unwrap_or_default()
    }

    /// Starts a kernel and has it execute a 90 s cell; returns once the kernel is busy.
    fn busy_kernel(&self) {
        let out = Command::new("docker")
            .args(["exec", &self.container, "/opt/hvd/venv/bin/python", "-c"])
            .arg(BUSY_KERNEL)
            .arg(self.port.to_string())
            .arg(&self.token)
            .output()
            .expect("docker exec");
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("busy "),
            "a kernel made busy: {out:?}\n{}",
            self.logs()
        );
    }
}

impl Drop for Jupyter {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", &self.container])
            .output();
    }
}

#[test]
fn a_busy_jupyter_kernel_keeps_the_cluster_up() {
    let jupyter = Jupyter::start();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &jupyter.token).unwrap();
    let config = serde_json::json!({
        "idle_seconds": 60,
        "boot_grace_seconds": 0,
        "jupyter_port": jupyter.port,
        "jupyter_token_file": token_file.to_str().unwrap(),
    });

    // Jupyter answers, no kernel runs: idle.
    let (busy, _, answered) = look(config.clone(), "");
    assert!(
        answered,
        "the agent reads Jupyter's /api/status and /api/kernels"
    );
    assert_eq!(busy, Vec::<String>::new(), "Jupyter with no kernel: idle");

    // A kernel executing a cell (sent as JupyterLab sends it): busy, named as such.
    jupyter.busy_kernel();
    let (busy, idle, _) = look(config, "");
    assert_eq!(busy, vec!["Jupyter kernel busy: 1".to_string()], "{busy:?}");
    assert_eq!(idle, 0);
}

/// Before it shelves the master, the agent removes what its config's `drop_before_shelve`
/// names (the image's archive kept for `scale` and `heal`, which would go into the master's
/// snapshot) and logs how much went; nothing else is touched. Its method called as the
/// agent's `stop` calls it, in a scratch folder.
#[test]
fn the_agent_removes_the_image_archive_before_it_shelves_the_master() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    std::fs::write(path("hvd-cluster-image.tar.zst"), vec![0u8; 2_500_000]).unwrap();
    std::fs::write(path("hvd-cluster-image.tar.zst.id"), "sha256:a\n").unwrap();
    std::fs::write(path("other.txt"), "stays").unwrap();
    let config = serde_json::json!({
        "drop_before_shelve": format!("{}/hvd-cluster-image.tar*", dir.path().display()),
        "log": path("agent.log").to_str().unwrap(),
    });
    std::fs::write(path("config.json"), config.to_string()).unwrap();
    let call = "import importlib.util, json, sys\n\
                spec = importlib.util.spec_from_file_location('agent', 'templates/node/autostop_agent.py')\n\
                agent = importlib.util.module_from_spec(spec)\n\
                spec.loader.exec_module(agent)\n\
                agent.Agent(json.load(open(sys.argv[1]))).drop_before_shelve()\n";
    let out = Command::new("python3")
        .args(["-c", call])
        .arg(path("config.json"))
        .output()
        .expect("python3 runs the agent's method");
    assert!(out.status.success(), "{out:?}");
    assert!(!path("hvd-cluster-image.tar.zst").exists());
    assert!(!path("hvd-cluster-image.tar.zst.id").exists());
    assert!(path("other.txt").exists(), "nothing else is removed");
    let log = std::fs::read_to_string(path("agent.log")).unwrap();
    assert!(
        log.contains("removed the image's archive (2.5 MB): not into the snapshot"),
        "{log}"
    );
}
