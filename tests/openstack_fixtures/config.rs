//! clouds.yaml, secure.yaml and OS_* variables read as the `openstack` CLI does; secrets never printed.

use super::*;

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
