//! The cluster profile: a TOML file parsed into [`Profile`], checked without any network call.
//!
//! Every error names the file, the line, the column and the field, like a compiler, and an
//! unknown key gets the nearest valid key suggested.

use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::input::{self, shown, ClusterName, Refused};

/// Which kind of machine the nodes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Servers on an OpenStack cloud.
    #[default]
    OpenStack,
    /// Privileged containers on this machine's Docker engine.
    Local,
}

impl ProviderKind {
    /// What `validate` calls it.
    pub fn label(self) -> &'static str {
        match self {
            ProviderKind::OpenStack => "OpenStack",
            ProviderKind::Local => "local Docker",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Cluster name: every resource is named `<name>-<role>[-<i>]` and tagged with it; its
    /// folder is `<state root>/<name>`. Checked while parsing (see [`ClusterName`]).
    pub name: ClusterName,
    #[serde(default)]
    pub provider: ProviderKind,
    /// A clouds.yaml entry; when absent the OS_* variables are used, as the `openstack` CLI does.
    #[serde(default)]
    pub cloud: Option<String>,
    /// Overrides the region of the clouds.yaml entry / OS_REGION_NAME.
    #[serde(default)]
    pub region: Option<String>,
    /// Overrides the endpoint interface (public, internal, admin).
    #[serde(default)]
    pub interface: Option<String>,
    /// The image's login user (cloud images: `debian`, `ubuntu`, `rocky`, ...).
    #[serde(default = "default_ssh_user")]
    pub ssh_user: String,
    pub master: MasterSpec,
    pub workers: WorkerSpec,
    #[serde(default)]
    pub network: NetworkSpec,
    #[serde(default)]
    pub floating_ip: Option<FloatingIpSpec>,
    #[serde(default)]
    pub access: AccessSpec,
    #[serde(default)]
    pub storage: StorageSpec,
    #[serde(default)]
    pub container: ContainerSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MasterSpec {
    /// Flavor name (OpenStack only).
    #[serde(default)]
    pub flavor: Option<String>,
    /// Image name (OpenStack only).
    #[serde(default)]
    pub image: Option<String>,
    /// Horovod slots on the master; default: its GPUs, or 1.
    #[serde(default)]
    pub slots: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    pub count: u32,
    #[serde(default)]
    pub flavor: Option<String>,
    /// Defaults to the master's image.
    #[serde(default)]
    pub image: Option<String>,
    /// GPUs per worker; default: read from the flavor's extra specs.
    #[serde(default)]
    pub gpus: Option<u32>,
    /// Horovod slots per worker; default: its GPUs, or 1.
    #[serde(default)]
    pub slots: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// Use this existing network (by name) and create none.
    #[serde(default)]
    pub existing: Option<String>,
    /// CIDR of the subnet to create (default 10.42.0.0/24).
    #[serde(default)]
    pub cidr: Option<String>,
    /// External network the created router gets its gateway on.
    #[serde(default)]
    pub external_network: Option<String>,
    #[serde(default)]
    pub dns_nameservers: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FloatingIpSpec {
    /// The external network the master's floating IP comes from.
    pub pool: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum JupyterAccess {
    /// Reach Jupyter through `hvd-cluster jupyter` (an SSH tunnel); port 8888 stays closed.
    #[default]
    Tunnel,
    /// Open port 8888 on the master to `allowed_cidrs`.
    Public,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AccessSpec {
    /// Who may reach SSH (and Jupyter when public) on the master.
    #[serde(default)]
    pub allowed_cidrs: Vec<String>,
    /// Must be true for `0.0.0.0/0` to be accepted in `allowed_cidrs`.
    #[serde(default)]
    pub open_to_internet: bool,
    #[serde(default)]
    pub jupyter: JupyterAccess,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum StorageKind {
    /// An NFS server on the master (userspace NFS), optionally on a Cinder volume.
    #[default]
    MasterNfs,
    /// An NFS share from Manila, mounted on every node.
    Manila,
    /// No shared directory.
    None,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StorageSpec {
    #[serde(default)]
    pub kind: StorageKind,
    /// Share size (manila) in GiB; default 10.
    #[serde(default)]
    pub size_gb: Option<u32>,
    /// Manila share type; default: the cloud's default type.
    #[serde(default)]
    pub share_type: Option<String>,
    /// master-nfs: put /shared on a Cinder volume of this size attached to the master.
    #[serde(default)]
    pub volume_gb: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ImageSource {
    /// Built on this machine from the Dockerfile template shipped with hvd-cluster, then
    /// transferred like `transfer`.
    #[default]
    Build,
    /// `docker pull` on every node.
    Pull,
    /// An image already on this machine: sent once to the master, fanned out from there to
    /// the workers over the private network (air-gapped clouds; no N registry pulls).
    Transfer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Collective {
    #[default]
    Gloo,
    Mpi,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    #[serde(default = "default_container_image")]
    pub image: String,
    #[serde(default)]
    pub source: ImageSource,
    /// sshd port inside every Horovod container (horovodrun `-p`).
    #[serde(default = "default_ssh_port")]
    pub ssh_port: u16,
    #[serde(default)]
    pub collective: Collective,
}

impl Default for ContainerSpec {
    fn default() -> Self {
        ContainerSpec {
            image: default_container_image(),
            source: ImageSource::default(),
            ssh_port: default_ssh_port(),
            collective: Collective::default(),
        }
    }
}

fn default_ssh_user() -> String {
    "debian".to_string()
}
fn default_container_image() -> String {
    "hvd-cluster/horovod:tf2.12.1-hvd0.28.1".to_string()
}
fn default_ssh_port() -> u16 {
    12345
}

/// The subnet CIDR a created network gets when the profile names none.
pub const DEFAULT_CIDR: &str = "10.42.0.0/24";

impl Profile {
    /// The CIDR of the cluster's subnet when hvd-cluster creates the network.
    pub fn subnet_cidr(&self) -> &str {
        self.network.cidr.as_deref().unwrap_or(DEFAULT_CIDR)
    }

    /// True when hvd-cluster creates network, subnet (and router) itself.
    pub fn creates_network(&self) -> bool {
        self.network.existing.is_none()
    }

    pub fn worker_image(&self) -> Option<&str> {
        self.workers
            .image
            .as_deref()
            .or(self.master.image.as_deref())
    }
}

/// A profile error with its place in the file, printed like a compiler diagnostic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ProfileError {
    pub file: PathBuf,
    /// 1-based line and column, when the place is known.
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// Dotted path of the field, e.g. `workers.count`.
    pub field: String,
    pub message: String,
    pub help: Option<String>,
}

/// Longest message shown for a profile error: serde quotes whole values in its messages.
const MESSAGE_MAX: usize = 240;

impl ProfileError {
    /// Builds an error whose field and message are safe to print: control characters
    /// escaped, a huge key or value cut short.
    fn new(
        file: &Path,
        (line, column): (Option<usize>, Option<usize>),
        field: &str,
        message: &str,
        help: Option<String>,
    ) -> ProfileError {
        ProfileError {
            file: file.to_path_buf(),
            line,
            column,
            field: shown(field),
            message: input::shown_message(message, MESSAGE_MAX),
            help: help.map(|h| input::shown_message(&h, MESSAGE_MAX)),
        }
    }
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The path comes from the command line: it may hold anything a terminal would act on.
        let file = self.file.to_string_lossy();
        write!(f, "{}", input::shown_message(&file, MESSAGE_MAX))?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if self.field.is_empty() {
            write!(f, ": {}", self.message)?;
        } else {
            write!(f, ": `{}`: {}", self.field, self.message)?;
        }
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// Reads and validates a profile file.
pub fn load(path: &Path) -> Result<Profile, ProfileError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ProfileError::new(
            path,
            (None, None),
            "",
            &format!("cannot read the profile: {e}"),
            None,
        )
    })?;
    parse(path, &text)
}

/// Parses and validates profile text; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<Profile, ProfileError> {
    let profile: Profile = toml::from_str(text).map_err(|e| syntax_error(path, text, &e))?;
    validate(&profile).map_err(|issue| {
        ProfileError::new(
            path,
            locate_field(text, &issue.field),
            &issue.field,
            &issue.message,
            issue.help,
        )
    })?;
    Ok(profile)
}

fn syntax_error(path: &Path, text: &str, e: &toml::de::Error) -> ProfileError {
    let place = match e.span() {
        Some(span) => {
            let (l, c) = line_col(text, span.start);
            (Some(l), Some(c))
        }
        None => (None, None),
    };
    let message = e.message().trim().to_string();
    let field = match (e.span(), missing_field(&message)) {
        // serde reports a missing key at the table that lacks it (the whole file for a
        // top-level one): name the missing key, not the first key written there.
        (Some(span), Some(missing)) => match table_header_at(text, span.start) {
            Some(table) => format!("{table}.{missing}"),
            None => missing.to_string(),
        },
        (None, Some(missing)) => missing.to_string(),
        (Some(span), None) => field_at(text, span.start),
        (None, None) => String::new(),
    };
    let mut help = unknown_field_help(&message);
    if help.is_none() && field == "name" && message.contains("cannot be a cluster name") {
        help = Some(input::CLUSTER_NAME_RULE.to_string());
    }
    ProfileError::new(path, place, &field, &message, help)
}

/// `x` in serde's "missing field `x`".
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.strip_suffix('`')
}

/// The `[table]` whose header is written on the line holding `offset`, if that line is one.
fn table_header_at(text: &str, offset: usize) -> Option<String> {
    let (line_no, _) = line_col(text, offset);
    let line = text.lines().nth(line_no - 1)?;
    table_header(line.trim())
}

/// For serde's "unknown field `x`, expected one of `a`, `b`" suggests the nearest valid key.
fn unknown_field_help(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let candidates: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let nearest = nearest(unknown, &candidates);
    match nearest {
        Some(best) => Some(format!("did you mean `{best}`?")),
        None if !candidates.is_empty() => {
            Some(format!("valid keys here: {}", candidates.join(", ")))
        }
        None => None,
    }
}

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    // Edit distance costs length × length: a huge word is no typo, and must not take seconds.
    if word.len() > 128 {
        return None;
    }
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The dotted key path at a byte offset: the enclosing `[table]` plus the key on that line.
fn field_at(text: &str, offset: usize) -> String {
    let (line_no, _) = line_col(text, offset);
    let mut table = String::new();
    let mut key = String::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if i + 1 > line_no {
            break;
        }
        if let Some(header) = table_header(trimmed) {
            table = header;
            key.clear();
        } else if i + 1 == line_no {
            if let Some((k, _)) = trimmed.split_once('=') {
                key = k.trim().trim_matches('"').to_string();
            }
        }
    }
    match (table.is_empty(), key.is_empty()) {
        (true, _) => key,
        (false, true) => table,
        (false, false) => format!("{table}.{key}"),
    }
}

fn table_header(trimmed: &str) -> Option<String> {
    let inner = trimmed.strip_prefix('[')?.split(']').next()?;
    Some(inner.trim_matches('[').trim().to_string())
}

/// The profile text with `[workers] count` set to `n`, everything else (comments included)
/// untouched; `None` when the text has no such line to edit.
pub fn with_worker_count(text: &str, n: u32) -> Option<String> {
    let (line, _) = locate_field(text, "workers.count");
    let line = line?;
    let mut out = String::with_capacity(text.len());
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            let (key, rest) = l.split_once('=')?;
            let comment = rest
                .find('#')
                .map(|at| format!("  {}", rest[at..].trim_end()))
                .unwrap_or_default();
            let newline = if l.ends_with('\n') { "\n" } else { "" };
            out.push_str(&format!("{}= {n}{comment}{newline}", key));
        } else {
            out.push_str(l);
        }
    }
    Some(out)
}

/// Finds the line and column where a dotted field (`workers.count`) is written.
fn locate_field(text: &str, field: &str) -> (Option<usize>, Option<usize>) {
    let (table, key) = match field.rsplit_once('.') {
        Some((t, k)) => (t, k),
        None => ("", field),
    };
    let mut current = String::new();
    let mut table_line = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(header) = table_header(trimmed) {
            current = header;
            if current == field {
                table_line = Some((i + 1, line.len() - trimmed.len() + 1));
            }
            continue;
        }
        if current != table {
            continue;
        }
        if let Some((k, _)) = trimmed.split_once('=') {
            if k.trim().trim_matches('"') == key {
                return (Some(i + 1), Some(line.len() - trimmed.len() + 1));
            }
        }
    }
    match table_line {
        Some((l, c)) => (Some(l), Some(c)),
        None => (None, None),
    }
}

/// A semantic problem found after parsing, before its place in the file is looked up.
#[derive(Debug)]
struct Issue {
    field: String,
    message: String,
    help: Option<String>,
}

fn issue(field: &str, message: impl Into<String>, help: Option<&str>) -> Issue {
    Issue {
        field: field.to_string(),
        message: message.into(),
        help: help.map(str::to_string),
    }
}

fn validate(p: &Profile) -> Result<(), Issue> {
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
    if p.network.cidr.is_some() && p.network.existing.is_none() {
        // Also the fallback for who may mount /shared on any provider.
        validate_subnet(p)?;
    }
    validate_access(&p.access)?;
    if p.container.ssh_port == 22 || p.container.ssh_port == 0 {
        return Err(issue(
            "container.ssh_port",
            format!("port {} cannot be used", p.container.ssh_port),
            Some("the node's own sshd holds 22; Horovod's default here is 12345"),
        ));
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
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "demo"
cloud = "local-user"

[master]
flavor = "m1.small"
image = "debian-12-genericcloud-amd64"

[workers]
count = 3
flavor = "g1.a100"

[network]
cidr = "10.42.0.0/24"
external_network = "public"

[floating_ip]
pool = "public"

[access]
allowed_cidrs = ["203.0.113.0/24"]

[storage]
kind = "manila"
size_gb = 10
"#;

    fn parse_str(text: &str) -> Result<Profile, ProfileError> {
        parse(Path::new("p.toml"), text)
    }

    #[test]
    fn good_profile_parses_with_defaults() {
        let p = parse_str(GOOD).unwrap();
        assert_eq!(p.name, "demo");
        assert_eq!(p.provider, ProviderKind::OpenStack);
        assert_eq!(p.workers.count, 3);
        assert_eq!(p.worker_image(), Some("debian-12-genericcloud-amd64"));
        assert_eq!(p.ssh_user, "debian");
        assert_eq!(p.container.ssh_port, 12345);
        assert_eq!(p.storage.kind, StorageKind::Manila);
        assert_eq!(p.access.jupyter, JupyterAccess::Tunnel);
        assert!(p.creates_network());
    }

    #[test]
    fn unknown_key_names_line_field_and_suggestion() {
        let text = GOOD.replace("flavor = \"g1.a100\"", "flavour = \"g1.a100\"");
        let e = parse_str(&text).unwrap_err();
        assert_eq!(e.line, Some(11), "{e}");
        assert_eq!(e.field, "workers.flavour");
        assert_eq!(e.help.as_deref(), Some("did you mean `flavor`?"));
        let shown = e.to_string();
        assert!(
            shown.starts_with("p.toml:11:1: `workers.flavour`: unknown field"),
            "{shown}"
        );
    }

    #[test]
    fn unknown_top_level_table_is_suggested() {
        let text = GOOD.replace("[floating_ip]", "[floatingip]");
        let e = parse_str(&text).unwrap_err();
        assert_eq!(
            e.help.as_deref(),
            Some("did you mean `floating_ip`?"),
            "{e}"
        );
    }

    #[test]
    fn wrong_type_points_at_the_value() {
        let text = GOOD.replace("count = 3", "count = \"three\"");
        let e = parse_str(&text).unwrap_err();
        assert_eq!(e.line, Some(10));
        assert_eq!(e.field, "workers.count");
        assert!(e.message.contains("invalid type"), "{e}");
    }

    #[test]
    fn open_to_the_world_needs_to_be_explicit() {
        let text = GOOD.replace("203.0.113.0/24", "0.0.0.0/0");
        let e = parse_str(&text).unwrap_err();
        assert_eq!(e.field, "access.allowed_cidrs");
        assert_eq!(e.line, Some(21));
        let ok = text.replace("[access]", "[access]\nopen_to_internet = true");
        assert!(parse_str(&ok).is_ok());
    }

    #[test]
    fn semantic_errors_name_the_field() {
        let cases = [
            (
                GOOD.replace("name = \"demo\"", "name = \"Demo_1\""),
                "name",
                Some(2),
            ),
            (
                GOOD.replace("10.42.0.0/24", "10.42.0.1/24"),
                "network.cidr",
                Some(14),
            ),
            (
                GOOD.replace("flavor = \"m1.small\"\n", ""),
                "master.flavor",
                None,
            ),
            (
                GOOD.replace("external_network = \"public\"\n", ""),
                "network.external_network",
                None,
            ),
            (
                GOOD.replace("allowed_cidrs = [\"203.0.113.0/24\"]", "allowed_cidrs = []"),
                "access.allowed_cidrs",
                Some(21),
            ),
            (
                GOOD.replace(
                    "cidr = \"10.42.0.0/24\"",
                    "existing = \"net\"\ncidr = \"10.0.0.0/8\"",
                ),
                "network.cidr",
                Some(15),
            ),
        ];
        for (text, field, line) in cases {
            let e = parse_str(&text).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert_eq!(e.line, line, "{e}");
        }
    }

    #[test]
    fn missing_table_or_key_is_named_with_its_place() {
        let e = parse_str(&GOOD.replace("[master]", "[unused_master]")).unwrap_err();
        assert!(e.field.starts_with("unused_master"), "{e}");
        let text = "name = \"x\"\nprovider = \"local\"\n[workers]\ncount = 1\n";
        let e = parse_str(text).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.line, e.column),
            ("master", Some(1), Some(1)),
            "{e}"
        );
        let text = "name = \"x\"\nprovider = \"local\"\n[master]\n\n[workers]\nslots = 1\n";
        let e = parse_str(text).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.line),
            ("workers.count", Some(5)),
            "{e}"
        );
    }

    #[test]
    fn shell_bearing_values_are_refused_with_their_field() {
        let local = "name = \"x\"\nprovider = \"local\"\n[master]\n[workers]\ncount = 2\n";
        let cases = [
            ("name", "name = \"x\"", "name = \"$(touch /tmp/x)\""),
            ("name", "name = \"x\"", "name = \"..\""),
            ("name", "name = \"x\"", "name = \"a/../b\""),
            ("ssh_user", "[master]", "ssh_user = \"root;id\"\n[master]"),
            (
                "ssh_user",
                "[master]",
                "ssh_user = \"-oProxyCommand=id\"\n[master]",
            ),
            ("interface", "[master]", "interface = \"publik\"\n[master]"),
            (
                "container.image",
                "count = 2",
                "count = 2\n[container]\nimage = \"img; touch /tmp/x\"",
            ),
            (
                "container.image",
                "count = 2",
                "count = 2\n[container]\nimage = \"--privileged\"",
            ),
            (
                "container.image",
                "count = 2",
                "count = 2\n[container]\nimage = \"img:{{ x }}\"",
            ),
            (
                "container.image",
                "count = 2",
                "count = 2\n[container]\nimage = \"$(id)\"",
            ),
            (
                "network.cidr",
                "count = 2",
                "count = 2\n[network]\ncidr = \"0.0.0.0/0\"",
            ),
            (
                "network.cidr",
                "count = 2",
                "count = 2\n[network]\ncidr = \"10.0.0.0/30\"",
            ),
            (
                "network.cidr",
                "count = 2",
                "count = 2\n[network]\ncidr = \"127.0.0.0/24\"",
            ),
        ];
        for (field, from, to) in cases {
            let e = parse_str(&local.replace(from, to)).unwrap_err();
            assert_eq!(e.field, field, "{to}: {e}");
            assert!(e.line.is_some() && e.column.is_some(), "{to}: {e}");
        }
        // A subnet just big enough: 2 workers + master + a replacement in a /29 (8 - 4).
        let ok = local.replace("count = 2", "count = 2\n[network]\ncidr = \"10.0.0.0/29\"");
        assert!(parse_str(&ok).is_ok());
        let openstack_small = GOOD.replace("10.42.0.0/24", "10.42.0.0/29");
        assert_eq!(
            parse_str(&openstack_small).unwrap_err().field,
            "network.cidr"
        );
    }

    #[test]
    fn huge_and_control_values_come_back_short_and_escaped() {
        let huge = format!("a{}", "b".repeat(5 * 1024 * 1024));
        for text in [
            GOOD.replace("name = \"demo\"", &format!("name = \"{huge}\"")),
            GOOD.replace("count = 3", &format!("count = \"{huge}\"")),
            GOOD.replace("count = 3", &format!("count = 3\n{huge} = 1")),
            GOOD.replace("name = \"demo\"", "name = \"a\\nb\\u001b[31m\""),
        ] {
            let shown = parse_str(&text).unwrap_err().to_string();
            assert!(shown.len() < 700, "{} bytes", shown.len());
            assert!(!shown.contains('\u{1b}'), "{shown:?}");
            assert_eq!(
                shown.lines().count(),
                shown.matches("help:").count() + 1,
                "{shown:?}"
            );
        }
    }

    #[test]
    fn local_profile_needs_no_flavor() {
        let text = "name = \"local\"\nprovider = \"local\"\n[master]\n[workers]\ncount = 2\n";
        let p = parse_str(text).unwrap();
        assert_eq!(p.provider, ProviderKind::Local);
        assert_eq!(p.storage.kind, StorageKind::MasterNfs);
    }

    #[test]
    fn syntax_error_has_a_place() {
        let e = parse_str("name = \"x\"\n[master\n").unwrap_err();
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn worker_count_is_edited_in_place() {
        let text = "name = \"x\"\n[master]\n[workers]\ncount = 2   # two\nflavor = \"f\"\n";
        let edited = with_worker_count(text, 5).unwrap();
        assert_eq!(
            edited,
            "name = \"x\"\n[master]\n[workers]\ncount = 5  # two\nflavor = \"f\"\n"
        );
        assert!(with_worker_count("name = \"x\"\n", 1).is_none());
    }

    #[test]
    fn cidr_parsing() {
        assert!(parse_cidr("10.0.0.0/8").is_ok());
        assert!(parse_cidr("10.0.0.0").is_err());
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("300.0.0.0/8").is_err());
        assert_eq!(
            parse_cidr("10.0.0.5/24").unwrap_err(),
            "`10.0.0.5/24` has host bits set; the network is 10.0.0.0/24"
        );
    }

    #[test]
    fn nearest_ignores_far_words() {
        assert_eq!(nearest("flavour", &["flavor", "image"]), Some("flavor"));
        assert_eq!(nearest("zzzzzz", &["flavor", "image"]), None);
    }
}
