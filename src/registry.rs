//! A private registry's access for `container.source = "pull"`: which registry an image
//! reference names, the credentials for it (found as `docker pull` finds them: the Docker
//! config's credential helper for that registry, else its `credsStore`, else its `auths`
//! entry; or two variables), the one-use Docker config the pulling node gets, and a failed
//! pull explained in one line. Pure apart from [`credentials_from_env`], which reads the
//! environment and the Docker config file and runs a credential helper ([`helper`]).
//!
//! The password lives in a [`Credentials`] whose `Debug` and `Display` print no secret; it
//! leaves this process only on the stdin of the one node that pulls.

mod helper;

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
    /// The secret is an identity token (a helper's `Username: <token>`, an `auths` entry's
    /// `identitytoken`), which Docker hands the registry instead of a password.
    pub identity_token: bool,
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
        if self.identity_token {
            return serde_json::json!({ "auths": { &self.registry: { "identitytoken": self.password } } })
                .to_string();
        }
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

/// Where a Docker config keeps a registry's credentials, in the order `docker pull` looks.
#[derive(Debug, PartialEq, Eq)]
pub enum Kept {
    /// A credential helper: `credHelpers` for this registry, else `credsStore`.
    Helper(String),
    /// An `auths` entry, read.
    Entry(Credentials),
    /// Nothing: an anonymous pull.
    Nothing,
}

/// Where `registry`'s credentials are kept in a Docker config's text (`config.json`):
/// `credHelpers[registry]`, else `credsStore` (a helper, named), else its `auths` entry,
/// as `auth` (base64 of `user:password`), `username` + `password`, or an `identitytoken`.
pub fn from_docker_config(text: &str, registry: &str, path: &Path) -> Result<Kept, RegistryError> {
    let shown_path = shown(&path.to_string_lossy());
    let fail = |why: String| RegistryError::DockerConfig {
        path: shown_path.clone(),
        why,
    };
    let config: serde_json::Value =
        serde_json::from_str(text).map_err(|e| fail(format!("not JSON: {e}")))?;
    let keys = config_keys(registry);
    let helper = config
        .get("credHelpers")
        .and_then(|h| h.as_object())
        .and_then(|h| keys.iter().find_map(|k| h.get(k)))
        .or_else(|| config.get("credsStore"));
    if let Some(helper) = helper {
        let name = helper
            .as_str()
            .ok_or_else(|| fail("a credential helper's name is not a string".into()))?;
        // An empty credsStore is Docker's "no helper".
        if !name.is_empty() {
            helper::check_name(name).map_err(fail)?;
            return Ok(Kept::Helper(name.to_string()));
        }
    }
    let entry = config
        .get("auths")
        .and_then(|a| a.as_object())
        .and_then(|auths| keys.iter().find_map(|k| auths.get(k)));
    let Some(entry) = entry else {
        return Ok(Kept::Nothing);
    };
    let field = |name: &str| entry.get(name).and_then(|v| v.as_str()).map(str::to_string);
    let (user, password, identity_token) =
        if let Some(token) = field("identitytoken").filter(|t| !t.is_empty()) {
            ("<token>".to_string(), token, true)
        } else if let Some(auth) = field("auth").filter(|a| !a.is_empty()) {
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
            (user.to_string(), password.to_string(), false)
        } else {
            match (field("username"), field("password")) {
                (Some(u), Some(p)) => (u, p, false),
                _ => return Ok(Kept::Nothing),
            }
        };
    let creds = Credentials::checked(registry, user, password, identity_token, shown_path.clone())
        .map_err(fail)?;
    Ok(Kept::Entry(creds))
}

impl Credentials {
    /// Credentials whose user and secret passed their checks; the error is worded for a
    /// Docker config or a helper (never holding the secret).
    fn checked(
        registry: &str,
        user: String,
        secret: String,
        identity_token: bool,
        source: String,
    ) -> Result<Credentials, String> {
        if !identity_token {
            check_user(&user).map_err(|e| e.to_string())?;
        }
        let limit = if identity_token { 16 * 1024 } else { 4096 };
        if secret.is_empty() || secret.len() > limit || secret.contains(['\n', '\r', '\0']) {
            return Err(format!(
                "the {} for {} is empty, too long or holds a line break",
                if identity_token {
                    "identity token"
                } else {
                    "password"
                },
                shown(registry)
            ));
        }
        Ok(Credentials {
            registry: registry.to_string(),
            user,
            password: secret,
            identity_token,
            source,
        })
    }
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
                identity_token: false,
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
    let shown_path = shown(&path.to_string_lossy());
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(RegistryError::DockerConfig {
                path: shown_path,
                why: e.to_string(),
            })
        }
    };
    match from_docker_config(&text, registry, &path)? {
        Kept::Nothing => Ok(None),
        Kept::Entry(creds) => Ok(Some(creds)),
        Kept::Helper(name) => {
            let fail = |why: String| RegistryError::DockerConfig {
                path: shown_path.clone(),
                why,
            };
            let Some(answer) = helper::get(&name, registry).map_err(fail)? else {
                return Ok(None);
            };
            let source = format!("docker-credential-{name}");
            Credentials::checked(
                registry,
                answer.user,
                answer.secret,
                answer.identity_token,
                source,
            )
            .map(Some)
            .map_err(fail)
        }
    }
}

/// What the node that pulls needs from this machine: the credentials for the image's
/// registry and the CA that signed its certificate, each when there is one.
#[derive(Clone, Debug, Default)]
pub struct PullAccess {
    pub credentials: Option<Credentials>,
    pub ca_pem: Option<String>,
}

impl PullAccess {
    /// What the master's registry mirror is given on its standard input (then keeps in memory
    /// only, for the pull): the user, the secret and what kind it is, and the registry's CA.
    pub fn mirror_access_json(&self) -> String {
        let c = self.credentials.as_ref();
        serde_json::json!({
            "user": c.map(|c| c.user.as_str()),
            "password": c.map(|c| c.password.as_str()),
            "identity_token": c.is_some_and(|c| c.identity_token),
            "ca": self.ca_pem.as_deref(),
        })
        .to_string()
    }
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
    if refused_credentials(&said) {
        return if with_credentials {
            format!("the registry {registry} refused the credentials for {image} (wrong user or password, or no access to that repository)")
        } else {
            format!("the registry {registry} wants credentials for {image}: log in with `docker login {registry}` here, or set {USER_VAR} and {PASSWORD_VAR}")
        };
    }
    if no_such_image(&said) {
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

/// Docker (lowercased) says the registry refused the credentials, or wanted some.
fn refused_credentials(said: &str) -> bool {
    said.contains("unauthorized")
        || said.contains("authentication required")
        || said.contains("no basic auth credentials")
        || said.contains("denied")
}

/// Docker (lowercased) says the registry has no such repository or tag (`docker manifest
/// inspect` says "no such manifest").
fn no_such_image(said: &str) -> bool {
    said.contains("manifest unknown")
        || said.contains("no such manifest")
        || said.contains("not found")
        || said.contains("name unknown")
}

/// Whether what Docker said is the registry refusing the image (credentials, or no such
/// image), which [`explain_pull_failure`] turns into its own line.
pub fn registry_refused(docker_said: &str) -> bool {
    let said = docker_said.to_lowercase();
    refused_credentials(&said) || no_such_image(&said)
}

/// Docker's last line without what repeats the request (`Error response from daemon: Get
/// "https://...": `): the reason, which the shortened message must keep.
pub fn last_line(text: &str) -> &str {
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
mod tests;
