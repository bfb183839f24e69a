//! The local OpenStack cloud (tests/cloud) as the tests see it: where its clouds.yaml is,
//! a client as user or admin, and what it still holds for a cluster.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hvd_cluster::openstack::{CloudConfig, OpenStack, Query, ServerFilter};
use hvd_cluster::provider::openstack::tag;

pub fn clouds_yaml() -> PathBuf {
    std::env::var_os("OS_CLIENT_CONFIG_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cloud/state/clouds.yaml")
        })
}

/// The clouds.yaml entry of the project the tests bound to the API alone act in (cloud_cli,
/// flaky_cloud, openstack_live): `api`, with quotas of its own, so that they can lower them and
/// count what the project holds while other tests make clusters in `demo` (`local-user`).
pub const API_CLOUD: &str = "local-api";

/// A profile of the local cloud (`cloud = "local-user"`) moved to the API tests' project.
pub fn in_api_project(profile: &str) -> String {
    let from = "cloud = \"local-user\"";
    assert!(profile.contains(from), "the profile names no `{from}`");
    profile.replace(from, &format!("cloud = \"{API_CLOUD}\""))
}

pub fn require_cloud() {
    let file = clouds_yaml();
    let up = file.exists()
        && std::net::TcpStream::connect_timeout(
            &"127.0.0.1:5000".parse().unwrap(),
            Duration::from_secs(2),
        )
        .is_ok();
    assert!(
        up,
        "the local OpenStack cloud is not running ({} missing or Keystone not answering on 127.0.0.1:5000).\n\
         Start it with: tests/cloud/install && tests/cloud/start   (or run scripts/test, which does both)",
        file.display()
    );
    std::env::set_var("OS_CLIENT_CONFIG_FILE", &file);
}

pub async fn client(cloud: &str) -> OpenStack {
    let config = CloudConfig::load(Some(cloud)).expect("clouds.yaml of the local cloud");
    OpenStack::connect(&config)
        .await
        .expect("authenticate to the local cloud")
}

/// Everything the cloud holds for a cluster, through the API as the user: by tag and by name.
pub async fn leftovers(os: &OpenStack, cluster: &str) -> Vec<String> {
    let mut left = Vec::new();
    let t = vec![tag(cluster)];
    let servers = os
        .compute()
        .list_servers(&ServerFilter {
            tags: t.clone(),
            name: None,
        })
        .await
        .unwrap();
    left.extend(
        servers
            .into_iter()
            .map(|s| format!("server {}", s.name.unwrap_or(s.id))),
    );
    let all_servers = os
        .compute()
        .list_servers(&ServerFilter::default())
        .await
        .unwrap();
    left.extend(
        all_servers
            .into_iter()
            .filter_map(|s| s.name)
            .filter(|n| n.starts_with(cluster))
            .map(|n| format!("server {n}")),
    );
    let net = os.network();
    left.extend(
        net.list_networks(&Query::new())
            .await
            .unwrap()
            .into_iter()
            .filter(|n| n.name.starts_with(cluster))
            .map(|n| format!("network {}", n.name)),
    );
    left.extend(
        net.list_subnets(&Query::new())
            .await
            .unwrap()
            .into_iter()
            .filter(|n| n.name.starts_with(cluster))
            .map(|n| format!("subnet {}", n.name)),
    );
    left.extend(
        net.list_routers(&Query::new())
            .await
            .unwrap()
            .into_iter()
            .filter(|n| n.name.starts_with(cluster))
            .map(|n| format!("router {}", n.name)),
    );
    left.extend(
        net.list_security_groups(&Query::new())
            .await
            .unwrap()
            .into_iter()
            .filter(|n| n.name.starts_with(cluster))
            .map(|n| format!("security group {}", n.name)),
    );
    left.extend(
        net.list_floating_ips(&Query::new().tags(&t))
            .await
            .unwrap()
            .into_iter()
            .map(|f| format!("floating ip {}", f.floating_ip_address)),
    );
    left.extend(
        net.list_floating_ips(&Query::new())
            .await
            .unwrap()
            .into_iter()
            .filter(|f| {
                f.description
                    .as_deref()
                    .is_some_and(|d| d.starts_with(cluster))
            })
            .map(|f| format!("floating ip {}", f.floating_ip_address)),
    );
    left.extend(
        net.list_ports(&Query::new())
            .await
            .unwrap()
            .into_iter()
            .filter(|p| p.name.starts_with(cluster))
            .map(|p| format!("port {}", p.name)),
    );
    // Shares: named after the cluster, or marked with it (a share taken by storage.share).
    let shares = os.share().list_shares(&Default::default()).await.unwrap();
    left.extend(
        shares
            .into_iter()
            .filter(|s| {
                s.name.as_deref().is_some_and(|n| n.starts_with(cluster))
                    || s.metadata.get("hvd-cluster").map(String::as_str) == Some(cluster)
            })
            .map(|s| format!("share {}", s.name.unwrap_or(s.id))),
    );
    // Volumes: named after the cluster, or marked with it (root volumes, by `down`).
    match os.volume().list_volumes(&Default::default()).await {
        Ok(volumes) => left.extend(
            volumes
                .into_iter()
                .filter(|v| {
                    v.name.as_deref().is_some_and(|n| n.starts_with(cluster))
                        || v.metadata.get("hvd-cluster").map(String::as_str) == Some(cluster)
                })
                .map(|v| format!("volume {} ({})", v.name.unwrap_or(v.id), v.status)),
        ),
        // a cloud started without Cinder
        Err(hvd_cluster::openstack::OpenStackError::Catalog { .. }) => {}
        Err(e) => panic!("listing volumes: {e}"),
    }
    // Snapshots Nova's shelve (`stop`) made: `<server>-shelved`, in any status.
    for node in ["master", "worker-1", "worker-2", "worker-3", "worker-4"] {
        let name = format!("{cluster}-{node}-shelved");
        left.extend(
            os.image()
                .list_by_name(&name)
                .await
                .unwrap()
                .into_iter()
                .map(|i| format!("image {} ({})", name, i.status)),
        );
    }
    if os
        .compute()
        .get_keypair(&format!("{cluster}-key"))
        .await
        .unwrap()
        .is_some()
    {
        left.push(format!("keypair {cluster}-key"));
    }
    // the autostop credentials (Keystone: by name)
    left.extend(
        hvd_cluster::provider::openstack::credential::existing(os, cluster)
            .await
            .unwrap()
            .into_iter()
            .map(|(g, _)| format!("application credential hvd-cluster-{cluster}-autostop-{g}")),
    );
    // the object store credentials of `[[data]] object_store`
    left.extend(
        hvd_cluster::provider::openstack::credential::existing_for(
            os,
            cluster,
            hvd_cluster::provider::openstack::credential::Purpose::Data,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|(g, _)| format!("application credential hvd-cluster-{cluster}-data-{g}")),
    );
    left.sort();
    left.dedup();
    left
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What Placement holds for a server (its allocations' resource providers), read as admin:
/// empty once Nova has handed the server's resources back (a shelved, offloaded server).
pub async fn allocations(admin: &OpenStack, server_id: &str) -> serde_json::Value {
    use hvd_cluster::openstack::{Request, Service};
    let resp = admin
        .request(&Request::get(
            Service::Placement,
            format!("allocations/{server_id}"),
        ))
        .await
        .expect("GET /allocations/{id} as admin");
    let body: serde_json::Value = resp.json().expect("Placement answers JSON");
    body["allocations"].clone()
}

/// A `[lifecycle]` section with `autostop` (the master reaches Keystone and Nova through
/// tests/cloud's forwarder on 203.0.113.1: the APIs listen on 127.0.0.1 only).
pub fn lifecycle(autostop: &str) -> String {
    format!(
        "\n[lifecycle]\nautostop = \"{autostop}\"\n\
         identity_url = \"http://203.0.113.1:5000/v3\"\n\
         compute_url = \"http://203.0.113.1:8774/v2.1\"\n"
    )
}

/// The cluster's profile with its `[lifecycle]` section set to `autostop`.
pub fn with_autostop(c: &super::TestCluster, autostop: &str) {
    let text = std::fs::read_to_string(&c.profile).unwrap();
    let text = text.split("\n[lifecycle]").next().unwrap().to_string();
    std::fs::write(&c.profile, text + &lifecycle(autostop)).unwrap();
}

/// The cluster's servers as `Status/TaskState`, listed by its tag as the user sees them.
pub fn server_states(os: &OpenStack, rt: &tokio::runtime::Runtime, cluster: &str) -> Vec<String> {
    let filter = ServerFilter {
        tags: vec![tag(cluster)],
        name: None,
    };
    rt.block_on(os.compute().list_servers(&filter))
        .expect("list the cluster's servers")
        .into_iter()
        .map(|s| format!("{:?}/{:?}", s.status, s.task_state))
        .collect()
}

/// Reads root-only files on the cluster's master (e.g. the autostop agent's log) over plain
/// ssh with the cluster's own ssh config, written while the cluster runs: once it is stopping,
/// the tool refuses `ssh` and `ssh-config`, and the master still answers for a while.
pub struct MasterFiles {
    config: tempfile::NamedTempFile,
    master: String,
}

impl MasterFiles {
    pub fn new(c: &super::TestCluster) -> MasterFiles {
        let config = tempfile::NamedTempFile::new().unwrap();
        let written = c.hvd(&["ssh-config", &c.profile]);
        assert!(written.status.success(), "ssh-config: {written:?}");
        std::fs::write(config.path(), written.stdout).unwrap();
        MasterFiles {
            config,
            master: format!("{}-master", c.name),
        }
    }

    /// The file's text; None when the master does not answer.
    pub fn read(&self, path: &str) -> Option<String> {
        let out = std::process::Command::new("ssh")
            .arg("-F")
            .arg(self.config.path())
            .args(["-o", "ConnectTimeout=5", &self.master, "sudo", "cat", path])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Uploads the files below `dir` into `container` of demo's object store, each under
/// `prefix/<its path below dir>`, with the cloud's own client (python-swiftclient from the
/// cloud's venv, tests/cloud/install).
pub fn object_store_upload(container: &str, dir: &std::path::Path, prefix: &str) {
    let venv = std::env::var("HVD_CLOUD_HOME").unwrap_or_else(|_| "/opt/hvd-cluster-cloud".into());
    let out = std::process::Command::new(format!("{venv}/venv/bin/swift"))
        .current_dir(dir)
        .args([
            "--auth-version",
            "3",
            "upload",
            "--object-name",
            prefix,
            container,
            ".",
        ])
        .env("OS_AUTH_URL", "http://127.0.0.1:5000/v3")
        .env("OS_USERNAME", "demo")
        .env("OS_PASSWORD", "secret")
        .env("OS_PROJECT_NAME", "demo")
        .env("OS_USER_DOMAIN_NAME", "Default")
        .env("OS_PROJECT_DOMAIN_NAME", "Default")
        .output()
        .expect("the cloud's swift client (tests/cloud/install)");
    assert!(
        out.status.success(),
        "swift upload: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Puts one object of any name (sent as it is: `..` and line breaks included, percent-encoded
/// on the wire) into `container` of demo's object store, through the catalog's object store URL.
pub fn object_store_put(container: &str, name: &str, body: &[u8]) {
    let rt = runtime();
    let os = rt.block_on(client("local-user"));
    let url = rt
        .block_on(os.endpoint(hvd_cluster::openstack::Service::ObjectStore))
        .unwrap();
    // demo's token, as any client of the cloud gets one (the library keeps its own to itself)
    let auth = std::process::Command::new("curl")
        .args(["-s", "-i", "-X", "POST", "http://127.0.0.1:5000/v3/auth/tokens"])
        .args(["-H", "Content-Type: application/json", "-d"])
        .arg(r#"{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"demo","domain":{"name":"Default"},"password":"secret"}}},"scope":{"project":{"name":"demo","domain":{"name":"Default"}}}}}"#)
        .output()
        .expect("curl");
    let token = String::from_utf8_lossy(&auth.stdout)
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("x-subject-token"))
                .map(|(_, v)| v.trim().to_string())
        })
        .expect("a token from Keystone");
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"/-_.".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "--path-as-is",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "PUT",
        ])
        .args(["-H", &format!("X-Auth-Token: {token}")])
        .args(["--data-binary", "@-"])
        .arg(format!("{url}/{container}/{encoded}"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(body)?;
            child.wait_with_output()
        })
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "201", "PUT {name:?}");
}
