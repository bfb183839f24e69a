//! The OpenStack client against the project's real local cloud (tests/cloud/).
//!
//!     tests/cloud/install && tests/cloud/start     # once
//!     cargo test --test openstack_live -- --nocapture
//!
//! Reads `OS_CLIENT_CONFIG_FILE` (default: tests/cloud/state/clouds.yaml) and its clouds
//! `local-api` (project `api`, the API-bound tests' own) and `local-admin`. If the cloud does not answer, the tests
//! fail and say how to start it: they never pass without having run.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hvd_cluster::openstack::config::{ConfigFile, ConfigFiles};
use hvd_cluster::openstack::network::FixedIp;
use hvd_cluster::openstack::{
    CloudConfig, Direction, EtherType, FloatingIpCreate, Gateway, NetworkCreate, OpenStack,
    OpenStackError, PortCreate, Query, Remote, RouterCreate, RuleCreate, SecurityGroupCreate,
    ServerCreate, ServerFilter, ServerNetwork, ServerStatus, ShareCreate, SubnetCreate,
    VolumeCreate,
};

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The two tests share the api project (one lowers its quota): never at the same time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIJWmQYlDmJSpswq+2wHdpQNet6xQNZzbr3YQR6ays82 hvd-cluster-live-test";
const START_HINT: &str = "start the local cloud first: `tests/cloud/install && tests/cloud/start` (check with `tests/cloud/status`)";

fn clouds_file() -> PathBuf {
    std::env::var_os("OS_CLIENT_CONFIG_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cloud/state/clouds.yaml")
        })
}

async fn connect(cloud: &str) -> OpenStack {
    let path = clouds_file();
    let contents = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; {START_HINT}", path.display()));
    let files = ConfigFiles {
        clouds: Some(ConfigFile { path, contents }),
        secure: None,
        searched: Vec::new(),
    };
    let cfg = CloudConfig::from_sources(Some(cloud), &HashMap::new(), &files)
        .unwrap_or_else(|e| panic!("{e}; {START_HINT}"));
    match OpenStack::connect(&cfg).await {
        Ok(os) => os,
        Err(e) => panic!("the local cloud is not reachable as {cloud}: {e}\n{START_HINT}"),
    }
}

fn unique_prefix() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    format!(
        "hvdt{}-{}",
        std::process::id() % 10000,
        millis % 100_000_000
    )
}

/// Polls `check` once a second until it gives `Some`, for at most `limit`.
async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> R<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = R<Option<T>>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await? {
            let took = start.elapsed();
            println!("  {what}: {:.1} s", took.as_secs_f64());
            return Ok((v, took));
        }
        if start.elapsed() > limit {
            return Err(format!("gave up waiting {:?} for {what}", limit).into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[derive(Default, Debug)]
struct Created {
    network: Option<String>,
    subnet: Option<String>,
    router: Option<String>,
    router_interface: bool,
    sg: Option<String>,
    keypair: Option<String>,
    port: Option<String>,
    server: Option<String>,
    fip: Option<String>,
    share: Option<String>,
    access: Option<String>,
    volume: Option<String>,
    attached: bool,
}

async fn build(
    os: &OpenStack,
    prefix: &str,
    c: &mut Created,
    timings: &mut Vec<(String, Duration)>,
) -> R<()> {
    let tags = vec![prefix.to_owned()];
    let net = os.network();
    let t0 = Instant::now();
    let public = net.find_network("public").await?;
    assert!(public.external, "public is an external network");
    let flavor = os.compute().find_flavor("m1.small").await?;
    let image = os
        .image()
        .find_image("debian-12-genericcloud-amd64")
        .await?;
    println!(
        "  lookups (network, flavor, image): {:.2} s",
        t0.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let n = net
        .create_network(&NetworkCreate {
            name: format!("{prefix}-net"),
            tags: tags.clone(),
            ..Default::default()
        })
        .await?;
    c.network = Some(n.id.clone());
    assert_eq!(n.tags, tags);
    let s = net
        .create_subnet(&SubnetCreate {
            name: format!("{prefix}-subnet"),
            network_id: n.id.clone(),
            cidr: "10.77.0.0/24".into(),
            gateway: Gateway::Ip("10.77.0.1".into()),
            dns_nameservers: vec!["9.9.9.9".into()],
            tags: tags.clone(),
            ..Default::default()
        })
        .await?;
    c.subnet = Some(s.id.clone());
    assert_eq!(
        (s.gateway_ip.as_deref(), s.dns_nameservers.clone()),
        (Some("10.77.0.1"), vec!["9.9.9.9".to_owned()])
    );
    let r = net
        .create_router(&RouterCreate {
            name: format!("{prefix}-router"),
            external_network_id: Some(public.id.clone()),
            tags: tags.clone(),
            ..Default::default()
        })
        .await?;
    c.router = Some(r.id.clone());
    assert_eq!(
        r.external_gateway_info.map(|g| g.network_id),
        Some(public.id.clone())
    );
    let iface = net.add_router_interface(&r.id, &s.id).await?;
    c.router_interface = true;
    assert_eq!(iface.subnet_id, s.id);

    let sg = net
        .create_security_group(&SecurityGroupCreate {
            name: format!("{prefix}-sg"),
            description: Some("hvd-cluster live test".into()),
            tags: tags.clone(),
        })
        .await?;
    c.sg = Some(sg.id.clone());
    let ssh = net
        .create_security_group_rule(&RuleCreate {
            security_group_id: sg.id.clone(),
            direction: Direction::Ingress,
            ethertype: EtherType::IPv4,
            protocol: Some("tcp".into()),
            port_range: Some((22, 22)),
            remote: Remote::Cidr("0.0.0.0/0".into()),
            description: Some("ssh".into()),
        })
        .await?;
    assert_eq!(ssh.remote_ip_prefix.as_deref(), Some("0.0.0.0/0"));
    let peers = net
        .create_security_group_rule(&RuleCreate {
            security_group_id: sg.id.clone(),
            protocol: Some("tcp".into()),
            port_range: Some((1, 65535)),
            remote: Remote::Group(sg.id.clone()),
            ..Default::default()
        })
        .await?;
    assert_eq!(peers.remote_group_id.as_deref(), Some(sg.id.as_str()));
    // the same rule again is a conflict the caller can recognise
    let again = net
        .create_security_group_rule(&RuleCreate {
            security_group_id: sg.id.clone(),
            protocol: Some("tcp".into()),
            port_range: Some((22, 22)),
            remote: Remote::Cidr("0.0.0.0/0".into()),
            ..Default::default()
        })
        .await;
    assert!(again.as_ref().is_err_and(|e| e.is_conflict()), "{again:?}");

    let key = os
        .compute()
        .import_keypair(&format!("{prefix}-key"), PUBLIC_KEY)
        .await?;
    c.keypair = Some(key.name.clone());
    assert!(os.compute().get_keypair(&key.name).await?.is_some());

    let port = net
        .create_port(&PortCreate {
            name: format!("{prefix}-port"),
            network_id: n.id.clone(),
            fixed_ips: vec![FixedIp {
                subnet_id: Some(s.id.clone()),
                ip_address: Some("10.77.0.10".into()),
            }],
            security_groups: Some(vec![sg.id.clone()]),
            tags: tags.clone(),
            ..Default::default()
        })
        .await?;
    c.port = Some(port.id.clone());
    assert_eq!(port.tags, tags);
    let port_tags_on_create = net
        .has_extension(hvd_cluster::openstack::network::PORT_TAGS_ON_CREATE)
        .await?;
    timings.push((
        "network, subnet, router+interface, group+2 rules, keypair, port".into(),
        t.elapsed(),
    ));
    println!(
        "  network resources created in {:.2} s (port tags in POST: {port_tags_on_create})",
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let server_id = os
        .compute()
        .create_server(&ServerCreate {
            name: format!("{prefix}-vm"),
            flavor_id: flavor.id.clone(),
            image_id: image.id.clone(),
            networks: vec![ServerNetwork::Port(port.id.clone())],
            key_name: Some(key.name.clone()),
            metadata: BTreeMap::from([("hvd-test".to_owned(), prefix.to_owned())]),
            tags: tags.clone(),
            user_data: Some(b"#cloud-config\n{}\n".to_vec()),
            hostname: Some(format!("{prefix}-vm")),
            ..Default::default()
        })
        .await?;
    c.server = Some(server_id.clone());
    println!("  server POST: {:.2} s", t.elapsed().as_secs_f64());
    let filter = ServerFilter {
        tags: tags.clone(),
        ..Default::default()
    };
    let compute = os.compute();
    let (server, _) = wait_for("server ACTIVE", Duration::from_secs(240), || async {
        let servers = compute.list_servers(&filter).await?;
        match servers.into_iter().find(|s| s.id == server_id) {
            Some(s) if s.status == ServerStatus::Active => Ok(Some(s)),
            Some(s) if s.status == ServerStatus::Error => {
                Err(format!("server went ERROR: {:?}", s.fault.map(|f| f.message)).into())
            }
            _ => Ok(None),
        }
    })
    .await?;
    timings.push(("server create → ACTIVE".into(), t.elapsed()));
    assert_eq!(server.tags, tags);
    assert_eq!(server.addresses_of_kind("fixed"), vec!["10.77.0.10"]);
    assert_eq!(
        server
            .flavor
            .as_ref()
            .and_then(|f| f.original_name.as_deref()),
        Some("m1.small")
    );
    assert_eq!(server.key_name.as_deref(), Some(key.name.as_str()));
    let bound = net.list_ports_by_device(&server_id).await?;
    assert_eq!(
        bound.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
        [port.id.as_str()]
    );

    let t = Instant::now();
    let fip = net
        .create_floating_ip(&FloatingIpCreate {
            floating_network_id: public.id.clone(),
            port_id: Some(port.id.clone()),
            description: Some(prefix.to_owned()),
            tags: tags.clone(),
            ..Default::default()
        })
        .await?;
    c.fip = Some(fip.id.clone());
    assert_eq!(fip.fixed_ip_address.as_deref(), Some("10.77.0.10"));
    let by_port = net.list_floating_ips_by_port(&port.id).await?;
    assert_eq!(
        by_port.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
        [fip.id.as_str()]
    );
    let loose = net.set_floating_ip_port(&fip.id, None).await?;
    assert_eq!(loose.port_id, None);
    let back = net.set_floating_ip_port(&fip.id, Some(&port.id)).await?;
    assert_eq!(back.port_id.as_deref(), Some(port.id.as_str()));
    timings.push((
        "floating IP create + dissociate + associate".into(),
        t.elapsed(),
    ));
    println!("  floating IP {} on the port", fip.floating_ip_address);

    // NFS share with an IP rule
    let t = Instant::now();
    let meta = BTreeMap::from([("hvd-test".to_owned(), prefix.to_owned())]);
    let share = os
        .share()
        .create_share(&ShareCreate {
            name: format!("{prefix}-share"),
            size: 1,
            metadata: meta.clone(),
            ..Default::default()
        })
        .await?;
    c.share = Some(share.id.clone());
    let shares = os.share();
    let (share, _) = wait_for("share available", Duration::from_secs(300), || async {
        let list = shares.list_shares(&meta).await?;
        match list.into_iter().find(|s| s.id == share.id) {
            Some(s) if s.is_available() => Ok(Some(s)),
            Some(s) if s.is_error() => Err(format!("share went {:?}", s.status).into()),
            _ => Ok(None),
        }
    })
    .await?;
    timings.push(("share create → available".into(), t.elapsed()));
    assert_eq!(
        share.metadata.get("hvd-test").map(String::as_str),
        Some(prefix)
    );
    let t = Instant::now();
    let rule = os
        .share()
        .allow_ip_access(&share.id, "10.77.0.0/24", true)
        .await?;
    c.access = Some(rule.id.clone());
    let share_id = share.id.clone();
    wait_for("access rule active", Duration::from_secs(120), || async {
        let rules = shares.list_access_rules(&share_id).await?;
        match rules.into_iter().find(|r| r.id == rule.id) {
            Some(r) if r.state.as_deref() == Some("active") => Ok(Some(r)),
            Some(r) if r.state.as_deref() == Some("error") => Err("access rule went error".into()),
            _ => Ok(None),
        }
    })
    .await?;
    timings.push(("access rule → active".into(), t.elapsed()));
    let exports = os.share().export_locations(&share.id).await?;
    assert!(
        !exports.is_empty() && exports.iter().all(|e| !e.path.is_empty()),
        "{exports:?}"
    );
    println!(
        "  export locations: {:?}",
        exports.iter().map(|e| e.path.as_str()).collect::<Vec<_>>()
    );

    // a Cinder volume attached through nova and detached again
    let t = Instant::now();
    let vol = os
        .volume()
        .create_volume(&VolumeCreate {
            name: format!("{prefix}-vol"),
            size: 1,
            metadata: meta.clone(),
            ..Default::default()
        })
        .await?;
    c.volume = Some(vol.id.clone());
    let volumes = os.volume();
    let vol_status = |want: &'static str| {
        let volumes = volumes.clone();
        let meta = meta.clone();
        let id = vol.id.clone();
        move || {
            let volumes = volumes.clone();
            let meta = meta.clone();
            let id = id.clone();
            async move {
                let list = volumes.list_volumes(&meta).await?;
                match list.into_iter().find(|v| v.id == id) {
                    Some(v) if v.status == want => Ok(Some(v)),
                    Some(v) if v.status.starts_with("error") => {
                        Err(format!("volume went {}", v.status).into())
                    }
                    _ => Ok(None),
                }
            }
        }
    };
    wait_for(
        "volume available",
        Duration::from_secs(120),
        vol_status("available"),
    )
    .await?;
    let att = os
        .compute()
        .attach_volume(&server_id, &vol.id, None)
        .await?;
    c.attached = true;
    assert_eq!(att.volume_id, vol.id);
    let (in_use, _) = wait_for(
        "volume in-use",
        Duration::from_secs(120),
        vol_status("in-use"),
    )
    .await?;
    assert_eq!(
        in_use
            .attachments
            .first()
            .and_then(|a| a.server_id.as_deref()),
        Some(server_id.as_str())
    );
    assert_eq!(
        os.compute()
            .list_volume_attachments(&server_id)
            .await?
            .len(),
        1
    );
    os.compute().detach_volume(&server_id, &vol.id).await?;
    c.attached = false;
    wait_for(
        "volume detached",
        Duration::from_secs(120),
        vol_status("available"),
    )
    .await?;
    timings.push(("volume create, attach, detach".into(), t.elapsed()));

    // quotas and limits read fine for the project
    let pid = os.project_id().to_owned();
    let nq = net.quota_usage(&pid).await?;
    assert!(nq.get("port").is_some_and(|u| u.in_use >= 1), "{nq:?}");
    let lim = os.compute().limits().await?;
    assert!(lim.total_instances_used >= 1);
    let sl = os.share().limits().await?;
    assert!(sl.total_shares_used >= 1);
    os.volume().limits().await?;
    Ok(())
}

/// Deletes whatever `c` holds, in reverse order, waiting for servers, shares and volumes
/// to be gone. Runs after success and after failure alike (deletes are idempotent).
async fn teardown(
    os: &OpenStack,
    prefix: &str,
    c: &Created,
    timings: &mut Vec<(String, Duration)>,
) -> R<()> {
    let net = os.network();
    let tags = vec![prefix.to_owned()];
    let meta = BTreeMap::from([("hvd-test".to_owned(), prefix.to_owned())]);
    let t = Instant::now();
    if let (Some(server), Some(vol), true) = (&c.server, &c.volume, c.attached) {
        os.compute().detach_volume(server, vol).await?;
    }
    if let Some(vol) = &c.volume {
        let volumes = os.volume();
        wait_for("volume detachable", Duration::from_secs(120), || async {
            Ok(volumes.get_volume(vol).await?.map_or(Some(()), |v| {
                (v.status != "in-use" && v.status != "detaching").then_some(())
            }))
        })
        .await?;
        os.volume().delete_volume(vol).await?;
    }
    if let (Some(share), Some(access)) = (&c.share, &c.access) {
        os.share().deny_access(share, access).await?;
    }
    let share_deleted = Instant::now();
    if let Some(share) = &c.share {
        os.share().delete_share(share).await?;
    }
    if let Some(fip) = &c.fip {
        net.delete_floating_ip(fip).await?;
    }
    let server_deleted = Instant::now();
    if let Some(server) = &c.server {
        os.compute().delete_server(server).await?;
    }
    let compute = os.compute();
    let filter = ServerFilter {
        tags: tags.clone(),
        ..Default::default()
    };
    wait_for("servers gone", Duration::from_secs(180), || async {
        Ok(compute
            .list_servers(&filter)
            .await?
            .is_empty()
            .then_some(()))
    })
    .await?;
    timings.push((
        "server delete → gone (from the DELETE)".into(),
        server_deleted.elapsed(),
    ));
    let shares = os.share();
    wait_for("shares gone", Duration::from_secs(300), || async {
        let listed = shares.list_shares(&meta).await?;
        let direct = match &c.share {
            Some(id) => shares.get_share(id).await?,
            None => None,
        };
        Ok((listed.is_empty() && direct.is_none()).then_some(()))
    })
    .await?;
    timings.push((
        "share delete → gone (from the DELETE)".into(),
        share_deleted.elapsed(),
    ));
    let volumes = os.volume();
    wait_for("volumes gone", Duration::from_secs(120), || async {
        Ok(volumes.list_volumes(&meta).await?.is_empty().then_some(()))
    })
    .await?;
    if let Some(port) = &c.port {
        net.delete_port(port).await?;
    }
    if let Some(key) = &c.keypair {
        os.compute().delete_keypair(key).await?;
    }
    if let Some(sg) = &c.sg {
        net.delete_security_group(sg).await?;
    }
    if let (Some(router), Some(subnet), true) = (&c.router, &c.subnet, c.router_interface) {
        net.remove_router_interface(router, subnet).await?;
    }
    if let Some(router) = &c.router {
        net.delete_router(router).await?;
    }
    if let Some(subnet) = &c.subnet {
        net.delete_subnet(subnet).await?;
    }
    if let Some(network) = &c.network {
        net.delete_network(network).await?;
    }
    timings.push(("teardown, all of it".into(), t.elapsed()));
    Ok(())
}

/// What the list calls still find with the prefix's tag, metadata or name.
async fn leftovers(os: &OpenStack, prefix: &str) -> R<Vec<String>> {
    let net = os.network();
    let by_tag = Query::new().tags(&[prefix]);
    let meta = BTreeMap::from([("hvd-test".to_owned(), prefix.to_owned())]);
    let mut left = Vec::new();
    left.extend(
        net.list_networks(&by_tag)
            .await?
            .into_iter()
            .map(|r| format!("network {}", r.id)),
    );
    left.extend(
        net.list_subnets(&by_tag)
            .await?
            .into_iter()
            .map(|r| format!("subnet {}", r.id)),
    );
    left.extend(
        net.list_routers(&by_tag)
            .await?
            .into_iter()
            .map(|r| format!("router {}", r.id)),
    );
    left.extend(
        net.list_security_groups(&by_tag)
            .await?
            .into_iter()
            .map(|r| format!("security group {}", r.id)),
    );
    left.extend(
        net.list_ports(&by_tag)
            .await?
            .into_iter()
            .map(|r| format!("port {}", r.id)),
    );
    left.extend(
        net.list_floating_ips(&by_tag)
            .await?
            .into_iter()
            .map(|r| format!("floating ip {}", r.id)),
    );
    let servers = os
        .compute()
        .list_servers(&ServerFilter {
            tags: vec![prefix.to_owned()],
            ..Default::default()
        })
        .await?;
    left.extend(servers.into_iter().map(|s| format!("server {}", s.id)));
    left.extend(
        os.share()
            .list_shares(&meta)
            .await?
            .into_iter()
            .map(|s| format!("share {}", s.id)),
    );
    left.extend(
        os.volume()
            .list_volumes(&meta)
            .await?
            .into_iter()
            .map(|v| format!("volume {}", v.id)),
    );
    if os
        .compute()
        .get_keypair(&format!("{prefix}-key"))
        .await?
        .is_some()
    {
        left.push(format!("keypair {prefix}-key"));
    }
    // and by name, in case a tag was never set
    for n in net.list_networks(&Query::new()).await? {
        if n.name.starts_with(prefix) {
            left.push(format!("network {} (by name)", n.id));
        }
    }
    for p in net.list_ports(&Query::new()).await? {
        if p.name.starts_with(prefix) {
            left.push(format!("port {} (by name)", p.id));
        }
    }
    Ok(left)
}

#[tokio::test]
async fn lifecycle_as_a_project_member_leaves_nothing_behind() {
    let _serial = SERIAL.lock().await;
    let os = connect("local-api").await;
    let prefix = unique_prefix();
    println!("prefix {prefix}, project {}", os.project_id());
    let mut created = Created::default();
    let mut timings = Vec::new();
    let start = Instant::now();
    let built = build(&os, &prefix, &mut created, &mut timings).await;
    if let Err(e) = &built {
        println!("build failed: {e}; tearing down {created:?}");
    }
    let torn = teardown(&os, &prefix, &created, &mut timings).await;
    let left = leftovers(&os, &prefix).await;
    println!("timings:");
    for (what, d) in &timings {
        println!("  {what:<60} {:>6.1} s", d.as_secs_f64());
    }
    println!(
        "total {:.1} s, {} API calls",
        start.elapsed().as_secs_f64(),
        os.calls()
    );
    if let Err(e) = built {
        panic!("building failed: {e}");
    }
    if let Err(e) = torn {
        panic!("teardown failed: {e}");
    }
    match left {
        Ok(left) => assert!(left.is_empty(), "left behind: {left:?}"),
        Err(e) => panic!("listing leftovers failed: {e}"),
    }
}

#[tokio::test]
async fn server_create_over_instance_quota_is_quota_exceeded() {
    let _serial = SERIAL.lock().await;
    let user = connect("local-api").await;
    let admin = connect("local-admin").await;
    let project = user.project_id().to_owned();
    let before = admin
        .compute()
        .quota_usage(&project)
        .await
        .unwrap_or_else(|e| panic!("quota: {e}"));
    let instances = before.get("instances").copied().unwrap_or_default();
    println!("api instances quota before: {instances:?}");
    let lowered = BTreeMap::from([("instances".to_owned(), instances.in_use)]);
    if let Err(e) = admin.compute().set_quota(&project, &lowered).await {
        panic!("lowering the quota failed: {e}");
    }
    let outcome = async {
        let flavor = user.compute().find_flavor("m1.small").await?;
        let image = user
            .image()
            .find_image("debian-12-genericcloud-amd64")
            .await?;
        let create = ServerCreate {
            name: format!("{}-overquota", unique_prefix()),
            flavor_id: flavor.id,
            image_id: image.id,
            ..Default::default()
        };
        Ok::<_, OpenStackError>(user.compute().create_server(&create).await)
    }
    .await;
    let restore = BTreeMap::from([("instances".to_owned(), instances.limit)]);
    let restored = admin.compute().set_quota(&project, &restore).await;
    match outcome {
        Err(e) => panic!("setup failed: {e}"),
        Ok(Ok(id)) => {
            let _ = user.compute().delete_server(&id).await;
            panic!(
                "server {id} was created although the quota was {}",
                instances.in_use
            );
        }
        Ok(Err(e)) => {
            println!("got: {e}");
            assert!(e.is_quota_exceeded(), "expected QuotaExceeded, got {e:?}");
            let api = e
                .api()
                .cloned()
                .unwrap_or_else(|| panic!("no API error in {e:?}"));
            assert_eq!((api.service, api.status), ("nova", 403));
            assert!(
                api.message.contains("Quota exceeded for instances"),
                "{}",
                api.message
            );
            assert!(api.request_id.is_some());
        }
    }
    let after = restored.unwrap_or_else(|e| panic!("restoring the quota failed: {e}"));
    assert_eq!(
        after.get("instances"),
        Some(&serde_json::json!(instances.limit))
    );
}
