//! Neutron (networking v2.0).
//!
//! Tags: neutron's standard-attr tags are not accepted in create bodies (only ports take
//! them, and only where the optional `tag-ports-during-bulk-creation` extension is on), so
//! every create with tags is `POST` then `PUT /v2.0/{resource}/{id}/tags` with the whole
//! list; if tagging fails the fresh resource is deleted again so nothing untagged is left.
//! Ports get their tags in the POST when the cloud advertises that extension (looked up once
//! per client). Lists filter with `tags=a,b` (every tag must match).
//!
//! The client is here; the resources and request bodies are in `types`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;

mod types;

use types::opt_insert;
pub use types::*;

use super::error::{gone, optional, OpenStackError};
use super::http::{Request, Session};
use super::parse_quota_usages;
use super::service::Service;

const S: Service = Service::Network;
/// The extension that lets ports take `tags` in their create body.
pub const PORT_TAGS_ON_CREATE: &str = "tag-ports-during-bulk-creation";

#[derive(Clone)]
pub struct Network {
    pub(crate) session: Arc<Session>,
}

/// Neutron list filters (`?name=x&tags=a,b&device_id=...`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query(pub Vec<(String, String)>);

impl Query {
    pub fn new() -> Self {
        Query::default()
    }

    pub fn name(self, name: &str) -> Self {
        self.eq("name", name)
    }

    /// Resources carrying every one of these tags.
    pub fn tags<S: AsRef<str>>(self, tags: &[S]) -> Self {
        let joined = tags
            .iter()
            .map(|t| t.as_ref())
            .collect::<Vec<_>>()
            .join(",");
        self.eq("tags", &joined)
    }

    pub fn eq(mut self, key: &str, value: &str) -> Self {
        self.0.push((key.to_owned(), value.to_owned()));
        self
    }
}

impl Network {
    async fn list<T: DeserializeOwned>(
        &self,
        r: Resource,
        q: &Query,
    ) -> Result<Vec<T>, OpenStackError> {
        self.session
            .list(S, r.collection(), q.0.clone(), r.list_key())
            .await
    }

    async fn get<T: DeserializeOwned>(
        &self,
        r: Resource,
        id: &str,
    ) -> Result<Option<T>, OpenStackError> {
        optional(
            self.session
                .send(&Request::get(S, format!("{}/{id}", r.collection())))
                .await,
        )?
        .map(|resp| resp.json_at(r.member()))
        .transpose()
    }

    /// `DELETE`, retried while neutron says the resource is in use (409: e.g. ports still
    /// being released); Ok if it was already gone.
    async fn delete(&self, r: Resource, id: &str) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(&Request::delete(S, format!("{}/{id}", r.collection())).retry_on_conflict())
                .await,
        )
    }

    /// `DELETE` of any resource kind (see [`Network::delete`]).
    pub async fn delete_resource(&self, r: Resource, id: &str) -> Result<(), OpenStackError> {
        self.delete(r, id).await
    }

    /// Whether the resource still exists (`GET`; 404 is false).
    pub async fn exists(&self, r: Resource, id: &str) -> Result<bool, OpenStackError> {
        Ok(self.get::<serde_json::Value>(r, id).await?.is_some())
    }

    /// POST, then tags with PUT unless they went in the body; on a tagging failure the new
    /// resource is deleted again (best effort) and the tagging error returned.
    async fn create<T: DeserializeOwned + Tagged>(
        &self,
        r: Resource,
        body: serde_json::Value,
        tags: &[String],
        tags_in_body: bool,
    ) -> Result<T, OpenStackError> {
        let mut created: T = self
            .session
            .send(&Request::post(S, r.collection(), body))
            .await?
            .json_at(r.member())?;
        if !tags.is_empty() && !tags_in_body {
            match self.set_tags(r, created.id(), tags).await {
                Ok(t) => created.set_tags(t),
                Err(e) => {
                    let _ = self.delete(r, created.id()).await;
                    return Err(e);
                }
            }
        }
        Ok(created)
    }

    /// `PUT /v2.0/{resource}/{id}/tags`: replaces all tags; returns them.
    pub async fn set_tags(
        &self,
        r: Resource,
        id: &str,
        tags: &[String],
    ) -> Result<Vec<String>, OpenStackError> {
        self.session
            .send(&Request::put(
                S,
                format!("{}/{id}/tags", r.collection()),
                json!({ "tags": tags }),
            ))
            .await?
            .json_at("tags")
    }

    /// Aliases of the cloud's neutron extensions (one `GET /v2.0/extensions` per client).
    pub async fn extensions(&self) -> Result<&[String], OpenStackError> {
        #[derive(Deserialize)]
        struct Ext {
            alias: String,
        }
        let list = self
            .session
            .neutron_extensions
            .get_or_try_init(|| async {
                let exts: Vec<Ext> = self
                    .session
                    .list(S, "extensions", Vec::new(), "extensions")
                    .await?;
                Ok::<_, OpenStackError>(exts.into_iter().map(|e| e.alias).collect())
            })
            .await?;
        Ok(list.as_slice())
    }

    pub async fn has_extension(&self, alias: &str) -> Result<bool, OpenStackError> {
        Ok(self.extensions().await?.iter().any(|a| a == alias))
    }

    // --- networks

    pub async fn list_networks(&self, q: &Query) -> Result<Vec<NetworkInfo>, OpenStackError> {
        self.list(Resource::Network, q).await
    }

    /// Networks with `router:external` (floating-IP pools).
    pub async fn list_external_networks(&self) -> Result<Vec<NetworkInfo>, OpenStackError> {
        self.list_networks(&Query::new().eq("router:external", "true"))
            .await
    }

    /// The one network visible to the project with this name (own, shared or external).
    pub async fn find_network(&self, name: &str) -> Result<NetworkInfo, OpenStackError> {
        let found = self.list_networks(&Query::new().name(name)).await?;
        match found.len() {
            1 => Ok(found.into_iter().next().unwrap_or_default()),
            0 => {
                let external = self.list_external_networks().await.unwrap_or_default();
                let names: Vec<&str> = external.iter().map(|n| n.name.as_str()).collect();
                Err(OpenStackError::NoSuchName {
                    kind: "network",
                    name: name.to_owned(),
                    available: if names.is_empty() {
                        String::new()
                    } else {
                        format!("; external networks: {}", names.join(", "))
                    },
                })
            }
            _ => Err(OpenStackError::Ambiguous {
                kind: "network",
                name: name.to_owned(),
                candidates: found
                    .iter()
                    .map(|n| n.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    pub async fn get_network(&self, id: &str) -> Result<Option<NetworkInfo>, OpenStackError> {
        self.get(Resource::Network, id).await
    }

    pub async fn create_network(&self, n: &NetworkCreate) -> Result<NetworkInfo, OpenStackError> {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(n.name));
        opt_insert(&mut m, "description", &n.description);
        opt_insert(&mut m, "mtu", &n.mtu);
        self.create(Resource::Network, json!({ "network": m }), &n.tags, false)
            .await
    }

    pub async fn delete_network(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete(Resource::Network, id).await
    }

    // --- subnets

    pub async fn list_subnets(&self, q: &Query) -> Result<Vec<Subnet>, OpenStackError> {
        self.list(Resource::Subnet, q).await
    }

    pub async fn create_subnet(&self, s: &SubnetCreate) -> Result<Subnet, OpenStackError> {
        self.create(Resource::Subnet, s.to_body(), &s.tags, false)
            .await
    }

    pub async fn delete_subnet(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete(Resource::Subnet, id).await
    }

    // --- routers

    pub async fn list_routers(&self, q: &Query) -> Result<Vec<Router>, OpenStackError> {
        self.list(Resource::Router, q).await
    }

    pub async fn get_router(&self, id: &str) -> Result<Option<Router>, OpenStackError> {
        self.get(Resource::Router, id).await
    }

    pub async fn create_router(&self, r: &RouterCreate) -> Result<Router, OpenStackError> {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(r.name));
        if let Some(net) = &r.external_network_id {
            let mut gw = serde_json::Map::new();
            gw.insert("network_id".into(), json!(net));
            opt_insert(&mut gw, "enable_snat", &r.enable_snat);
            m.insert(
                "external_gateway_info".into(),
                serde_json::Value::Object(gw),
            );
        }
        self.create(Resource::Router, json!({ "router": m }), &r.tags, false)
            .await
    }

    /// `PUT /routers/{id}/add_router_interface` with a subnet.
    pub async fn add_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<RouterInterface, OpenStackError> {
        self.session
            .send(
                &Request::put(
                    S,
                    format!("routers/{router_id}/add_router_interface"),
                    json!({ "subnet_id": subnet_id }),
                )
                .retry_on_conflict()
                .once(),
            )
            .await?
            .json()
    }

    /// `PUT /routers/{id}/remove_router_interface`; Ok if the interface (or router) is gone.
    pub async fn remove_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(
                    &Request::put(
                        S,
                        format!("routers/{router_id}/remove_router_interface"),
                        json!({ "subnet_id": subnet_id }),
                    )
                    .retry_on_conflict(),
                )
                .await,
        )
    }

    pub async fn delete_router(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete(Resource::Router, id).await
    }

    // --- security groups

    pub async fn list_security_groups(
        &self,
        q: &Query,
    ) -> Result<Vec<SecurityGroup>, OpenStackError> {
        self.list(Resource::SecurityGroup, q).await
    }

    /// Creates the group (neutron adds its default egress rules).
    pub async fn create_security_group(
        &self,
        g: &SecurityGroupCreate,
    ) -> Result<SecurityGroup, OpenStackError> {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(g.name));
        m.insert(
            "description".into(),
            json!(g.description.clone().unwrap_or_default()),
        );
        self.create(
            Resource::SecurityGroup,
            json!({ "security_group": m }),
            &g.tags,
            false,
        )
        .await
    }

    /// A rule. An identical existing rule is a 409 ([`OpenStackError::is_conflict`]).
    pub async fn create_security_group_rule(
        &self,
        r: &RuleCreate,
    ) -> Result<SecurityGroupRule, OpenStackError> {
        self.session
            .send(&Request::post(S, "security-group-rules", r.to_body()))
            .await?
            .json_at("security_group_rule")
    }

    pub async fn delete_security_group_rule(&self, id: &str) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(&Request::delete(S, format!("security-group-rules/{id}")))
                .await,
        )
    }

    pub async fn delete_security_group(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete(Resource::SecurityGroup, id).await
    }

    // --- ports

    pub async fn list_ports(&self, q: &Query) -> Result<Vec<Port>, OpenStackError> {
        self.list(Resource::Port, q).await
    }

    /// Ports of a device (a server's id, a router's id).
    pub async fn list_ports_by_device(&self, device_id: &str) -> Result<Vec<Port>, OpenStackError> {
        self.list_ports(&Query::new().eq("device_id", device_id))
            .await
    }

    pub async fn get_port(&self, id: &str) -> Result<Option<Port>, OpenStackError> {
        self.get(Resource::Port, id).await
    }

    pub async fn create_port(&self, p: &PortCreate) -> Result<Port, OpenStackError> {
        let in_body = !p.tags.is_empty() && self.has_extension(PORT_TAGS_ON_CREATE).await?;
        self.create(Resource::Port, p.to_body(in_body), &p.tags, in_body)
            .await
    }

    pub async fn delete_port(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete(Resource::Port, id).await
    }

    // --- floating IPs

    pub async fn list_floating_ips(&self, q: &Query) -> Result<Vec<FloatingIp>, OpenStackError> {
        self.list(Resource::FloatingIp, q).await
    }

    pub async fn list_floating_ips_by_port(
        &self,
        port_id: &str,
    ) -> Result<Vec<FloatingIp>, OpenStackError> {
        self.list_floating_ips(&Query::new().eq("port_id", port_id))
            .await
    }

    pub async fn create_floating_ip(
        &self,
        f: &FloatingIpCreate,
    ) -> Result<FloatingIp, OpenStackError> {
        let mut m = serde_json::Map::new();
        m.insert("floating_network_id".into(), json!(f.floating_network_id));
        opt_insert(&mut m, "port_id", &f.port_id);
        opt_insert(&mut m, "fixed_ip_address", &f.fixed_ip_address);
        opt_insert(&mut m, "description", &f.description);
        self.create(
            Resource::FloatingIp,
            json!({ "floatingip": m }),
            &f.tags,
            false,
        )
        .await
    }

    /// Associates the floating IP with a port (`Some`) or dissociates it (`None`).
    pub async fn set_floating_ip_port(
        &self,
        id: &str,
        port_id: Option<&str>,
    ) -> Result<FloatingIp, OpenStackError> {
        self.session
            .send(
                &Request::put(
                    S,
                    format!("floatingips/{id}"),
                    json!({ "floatingip": { "port_id": port_id } }),
                )
                .retry_on_conflict(),
            )
            .await?
            .json_at("floatingip")
    }

    pub async fn delete_floating_ip(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete(Resource::FloatingIp, id).await
    }

    // --- quotas

    /// `GET /v2.0/quotas/{project}/details.json`: limit, used, reserved per resource.
    pub async fn quota_usage(
        &self,
        project_id: &str,
    ) -> Result<NetworkQuotaUsages, OpenStackError> {
        let resp = self
            .session
            .send(&Request::get(
                S,
                format!("quotas/{project_id}/details.json"),
            ))
            .await?;
        parse_quota_usages(&resp, "quota")
    }

    /// `GET /v2.0/quotas/{project}`: the limits only.
    pub async fn quota_limits(
        &self,
        project_id: &str,
    ) -> Result<BTreeMap<String, i64>, OpenStackError> {
        self.session
            .send(&Request::get(S, format!("quotas/{project_id}")))
            .await?
            .json_at("quota")
    }
}
