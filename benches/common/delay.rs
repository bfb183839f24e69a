//! A link with added round-trip delay, made in user space for kernels without netem: an
//! iptables rule (nat OUTPUT, REDIRECT) sends every new TCP connection from this machine to
//! one address and port into a relay on 127.0.0.1, which passes each chunk on half the delay
//! later in each direction, at most [`IN_FLIGHT`] bytes ahead (a window, as a real link's
//! sender has). The relay's own connections carry a firewall mark the rule lets through.
//! Dropped, the rule goes and the relay stops taking connections.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

const MARK: u32 = 0x1d1;
const CHUNK: usize = 64 * 1024;
/// Bytes a direction holds in flight: 64 chunks, 4 MiB (Linux's default largest TCP window).
const IN_FLIGHT: usize = 64;

pub struct DelayedLink {
    rule: Vec<String>,
    stop: Arc<AtomicBool>,
}

impl DelayedLink {
    /// Every connection to `to` from now on goes `round_trip` slower per round trip.
    pub fn new(to: SocketAddrV4, round_trip: Duration) -> DelayedLink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("the relay's listener");
        let port = listener.local_addr().expect("its port").port();
        listener.set_nonblocking(true).expect("non-blocking accept");
        let rule: Vec<String> = [
            "-p",
            "tcp",
            "-d",
            &to.ip().to_string(),
            "--dport",
            &to.port().to_string(),
            "-m",
            "mark",
            "!",
            "--mark",
            &format!("{MARK:#x}"),
            "-j",
            "REDIRECT",
            "--to-ports",
            &port.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        iptables("-A", &rule);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let half = round_trip / 2;
        thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((down, _)) => {
                        let _ = down.set_nonblocking(false);
                        match connect_marked(to) {
                            Ok(up) => {
                                pipe(&down, &up, half);
                                pipe(&up, &down, half);
                            }
                            Err(e) => eprintln!("delay relay: connect {to}: {e}"),
                        }
                    }
                    Err(_) => thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        DelayedLink { rule, stop }
    }
}

impl Drop for DelayedLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        iptables("-D", &self.rule);
    }
}

fn iptables(verb: &str, rule: &[String]) {
    let ok = Command::new("iptables")
        .args(["-t", "nat", verb, "OUTPUT"])
        .args(rule)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "iptables -t nat {verb} OUTPUT {}", rule.join(" "));
}

/// A TCP connection to `to` whose packets carry [`MARK`] (the rule skips them).
fn connect_marked(to: SocketAddrV4) -> std::io::Result<TcpStream> {
    // SAFETY: a socket this function owns; the TcpStream takes it over below.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let mark = MARK;
        if libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&mark as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: to.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*to.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        if libc::connect(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// `from` -> `to`, each chunk written `delay` after it was read.
fn pipe(from: &TcpStream, to: &TcpStream, delay: Duration) {
    let (mut from, mut to) = (
        from.try_clone().expect("clone"),
        to.try_clone().expect("clone"),
    );
    let (tx, rx) = mpsc::sync_channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        // dropping tx: the writer ends after what is in flight
    });
    thread::spawn(move || {
        for (due, bytes) in rx {
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// The `HostName` the ssh_config `cfg` gives `host`, with its `Port` (22 if none).
pub fn ssh_target(cfg: &str, host: &str) -> SocketAddrV4 {
    let mut inside = false;
    let (mut addr, mut port) = (None, 22u16);
    for line in cfg.lines().map(str::trim) {
        let (key, value) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        match key.to_ascii_lowercase().as_str() {
            "host" => inside = value.split_whitespace().any(|h| h == host),
            "hostname" if inside => addr = value.trim().parse::<Ipv4Addr>().ok(),
            "port" if inside => port = value.trim().parse().unwrap_or(22),
            _ => {}
        }
    }
    SocketAddrV4::new(
        addr.unwrap_or_else(|| panic!("{host}'s HostName in the ssh_config: {cfg}")),
        port,
    )
}
