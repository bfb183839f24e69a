//! The checks a parsed profile must pass, none needing the network: every value that reaches
//! a shell, a template, a file or a URL by its own grammar, the subnet, OpenStack's required
//! names, and who may reach the master.

use std::net::Ipv4Addr;

use super::{AccessSpec, ImageSource, JupyterAccess, Profile, ProviderKind, PullFrom, StorageKind};
use crate::input::{self, shown, Refused};

/// A semantic problem found after parsing, before its place in the file is looked up.
#[derive(Debug)]
pub(super) struct Issue {
    pub(super) field: String,
    pub(super) message: String,
    pub(super) help: Option<String>,
}

fn issue(field: &str, message: impl Into<String>, help: Option<&str>) -> Issue {
    Issue {
        field: field.to_string(),
        message: message.into(),
        help: help.map(str::to_string),
    }
}

pub(super) fn validate(p: &Profile) -> Result<(), Issue> {
    // The name was checked while parsing (ClusterName); now every other value that reaches
    // a shell, a template, a file or a URL, each by its own grammar.
    input::check_login_name(&p.ssh_user).map_err(|e| refused("ssh_user", e))?;
    if let Some(interface) = &p.interface {
        if crate::openstack::config::Interface::parse(interface).is_none() {
            return Err(issue(
                "interface",
                format!("`{}` is not an endpoint interface", shown(interface)),
                Some("use \"public\", \"internal\" or \"admin\""),
            ));
        }
    }
    check_cloud_names(p)?;
    input::check_image_reference(&p.container.image).map_err(|e| refused("container.image", e))?;
    if p.workers.count > 256 {
        return Err(issue(
            "workers.count",
            format!("{} workers is more than the 256 supported", p.workers.count),
            None,
        ));
    }
    for (field, v) in [
        ("master.slots", p.master.slots),
        ("workers.slots", p.workers.slots),
    ] {
        if v == Some(0) {
            return Err(issue(
                field,
                "must be at least 1",
                Some("leave it out to use one slot per GPU, or 1"),
            ));
        }
    }
    if p.provider == ProviderKind::OpenStack {
        validate_openstack(p)?;
    }
    validate_root_volumes(p)?;
    if p.network.cidr.is_some() && p.network.existing.is_none() {
        // Also the fallback for who may mount /shared on any provider.
        validate_subnet(p)?;
    }
    validate_access(&p.access)?;
    validate_lifecycle(p)?;
    validate_data(p)?;
    if p.container.ssh_port == 22 || p.container.ssh_port == 0 {
        return Err(issue(
            "container.ssh_port",
            format!("port {} cannot be used", p.container.ssh_port),
            Some("the node's own sshd holds 22; Horovod's default here is 12345"),
        ));
    }
    if p.container.source == ImageSource::BuildRemote
        && !crate::images::RECIPE_IMAGES.contains(&p.container.image.as_str())
    {
        return Err(issue(
            "container.source",
            format!(
                "build-remote builds the images of hvd-cluster's own recipe, not `{}`",
                shown(&p.container.image)
            ),
            Some(&format!(
                "set container.image to one of {}, or use \"transfer\" or \"pull\" for another image",
                crate::images::RECIPE_IMAGES.join(", ")
            )),
        ));
    }
    if p.container.pull != PullFrom::Master && p.container.source != ImageSource::Pull {
        return Err(issue(
            "container.pull",
            "says which nodes pull from a registry, and this image is not pulled",
            Some("set container.source = \"pull\", or remove container.pull"),
        ));
    }
    if let Some(ca) = &p.container.registry_ca {
        if p.container.source != ImageSource::Pull {
            return Err(issue(
                "container.registry_ca",
                "a registry's CA applies only to images pulled from it",
                Some("set container.source = \"pull\", or remove registry_ca"),
            ));
        }
        if ca.is_empty() || ca.len() > 4096 || ca.chars().any(char::is_control) {
            return Err(issue(
                "container.registry_ca",
                format!("`{}` is not a file path", shown(ca)),
                Some("the path of a PEM file, relative to the profile's folder or absolute"),
            ));
        }
    }
    if p.storage.kind == StorageKind::Manila && p.provider == ProviderKind::Local {
        return Err(issue(
            "storage.kind",
            "manila needs the openstack provider",
            Some("use \"master-nfs\""),
        ));
    }
    if p.storage.volume_gb.is_some() && p.storage.kind != StorageKind::MasterNfs {
        return Err(issue(
            "storage.volume_gb",
            "only used with kind = \"master-nfs\"",
            None,
        ));
    }
    if p.storage.volume.is_some() {
        taken_alone(
            p,
            ("volume", "a volume", StorageKind::MasterNfs, "master-nfs"),
            [
                ("volume_gb", p.storage.volume_gb.is_some()),
                ("volume_type", p.storage.volume_type.is_some()),
                ("keep", p.storage.keep),
            ],
        )?;
    }
    if p.storage.share.is_some() {
        taken_alone(
            p,
            ("share", "a share", StorageKind::Manila, "manila"),
            [
                ("size_gb", p.storage.size_gb.is_some()),
                ("share_type", p.storage.share_type.is_some()),
                ("keep", p.storage.keep),
            ],
        )?;
    }
    if p.storage.volume_type.is_some() && p.storage.volume_gb.is_none() {
        return Err(issue(
            "storage.volume_type",
            "the type of /shared's volume, and there is none",
            Some("set storage.volume_gb too, or remove volume_type"),
        ));
    }
    if p.storage.keep && p.storage.volume_gb.is_none() && p.storage.kind != StorageKind::Manila {
        return Err(issue(
            "storage.keep",
            if p.storage.kind == StorageKind::None {
                "there is no /shared to keep (kind = \"none\")"
            } else {
                "there is no volume to keep: /shared is on the master's own disk"
            },
            Some("kind = \"master-nfs\" with storage.volume_gb = SIZE puts /shared on a volume that can be kept; kind = \"manila\" on a share"),
        ));
    }
    // A local node's `image` is a bake on this machine (`hvd-cluster/bake:NAME`): its name's
    // grammar, which a Docker tag takes.
    if p.provider == ProviderKind::Local {
        for (field, image) in [
            ("master.image", p.master.image.as_deref()),
            ("workers.image", p.workers.image.as_deref()),
        ] {
            if let Some(image) = image {
                crate::bake::check_name(image).map_err(|e| {
                    issue(
                        field,
                        e.0,
                        Some("on the local provider, `image` names a bake of this machine (`hvd-cluster bake PROFILE --list`)"),
                    )
                })?;
            }
        }
    }
    if p.provider == ProviderKind::Local
        && (p.storage.keep || p.storage.volume_gb.is_some() || p.storage.volume.is_some())
    {
        return Err(issue(
            if p.storage.keep {
                "storage.keep"
            } else if p.storage.volume.is_some() {
                "storage.volume"
            } else {
                "storage.volume_gb"
            },
            "a Cinder volume needs the openstack provider",
            Some("local nodes keep /shared in a Docker volume on this machine; remove it"),
        ));
    }
    for (field, v) in [
        ("storage.size_gb", p.storage.size_gb),
        ("storage.volume_gb", p.storage.volume_gb),
    ] {
        if v == Some(0) {
            return Err(issue(field, "must be at least 1 GiB", None));
        }
    }
    Ok(())
}

/// `storage.volume` or `storage.share` (`key`, what it names, the kind it goes with): a
/// volume or share that exists has its own size and type and is always kept, so the keys that
/// would say otherwise (`others`, with whether each is set) are refused beside it.
fn taken_alone(
    p: &Profile,
    (key, what, kind, kind_name): (&str, &str, StorageKind, &str),
    others: [(&str, bool); 3],
) -> Result<(), Issue> {
    if let Some((field, _)) = others.into_iter().find(|(_, set)| *set) {
        return Err(issue(
            &format!("storage.{field}"),
            format!(
                "storage.{key} names {what} that exists: it has its size and type, and is always kept"
            ),
            Some("remove one of the two"),
        ));
    }
    if p.storage.kind != kind {
        return Err(issue(
            &format!("storage.{key}"),
            format!("only used with kind = \"{kind_name}\""),
            None,
        ));
    }
    Ok(())
}

/// `root_volume_gb` and `volume_type`: Cinder volumes, so OpenStack only; a size Cinder can
/// make (1 GiB to 16 TiB) and a type only with a volume to give it to.
fn validate_root_volumes(p: &Profile) -> Result<(), Issue> {
    for (role, size, volume_type) in [
        ("master", p.master.root_volume_gb, &p.master.volume_type),
        ("workers", p.workers.root_volume_gb, &p.workers.volume_type),
    ] {
        if p.provider == ProviderKind::Local && (size.is_some() || volume_type.is_some()) {
            let field = if size.is_some() {
                "root_volume_gb"
            } else {
                "volume_type"
            };
            return Err(issue(
                &format!("{role}.{field}"),
                "a Cinder volume needs the openstack provider",
                Some("local nodes keep their files on this machine's disk; remove it"),
            ));
        }
        match size {
            Some(0) => {
                return Err(issue(
                    &format!("{role}.root_volume_gb"),
                    "must be at least 1 GiB",
                    Some("leave it out to use the flavor's root disk"),
                ))
            }
            Some(gb) if gb > MAX_ROOT_VOLUME_GB => {
                return Err(issue(
                    &format!("{role}.root_volume_gb"),
                    format!("{gb} GiB is more than the {MAX_ROOT_VOLUME_GB} GiB supported"),
                    None,
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The largest root volume the profile accepts (16 TiB).
pub const MAX_ROOT_VOLUME_GB: u32 = 16 * 1024;

fn refused(field: &str, e: Refused) -> Issue {
    issue(field, e.0, None)
}

/// Names and ids that only reach the cloud API (as JSON or URL query values): printable, at
/// most 255 characters.
fn check_cloud_names(p: &Profile) -> Result<(), Issue> {
    let fields = [
        ("cloud", p.cloud.as_deref()),
        ("region", p.region.as_deref()),
        ("master.flavor", p.master.flavor.as_deref()),
        ("master.image", p.master.image.as_deref()),
        ("workers.flavor", p.workers.flavor.as_deref()),
        ("workers.image", p.workers.image.as_deref()),
        ("network.existing", p.network.existing.as_deref()),
        (
            "network.external_network",
            p.network.external_network.as_deref(),
        ),
        (
            "floating_ip.pool",
            p.floating_ip.as_ref().map(|f| f.pool.as_str()),
        ),
        ("storage.share_type", p.storage.share_type.as_deref()),
        ("storage.volume_type", p.storage.volume_type.as_deref()),
        ("storage.volume", p.storage.volume.as_deref()),
        ("storage.share", p.storage.share.as_deref()),
        ("master.volume_type", p.master.volume_type.as_deref()),
        ("workers.volume_type", p.workers.volume_type.as_deref()),
    ];
    for (field, value) in fields {
        if let Some(value) = value {
            input::check_cloud_name(value).map_err(|e| refused(field, e))?;
        }
    }
    Ok(())
}

/// The subnet hvd-cluster creates: a real unicast range, with room for every server.
fn validate_subnet(p: &Profile) -> Result<(), Issue> {
    let example = Some("e.g. cidr = \"10.42.0.0/24\"");
    let cidr = p.subnet_cidr();
    let (addr, prefix) = parse_cidr(cidr).map_err(|m| issue("network.cidr", m, example))?;
    if let Some(problem) = input::subnet_range_problem(addr, prefix) {
        return Err(issue(
            "network.cidr",
            format!("`{}` {problem}", shown(cidr)),
            example,
        ));
    }
    // The master, every worker, and one replacement being made while a failed worker goes.
    let servers = 2 + u64::from(p.workers.count);
    let capacity = input::subnet_server_capacity(prefix);
    if capacity < servers {
        return Err(issue(
            "network.cidr",
            format!(
                "`{}` holds {capacity} server address(es) (network, broadcast, gateway and DHCP take 4), but the cluster needs {servers}: the master, {} worker(s) and one replacement",
                shown(cidr),
                p.workers.count
            ),
            Some("use a larger subnet, e.g. a /24"),
        ));
    }
    Ok(())
}

fn validate_openstack(p: &Profile) -> Result<(), Issue> {
    let need = "the openstack provider needs it";
    if p.master.flavor.is_none() {
        return Err(issue(
            "master.flavor",
            format!("missing: {need}"),
            Some("e.g. flavor = \"m1.small\""),
        ));
    }
    if p.master.image.is_none() {
        return Err(issue("master.image", format!("missing: {need}"), None));
    }
    if p.workers.count > 0 && p.workers.flavor.is_none() {
        return Err(issue("workers.flavor", format!("missing: {need}"), None));
    }
    match &p.network.existing {
        Some(_) => {
            if p.network.cidr.is_some() {
                return Err(issue(
                    "network.cidr",
                    "cannot be set with `existing`: the existing network's subnet is used",
                    None,
                ));
            }
            if p.network.external_network.is_some() {
                return Err(issue(
                    "network.external_network",
                    "cannot be set with `existing`: no router is created",
                    None,
                ));
            }
        }
        None => {
            validate_subnet(p)?;
            if p.floating_ip.is_some() && p.network.external_network.is_none() {
                return Err(issue(
                    "network.external_network",
                    "missing: a floating IP needs a router from the created network to an external network",
                    Some("e.g. external_network = \"public\" (often the same as floating_ip.pool)"),
                ));
            }
        }
    }
    for dns in &p.network.dns_nameservers {
        if dns.parse::<std::net::IpAddr>().is_err() {
            return Err(issue(
                "network.dns_nameservers",
                format!("`{}` is not an IP address", shown(dns)),
                None,
            ));
        }
    }
    if p.floating_ip.is_some() && p.access.allowed_cidrs.is_empty() {
        return Err(issue(
            "access.allowed_cidrs",
            "empty: nobody, hvd-cluster included, could reach the master over SSH",
            Some("list the networks you connect from, e.g. allowed_cidrs = [\"198.51.100.0/24\"]"),
        ));
    }
    Ok(())
}

fn validate_access(a: &AccessSpec) -> Result<(), Issue> {
    for cidr in &a.allowed_cidrs {
        let (addr, prefix) =
            parse_cidr(cidr).map_err(|m| issue("access.allowed_cidrs", m, None))?;
        if prefix == 0 && addr.is_unspecified() && !a.open_to_internet {
            return Err(issue(
                "access.allowed_cidrs",
                "0.0.0.0/0 opens SSH (and Jupyter) to the whole internet",
                Some("list your own networks, or set `open_to_internet = true` under [access] if you really mean it"),
            ));
        }
    }
    let (cert, key) = (&a.jupyter_cert, &a.jupyter_key);
    for (field, file) in [("access.jupyter_cert", cert), ("access.jupyter_key", key)] {
        if let Some(file) = file {
            input::check_local_path(file).map_err(|e| refused(field, e))?;
            if a.jupyter != JupyterAccess::Public {
                return Err(issue(
                    field,
                    "a certificate for Jupyter is only used when Jupyter is public",
                    Some("set `jupyter = \"public\"` under [access], or leave it out: the tunnel is SSH's"),
                ));
            }
        }
    }
    match (cert, key) {
        (Some(_), None) => Err(issue(
            "access.jupyter_cert",
            "given without `jupyter_key`",
            Some("name the certificate's private key too: jupyter_key = \"jupyter.key\""),
        )),
        (None, Some(_)) => Err(issue(
            "access.jupyter_key",
            "given without `jupyter_cert`",
            Some("name the key's certificate too: jupyter_cert = \"jupyter.crt\""),
        )),
        _ => Ok(()),
    }
}

/// Parses an IPv4 CIDR, rejecting host bits set (`10.0.0.1/24`).
pub fn parse_cidr(cidr: &str) -> Result<(Ipv4Addr, u8), String> {
    let (addr, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| format!("`{}` is not a CIDR (address/prefix)", shown(cidr)))?;
    let addr: Ipv4Addr = addr.parse().map_err(|_| {
        format!(
            "`{}`: `{}` is not an IPv4 address",
            shown(cidr),
            shown(addr)
        )
    })?;
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| *p <= 32)
        .ok_or_else(|| format!("`{}`: prefix must be 0-32", shown(cidr)))?;
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    if u32::from(addr) & !mask != 0 {
        let network = Ipv4Addr::from(u32::from(addr) & mask);
        return Err(format!(
            "`{}` has host bits set; the network is {network}/{prefix}",
            shown(cidr)
        ));
    }
    Ok((addr, prefix))
}

/// `[lifecycle]`: the idle time by its grammar, the API URLs by theirs, and autostop only
/// where the master can stop its cluster through a cloud's API.
fn validate_lifecycle(p: &Profile) -> Result<(), Issue> {
    let l = &p.lifecycle;
    let on = match &l.autostop {
        Some(v) => input::parse_idle_time(v)
            .map_err(|e| refused("lifecycle.autostop", e))?
            .is_some(),
        None => false,
    };
    for (field, url) in [
        ("lifecycle.identity_url", &l.identity_url),
        ("lifecycle.compute_url", &l.compute_url),
    ] {
        if let Some(url) = url {
            input::check_api_url(url).map_err(|e| refused(field, e))?;
        }
    }
    if on && p.provider != ProviderKind::OpenStack {
        return Err(issue(
            "lifecycle.autostop",
            "autostop needs an OpenStack cloud: the local provider's nodes are containers only this machine can stop",
            Some("use `hvd-cluster stop` for a local cluster"),
        ));
    }
    Ok(())
}

/// `[[data]]`: each destination by the grammar of a path below /shared (the local path is read
/// by `up`, which says when it is missing); no two entries to the same place, and none inside
/// another (a push of one would delete or overwrite the other's files).
fn validate_data(p: &Profile) -> Result<(), Issue> {
    let mut places: Vec<(usize, String)> = Vec::new();
    for (i, d) in p.data.iter().enumerate() {
        let field = format!("data[{i}].shared");
        let source_field = if d.object_store.is_some() {
            format!("data[{i}].object_store")
        } else {
            format!("data[{i}].local")
        };
        let source = d.source().map_err(|e| refused(&source_field, e))?;
        if matches!(source, crate::profile::DataSource::ObjectStore(_))
            && p.provider != ProviderKind::OpenStack
        {
            return Err(issue(
                &source_field,
                "the object store is an OpenStack cloud's: a local cluster has none",
                Some("use `local` for a folder on this machine"),
            ));
        }
        let place = d.shared_path().map_err(|e| {
            // the path at fault: the one given, else the source it is named after
            let at = if d.shared.is_some() {
                field.clone()
            } else {
                source_field.clone()
            };
            refused(&at, e)
        })?;
        let at = place.as_str().to_string();
        if let Some((j, other)) = places.iter().find(|(_, o)| {
            *o == at || at.starts_with(&format!("{o}/")) || o.starts_with(&format!("{at}/"))
        }) {
            return Err(issue(
                &field,
                format!("data[{i}] lands at {at}, in or around data[{j}]'s {other}"),
                Some("give each [[data]] entry a place of its own below /shared"),
            ));
        }
        if d.stage {
            if let Some((j, _)) = places
                .iter()
                .filter(|(j, _)| p.data[*j].stage)
                .find(|(_, o)| o.rsplit('/').next() == at.rsplit('/').next())
            {
                return Err(issue(
                    &field,
                    format!(
                        "data[{i}] and data[{j}] would both be staged as /staged/{}",
                        place.name()
                    ),
                    Some("staged copies are named by the last part of their /shared path: give them different names"),
                ));
            }
        }
        places.push((i, at));
    }
    Ok(())
}
