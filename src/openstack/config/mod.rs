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
//! environment or the file system. `raw` reads one cloud's fields from a file or the
//! variables; the types and the checks are here.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

mod raw;

use raw::{cloud_names, clouds_of, merge, parse_yaml, raw_from_env, raw_from_file};

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
