//! HTTPS for a public Jupyter (`access.jupyter = "public"`): the token in Jupyter's URL must
//! not cross the network in clear text. The certificate is the user's own
//! (`access.jupyter_cert` and `access.jupyter_key`) or one made here for the master's public
//! address, kept in the cluster folder; either way the user is shown its SHA-256 fingerprint,
//! and this machine's own requests to Jupyter (the check) accept that certificate and no other.
//! The tunnel (the default) stays plain HTTP inside SSH.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::input::shown;
use crate::profile::{JupyterAccess, Profile};
use crate::state::{self, ClusterDir, StateError};

/// Jupyter's certificate and key as they go to the master, and what the user is shown.
#[derive(Clone, PartialEq, Eq)]
pub struct JupyterTls {
    pub cert_pem: String,
    pub key_pem: String,
    /// SHA-256 of the server's certificate (DER), `AB:CD:...` as browsers show it.
    pub fingerprint: String,
    /// Where it came from, for the line that shows it.
    pub origin: Origin,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Made by hvd-cluster for the master's address.
    Made,
    /// The profile's `access.jupyter_cert`.
    User,
}

// Never print the key.
impl std::fmt::Debug for JupyterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JupyterTls")
            .field("fingerprint", &self.fingerprint)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Bad input (exit 2): the profile's certificate or key.
    #[error("access.{key}: cannot read {}: {source}", shown(&.path.display().to_string()))]
    Read {
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("access.{key}: {} {problem}", shown(&.path.display().to_string()))]
    Bad {
        key: &'static str,
        path: PathBuf,
        problem: String,
    },
    #[error("cannot make Jupyter's certificate: {0}")]
    Make(String),
    #[error(transparent)]
    State(#[from] StateError),
}

impl TlsError {
    /// The profile's files are bad input; making or keeping our own is a failure while working.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, TlsError::Read { .. } | TlsError::Bad { .. })
    }
}

/// The largest certificate chain or key file read (a chain of a few certificates is ~10 kB).
const MAX_PEM_BYTES: u64 = 256 * 1024;
/// How long a certificate made here is valid; `up` makes a new one when less is left.
const MADE_VALID_DAYS: i64 = 825;
const RENEW_WITHIN_DAYS: i64 = 30;

/// `AB:CD:...`: SHA-256 of `der`, as browsers and `openssl x509 -fingerprint -sha256` show it.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    let mut out = String::with_capacity(95);
    for (i, byte) in digest.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        let _ = write!(out, "{byte:02X}");
    }
    out
}

/// The DER bodies of every `-----BEGIN {label}-----` block of a PEM text, in order.
pub fn pem_blocks(text: &str, label: &str) -> Result<Vec<Vec<u8>>, String> {
    let (begin, end) = (
        format!("-----BEGIN {label}-----"),
        format!("-----END {label}-----"),
    );
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&begin) {
        let body_and_more = &rest[start + begin.len()..];
        let stop = body_and_more
            .find(&end)
            .ok_or_else(|| format!("has a `{begin}` without its `{end}`"))?;
        let body: String = body_and_more[..stop]
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.as_bytes())
            .map_err(|_| format!("has a {label} block that is not base64"))?;
        blocks.push(der);
        rest = &body_and_more[stop + end.len()..];
    }
    Ok(blocks)
}

/// The TLS Jupyter serves with for this profile, or `None` (a tunnel, or no public address:
/// the local provider publishes on this machine's loopback).
pub fn for_profile(
    p: &Profile,
    dir: &ClusterDir,
    public_ip: Option<IpAddr>,
) -> Result<Option<JupyterTls>, TlsError> {
    if p.access.jupyter != JupyterAccess::Public {
        return Ok(None);
    }
    if let Some(user) = user_files(p)? {
        return Ok(Some(user));
    }
    match public_ip {
        Some(ip) => Ok(Some(made_for(dir, p.name.as_str(), ip)?)),
        None => Ok(None),
    }
}

/// The profile's own certificate and key, read and checked (both PEM, the key the
/// certificate's), or `None` when the profile names none. Run before anything is made.
pub fn user_files(p: &Profile) -> Result<Option<JupyterTls>, TlsError> {
    let (Some(cert_path), Some(key_path)) = (&p.access.jupyter_cert, &p.access.jupyter_key) else {
        return Ok(None);
    };
    let cert_pem = read_small("jupyter_cert", cert_path)?;
    let key_pem = read_small("jupyter_key", key_path)?;
    let bad = |key: &'static str, path: &Path, problem: String| TlsError::Bad {
        key,
        path: path.to_path_buf(),
        problem,
    };
    let certs =
        pem_blocks(&cert_pem, "CERTIFICATE").map_err(|m| bad("jupyter_cert", cert_path, m))?;
    let Some(leaf) = certs.first() else {
        return Err(bad(
            "jupyter_cert",
            cert_path,
            "holds no `-----BEGIN CERTIFICATE-----` block (a PEM certificate, the server's first)"
                .into(),
        ));
    };
    let key = private_key(&key_pem).map_err(|m| bad("jupyter_key", key_path, m))?;
    let chain: Vec<rustls::pki_types::CertificateDer<'static>> = certs
        .iter()
        .map(|der| rustls::pki_types::CertificateDer::from(der.clone()))
        .collect();
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| {
        bad(
            "jupyter_key",
            key_path,
            format!("is not a private key rustls can use (RSA, ECDSA P-256/P-384 or Ed25519): {e}"),
        )
    })?;
    rustls::sign::CertifiedKey::new(chain, signing)
        .keys_match()
        .map_err(|e| {
            bad(
                "jupyter_key",
                key_path,
                format!(
                    "is not the key of the certificate in {} ({e})",
                    shown(&cert_path.display().to_string())
                ),
            )
        })?;
    Ok(Some(JupyterTls {
        fingerprint: fingerprint(leaf),
        cert_pem,
        key_pem,
        origin: Origin::User,
    }))
}

fn read_small(key: &'static str, path: &Path) -> Result<String, TlsError> {
    let read = |source| TlsError::Read {
        key,
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    if !meta.is_file() || meta.len() > MAX_PEM_BYTES {
        return Err(TlsError::Bad {
            key,
            path: path.to_path_buf(),
            problem: format!("is not a file of at most {} kB", MAX_PEM_BYTES / 1024),
        });
    }
    let bytes = std::fs::read(path).map_err(read)?;
    String::from_utf8(bytes).map_err(|_| TlsError::Bad {
        key,
        path: path.to_path_buf(),
        problem: "is not PEM text".into(),
    })
}

/// The one private key of a PEM key file: PKCS#8, or the older RSA and EC forms.
fn private_key(text: &str) -> Result<rustls::pki_types::PrivateKeyDer<'static>, String> {
    use rustls::pki_types::{
        PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
    };
    let mut found: Vec<PrivateKeyDer<'static>> = Vec::new();
    for der in pem_blocks(text, "PRIVATE KEY")? {
        found.push(PrivatePkcs8KeyDer::from(der).into());
    }
    for der in pem_blocks(text, "RSA PRIVATE KEY")? {
        found.push(PrivatePkcs1KeyDer::from(der).into());
    }
    for der in pem_blocks(text, "EC PRIVATE KEY")? {
        found.push(PrivateSec1KeyDer::from(der).into());
    }
    if pem_blocks(text, "ENCRYPTED PRIVATE KEY")?.len() > found.len() {
        return Err("is an encrypted key: Jupyter cannot ask for its passphrase".into());
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err("holds no `-----BEGIN PRIVATE KEY-----` block (a PEM private key)".into()),
        n => Err(format!(
            "holds {n} private keys; give the one of the certificate"
        )),
    }
}

/// The certificate made for `ip`, kept in the cluster folder: made on first use, and again
/// when the master's address changed or it is about to expire.
fn made_for(dir: &ClusterDir, cluster: &str, ip: IpAddr) -> Result<JupyterTls, TlsError> {
    let (cert_path, key_path, for_path) = (
        dir.path.join("jupyter_tls.crt"),
        dir.path.join("jupyter_tls.key"),
        dir.path.join("jupyter_tls.for"),
    );
    let now = chrono::Utc::now();
    let wanted = ip.to_string();
    let kept = (|| {
        let about = std::fs::read_to_string(&for_path).ok()?;
        let (address, until) = about.trim().split_once(' ')?;
        let until = chrono::DateTime::parse_from_rfc3339(until).ok()?;
        if address != wanted || until < now + chrono::Duration::days(RENEW_WITHIN_DAYS) {
            return None;
        }
        let cert_pem = std::fs::read_to_string(&cert_path).ok()?;
        let key_pem = std::fs::read_to_string(&key_path).ok()?;
        let der = pem_blocks(&cert_pem, "CERTIFICATE")
            .ok()?
            .into_iter()
            .next()?;
        Some(JupyterTls {
            fingerprint: fingerprint(&der),
            cert_pem,
            key_pem,
            origin: Origin::Made,
        })
    })();
    if let Some(tls) = kept {
        return Ok(tls);
    }
    let (made, until) = make(cluster, ip, now)?;
    state::write_atomic(&key_path, made.key_pem.as_bytes(), 0o600)?;
    state::write_atomic(&cert_path, made.cert_pem.as_bytes(), 0o644)?;
    state::write_atomic(
        &for_path,
        format!("{wanted} {}\n", until.to_rfc3339()).as_bytes(),
        0o644,
    )?;
    Ok(made)
}

/// A new self-signed certificate for `ip` (its only subject alternative name), ECDSA P-256,
/// for a TLS server, valid from a day ago for [`MADE_VALID_DAYS`].
pub fn make(
    cluster: &str,
    ip: IpAddr,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(JupyterTls, chrono::DateTime<chrono::Utc>), TlsError> {
    use chrono::Datelike as _;
    let failed = |e: rcgen::Error| TlsError::Make(e.to_string());
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    params.subject_alt_names = vec![rcgen::SanType::IpAddress(ip)];
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("hvd-cluster {cluster} Jupyter"),
    );
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.is_ca = rcgen::IsCa::NoCa;
    let (from, until) = (
        now - chrono::Duration::days(1),
        now + chrono::Duration::days(MADE_VALID_DAYS),
    );
    let date = |d: chrono::DateTime<chrono::Utc>| {
        rcgen::date_time_ymd(d.year(), d.month() as u8, d.day() as u8)
    };
    params.not_before = date(from);
    params.not_after = date(until);
    let key = rcgen::KeyPair::generate().map_err(failed)?;
    let cert = params.self_signed(&key).map_err(failed)?;
    Ok((
        JupyterTls {
            fingerprint: fingerprint(cert.der()),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            origin: Origin::Made,
        },
        until,
    ))
}

/// An HTTP client that accepts the server certificate whose SHA-256 is `fingerprint` and no
/// other (whatever its names, issuer or dates: the user was shown that fingerprint), so the
/// token in the URL goes nowhere else.
pub fn pinned_client(
    fingerprint: &str,
    timeout: std::time::Duration,
) -> Result<reqwest::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned {
            fingerprint: fingerprint.to_string(),
            provider,
        }))
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .timeout(timeout)
        .build()
        .map_err(|e| e.to_string())
}

#[derive(Debug)]
struct Pinned {
    fingerprint: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let offered = fingerprint(end_entity.as_ref());
        if offered == self.fingerprint {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "Jupyter offered the certificate {offered}, not {}",
                self.fingerprint
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests;
