//! Reading the fields of one cloud: from `clouds.yaml` (+ `secure.yaml`, deep-merged) or from
//! the `OS_*` variables, each field named by where it came from, before [`super::CloudConfig`]
//! checks them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

use super::{
    AppCredentialRef, AuthMethod, CloudConfig, ConfigError, ConfigFile, DomainRef, Interface,
    ProjectRef, Secret, UserRef,
};

/// The raw settings of one cloud, by openstacksdk's key names, and how to name a key in a
/// message.
pub(super) struct Raw {
    values: HashMap<&'static str, String>,
    origin: String,
    /// `clouds.NAME.` for files; empty for the environment (keys map to `OS_*`).
    prefix: Option<String>,
}

pub(super) const AUTH_KEYS: &[&str] = &[
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

pub(super) const ENV_KEYS: &[(&str, &[&str])] = &[
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

    pub(super) fn into_config(self, cloud: Option<String>) -> Result<CloudConfig, ConfigError> {
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

pub(super) fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub(super) fn parse_yaml(file: &ConfigFile) -> Result<Value, ConfigError> {
    serde_yaml_ng::from_str(&file.contents).map_err(|e| ConfigError::Parse {
        path: file.path.clone(),
        message: e.to_string(),
    })
}

/// Deep merge: mappings merge key by key, anything else in `over` replaces.
pub(super) fn merge(base: &mut Value, over: Value) {
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

pub(super) fn clouds_of(doc: &Value) -> Option<&Mapping> {
    doc.get("clouds").and_then(Value::as_mapping)
}

pub(super) fn cloud_names(doc: &Value) -> Vec<String> {
    clouds_of(doc)
        .map(|m| m.keys().filter_map(scalar).collect())
        .unwrap_or_default()
}

pub(super) fn raw_from_file(name: &str, path: &Path, cloud: &Value) -> Result<Raw, ConfigError> {
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

pub(super) fn raw_from_env(env: &HashMap<String, String>) -> Raw {
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
