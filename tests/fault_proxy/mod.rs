//! A small HTTP proxy of the project's own that stands in front of the local cloud and fails
//! a chosen fraction of the calls, each in one of the ways a cloud under load does: HTTP 500,
//! 503, 429 with `Retry-After`, a connection reset before the request reaches the cloud, and
//! a reset after the cloud applied it (the answer lost).
//!
//! Every service goes through it: the client is pointed at the proxy for Keystone, and the
//! catalog in each token answer is rewritten so that each endpoint
//! `http://127.0.0.1:<port>/<path>` becomes `http://127.0.0.1:<proxy>/_u/<port>/<path>`.
//! One connection per call (`Connection: close`), so a reset hits exactly one call. The
//! faults come from a seeded generator: a cycle's seed fixes its sequence of decisions
//! (which call gets which is still up to the order in which parallel calls arrive).
#![allow(dead_code)] // each test binary uses its part

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How a call is failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Http500,
    Http503,
    /// 429 with `Retry-After: 1`.
    TooMany,
    /// Reset before the request is forwarded: the cloud never sees it.
    ResetBefore,
    /// Forwarded and answered, then reset: the cloud applied it, the answer is lost.
    ResetAfter,
}

pub const FAULTS: [Fault; 5] = [
    Fault::Http500,
    Fault::Http503,
    Fault::TooMany,
    Fault::ResetBefore,
    Fault::ResetAfter,
];

/// What went through the proxy.
#[derive(Debug, Default)]
pub struct Counts {
    pub calls: AtomicU64,
    pub faults: [AtomicU64; 5],
}

impl Counts {
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub fn faults(&self) -> Vec<(Fault, u64)> {
        FAULTS
            .iter()
            .zip(&self.faults)
            .map(|(f, n)| (*f, n.load(Ordering::Relaxed)))
            .collect()
    }
}

struct Shared {
    rate: Mutex<f64>,
    rng: Mutex<StdRng>,
    counts: Mutex<Arc<Counts>>,
    http: reqwest::Client,
    port: u16,
}

/// The running proxy (its thread ends with the test process).
pub struct FaultProxy {
    pub port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 (a free port), passing everything through until [`Self::cycle`].
    pub fn start() -> FaultProxy {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let port = std_listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared {
            rate: Mutex::new(0.0),
            rng: Mutex::new(StdRng::seed_from_u64(0)),
            counts: Mutex::new(Arc::new(Counts::default())),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(120))
                .build()
                .expect("proxy's HTTP client"),
            port,
        });
        let s = shared.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("proxy runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).expect("proxy listener");
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let s = s.clone();
                    tokio::spawn(async move {
                        let _ = serve(&s, stream).await;
                    });
                }
            });
        });
        FaultProxy { port, shared }
    }

    /// A new cycle: this fraction of calls failed, decisions drawn from `seed`; fresh counts.
    pub fn cycle(&self, rate: f64, seed: u64) -> Arc<Counts> {
        *lock(&self.shared.rate) = rate;
        *lock(&self.shared.rng) = StdRng::seed_from_u64(seed);
        let counts = Arc::new(Counts::default());
        *lock(&self.shared.counts) = counts.clone();
        counts
    }

    /// The URL a client uses for `upstream` (`http://127.0.0.1:<port>/...`).
    pub fn url_for(&self, upstream: &str) -> String {
        rewrite_url(upstream, self.port).unwrap_or_else(|| upstream.to_string())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `http://127.0.0.1:5000/v3` → `http://127.0.0.1:<proxy>/_u/5000/v3` (local upstreams only).
pub fn rewrite_url(upstream: &str, proxy_port: u16) -> Option<String> {
    let rest = upstream
        .strip_prefix("http://127.0.0.1:")
        .or_else(|| upstream.strip_prefix("http://localhost:"))?;
    let (port, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let port: u16 = port.parse().ok()?;
    if port == proxy_port {
        return None;
    }
    Some(format!("http://127.0.0.1:{proxy_port}/_u/{port}{path}"))
}

/// Every endpoint URL of a token answer's catalog, through the proxy.
fn rewrite_catalog(body: &[u8], proxy_port: u16) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let catalog = v.get_mut("token")?.get_mut("catalog")?.as_array_mut()?;
    for service in catalog {
        let Some(endpoints) = service.get_mut("endpoints").and_then(|e| e.as_array_mut()) else {
            continue;
        };
        for ep in endpoints {
            let new = ep
                .get("url")
                .and_then(|u| u.as_str())
                .and_then(|u| rewrite_url(u, proxy_port));
            if let Some(new) = new {
                ep["url"] = serde_json::Value::String(new);
            }
        }
    }
    serde_json::to_vec(&v).ok()
}

struct Incoming {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<Incoming>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_string();
    let target = first.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(Incoming {
        method,
        target,
        headers,
        body,
    }))
}

fn reset(stream: TcpStream) {
    // SO_LINGER 0: closing sends RST, not FIN.
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    stream.write_all(out.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await?;
    stream.shutdown().await
}

async fn serve(shared: &Shared, mut stream: TcpStream) -> std::io::Result<()> {
    let Some(req) = read_request(&mut stream).await? else {
        return Ok(());
    };
    let counts = lock(&shared.counts).clone();
    counts.calls.fetch_add(1, Ordering::Relaxed);
    let fault = {
        let rate = *lock(&shared.rate);
        let mut rng = lock(&shared.rng);
        let hit = rng.random::<f64>() < rate;
        let kind = FAULTS[rng.random_range(0..FAULTS.len())];
        hit.then_some(kind)
    };
    if let Some(f) = fault {
        if let Some(i) = FAULTS.iter().position(|x| *x == f) {
            counts.faults[i].fetch_add(1, Ordering::Relaxed);
        }
        if std::env::var_os("FAULT_PROXY_LOG").is_some() {
            let path = req.target.split('?').next().unwrap_or_default();
            eprintln!("fault-proxy: {f:?} on {} {path}", req.method);
        }
    }
    let json = vec![("Content-Type".to_string(), "application/json".to_string())];
    match fault {
        Some(Fault::Http500) => {
            let body = br#"{"message": "injected: internal error", "code": 500}"#;
            return respond(&mut stream, 500, &json, body).await;
        }
        Some(Fault::Http503) => {
            let body = br#"{"message": "injected: service unavailable", "code": 503}"#;
            return respond(&mut stream, 503, &json, body).await;
        }
        Some(Fault::TooMany) => {
            let mut h = json.clone();
            h.push(("Retry-After".into(), "1".into()));
            let body = br#"{"message": "injected: rate limited", "code": 429}"#;
            return respond(&mut stream, 429, &h, body).await;
        }
        Some(Fault::ResetBefore) => {
            reset(stream);
            return Ok(());
        }
        _ => {}
    }
    // /_u/<port>/<rest>
    let Some(rest) = req.target.strip_prefix("/_u/") else {
        return respond(&mut stream, 502, &json, b"{\"message\": \"not proxied\"}").await;
    };
    let (port, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let url = format!("http://127.0.0.1:{port}{path}");
    let method = reqwest::Method::from_bytes(req.method.as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut rb = shared.http.request(method.clone(), &url);
    for (k, v) in &req.headers {
        let lower = k.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "host" | "connection" | "content-length" | "transfer-encoding" | "keep-alive"
        ) {
            continue;
        }
        rb = rb.header(k.as_str(), v.as_str());
    }
    if !req.body.is_empty() {
        rb = rb.body(req.body.clone());
    }
    let resp = match rb.send().await {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("{{\"message\": \"proxy: upstream failed: {e}\"}}");
            return respond(&mut stream, 502, &json, msg.as_bytes()).await;
        }
    };
    let status = resp.status().as_u16();
    let headers: Vec<(String, String)> = resp
        .headers()
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "content-length" | "transfer-encoding" | "connection" | "keep-alive"
            )
        })
        .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let mut body = resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
    if fault == Some(Fault::ResetAfter) {
        reset(stream);
        return Ok(());
    }
    if method == reqwest::Method::POST && path.ends_with("/auth/tokens") && status < 300 {
        if let Some(new) = rewrite_catalog(&body, shared.port) {
            body = new;
        }
    }
    respond(&mut stream, status, &headers, &body).await
}
