//! Jupyter Lab as a user meets it: the URL `up` prints, and a terminal of it driven over its
//! websocket as a browser does.

use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::TestCluster;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `Jupyter Lab: URL` line of `up`'s output.
pub fn jupyter_url(up: &Output) -> String {
    String::from_utf8_lossy(&up.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("Jupyter Lab: "))
        .expect("a Jupyter URL")
        .trim()
        .to_string()
}

/// Types `command` into a new terminal of the Jupyter server at `url` (`.../lab?token=T`) and
/// returns what the terminal showed until the command ended; the command's exit code follows
/// `HVD_TERM_EXIT=` in it.
pub fn in_jupyter_terminal(url: &str, command: &str, limit: Duration) -> String {
    let (base, token) = url.split_once("/lab?token=").expect("a token in the URL");
    let host = base.strip_prefix("http://").expect("an http:// URL");
    let made = Command::new("curl")
        .args(["-s", "-f", "-X", "POST", "-H"])
        .arg(format!("Authorization: token {token}"))
        .arg(format!("{base}/api/terminals"))
        .output()
        .expect("curl");
    assert!(made.status.success(), "a new terminal: {}", text(&made));
    let terminal: serde_json::Value =
        serde_json::from_slice(&made.stdout).expect("the terminal as JSON");
    let name = terminal["name"].as_str().expect("the terminal's name");
    let stream = TcpStream::connect(host).expect("connect to Jupyter");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a read timeout");
    let (mut ws, _) = tungstenite::client(
        format!("ws://{host}/terminals/websocket/{name}?token={token}"),
        stream,
    )
    .expect("the terminal's websocket");
    let typed = format!("{command}; echo HVD_TERM_EXIT=$?\r");
    ws.send(tungstenite::Message::Text(
        serde_json::json!(["stdin", typed]).to_string(),
    ))
    .expect("type into the terminal");
    let deadline = Instant::now() + limit;
    let mut shown = String::new();
    loop {
        // the echo of the typed line holds `HVD_TERM_EXIT=$?`; the command's end, a number
        if terminal_exit(&shown).is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the terminal did not finish `{command}` within {limit:?}:\n{shown}"
        );
        match ws.read() {
            Ok(tungstenite::Message::Text(m)) => {
                if let Ok(serde_json::Value::Array(parts)) = serde_json::from_str(&m) {
                    if parts.first().and_then(|k| k.as_str()) == Some("stdout") {
                        shown.push_str(parts.get(1).and_then(|t| t.as_str()).unwrap_or(""));
                    }
                }
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("the terminal's websocket: {e}\n{shown}"),
        }
    }
    let _ = ws.close(None);
    shown
}

/// The exit code the terminal printed after `HVD_TERM_EXIT=`.
pub fn terminal_exit(shown: &str) -> Option<u32> {
    shown.split("HVD_TERM_EXIT=").skip(1).find_map(|r| {
        let digits: String = r.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().ok()
    })
}

/// In a terminal of the Jupyter server at `url`, the tutorial's `horovodrun` over the
/// hostfile at our images' path runs the check job on all `ranks` slots of `c`, every rank
/// allreducing the right sum. `--gloo`: the clusters here run Gloo, and a bare horovodrun
/// picks Open MPI where the image's Horovod has it (the stand-ins' has).
pub fn horovodrun_in_terminal(c: &TestCluster, url: &str, ranks: u32) {
    let worker_ip = c.status_json()["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["name"] == format!("{}-worker-1", c.name))
        .and_then(|n| n["private_ip"].as_str().map(String::from))
        .expect("worker-1's private address");
    let route = c.on_node("master", &["ip", "-o", "-4", "route", "get", &worker_ip]);
    let iface = route
        .split_whitespace()
        .skip_while(|w| *w != "dev")
        .nth(1)
        .expect("the interface towards the workers")
        .to_string();
    let shown = in_jupyter_terminal(
        url,
        &format!(
            "horovodrun --gloo -np {ranks} --hostfile /horovod/generated/hostfile -p 12345 \
             --network-interfaces {iface} python /etc/hvd-cluster/check.py 2>&1 | grep HVD_RANK"
        ),
        Duration::from_secs(400),
    );
    eprintln!("--- the Jupyter terminal showed:\n{shown}");
    assert_eq!(terminal_exit(&shown), Some(0), "{shown}");
    for rank in 0..ranks {
        assert!(
            shown.contains(&format!("rank={rank} size={ranks}")),
            "rank {rank}:\n{shown}"
        );
    }
    assert!(!shown.contains("ok=False"), "{shown}");
}

/// A public Jupyter (`jupyter = "public"`) as a browser meets it: `url` is `https://` on the
/// master's address; the certificate it serves is the one whose SHA-256 `up` printed (read with
/// `openssl s_client`), made for that address (curl checks it against the copy kept in the
/// cluster folder, subject alternative name included) and answering with JupyterLab; plain
/// HTTP on the same port gets no Jupyter page.
pub fn https_only(c: &TestCluster, url: &str, up_stdout: &str) {
    let printed = up_stdout
        .lines()
        .find_map(|l| l.strip_prefix("Jupyter's certificate SHA-256 "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("up prints the certificate's fingerprint: {up_stdout}"));
    let rest = url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("HTTPS: {url}"));
    let (host, _) = rest.split_once('/').expect("host:port/path");
    let served = Command::new("sh")
        .args([
            "-c",
            "openssl s_client -connect \"$1\" </dev/null 2>/dev/null \
             | openssl x509 -noout -fingerprint -sha256",
            "sh",
            host,
        ])
        .output()
        .expect("openssl");
    let served = String::from_utf8_lossy(&served.stdout);
    let served = served.trim().rsplit('=').next().unwrap_or_default();
    assert!(
        served.eq_ignore_ascii_case(printed),
        "Jupyter serves {served:?}, up printed {printed}"
    );
    let kept = c.state.join(&c.name).join("jupyter_tls.crt");
    let page = Command::new("curl")
        .args(["-s", "--max-time", "30", "-w", "\n%{http_code}", "--cacert"])
        .arg(&kept)
        .arg(url)
        .output()
        .expect("curl");
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(
        page.trim_end().ends_with("200") && page.contains("JupyterLab"),
        "HTTPS with the cluster's certificate: {page}"
    );
    let plain = Command::new("curl")
        .args(["-s", "--max-time", "30", "-w", "\n%{http_code}"])
        .arg(url.replacen("https://", "http://", 1))
        .output()
        .expect("curl");
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(
        !plain.contains("JupyterLab") && !plain.trim_end().ends_with("200"),
        "plain HTTP gets no Jupyter page: {plain}"
    );
}
