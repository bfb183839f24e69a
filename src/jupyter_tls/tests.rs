use super::*;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;

fn profile_with(access: &str, folder: &Path) -> Result<Profile, crate::profile::ProfileError> {
    let text = format!(
        r#"
name = "tls"
cloud = "local-user"

[master]
flavor = "m1.small"
image = "debian-12-genericcloud-amd64"

[workers]
count = 1
flavor = "m1.small"

[network]
cidr = "10.42.0.0/24"
external_network = "public"

[floating_ip]
pool = "public"

[access]
allowed_cidrs = ["203.0.113.0/24"]
{access}
"#
    );
    crate::profile::parse(&folder.join("p.toml"), &text)
}

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

#[test]
fn fingerprint_is_sha256_in_colon_separated_upper_hex() {
    // SHA-256 of nothing: e3b0c442 98fc1c14 ...
    let f = fingerprint(b"");
    assert!(f.starts_with("E3:B0:C4:42:98:FC:1C:14:"), "{f}");
    assert_eq!(f.len(), 32 * 3 - 1);
}

#[test]
fn pem_blocks_reads_every_block_and_refuses_broken_ones() {
    let two = "junk\n-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n\
               -----BEGIN CERTIFICATE-----\nBA\nU=\n-----END CERTIFICATE-----\n";
    assert_eq!(
        pem_blocks(two, "CERTIFICATE").unwrap(),
        vec![vec![1, 2, 3], vec![4, 5]]
    );
    assert!(pem_blocks("no pem here", "CERTIFICATE").unwrap().is_empty());
    let open = "-----BEGIN CERTIFICATE-----\nAQID\n";
    assert!(pem_blocks(open, "CERTIFICATE")
        .unwrap_err()
        .contains("without its"));
    let garbage = "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----";
    assert!(pem_blocks(garbage, "CERTIFICATE")
        .unwrap_err()
        .contains("not base64"));
}

#[test]
fn a_made_certificate_names_the_address_and_its_key_matches() {
    let ip: IpAddr = "203.0.113.7".parse().unwrap();
    let (made, until) = make("demo", ip, now()).unwrap();
    assert!(until > now() + chrono::Duration::days(800));
    let ders = pem_blocks(&made.cert_pem, "CERTIFICATE").unwrap();
    assert_eq!(ders.len(), 1);
    assert_eq!(fingerprint(&ders[0]), made.fingerprint);
    // the address as it sits in the certificate's SAN (an iPAddress: tag 0x87, 4 bytes)
    assert!(
        ders[0].windows(6).any(|w| w == [0x87, 4, 203, 0, 113, 7]),
        "the SAN holds 203.0.113.7"
    );
    assert!(
        !format!("{made:?}").contains("PRIVATE"),
        "Debug shows no key"
    );
    // The same files given back as a user's own: the key is the certificate's.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("j.crt"), &made.cert_pem).unwrap();
    std::fs::write(dir.path().join("j.key"), &made.key_pem).unwrap();
    let p = profile_with(
        "jupyter = \"public\"\njupyter_cert = \"j.crt\"\njupyter_key = \"j.key\"",
        dir.path(),
    )
    .unwrap();
    assert_eq!(
        p.access.jupyter_cert.as_deref(),
        Some(dir.path().join("j.crt").as_path())
    );
    let user = user_files(&p).unwrap().expect("the profile names files");
    assert_eq!(user.fingerprint, made.fingerprint);
    assert_eq!(user.origin, Origin::User);
}

#[test]
fn a_users_files_are_checked_before_use() {
    let dir = tempfile::tempdir().unwrap();
    let (one, _) = make("a", "203.0.113.1".parse().unwrap(), now()).unwrap();
    let (two, _) = make("b", "203.0.113.2".parse().unwrap(), now()).unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("one.crt", &one.cert_pem);
    write("two.key", &two.key_pem);
    write("empty.crt", "nothing\n");
    write(
        "enc.key",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAQID\n-----END ENCRYPTED PRIVATE KEY-----\n",
    );
    let with = |cert: &str, key: &str| {
        let p = profile_with(
            &format!("jupyter = \"public\"\njupyter_cert = \"{cert}\"\njupyter_key = \"{key}\""),
            dir.path(),
        )
        .unwrap();
        user_files(&p).unwrap_err()
    };
    let e = with("one.crt", "two.key");
    assert!(e.is_bad_input());
    assert!(
        e.to_string().contains("is not the key of the certificate"),
        "{e}"
    );
    let e = with("empty.crt", "two.key");
    assert!(
        e.to_string()
            .contains("holds no `-----BEGIN CERTIFICATE-----`"),
        "{e}"
    );
    let e = with("one.crt", "enc.key");
    assert!(e.to_string().contains("encrypted key"), "{e}");
    let e = with("missing.crt", "two.key");
    assert!(
        matches!(e, TlsError::Read { .. }) && e.is_bad_input(),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("access.jupyter_cert: cannot read"),
        "{e}"
    );
    // a folder is not a file
    let e = with(".", "two.key");
    assert!(e.to_string().contains("is not a file"), "{e}");
    // no files named: nothing read
    let p = profile_with("jupyter = \"public\"", dir.path()).unwrap();
    assert!(user_files(&p).unwrap().is_none());
}

#[test]
fn the_profile_refuses_a_lone_or_unused_certificate_and_hostile_paths() {
    let dir = tempfile::tempdir().unwrap();
    for (access, says) in [
        (
            "jupyter = \"public\"\njupyter_cert = \"j.crt\"",
            "given without `jupyter_key`",
        ),
        (
            "jupyter = \"public\"\njupyter_key = \"j.key\"",
            "given without `jupyter_cert`",
        ),
        (
            "jupyter_cert = \"j.crt\"\njupyter_key = \"j.key\"",
            "only used when Jupyter is public",
        ),
        (
            "jupyter = \"public\"\njupyter_cert = \"a\\nb\"\njupyter_key = \"j.key\"",
            "control characters",
        ),
        (
            "jupyter = \"public\"\njupyter_cert = \"\"\njupyter_key = \"j.key\"",
            "empty",
        ),
    ] {
        let e = profile_with(access, dir.path()).unwrap_err().to_string();
        assert!(e.contains(says), "{access}: {e}");
    }
}

#[test]
fn the_cluster_keeps_its_certificate_until_the_address_changes() {
    let root = tempfile::tempdir().unwrap();
    let name = crate::input::ClusterName::parse("tls").unwrap();
    let dir = ClusterDir::open(root.path(), &name).unwrap();
    let p = profile_with("jupyter = \"public\"", root.path()).unwrap();
    let ip: IpAddr = "203.0.113.9".parse().unwrap();
    let first = for_profile(&p, &dir, Some(ip))
        .unwrap()
        .expect("public: TLS");
    assert_eq!(first.origin, Origin::Made);
    let key = dir.path.join("jupyter_tls.key");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let again = for_profile(&p, &dir, Some(ip)).unwrap().unwrap();
    assert_eq!(again, first, "kept");
    let moved = for_profile(&p, &dir, Some("203.0.113.10".parse().unwrap()))
        .unwrap()
        .unwrap();
    assert_ne!(
        moved.fingerprint, first.fingerprint,
        "made anew for the new address"
    );
    // No public address (the local provider publishes on loopback), or the tunnel: no TLS.
    assert!(for_profile(&p, &dir, None).unwrap().is_none());
    let tunnel = profile_with("", root.path()).unwrap();
    assert!(for_profile(&tunnel, &dir, Some(ip)).unwrap().is_none());
}

/// A TLS server on loopback with `made`'s certificate, answering one HTTP request per
/// connection with a JupyterLab title.
fn serve(made: &JupyterTls) -> (u16, std::thread::JoinHandle<()>) {
    let cert = rustls::pki_types::CertificateDer::from(
        pem_blocks(&made.cert_pem, "CERTIFICATE").unwrap().remove(0),
    );
    let key = private_key(&made.key_pem).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    let config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        for _ in 0..2 {
            let Ok((tcp, _)) = listener.accept() else {
                return;
            };
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut buf = [0u8; 4096];
            if matches!(tls.read(&mut buf), Ok(n) if n > 0) {
                let body = "<title>JupyterLab</title>";
                let _ = write!(
                    tls,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        }
    });
    (port, handle)
}

#[tokio::test]
async fn the_pinned_client_accepts_that_certificate_and_no_other() {
    let (made, _) = make("pin", "127.0.0.1".parse().unwrap(), now()).unwrap();
    let (other, _) = make("other", "127.0.0.1".parse().unwrap(), now()).unwrap();
    let (port, server) = serve(&made);
    let url = format!("https://127.0.0.1:{port}/lab?token=secret");
    let timeout = std::time::Duration::from_secs(10);
    let good = pinned_client(&made.fingerprint, timeout).unwrap();
    let page = good.get(&url).send().await.expect("the pinned certificate");
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("JupyterLab"));
    let wrong = pinned_client(&other.fingerprint, timeout).unwrap();
    let refused = wrong
        .get(&url)
        .send()
        .await
        .expect_err("another certificate");
    let chain = format!("{refused:?}");
    assert!(
        chain.contains(&made.fingerprint),
        "says what was offered: {chain}"
    );
    drop(wrong);
    server.join().unwrap();
}
