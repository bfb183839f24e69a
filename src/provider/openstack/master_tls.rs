//! How the master's own programs (the autostop agent, the object store copy) trust the
//! cloud's HTTPS: as this machine does, by the cloud config's `cacert` bundle and `insecure`.

use super::OpenStackProvider;
use crate::provider::{MasterTls, ProviderError};

/// The most a CA bundle for the master may hold: a real one is a few hundred kB at most.
const CA_BUNDLE_MAX: usize = 1 << 20;

/// The cloud config's `cacert` file as the master gets it: PEM certificates, text, at most
/// [`CA_BUNDLE_MAX`] bytes. Pure but for the read handed in.
fn ca_bundle(
    path: &std::path::Path,
    read: std::io::Result<Vec<u8>>,
) -> Result<String, ProviderError> {
    let shown = crate::input::shown(&path.to_string_lossy());
    let bytes = read.map_err(|e| {
        ProviderError::Cloud(format!(
            "cannot read the cloud's CA certificate {shown}: {e}"
        ))
    })?;
    if bytes.len() > CA_BUNDLE_MAX {
        return Err(ProviderError::Cloud(format!(
            "the cloud's CA certificate {shown} holds {} bytes, more than a CA bundle does ({CA_BUNDLE_MAX})",
            bytes.len()
        )));
    }
    match String::from_utf8(bytes) {
        Ok(text) if text.contains("-----BEGIN CERTIFICATE-----") => Ok(text),
        _ => Err(ProviderError::Cloud(format!(
            "the cloud's CA certificate {shown} holds no PEM certificate"
        ))),
    }
}

impl OpenStackProvider {
    /// How the master trusts the cloud's HTTPS: the bundle `cacert` names (read again here;
    /// the session read it first, so a file gone since is said in one line), and `insecure`.
    pub(super) fn master_tls(&self) -> Result<MasterTls, ProviderError> {
        let config = self.os.config();
        let ca_pem = match &config.cacert {
            None => None,
            Some(path) => Some(ca_bundle(path, std::fs::read(path))?),
        };
        Ok(MasterTls {
            ca_pem,
            insecure: config.insecure,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_bundle_is_pem_text_of_a_bundles_size_or_refused_in_one_line() {
        let path = std::path::Path::new("/etc/ssl/cloud-ca.pem");
        let pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec();
        assert!(ca_bundle(path, Ok(pem)).is_ok());
        let said = |read| ca_bundle(path, read).unwrap_err().to_string();
        assert!(said(Ok(b"not a certificate".to_vec())).contains("holds no PEM certificate"));
        assert!(said(Ok(vec![0xff, 0xfe])).contains("holds no PEM certificate"));
        assert!(said(Ok(vec![b'a'; CA_BUNDLE_MAX + 1])).contains("more than a CA bundle does"));
        let gone = said(Err(std::io::Error::from(std::io::ErrorKind::NotFound)));
        assert!(
            gone.starts_with("cannot read the cloud's CA certificate /etc/ssl/cloud-ca.pem"),
            "{gone}"
        );
        let hostile = ca_bundle(std::path::Path::new("/tmp/a\nb"), Ok(vec![]))
            .unwrap_err()
            .to_string();
        assert!(!hostile.contains('\n'), "{hostile}");
    }
}
