//! The master's own programs trust a cloud's private CA as this machine does: a
//! cloud config's `cacert` bundle goes into the files `up` puts on the master, and the object
//! store copy (templates/node/object_fetch.py) and the autostop agent verify the cloud's HTTPS
//! against it. The cloud is the project's real local OpenStack (Keystone and Swift); its
//! HTTPS here is a TLS relay this test starts in front of them on 127.0.0.1 with a certificate
//! of a CA made for the test (the cloud itself speaks plain HTTP). The programs run with this
//! machine's python3, as the autostop agent's own test does; the object store copy writes into
//! a temporary folder that stands in for the master's `/shared` (its one constant set there).
//!
//! Needs the cloud: `tests/cloud/install && tests/cloud/start` (scripts/test does both).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use common::cloud::{client, object_store_upload, require_cloud, runtime};
use hvd_cluster::openstack::{CloudConfig, Request, Service};
use hvd_cluster::provider::openstack::credential::{self, Purpose};

/// The cloud of the object store tests (demo's project).
const CLOUD: &str = "local-user";

/// A CA made for this test and a server certificate it signed for 127.0.0.1.
struct TestCa {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn test_ca() -> TestCa {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "hvd-cluster test cloud CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.subject_alt_names = vec![rcgen::SanType::IpAddress([127, 0, 0, 1].into())];
    let leaf = leaf.signed_by(&key, &ca, &ca_key).unwrap();
    TestCa {
        ca_pem: ca.pem(),
        cert_pem: leaf.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// TLS on 127.0.0.1 in front of each of `ports` (plain TCP relayed byte for byte): the
/// relay's ports, in the same order. Killed when dropped.
struct Relay {
    child: Child,
    ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

const RELAY: &str = r#"
import socket, ssl, sys, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    finally:
        a.close()
        b.close()
def handle(c, port):
    try:
        t = ctx.wrap_socket(c, server_side=True)
    except (OSError, ssl.SSLError):
        c.close()
        return
    u = socket.create_connection(("127.0.0.1", port))
    threading.Thread(target=pipe, args=(t, u), daemon=True).start()
    pipe(u, t)
def serve(listener, port):
    while True:
        c, _ = listener.accept()
        threading.Thread(target=handle, args=(c, port), daemon=True).start()
for port in sys.argv[3:]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    threading.Thread(target=serve, args=(listener, int(port)), daemon=True).start()
threading.Event().wait()
"#;

impl Relay {
    fn start(ca: &TestCa, ports: &[u16]) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, &ca.cert_pem).unwrap();
        std::fs::write(&key, &ca.key_pem).unwrap();
        let mut child = Command::new("python3")
            .args(["-c", RELAY])
            .arg(&cert)
            .arg(&key)
            .args(ports.iter().map(u16::to_string))
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ports = ports
            .iter()
            .map(|_| lines.next().unwrap().unwrap().trim().parse().unwrap())
            .collect();
        Relay {
            child,
            ports,
            _dir: dir,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `url`'s port (or the scheme's) and the rest after `host:port`.
fn port_and_path(url: &str) -> (u16, String) {
    let parsed = url::Url::parse(url).unwrap();
    (
        parsed.port_or_known_default().unwrap(),
        parsed.path().to_string(),
    )
}

/// Runs python3 with `program` and `args`, `stdin` fed in: (exit code, stdout, stderr).
fn python(program: &str, args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let mut child = Command::new("python3")
        .args(["-c", program])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// object_fetch.py as the master runs it, with `/shared` moved to `shared` (argv[1]); its
/// own arguments follow.
const FETCH: &str = r#"
import sys
shared = sys.argv.pop(1)
program = open(sys.argv[1]).read()
sys.argv = sys.argv[1:]
g = {"__name__": "object_fetch"}
exec(compile(program, "object_fetch.py", "exec"), g)
g["SHARED"] = shared
try:
    g["main"]()
except g["Refused"] as e:
    print(f"refused: {e}", file=sys.stderr)
    sys.exit(2)
except g["Failed"] as e:
    print(f"failed: {e}", file=sys.stderr)
    sys.exit(1)
"#;

/// The autostop agent's token call (the first thing it does to stop a cluster).
const AGENT_TOKEN: &str = r#"
import json, sys
g = {"__name__": "autostop_agent"}
exec(compile(open(sys.argv[1]).read(), "autostop_agent.py", "exec"), g)
token = g["Agent"](json.load(open(sys.argv[2]))).token()
print("token" if token else "no token")
"#;

#[test]
fn the_masters_programs_trust_the_clouds_private_ca_and_nothing_else() {
    require_cloud();
    let rt = runtime();
    let os = rt.block_on(client(CLOUD));
    let cluster = format!("t-tls-{}", std::process::id() % 100000);
    let container = format!("{cluster}-data");
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("set")).unwrap();
    std::fs::write(data.path().join("set/a.txt"), b"over a private CA\n").unwrap();
    object_store_upload(&container, data.path(), "ds");

    let made = rt
        .block_on(credential::make_data_credential(
            &os,
            &cluster,
            std::slice::from_ref(&container),
        ))
        .expect("a data credential");
    let user = CloudConfig::load(Some(CLOUD)).unwrap();
    let store = rt.block_on(os.endpoint(Service::ObjectStore)).unwrap();
    let (keystone_port, keystone_path) = port_and_path(&user.auth_url);
    let (store_port, store_path) = port_and_path(&store);
    let ca = test_ca();
    let relay = Relay::start(&ca, &[keystone_port, store_port]);
    let https = |port: u16, path: &str| format!("https://127.0.0.1:{port}{path}");

    let programs = tempfile::tempdir().unwrap();
    let fetch_py = programs.path().join("object_fetch.py");
    let agent_py = programs.path().join("autostop_agent.py");
    std::fs::write(&fetch_py, hvd_cluster::templates::OBJECT_FETCH).unwrap();
    std::fs::write(&agent_py, hvd_cluster::templates::AUTOSTOP_AGENT).unwrap();
    let shared = tempfile::tempdir().unwrap();
    let shared_dir = shared.path().to_str().unwrap().to_string();
    // The credential file as `up` writes it for a cloud whose config names `cacert`.
    let credential_file = |tls: &hvd_cluster::provider::MasterTls| {
        let mut config = serde_json::json!({
            "cluster": cluster,
            "identity_url": https(relay.ports[0], &keystone_path),
            "object_store_url": https(relay.ports[1], &store_path),
            "containers": [container],
        });
        tls.add_to(&mut config);
        config["credential_id"] = made.id.clone().into();
        config["credential_secret"] = made.secret.expose().into();
        let path = programs.path().join("credential.json");
        std::fs::write(&path, config.to_string()).unwrap();
        path.to_str().unwrap().to_string()
    };
    let fetch = |tls: &hvd_cluster::provider::MasterTls, dest: &str| {
        let request = serde_json::json!({
            "container": container,
            "prefix": "ds/set",
            "dest": format!("{shared_dir}/{dest}"),
            "threads": 2,
        });
        let cred = credential_file(tls);
        python(
            FETCH,
            &[&shared_dir, fetch_py.to_str().unwrap(), &cred],
            &request.to_string(),
        )
    };
    let private = hvd_cluster::provider::MasterTls {
        ca_pem: Some(ca.ca_pem.clone()),
        insecure: false,
    };

    // With the cloud's CA: the object arrives.
    let (code, out, err) = fetch(&private, "with-ca");
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(shared.path().join("with-ca/a.txt")).unwrap(),
        "over a private CA\n"
    );
    // Without it the certificate is refused: verification is on, nothing is written.
    let (code, out, err) = fetch(&Default::default(), "without-ca");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("CERTIFICATE_VERIFY_FAILED"), "{err}");
    assert!(!shared.path().join("without-ca/a.txt").exists());
    // Another CA's bundle is no better than none.
    let other = hvd_cluster::provider::MasterTls {
        ca_pem: Some(test_ca().ca_pem),
        insecure: false,
    };
    let (code, _, err) = fetch(&other, "other-ca");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("CERTIFICATE_VERIFY_FAILED"), "{err}");
    // `insecure` (the user's own `verify: false`) goes unverified, as on this machine.
    let insecure = hvd_cluster::provider::MasterTls {
        ca_pem: None,
        insecure: true,
    };
    let (code, out, err) = fetch(&insecure, "insecure");
    assert_eq!(code, Some(0), "{out}{err}");

    // The autostop agent gets its token through the same relay with the CA, not without it.
    for (tls, want) in [(&private, true), (&Default::default(), false)] {
        let cred = credential_file(tls);
        let (code, out, err) = python(AGENT_TOKEN, &[agent_py.to_str().unwrap(), &cred], "");
        assert_eq!(code == Some(0) && out.trim() == "token", want, "{out}{err}");
        if !want {
            assert!(err.contains("CERTIFICATE_VERIFY_FAILED"), "{err}");
        }
    }

    drop(relay);
    rt.block_on(credential::delete_credentials_for(
        &os,
        &cluster,
        Purpose::Data,
    ))
    .expect("delete the data credential");
    for path in [format!("{container}/ds/set/a.txt"), container.clone()] {
        rt.block_on(os.request(&Request::delete(Service::ObjectStore, path.as_str())))
            .expect("delete the test's object and container");
    }
}
