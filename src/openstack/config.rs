//! Where the cloud and its credentials come from: `clouds.yaml` (+ `secure.yaml`) or `OS_*`
//! variables, read the way the `openstack` CLI reads them.
//!
//! * Files: the first of `$OS_CLIENT_CONFIG_FILE`, `./clouds.{yaml,yml,json}`,
//!   `$XDG_CONFIG_HOME/openstack/` (default `~/.config/openstack/`), `/etc/openstack/`;
//!   `secure.yaml` likewise (`$OS_CLIENT_SECURE_FILE` first) and deep-merged over it.
//! * The cloud: the argument, else `$OS_CLOUD`. A named cloud is read from the files only
//!   (credentials are never mixed between a file and the environment).
//! * No cloud named: the `OS_*` variables (`OS_AUTH_URL`, `OS_USERNAME`...).
//! * Names without a domain use `$OS_DEFAULT_DOMAIN` or the domain id `default`, as the CLI's
//!   `--os-default-domain` does; `domain_id`/`domain_name` are defaults for both the user's
//!   and the project's domain, as in openstacksdk.
//!
//! [`CloudConfig::from_sources`] does all of it on given values, without the process
//! environment or the file system.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

/// A password, token or application-credential secret. Debug and Display print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself: only for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path}: not valid YAML: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("cloud {name:?} is not defined in {path}; defined clouds: {available}")]
    UnknownCloud {
        name: String,
        path: PathBuf,
        available: String,
    },
    #[error("cloud {name:?} was asked for, but no clouds.yaml was found (looked for: {searched})")]
    NoCloudsFile { name: String, searched: String },
    #[error("{origin}: missing {field}{hint}")]
    Missing {
        origin: String,
        field: String,
        hint: String,
    },
    #[error("{origin}: {field}: {message}")]
    Invalid {
        origin: String,
        field: String,
        message: String,
    },
    #[error("no cloud selected: {hint}")]
    NoCloud { hint: String },
}

/// Which endpoints of the catalog to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interface {
    #[default]
    Public,
    Internal,
    Admin,
}

impl Interface {
    pub fn as_str(self) -> &'static str {
        match self {
            Interface::Public => "public",
            Interface::Internal => "internal",
            Interface::Admin => "admin",
        }
    }

    /// `public`, `internal`, `admin`, and the v2-era `publicURL`, `internalURL`, `adminURL`.
    pub fn parse(s: &str) -> Option<Interface> {
        let s = s.trim().to_ascii_lowercase();
        match s.strip_suffix("url").unwrap_or(&s) {
            "public" => Some(Interface::Public),
            "internal" => Some(Interface::Internal),
            "admin" => Some(Interface::Admin),
            _ => None,
        }
    }
}

impl fmt::Display for Interface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainRef {
    Id(String),
    Name(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserRef {
    Id(String),
    Name { name: String, domain: DomainRef },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectRef {
    Id(String),
    Name { name: String, domain: DomainRef },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppCredentialRef {
    Id(String),
    Name { name: String, user: UserRef },
}

/// How to get a token. Both forms give a project-scoped token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMethod {
    Password {
        user: UserRef,
        password: Secret,
        project: ProjectRef,
    },
    ApplicationCredential {
        credential: AppCredentialRef,
        secret: Secret,
    },
}

/// One cloud, ready to authenticate against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudConfig {
    /// The cloud's name in clouds.yaml; `None` when read from `OS_*` variables.
    pub cloud: Option<String>,
    /// Where it was read from, for messages: `cloud "x" in /path/clouds.yaml` or
    /// `OS_* environment variables`.
    pub origin: String,
    /// Keystone v3 URL, ending in `/v3`.
    pub auth_url: String,
    pub auth: AuthMethod,
    pub region: Option<String>,
    pub interface: Interface,
    pub cacert: Option<PathBuf>,
    /// Skip TLS verification (`verify: false`, `insecure: true`, `OS_INSECURE=true`).
    pub insecure: bool,
}

/// A file already read.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    pub path: PathBuf,
    pub contents: String,
}

/// The clouds.yaml and secure.yaml that apply, if any, and where they were looked for.
#[derive(Debug, Clone, Default)]
pub struct ConfigFiles {
    pub clouds: Option<ConfigFile>,
    pub secure: Option<ConfigFile>,
    pub searched: Vec<PathBuf>,
}

const EXTENSIONS: &[&str] = &["yaml", "yml", "json"];

impl ConfigFiles {
    /// Candidate paths for clouds.yaml and secure.yaml, in the CLI's order.
    pub fn search_paths(env: &HashMap<String, String>, cwd: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut dirs = vec![cwd.to_path_buf()];
        let config_home = env
            .get("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                env.get("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| Path::new(h).join(".config"))
            });
        if let Some(home) = config_home {
            dirs.push(home.join("openstack"));
        }
        dirs.push(PathBuf::from("/etc/openstack"));
        let candidates = |stem: &str, var: &str| {
            let mut v: Vec<PathBuf> = env
                .get(var)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .into_iter()
                .collect();
            for dir in &dirs {
                for ext in EXTENSIONS {
                    v.push(dir.join(format!("{stem}.{ext}")));
                }
            }
            v
        };
        (
            candidates("clouds", "OS_CLIENT_CONFIG_FILE"),
            candidates("secure", "OS_CLIENT_SECURE_FILE"),
        )
    }

    /// Reads the first existing clouds and secure file.
    pub fn discover(env: &HashMap<String, String>, cwd: &Path) -> Result<ConfigFiles, ConfigError> {
        let (clouds, secure) = Self::search_paths(env, cwd);
        Ok(ConfigFiles {
            clouds: read_first(&clouds)?,
            secure: read_first(&secure)?,
            searched: clouds,
        })
    }
}

fn read_first(paths: &[PathBuf]) -> Result<Option<ConfigFile>, ConfigError> {
    for path in paths {
        match std::fs::read_to_string(path) {
            Ok(contents) => {
                return Ok(Some(ConfigFile {
                    path: path.clone(),
                    contents,
                }))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(ConfigError::Read {
                    path: path.clone(),
                    message: e.to_string(),
                })
            }
        }
    }
    Ok(None)
}

/// The raw settings of one cloud, by openstacksdk's key names, and how to name a key in a
/// message.
struct Raw {
    values: HashMap<&'static str, String>,
    origin: String,
    /// `clouds.NAME.` for files; empty for the environment (keys map to `OS_*`).
    prefix: Option<String>,
}

const AUTH_KEYS: &[&str] = &[
    "auth_url",
    "username",
    "user_id",
    "password",
    "project_name",
    "project_id",
    "user_domain_name",
    "user_domain_id",
    "project_domain_name",
    "project_domain_id",
    "domain_name",
    "domain_id",
    "default_domain",
    "application_credential_id",
    "application_credential_name",
    "application_credential_secret",
];

const ENV_KEYS: &[(&str, &[&str])] = &[
    ("auth_url", &["OS_AUTH_URL"]),
    ("auth_type", &["OS_AUTH_TYPE"]),
    ("username", &["OS_USERNAME"]),
    ("user_id", &["OS_USER_ID"]),
    ("password", &["OS_PASSWORD"]),
    ("project_name", &["OS_PROJECT_NAME", "OS_TENANT_NAME"]),
    ("project_id", &["OS_PROJECT_ID", "OS_TENANT_ID"]),
    ("user_domain_name", &["OS_USER_DOMAIN_NAME"]),
    ("user_domain_id", &["OS_USER_DOMAIN_ID"]),
    ("project_domain_name", &["OS_PROJECT_DOMAIN_NAME"]),
    ("project_domain_id", &["OS_PROJECT_DOMAIN_ID"]),
    ("domain_name", &["OS_DOMAIN_NAME"]),
    ("domain_id", &["OS_DOMAIN_ID"]),
    ("default_domain", &["OS_DEFAULT_DOMAIN"]),
    (
        "application_credential_id",
        &["OS_APPLICATION_CREDENTIAL_ID"],
    ),
    (
        "application_credential_name",
        &["OS_APPLICATION_CREDENTIAL_NAME"],
    ),
    (
        "application_credential_secret",
        &["OS_APPLICATION_CREDENTIAL_SECRET"],
    ),
    ("region_name", &["OS_REGION_NAME"]),
    ("interface", &["OS_INTERFACE", "OS_ENDPOINT_TYPE"]),
    ("cacert", &["OS_CACERT"]),
    ("insecure", &["OS_INSECURE"]),
];

impl Raw {
    fn get(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn field(&self, key: &str) -> String {
        match &self.prefix {
            Some(prefix) => {
                let section = if AUTH_KEYS.contains(&key) {
                    "auth."
                } else {
                    ""
                };
                format!("{prefix}{section}{key}")
            }
            None => ENV_KEYS
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, vars)| vars.join(" or "))
                .unwrap_or_else(|| key.to_owned()),
        }
    }

    fn fields(&self, keys: &[&str]) -> String {
        keys.iter()
            .map(|k| self.field(k))
            .collect::<Vec<_>>()
            .join(" or ")
    }

    fn missing(&self, keys: &[&str], hint: &str) -> ConfigError {
        ConfigError::Missing {
            origin: self.origin.clone(),
            field: self.fields(keys),
            hint: if hint.is_empty() {
                String::new()
            } else {
                format!(" ({hint})")
            },
        }
    }

    fn invalid(&self, key: &str, message: String) -> ConfigError {
        ConfigError::Invalid {
            origin: self.origin.clone(),
            field: self.field(key),
            message,
        }
    }

    fn require(&self, key: &str, hint: &str) -> Result<String, ConfigError> {
        self.get(key)
            .map(str::to_owned)
            .ok_or_else(|| self.missing(&[key], hint))
    }

    fn flag(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(Some(true)),
                "0" | "false" | "no" | "off" => Ok(Some(false)),
                other => Err(self.invalid(key, format!("expected true or false, got {other:?}"))),
            },
        }
    }

    /// The domain for a user or project given by name.
    fn domain(&self, prefix: &str) -> DomainRef {
        let id = format!("{prefix}_domain_id");
        let name = format!("{prefix}_domain_name");
        if let Some(v) = self.get(&id) {
            DomainRef::Id(v.to_owned())
        } else if let Some(v) = self.get(&name) {
            DomainRef::Name(v.to_owned())
        } else if let Some(v) = self.get("domain_id") {
            DomainRef::Id(v.to_owned())
        } else if let Some(v) = self.get("domain_name") {
            DomainRef::Name(v.to_owned())
        } else {
            DomainRef::Id(self.get("default_domain").unwrap_or("default").to_owned())
        }
    }

    fn user(&self, what: &str) -> Result<UserRef, ConfigError> {
        if let Some(id) = self.get("user_id") {
            Ok(UserRef::Id(id.to_owned()))
        } else if let Some(name) = self.get("username") {
            Ok(UserRef::Name {
                name: name.to_owned(),
                domain: self.domain("user"),
            })
        } else {
            Err(self.missing(&["username", "user_id"], what))
        }
    }

    fn into_config(self, cloud: Option<String>) -> Result<CloudConfig, ConfigError> {
        let auth_url = normalize_auth_url(&self.require("auth_url", "Keystone URL")?)
            .map_err(|m| self.invalid("auth_url", m))?;
        let auth_type = self.get("auth_type").map(|t| t.to_ascii_lowercase());
        let app_cred = match auth_type.as_deref() {
            Some("password" | "v3password") => false,
            Some("v3applicationcredential" | "applicationcredential" | "application_credential") => true,
            Some(other) => {
                return Err(self.invalid(
                    "auth_type",
                    format!(
                        "unsupported auth type {other:?} (supported: password, v3password, v3applicationcredential)"
                    ),
                ))
            }
            None => {
                self.get("application_credential_secret").is_some()
                    || self.get("application_credential_id").is_some()
            }
        };
        let auth = if app_cred {
            let secret = Secret::new(self.require(
                "application_credential_secret",
                "the application credential's secret",
            )?);
            let credential = if let Some(id) = self.get("application_credential_id") {
                AppCredentialRef::Id(id.to_owned())
            } else if let Some(name) = self.get("application_credential_name") {
                AppCredentialRef::Name {
                    name: name.to_owned(),
                    user: self.user("an application credential given by name needs its user")?,
                }
            } else {
                return Err(self.missing(
                    &["application_credential_id", "application_credential_name"],
                    "",
                ));
            };
            AuthMethod::ApplicationCredential { credential, secret }
        } else {
            let user = self.user("")?;
            let password = Secret::new(self.require("password", "")?);
            let project = if let Some(id) = self.get("project_id") {
                ProjectRef::Id(id.to_owned())
            } else if let Some(name) = self.get("project_name") {
                ProjectRef::Name {
                    name: name.to_owned(),
                    domain: self.domain("project"),
                }
            } else {
                return Err(self.missing(
                    &["project_name", "project_id"],
                    "hvd-cluster needs a project-scoped token",
                ));
            };
            AuthMethod::Password {
                user,
                password,
                project,
            }
        };
        let interface = match self.get("interface") {
            None => Interface::Public,
            Some(v) => Interface::parse(v).ok_or_else(|| {
                self.invalid(
                    "interface",
                    format!("expected public, internal or admin, got {v:?}"),
                )
            })?,
        };
        // `verify: false` (files) and `insecure: true` both turn TLS verification off.
        let insecure = self.flag("insecure")?.unwrap_or(false)
            || self.flag("verify")?.map(|v| !v).unwrap_or(false);
        Ok(CloudConfig {
            cloud,
            origin: self.origin.clone(),
            auth_url,
            auth,
            region: self.get("region_name").map(str::to_owned),
            interface,
            cacert: self.get("cacert").map(PathBuf::from),
            insecure,
        })
    }
}

/// Keystone's v3 root: `http://h:5000` and `http://h:5000/v3/` become `http://h:5000/v3`;
/// `.../v2.0` is moved to `.../v3`.
pub fn normalize_auth_url(url: &str) -> Result<String, String> {
    let trimmed = url.trim().trim_end_matches('/');
    let parsed = url::Url::parse(trimmed).map_err(|e| format!("not a URL ({e}): {trimmed:?}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("expected an http or https URL, got {trimmed:?}"));
    }
    if trimmed.ends_with("/v3") {
        Ok(trimmed.to_owned())
    } else if let Some(base) = trimmed.strip_suffix("/v2.0") {
        Ok(format!("{base}/v3"))
    } else {
        Ok(format!("{trimmed}/v3"))
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn parse_yaml(file: &ConfigFile) -> Result<Value, ConfigError> {
    serde_yaml_ng::from_str(&file.contents).map_err(|e| ConfigError::Parse {
        path: file.path.clone(),
        message: e.to_string(),
    })
}

/// Deep merge: mappings merge key by key, anything else in `over` replaces.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Mapping(b), Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

fn clouds_of(doc: &Value) -> Option<&Mapping> {
    doc.get("clouds").and_then(Value::as_mapping)
}

fn cloud_names(doc: &Value) -> Vec<String> {
    clouds_of(doc)
        .map(|m| m.keys().filter_map(scalar).collect())
        .unwrap_or_default()
}

fn raw_from_file(name: &str, path: &Path, cloud: &Value) -> Result<Raw, ConfigError> {
    let origin = format!("cloud {name:?} in {}", path.display());
    let prefix = format!("clouds.{name}.");
    let mut values = HashMap::new();
    let mapping = cloud.as_mapping().ok_or_else(|| ConfigError::Invalid {
        origin: origin.clone(),
        field: format!("clouds.{name}"),
        message: "expected a mapping".into(),
    })?;
    let mut put = |key: &'static str, v: &Value| {
        if let Some(s) = scalar(v) {
            values.insert(key, s);
        }
    };
    if let Some(auth) = mapping.get("auth").and_then(Value::as_mapping) {
        for key in AUTH_KEYS {
            if let Some(v) = auth.get(*key) {
                put(key, v);
            }
        }
        // openstacksdk's backwards names
        for (old, new) in [("tenant_name", "project_name"), ("tenant_id", "project_id")] {
            if let Some(v) = auth.get(old) {
                if auth.get(new).is_none() {
                    put(new, v);
                }
            }
        }
    }
    for key in [
        "auth_type",
        "region_name",
        "interface",
        "cacert",
        "verify",
        "insecure",
    ] {
        if let Some(v) = mapping.get(key) {
            put(key, v);
        }
    }
    if !values.contains_key("region_name") {
        // `regions: [a, b]` or `regions: [{name: a}]`: the first one, as openstacksdk does
        if let Some(first) = mapping
            .get("regions")
            .and_then(Value::as_sequence)
            .and_then(|s| s.first())
        {
            let name = scalar(first).or_else(|| first.get("name").and_then(scalar));
            if let Some(n) = name {
                values.insert("region_name", n);
            }
        }
    }
    if !values.contains_key("auth_url") {
        if let Some(profile) = mapping.get("profile").and_then(scalar) {
            return Err(ConfigError::Missing {
                origin,
                field: format!("{prefix}auth.auth_url"),
                hint: format!(
                    " (vendor profiles such as {profile:?} are not supported: write auth_url)"
                ),
            });
        }
    }
    Ok(Raw {
        values,
        origin,
        prefix: Some(prefix),
    })
}

fn raw_from_env(env: &HashMap<String, String>) -> Raw {
    let mut values = HashMap::new();
    for (key, vars) in ENV_KEYS {
        if let Some(v) = vars
            .iter()
            .filter_map(|var| env.get(*var))
            .find(|v| !v.is_empty())
        {
            values.insert(*key, v.clone());
        }
    }
    Raw {
        values,
        origin: "OS_* environment variables".into(),
        prefix: None,
    }
}

impl CloudConfig {
    /// Reads the process environment and the files the `openstack` CLI reads.
    pub fn load(cloud: Option<&str>) -> Result<CloudConfig, ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        let cwd = std::env::current_dir().map_err(|e| ConfigError::Read {
            path: PathBuf::from("."),
            message: e.to_string(),
        })?;
        let files = ConfigFiles::discover(&env, &cwd)?;
        Self::from_sources(cloud, &env, &files)
    }

    /// The same, on given values: `cloud` (else `OS_CLOUD` from `env`) selects a cloud of
    /// `files`; with no cloud named, the `OS_*` values of `env` are used.
    pub fn from_sources(
        cloud: Option<&str>,
        env: &HashMap<String, String>,
        files: &ConfigFiles,
    ) -> Result<CloudConfig, ConfigError> {
        let name = cloud
            .map(str::to_owned)
            .or_else(|| env.get("OS_CLOUD").cloned())
            .filter(|n| !n.trim().is_empty());
        let Some(name) = name else {
            if env.get("OS_AUTH_URL").is_some_and(|v| !v.is_empty()) {
                return raw_from_env(env).into_config(None);
            }
            let hint = match &files.clouds {
                Some(f) => {
                    let names = parse_yaml(f).map(|d| cloud_names(&d)).unwrap_or_default();
                    format!(
                        "pass a cloud name or set OS_CLOUD ({} defines: {}), or set OS_AUTH_URL and the other OS_* variables",
                        f.path.display(),
                        if names.is_empty() { "none".into() } else { names.join(", ") }
                    )
                }
                None => "set OS_CLOUD and write a clouds.yaml, or source an openrc file (OS_AUTH_URL...)".into(),
            };
            return Err(ConfigError::NoCloud { hint });
        };
        let Some(file) = &files.clouds else {
            return Err(ConfigError::NoCloudsFile {
                name,
                searched: files
                    .searched
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let mut doc = parse_yaml(file)?;
        if let Some(secure) = &files.secure {
            merge(&mut doc, parse_yaml(secure)?);
        }
        let cloud_value = clouds_of(&doc).and_then(|m| m.get(name.as_str()));
        let Some(cloud_value) = cloud_value else {
            let names = cloud_names(&doc);
            return Err(ConfigError::UnknownCloud {
                name,
                path: file.path.clone(),
                available: if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                },
            });
        };
        raw_from_file(&name, &file.path, cloud_value)?.into_config(Some(name))
    }
}
