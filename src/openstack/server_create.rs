//! The body of Nova's create-server request: what a new server is made of, built from plain
//! values and checked (Nova's `user_data` limit) before any call.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::json;

use super::error::OpenStackError;

/// Nova refuses `user_data` longer than this once base64-encoded.
pub const MAX_USER_DATA: usize = 65535;

/// How a new server attaches to a network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerNetwork {
    /// A pre-created port (its security groups are the port's).
    Port(String),
    /// A network by uuid: nova creates the port.
    Network(String),
    /// A network by uuid with a fixed IP.
    FixedIp { network: String, ip: String },
}

/// What to create. `networks` empty means `"none"` (no network at all).
#[derive(Debug, Clone, Default)]
pub struct ServerCreate {
    pub name: String,
    pub flavor_id: String,
    pub image_id: String,
    pub networks: Vec<ServerNetwork>,
    pub key_name: Option<String>,
    /// Security group names or ids; only for networks given by uuid (ports carry their own).
    pub security_groups: Vec<String>,
    pub metadata: BTreeMap<String, String>,
    /// At most 50 tags, each at most 60 characters, no `/` or `,`.
    pub tags: Vec<String>,
    /// Raw user data (cloud-init); base64-encoded by the client.
    pub user_data: Option<Vec<u8>>,
    pub availability_zone: Option<String>,
    /// Guest hostname (2.90+).
    pub hostname: Option<String>,
    /// Boot from a new volume made from `image_id` instead of the flavor's root disk.
    pub boot_volume: Option<BootVolume>,
}

/// The root volume Nova makes from the image for a volume-backed server
/// (`block_device_mapping_v2`: source image, destination volume, deleted with the server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootVolume {
    /// GiB
    pub size_gb: u32,
    /// The cloud's default type when `None` (2.67+).
    pub volume_type: Option<String>,
}

impl ServerCreate {
    /// The request body (`{"server": {...}}`).
    pub fn to_body(&self) -> Result<serde_json::Value, OpenStackError> {
        let mut server = serde_json::Map::new();
        server.insert("name".into(), json!(self.name));
        server.insert("flavorRef".into(), json!(self.flavor_id));
        match &self.boot_volume {
            // Nova takes the image from the mapping; an imageRef beside it would ask for a
            // local root disk too.
            Some(v) => {
                let mut device = json!({
                    "boot_index": 0,
                    "uuid": self.image_id,
                    "source_type": "image",
                    "destination_type": "volume",
                    "volume_size": v.size_gb,
                    "delete_on_termination": true,
                });
                if let Some(t) = &v.volume_type {
                    device["volume_type"] = json!(t);
                }
                server.insert("block_device_mapping_v2".into(), json!([device]));
            }
            None => {
                server.insert("imageRef".into(), json!(self.image_id));
            }
        }
        let networks = if self.networks.is_empty() {
            json!("none")
        } else {
            serde_json::Value::Array(
                self.networks
                    .iter()
                    .map(|n| match n {
                        ServerNetwork::Port(p) => json!({ "port": p }),
                        ServerNetwork::Network(u) => json!({ "uuid": u }),
                        ServerNetwork::FixedIp { network, ip } => {
                            json!({ "uuid": network, "fixed_ip": ip })
                        }
                    })
                    .collect(),
            )
        };
        server.insert("networks".into(), networks);
        if let Some(k) = &self.key_name {
            server.insert("key_name".into(), json!(k));
        }
        if !self.security_groups.is_empty() {
            let sgs: Vec<_> = self
                .security_groups
                .iter()
                .map(|n| json!({ "name": n }))
                .collect();
            server.insert("security_groups".into(), json!(sgs));
        }
        if !self.metadata.is_empty() {
            server.insert("metadata".into(), json!(self.metadata));
        }
        if !self.tags.is_empty() {
            server.insert("tags".into(), json!(self.tags));
        }
        if let Some(data) = &self.user_data {
            let encoded = base64::engine::general_purpose::STANDARD.encode(data);
            if encoded.len() > MAX_USER_DATA {
                return Err(OpenStackError::Invalid(format!(
                    "user_data for server {:?} is {} bytes base64-encoded; nova accepts at most {MAX_USER_DATA}",
                    self.name,
                    encoded.len()
                )));
            }
            server.insert("user_data".into(), json!(encoded));
        }
        if let Some(az) = &self.availability_zone {
            server.insert("availability_zone".into(), json!(az));
        }
        if let Some(h) = &self.hostname {
            server.insert("hostname".into(), json!(h));
        }
        Ok(json!({ "server": server }))
    }
}
