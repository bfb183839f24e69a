//! The credential autostop leaves on the master: a Keystone application credential of the
//! user, made for one cluster, whose access rules allow exactly what stopping needs on that
//! cluster's own servers (`GET /servers/{id}` to watch, `POST /servers/{id}/action` to
//! shelve) and nothing else: no other server, network, volume or API. Keystone cannot change
//! a credential, so new servers (`scale`, `heal`) mean a new one, numbered: the name is
//! `hvd-cluster-<cluster>-autostop-<n>`, read back by that exact grammar. `down` deletes every
//! one of them and the rules they leave.
//!
//! A cloud whose services do not check access rules (no `service_type` in their
//! `keystone_authtoken`, or a Keystone older than Train) refuses such a credential everywhere
//! or not at all; [`probe`] tells which before the credential is trusted.

use super::OpenStackProvider;
use crate::openstack::config::AppCredentialRef;
use crate::openstack::{
    AppCredential, AppCredentialCreate, AuthMethod, CloudConfig, CredentialRule, OpenStack,
    OpenStackError, Request, Secret, Service, StoredRule,
};
use crate::provider::{AutostopTarget, MasterCredential, ProviderError};

/// The role a stop needs (Nova's default shelve policy: project member).
const ROLE: &str = "member";

/// What a credential of a cluster is for: its word in the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The master's autostop agent: read and shelve the cluster's servers.
    Autostop,
    /// The master's copies from the object store (`[[data]] object_store`): read the named
    /// containers.
    Data,
}

impl Purpose {
    fn word(self) -> &'static str {
        match self {
            Purpose::Autostop => "autostop",
            Purpose::Data => "data",
        }
    }
}

/// `hvd-cluster-<cluster>-autostop-<n>`.
pub fn credential_name(cluster: &str, generation: u32) -> String {
    name_for(cluster, Purpose::Autostop, generation)
}

/// `hvd-cluster-<cluster>-<purpose>-<n>`.
pub fn name_for(cluster: &str, purpose: Purpose, generation: u32) -> String {
    format!("hvd-cluster-{cluster}-{}-{generation}", purpose.word())
}

/// The generation of one of this cluster's autostop credentials; `None` for any other name
/// (another cluster's, one whose name merely starts like ours, a user's own).
pub fn generation_of(cluster: &str, name: &str) -> Option<u32> {
    generation_for(cluster, Purpose::Autostop, name)
}

/// The generation of one of this cluster's credentials for `purpose`, by the exact grammar of
/// [`name_for`].
pub fn generation_for(cluster: &str, purpose: Purpose, name: &str) -> Option<u32> {
    let digits = name
        .strip_prefix("hvd-cluster-")?
        .strip_prefix(cluster)?
        .strip_prefix('-')?
        .strip_prefix(purpose.word())?
        .strip_prefix('-')?;
    let plain = !digits.is_empty()
        && digits.len() <= 9
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !(digits.len() > 1 && digits.starts_with('0'));
    plain.then(|| digits.parse().ok()).flatten()
}

/// A server id as it may appear in a rule's path: Nova's ids are UUIDs; anything that could
/// widen a rule (`*`, `**`, `{name}`, `/`, `..`) is refused.
fn plain_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The path prefixes under which compute's middleware may see a request: the endpoint URL's
/// whole path (`/v2.1`, `/v2.1/{project_id}`, or `/compute/v2.1` behind a proxy prefix) and,
/// where a prefix comes before the version, the path from the version on (a proxy that strips
/// its prefix).
fn compute_prefixes(compute_url: &str) -> Vec<String> {
    path_prefixes(compute_url)
}

/// The path prefixes under which a service's middleware may see a request to `url` (see
/// [`compute_prefixes`]).
fn path_prefixes(url: &str) -> Vec<String> {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = after_scheme
        .find('/')
        .map_or("", |i| &after_scheme[i..])
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .trim_end_matches('/');
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let is_version = |s: &&str| {
        s.strip_prefix('v')
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    };
    let mut prefixes = vec![path.to_owned()];
    if let Some(at) = segments.iter().position(is_version).filter(|&at| at > 0) {
        prefixes.push(format!("/{}", segments[at..].join("/")));
    }
    prefixes
}

/// The master's metadata key where the agent publishes what it last decided (for `status`).
pub const STATE_KEY: &str = "hvd-cluster-autostop";

/// The rules that let a credential stop these servers (the master first) and do nothing
/// else, under the compute endpoint `compute_url` (from the catalog:
/// `http://host:8774/v2.1`): read and act on each server, and set one metadata key of the
/// master ([`STATE_KEY`]).
pub fn stop_rules(compute_url: &str, server_ids: &[String]) -> Result<Vec<CredentialRule>, String> {
    if let Some(bad) = server_ids.iter().find(|id| !plain_id(id)) {
        return Err(format!(
            "server id {} cannot be named in an access rule",
            crate::input::shown(bad)
        ));
    }
    let mut rules = Vec::new();
    for prefix in compute_prefixes(compute_url) {
        for id in server_ids {
            for (method, tail) in [("GET", ""), ("POST", "/action")] {
                rules.push(CredentialRule {
                    service: "compute".into(),
                    method: method.into(),
                    path: format!("{prefix}/servers/{id}{tail}"),
                });
            }
        }
        if let Some(master) = server_ids.first() {
            rules.push(CredentialRule {
                service: "compute".into(),
                method: "PUT".into(),
                path: format!("{prefix}/servers/{master}/metadata/{STATE_KEY}"),
            });
        }
    }
    rules.sort();
    rules.dedup();
    Ok(rules)
}

/// The rules that let a credential read these containers of the object store at
/// `object_store_url` (from the catalog: `http://host:8080/v1/AUTH_<project>`) and nothing
/// else: list each one (`GET .../<container>`) and read its objects (`GET .../<container>/**`).
/// No write, no delete, no other container, not the account's list of containers.
pub fn read_rules(
    object_store_url: &str,
    containers: &[String],
) -> Result<Vec<CredentialRule>, String> {
    if let Some(bad) = containers.iter().find(|c| {
        crate::input::paths::ObjectSource::parse(c).map_or(true, |o| !o.prefix.is_empty())
    }) {
        return Err(format!(
            "container {} cannot be named in an access rule",
            crate::input::shown(bad)
        ));
    }
    let mut rules = Vec::new();
    for prefix in path_prefixes(object_store_url) {
        for c in containers {
            for tail in ["", "/**"] {
                rules.push(CredentialRule {
                    service: "object-store".into(),
                    method: "GET".into(),
                    path: format!("{prefix}/{c}{tail}"),
                });
            }
        }
    }
    rules.sort();
    rules.dedup();
    Ok(rules)
}

/// A credential made for a cluster (autostop or data), with its one-time secret.
#[derive(Debug, Clone)]
pub struct MadeCredential {
    pub id: String,
    pub name: String,
    pub generation: u32,
    pub secret: Secret,
    pub rules: Vec<CredentialRule>,
}

impl MadeCredential {
    /// How a client authenticates as this credential, on the same cloud as `user`.
    pub fn cloud(&self, user: &CloudConfig) -> CloudConfig {
        CloudConfig {
            origin: format!("application credential {}", self.name),
            auth: AuthMethod::ApplicationCredential {
                credential: AppCredentialRef::Id(self.id.clone()),
                secret: self.secret.clone(),
            },
            ..user.clone()
        }
    }
}

/// This cluster's autostop credentials as Keystone lists them, by generation.
pub async fn existing(
    os: &OpenStack,
    cluster: &str,
) -> Result<Vec<(u32, AppCredential)>, OpenStackError> {
    existing_for(os, cluster, Purpose::Autostop).await
}

/// This cluster's credentials for `purpose` as Keystone lists them, by generation.
pub async fn existing_for(
    os: &OpenStack,
    cluster: &str,
    purpose: Purpose,
) -> Result<Vec<(u32, AppCredential)>, OpenStackError> {
    let user = os.user_id().await?;
    let mut found: Vec<(u32, AppCredential)> = os
        .identity()
        .app_credentials(&user, None)
        .await?
        .into_iter()
        .filter_map(|c| generation_for(cluster, purpose, &c.name).map(|g| (g, c)))
        .collect();
    found.sort_by_key(|(g, _)| *g);
    Ok(found)
}

/// Makes the next credential of `cluster` for `server_ids` (the cluster's servers, in any
/// order) and deletes the older ones. A create whose outcome is unknown leaves a credential
/// whose secret nobody has: it is found by name and deleted on the next call.
pub async fn make_stop_credential(
    os: &OpenStack,
    cluster: &str,
    server_ids: &[String],
) -> Result<MadeCredential, OpenStackError> {
    let compute_url = os.endpoint(Service::Compute).await?;
    let rules = stop_rules(&compute_url, server_ids).map_err(OpenStackError::Invalid)?;
    make(os, cluster, Purpose::Autostop, rules).await
}

/// Makes the next data credential of `cluster`, reading exactly `containers` of the object
/// store, and deletes the older ones.
pub async fn make_data_credential(
    os: &OpenStack,
    cluster: &str,
    containers: &[String],
) -> Result<MadeCredential, OpenStackError> {
    let url = os.endpoint(Service::ObjectStore).await?;
    let rules = read_rules(&url, containers).map_err(OpenStackError::Invalid)?;
    make(os, cluster, Purpose::Data, rules).await
}

/// As [`make_stop_credential`], without access rules: for a cloud that does not enforce
/// them, with the user's consent (`lifecycle.unrestricted_credential`). Still restricted in
/// Keystone's sense: it cannot make credentials.
pub async fn make_unrestricted_credential(
    os: &OpenStack,
    cluster: &str,
) -> Result<MadeCredential, OpenStackError> {
    make(os, cluster, Purpose::Autostop, Vec::new()).await
}

async fn make(
    os: &OpenStack,
    cluster: &str,
    purpose: Purpose,
    rules: Vec<CredentialRule>,
) -> Result<MadeCredential, OpenStackError> {
    let user = os.user_id().await?;
    let older = existing_for(os, cluster, purpose).await?;
    let generation = older.last().map_or(1, |(g, _)| g.saturating_add(1));
    let description = match purpose {
        Purpose::Autostop => format!(
            "hvd-cluster: lets cluster {cluster}'s master stop its own servers (autostop); deleted by `hvd-cluster down`"
        ),
        Purpose::Data => format!(
            "hvd-cluster: lets cluster {cluster}'s master read its [[data]] containers of the object store; deleted by `hvd-cluster down`"
        ),
    };
    let create = AppCredentialCreate {
        name: name_for(cluster, purpose, generation),
        description,
        roles: vec![ROLE.into()],
        access_rules: rules.clone(),
    };
    let made = os.identity().create_app_credential(&user, &create).await?;
    retire(os, &user, &older).await?;
    Ok(MadeCredential {
        id: made.credential.id,
        name: made.credential.name,
        generation,
        secret: made.secret,
        rules,
    })
}

/// Deletes every credential of `cluster` and the access rules they leave. Returns how many
/// credentials it deleted.
pub async fn delete_stop_credentials(
    os: &OpenStack,
    cluster: &str,
) -> Result<usize, OpenStackError> {
    delete_credentials_for(os, cluster, Purpose::Autostop).await
}

/// Deletes every credential of `cluster` for `purpose` and the access rules they leave.
pub async fn delete_credentials_for(
    os: &OpenStack,
    cluster: &str,
    purpose: Purpose,
) -> Result<usize, OpenStackError> {
    let user = os.user_id().await?;
    let found = existing_for(os, cluster, purpose).await?;
    retire(os, &user, &found).await?;
    Ok(found.len())
}

/// Deletes these credentials, then the access rules they used that no credential of the user
/// still uses (Keystone keeps a credential's rules after it is gone). Rules the user made for
/// anything else are left alone; Keystone refuses to delete one in use, and that refusal is
/// not an error here.
async fn retire(
    os: &OpenStack,
    user: &str,
    credentials: &[(u32, AppCredential)],
) -> Result<(), OpenStackError> {
    if credentials.is_empty() {
        return Ok(());
    }
    for (_, c) in credentials {
        os.identity().delete_app_credential(user, &c.id).await?;
    }
    let theirs: Vec<&CredentialRule> = credentials
        .iter()
        .flat_map(|(_, c)| c.access_rules.iter().flatten())
        .collect();
    let in_use: Vec<CredentialRule> = os
        .identity()
        .app_credentials(user, None)
        .await?
        .into_iter()
        .flat_map(|c| c.access_rules.unwrap_or_default())
        .collect();
    let same = |r: &CredentialRule, s: &StoredRule| {
        r.service == s.service && r.method == s.method && r.path == s.path
    };
    for rule in os.identity().access_rules(user).await? {
        let left_by_them = theirs.iter().any(|r| same(r, &rule));
        let used = in_use.iter().any(|r| same(r, &rule));
        if left_by_them && !used {
            match os.identity().delete_access_rule(user, &rule.id).await {
                Ok(()) => {}
                Err(e) if e.status() == Some(403) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// What a probe of a fresh credential found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enforcement {
    /// Its own server answered and everything else was refused.
    Enforced,
    /// The cloud does not check access rules the way autostop needs; the reason says how.
    NotEnforced(String),
}

/// Tries the credential on the cloud: reading `own_server` must work (else compute refuses
/// every rule-limited token: no `service_type` in its middleware, or an old one) and listing
/// flavors must be refused (else the rules are ignored).
pub async fn probe(
    user: &CloudConfig,
    credential: &MadeCredential,
    own_server: &str,
) -> Result<Enforcement, OpenStackError> {
    try_rules(
        user,
        credential,
        &Request::get(Service::Compute, format!("servers/{own_server}")),
        "the compute API refused the credential for its own server",
        &Request::get(Service::Compute, "flavors"),
        "the compute API let the credential list flavors, which no rule allows",
        &[401],
    )
    .await
}

/// Tries a data credential on the cloud: listing `container` must work (else the object store
/// refuses every rule-limited token: no `service_type` in its middleware, or it is not Swift's
/// keystonemiddleware) and the account's list of containers must be refused (else the rules
/// are ignored).
pub async fn probe_data(
    user: &CloudConfig,
    credential: &MadeCredential,
    container: &str,
) -> Result<Enforcement, OpenStackError> {
    try_rules(
        user,
        credential,
        &Request::get(Service::ObjectStore, container)
            .query("format", "json")
            .query("limit", "1"),
        "the object store refused the credential for its own container",
        &Request::get(Service::ObjectStore, "").query("format", "json"),
        "the object store let the credential list the account's containers, which no rule allows",
        &[401, 403],
    )
    .await
}

/// Authenticates as `credential`: `allowed` must answer (a 401 or 403 there means the service
/// refuses every rule-limited token: `refused_own`), and `forbidden` must be refused with one
/// of `refusals` (an answer means the rules are ignored: `answered_other`).
async fn try_rules(
    user: &CloudConfig,
    credential: &MadeCredential,
    allowed: &Request,
    refused_own: &str,
    forbidden: &Request,
    answered_other: &str,
    refusals: &[u16],
) -> Result<Enforcement, OpenStackError> {
    let os = OpenStack::connect(&credential.cloud(user)).await?;
    if let Err(e) = os.request(allowed).await {
        return match e.status() {
            Some(401 | 403) => Ok(Enforcement::NotEnforced(format!("{refused_own} ({e})"))),
            _ => Err(e),
        };
    }
    match os.request(forbidden).await {
        Ok(_) => Ok(Enforcement::NotEnforced(answered_other.into())),
        Err(e) if e.status().is_some_and(|s| refusals.contains(&s)) => Ok(Enforcement::Enforced),
        Err(e) => Err(e),
    }
}

impl OpenStackProvider {
    /// A credential reading exactly `containers`, tried on the cloud before it is handed out.
    pub(super) async fn data_credential(
        &self,
        cluster: &str,
        containers: &[String],
    ) -> Result<MasterCredential, ProviderError> {
        let made = make_data_credential(&self.os, cluster, containers).await?;
        let first = containers.first().map_or("", String::as_str);
        match probe_data(self.os.config(), &made, first).await {
            Ok(Enforcement::Enforced) => Ok(MasterCredential {
                id: made.id,
                name: made.name,
                secret: made.secret,
                restricted: true,
            }),
            Ok(Enforcement::NotEnforced(why)) => {
                delete_credentials_for(&self.os, cluster, Purpose::Data).await?;
                Err(ProviderError::Cloud(format!(
                    "this cloud's object store does not enforce application credential access rules ({why}), so the master's credential could not be limited to reading the [[data]] containers; copy the data with `push` instead"
                )))
            }
            Err(e) => {
                delete_credentials_for(&self.os, cluster, Purpose::Data).await?;
                Err(e.into())
            }
        }
    }

    /// The cluster's servers (master first) and the APIs as the catalog and auth URL say.
    pub(super) async fn autostop_target(
        &self,
        cluster: &str,
    ) -> Result<AutostopTarget, ProviderError> {
        let mut servers: Vec<(String, String)> = self
            .servers(cluster)
            .await?
            .into_iter()
            .filter_map(|s| s.name.map(|n| (n, s.id)))
            .filter(|(n, _)| {
                n.strip_prefix(cluster)
                    .is_some_and(|rest| rest == "-master" || rest.starts_with("-worker-"))
            })
            .collect();
        let master = format!("{cluster}-master");
        servers.sort_by_key(|(n, _)| (n != &master, n.clone()));
        if servers.first().map(|(n, _)| n) != Some(&master) {
            return Err(ProviderError::Cloud(format!(
                "cluster `{cluster}` has no master server for autostop to run on"
            )));
        }
        Ok(AutostopTarget {
            servers,
            identity_url: self.os.config().auth_url.clone(),
            compute_url: self.os.endpoint(Service::Compute).await?,
            tls: self.master_tls()?,
        })
    }

    /// A credential for `target`'s servers, tried on the cloud before it is handed out.
    pub(super) async fn autostop_credential(
        &self,
        cluster: &str,
        target: &AutostopTarget,
        unrestricted_ok: bool,
    ) -> Result<MasterCredential, ProviderError> {
        let ids: Vec<String> = target.servers.iter().map(|(_, id)| id.clone()).collect();
        let made = make_stop_credential(&self.os, cluster, &ids).await?;
        let master = &ids[0];
        let restricted = match probe(self.os.config(), &made, master).await? {
            Enforcement::Enforced => made,
            Enforcement::NotEnforced(why) => {
                delete_stop_credentials(&self.os, cluster).await?;
                if !unrestricted_ok {
                    return Err(ProviderError::Cloud(format!(
                        "this cloud does not enforce application credential access rules ({why}), so the master's credential could not be limited to this cluster's servers; set `lifecycle.unrestricted_credential = true` to let it hold one limited only by your member role, or leave autostop off"
                    )));
                }
                let open = make_unrestricted_credential(&self.os, cluster).await?;
                return Ok(MasterCredential {
                    id: open.id,
                    name: open.name,
                    secret: open.secret,
                    restricted: false,
                });
            }
        };
        Ok(MasterCredential {
            id: restricted.id,
            name: restricted.name,
            secret: restricted.secret,
            restricted: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_back_by_their_exact_grammar() {
        assert_eq!(credential_name("demo", 3), "hvd-cluster-demo-autostop-3");
        assert_eq!(
            generation_of("demo", "hvd-cluster-demo-autostop-3"),
            Some(3)
        );
        assert_eq!(
            generation_of("demo", "hvd-cluster-demo-autostop-12"),
            Some(12)
        );
        for other in [
            "hvd-cluster-demo2-autostop-1",
            "hvd-cluster-dem-autostop-1",
            "hvd-cluster-demo-autostop-",
            "hvd-cluster-demo-autostop-01",
            "hvd-cluster-demo-autostop-1x",
            "hvd-cluster-demo-autostop--1",
            "hvd-cluster-demo-autostop-9999999999",
            "my-own-credential",
            "hvd-cluster-demo-autostop-1 ",
        ] {
            assert_eq!(generation_of("demo", other), None, "{other}");
        }
        // a cluster named like another's prefix does not claim its credentials
        assert_eq!(
            generation_of("demo-autostop", "hvd-cluster-demo-autostop-1"),
            None
        );
    }

    #[test]
    fn rules_name_each_server_and_nothing_wider() {
        let ids = vec!["a1b2".to_owned(), "c3d4".to_owned()];
        let rules = stop_rules("http://127.0.0.1:8774/v2.1", &ids).unwrap();
        let shown: Vec<String> = rules
            .iter()
            .map(|r| format!("{} {} {}", r.service, r.method, r.path))
            .collect();
        assert_eq!(
            shown,
            [
                "compute GET /v2.1/servers/a1b2",
                "compute GET /v2.1/servers/c3d4",
                "compute POST /v2.1/servers/a1b2/action",
                "compute POST /v2.1/servers/c3d4/action",
                "compute PUT /v2.1/servers/a1b2/metadata/hvd-cluster-autostop",
            ]
        );
    }

    #[test]
    fn a_proxy_prefix_gives_both_spellings() {
        let rules = stop_rules("https://cloud.example/compute/v2.1/", &["x".into()]).unwrap();
        let paths: Vec<&str> = rules.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/compute/v2.1/servers/x",
                "/v2.1/servers/x",
                "/compute/v2.1/servers/x/action",
                "/v2.1/servers/x/action",
                "/compute/v2.1/servers/x/metadata/hvd-cluster-autostop",
                "/v2.1/servers/x/metadata/hvd-cluster-autostop",
            ]
        );
        // an endpoint with the project in it: Nova sees the project in every path
        let rules = stop_rules("http://h:8774/v2.1/a6944d76", &["x".into()]).unwrap();
        let paths: Vec<&str> = rules.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/v2.1/a6944d76/servers/x",
                "/v2.1/a6944d76/servers/x/action",
                "/v2.1/a6944d76/servers/x/metadata/hvd-cluster-autostop",
            ]
        );
    }

    #[test]
    fn ids_that_would_widen_a_rule_are_refused() {
        for bad in ["*", "**", "{id}", "a/b", "..", "", "a b", "x\u{0}"] {
            let err = stop_rules("http://h/v2.1", &[bad.to_owned()]).unwrap_err();
            assert!(err.contains("cannot be named"), "{bad}: {err}");
        }
    }
}
