//! A private registry's access for `container.source = "pull"`: which registry an image
//! reference names, the credentials for it (taken as Docker users keep them: the
//! `auths` entry of their Docker config, or two variables), the one-use Docker config the
//! pulling node gets, and a failed pull explained in one line. Pure apart from
//! [`credentials_from_env`], which reads the environment and the Docker config file.
//!
//! The password lives in a [`Credentials`] whose `Debug` and `Display` print no secret; it
//! leaves this process only on the stdin of the one node that pulls.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::input::shown;

/// The variables that give credentials without a Docker config (both, or neither).
pub const USER_VAR: &str = "HVD_CLUSTER_REGISTRY_USER";
pub const PASSWORD_VAR: &str = "HVD_CLUSTER_REGISTRY_PASSWORD";

/// Docker Hub, where a reference without a registry host goes.
pub const DOCKER_HUB: &str = "docker.io";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    #[error("{PASSWORD_VAR} is set but {USER_VAR} is not (give both, or neither)")]
    PasswordWithoutUser,
    #[error("{USER_VAR} is set but {PASSWORD_VAR} is not (give both, or neither)")]
    UserWithoutPassword,
    #[error("{USER_VAR} `{0}`: a user name is 1-255 printable characters without `:`")]
    BadUser(String),
    #[error("{PASSWORD_VAR}: a password is 1-4096 bytes without a line break")]
    BadPassword,
    #[error("{path}: {why}")]
    DockerConfig { path: String, why: String },
    #[error("container.registry_ca {path}: {why}")]
    CaFile { path: String, why: String },
}

/// A user name and password for one registry. Shows no secret when printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub registry: String,
    pub user: String,
    password: String,
    /// Where they came from, as the user is told (a path or a variable's name).
    pub source: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Credentials {{ registry: {:?}, user: {:?}, password: <redacted>, source: {:?} }}",
            self.registry, self.user, self.source
        )
    }
}

impl fmt::Display for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "user {} for {} (from {})",
            shown(&self.user),
            shown(&self.registry),
            self.source
        )
    }
}

impl Credentials {
    /// The Docker config the pulling node uses for one pull, then deletes: the
    /// `auths` entry `docker login` writes.
    pub fn docker_config_json(&self) -> String {
        let auth = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", self.user, self.password));
        serde_json::json!({ "auths": { &self.registry: { "auth": auth } } }).to_string()
    }
}

/// The registry host an image reference names (`host[:port]` before the first `/`, when it
/// looks like a host: Docker's rule), else Docker Hub. The reference passed
/// `input::check_image_reference` already.
pub fn registry_of(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first
        }
        _ => DOCKER_HUB,
    }
}

/// The names Docker's config may file a registry under: `host`, `https://host`,
/// `https://host/v1/` (Docker Hub's own key is `https://index.docker.io/v1/`).
fn config_keys(registry: &str) -> Vec<String> {
    if registry == DOCKER_HUB {
        return vec![
            "https://index.docker.io/v1/".into(),
            "index.docker.io".into(),
            "docker.io".into(),
            "registry-1.docker.io".into(),
        ];
    }
    vec![
        registry.to_string(),
        format!("https://{registry}"),
        format!("https://{registry}/"),
        format!("https://{registry}/v1/"),
        format!("https://{registry}/v2/"),
        format!("http://{registry}"),
    ]
}

fn check_user(user: &str) -> Result<(), RegistryError> {
    if user.is_empty()
        || user.len() > 255
        || user.contains(':')
        || user.chars().any(|c| c.is_control())
    {
        return Err(RegistryError::BadUser(shown(user)));
    }
    Ok(())
}

fn check_password(password: &str) -> Result<(), RegistryError> {
    if password.is_empty() || password.len() > 4096 || password.contains(['\n', '\r', '\0']) {
        return Err(RegistryError::BadPassword);
    }
    Ok(())
}

/// Credentials for `registry` from a Docker config's text (`config.json`): its `auths`
/// entry, as `auth` (base64 of `user:password`) or `username` + `password`. `None` when it
/// has no entry for the registry. An entry kept by a credential helper (`credsStore`,
/// `credHelpers`) holds no secret here: that is an error naming the variables to use.
pub fn from_docker_config(
    text: &str,
    registry: &str,
    path: &Path,
) -> Result<Option<Credentials>, RegistryError> {
    let shown_path = shown(&path.to_string_lossy());
    let fail = |why: String| RegistryError::DockerConfig {
        path: shown_path.clone(),
        why,
    };
    let config: serde_json::Value =
        serde_json::from_str(text).map_err(|e| fail(format!("not JSON: {e}")))?;
    let keys = config_keys(registry);
    let entry = config
        .get("auths")
        .and_then(|a| a.as_object())
        .and_then(|auths| keys.iter().find_map(|k| auths.get(k)));
    let helper = config
        .get("credHelpers")
        .and_then(|h| h.as_object())
        .and_then(|h| keys.iter().find_map(|k| h.get(k)))
        .or_else(|| config.get("credsStore"))
        .and_then(|h| h.as_str());
    let Some(entry) = entry else {
        return match helper {
            Some(helper) => Err(fail(format!(
                "the credentials for {} are kept by the credential helper `docker-credential-{}`, which hvd-cluster does not run; set {USER_VAR} and {PASSWORD_VAR} instead",
                shown(registry),
                shown(helper)
            ))),
            None => Ok(None),
        };
    };
    let (user, password) = if let Some(auth) = entry.get("auth").and_then(|a| a.as_str()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|_| fail(format!("the `auth` for {} is not base64", shown(registry))))?;
        let decoded = String::from_utf8(decoded)
            .map_err(|_| fail(format!("the `auth` for {} is not UTF-8", shown(registry))))?;
        let Some((user, password)) = decoded.split_once(':') else {
            return Err(fail(format!(
                "the `auth` for {} is not user:password",
                shown(registry)
            )));
        };
        (user.to_string(), password.to_string())
    } else {
        let field = |name: &str| entry.get(name).and_then(|v| v.as_str()).map(str::to_string);
        match (field("username"), field("password")) {
            (Some(u), Some(p)) => (u, p),
            // an entry with no secret (a helper keeps it, or an identity token)
            _ if helper.is_some() => {
                return Err(fail(format!(
                    "the credentials for {} are kept by a credential helper, which hvd-cluster does not run; set {USER_VAR} and {PASSWORD_VAR} instead",
                    shown(registry)
                )))
            }
            _ => return Ok(None),
        }
    };
    check_user(&user).map_err(|e| fail(e.to_string()))?;
    check_password(&password).map_err(|_| {
        fail(format!(
            "the password for {} is empty, too long or holds a line break",
            shown(registry)
        ))
    })?;
    Ok(Some(Credentials {
        registry: registry.to_string(),
        user,
        password,
        source: shown_path,
    }))
}

/// The user's Docker config file: `$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`.
pub fn docker_config_path(docker_config: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    match (docker_config.filter(|d| !d.is_empty()), home) {
        (Some(dir), _) => Some(Path::new(dir).join("config.json")),
        (None, Some(home)) if !home.is_empty() => Some(Path::new(home).join(".docker/config.json")),
        _ => None,
    }
}

/// The credentials for the registry `image` names: the two variables when set, else the
/// user's Docker config; `None` when neither has any (an anonymous pull).
pub fn credentials_from_env(image: &str) -> Result<Option<Credentials>, RegistryError> {
    let registry = registry_of(image);
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    match (var(USER_VAR), var(PASSWORD_VAR)) {
        (Some(user), Some(password)) => {
            check_user(&user)?;
            check_password(&password)?;
            return Ok(Some(Credentials {
                registry: registry.to_string(),
                user,
                password,
                source: format!("{USER_VAR}/{PASSWORD_VAR}"),
            }));
        }
        (None, Some(_)) => return Err(RegistryError::PasswordWithoutUser),
        (Some(_), None) => return Err(RegistryError::UserWithoutPassword),
        (None, None) => {}
    }
    let Some(path) = docker_config_path(var("DOCKER_CONFIG").as_deref(), var("HOME").as_deref())
    else {
        return Ok(None);
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => from_docker_config(&text, registry, &path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RegistryError::DockerConfig {
            path: shown(&path.to_string_lossy()),
            why: e.to_string(),
        }),
    }
}

/// What the node that pulls needs from this machine: the credentials for the image's
/// registry and the CA that signed its certificate, each when there is one.
#[derive(Clone, Debug, Default)]
pub struct PullAccess {
    pub credentials: Option<Credentials>,
    pub ca_pem: Option<String>,
}

/// The pull's access, read at the start of `up` (bad input fails before anything is made):
/// the credentials from the environment and the CA file the profile names (relative to the
/// profile's folder), which must hold a PEM certificate.
pub fn pull_access(
    image: &str,
    registry_ca: Option<&str>,
    profile_file: &Path,
) -> Result<PullAccess, RegistryError> {
    let credentials = credentials_from_env(image)?;
    let ca_pem = match registry_ca {
        None => None,
        Some(ca) => {
            let path = profile_file
                .parent()
                .unwrap_or_else(|| Path::new("."))
                .join(ca);
            let fail = |why: String| RegistryError::CaFile {
                path: shown(&path.to_string_lossy()),
                why,
            };
            let meta = std::fs::metadata(&path).map_err(|e| fail(e.to_string()))?;
            if !meta.is_file() || meta.len() > 1 << 20 {
                return Err(fail("not a file of at most 1 MiB".into()));
            }
            let text = std::fs::read_to_string(&path).map_err(|e| fail(e.to_string()))?;
            check_pem_certificate(&text).map_err(fail)?;
            Some(text)
        }
    };
    Ok(PullAccess {
        credentials,
        ca_pem,
    })
}

/// One or more PEM certificates and nothing else that a node's Docker would read.
fn check_pem_certificate(text: &str) -> Result<(), String> {
    let begins = text.matches("-----BEGIN CERTIFICATE-----").count();
    let ends = text.matches("-----END CERTIFICATE-----").count();
    if begins == 0 || begins != ends {
        return Err("not a PEM certificate (no BEGIN/END CERTIFICATE block)".into());
    }
    if text.contains("PRIVATE KEY") {
        return Err("holds a private key: give only the CA's certificate".into());
    }
    if !text.is_ascii() {
        return Err("not a PEM certificate (not ASCII)".into());
    }
    Ok(())
}

/// One line for a failed `docker pull` of `image`, from what Docker printed (its last
/// lines): the registry refused the credentials, has no such image or tag, or is not
/// trusted; else Docker's own last line, escaped.
pub fn explain_pull_failure(image: &str, with_credentials: bool, docker_said: &str) -> String {
    let said = docker_said.to_lowercase();
    let registry = shown(registry_of(image));
    let image = shown(image);
    if said.contains("unauthorized")
        || said.contains("authentication required")
        || said.contains("no basic auth credentials")
        || said.contains("denied")
    {
        return if with_credentials {
            format!("the registry {registry} refused the credentials for {image} (wrong user or password, or no access to that repository)")
        } else {
            format!("the registry {registry} wants credentials for {image}: log in with `docker login {registry}` here, or set {USER_VAR} and {PASSWORD_VAR}")
        };
    }
    if said.contains("manifest unknown")
        || said.contains("not found")
        || said.contains("name unknown")
    {
        return format!("the registry {registry} has no image {image} (no such repository or tag)");
    }
    if said.contains("x509") || said.contains("certificate") {
        return format!("the node does not trust the TLS certificate of the registry {registry}: set container.registry_ca to the PEM file of the CA that signed it");
    }
    if said.contains("no such host")
        || said.contains("connection refused")
        || said.contains("i/o timeout")
        || said.contains("no route to host")
    {
        return format!(
            "cannot reach the registry {registry}: {}",
            shown(last_line(docker_said))
        );
    }
    format!(
        "docker pull {image} failed: {}",
        shown(last_line(docker_said))
    )
}

/// Docker's last line without what repeats the request (`Error response from daemon: Get
/// "https://...": `): the reason, which the shortened message must keep.
fn last_line(text: &str) -> &str {
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let line = line
        .strip_prefix("Error response from daemon: ")
        .unwrap_or(line);
    match line.rfind("\": ") {
        Some(i) if line[..i].contains(" \"http") => &line[i + 3..],
        _ => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(user: &str, password: &str) -> Credentials {
        Credentials {
            registry: "reg.example:5443".into(),
            user: user.into(),
            password: password.into(),
            source: "test".into(),
        }
    }

    #[test]
    fn the_registry_is_the_first_component_when_it_looks_like_a_host() {
        assert_eq!(registry_of("172.17.0.1:5443/team/hvd:1"), "172.17.0.1:5443");
        assert_eq!(registry_of("nvcr.io/nvidia/pytorch:23.10-py3"), "nvcr.io");
        assert_eq!(registry_of("localhost/x:1"), "localhost");
        assert_eq!(registry_of("horovod/horovod:0.28.1"), DOCKER_HUB);
        assert_eq!(registry_of("ubuntu"), DOCKER_HUB);
    }

    #[test]
    fn docker_login_entries_are_read_in_both_forms() {
        let path = Path::new("/home/u/.docker/config.json");
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
        let text = format!(r#"{{"auths":{{"https://reg.example:5443":{{"auth":"{auth}"}}}}}}"#);
        let c = from_docker_config(&text, "reg.example:5443", path)
            .unwrap()
            .unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("alice", "s3cr:et"));
        let text = r#"{"auths":{"reg.example:5443":{"username":"bob","password":"pw"}}}"#;
        let c = from_docker_config(text, "reg.example:5443", path)
            .unwrap()
            .unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("bob", "pw"));
        // another registry's entry is not used
        assert_eq!(from_docker_config(text, "other.example", path), Ok(None));
        assert_eq!(from_docker_config("{}", "reg.example:5443", path), Ok(None));
    }

    #[test]
    fn hostile_or_unusable_docker_configs_fail_with_the_path_and_no_secret() {
        let path = Path::new("/home/u/.docker/config.json");
        let bad = |text: &str| match from_docker_config(text, "reg.example:5443", path) {
            Err(e) => e.to_string(),
            Ok(c) => panic!("accepted {text}: {c:?}"),
        };
        assert!(bad("{not json").contains("not JSON"));
        assert!(bad(r#"{"auths":{"reg.example:5443":{"auth":"%%%"}}}"#).contains("not base64"));
        let no_colon = base64::engine::general_purpose::STANDARD.encode("justauser");
        assert!(bad(&format!(
            r#"{{"auths":{{"reg.example:5443":{{"auth":"{no_colon}"}}}}}}"#
        ))
        .contains("not user:password"));
        let newline = base64::engine::general_purpose::STANDARD.encode("u:zebra\nquokka");
        let e = bad(&format!(
            r#"{{"auths":{{"reg.example:5443":{{"auth":"{newline}"}}}}}}"#
        ));
        assert!(e.contains("line break") && !e.contains("zebra"), "{e}");
        let e = bad(r#"{"credsStore":"desktop"}"#);
        assert!(
            e.contains("docker-credential-desktop") && e.contains(USER_VAR),
            "{e}"
        );
        let e = bad(r#"{"credHelpers":{"reg.example:5443":"ecr-login\u001b[31m"}}"#);
        assert!(!e.contains('\u{1b}'), "escaped: {e}");
        assert!(e.starts_with("/home/u/.docker/config.json: "), "{e}");
    }

    #[test]
    fn credentials_print_no_password_and_make_a_docker_login_config() {
        let c = creds("alice", "hunter2-very-secret");
        let printed = format!("{c} {c:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        let json: serde_json::Value = serde_json::from_str(&c.docker_config_json()).unwrap();
        let auth = json["auths"]["reg.example:5443"]["auth"].as_str().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth)
            .unwrap();
        assert_eq!(decoded, b"alice:hunter2-very-secret");
    }

    #[test]
    fn the_ca_file_must_be_a_pem_certificate_and_nothing_more() {
        let dir = std::env::temp_dir().join(format!("hvd-registry-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let profile = dir.join("profile.toml");
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        std::fs::write(dir.join("ca.crt"), cert).unwrap();
        let access = pull_access("ubuntu", Some("ca.crt"), &profile).unwrap();
        assert_eq!(access.ca_pem.as_deref(), Some(cert));
        std::fs::write(
            dir.join("key.pem"),
            format!("{cert}-----BEGIN PRIVATE KEY-----\n"),
        )
        .unwrap();
        let e = pull_access("ubuntu", Some("key.pem"), &profile).unwrap_err();
        assert!(e.to_string().contains("private key"), "{e}");
        std::fs::write(dir.join("junk"), "hello").unwrap();
        assert!(pull_access("ubuntu", Some("junk"), &profile).is_err());
        let e = pull_access("ubuntu", Some("missing.crt"), &profile).unwrap_err();
        assert!(e.to_string().starts_with("container.registry_ca "), "{e}");
        assert!(pull_access("ubuntu", Some("."), &profile).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_docker_config_is_found_where_docker_looks() {
        assert_eq!(
            docker_config_path(Some("/d"), Some("/home/u")),
            Some(PathBuf::from("/d/config.json"))
        );
        assert_eq!(
            docker_config_path(None, Some("/home/u")),
            Some(PathBuf::from("/home/u/.docker/config.json"))
        );
        assert_eq!(docker_config_path(Some(""), None), None);
    }

    #[test]
    fn a_failed_pull_is_one_clear_line() {
        let image = "reg.example:5443/team/hvd:1";
        let e = explain_pull_failure(
            image,
            true,
            "Error response from daemon: Head \"https://reg.example:5443/v2/team/hvd/manifests/1\": unauthorized: authentication required",
        );
        assert!(
            e.starts_with("the registry reg.example:5443 refused the credentials"),
            "{e}"
        );
        let e = explain_pull_failure(image, false, "no basic auth credentials");
        assert!(e.contains("docker login reg.example:5443"), "{e}");
        let e = explain_pull_failure(
            image,
            true,
            "Error response from daemon: manifest for reg.example:5443/team/hvd:1 not found: manifest unknown",
        );
        assert!(
            e.contains("has no image reg.example:5443/team/hvd:1"),
            "{e}"
        );
        let e = explain_pull_failure(image, true, "x509: certificate signed by unknown authority");
        assert!(e.contains("container.registry_ca"), "{e}");
        let e = explain_pull_failure(
            image,
            true,
            "Error response from daemon: Get \"https://reg.example:5443/v2/\": dial tcp 192.0.2.9:5443: connect: connection refused",
        );
        assert!(
            e.ends_with("cannot reach the registry reg.example:5443: dial tcp 192.0.2.9:5443: connect: connection refused"),
            "{e}"
        );
        let e = explain_pull_failure(image, true, "first\nsomething odd \u{1b}[2J\n\n");
        assert!(e.ends_with("something odd \\u{1b}[2J"), "{e}");
    }
}
