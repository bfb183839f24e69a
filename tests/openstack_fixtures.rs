//! Offline tests of the OpenStack client: config loading, error envelopes, parsers over the
//! recorded API bodies in tests/fixtures/openstack-api/, request bodies, the retry policy,
//! and the whole request path against a scripted local HTTP server.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hvd_cluster::openstack::auth::{self, Catalog};
use hvd_cluster::openstack::compute::{
    ComputeLimits, Flavor, Keypair, PowerState, Server, ServerStatus,
};
use hvd_cluster::openstack::config::{
    AppCredentialRef, AuthMethod, ConfigError, ConfigFile, ConfigFiles, DomainRef, Interface,
    ProjectRef, Secret, UserRef,
};
use hvd_cluster::openstack::error::{self, classify, decode_error_body, ApiError};
use hvd_cluster::openstack::http::{self, Failure, Method, RetryPolicy, Service};
use hvd_cluster::openstack::image::{pick_newest, Image};
use hvd_cluster::openstack::network::{
    Direction, EtherType, FloatingIp, Gateway, NetworkInfo, Port, PortCreate, Remote, Router,
    RouterInterface, RuleCreate, SecurityGroup, SecurityGroupRule, Subnet, SubnetCreate,
};
use hvd_cluster::openstack::share::{AccessRule, ExportLocation, Share, ShareCreate, ShareLimits};
use hvd_cluster::openstack::volume::{Volume, VolumeCreate, VolumeLimits};
use hvd_cluster::openstack::{
    quota_usages_from_json, ClientOptions, CloudConfig, OpenStack, OpenStackError, Query, Request,
    ServerCreate, ServerFilter, ServerNetwork,
};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn fixture_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/openstack-api")
        .join(rel)
}

fn fixture(rel: &str) -> Value {
    let path = fixture_path(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixture_bytes(rel: &str) -> Vec<u8> {
    std::fs::read(fixture_path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn at<T: serde::de::DeserializeOwned>(v: &Value, key: &str) -> T {
    serde_json::from_value(v[key].clone()).unwrap_or_else(|e| panic!("decoding {key}: {e}"))
}

// ---------------------------------------------------------------- config

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn files(clouds: &str, secure: Option<&str>) -> ConfigFiles {
    ConfigFiles {
        clouds: Some(ConfigFile {
            path: PathBuf::from("/cfg/clouds.yaml"),
            contents: clouds.into(),
        }),
        secure: secure.map(|s| ConfigFile {
            path: PathBuf::from("/cfg/secure.yaml"),
            contents: s.into(),
        }),
        searched: vec![PathBuf::from("/cfg/clouds.yaml")],
    }
}

const CLOUDS: &str = r#"
clouds:
  local-admin:
    auth:
      auth_url: http://127.0.0.1:5000/v3/
      username: admin
      password: secret
      project_name: admin
      user_domain_name: Default
      project_domain_id: default
    region_name: RegionOne
    interface: public
    identity_api_version: 3
  local-user:
    auth:
      auth_url: http://127.0.0.1:5000
      username: demo
      project_name: demo
      domain_name: Default
    regions: [RegionOne, RegionTwo]
    verify: false
  appcred:
    auth_type: v3applicationcredential
    auth:
      auth_url: https://keystone.example.org:5000/v3
      application_credential_id: 423f19a4ac1e4f48bbb4180756e6eb6c
      application_credential_secret: rEaqvJka48mpv
    region_name: RegionOne
    cacert: /etc/ssl/ca.pem
  appcred-named:
    auth_type: v3applicationcredential
    auth:
      auth_url: https://keystone.example.org/identity
      application_credential_name: monitoring
      application_credential_secret: rEaqvJka48mpv
      username: alice
      user_domain_id: d1
  numeric:
    auth:
      auth_url: http://k:5000/v2.0
      user_id: 12345
      password: 9876
      project_id: 42
  nopass:
    auth:
      auth_url: http://k:5000/v3
      username: demo
      project_name: demo
  bad-type:
    auth_type: token
    auth:
      auth_url: http://k:5000/v3
  profiled:
    profile: vexxhost
    auth:
      username: demo
"#;

const SECURE: &str = r#"
clouds:
  local-user:
    auth:
      password: s3cr3t-demo
"#;

#[test]
fn clouds_yaml_password_auth() -> TestResult {
    let cfg = CloudConfig::from_sources(Some("local-admin"), &env(&[]), &files(CLOUDS, None))?;
    assert_eq!(cfg.cloud.as_deref(), Some("local-admin"));
    assert_eq!(cfg.auth_url, "http://127.0.0.1:5000/v3");
    assert_eq!(cfg.region.as_deref(), Some("RegionOne"));
    assert_eq!(cfg.interface, Interface::Public);
    assert!(!cfg.insecure);
    assert_eq!(
        cfg.auth,
        AuthMethod::Password {
            user: UserRef::Name {
                name: "admin".into(),
                domain: DomainRef::Name("Default".into())
            },
            password: Secret::new("secret"),
            project: ProjectRef::Name {
                name: "admin".into(),
                domain: DomainRef::Id("default".into())
            },
        }
    );
    assert!(cfg.origin.contains("/cfg/clouds.yaml"), "{}", cfg.origin);
    Ok(())
}

#[test]
fn secure_yaml_is_merged_and_domain_name_is_a_default_for_both() -> TestResult {
    let cfg =
        CloudConfig::from_sources(Some("local-user"), &env(&[]), &files(CLOUDS, Some(SECURE)))?;
    assert_eq!(cfg.auth_url, "http://127.0.0.1:5000/v3");
    assert_eq!(
        cfg.region.as_deref(),
        Some("RegionOne"),
        "first of regions:"
    );
    assert!(cfg.insecure, "verify: false");
    let AuthMethod::Password {
        user,
        password,
        project,
    } = &cfg.auth
    else {
        panic!("expected password auth, got {:?}", cfg.auth);
    };
    assert_eq!(password.expose(), "s3cr3t-demo");
    assert_eq!(
        user,
        &UserRef::Name {
            name: "demo".into(),
            domain: DomainRef::Name("Default".into())
        }
    );
    assert_eq!(
        project,
        &ProjectRef::Name {
            name: "demo".into(),
            domain: DomainRef::Name("Default".into())
        }
    );
    Ok(())
}

#[test]
fn os_cloud_selects_the_cloud_when_no_argument() -> TestResult {
    let cfg =
        CloudConfig::from_sources(None, &env(&[("OS_CLOUD", "appcred")]), &files(CLOUDS, None))?;
    assert_eq!(cfg.cloud.as_deref(), Some("appcred"));
    // the argument wins over OS_CLOUD
    let cfg = CloudConfig::from_sources(
        Some("local-admin"),
        &env(&[("OS_CLOUD", "appcred")]),
        &files(CLOUDS, None),
    )?;
    assert_eq!(cfg.cloud.as_deref(), Some("local-admin"));
    Ok(())
}

#[test]
fn clouds_yaml_application_credential_by_id_and_by_name() -> TestResult {
    let cfg = CloudConfig::from_sources(Some("appcred"), &env(&[]), &files(CLOUDS, None))?;
    assert_eq!(cfg.auth_url, "https://keystone.example.org:5000/v3");
    assert_eq!(cfg.cacert.as_deref(), Some(Path::new("/etc/ssl/ca.pem")));
    assert_eq!(
        cfg.auth,
        AuthMethod::ApplicationCredential {
            credential: AppCredentialRef::Id("423f19a4ac1e4f48bbb4180756e6eb6c".into()),
            secret: Secret::new("rEaqvJka48mpv"),
        }
    );
    // the body is exactly keystone's own sample
    assert_eq!(
        auth::auth_request_body(&cfg.auth),
        fixture("keystone/auth-application-credential-id-request.json")
    );

    let cfg = CloudConfig::from_sources(Some("appcred-named"), &env(&[]), &files(CLOUDS, None))?;
    assert_eq!(cfg.auth_url, "https://keystone.example.org/identity/v3");
    assert_eq!(
        cfg.auth,
        AuthMethod::ApplicationCredential {
            credential: AppCredentialRef::Name {
                name: "monitoring".into(),
                user: UserRef::Name {
                    name: "alice".into(),
                    domain: DomainRef::Id("d1".into())
                },
            },
            secret: Secret::new("rEaqvJka48mpv"),
        }
    );
    Ok(())
}

#[test]
fn app_credential_by_name_with_user_id_matches_keystone_sample() {
    let method = AuthMethod::ApplicationCredential {
        credential: AppCredentialRef::Name {
            name: "monitoring".into(),
            user: UserRef::Id("423f19a4ac1e4f48bbb4180756e6eb6c".into()),
        },
        secret: Secret::new("rEaqvJka48mpv"),
    };
    assert_eq!(
        auth::auth_request_body(&method),
        fixture("keystone/auth-application-credential-name-request.json")
    );
}

#[test]
fn password_body_matches_keystone_sample_plus_project_scope() {
    let method = AuthMethod::Password {
        user: UserRef::Id("423f19a4ac1e4f48bbb4180756e6eb6c".into()),
        password: Secret::new("devstacker"),
        project: ProjectRef::Name {
            name: "demo".into(),
            domain: DomainRef::Id("default".into()),
        },
    };
    let body = auth::auth_request_body(&method);
    let sample = fixture("keystone/auth-password-unscoped-request.json");
    assert_eq!(body["auth"]["identity"], sample["auth"]["identity"]);
    assert_eq!(
        body["auth"]["scope"],
        json!({"project": {"name": "demo", "domain": {"id": "default"}}})
    );
}

#[test]
fn numbers_in_yaml_and_v2_auth_url() -> TestResult {
    let cfg = CloudConfig::from_sources(Some("numeric"), &env(&[]), &files(CLOUDS, None))?;
    assert_eq!(cfg.auth_url, "http://k:5000/v3");
    assert_eq!(
        cfg.auth,
        AuthMethod::Password {
            user: UserRef::Id("12345".into()),
            password: Secret::new("9876"),
            project: ProjectRef::Id("42".into()),
        }
    );
    Ok(())
}

#[test]
fn missing_field_names_the_file_and_the_field() {
    let err = CloudConfig::from_sources(Some("nopass"), &env(&[]), &files(CLOUDS, None)).err();
    let Some(err @ ConfigError::Missing { .. }) = err else {
        panic!("expected Missing, got {err:?}");
    };
    let msg = err.to_string();
    assert!(msg.contains("/cfg/clouds.yaml"), "{msg}");
    assert!(msg.contains("clouds.nopass.auth.password"), "{msg}");
}

#[test]
fn unsupported_auth_type_and_vendor_profile_are_explained() {
    let msg = CloudConfig::from_sources(Some("bad-type"), &env(&[]), &files(CLOUDS, None))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("clouds.bad-type.auth_type") && msg.contains("v3applicationcredential"),
        "{msg}"
    );
    let msg = CloudConfig::from_sources(Some("profiled"), &env(&[]), &files(CLOUDS, None))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("auth_url") && msg.contains("vexxhost"),
        "{msg}"
    );
}

#[test]
fn unknown_cloud_lists_the_defined_ones() {
    let err = CloudConfig::from_sources(Some("nope"), &env(&[]), &files(CLOUDS, None)).err();
    let Some(err @ ConfigError::UnknownCloud { .. }) = err else {
        panic!("expected UnknownCloud, got {err:?}");
    };
    let msg = err.to_string();
    for name in [
        "local-admin",
        "local-user",
        "appcred",
        "\"nope\"",
        "/cfg/clouds.yaml",
    ] {
        assert!(msg.contains(name), "{name} missing from: {msg}");
    }
}

#[test]
fn named_cloud_without_any_clouds_yaml() {
    let none = ConfigFiles {
        searched: vec![
            PathBuf::from("/a/clouds.yaml"),
            PathBuf::from("/b/clouds.yaml"),
        ],
        ..ConfigFiles::default()
    };
    let msg = CloudConfig::from_sources(Some("x"), &env(&[]), &none)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("/a/clouds.yaml") && msg.contains("/b/clouds.yaml"),
        "{msg}"
    );
}

#[test]
fn nothing_selected_says_what_to_do() {
    let msg = CloudConfig::from_sources(None, &env(&[]), &files(CLOUDS, None))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("OS_CLOUD") && msg.contains("local-admin"),
        "{msg}"
    );
}

#[test]
fn os_env_password_auth() -> TestResult {
    let e = env(&[
        ("OS_AUTH_URL", "https://cloud.example.org:5000/v3"),
        ("OS_USERNAME", "alice"),
        ("OS_PASSWORD", "pw"),
        ("OS_TENANT_NAME", "science"),
        ("OS_USER_DOMAIN_NAME", "ldap"),
        ("OS_REGION_NAME", "north"),
        ("OS_ENDPOINT_TYPE", "internalURL"),
        ("OS_INSECURE", "true"),
        ("OS_CACERT", "/ca.pem"),
    ]);
    let cfg = CloudConfig::from_sources(None, &e, &ConfigFiles::default())?;
    assert_eq!(cfg.cloud, None);
    assert_eq!(cfg.region.as_deref(), Some("north"));
    assert_eq!(cfg.interface, Interface::Internal);
    assert!(cfg.insecure);
    assert_eq!(cfg.cacert.as_deref(), Some(Path::new("/ca.pem")));
    assert_eq!(
        cfg.auth,
        AuthMethod::Password {
            user: UserRef::Name {
                name: "alice".into(),
                domain: DomainRef::Name("ldap".into())
            },
            password: Secret::new("pw"),
            // no project domain given: the CLI's default domain id
            project: ProjectRef::Name {
                name: "science".into(),
                domain: DomainRef::Id("default".into())
            },
        }
    );
    // OS_PROJECT_ID wins over names, OS_DEFAULT_DOMAIN replaces "default"
    let e = env(&[
        ("OS_AUTH_URL", "http://k:5000"),
        ("OS_USER_ID", "u1"),
        ("OS_PASSWORD", "pw"),
        ("OS_PROJECT_ID", "p1"),
        ("OS_PROJECT_NAME", "ignored"),
        ("OS_INTERFACE", "admin"),
    ]);
    let cfg = CloudConfig::from_sources(None, &e, &ConfigFiles::default())?;
    assert_eq!(cfg.interface, Interface::Admin);
    assert_eq!(
        cfg.auth,
        AuthMethod::Password {
            user: UserRef::Id("u1".into()),
            password: Secret::new("pw"),
            project: ProjectRef::Id("p1".into()),
        }
    );
    let e = env(&[
        ("OS_AUTH_URL", "http://k:5000"),
        ("OS_USERNAME", "u"),
        ("OS_PASSWORD", "pw"),
        ("OS_PROJECT_NAME", "p"),
        ("OS_DEFAULT_DOMAIN", "dom9"),
    ]);
    let cfg = CloudConfig::from_sources(None, &e, &ConfigFiles::default())?;
    let AuthMethod::Password { user, .. } = cfg.auth else {
        panic!("password expected");
    };
    assert_eq!(
        user,
        UserRef::Name {
            name: "u".into(),
            domain: DomainRef::Id("dom9".into())
        }
    );
    Ok(())
}

#[test]
fn os_env_application_credential() -> TestResult {
    let e = env(&[
        ("OS_AUTH_TYPE", "v3applicationcredential"),
        ("OS_AUTH_URL", "http://k:5000/v3"),
        ("OS_APPLICATION_CREDENTIAL_ID", "ac1"),
        ("OS_APPLICATION_CREDENTIAL_SECRET", "shh"),
    ]);
    let cfg = CloudConfig::from_sources(None, &e, &ConfigFiles::default())?;
    assert_eq!(
        cfg.auth,
        AuthMethod::ApplicationCredential {
            credential: AppCredentialRef::Id("ac1".into()),
            secret: Secret::new("shh"),
        }
    );
    // without OS_AUTH_TYPE the secret alone selects it too
    let e = env(&[
        ("OS_AUTH_URL", "http://k:5000/v3"),
        ("OS_APPLICATION_CREDENTIAL_NAME", "ci"),
        ("OS_APPLICATION_CREDENTIAL_SECRET", "shh"),
        ("OS_USER_ID", "u7"),
    ]);
    let cfg = CloudConfig::from_sources(None, &e, &ConfigFiles::default())?;
    assert_eq!(
        cfg.auth,
        AuthMethod::ApplicationCredential {
            credential: AppCredentialRef::Name {
                name: "ci".into(),
                user: UserRef::Id("u7".into())
            },
            secret: Secret::new("shh"),
        }
    );
    Ok(())
}

#[test]
fn os_env_missing_fields_name_the_variables() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("OS_AUTH_URL", "http://k/v3"),
                ("OS_USERNAME", "u"),
                ("OS_PROJECT_NAME", "p"),
            ],
            "OS_PASSWORD",
        ),
        (
            &[
                ("OS_AUTH_URL", "http://k/v3"),
                ("OS_PASSWORD", "x"),
                ("OS_PROJECT_NAME", "p"),
            ],
            "OS_USERNAME or OS_USER_ID",
        ),
        (
            &[
                ("OS_AUTH_URL", "http://k/v3"),
                ("OS_USERNAME", "u"),
                ("OS_PASSWORD", "x"),
            ],
            "OS_PROJECT_NAME or OS_TENANT_NAME",
        ),
        (
            &[
                ("OS_AUTH_URL", "http://k/v3"),
                ("OS_AUTH_TYPE", "v3applicationcredential"),
                ("OS_APPLICATION_CREDENTIAL_ID", "a"),
            ],
            "OS_APPLICATION_CREDENTIAL_SECRET",
        ),
        (
            &[("OS_AUTH_URL", "not a url"), ("OS_USERNAME", "u")],
            "OS_AUTH_URL",
        ),
        (
            &[
                ("OS_AUTH_URL", "http://k/v3"),
                ("OS_USERNAME", "u"),
                ("OS_PASSWORD", "x"),
                ("OS_PROJECT_ID", "p"),
                ("OS_INTERFACE", "sideways"),
            ],
            "OS_INTERFACE",
        ),
    ];
    for (vars, field) in cases {
        let msg = CloudConfig::from_sources(None, &env(vars), &ConfigFiles::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            msg.contains(field) && msg.contains("OS_* environment"),
            "{field}: {msg}"
        );
        assert!(!msg.contains("x\""), "a secret leaked: {msg}");
    }
}

#[test]
fn secrets_never_print() -> TestResult {
    let s = Secret::new("hunter2");
    assert_eq!(format!("{s}"), "***");
    assert_eq!(format!("{s:?}"), "***");
    let cfg =
        CloudConfig::from_sources(Some("local-user"), &env(&[]), &files(CLOUDS, Some(SECURE)))?;
    let dbg = format!("{cfg:?}");
    assert!(!dbg.contains("s3cr3t-demo"), "{dbg}");
    assert!(dbg.contains("***"));
    let cfg = CloudConfig::from_sources(Some("appcred"), &env(&[]), &files(CLOUDS, None))?;
    assert!(!format!("{cfg:?}").contains("rEaqvJka48mpv"));
    Ok(())
}

#[test]
fn search_paths_follow_the_cli_order() {
    let e = env(&[
        ("OS_CLIENT_CONFIG_FILE", "/x/my-clouds.yaml"),
        ("HOME", "/home/u"),
        ("OS_CLIENT_SECURE_FILE", "/x/my-secure.yaml"),
    ]);
    let (clouds, secure) = ConfigFiles::search_paths(&e, Path::new("/work"));
    let c: Vec<String> = clouds.iter().map(|p| p.display().to_string()).collect();
    assert_eq!(c[0], "/x/my-clouds.yaml");
    assert_eq!(c[1], "/work/clouds.yaml");
    let home = c
        .iter()
        .position(|p| p == "/home/u/.config/openstack/clouds.yaml");
    let etc = c.iter().position(|p| p == "/etc/openstack/clouds.yaml");
    assert!(matches!((home, etc), (Some(h), Some(e)) if h < e), "{c:?}");
    assert_eq!(secure[0], PathBuf::from("/x/my-secure.yaml"));
    let (clouds, _) = ConfigFiles::search_paths(
        &env(&[("XDG_CONFIG_HOME", "/xdg"), ("HOME", "/h")]),
        Path::new("/w"),
    );
    assert!(clouds.contains(&PathBuf::from("/xdg/openstack/clouds.yaml")));
    assert!(!clouds.contains(&PathBuf::from("/h/.config/openstack/clouds.yaml")));
}

#[test]
fn discover_reads_the_first_existing_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("clouds.yaml"), CLOUDS)?;
    std::fs::write(dir.path().join("secure.yaml"), SECURE)?;
    let files = ConfigFiles::discover(&env(&[]), dir.path())?;
    assert_eq!(
        files.clouds.as_ref().map(|f| f.path.clone()),
        Some(dir.path().join("clouds.yaml"))
    );
    let cfg = CloudConfig::from_sources(Some("local-user"), &env(&[]), &files)?;
    assert!(
        matches!(&cfg.auth, AuthMethod::Password { password, .. } if password.expose() == "s3cr3t-demo")
    );
    // OS_CLIENT_CONFIG_FILE comes first
    let other = dir.path().join("other.yaml");
    std::fs::write(&other, "clouds: {only: {auth: {auth_url: 'http://o/v3'}}}")?;
    let e = env(&[("OS_CLIENT_CONFIG_FILE", other.to_str().unwrap_or_default())]);
    let files = ConfigFiles::discover(&e, dir.path())?;
    assert_eq!(files.clouds.map(|f| f.path), Some(other));
    Ok(())
}

#[test]
fn invalid_yaml_names_the_file() {
    let msg = CloudConfig::from_sources(Some("a"), &env(&[]), &files("clouds: [unclosed", None))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("/cfg/clouds.yaml") && msg.contains("YAML"),
        "{msg}"
    );
}

// ---------------------------------------------------------------- keystone

#[test]
fn token_and_catalog_from_project_scoped_response() -> TestResult {
    let body = fixture_bytes("keystone/auth-password-project-scoped-response.json");
    let token = auth::parse_token("tok", &body)?;
    assert_eq!(token.project_id, "a6944d763bf64ee6a275f1263fae0352");
    assert_eq!(token.project_name.as_deref(), Some("admin"));
    assert_eq!(
        token.expires_at.to_rfc3339(),
        "2015-11-07T02:58:43.578887+00:00"
    );
    let c = &token.catalog;
    let public = Interface::Public;
    assert_eq!(
        c.endpoint(Service::Compute, Some("RegionOne"), public)?,
        "http://23.253.248.171:8774/v2.1/a6944d763bf64ee6a275f1263fae0352"
    );
    assert_eq!(
        c.endpoint(Service::Network, None, public)?,
        "http://23.253.248.171:9696/v2.0"
    );
    assert_eq!(
        c.endpoint(Service::Image, None, Interface::Internal)?,
        "http://23.253.248.171:9292/v2"
    );
    // only volumev2 and volume (v1) are there: cinder's removed APIs are not used
    let err = c
        .endpoint(Service::Volume, None, public)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("no endpoint for service cinder")
            && err.contains("volumev2: ")
            && err.contains("interface public"),
        "{err}"
    );
    let err = c
        .endpoint(Service::Share, Some("RegionOne"), public)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("shared-file-system/sharev2/share") && err.contains("region RegionOne"),
        "{err}"
    );
    let err = c
        .endpoint(Service::Compute, Some("RegionTwo"), public)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("region RegionTwo") && err.contains("compute: "),
        "{err}"
    );
    Ok(())
}

#[test]
fn token_from_application_credential_and_gophercloud_responses() -> TestResult {
    let t = auth::parse_token(
        "t",
        &fixture_bytes("keystone/auth-application-credential-response.json"),
    )?;
    assert_eq!(t.project_id, "231c62fb0fbd485b995e8b060c3f0d98");
    assert_eq!(
        t.user_id.as_deref(),
        Some("fd786d56402c4d1691372e7dee0d00b5")
    );
    assert_eq!(t.lifetime(), Duration::from_secs(3600));
    assert_eq!(
        t.catalog
            .endpoint(Service::Identity, None, Interface::Admin)?,
        "http://example.com/identity"
    );

    let t = auth::parse_token(
        "t",
        &fixture_bytes("keystone/gophercloud-token-output.json"),
    )?;
    assert_eq!(
        t.catalog
            .endpoint(Service::Compute, Some("RegionOne"), Interface::Public)?,
        "http://127.0.0.1:8774/v2.1/a99e9b4e620e4db09a2dfb6e42a01e66"
    );
    Ok(())
}

#[test]
fn unscoped_token_is_refused() {
    let err = auth::parse_token(
        "t",
        &fixture_bytes("keystone/auth-password-unscoped-response.json"),
    )
    .err()
    .unwrap_or_default();
    assert!(err.contains("not scoped to a project"), "{err}");
}

#[test]
fn catalog_document_and_service_aliases() -> TestResult {
    let doc = fixture("keystone/get-service-catalog-response.json");
    let catalog: Catalog = at(&doc, "catalog");
    assert_eq!(
        catalog.endpoint(Service::Identity, Some("RegionOne"), Interface::Public)?,
        "http://localhost:5000"
    );
    // aliases, preference order, api roots, several regions
    let catalog: Catalog = serde_json::from_value(json!([
        {"type": "sharev2", "endpoints": [{"interface": "public", "region_id": "R1", "url": "http://h:8786/v2/p1"}]},
        {"type": "share", "endpoints": [{"interface": "public", "region_id": "R1", "url": "http://h:8786/v1/p1"}]},
        {"type": "volumev3", "endpoints": [{"interface": "public", "region_id": "R1", "url": "http://h:8776/v3/p1"}]},
        {"type": "block-storage", "endpoints": [{"interface": "public", "region_id": "R1", "url": "http://h:8776/v3"}]},
        {"type": "network", "endpoints": [
            {"interface": "public", "region_id": "R1", "url": "http://n1:9696"},
            {"interface": "public", "region_id": "R2", "url": "http://n2:9696/"}]},
    ]))?;
    assert_eq!(
        catalog.endpoint(Service::Share, None, Interface::Public)?,
        "http://h:8786/v2/p1"
    );
    assert_eq!(
        catalog.endpoint(Service::Volume, None, Interface::Public)?,
        "http://h:8776/v3"
    );
    assert_eq!(
        catalog.endpoint(Service::Network, Some("R2"), Interface::Public)?,
        "http://n2:9696/v2.0"
    );
    let err = catalog
        .endpoint(Service::Network, None, Interface::Public)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("several regions (R1, R2)"), "{err}");
    assert_eq!(
        Service::Share.api_root("http://h:8786/v1/p1"),
        "http://h:8786/v2/p1"
    );
    Ok(())
}

// ---------------------------------------------------------------- errors

fn api(service: &'static str, status: u16, file: &str) -> ApiError {
    let body = decode_error_body(&fixture_bytes(file));
    ApiError {
        service,
        method: "POST".into(),
        path: "/v2.1/servers".into(),
        status,
        code: body.code,
        message: body.message,
        request_id: Some("req-1".into()),
    }
}

#[test]
fn every_error_fixture_decodes() -> TestResult {
    let dir = fixture_path("errors");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let body = decode_error_body(&std::fs::read(&path)?);
        assert!(body.code.is_some(), "{}: no code", path.display());
        assert!(body.message.len() > 10, "{}: {body:?}", path.display());
        n += 1;
    }
    assert!(n >= 6);
    Ok(())
}

#[test]
fn error_envelopes_and_classification() {
    let e = api("keystone", 401, "errors/keystone-401-unauthorized.json");
    assert_eq!(e.code.as_deref(), Some("Unauthorized"));
    assert_eq!(
        e.message,
        "The request you have made requires authentication."
    );
    assert!(matches!(classify(e), OpenStackError::Api(_)));

    let e = api(
        "manila",
        404,
        "errors/manila-404-itemNotFound.gophercloud.json",
    );
    assert_eq!(e.code.as_deref(), Some("itemNotFound"));
    assert!(e
        .message
        .starts_with("ShareSnapshotNotFound: Snapshot 70bfbebc"));
    assert!(classify(e).is_not_found());

    let e = api(
        "neutron",
        409,
        "errors/neutron-409-OverQuota-floatingip.json",
    );
    assert_eq!(e.code.as_deref(), Some("OverQuota"));
    assert_eq!(e.message, "Quota exceeded for resources: ['floatingip'].");
    let err = classify(e);
    assert!(err.is_quota_exceeded() && !err.is_conflict());

    let e = api("nova", 403, "errors/nova-403-quota-exceeded-instances.json");
    assert_eq!(e.code.as_deref(), Some("forbidden"));
    let err = classify(e);
    assert!(err.is_quota_exceeded());
    let msg = err.to_string();
    assert!(
        msg.starts_with("quota exceeded: nova POST /v2.1/servers: HTTP 403 forbidden: Quota exceeded for instances: Requested 1, but already used 10 of 10 instances")
            && msg.ends_with("(request id req-1)"),
        "{msg}"
    );

    let e = api("nova", 404, "errors/nova-404-itemNotFound.json");
    assert_eq!(e.message, "Aggregate agg_h1 could not be found.");
    assert!(classify(e).is_not_found());

    let e = api("nova", 409, "errors/nova-409-conflictingRequest.json");
    assert_eq!(e.code.as_deref(), Some("conflictingRequest"));
    let err = classify(e);
    assert!(err.is_conflict() && !err.is_quota_exceeded());
    assert_eq!(err.status(), Some(409));
    assert_eq!(err.request_id(), Some("req-1"));
}

#[test]
fn cinder_manila_413_is_over_quota_and_odd_bodies_decode() {
    let body = br#"{"overLimit": {"code": 413, "message": "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot exceeds allowed gigabytes quota. Requested 10G, quota is 1000G and 995G has been consumed.", "retryAfter": "0"}}"#;
    let d = decode_error_body(body);
    let e = ApiError {
        service: "cinder",
        method: "POST".into(),
        path: "/v3/volumes".into(),
        status: 413,
        code: d.code,
        message: d.message,
        request_id: None,
    };
    assert!(classify(e).is_quota_exceeded());

    // glance answers in text
    let d = decode_error_body(b"404 Not Found\n\nNo image found with ID abc\n\n   ");
    assert_eq!(d.message, "404 Not Found No image found with ID abc");
    assert_eq!(d.code, None);
    // HTML from a proxy
    let d = decode_error_body(b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>");
    assert_eq!(d.message, "502 Bad Gateway 502 Bad Gateway");
    // neutron with detail, webob bare message, placement errors list, empty
    let d = decode_error_body(br#"{"NeutronError": {"type": "SubnetInUse", "message": "Unable to complete operation on subnet x.", "detail": "One or more ports have an IP allocation"}}"#);
    assert_eq!(d.code.as_deref(), Some("SubnetInUse"));
    assert!(d
        .message
        .ends_with("(One or more ports have an IP allocation)"));
    let d = decode_error_body(br#"{"message": "The resource could not be found.<br /><br />", "code": "404 Not Found", "title": "Not Found"}"#);
    assert_eq!(d.code.as_deref(), Some("Not Found"));
    let d = decode_error_body(br#"{"errors": [{"status": 409, "title": "Conflict", "detail": "resource provider generation conflict", "code": "placement.concurrent_update"}]}"#);
    assert_eq!(d.code.as_deref(), Some("placement.concurrent_update"));
    assert_eq!(d.message, "resource provider generation conflict");
    assert_eq!(decode_error_body(b"").message, "");
}

#[test]
fn snippets_hide_secrets() {
    let s = error::redacted_snippet(&fixture_bytes("nova/server-create-resp.json"), 2000);
    assert!(
        !s.contains("6NpUwoz2QDRN") && s.contains("\"adminPass\":\"***\""),
        "{s}"
    );
    let s = error::redacted_snippet(
        &fixture_bytes("keystone/auth-application-credential-id-request.json"),
        2000,
    );
    assert!(!s.contains("rEaqvJka48mpv"), "{s}");
    let s = error::redacted_snippet(
        br#"{"auth": {"identity": {"password": {"user": {"name": "u", "password": "pw"}}}}}"#,
        2000,
    );
    assert!(!s.contains("\"pw\""), "{s}");
}

// ---------------------------------------------------------------- retry policy

#[test]
fn retry_policy_decisions() {
    use Failure::*;
    let status = |s: u16| Status {
        status: s,
        retry_after: None,
        over_quota: false,
    };
    let (get, post, delete, put) = (Method::GET, Method::POST, Method::DELETE, Method::PUT);
    // can pass
    for f in [status(429), status(502), status(503), status(504), Connect] {
        assert!(RetryPolicy::is_retryable(&post, &f, false), "{f:?}");
        assert!(RetryPolicy::is_retryable(&get, &f, false), "{f:?}");
    }
    // 500 and broken connections only when repeating is harmless
    for f in [status(500), Transport] {
        assert!(RetryPolicy::is_retryable(&get, &f, false));
        assert!(RetryPolicy::is_retryable(&delete, &f, false));
        assert!(RetryPolicy::is_retryable(&put, &f, false));
        assert!(!RetryPolicy::is_retryable(&post, &f, false), "{f:?}");
    }
    // 409 only on request, never over-quota
    assert!(!RetryPolicy::is_retryable(&delete, &status(409), false));
    assert!(RetryPolicy::is_retryable(&delete, &status(409), true));
    let over = Status {
        status: 409,
        retry_after: None,
        over_quota: true,
    };
    assert!(!RetryPolicy::is_retryable(&delete, &over, true));
    // never
    for s in [400, 401, 403, 404, 413, 501] {
        assert!(!RetryPolicy::is_retryable(&get, &status(s), true), "{s}");
    }

    let p = RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(350),
        max_retry_after: Duration::from_secs(5),
    };
    for attempt in 1..=6 {
        let ceiling = Duration::from_millis((100u64 << (attempt - 1)).min(350));
        for _ in 0..50 {
            let d = p.backoff(attempt);
            assert!(
                d <= ceiling && d >= ceiling / 2,
                "attempt {attempt}: {d:?} vs {ceiling:?}"
            );
        }
    }
    assert!(p.next_delay(3, &get, &status(503), false).is_some());
    assert_eq!(
        p.next_delay(4, &get, &status(503), false),
        None,
        "attempts are bounded"
    );
    assert_eq!(p.next_delay(1, &get, &status(404), false), None);
    let ra = |secs| Status {
        status: 429,
        retry_after: Some(Duration::from_secs(secs)),
        over_quota: false,
    };
    assert_eq!(
        p.next_delay(1, &post, &ra(2), false),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        p.next_delay(1, &post, &ra(600), false),
        Some(Duration::from_secs(5)),
        "capped"
    );
    assert_eq!(http::parse_retry_after("7"), Some(Duration::from_secs(7)));
    assert_eq!(
        http::parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
        Some(Duration::ZERO)
    );
    assert_eq!(http::parse_retry_after("soon"), None);
}

// ---------------------------------------------------------------- nova

#[test]
fn nova_flavors_and_keypairs() {
    let flavors: Vec<Flavor> = at(&fixture("nova/flavors-detail-resp.json"), "flavors");
    assert_eq!(flavors.len(), 7);
    let small = flavors.iter().find(|f| f.name == "m1.small");
    assert!(
        matches!(small, Some(f) if f.id == "2" && f.ram == 2048 && f.disk == 20 && f.vcpus == 1)
    );
    let specs = flavors
        .iter()
        .find(|f| f.name == "m1.small.description")
        .map(|f| f.extra_specs.clone());
    assert_eq!(
        specs
            .and_then(|s| s.get("hw:cpu_policy").cloned())
            .as_deref(),
        Some("shared")
    );

    let f: Flavor = at(&fixture("nova/flavor-get-resp.v2.102.json"), "flavor");
    assert_eq!(
        (f.id.as_str(), f.is_public, f.extra_specs.len()),
        ("7", Some(true), 2)
    );

    let k: Keypair = at(
        &fixture("nova/keypairs-import-post-resp.v2.92.json"),
        "keypair",
    );
    assert_eq!(
        k.fingerprint.as_deref(),
        Some("1e:2c:9b:56:79:4b:45:77:f9:ca:7a:98:2c:b0:d5:3c")
    );
    assert!(k.public_key.starts_with("ssh-rsa "));
    let req = fixture("nova/keypairs-import-post-req.v2.92.json");
    assert_eq!(req["keypair"]["type"], "ssh");
    let list = fixture("nova/keypairs-list-resp.v2.35.json");
    let first: Keypair =
        serde_json::from_value(list["keypairs"][0]["keypair"].clone()).unwrap_or_default();
    assert_eq!(first.name, "keypair-5d935425-31d5-48a7-a0f1-e76e9813f2c3");
    assert!(http::next_page_query(&list, "keypairs").is_some());
}

#[test]
fn nova_servers_every_shape() {
    let s: Server = at(&fixture("nova/server-get-resp.json"), "server");
    assert_eq!(s.status, ServerStatus::Active);
    assert_eq!(s.power_state, Some(PowerState::Running));
    assert_eq!(s.flavor.as_ref().and_then(|f| f.id.as_deref()), Some("1"));
    assert_eq!(
        s.image_id.as_deref(),
        Some("70a599e0-31e7-49b7-b260-868f441e862b")
    );
    assert_eq!(s.addresses_of_kind("fixed"), vec!["192.168.1.30"]);
    assert_eq!(
        s.metadata.get("My Server Name").map(String::as_str),
        Some("Apache1")
    );
    assert_eq!(s.security_groups[0].name, "default");

    let s: Server = at(&fixture("nova/server-get-resp.v2.100.json"), "server");
    let f = s.flavor.clone().unwrap_or_default();
    assert_eq!(
        (f.id, f.original_name.as_deref(), f.vcpus),
        (None, Some("m1.tiny"), Some(1))
    );
    assert_eq!(s.hostname.as_deref(), Some("new-server-test"));
    assert!(s.tags.is_empty() && s.fault.is_none());
    assert_eq!(s.availability_zone.as_deref(), Some("us-west"));

    // down cell: nearly everything missing
    let s: Server = at(
        &fixture("nova/server-get-down-cell-resp.v2.71.json"),
        "server",
    );
    assert_eq!(s.status, ServerStatus::Unknown);
    assert_eq!(s.name, None);
    assert!(s.addresses.is_empty() && s.metadata.is_empty() && s.key_name.is_none());
    assert_eq!(s.power_state, Some(PowerState::NoState));

    let s: Server = at(
        &fixture("nova/server-get-error-fault.faults-rst.json"),
        "server",
    );
    assert_eq!(s.status, ServerStatus::Error);
    let fault = s.fault.clone().unwrap_or_default();
    assert_eq!(fault.code, Some(500));
    assert!(fault.message.starts_with("No valid host was found"));

    let s: Server = at(
        &fixture("nova/server-get-fault-error.gophercloud.json"),
        "server",
    );
    assert_eq!(s.status, ServerStatus::Active);
    assert!(s
        .fault
        .is_some_and(|f| f.details.as_deref() == Some("Stock details for test")));
    assert_eq!(s.key_name, None);

    let detail = fixture("nova/servers-details-resp.v2.100.json");
    let servers: Vec<Server> = at(&detail, "servers");
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].status, ServerStatus::Active);
    let next = http::next_page_query(&detail, "servers").unwrap_or_default();
    assert!(
        next.contains(&(
            "marker".into(),
            "f5dc173b-6804-445a-a6d8-c705dad5b5eb".into()
        )),
        "{next:?}"
    );

    let brief: Vec<Server> = at(&fixture("nova/servers-list-resp.v2.100.json"), "servers");
    assert_eq!(brief[0].name.as_deref(), Some("new-server-test"));

    let created: Server = at(&fixture("nova/server-create-resp.json"), "server");
    assert_eq!(created.id, "f5dc173b-6804-445a-a6d8-c705dad5b5eb");
    let created: Server = at(&fixture("nova/server-create-resp.v2.100.json"), "server");
    assert_eq!(created.id, "f5dc173b-6804-445a-a6d8-c705dad5b5eb");

    let meta = fixture("nova/server-metadata-all-resp.json");
    let m: BTreeMap<String, String> = at(&meta, "metadata");
    assert_eq!(m.get("foo").map(String::as_str), Some("Foo Value"));
    let tags: Vec<String> = at(&fixture("nova/server-tags-index-resp.v2.26.json"), "tags");
    assert_eq!(
        tags,
        fixture("nova/server-tags-put-all-req.v2.26.json")["tags"]
            .as_array()
            .map(|a| a
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect::<Vec<_>>())
            .unwrap_or_default()
    );
}

#[test]
fn nova_server_create_body_matches_the_sample() -> TestResult {
    for file in [
        "nova/server-create-req.json",
        "nova/server-create-req.v2.94.json",
    ] {
        let sample = fixture(file);
        let s = &sample["server"];
        use base64::Engine;
        let user_data = base64::engine::general_purpose::STANDARD
            .decode(s["user_data"].as_str().unwrap_or_default())?;
        let create = ServerCreate {
            name: "new-server-test".into(),
            flavor_id: "1".into(),
            image_id: "70a599e0-31e7-49b7-b260-868f441e862b".into(),
            availability_zone: Some("us-west".into()),
            metadata: [("My Server Name".to_string(), "Apache1".to_string())].into(),
            security_groups: vec!["default".into()],
            user_data: Some(user_data),
            hostname: s
                .get("hostname")
                .and_then(|h| h.as_str())
                .map(str::to_owned),
            ..ServerCreate::default()
        };
        let body = create.to_body()?;
        let ours = &body["server"];
        for key in [
            "name",
            "imageRef",
            "flavorRef",
            "availability_zone",
            "metadata",
            "security_groups",
            "user_data",
            "hostname",
        ] {
            assert_eq!(ours.get(key), s.get(key), "{file}: {key}");
        }
        assert_eq!(ours["networks"], "none");
    }
    let body = ServerCreate {
        name: "c-worker-1".into(),
        flavor_id: "f".into(),
        image_id: "i".into(),
        networks: vec![
            ServerNetwork::Port("p1".into()),
            ServerNetwork::Network("n1".into()),
        ],
        key_name: Some("c-key".into()),
        tags: vec!["hvd-cluster".into(), "c".into()],
        ..ServerCreate::default()
    }
    .to_body()?;
    assert_eq!(
        body["server"]["networks"],
        json!([{"port": "p1"}, {"uuid": "n1"}])
    );
    assert_eq!(body["server"]["tags"], json!(["hvd-cluster", "c"]));
    assert_eq!(body["server"]["key_name"], "c-key");
    assert!(body["server"].get("security_groups").is_none());
    let too_big = ServerCreate {
        user_data: Some(vec![b'x'; 60_000]),
        ..ServerCreate::default()
    };
    assert!(matches!(too_big.to_body(), Err(OpenStackError::Invalid(m)) if m.contains("65535")));
    Ok(())
}

#[test]
fn nova_limits_quotas_versions() {
    let l: ComputeLimits = serde_json::from_value(
        fixture("nova/limits-get-resp.v2.57.json")["limits"]["absolute"].clone(),
    )
    .unwrap_or_default();
    assert_eq!(
        (
            l.max_total_instances,
            l.total_instances_used,
            l.max_total_ram_size
        ),
        (10, 0, 51200)
    );
    let q = quota_usages_from_json(
        &fixture("nova/quotas-show-detail-get-resp.v2.57.json"),
        "quota_set",
    )
    .unwrap_or_default();
    assert_eq!(q.len(), 7);
    assert_eq!(
        q.get("instances")
            .map(|u| (u.limit, u.in_use, u.available())),
        Some((10, 0, Some(10)))
    );
    // the non-detail form has no usage objects
    let q = quota_usages_from_json(
        &fixture("nova/quotas-show-get-resp.v2.57.json"),
        "quota_set",
    )
    .unwrap_or_default();
    assert!(q.is_empty());
    // the pinned microversion is inside the range nova advertises
    let max = |v: &Value| -> (u32, u32) {
        let s = v["version"].as_str().unwrap_or("0.0");
        let (a, b) = s.split_once('.').unwrap_or(("0", "0"));
        (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
    };
    let ours = {
        let (a, b) = http::NOVA_MICROVERSION
            .split_once('.')
            .unwrap_or(("0", "0"));
        (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
    };
    let v21 = fixture("nova/v21-version-get-resp.json");
    assert!(ours >= (2, 74) && ours <= max(&v21["version"]));
    let all = fixture("nova/versions-get-resp.json");
    assert!(all["versions"]
        .as_array()
        .is_some_and(|vs| vs.iter().any(|v| v["id"] == "v2.1" && ours <= max(v))));
}

// ---------------------------------------------------------------- neutron

#[test]
fn neutron_parsers() {
    let nets: Vec<NetworkInfo> = at(&fixture("neutron/networks-list-response.json"), "networks");
    assert_eq!(nets.len(), 2);
    assert!(!nets[0].external && nets[0].subnets == ["54d6f61d-db07-451c-9ab3-b9609b6b6f0b"]);
    let n: NetworkInfo = at(&fixture("neutron/network-create-response.json"), "network");
    assert_eq!(
        (n.name.as_str(), n.mtu, n.tags.len()),
        ("net1", Some(1400), 1)
    );

    let s: Subnet = at(&fixture("neutron/subnet-create-response.json"), "subnet");
    assert_eq!(s.cidr, "192.168.199.0/24");
    assert_eq!(s.gateway_ip.as_deref(), Some("192.168.199.1"));
    assert_eq!(s.allocation_pools[0].start, "192.168.199.2");

    let r: Router = at(&fixture("neutron/router-create-response.json"), "router");
    let gw = r.external_gateway_info.clone().unwrap_or_default();
    assert_eq!(gw.network_id, "ae34051f-aa6c-4c75-abf5-50dc9ac99ef3");
    assert_eq!(
        gw.external_fixed_ips[0].ip_address.as_deref(),
        Some("172.24.4.6")
    );

    // not wrapped in a "router" key
    let i: RouterInterface =
        serde_json::from_value(fixture("neutron/router-add-interface-response.json"))
            .unwrap_or_default();
    assert_eq!(i.id, "915a14a6-867b-4af7-83d1-70efceb146f9");
    assert_eq!(i.port_id, "2dc46bcc-d1f2-4077-b99e-91ee28afaff0");
    assert_eq!(
        i.subnet_id,
        fixture("neutron/router-add-interface-request.json")["subnet_id"]
    );

    let g: SecurityGroup = at(
        &fixture("neutron/security-group-create-response.json"),
        "security_group",
    );
    assert_eq!(g.security_group_rules.len(), 2);
    assert!(g
        .security_group_rules
        .iter()
        .all(|r| r.direction == "egress" && r.protocol.is_none() && r.port_range_min.is_none()));
    let rule: SecurityGroupRule = at(
        &fixture("neutron/security-group-rule-create-response.json"),
        "security_group_rule",
    );
    assert_eq!(
        (
            rule.port_range_min,
            rule.port_range_max,
            rule.protocol.as_deref()
        ),
        (Some(80), Some(80), Some("tcp"))
    );
    assert_eq!(
        rule.remote_group_id.as_deref(),
        Some("85cc3048-abc3-43cc-89b3-377341426ac5")
    );

    let p: Port = at(&fixture("neutron/port-create-response.json"), "port");
    assert_eq!(p.fixed_ips[0].ip_address.as_deref(), Some("10.0.0.2"));
    assert_eq!(p.security_groups, ["f0ac4394-7e4a-4409-9701-ba8be283dbc3"]);
    assert_eq!(p.status.as_deref(), Some("DOWN"));

    let fips: Vec<FloatingIp> = at(
        &fixture("neutron/floating-ips-list-response.json"),
        "floatingips",
    );
    assert_eq!(fips.len(), 3);
    assert_eq!(
        fips[0].port_id.as_deref(),
        Some("ce705c24-c1ef-408a-bda3-7bbd946164ab")
    );
    assert_eq!(
        (fips[1].port_id.as_deref(), fips[1].status.as_deref()),
        (None, Some("DOWN"))
    );
    let f: FloatingIp = at(
        &fixture("neutron/floatingip-create-response.json"),
        "floatingip",
    );
    assert_eq!(f.floating_ip_address, "172.24.4.228");

    let q: BTreeMap<String, i64> = at(
        &fixture("neutron/quotas-list-for-project-response.json"),
        "quota",
    );
    assert_eq!(
        (q.get("floatingip"), q.get("rbac_policy")),
        (Some(&50), Some(&-1))
    );
    let usage = quota_usages_from_json(
        &json!({"quota": {"network": {"used": 3, "limit": 10, "reserved": 0}, "rbac_policy": {"used": 0, "limit": -1, "reserved": 0}}}),
        "quota",
    )
    .unwrap_or_default();
    assert_eq!(usage.get("network").map(|u| u.available()), Some(Some(7)));
    assert_eq!(usage.get("rbac_policy").map(|u| u.available()), Some(None));
}

#[test]
fn neutron_request_bodies() {
    let sample = fixture("neutron/subnet-create-request.json");
    let ours = SubnetCreate {
        network_id: "d32019d3-bc6e-4319-9c1d-6722fc136a22".into(),
        cidr: "192.168.199.0/24".into(),
        ..SubnetCreate::default()
    }
    .to_body();
    for key in ["network_id", "ip_version", "cidr"] {
        assert_eq!(ours["subnet"][key], sample["subnet"][key], "{key}");
    }
    assert!(ours["subnet"].get("gateway_ip").is_none());
    let no_gw = SubnetCreate {
        gateway: Gateway::Disabled,
        dns_nameservers: vec!["1.1.1.1".into()],
        ..SubnetCreate::default()
    }
    .to_body();
    assert_eq!(no_gw["subnet"]["gateway_ip"], Value::Null);
    assert_eq!(no_gw["subnet"]["dns_nameservers"], json!(["1.1.1.1"]));

    let sample = fixture("neutron/security-group-rule-create-request.json");
    let ours = RuleCreate {
        security_group_id: "a7734e61-b545-452d-a3cd-0189cbd9747a".into(),
        direction: Direction::Ingress,
        ethertype: EtherType::IPv4,
        protocol: Some("tcp".into()),
        port_range: Some((80, 80)),
        remote: Remote::Group("85cc3048-abc3-43cc-89b3-377341426ac5".into()),
        description: None,
    }
    .to_body();
    for key in [
        "direction",
        "ethertype",
        "protocol",
        "remote_group_id",
        "security_group_id",
    ] {
        assert_eq!(
            ours["security_group_rule"][key], sample["security_group_rule"][key],
            "{key}"
        );
    }
    assert_eq!(ours["security_group_rule"]["port_range_min"], 80);
    let cidr = RuleCreate {
        remote: Remote::Cidr("0.0.0.0/0".into()),
        ethertype: EtherType::IPv6,
        direction: Direction::Egress,
        ..RuleCreate::default()
    }
    .to_body();
    assert_eq!(cidr["security_group_rule"]["remote_ip_prefix"], "0.0.0.0/0");
    assert_eq!(cidr["security_group_rule"]["ethertype"], "IPv6");
    assert_eq!(cidr["security_group_rule"]["direction"], "egress");
    assert!(cidr["security_group_rule"].get("remote_group_id").is_none());

    let port = PortCreate {
        name: "private-port".into(),
        network_id: "a87cc70a-3e15-4acf-8205-9b711a3531b7".into(),
        security_groups: Some(vec!["sg1".into()]),
        tags: vec!["t".into()],
        ..PortCreate::default()
    };
    let sample = fixture("neutron/port-create-request.json");
    assert_eq!(
        port.to_body(false)["port"]["network_id"],
        sample["port"]["network_id"]
    );
    assert_eq!(port.to_body(false)["port"]["name"], sample["port"]["name"]);
    assert!(port.to_body(false)["port"].get("tags").is_none());
    assert_eq!(port.to_body(true)["port"]["tags"], json!(["t"]));
    let q = Query::new()
        .name("n")
        .tags(&["a", "b"])
        .eq("device_id", "d");
    assert_eq!(
        q.0,
        vec![
            ("name".into(), "n".into()),
            ("tags".into(), "a,b".into()),
            ("device_id".into(), "d".into())
        ]
    );
}

// ---------------------------------------------------------------- glance

#[test]
fn glance_unwrapped_bodies_and_image_choice() {
    let list = fixture("glance/images-list-response.json");
    let images: Vec<Image> = at(&list, "images");
    assert_eq!(images.len(), 2);
    assert_eq!(images[0].name.as_deref(), Some("cirros-0.3.2-x86_64-disk"));
    assert!(
        http::next_page_query(&list, "images").is_none(),
        "first is not next"
    );
    let paged = json!({"images": [], "next": "/v2/images?marker=abc&name=x"});
    assert_eq!(
        http::next_page_query(&paged, "images"),
        Some(vec![
            ("marker".into(), "abc".into()),
            ("name".into(), "x".into())
        ])
    );
    let one: Image =
        serde_json::from_value(fixture("glance/image-show-response.json")).unwrap_or_default();
    assert_eq!(
        (one.id.as_str(), one.status.as_str()),
        ("1bea47ed-f6a9-463b-b423-14b9cca9ad27", "active")
    );

    let mut same = images.clone();
    for i in &mut same {
        i.name = Some("debian".into());
    }
    // newest wins
    assert_eq!(
        pick_newest("debian", &same)
            .map(|i| i.id.clone())
            .ok()
            .as_deref(),
        Some("1bea47ed-f6a9-463b-b423-14b9cca9ad27")
    );
    // a tie is ambiguous
    same[1].created_at = same[0].created_at.clone();
    assert!(matches!(
        pick_newest("debian", &same),
        Err(OpenStackError::Ambiguous { .. })
    ));
    // inactive ones do not count
    same[1].status = "queued".into();
    assert!(pick_newest("debian", &same).is_ok());
    assert!(pick_newest("debian", &[]).is_err_and(|e| e.is_not_found()));
}

// ---------------------------------------------------------------- manila

#[test]
fn manila_parsers_and_bodies() {
    let created: Share = at(&fixture("manila/share-create-response.json"), "share");
    assert_eq!(created.status, None, "status is null right after create");
    assert_eq!(
        created.metadata.get("project").map(String::as_str),
        Some("my_app")
    );
    let shown: Share = at(&fixture("manila/share-show-response.json"), "share");
    assert!(shown.is_available() && !shown.is_error());
    assert_eq!(shown.share_proto.as_deref(), Some("NFS"));

    let locations: Vec<ExportLocation> = at(
        &fixture("manila/export-location-list-response.json"),
        "export_locations",
    );
    assert_eq!(locations.len(), 2);
    assert!(locations[0].path.starts_with("10.254.0.3:/shares/"));
    assert_eq!(locations[1].is_admin_only, Some(true));

    let rules: Vec<AccessRule> = at(
        &fixture("manila/share-access-rules-list-response.json"),
        "access_list",
    );
    let ip = rules.iter().find(|r| r.access_type == "ip");
    assert!(
        matches!(ip, Some(r) if r.state.as_deref() == Some("active") && r.access_to == "0.0.0.0/0")
    );
    let granted: AccessRule = at(
        &fixture("manila/share-actions-grant-access-response.json"),
        "access",
    );
    assert_eq!(
        granted.share_id.as_deref(),
        Some("406ea93b-32e9-4907-a117-148b3945749f")
    );
    assert_eq!(granted.state, None);
    let req = fixture("manila/share-actions-grant-access-request.json");
    assert_eq!(req["allow_access"]["access_type"], "ip");

    let sample = fixture("manila/share-create-request.json");
    let ours = ShareCreate {
        name: "share_London".into(),
        description: Some("My custom share London".into()),
        size: 1,
        metadata: [
            ("project".to_string(), "my_app".to_string()),
            ("aim".to_string(), "doc".to_string()),
        ]
        .into(),
        ..ShareCreate::default()
    }
    .to_body();
    for key in ["name", "size", "metadata", "description"] {
        assert_eq!(ours["share"][key], sample["share"][key], "{key}");
    }
    assert_eq!(ours["share"]["share_proto"], "NFS");
    assert!(ours["share"].get("share_type").is_none());
    let filter = hvd_cluster::openstack::share::metadata_filter(
        &[("hvd-cluster".to_string(), "c1".to_string())].into(),
    );
    assert_eq!(filter, r#"{"hvd-cluster":"c1"}"#);

    let limits: ShareLimits = serde_json::from_value(
        fixture("manila/limits-response.json")["limits"]["absolute"].clone(),
    )
    .unwrap_or_default();
    assert_eq!(
        (limits.max_total_shares, limits.max_total_share_gigabytes),
        (50, 1000)
    );
    let q: BTreeMap<String, Value> = at(&fixture("manila/quota-show-response.json"), "quota_set");
    assert_eq!(q.get("shares"), Some(&json!(50)));
}

// ---------------------------------------------------------------- cinder

#[test]
fn cinder_parsers_and_bodies() {
    let v: Volume = at(&fixture("cinder/volume-create-response.json"), "volume");
    assert_eq!(
        (v.status.as_str(), v.size, v.name.as_deref()),
        ("creating", 10, None)
    );
    let v: Volume = at(&fixture("cinder/volume-show-response.v3.69.json"), "volume");
    assert_eq!(v.id, "f7223234-1afc-4d19-bfa3-d19deb6235ef");
    let sample = fixture("cinder/volume-create-request.json");
    let ours = VolumeCreate {
        name: "v".into(),
        size: 10,
        ..VolumeCreate::default()
    }
    .to_body();
    assert_eq!(ours["volume"]["size"], sample["volume"]["size"]);
    let limits: VolumeLimits = serde_json::from_value(
        fixture("cinder/limits-show-response.json")["limits"]["absolute"].clone(),
    )
    .unwrap_or_default();
    assert_eq!(
        (limits.max_total_volumes, limits.max_total_volume_gigabytes),
        (10, 1000)
    );
    let q = quota_usages_from_json(
        &fixture("cinder/quotas-show-usage-response.json"),
        "quota_set",
    )
    .unwrap_or_default();
    assert_eq!(q.get("volumes").map(|u| u.limit), Some(10));
    assert_eq!(
        q.get("gigabytes___DEFAULT__").map(|u| u.available()),
        Some(None)
    );
}

// ---------------------------------------------------------------- the request path, against a scripted server

#[derive(Clone)]
struct Canned {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

fn canned(status: u16, body: Value) -> Canned {
    Canned {
        status,
        headers: Vec::new(),
        body: body.to_string(),
    }
}

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: HashMap<String, String>,
    body: String,
}

#[derive(Clone)]
struct MockCloud {
    base: String,
    routes: Arc<Mutex<HashMap<String, VecDeque<Canned>>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl MockCloud {
    fn start() -> MockCloud {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let mock = MockCloud {
            base: format!("http://127.0.0.1:{port}"),
            routes: Arc::default(),
            seen: Arc::default(),
        };
        let m = mock.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let m = m.clone();
                std::thread::spawn(move || m.serve(stream));
            }
        });
        mock
    }

    /// Responses for "METHOD /path", served in order; the last one repeats.
    fn route(&self, key: &str, responses: Vec<Canned>) {
        if let Ok(mut r) = self.routes.lock() {
            r.insert(key.to_string(), responses.into());
        }
    }

    fn seen(&self, key: &str) -> Vec<Seen> {
        let (method, path) = key.split_once(' ').unwrap_or(("", ""));
        self.seen
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|r| r.method == method && r.target.split('?').next() == Some(path))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    fn serve(&self, stream: std::net::TcpStream) {
        let mut reader = BufReader::new(match stream.try_clone() {
            Ok(s) => s,
            Err(_) => return,
        });
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        let _ = reader.read_exact(&mut body);
        let path = target.split('?').next().unwrap_or_default().to_string();
        if let Ok(mut s) = self.seen.lock() {
            s.push(Seen {
                method: method.clone(),
                target: target.clone(),
                headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        let key = format!("{method} {path}");
        let reply = self
            .routes
            .lock()
            .ok()
            .and_then(|mut r| {
                let q = r.get_mut(&key)?;
                if q.len() > 1 {
                    q.pop_front()
                } else {
                    q.front().cloned()
                }
            })
            .unwrap_or_else(|| {
                canned(
                    404,
                    json!({"itemNotFound": {"code": 404, "message": format!("no route {key}")}}),
                )
            });
        let mut out = format!("HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n", reply.status, reply.body.len());
        for (k, v) in &reply.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        out.push_str(&reply.body);
        let mut stream = stream;
        let _ = stream.write_all(out.as_bytes());
    }

    fn token_response(&self, lifetime_secs: i64) -> Canned {
        let now = chrono::Utc::now();
        let ep = |t: &str, path: &str| json!({"type": t, "endpoints": [{"interface": "public", "region_id": "R1", "region": "R1", "url": format!("{}{path}", self.base)}]});
        Canned {
            status: 201,
            headers: vec![("X-Subject-Token".into(), "gAAAA-token-value".into())],
            body: json!({"token": {
                "issued_at": now.to_rfc3339(),
                "expires_at": (now + chrono::Duration::seconds(lifetime_secs)).to_rfc3339(),
                "project": {"id": "p-123", "name": "demo"},
                "user": {"id": "u-1", "name": "demo"},
                "catalog": [ep("compute", "/compute/v2.1"), ep("network", "/network"), ep("image", "/image"), ep("sharev2", "/share/v2"), ep("block-storage", "/volume/v3")]
            }})
            .to_string(),
        }
    }

    fn config(&self) -> CloudConfig {
        CloudConfig {
            cloud: Some("mock".into()),
            origin: "test".into(),
            auth_url: format!("{}/identity/v3", self.base),
            auth: AuthMethod::Password {
                user: UserRef::Name {
                    name: "demo".into(),
                    domain: DomainRef::Id("default".into()),
                },
                password: Secret::new("pa55w0rd-never-shown"),
                project: ProjectRef::Name {
                    name: "demo".into(),
                    domain: DomainRef::Id("default".into()),
                },
            },
            region: None,
            interface: Interface::Public,
            cacert: None,
            insecure: false,
        }
    }
}

fn fast() -> ClientOptions {
    ClientOptions {
        retry: RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(20),
            max_retry_after: Duration::from_millis(50),
        },
        timeout: Some(Duration::from_secs(10)),
        connect_timeout: Duration::from_secs(2),
        renew_before: Duration::from_secs(300),
    }
}

const AUTH: &str = "POST /identity/v3/auth/tokens";

#[tokio::test]
async fn request_path_retries_reauths_and_counts() -> TestResult {
    let mock = MockCloud::start();
    mock.route(AUTH, vec![mock.token_response(3600)]);
    let flavors = json!({"flavors": [{"id": "1", "name": "m1.small", "vcpus": 1, "ram": 2048, "disk": 20, "swap": 0, "extra_specs": {}}]});
    mock.route(
        "GET /compute/v2.1/flavors/detail",
        vec![
            canned(
                503,
                json!({"computeFault": {"code": 503, "message": "busy"}}),
            ),
            Canned {
                headers: vec![("Retry-After".into(), "0".into())],
                ..canned(429, json!({"message": "slow down"}))
            },
            canned(200, flavors),
        ],
    );
    let os = OpenStack::connect_with(&mock.config(), fast()).await?;
    assert_eq!(os.project_id(), "p-123");
    assert_eq!(os.calls(), 1);
    let f = os.compute().find_flavor("m1.small").await?;
    assert_eq!(f.id, "1");
    assert_eq!(os.calls(), 4, "1 token + 503 + 429 + 200");
    let seen = mock.seen("GET /compute/v2.1/flavors/detail");
    assert_eq!(seen.len(), 3);
    let h = &seen[2].headers;
    assert_eq!(
        h.get("x-openstack-nova-api-version").map(String::as_str),
        Some(http::NOVA_MICROVERSION)
    );
    assert_eq!(
        h.get("x-auth-token").map(String::as_str),
        Some("gAAAA-token-value")
    );
    // the auth body carried the password and the project scope
    let auth = mock.seen(AUTH);
    assert!(auth[0].body.contains("pa55w0rd-never-shown") && auth[0].body.contains("\"scope\""));

    // a 401 re-authenticates once and repeats the call
    mock.route(
        "GET /network/v2.0/networks",
        vec![
            canned(
                401,
                json!({"error": {"code": 401, "title": "Unauthorized", "message": "expired"}}),
            ),
            canned(
                200,
                json!({"networks": [{"id": "n1", "name": "public", "router:external": true}]}),
            ),
        ],
    );
    let public = os.network().find_network("public").await?;
    assert!(public.external);
    assert_eq!(mock.seen(AUTH).len(), 2);
    let q = &mock.seen("GET /network/v2.0/networks")[1].target;
    assert!(q.ends_with("?name=public"), "{q}");

    // POST 500 is not repeated; the error carries method, path, status, message, request id
    mock.route(
        "POST /compute/v2.1/servers",
        vec![Canned {
            headers: vec![("x-openstack-request-id".into(), "req-abc".into())],
            ..canned(
                500,
                json!({"computeFault": {"code": 500, "message": "Unexpected API Error."}}),
            )
        }],
    );
    let create = ServerCreate {
        name: "s".into(),
        ..ServerCreate::default()
    };
    let err = os
        .compute()
        .create_server(&create)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        err,
        "nova POST /compute/v2.1/servers: HTTP 500 computeFault: Unexpected API Error. (request id req-abc)"
    );
    assert_eq!(mock.seen("POST /compute/v2.1/servers").len(), 1);

    // nova over quota
    mock.route(
        "POST /compute/v2.1/servers",
        vec![canned(
            403,
            fixture("errors/nova-403-quota-exceeded-instances.json"),
        )],
    );
    let err = os.compute().create_server(&create).await.err();
    assert!(
        err.as_ref().is_some_and(|e| e.is_quota_exceeded()),
        "{err:?}"
    );

    // DELETE subnet: 409 in use is waited out (opted in); neutron 409 OverQuota is not retried
    mock.route(
        "DELETE /network/v2.0/subnets/s1",
        vec![
            canned(
                409,
                json!({"NeutronError": {"type": "SubnetInUse", "message": "in use", "detail": ""}}),
            ),
            canned(
                409,
                json!({"NeutronError": {"type": "SubnetInUse", "message": "in use", "detail": ""}}),
            ),
            Canned {
                status: 204,
                headers: vec![],
                body: String::new(),
            },
        ],
    );
    os.network().delete_subnet("s1").await?;
    assert_eq!(mock.seen("DELETE /network/v2.0/subnets/s1").len(), 3);
    mock.route(
        "POST /network/v2.0/floatingips",
        vec![canned(
            409,
            fixture("errors/neutron-409-OverQuota-floatingip.json"),
        )],
    );
    let err = os
        .network()
        .create_floating_ip(&hvd_cluster::openstack::FloatingIpCreate {
            floating_network_id: "n1".into(),
            ..Default::default()
        })
        .await
        .err();
    assert!(
        err.as_ref().is_some_and(|e| e.is_quota_exceeded()),
        "{err:?}"
    );
    assert_eq!(mock.seen("POST /network/v2.0/floatingips").len(), 1);

    // deletes of missing things succeed; gets of missing things are None
    mock.route(
        "DELETE /compute/v2.1/servers/gone",
        vec![canned(404, fixture("errors/nova-404-itemNotFound.json"))],
    );
    os.compute().delete_server("gone").await?;
    assert!(os.compute().get_server("nope").await?.is_none());

    // nothing secret in any error text
    assert!(!err
        .map(|e| format!("{e} {e:?}"))
        .unwrap_or_default()
        .contains("pa55w0rd"));
    Ok(())
}

#[tokio::test]
async fn neutron_create_tags_with_put_and_lists_by_tag() -> TestResult {
    let mock = MockCloud::start();
    mock.route(AUTH, vec![mock.token_response(3600)]);
    mock.route(
        "POST /network/v2.0/networks",
        vec![canned(
            201,
            json!({"network": {"id": "n9", "name": "c-net", "tags": []}}),
        )],
    );
    mock.route(
        "PUT /network/v2.0/networks/n9/tags",
        vec![canned(200, json!({"tags": ["hvd-cluster", "c"]}))],
    );
    mock.route(
        "GET /network/v2.0/extensions",
        vec![canned(
            200,
            json!({"extensions": [{"alias": "standard-attr-tag"}]}),
        )],
    );
    mock.route(
        "POST /network/v2.0/ports",
        vec![canned(
            201,
            json!({"port": {"id": "p9", "network_id": "n9"}}),
        )],
    );
    mock.route(
        "PUT /network/v2.0/ports/p9/tags",
        vec![canned(200, json!({"tags": ["c"]}))],
    );
    mock.route(
        "PUT /network/v2.0/security-groups/g9/tags",
        vec![canned(
            400,
            json!({"NeutronError": {"type": "InvalidInput", "message": "bad tag", "detail": ""}}),
        )],
    );
    mock.route(
        "POST /network/v2.0/security-groups",
        vec![canned(
            201,
            json!({"security_group": {"id": "g9", "name": "c-sg"}}),
        )],
    );
    mock.route(
        "DELETE /network/v2.0/security-groups/g9",
        vec![Canned {
            status: 204,
            headers: vec![],
            body: String::new(),
        }],
    );
    mock.route(
        "GET /network/v2.0/routers",
        vec![canned(200, json!({"routers": []}))],
    );

    let os = OpenStack::connect_with(&mock.config(), fast()).await?;
    let net = os
        .network()
        .create_network(&hvd_cluster::openstack::NetworkCreate {
            name: "c-net".into(),
            tags: vec!["hvd-cluster".into(), "c".into()],
            ..Default::default()
        })
        .await?;
    assert_eq!(net.tags, ["hvd-cluster", "c"]);
    assert_eq!(
        mock.seen("PUT /network/v2.0/networks/n9/tags")[0].body,
        r#"{"tags":["hvd-cluster","c"]}"#
    );
    let port = os
        .network()
        .create_port(&PortCreate {
            name: "p".into(),
            network_id: "n9".into(),
            tags: vec!["c".into()],
            ..Default::default()
        })
        .await?;
    assert_eq!(port.tags, ["c"]);
    assert!(
        !mock.seen("POST /network/v2.0/ports")[0]
            .body
            .contains("tags"),
        "no tag-on-create extension"
    );
    // a group whose tagging fails is removed again
    let err = os
        .network()
        .create_security_group(&hvd_cluster::openstack::SecurityGroupCreate {
            name: "c-sg".into(),
            tags: vec!["x,y".into()],
            ..Default::default()
        })
        .await;
    assert!(err.is_err());
    assert_eq!(
        mock.seen("DELETE /network/v2.0/security-groups/g9").len(),
        1
    );
    os.network()
        .list_routers(&Query::new().tags(&["hvd-cluster", "c"]))
        .await?;
    assert_eq!(
        mock.seen("GET /network/v2.0/routers")[0].target,
        "/network/v2.0/routers?tags=hvd-cluster%2Cc"
    );
    Ok(())
}

#[tokio::test]
async fn pagination_microversions_and_metadata_filters() -> TestResult {
    let mock = MockCloud::start();
    mock.route(AUTH, vec![mock.token_response(3600)]);
    mock.route(
        "GET /compute/v2.1/servers/detail",
        vec![
            canned(200, json!({"servers": [{"id": "a", "status": "BUILD", "tags": ["c"]}], "servers_links": [{"rel": "next", "href": "http://elsewhere/v2.1/servers/detail?tags=c&marker=a"}]})),
            canned(200, json!({"servers": [{"id": "b", "status": "ACTIVE", "tags": ["c"]}]})),
        ],
    );
    mock.route("GET /share/v2/shares/detail", vec![canned(200, json!({"shares": [{"id": "s1", "status": "available", "metadata": {"hvd-cluster": "c"}}]}))]);
    mock.route(
        "GET /volume/v3/volumes/detail",
        vec![canned(200, json!({"volumes": []}))],
    );
    mock.route("GET /image/v2/images", vec![canned(200, json!({"images": [{"id": "i1", "name": "debian", "status": "active", "created_at": "2026-01-01T00:00:00Z"}]}))]);
    let os = OpenStack::connect_with(&mock.config(), fast()).await?;
    let servers = os
        .compute()
        .list_servers(&ServerFilter {
            tags: vec!["c".into()],
            ..Default::default()
        })
        .await?;
    assert_eq!(
        servers.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let seen = mock.seen("GET /compute/v2.1/servers/detail");
    assert_eq!(seen[0].target, "/compute/v2.1/servers/detail?tags=c");
    assert_eq!(
        seen[1].target, "/compute/v2.1/servers/detail?tags=c&marker=a",
        "next page asked of our own endpoint"
    );

    let meta: BTreeMap<String, String> = [("hvd-cluster".to_string(), "c".to_string())].into();
    assert_eq!(os.share().list_shares(&meta).await?.len(), 1);
    let s = &mock.seen("GET /share/v2/shares/detail")[0];
    assert_eq!(
        s.target,
        "/share/v2/shares/detail?metadata=%7B%22hvd-cluster%22%3A%22c%22%7D"
    );
    assert_eq!(
        s.headers
            .get("x-openstack-manila-api-version")
            .map(String::as_str),
        Some(http::MANILA_MICROVERSION)
    );
    os.volume().list_volumes(&meta).await?;
    let v = &mock.seen("GET /volume/v3/volumes/detail")[0];
    assert_eq!(
        v.headers.get("openstack-api-version"),
        Some(&format!("volume {}", http::CINDER_MICROVERSION))
    );
    let img = os.image().find_image("debian").await?;
    assert_eq!(img.id, "i1");
    assert_eq!(
        mock.seen("GET /image/v2/images")[0].target,
        "/image/v2/images?name=debian&status=active"
    );
    assert!(mock.seen("GET /network/v2.0/networks").is_empty());
    assert_eq!(
        os.endpoint(Service::Network).await?,
        format!("{}/network/v2.0", mock.base)
    );
    // a raw call through the same path
    let raw = os
        .request(&Request::get(Service::Image, "images").query("name", "debian"))
        .await?;
    assert_eq!(raw.status, 200);
    Ok(())
}

#[tokio::test]
async fn token_is_renewed_before_it_expires() -> TestResult {
    let mock = MockCloud::start();
    // lives 2 s: renewed after half its lifetime
    mock.route(AUTH, vec![mock.token_response(2)]);
    mock.route(
        "GET /compute/v2.1/limits",
        vec![canned(200, fixture("nova/limits-get-resp.v2.57.json"))],
    );
    let os = OpenStack::connect_with(&mock.config(), fast()).await?;
    os.compute().limits().await?;
    assert_eq!(mock.seen(AUTH).len(), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let l = os.compute().limits().await?;
    assert_eq!(l.max_total_instances, 10);
    assert_eq!(mock.seen(AUTH).len(), 2);
    Ok(())
}

#[tokio::test]
async fn auth_failures_and_unreachable_clouds_explain_themselves() -> TestResult {
    let mock = MockCloud::start();
    mock.route(
        AUTH,
        vec![Canned {
            headers: vec![("x-openstack-request-id".into(), "req-k1".into())],
            ..canned(401, fixture("errors/keystone-401-unauthorized.json"))
        }],
    );
    let err = OpenStack::connect_with(&mock.config(), fast()).await.err();
    let msg = err.as_ref().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        matches!(
            err,
            Some(OpenStackError::Auth {
                status: Some(401),
                ..
            })
        ),
        "{err:?}"
    );
    assert!(
        msg.contains("/identity/v3 failed")
            && msg.contains("user \"demo\"")
            && msg.contains("project \"demo\"")
            && msg.contains("The request you have made requires authentication.")
            && msg.contains("req-k1"),
        "{msg}"
    );
    assert!(!msg.contains("pa55w0rd") && !format!("{err:?}").contains("pa55w0rd"));
    assert_eq!(mock.seen(AUTH).len(), 1, "401 is not retried");

    // nothing listens: refused, retried, then a transport error naming the URL
    let closed = TcpListener::bind("127.0.0.1:0")?;
    let port = closed.local_addr()?.port();
    drop(closed);
    let mut cfg = mock.config();
    cfg.auth_url = format!("http://127.0.0.1:{port}/v3");
    let err = OpenStack::connect_with(&cfg, fast()).await.err();
    let msg = err.as_ref().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        matches!(err, Some(OpenStackError::Transport { .. })),
        "{err:?}"
    );
    assert!(
        msg.contains(&format!(
            "keystone POST http://127.0.0.1:{port}/v3/auth/tokens"
        )) && msg.contains("after 4 attempts"),
        "{msg}"
    );
    Ok(())
}
