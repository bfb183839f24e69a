//! Everything written onto a node, rendered from the tera templates compiled into the binary
//! ([`crate::templates`] names them): the bootstrap steps' scripts and the files below. Pure:
//! values in, text out.

use std::borrow::Cow;
use std::net::IpAddr;

use serde::Serialize;
use tera::{Context, Kwargs, State, Tera, Value};

use crate::input::{check_host_label, shown, Refused};
use crate::ssh::error_chain;
use crate::templates;

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
        tera.add_raw_templates(templates::ALL.iter().map(|t| (t.name, t.text)))
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

    /// A node script (`*.check.sh`, `*.apply.sh`) with the node functions of `lib.sh` before it.
    pub fn script(&self, name: &str, values: &impl Serialize) -> Result<String, RenderError> {
        let lib = self.render("lib.sh", &serde_json::json!({}))?;
        Ok(format!("{lib}\n{}", self.render(name, values)?))
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

/// For tests: what `bash -n` says of `text` when bash cannot read it, `None` when it can.
#[cfg(test)]
pub(crate) fn bash_syntax_error(text: &str) -> Option<String> {
    let out = std::process::Command::new("bash")
        .args(["-n", "-c", text])
        .output()
        .expect("bash");
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
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
        let values = |role: &str, gpus: u32| json!({"role": role, "gpus": gpus, "config_hash": "abc123", "ssh_port": 12345, "image": "img:1", "hosts": hosts(), "runtime": "image", "kit_dir": "/opt/k"});
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
        for runtime in ["image", "tool"] {
            let values = json!({"role": "master", "gpus": 0, "config_hash": "abc", "ssh_port": 12345, "image": evil, "hosts": hosts(), "runtime": runtime, "kit_dir": "/opt/k"});
            let apply = r.render("container.apply.sh", &values).unwrap();
            assert!(
                apply.contains(&format!("image={}\n", crate::ssh::shell_quote(evil))),
                "{apply}"
            );
            // the name reaches docker only through that quoted variable, never raw
            assert!(!apply.contains(evil), "{apply}");
            let check = r.render("container.check.sh", &values).unwrap();
            assert!(check.contains(&crate::ssh::shell_quote(evil)), "{check}");
        }
        // The /shared scripts: the subnet and the export location are refused before they are
        // rendered; the master's name is quoted.
        use crate::bootstrap::{shared_values, SharedInputs};
        use crate::profile::StorageKind;
        let inputs = |clients: &'static str, master: &'static str, export: Option<&'static str>| {
            SharedInputs {
                storage: if export.is_some() {
                    StorageKind::Manila
                } else {
                    StorageKind::MasterNfs
                },
                clients,
                master,
                master_ip: "10.0.0.2",
                export,
                volume_id: None,
            }
        };
        assert!(shared_values(&r, &inputs(evil, "m", None), "master").is_err());
        assert!(shared_values(&r, &inputs("10.0.0.0/24", "m", Some(evil)), "worker").is_err());
        let v = shared_values(&r, &inputs("10.0.0.0/24", evil, None), "master").unwrap();
        let shared = r.script("shared.apply.sh", &v).unwrap();
        assert!(shared.contains(&crate::ssh::shell_quote(evil)), "{shared}");
        let w = json!({"role": "worker", "storage": "master-nfs", "clients": "", "master": "", "master_ip": evil, "export": "", "node_dir": "/etc/hvd-cluster", "ganesha_conf": ""});
        assert!(
            r.script("shared.apply.sh", &w).is_err(),
            "a worker's master address must be an IP"
        );
        // YAML stays one document with the value as data; the JSON line stays valid JSON.
        let text = cloud_config("c\"\n- x", "n: {a}\n#", "worker").unwrap();
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(yaml["hostname"].as_str(), Some("n: {a}\n#"), "{text}");
        let node: serde_json::Value =
            serde_json::from_str(yaml["write_files"][0]["content"].as_str().unwrap()).unwrap();
        assert_eq!(node["cluster"], "c\"\n- x");
    }

    #[test]
    fn shared_steps_differ_by_role_and_storage() {
        use crate::bootstrap::{shared_values, SharedInputs};
        use crate::profile::StorageKind;
        let r = Renderer::new().unwrap();
        let nfs = SharedInputs {
            storage: StorageKind::MasterNfs,
            clients: "10.0.0.0/24",
            master: "c-master",
            master_ip: "10.0.0.2",
            export: None,
            volume_id: None,
        };
        let m = r
            .script(
                "shared.apply.sh",
                &shared_values(&r, &nfs, "master").unwrap(),
            )
            .unwrap();
        // Kernel NFS where the node can, nfs-ganesha (the stand-in) where it cannot.
        assert!(
            m.contains(
                "printf '/shared %s(rw,sync,no_subtree_check,no_root_squash)\\n' '10.0.0.0/24'"
            ),
            "{m}"
        );
        assert!(m.contains("hvd_apt_install nfs-kernel-server"), "{m}");
        assert!(
            m.contains("hvd_apt_install nfs-ganesha nfs-ganesha-vfs"),
            "{m}"
        );
        assert!(
            m.contains("Clients = 10.0.0.0/24;\nHVD_GANESHA_EOF")
                || m.contains("        Clients = 10.0.0.0/24;"),
            "{m}"
        );
        assert!(
            m.contains("\nHVD_GANESHA_EOF\n"),
            "the heredoc ends on its own line: {m}"
        );
        assert!(
            !m.contains("hvd-nfs-export"),
            "no helper of the node image is needed: {m}"
        );
        let mc = r
            .script(
                "shared.check.sh",
                &shared_values(&r, &nfs, "master").unwrap(),
            )
            .unwrap();
        assert!(mc.contains("exportfs -s"), "{mc}");
        let w = r
            .script(
                "shared.apply.sh",
                &shared_values(&r, &nfs, "worker").unwrap(),
            )
            .unwrap();
        assert!(w.contains("hvd_mount_shared 10.0.0.2:/shared"), "{w}");
        assert!(w.contains("hvd_apt_install nfs-common"), "{w}");
        let wc = r
            .script(
                "shared.check.sh",
                &shared_values(&r, &nfs, "worker").unwrap(),
            )
            .unwrap();
        assert!(
            wc.contains("hvd_shared_mounted_from 10.0.0.2:/shared"),
            "{wc}"
        );
        // The fstab line keeps the mount across reboots without blocking a boot.
        assert!(w.contains("/shared nfs _netdev,nofail"), "{w}");
        assert!(w.contains("x-systemd.before=docker.service"), "{w}");

        let manila = SharedInputs {
            storage: StorageKind::Manila,
            export: Some("10.254.0.7:/shares/share-1a2b"),
            ..nfs
        };
        for role in ["master", "worker"] {
            let v = shared_values(&r, &manila, role).unwrap();
            let a = r.script("shared.apply.sh", &v).unwrap();
            assert!(
                a.contains("hvd_mount_shared '10.254.0.7:/shares/share-1a2b'"),
                "{a}"
            );
            assert!(
                !a.contains("nfs-kernel-server")
                    || !a.contains("hvd_apt_install nfs-kernel-server"),
                "{a}"
            );
            let c = r.script("shared.check.sh", &v).unwrap();
            assert!(
                c.contains("hvd_shared_mounted_from '10.254.0.7:/shares/share-1a2b'"),
                "{c}"
            );
        }
        let none = SharedInputs {
            export: None,
            ..manila
        };
        assert!(
            shared_values(&r, &none, "worker").is_err(),
            "no export location yet"
        );
    }

    /// `storage.volume_gb`: the master mounts the volume's disk on /shared, found by the serial
    /// the volume's id gives it, formatted only when blank; the workers do not care. The id
    /// comes from the cloud: anything but a UUID's characters is refused.
    #[test]
    fn the_master_puts_shared_on_its_volume() {
        use crate::bootstrap::{shared_values, SharedInputs};
        use crate::profile::StorageKind;
        let r = Renderer::new().unwrap();
        let with = |id: &'static str| SharedInputs {
            storage: StorageKind::MasterNfs,
            clients: "10.0.0.0/24",
            master: "c-master",
            master_ip: "10.0.0.2",
            export: None,
            volume_id: Some(id),
        };
        let id = "0f5a1b2c-3d4e-4f60-8a9b-0c1d2e3f4a5b";
        let v = shared_values(&r, &with(id), "master").unwrap();
        let a = r.script("shared.apply.sh", &v).unwrap();
        assert!(a.contains("serial='0f5a1b2c-3d4e-4f60-8'\n"), "{a}");
        assert!(a.contains("mkfs.ext4 -q -m 0 -L hvd-shared"), "{a}");
        assert!(
            a.contains("if [ -z \"$(blkid -o value -s TYPE \"$dev\" || true)\" ]; then"),
            "{a}"
        );
        let mount = a.find("mount /shared").unwrap();
        let export = a.find("exportfs -ra").unwrap();
        assert!(mount < export, "mounted before it is exported: {a}");
        let c = r.script("shared.check.sh", &v).unwrap();
        assert!(c.contains("= '0f5a1b2c-3d4e-4f60-8' ] || exit 1"), "{c}");
        let w = r
            .script(
                "shared.apply.sh",
                &shared_values(&r, &with(id), "worker").unwrap(),
            )
            .unwrap();
        assert!(!w.contains("mkfs"), "{w}");
        let none = r
            .script(
                "shared.apply.sh",
                &shared_values(
                    &r,
                    &SharedInputs {
                        volume_id: None,
                        ..with(id)
                    },
                    "master",
                )
                .unwrap(),
            )
            .unwrap();
        assert!(
            !none.contains("mkfs") && !none.contains("serial="),
            "{none}"
        );
        for evil in ["", "x'; rm -rf / #", "../../dev/sda", &"a".repeat(65)] {
            let evil: &'static str = Box::leak(evil.to_string().into_boxed_str());
            let e = shared_values(&r, &with(evil), "master").unwrap_err();
            assert!(e.to_string().contains("the cloud gave"), "{e}");
        }
    }

    #[test]
    fn docker_step_installs_everything_in_one_transaction() {
        let r = Renderer::new().unwrap();
        let a = |role: &str, storage: &str| {
            r.script(
                "docker.apply.sh",
                &json!({"role": role, "storage": storage}),
            )
            .unwrap()
        };
        let m = a("master", "master-nfs");
        assert!(m.contains("pkgs=\"docker.io apparmor zstd\""), "{m}");
        assert!(m.contains("pkgs=\"$pkgs nfs-kernel-server\""), "{m}");
        assert_eq!(m.matches("hvd_apt_install ").count(), 1, "{m}");
        assert!(m.contains("DPkg::Lock::Timeout=300"), "{m}");
        assert!(
            m.contains("debian:12|debian:13|ubuntu:22.04|ubuntu:24.04"),
            "{m}"
        );
        let w = a("worker", "master-nfs");
        assert!(
            w.contains("pkgs=\"$pkgs nfs-common\"")
                && !w.contains("pkgs=\"$pkgs nfs-kernel-server\""),
            "{w}"
        );
        assert!(a("master", "manila").contains("pkgs=\"$pkgs nfs-common\""));
        assert!(!a("worker", "none").contains("pkgs=\"$pkgs nfs"));
    }

    #[test]
    fn node_scripts_are_valid_bash() {
        use crate::bootstrap::{shared_values, SharedInputs};
        use crate::profile::StorageKind;
        let r = Renderer::new().unwrap();
        let mut scripts = Vec::new();
        for storage in [StorageKind::MasterNfs, StorageKind::Manila] {
            let inputs = SharedInputs {
                storage,
                clients: "10.0.0.0/24",
                master: "c-master",
                master_ip: "10.0.0.2",
                export: Some("10.0.0.9:/s"),
                volume_id: None,
            };
            for role in ["master", "worker"] {
                let v = shared_values(&r, &inputs, role).unwrap();
                scripts.push(r.script("shared.apply.sh", &v).unwrap());
                scripts.push(r.script("shared.check.sh", &v).unwrap());
                let d = json!({"role": role, "storage": crate::bootstrap::storage_name(storage)});
                scripts.push(r.script("docker.apply.sh", &d).unwrap());
                scripts.push(r.script("docker.check.sh", &d).unwrap());
            }
        }
        for s in scripts {
            if let Some(complaint) = super::bash_syntax_error(&s) {
                panic!("{complaint}\n{s}");
            }
        }
    }
}
