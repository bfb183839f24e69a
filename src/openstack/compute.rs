//! Nova (compute v2.1, microversion [`super::service::NOVA_MICROVERSION`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;

use super::error::{gone, optional, OpenStackError};
use super::http::{Request, Session};
use super::service::Service;
use super::{parse_quota_usages, QuotaUsages};

pub use super::server_create::{BootVolume, ServerCreate, ServerNetwork, MAX_USER_DATA};

const S: Service = Service::Compute;

#[derive(Clone)]
pub struct Compute {
    pub(crate) session: Arc<Session>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Flavor {
    pub id: String,
    pub name: String,
    pub vcpus: u32,
    /// MiB
    pub ram: u64,
    /// GiB
    pub disk: u64,
    #[serde(rename = "OS-FLV-EXT-DATA:ephemeral")]
    pub ephemeral: u64,
    #[serde(deserialize_with = "swap_mib")]
    pub swap: u64,
    pub description: Option<String>,
    pub extra_specs: BTreeMap<String, String>,
    #[serde(rename = "os-flavor-access:is_public")]
    pub is_public: Option<bool>,
    #[serde(rename = "OS-FLV-DISABLED:disabled")]
    pub disabled: Option<bool>,
}

/// `swap` is `""` for none before 2.75 and an integer after.
fn swap_mib<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => n.as_u64().unwrap_or(0),
        serde_json::Value::String(s) => s.parse().unwrap_or(0),
        _ => 0,
    })
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Keypair {
    pub name: String,
    pub fingerprint: Option<String>,
    pub public_key: String,
    #[serde(rename = "type")]
    pub key_type: Option<String>,
    pub user_id: Option<String>,
}

/// Server status as nova reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(from = "String")]
pub enum ServerStatus {
    Active,
    Build,
    Error,
    Shutoff,
    Deleted,
    SoftDeleted,
    /// Shelved, still on its host (the cloud's `shelved_offload_time` is not 0, or the
    /// offload is under way).
    Shelved,
    /// Shelved and offloaded: on no host, its resources (GPUs too) handed back.
    ShelvedOffloaded,
    /// `UNKNOWN`: e.g. the server's cell is down.
    #[default]
    Unknown,
    /// Any other (REBOOT, RESIZE, MIGRATING, PAUSED, SUSPENDED, ...).
    Other(String),
}

impl From<String> for ServerStatus {
    fn from(s: String) -> Self {
        match s.as_str() {
            "ACTIVE" => Self::Active,
            "BUILD" => Self::Build,
            "ERROR" => Self::Error,
            "SHUTOFF" => Self::Shutoff,
            "DELETED" => Self::Deleted,
            "SOFT_DELETED" => Self::SoftDeleted,
            "SHELVED" => Self::Shelved,
            "SHELVED_OFFLOADED" => Self::ShelvedOffloaded,
            "UNKNOWN" => Self::Unknown,
            _ => Self::Other(s),
        }
    }
}

/// `OS-EXT-STS:power_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(from = "u8")]
pub enum PowerState {
    NoState,
    Running,
    Paused,
    Shutdown,
    Crashed,
    Suspended,
    Other(u8),
}

impl From<u8> for PowerState {
    fn from(v: u8) -> Self {
        match v {
            0 => Self::NoState,
            1 => Self::Running,
            3 => Self::Paused,
            4 => Self::Shutdown,
            6 => Self::Crashed,
            7 => Self::Suspended,
            n => Self::Other(n),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Fault {
    pub code: Option<u16>,
    pub message: String,
    pub details: Option<String>,
    pub created: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ServerAddress {
    pub addr: String,
    pub version: Option<u8>,
    /// `fixed` or `floating`.
    #[serde(rename = "OS-EXT-IPS:type")]
    pub kind: Option<String>,
    #[serde(rename = "OS-EXT-IPS-MAC:mac_addr")]
    pub mac_addr: Option<String>,
}

/// The flavor of a server: `{id, links}` before 2.47, embedded (no id) from 2.47 on.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ServerFlavor {
    pub id: Option<String>,
    pub original_name: Option<String>,
    pub vcpus: Option<u32>,
    pub ram: Option<u64>,
    pub disk: Option<u64>,
    pub ephemeral: Option<u64>,
    pub swap: Option<u64>,
    pub extra_specs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct NamedRef {
    pub name: String,
}

/// A server. Everything but `id` may be missing (a server in a down cell has `status`
/// UNKNOWN and little else), so every field has a default.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Server {
    pub id: String,
    pub name: Option<String>,
    pub status: ServerStatus,
    pub fault: Option<Fault>,
    /// Network name → addresses.
    pub addresses: BTreeMap<String, Vec<ServerAddress>>,
    pub metadata: BTreeMap<String, String>,
    pub tags: Vec<String>,
    pub key_name: Option<String>,
    pub flavor: Option<ServerFlavor>,
    /// Image id; `None` for a volume-backed server (nova sends `""`).
    #[serde(rename = "image", deserialize_with = "image_id")]
    pub image_id: Option<String>,
    pub security_groups: Vec<NamedRef>,
    #[serde(rename = "OS-EXT-STS:power_state")]
    pub power_state: Option<PowerState>,
    #[serde(rename = "OS-EXT-STS:vm_state")]
    pub vm_state: Option<String>,
    #[serde(rename = "OS-EXT-STS:task_state")]
    pub task_state: Option<String>,
    #[serde(rename = "OS-EXT-AZ:availability_zone")]
    pub availability_zone: Option<String>,
    #[serde(rename = "OS-EXT-SRV-ATTR:hostname")]
    pub hostname: Option<String>,
    pub tenant_id: Option<String>,
    pub user_id: Option<String>,
    pub created: Option<String>,
    pub updated: Option<String>,
    pub progress: Option<u8>,
    /// Its volumes; a volume-backed server's root volume among them.
    #[serde(rename = "os-extended-volumes:volumes_attached")]
    pub volumes_attached: Vec<AttachedVolume>,
}

/// A volume as a server lists it.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct AttachedVolume {
    pub id: String,
    /// Nova deletes it with the server (a root volume made from an image, here).
    pub delete_on_termination: bool,
}

fn image_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    struct Img {
        id: Option<String>,
    }
    // `image` is an object, or "" for volume-backed servers
    Ok(match Option::<serde_json::Value>::deserialize(d)? {
        Some(v @ serde_json::Value::Object(_)) => {
            serde_json::from_value::<Img>(v).ok().and_then(|i| i.id)
        }
        _ => None,
    })
}

impl Server {
    /// Addresses of one kind (`fixed` or `floating`) over every network.
    pub fn addresses_of_kind(&self, kind: &str) -> Vec<&str> {
        self.addresses
            .values()
            .flatten()
            .filter(|a| a.kind.as_deref() == Some(kind))
            .map(|a| a.addr.as_str())
            .collect()
    }
}

/// Nova's `reboot` action: `Soft` asks the guest to shut down and starts it again (only
/// from ACTIVE); `Hard` power-cycles it. Either shows status REBOOT / HARD_REBOOT (task_state
/// `reboot*`) until the server is ACTIVE again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebootType {
    Soft,
    Hard,
}

impl RebootType {
    /// The body of `POST /servers/{id}/action`: `{"reboot": {"type": "SOFT"}}`.
    pub fn body(self) -> serde_json::Value {
        let kind = match self {
            RebootType::Soft => "SOFT",
            RebootType::Hard => "HARD",
        };
        json!({ "reboot": { "type": kind } })
    }
}

/// Filters for [`Compute::list_servers`] (all given ones must match).
#[derive(Debug, Clone, Default)]
pub struct ServerFilter {
    /// Servers carrying every one of these tags.
    pub tags: Vec<String>,
    /// Nova treats it as a regular expression.
    pub name: Option<String>,
}

/// `GET /limits` absolute limits (`-1` = unlimited).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct ComputeLimits {
    pub max_total_instances: i64,
    pub total_instances_used: i64,
    pub max_total_cores: i64,
    pub total_cores_used: i64,
    #[serde(rename = "maxTotalRAMSize")]
    pub max_total_ram_size: i64,
    #[serde(rename = "totalRAMUsed")]
    pub total_ram_used: i64,
    pub max_total_keypairs: i64,
    pub max_server_meta: i64,
    pub max_server_groups: i64,
    pub total_server_groups_used: i64,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeAttachment {
    pub id: Option<String>,
    pub server_id: Option<String>,
    pub volume_id: String,
    pub device: Option<String>,
}

/// One entry of `GET /os-availability-zone`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct AvailabilityZone {
    #[serde(rename = "zoneName")]
    pub zone_name: String,
    #[serde(rename = "zoneState")]
    pub zone_state: ZoneState,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ZoneState {
    pub available: bool,
}

impl Compute {
    /// `GET /os-availability-zone`: the zones a user may put a server in.
    pub async fn list_availability_zones(&self) -> Result<Vec<AvailabilityZone>, OpenStackError> {
        self.session
            .send(&Request::get(S, "os-availability-zone"))
            .await?
            .json_at("availabilityZoneInfo")
    }

    /// `GET /flavors/detail` (with extra_specs).
    pub async fn list_flavors(&self) -> Result<Vec<Flavor>, OpenStackError> {
        self.session
            .list(S, "flavors/detail", Vec::new(), "flavors")
            .await
    }

    /// The flavor with exactly this name (or id).
    pub async fn find_flavor(&self, name_or_id: &str) -> Result<Flavor, OpenStackError> {
        let flavors = self.list_flavors().await?;
        if let Some(f) = flavors
            .iter()
            .find(|f| f.name == name_or_id || f.id == name_or_id)
        {
            return Ok(f.clone());
        }
        let mut names: Vec<&str> = flavors.iter().map(|f| f.name.as_str()).collect();
        names.sort_unstable();
        Err(OpenStackError::NoSuchName {
            kind: "flavor",
            name: name_or_id.to_owned(),
            available: format!("; available: {}", names.join(", ")),
        })
    }

    /// `GET /os-keypairs/{name}`; `None` if there is none.
    pub async fn get_keypair(&self, name: &str) -> Result<Option<Keypair>, OpenStackError> {
        let req = Request::get(S, format!("os-keypairs/{name}"));
        optional(self.session.send(&req).await)?
            .map(|r| r.json_at("keypair"))
            .transpose()
    }

    /// `POST /os-keypairs` with a public key (OpenSSH format).
    pub async fn import_keypair(
        &self,
        name: &str,
        public_key: &str,
    ) -> Result<Keypair, OpenStackError> {
        let body =
            json!({ "keypair": { "name": name, "public_key": public_key.trim(), "type": "ssh" } });
        self.session
            .send(&Request::post(S, "os-keypairs", body))
            .await?
            .json_at("keypair")
    }

    /// `DELETE /os-keypairs/{name}`; Ok if it was already gone.
    pub async fn delete_keypair(&self, name: &str) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(&Request::delete(S, format!("os-keypairs/{name}")))
                .await,
        )
    }

    /// `POST /servers`; returns the new server's id (the server is BUILD: poll with
    /// [`Compute::list_servers`]). The admin password nova returns is dropped.
    pub async fn create_server(&self, server: &ServerCreate) -> Result<String, OpenStackError> {
        #[derive(Deserialize)]
        struct Created {
            id: String,
        }
        let created: Created = self
            .session
            .send(&Request::post(S, "servers", server.to_body()?))
            .await?
            .json_at("server")?;
        Ok(created.id)
    }

    /// `GET /servers/detail?tags=...`: one call (plus pages of 1000) for all matching
    /// servers, whatever their state.
    pub async fn list_servers(&self, filter: &ServerFilter) -> Result<Vec<Server>, OpenStackError> {
        let mut query = Vec::new();
        if !filter.tags.is_empty() {
            query.push(("tags".to_owned(), filter.tags.join(",")));
        }
        if let Some(n) = &filter.name {
            query.push(("name".to_owned(), n.clone()));
        }
        self.session
            .list(S, "servers/detail", query, "servers")
            .await
    }

    /// `GET /servers/{id}`; `None` if it does not exist (any more).
    pub async fn get_server(&self, id: &str) -> Result<Option<Server>, OpenStackError> {
        optional(
            self.session
                .send(&Request::get(S, format!("servers/{id}")))
                .await,
        )?
        .map(|r| r.json_at("server"))
        .transpose()
    }

    /// `DELETE /servers/{id}` (retried while nova says the server is busy); Ok if it was
    /// already gone. Deletion is asynchronous: the server lingers in `list_servers` for a
    /// few seconds.
    pub async fn delete_server(&self, id: &str) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(&Request::delete(S, format!("servers/{id}")).retry_on_conflict())
                .await,
        )
    }

    /// `POST /servers/{id}/action` with `createImage`: a snapshot of the server's root disk
    /// into a private Glance image named `name`, with `metadata` among its properties (Nova
    /// adds the server's image's own). Returns the new image's id (microversion 2.45+: in the
    /// body); the image is `queued` or `saving` until Nova has uploaded the disk.
    pub async fn create_image(
        &self,
        id: &str,
        name: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<String, OpenStackError> {
        let path = format!("servers/{id}/action");
        let body = json!({ "createImage": { "name": name, "metadata": metadata } });
        self.session
            .send(&Request::post(S, path, body))
            .await?
            .json_at("image_id")
    }

    /// `POST /servers/{id}/action` with the `reboot` action (202, no body).
    pub async fn reboot_server(&self, id: &str, kind: RebootType) -> Result<(), OpenStackError> {
        let path = format!("servers/{id}/action");
        self.session
            .send(&Request::post(S, path, kind.body()))
            .await
            .map(drop)
    }

    /// `POST /servers/{id}/action` with `os-getConsoleOutput`: the last `lines` lines of the
    /// server's console (where cloud-init prints the host keys it made).
    pub async fn console_output(&self, id: &str, lines: u32) -> Result<String, OpenStackError> {
        let path = format!("servers/{id}/action");
        let body = json!({ "os-getConsoleOutput": { "length": lines } });
        self.session
            .send(&Request::post(S, path, body))
            .await?
            .json_at("output")
    }

    /// `GET /limits` absolute limits of the project.
    pub async fn limits(&self) -> Result<ComputeLimits, OpenStackError> {
        #[derive(Deserialize)]
        struct L {
            absolute: ComputeLimits,
        }
        let l: L = self
            .session
            .send(&Request::get(S, "limits"))
            .await?
            .json_at("limits")?;
        Ok(l.absolute)
    }

    /// `GET /os-quota-sets/{project}/detail`: limit, in use, reserved per resource.
    pub async fn quota_usage(&self, project_id: &str) -> Result<QuotaUsages, OpenStackError> {
        let resp = self
            .session
            .send(&Request::get(
                S,
                format!("os-quota-sets/{project_id}/detail"),
            ))
            .await?;
        parse_quota_usages(&resp, "quota_set")
    }

    /// Admin: `PUT /os-quota-sets/{project}` with the given limits (`instances`, `cores`,
    /// `ram`...); returns the project's limits after the change.
    pub async fn set_quota(
        &self,
        project_id: &str,
        limits: &BTreeMap<String, i64>,
    ) -> Result<BTreeMap<String, serde_json::Value>, OpenStackError> {
        let body = json!({ "quota_set": limits });
        self.session
            .send(&Request::put(
                S,
                format!("os-quota-sets/{project_id}"),
                body,
            ))
            .await?
            .json_at("quota_set")
    }

    /// `POST /servers/{id}/os-volume_attachments`.
    pub async fn attach_volume(
        &self,
        server_id: &str,
        volume_id: &str,
        device: Option<&str>,
    ) -> Result<VolumeAttachment, OpenStackError> {
        let mut att = json!({ "volumeId": volume_id });
        if let Some(d) = device {
            att["device"] = json!(d);
        }
        self.session
            .send(
                &Request::post(
                    S,
                    format!("servers/{server_id}/os-volume_attachments"),
                    json!({ "volumeAttachment": att }),
                )
                .retry_on_conflict(),
            )
            .await?
            .json_at("volumeAttachment")
    }

    /// `GET /servers/{id}/os-volume_attachments`.
    pub async fn list_volume_attachments(
        &self,
        server_id: &str,
    ) -> Result<Vec<VolumeAttachment>, OpenStackError> {
        self.session
            .list(
                S,
                &format!("servers/{server_id}/os-volume_attachments"),
                Vec::new(),
                "volumeAttachments",
            )
            .await
    }

    /// `DELETE /servers/{id}/os-volume_attachments/{volume}`; Ok if not attached.
    pub async fn detach_volume(
        &self,
        server_id: &str,
        volume_id: &str,
    ) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(
                    &Request::delete(
                        S,
                        format!("servers/{server_id}/os-volume_attachments/{volume_id}"),
                    )
                    .retry_on_conflict(),
                )
                .await,
        )
    }
}
