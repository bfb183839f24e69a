//! Everything written onto a node, rendered from tera templates compiled into the binary.
//! Pure: values in, text out.

use std::borrow::Cow;
use std::net::IpAddr;

use serde::Serialize;
use tera::{Context, Kwargs, State, Tera, Value};

use crate::input::{check_host_label, shown, Refused};
use crate::ssh::error_chain;

/// (name, text) of every template shipped in `templates/`.
const TEMPLATES: &[(&str, &str)] = &[
    (
        "docker.check.sh",
        include_str!("../templates/node/docker.check.sh"),
    ),
    (
        "docker.apply.sh",
        include_str!("../templates/node/docker.apply.sh"),
    ),
    (
        "gpu.check.sh",
        include_str!("../templates/node/gpu.check.sh"),
    ),
    (
        "gpu.apply.sh",
        include_str!("../templates/node/gpu.apply.sh"),
    ),
    (
        "shared.check.sh",
        include_str!("../templates/node/shared.check.sh"),
    ),
    (
        "shared.apply.sh",
        include_str!("../templates/node/shared.apply.sh"),
    ),
    (
        "container.check.sh",
        include_str!("../templates/node/container.check.sh"),
    ),
    (
        "container.apply.sh",
        include_str!("../templates/node/container.apply.sh"),
    ),
    ("hostfile", include_str!("../templates/node/hostfile")),
    (
        "cloud-config.yaml",
        include_str!("../templates/node/cloud-config.yaml"),
    ),
    (
        "cloud-init.check.sh",
        include_str!("../templates/node/cloud-init.check.sh"),
    ),
    (
        "discover_hosts.sh",
        include_str!("../templates/node/discover_hosts.sh"),
    ),
];

/// The acceptance check job, run by every rank.
pub const CHECK_JOB: &str = include_str!("../templates/check/hvd_check.py");

#[derive(Debug, thiserror::Error)]
#[error("template {name}: {detail}")]
pub struct RenderError {
    pub name: String,
    pub detail: String,
}

/// A host as the collective runtime sees it. Valid by construction (see [`HostSlots::new`]):
/// the hostfile, the discovery file and the nodes' ssh_config lines are written only from
/// these, so no path can put an unchecked name or address into them.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HostSlots {
    name: String,
    address: IpAddr,
    slots: u32,
}

impl HostSlots {
    /// The name must be a host name label; the address is an IP address by its type.
    pub fn new(name: &str, address: IpAddr, slots: u32) -> Result<HostSlots, Refused> {
        check_host_label(name)?;
        Ok(HostSlots {
            name: name.to_string(),
            address,
            slots: slots.max(1),
        })
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn address(&self) -> IpAddr {
        self.address
    }
    pub fn slots(&self) -> u32 {
        self.slots
    }
}

pub struct Renderer {
    tera: Tera,
}

impl Renderer {
    pub fn new() -> Result<Renderer, RenderError> {
        let mut tera = Tera::new();
        // Escaping for each target a template writes: every value from a profile, a cloud or
        // a node goes through one of these where it lands.
        tera.register_filter("shell_quote", |v: Cow<'_, str>, _: Kwargs, _: &State| {
            crate::ssh::shell_quote(&v)
        });
        tera.register_filter("yaml_str", |v: Cow<'_, str>, _: Kwargs, _: &State| {
            // A JSON string is a valid YAML double-quoted scalar, escapes included.
            serde_json::Value::String(v.into_owned()).to_string()
        });
        // Addresses in the hostfile: checked as IPs before they get here (HostSlots holds an
        // IpAddr); the filter makes a template fail rather than write anything else.
        tera.register_filter("ip", |v: Cow<'_, str>, _: Kwargs, _: &State| {
            v.parse::<IpAddr>()
                .map(|ip| ip.to_string())
                .map_err(|_| tera::Error::message(format!("`{}` is not an IP address", shown(&v))))
        });
        tera.register_filter("json", |v: Value, _: Kwargs, _: &State| {
            serde_json::to_string(&v).unwrap_or_else(|_| "null".to_string())
        });
        tera.add_raw_templates(TEMPLATES.iter().copied())
            .map_err(|e| RenderError {
                name: "(all)".into(),
                detail: error_chain(&e),
            })?;
        Ok(Renderer { tera })
    }

    pub fn render(&self, name: &str, values: &impl Serialize) -> Result<String, RenderError> {
        let context = Context::from_serialize(values).map_err(|e| RenderError {
            name: name.into(),
            detail: error_chain(&e),
        })?;
        self.tera.render(name, &context).map_err(|e| RenderError {
            name: name.into(),
            detail: error_chain(&e),
        })
    }

    /// `host slots=N` lines for `horovodrun --hostfile`.
    pub fn hostfile(&self, hosts: &[HostSlots]) -> Result<String, RenderError> {
        // horovodrun fails on a blank line in a hostfile.
        let text = self.render("hostfile", &serde_json::json!({ "hosts": hosts }))?;
        Ok(text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("{l}\n"))
            .collect())
    }
}

/// The user_data a cloud server boots with (`#cloud-config`).
pub fn cloud_config(cluster: &str, name: &str, role: &str) -> Result<String, RenderError> {
    Renderer::new()?.render(
        "cloud-config.yaml",
        &serde_json::json!({ "cluster": cluster, "name": name, "role": role }),
    )
}

/// The text of a shipped template (hashed into what depends on it).
pub fn template_source(name: &str) -> Option<&'static str> {
    TEMPLATES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// `host:slots` lines for Horovod's elastic discovery script. Hosts go by node name, never
/// by address: Horovod blacklists a failed host by what discovery called it, and a cloud (or
/// Docker) may give a replacement the address of the node it replaces.
pub fn discovery_lines(hosts: &[HostSlots]) -> String {
    hosts
        .iter()
        .map(|h| format!("{}:{}\n", h.name, h.slots))
        .collect()
}

/// An ssh_config fragment that makes every node name reach its address, so horovodrun in the
/// containers can use the names discovery prints without any DNS.
pub fn ssh_host_names(hosts: &[HostSlots]) -> String {
    let mut out = String::from("# written by hvd-cluster: node name -> address\n");
    for h in hosts {
        out.push_str(&format!("Host {}\n    HostName {}\n", h.name, h.address));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hosts() -> Vec<HostSlots> {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        vec![
            HostSlots::new("c-master", ip("10.0.0.2"), 1).unwrap(),
            HostSlots::new("c-worker-1", ip("10.0.0.3"), 2).unwrap(),
        ]
    }

    #[test]
    fn hosts_hold_only_host_names_and_addresses() {
        let ip = "10.0.0.2".parse::<IpAddr>().unwrap();
        for bad in [
            "c-worker-1\n  ProxyCommand id",
            "x\nHost *",
            "",
            "c worker",
            "C-1",
        ] {
            assert!(HostSlots::new(bad, ip, 1).is_err(), "{bad:?}");
        }
        // The template refuses a value that is not an address, whatever path brought it.
        let r = Renderer::new().unwrap();
        let forged = json!({"hosts": [{"name": "c-master", "address": "10.0.0.2 slots=99\nevil", "slots": 1}]});
        let e = r.render("hostfile", &forged).unwrap_err();
        assert!(e.to_string().contains("not an IP address"), "{e}");
        assert!(
            !e.to_string().contains("\nevil"),
            "the value is shown escaped: {e}"
        );
        let v6 = HostSlots::new("c-master", "fd00::2".parse().unwrap(), 1).unwrap();
        assert_eq!(r.hostfile(&[v6]).unwrap(), "fd00::2 slots=1\n");
    }

    #[test]
    fn cloud_config_names_the_node() {
        let text = cloud_config("c", "c-worker-2", "worker").unwrap();
        assert!(text.starts_with("#cloud-config\n"), "{text}");
        assert!(text.contains("hostname: \"c-worker-2\"\n"), "{text}");
        assert!(
            text.contains(r#"{"cluster": "c", "node": "c-worker-2", "role": "worker"}"#),
            "{text}"
        );
    }

    #[test]
    fn hostfile_and_discovery() {
        let r = Renderer::new().unwrap();
        assert_eq!(
            r.hostfile(&hosts()).unwrap(),
            "10.0.0.2 slots=1\n10.0.0.3 slots=2\n"
        );
        assert_eq!(discovery_lines(&hosts()), "c-master:1\nc-worker-1:2\n");
        let names = ssh_host_names(&hosts());
        assert!(
            names.contains("Host c-worker-1\n    HostName 10.0.0.3\n"),
            "{names}"
        );
        assert!(
            names.contains("Host c-master\n    HostName 10.0.0.2\n"),
            "{names}"
        );
    }

    #[test]
    fn container_command_carries_hash_hosts_and_jupyter_only_on_master() {
        let r = Renderer::new().unwrap();
        let values = |role: &str, gpus: u32| json!({"role": role, "gpus": gpus, "config_hash": "abc123", "ssh_port": 12345, "image": "img:1", "hosts": hosts()});
        let master = r
            .render("container.apply.sh", &values("master", 0))
            .unwrap();
        assert!(master.contains("--label hvd-cluster.config=abc123"));
        assert!(master.contains("-e HVD_JUPYTER=1"));
        assert!(!master.contains("--gpus"));
        let worker = r
            .render("container.apply.sh", &values("worker", 2))
            .unwrap();
        assert!(!worker.contains("HVD_JUPYTER"));
        assert!(worker.contains("--gpus all"));
        let check = r
            .render("container.check.sh", &values("worker", 0))
            .unwrap();
        assert!(
            check.contains("'{{.State.Running}} {{index .Config.Labels \"hvd-cluster.config\"}}'"),
            "{check}"
        );
        assert!(check.contains("= \"true abc123\""));
    }

    #[test]
    fn hostile_values_stay_inert_in_every_template() {
        let r = Renderer::new().unwrap();
        let evil = "x'; touch /tmp/hvd-canary; echo '$(id)`id`\nrm -rf /";
        let values = json!({"role": "master", "gpus": 0, "config_hash": "abc", "ssh_port": 12345, "image": evil, "hosts": hosts()});
        let apply = r.render("container.apply.sh", &values).unwrap();
        assert!(apply.contains(&crate::ssh::shell_quote(evil)), "{apply}");
        let v = json!({"role": "master", "clients": evil, "master": evil, "master_ip": evil});
        let shared = r.render("shared.apply.sh", &v).unwrap();
        assert_eq!(
            shared.matches(&crate::ssh::shell_quote(evil)).count(),
            2,
            "{shared}"
        );
        let w = r
            .render(
                "shared.apply.sh",
                &json!({"role": "worker", "clients": "", "master": "", "master_ip": evil}),
            )
            .unwrap();
        assert!(w.contains(&crate::ssh::shell_quote(evil)), "{w}");
        // YAML stays one document with the value as data; the JSON line stays valid JSON.
        let text = cloud_config("c\"\n- x", "n: {a}\n#", "worker").unwrap();
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(yaml["hostname"].as_str(), Some("n: {a}\n#"), "{text}");
        let node: serde_json::Value =
            serde_json::from_str(yaml["write_files"][0]["content"].as_str().unwrap()).unwrap();
        assert_eq!(node["cluster"], "c\"\n- x");
    }

    #[test]
    fn shared_steps_differ_by_role() {
        let r = Renderer::new().unwrap();
        let v = |role: &str| json!({"role": role, "clients": "10.0.0.0/24", "master": "c-master", "master_ip": "10.0.0.2"});
        let m = r.render("shared.apply.sh", &v("master")).unwrap();
        assert!(m.contains("hvd-nfs-export /shared '10.0.0.0/24'"), "{m}");
        let w = r.render("shared.apply.sh", &v("worker")).unwrap();
        assert!(
            w.contains("mount -t nfs4 -o vers=4.0,proto=tcp '10.0.0.2':/shared /shared"),
            "{w}"
        );
    }
}
