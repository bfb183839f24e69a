//! Neutron's resources as the API returns them, and the bodies that create them.

use serde::Deserialize;
use serde_json::json;

use super::super::QuotaUsages;

/// Neutron resources that take tags, by their URL collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Network,
    Subnet,
    Router,
    SecurityGroup,
    Port,
    FloatingIp,
}

impl Resource {
    pub fn collection(self) -> &'static str {
        match self {
            Resource::Network => "networks",
            Resource::Subnet => "subnets",
            Resource::Router => "routers",
            Resource::SecurityGroup => "security-groups",
            Resource::Port => "ports",
            Resource::FloatingIp => "floatingips",
        }
    }

    /// The key wrapping one resource in bodies.
    pub fn member(self) -> &'static str {
        match self {
            Resource::Network => "network",
            Resource::Subnet => "subnet",
            Resource::Router => "router",
            Resource::SecurityGroup => "security_group",
            Resource::Port => "port",
            Resource::FloatingIp => "floatingip",
        }
    }

    /// The key wrapping a list in bodies.
    pub fn list_key(self) -> &'static str {
        match self {
            Resource::SecurityGroup => "security_groups",
            other => other.collection(),
        }
    }
}

/// Resources whose tags the client sets after creating them.
pub trait Tagged {
    fn id(&self) -> &str;
    fn set_tags(&mut self, tags: Vec<String>);
}

macro_rules! tagged {
    ($($t:ty),*) => {$(
        impl Tagged for $t {
            fn id(&self) -> &str { &self.id }
            fn set_tags(&mut self, tags: Vec<String>) { self.tags = tags; }
        }
    )*};
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct NetworkInfo {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub status: Option<String>,
    pub admin_state_up: Option<bool>,
    pub shared: bool,
    #[serde(rename = "router:external")]
    pub external: bool,
    pub mtu: Option<u32>,
    pub subnets: Vec<String>,
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct AllocationPool {
    pub start: String,
    pub end: String,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Subnet {
    pub id: String,
    pub name: String,
    pub network_id: String,
    pub cidr: String,
    pub ip_version: u8,
    pub gateway_ip: Option<String>,
    pub enable_dhcp: bool,
    pub dns_nameservers: Vec<String>,
    pub allocation_pools: Vec<AllocationPool>,
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FixedIp {
    pub subnet_id: Option<String>,
    pub ip_address: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ExternalGateway {
    pub network_id: String,
    pub enable_snat: Option<bool>,
    pub external_fixed_ips: Vec<FixedIp>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Router {
    pub id: String,
    pub name: String,
    pub status: Option<String>,
    pub admin_state_up: Option<bool>,
    pub external_gateway_info: Option<ExternalGateway>,
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

/// The answer of `add_router_interface` (a bare object, not wrapped).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct RouterInterface {
    /// The router's id.
    pub id: String,
    pub subnet_id: String,
    pub subnet_ids: Vec<String>,
    pub port_id: String,
    pub network_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct SecurityGroupRule {
    pub id: String,
    pub security_group_id: String,
    /// `ingress` or `egress`.
    pub direction: String,
    /// `IPv4` or `IPv6`.
    pub ethertype: String,
    pub protocol: Option<String>,
    pub port_range_min: Option<u16>,
    pub port_range_max: Option<u16>,
    pub remote_ip_prefix: Option<String>,
    pub remote_group_id: Option<String>,
    pub description: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub security_group_rules: Vec<SecurityGroupRule>,
    pub tags: Vec<String>,
    pub stateful: Option<bool>,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Port {
    pub id: String,
    pub name: String,
    pub network_id: String,
    pub device_id: String,
    pub device_owner: String,
    pub status: Option<String>,
    pub mac_address: Option<String>,
    pub fixed_ips: Vec<FixedIp>,
    pub security_groups: Vec<String>,
    pub port_security_enabled: Option<bool>,
    pub admin_state_up: Option<bool>,
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FloatingIp {
    pub id: String,
    pub floating_ip_address: String,
    pub floating_network_id: String,
    pub port_id: Option<String>,
    pub fixed_ip_address: Option<String>,
    pub router_id: Option<String>,
    /// `ACTIVE`, `DOWN` (unassociated, or no L3 agent), `ERROR`.
    pub status: Option<String>,
    pub description: Option<String>,
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

tagged!(NetworkInfo, Subnet, Router, SecurityGroup, Port, FloatingIp);

#[derive(Debug, Clone, Default)]
pub struct NetworkCreate {
    pub name: String,
    pub description: Option<String>,
    pub mtu: Option<u32>,
    pub tags: Vec<String>,
}

/// A subnet's gateway.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Gateway {
    /// Neutron picks the first address of the CIDR.
    #[default]
    Auto,
    Ip(String),
    /// No gateway (`gateway_ip: null`).
    Disabled,
}

#[derive(Debug, Clone, Default)]
pub struct SubnetCreate {
    pub name: String,
    pub network_id: String,
    pub cidr: String,
    /// 4 unless set to 6.
    pub ip_version: Option<u8>,
    pub gateway: Gateway,
    pub dns_nameservers: Vec<String>,
    pub enable_dhcp: Option<bool>,
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct RouterCreate {
    pub name: String,
    /// External network for the gateway (`external_gateway_info.network_id`).
    pub external_network_id: Option<String>,
    /// Usually admin-only by policy: leave `None`.
    pub enable_snat: Option<bool>,
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct SecurityGroupCreate {
    pub name: String,
    pub description: Option<String>,
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Direction {
    #[default]
    Ingress,
    Egress,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EtherType {
    #[default]
    IPv4,
    IPv6,
}

impl Direction {
    /// As neutron spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
}

impl EtherType {
    /// As neutron spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            EtherType::IPv4 => "IPv4",
            EtherType::IPv6 => "IPv6",
        }
    }
}

/// Who a rule admits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Remote {
    /// Anyone (no remote set).
    #[default]
    Any,
    /// A CIDR (`remote_ip_prefix`).
    Cidr(String),
    /// Members of a security group (`remote_group_id`).
    Group(String),
}

#[derive(Debug, Clone, Default)]
pub struct RuleCreate {
    pub security_group_id: String,
    pub direction: Direction,
    pub ethertype: EtherType,
    /// `tcp`, `udp`, `icmp`, a number, or `None` for any.
    pub protocol: Option<String>,
    /// Inclusive port range (for ICMP: type and code).
    pub port_range: Option<(u16, u16)>,
    pub remote: Remote,
    pub description: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct PortCreate {
    pub name: String,
    pub network_id: String,
    /// Subnet (and optionally address) per fixed IP; empty lets neutron choose.
    pub fixed_ips: Vec<FixedIp>,
    /// Security group ids; `None` gives the project's `default` group.
    pub security_groups: Option<Vec<String>>,
    pub description: Option<String>,
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct FloatingIpCreate {
    pub floating_network_id: String,
    pub port_id: Option<String>,
    pub fixed_ip_address: Option<String>,
    pub description: Option<String>,
    pub tags: Vec<String>,
}

pub(super) fn opt_insert(
    m: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
    v: &Option<impl serde::Serialize>,
) {
    if let Some(v) = v {
        m.insert(key.into(), json!(v));
    }
}

impl SubnetCreate {
    pub fn to_body(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("network_id".into(), json!(self.network_id));
        m.insert("cidr".into(), json!(self.cidr));
        m.insert("ip_version".into(), json!(self.ip_version.unwrap_or(4)));
        match &self.gateway {
            Gateway::Auto => {}
            Gateway::Ip(ip) => {
                m.insert("gateway_ip".into(), json!(ip));
            }
            Gateway::Disabled => {
                m.insert("gateway_ip".into(), serde_json::Value::Null);
            }
        }
        if !self.dns_nameservers.is_empty() {
            m.insert("dns_nameservers".into(), json!(self.dns_nameservers));
        }
        opt_insert(&mut m, "enable_dhcp", &self.enable_dhcp);
        json!({ "subnet": m })
    }
}

impl RuleCreate {
    pub fn to_body(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("security_group_id".into(), json!(self.security_group_id));
        m.insert(
            "direction".into(),
            json!(match self.direction {
                Direction::Ingress => "ingress",
                Direction::Egress => "egress",
            }),
        );
        m.insert(
            "ethertype".into(),
            json!(match self.ethertype {
                EtherType::IPv4 => "IPv4",
                EtherType::IPv6 => "IPv6",
            }),
        );
        opt_insert(&mut m, "protocol", &self.protocol);
        if let Some((min, max)) = self.port_range {
            m.insert("port_range_min".into(), json!(min));
            m.insert("port_range_max".into(), json!(max));
        }
        match &self.remote {
            Remote::Any => {}
            Remote::Cidr(c) => {
                m.insert("remote_ip_prefix".into(), json!(c));
            }
            Remote::Group(g) => {
                m.insert("remote_group_id".into(), json!(g));
            }
        }
        opt_insert(&mut m, "description", &self.description);
        json!({ "security_group_rule": m })
    }
}

impl PortCreate {
    pub fn to_body(&self, tags_in_body: bool) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("network_id".into(), json!(self.network_id));
        if !self.fixed_ips.is_empty() {
            let ips: Vec<_> = self
                .fixed_ips
                .iter()
                .map(|f| {
                    let mut o = serde_json::Map::new();
                    opt_insert(&mut o, "subnet_id", &f.subnet_id);
                    opt_insert(&mut o, "ip_address", &f.ip_address);
                    serde_json::Value::Object(o)
                })
                .collect();
            m.insert("fixed_ips".into(), json!(ips));
        }
        opt_insert(&mut m, "security_groups", &self.security_groups);
        opt_insert(&mut m, "description", &self.description);
        if tags_in_body && !self.tags.is_empty() {
            m.insert("tags".into(), json!(self.tags));
        }
        json!({ "port": m })
    }
}

/// Neutron quota usage: `used` is read into [`crate::openstack::QuotaUsage::in_use`].
pub type NetworkQuotaUsages = QuotaUsages;
