//! Where the cloud's replies about servers enter: [`Screen`] keeps only names this cluster
//! gives and addresses that are IP addresses.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Mutex;

use crate::input::shown;
use crate::plan::{Kind, Names, Observed, Role};
use crate::state::Node;

/// Checks what a cloud (or Docker) reports about servers, where the reply enters. Any server
/// in the project can carry the cluster's tag, so its name and addresses are untrusted: a
/// server is kept only when its name is one this cluster gives (`<cluster>-master`,
/// `<cluster>-worker-<n>`), an address only when it is an IP address. Anything else is left
/// out, with one warning per value, and so never reaches ssh_config, the hostfile, the
/// discovery file, a shell or a plan (it is neither used nor deleted).
#[derive(Debug, Default)]
pub struct Screen {
    /// Warnings already given: polls repeat every few seconds and must not repeat them.
    warned: Mutex<BTreeSet<String>>,
}

impl Screen {
    fn warn(&self, message: String) {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if warned.insert(message.clone()) {
            eprintln!("warning: {message}");
        }
    }

    /// The role a server's name gives it; `None`, with a warning, for any other name.
    pub fn server_role(&self, cluster: &str, name: &str) -> Option<Role> {
        let role = Names(cluster).node_role(name);
        if role.is_none() {
            self.warn(format!(
                "ignoring a server tagged with cluster `{cluster}` but named `{}`: this cluster only names servers `{cluster}-master` and `{cluster}-worker-<n>`; it is left untouched",
                shown(name)
            ));
        }
        role
    }

    /// Servers (only) whose name this cluster gives; other kinds pass unchanged.
    pub fn observed(&self, cluster: &str, observed: Vec<Observed>) -> Vec<Observed> {
        observed
            .into_iter()
            .filter(|o| o.kind != Kind::Server || self.server_role(cluster, &o.name).is_some())
            .collect()
    }

    /// An address the cloud gave, in its canonical spelling; `None`, with a warning, when it
    /// is not an IP address.
    pub fn address(&self, node: &str, what: &str, value: Option<&str>) -> Option<String> {
        let value = value?;
        match value.parse::<IpAddr>() {
            Ok(ip) => Some(ip.to_string()),
            Err(_) => {
                self.warn(format!(
                    "ignoring the {what} address `{}` the cloud gave for {node}: not an IP address",
                    shown(value)
                ));
                None
            }
        }
    }

    /// The nodes whose names this cluster gives, each with the role its name says (never a
    /// role the cloud's metadata claims) and checked addresses, master first, then workers
    /// by number.
    pub fn nodes(&self, cluster: &str, nodes: Vec<Node>) -> Vec<Node> {
        let names = Names(cluster);
        let mut kept: Vec<Node> = nodes
            .into_iter()
            .filter_map(|n| {
                let role = self.server_role(cluster, &n.name)?;
                Some(Node {
                    role,
                    private_ip: self.address(&n.name, "private", n.private_ip.as_deref()),
                    public_ip: self.address(&n.name, "public", n.public_ip.as_deref()),
                    ..n
                })
            })
            .collect();
        kept.sort_by_key(|n| {
            (
                n.role != Role::Master,
                names.worker_index(&n.name).unwrap_or(0),
            )
        });
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Health;

    fn node(name: &str, role: &str, private_ip: &str, public_ip: Option<&str>) -> Node {
        Node {
            name: name.into(),
            role: if role == "master" {
                Role::Master
            } else {
                Role::Worker
            },
            private_ip: Some(private_ip.into()),
            public_ip: public_ip.map(String::from),
            slots: 1,
            ..Node::default()
        }
    }

    #[test]
    fn only_names_this_cluster_gives_pass() {
        let screen = Screen::default();
        let reported = vec![
            node("demo-worker-2", "worker", "10.0.0.4", None),
            // ssh_config injection through a name, and a name a cluster never gives.
            node(
                "demo-worker-3\n  ProxyCommand touch /tmp/x",
                "worker",
                "10.0.0.5",
                None,
            ),
            node("x\nHost *", "worker", "10.0.0.6", None),
            node("demo-worker-07", "worker", "10.0.0.7", None),
            node("demo-worker-+8", "worker", "10.0.0.8", None),
            node("other-worker-1", "worker", "10.0.0.9", None),
            node("demo-master ", "master", "10.0.0.10", None),
            node("", "worker", "10.0.0.11", None),
            // Metadata claims master; the name says worker, and the name wins.
            node("demo-worker-1", "master", "10.0.0.3", None),
            node("demo-master", "worker", "10.0.0.2", Some("203.0.113.5")),
        ];
        let kept = screen.nodes("demo", reported);
        let names: Vec<(&str, &str)> = kept
            .iter()
            .map(|n| (n.name.as_str(), n.role.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("demo-master", "master"),
                ("demo-worker-1", "worker"),
                ("demo-worker-2", "worker")
            ]
        );
        assert_eq!(kept[0].public_ip.as_deref(), Some("203.0.113.5"));
    }

    #[test]
    fn addresses_must_be_ip_addresses() {
        let screen = Screen::default();
        let kept = screen.nodes(
            "demo",
            vec![
                node("demo-master", "master", "10.0.0.2\nHost *", Some("a; id")),
                node("demo-worker-1", "worker", "10.0.0.3", Some("fd00::1")),
                node("demo-worker-2", "worker", " 10.0.0.4", None),
            ],
        );
        assert_eq!(kept[0].private_ip, None);
        assert_eq!(kept[0].public_ip, None);
        assert_eq!(kept[1].private_ip.as_deref(), Some("10.0.0.3"));
        assert_eq!(kept[1].public_ip.as_deref(), Some("fd00::1"));
        assert_eq!(
            kept[2].private_ip, None,
            "no trimming: the exact text must be an address"
        );
    }

    #[test]
    fn observed_servers_with_foreign_names_are_neither_used_nor_deleted() {
        let screen = Screen::default();
        let o = |kind, name: &str| Observed {
            kind,
            name: name.into(),
            id: format!("id-{name}"),
            health: Health::Ready,
            kept: false,
            called: None,
        };
        let kept = screen.observed(
            "demo",
            vec![
                o(Kind::Server, "demo-master"),
                o(Kind::Server, "demo-worker-4"),
                o(Kind::Server, "evil\u{1b}[2J"),
                o(Kind::Network, "demo-net"),
            ],
        );
        let names: Vec<&str> = kept.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["demo-master", "demo-worker-4", "demo-net"]);
        // Each foreign value is warned about once, however often it is polled.
        screen.observed("demo", vec![o(Kind::Server, "evil\u{1b}[2J")]);
        let warned = screen.warned.lock().unwrap();
        assert_eq!(warned.len(), 1);
        let only = warned.iter().next().unwrap();
        assert!(
            only.contains("evil\\u{1b}[2J") && !only.contains('\u{1b}'),
            "{only}"
        );
    }
}
