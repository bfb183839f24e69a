//! The OpenStack services the client speaks to: their names, catalog types, pinned
//! microversions and how a catalog URL becomes an API root. Pure data, no I/O.

/// Nova microversion sent with every compute call. 2.90 is the first with everything we use:
/// tags on create (2.52), embedded flavor with extra_specs in server bodies (2.47),
/// `networks` required (2.37), hostname settable on create and shown to users (2.90).
/// 2026.1 nova supports up to 2.10x; 2.90 keeps us working on clouds back to 2023.1
/// (Antelope, max 2.95). At 2.90 keypairs are still imported only with a public key, which
/// is all we do.
pub const NOVA_MICROVERSION: &str = "2.90";

/// Manila microversion: >= 2.45 for `GET /share-access-rules?share_id=` and access-rule
/// metadata; 2.65 (Wallaby) is old enough for every supported cloud and has the access
/// rule `state` (2.28) and export-location `preferred` (2.14).
pub const MANILA_MICROVERSION: &str = "2.65";

/// Cinder microversion: 3.67 makes the project id in the URL optional, so the catalog's
/// `block-storage` endpoint (`.../v3`, no project) works as well as `volumev3`
/// (`.../v3/{project_id}`); metadata list filters need >= 3.34 anyway.
pub const CINDER_MICROVERSION: &str = "3.67";

/// An OpenStack service the client talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Identity,
    Compute,
    Network,
    Image,
    Share,
    Volume,
    /// Where Nova keeps what each server holds (allocations) and a project's usage.
    Placement,
    /// Swift's API (or Ceph's RADOS Gateway speaking it): the project's containers of objects.
    ObjectStore,
}

impl Service {
    /// The project's name, used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Service::Identity => "keystone",
            Service::Compute => "nova",
            Service::Network => "neutron",
            Service::Image => "glance",
            Service::Share => "manila",
            Service::Volume => "cinder",
            Service::Placement => "placement",
            Service::ObjectStore => "swift",
        }
    }

    /// Catalog service types, preferred first (official type, then aliases).
    pub fn catalog_types(self) -> &'static [&'static str] {
        match self {
            Service::Identity => &["identity"],
            Service::Compute => &["compute"],
            Service::Network => &["network"],
            Service::Image => &["image"],
            Service::Share => &["shared-file-system", "sharev2", "share"],
            Service::Volume => &["block-storage", "volumev3", "volume", "block-store"],
            Service::Placement => &["placement"],
            Service::ObjectStore => &["object-store"],
        }
    }

    /// Microversion headers pinned for this service.
    pub fn microversion_headers(self) -> Vec<(&'static str, String)> {
        match self {
            Service::Compute => vec![
                ("X-OpenStack-Nova-API-Version", NOVA_MICROVERSION.to_owned()),
                (
                    "OpenStack-API-Version",
                    format!("compute {NOVA_MICROVERSION}"),
                ),
            ],
            Service::Share => vec![(
                "X-OpenStack-Manila-API-Version",
                MANILA_MICROVERSION.to_owned(),
            )],
            Service::Volume => vec![(
                "OpenStack-API-Version",
                format!("volume {CINDER_MICROVERSION}"),
            )],
            _ => Vec::new(),
        }
    }

    /// Whether a catalog URL serves an API version we speak: a `volume`/`volumev2` entry
    /// pointing at cinder's removed v1/v2 API is skipped.
    pub fn accepts_endpoint(self, url: &str) -> bool {
        match self {
            Service::Volume => !url.split('/').any(|seg| seg == "v1" || seg == "v2"),
            _ => true,
        }
    }

    /// The API root to put request paths under, from a catalog URL: neutron's and glance's
    /// catalog entries usually lack the version (`http://h:9696/` → `http://h:9696/v2.0`,
    /// `http://h:9292` → `http://h:9292/v2`, keystone's `http://h:5000` → `.../v3`); a manila v1 endpoint is moved to v2.
    pub fn api_root(self, catalog_url: &str) -> String {
        let url = catalog_url.trim_end_matches('/');
        match self {
            Service::Network if !url.ends_with("/v2.0") => format!("{url}/v2.0"),
            Service::Image if !url.ends_with("/v2") => format!("{url}/v2"),
            Service::Identity if !url.ends_with("/v3") => format!("{url}/v3"),
            Service::Share => {
                if let Some(pos) = url.find("/v1/") {
                    format!("{}/v2/{}", &url[..pos], &url[pos + 4..])
                } else if let Some(base) = url.strip_suffix("/v1") {
                    format!("{base}/v2")
                } else {
                    url.to_owned()
                }
            }
            _ => url.to_owned(),
        }
    }
}
