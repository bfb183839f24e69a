//! Untrusted input: the validated cluster name, the grammars other values are checked by, and
//! how any value is shown back to the user (shortened, control characters escaped).
//!
//! Pure: no I/O. Everything a user, a profile or a cloud hands us is checked here before it
//! can reach a file path, a shell, a template or a URL.

mod cpu_share;
mod idle_time;
pub mod paths;
mod ssh_wait;

pub use cpu_share::CpuShare;
pub use idle_time::parse_idle_time;
pub use ssh_wait::{parse_ssh_wait, ssh_wait_from, SSH_WAIT_VAR};

use std::fmt;
use std::net::Ipv4Addr;

/// Most characters of a value shown in a message; the rest becomes `…`.
pub const SHOWN_CHARS: usize = 60;

/// A value as it may appear in a message: at most [`SHOWN_CHARS`] characters, control
/// characters, terminal escapes and invisible characters escaped (`\n`, `\u{1b}`), and the
/// full size said when it was cut, so a 5 MB value comes back as one short line.
pub fn shown(value: &str) -> String {
    let mut out = String::new();
    let mut width = 0;
    for c in value.chars() {
        let piece = escape_char(c);
        width += piece.chars().count();
        if width > SHOWN_CHARS {
            out.push_str(&format!("… ({} bytes)", value.len()));
            return out;
        }
        out.push_str(&piece);
    }
    out
}

/// A whole message (which may quote values we did not shorten, like serde's) made safe to
/// print: control characters escaped, and cut in the middle when longer than `max` chars so
/// its end ("expected u32") stays readable.
pub fn shown_message(message: &str, max: usize) -> String {
    let escaped: String = message.chars().map(escape_char).collect();
    let count = escaped.chars().count();
    if count <= max {
        return escaped;
    }
    let tail_len = max / 4;
    let head: String = escaped.chars().take(max - tail_len).collect();
    let tail: String = escaped.chars().skip(count - tail_len).collect();
    format!("{head}…{tail}")
}

/// One character, escaped when printing it raw could hide or fake text on a terminal.
fn escape_char(c: char) -> String {
    match c {
        // Plain quotes and backslashes read fine in messages; escape_debug would add noise.
        '\'' | '"' | '\\' => c.to_string(),
        _ => c.escape_debug().collect(),
    }
}

/// The longest cluster name. Resource names are `<name>-<role>[-<i>]`; the longest that is
/// also a host name is `<name>-worker-<u32>` (8 + 10 more characters), which must fit a
/// 63-character host name label; the tag `hvd-cluster:<name>` must fit the 60 characters
/// Nova and Neutron allow for a tag.
pub const CLUSTER_NAME_MAX: usize = 40;

/// A cluster name that is safe as a folder name, a host name prefix, a tag and a URL segment:
/// 1-40 lowercase ASCII letters, digits and dashes, starting with a letter, not ending with a
/// dash. So it is never empty, `.`, `..`, a path, an option (`-x`) or shell text.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct ClusterName(String);

/// Why a value is refused, already worded for the user (the value itself shortened).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// What a valid cluster name looks like, for help lines.
pub const CLUSTER_NAME_RULE: &str = "use 1-40 lowercase letters, digits and dashes, starting with a letter and not ending with a dash (it becomes part of folder, host and resource names)";

impl ClusterName {
    pub fn parse(value: &str) -> Result<ClusterName, Refused> {
        let refuse = |why: &str| {
            Err(Refused(format!(
                "`{}` cannot be a cluster name: {why}",
                shown(value)
            )))
        };
        if value.is_empty() {
            return refuse("it is empty");
        }
        if value.chars().count() > CLUSTER_NAME_MAX {
            return refuse(&format!("longer than {CLUSTER_NAME_MAX} characters"));
        }
        if !value.starts_with(|c: char| c.is_ascii_lowercase()) {
            return refuse("it must start with a lowercase letter");
        }
        if let Some(bad) = value
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return refuse(&format!("`{}` is not allowed", shown(&bad.to_string())));
        }
        if value.ends_with('-') {
            return refuse("it must not end with a dash");
        }
        Ok(ClusterName(value.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The same grammar as [`ClusterName::parse`], for the profile's JSON Schema (`name`).
pub const CLUSTER_NAME_PATTERN: &str = "^[a-z]([a-z0-9-]*[a-z0-9])?$";

impl schemars::JsonSchema for ClusterName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ClusterName".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "minLength": 1,
            "maxLength": CLUSTER_NAME_MAX,
            "pattern": CLUSTER_NAME_PATTERN,
            "description": "1-40 lowercase letters, digits and dashes, starting with a letter and not ending with a dash: every resource is named <name>-<role>[-<i>] and tagged with it",
        })
    }
}

impl TryFrom<String> for ClusterName {
    type Error = Refused;
    fn try_from(value: String) -> Result<Self, Refused> {
        ClusterName::parse(&value)
    }
}

impl From<ClusterName> for String {
    fn from(name: ClusterName) -> String {
        name.0
    }
}

impl std::ops::Deref for ClusterName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for ClusterName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<std::path::Path> for ClusterName {
    fn as_ref(&self) -> &std::path::Path {
        std::path::Path::new(&self.0)
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for ClusterName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ClusterName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// A login name on the nodes (`ssh_user`): what Debian's `adduser` accepts by default,
/// at most 32 characters. It reaches ssh_config and `user@host` on the master.
pub fn check_login_name(value: &str) -> Result<(), Refused> {
    let ok = !value.is_empty()
        && value.len() <= 32
        && value.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(Refused(format!(
            "`{}` is not a valid login name: use 1-32 lowercase letters, digits, `_` and `-`, starting with a letter or `_`",
            shown(value)
        )))
    }
}

/// A host name label (RFC 1123): 1-63 lowercase letters, digits and dashes, not starting or
/// ending with a dash. Every node name is one (`<cluster>-worker-<n>`); it reaches ssh_config
/// `Host` lines, the hostfile and the elastic discovery file, where nothing else may pass.
pub fn check_host_label(value: &str) -> Result<(), Refused> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && !value.starts_with('-')
        && !value.ends_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(Refused(format!(
            "`{}` is not a host name (1-63 lowercase letters, digits and dashes)",
            shown(value)
        )))
    }
}

/// A network interface name as Linux allows it (at most 15 bytes, no `/`, `:`, whitespace),
/// narrowed to the characters real ones use. It reaches `ip ... dev IFACE` and horovodrun.
pub fn check_interface_name(value: &str) -> Result<(), Refused> {
    let ok = !value.is_empty()
        && value.len() <= 15
        && !value.starts_with('-')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
        && value != "."
        && value != "..";
    if ok {
        Ok(())
    } else {
        Err(Refused(format!(
            "`{}` is not a network interface name",
            shown(value)
        )))
    }
}

/// An IPv4 or IPv6 network in CIDR notation (`10.42.0.0/24`), as it is written into an NFS
/// export line (`/etc/exports`, nfs-ganesha's `Clients`): nothing else may reach those files.
pub fn check_cidr(value: &str) -> Result<(), Refused> {
    let refused = || {
        Refused(format!(
            "`{}` is not a network in CIDR notation",
            shown(value)
        ))
    };
    let (addr, len) = value.split_once('/').ok_or_else(refused)?;
    let addr: std::net::IpAddr = addr.parse().map_err(|_| refused())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    match len.parse::<u8>() {
        Ok(l) if l <= max && !len.starts_with('+') => Ok(()),
        _ => Err(refused()),
    }
}

/// An NFS export location as Manila reports it (`10.0.0.5:/shares/share-1a2b`,
/// `[fd00::5]:/path`, `nfs.example.org:/vol/x`): a host name or address, `:`, an absolute path
/// of printable characters without whitespace, quotes, backslashes or `#`. It reaches
/// /etc/fstab (whitespace-separated fields) and `mount`.
pub fn check_nfs_export(value: &str) -> Result<(), Refused> {
    let refused = || {
        Refused(format!(
            "`{}` is not an NFS export location (host:/path)",
            shown(value)
        ))
    };
    let (host, path) = if let Some(rest) = value.strip_prefix('[') {
        let (v6, path) = rest.split_once("]:").ok_or_else(refused)?;
        v6.parse::<std::net::Ipv6Addr>().map_err(|_| refused())?;
        (v6, path)
    } else {
        let (host, path) = value.split_once(':').ok_or_else(refused)?;
        let is_name = !host.is_empty()
            && host.len() <= 253
            && host
                .split('.')
                .all(|l| check_host_label(&l.to_ascii_lowercase()).is_ok());
        if host.parse::<std::net::Ipv4Addr>().is_err() && !is_name {
            return Err(refused());
        }
        (host, path)
    };
    let path_ok = path.starts_with('/')
        && path.len() <= 1024
        && path
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '\'' | '"' | '\\' | '#' | '`' | '$'));
    if host.is_empty() || !path_ok {
        return Err(refused());
    }
    Ok(())
}

/// A name or id handed to the cloud API (flavor, image, network, pool, share type, region,
/// clouds.yaml entry): any printable text, at most 255 characters (Nova's and Neutron's limit).
pub fn check_cloud_name(value: &str) -> Result<(), Refused> {
    if value.is_empty() {
        return Err(Refused("empty".into()));
    }
    if value.chars().count() > 255 {
        return Err(Refused(format!(
            "`{}` is longer than 255 characters",
            shown(value)
        )));
    }
    if value.chars().any(|c| c.is_control()) {
        return Err(Refused(format!(
            "`{}` holds control characters",
            shown(value)
        )));
    }
    Ok(())
}

/// A file on this machine named by the profile (`access.jupyter_cert`): only read here,
/// never sent to a shell, so any path the system takes, but not empty, at most 4096 bytes
/// (PATH_MAX) and without control characters, which no one means in a file name.
pub fn check_local_path(value: &std::path::Path) -> Result<(), Refused> {
    let text = value.to_string_lossy();
    if text.is_empty() {
        return Err(Refused("empty: name a file".into()));
    }
    if value.as_os_str().len() > 4096 {
        return Err(Refused(format!(
            "`{}` is longer than 4096 bytes",
            shown(&text)
        )));
    }
    if text.chars().any(|c| c.is_control()) {
        return Err(Refused(format!(
            "`{}` holds control characters",
            shown(&text)
        )));
    }
    Ok(())
}

/// A Debian mirror for the image builds (`HVD_CLUSTER_APT_MIRROR`): a plain `http(s)://host[:port]/path`
/// with only unreserved characters, since it is written into apt sources and a `sed` replacement.
pub fn check_apt_mirror(value: &str) -> Result<(), Refused> {
    check_plain_url(value, "a Debian mirror URL")
}

/// Where the nodes reach an OpenStack API (`lifecycle.identity_url`, `compute_url`): the same
/// plain `http(s)://host[:port]/path` grammar, as it is written into the master's agent config.
pub fn check_api_url(value: &str) -> Result<(), Refused> {
    check_plain_url(value, "an API URL")
}

fn check_plain_url(value: &str, kind: &str) -> Result<(), Refused> {
    let refused = |why: &str| Err(Refused(format!("`{}` is not {kind}: {why}", shown(value))));
    let Some(rest) = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"))
    else {
        return refused("it must start with http:// or https://");
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    if host.is_empty()
        || host.len() > 253
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        || host.starts_with(['-', '.'])
    {
        return refused("the host may hold only letters, digits, `.` and `-`");
    }
    if let Some(port) = port {
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return refused("the port must be a number from 1 to 65535");
        }
    }
    if value.len() > 200
        || !path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '~' | '-'))
        || path.split('/').any(|seg| seg == "..")
    {
        return refused(
            "the path may hold only letters, digits and `/._~-`, at most 200 characters in all",
        );
    }
    Ok(())
}

/// A container image reference, by Docker's reference grammar:
/// `[host[:port]/]path[:tag][@algorithm:hex]`, path components lowercase alphanumerics
/// joined by `.`, `_`, `__` or dashes, the name at most 255 characters, the tag
/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`. No space, `;`, `$`, quote or leading `-` can pass.
pub fn check_image_reference(value: &str) -> Result<(), Refused> {
    image_reference(value).map_err(|why| {
        Refused(format!(
            "`{}` is not a container image reference: {why}",
            shown(value)
        ))
    })
}

fn image_reference(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("it is empty".into());
    }
    let (rest, digest) = match value.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (value, None),
    };
    if let Some(digest) = digest {
        check_digest(digest)?;
    }
    // A tag follows the last `:` that comes after the last `/` (a `:` before it is a port).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        check_tag(tag)?;
    }
    if name.len() > 255 {
        return Err("the name is longer than 255 characters".into());
    }
    let mut components: Vec<&str> = name.split('/').collect();
    // The first component is a registry host when it looks like one (has `.` or `:`, or is
    // `localhost`) and more follow.
    if components.len() > 1 {
        let first = components[0];
        if first.contains('.') || first.contains(':') || first == "localhost" {
            check_registry(first)?;
            components.remove(0);
        }
    }
    for c in components {
        check_path_component(c)?;
    }
    Ok(())
}

fn check_registry(domain: &str) -> Result<(), String> {
    let bad = || Err(format!("`{}` is not a registry host[:port]", shown(domain)));
    let (host, port) = if let Some(rest) = domain.strip_prefix('[') {
        // [IPv6]:port
        let Some((ip, after)) = rest.split_once(']') else {
            return bad();
        };
        if ip.parse::<std::net::Ipv6Addr>().is_err() {
            return bad();
        }
        match (after, after.strip_prefix(':')) {
            ("", _) => (None, None),
            (_, Some(port)) => (None, Some(port)),
            _ => return bad(),
        }
    } else {
        match domain.split_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(domain), None),
        }
    };
    if let Some(port) = port {
        if port.is_empty() || !port.chars().all(|c| c.is_ascii_digit()) || port.len() > 5 {
            return bad();
        }
    }
    if let Some(host) = host {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if !host.split('.').all(label_ok) {
            return bad();
        }
    }
    Ok(())
}

fn check_path_component(c: &str) -> Result<(), String> {
    let bad = || {
        Err(format!(
            "`{}` is not a valid name component (lowercase letters and digits, joined by `.`, `_`, `__` or `-`)",
            shown(c)
        ))
    };
    let alnum = |ch: char| ch.is_ascii_lowercase() || ch.is_ascii_digit();
    if c.is_empty() || !c.starts_with(alnum) || !c.ends_with(alnum) {
        return bad();
    }
    // Runs of separators between alphanumerics: `.`, `_`, `__`, or any number of `-`.
    let mut separator = String::new();
    for ch in c.chars() {
        if alnum(ch) {
            let ok = separator.is_empty()
                || separator == "."
                || separator == "_"
                || separator == "__"
                || separator.chars().all(|s| s == '-');
            if !ok {
                return bad();
            }
            separator.clear();
        } else if matches!(ch, '.' | '_' | '-') {
            separator.push(ch);
        } else {
            return bad();
        }
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && tag.starts_with(word)
        && tag.chars().all(|c| word(c) || c == '.' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the tag `{}` is not valid (letters, digits, `_`, `.`, `-`; at most 128; not starting with `.` or `-`)",
            shown(tag)
        ))
    }
}

fn check_digest(digest: &str) -> Result<(), String> {
    let bad = || {
        Err(format!(
            "`{}` is not a digest (algorithm:hex)",
            shown(digest)
        ))
    };
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return bad();
    };
    let algorithm_ok = algorithm.split(['+', '.', '-', '_']).all(|part| {
        part.starts_with(|c: char| c.is_ascii_alphabetic())
            && part.chars().all(|c| c.is_ascii_alphanumeric())
    });
    if !algorithm_ok || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return bad();
    }
    Ok(())
}

/// Why an IPv4 network cannot be a cluster subnet: the whole internet, or a range that is
/// not unicast host space (this-network, loopback, link-local, multicast, reserved).
pub fn subnet_range_problem(addr: Ipv4Addr, prefix: u8) -> Option<&'static str> {
    let first = addr.octets()[0];
    if prefix < 8 {
        return Some("is larger than a /8; a cluster subnet this large would overlap other networks (0.0.0.0/0 is the whole internet)");
    }
    if first == 0 {
        return Some("is in 0.0.0.0/8, which means \"this network\"");
    }
    if addr.is_loopback() {
        return Some("is in the loopback range 127.0.0.0/8");
    }
    if addr.is_link_local() {
        return Some("is in the link-local range 169.254.0.0/16");
    }
    if addr.is_multicast() {
        return Some("is in the multicast range 224.0.0.0/4");
    }
    if first >= 240 {
        return Some("is in the reserved range 240.0.0.0/4");
    }
    None
}

/// Addresses a subnet of this prefix gives to servers: all but the network and broadcast
/// addresses, the gateway and the DHCP port Neutron takes.
pub fn subnet_server_capacity(prefix: u8) -> u64 {
    let size = 1u64 << (32 - u32::from(prefix.min(32)));
    size.saturating_sub(4)
}

#[cfg(test)]
mod tests;
