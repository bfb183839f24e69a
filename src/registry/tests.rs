//! The registry module's tests: references, Docker configs, credentials, CA files.

use super::*;

fn creds(user: &str, password: &str) -> Credentials {
    Credentials {
        registry: "reg.example:5443".into(),
        user: user.into(),
        password: password.into(),
        identity_token: false,
        source: "test".into(),
    }
}

fn entry(kept: Kept) -> Credentials {
    match kept {
        Kept::Entry(c) => c,
        other => panic!("not an auths entry: {other:?}"),
    }
}

#[test]
fn the_registry_is_the_first_component_when_it_looks_like_a_host() {
    assert_eq!(registry_of("172.17.0.1:5443/team/hvd:1"), "172.17.0.1:5443");
    assert_eq!(registry_of("nvcr.io/nvidia/pytorch:23.10-py3"), "nvcr.io");
    assert_eq!(registry_of("localhost/x:1"), "localhost");
    assert_eq!(registry_of("horovod/horovod:0.28.1"), DOCKER_HUB);
    assert_eq!(registry_of("ubuntu"), DOCKER_HUB);
}

#[test]
fn docker_login_entries_are_read_in_both_forms() {
    let path = Path::new("/home/u/.docker/config.json");
    let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
    let text = format!(r#"{{"auths":{{"https://reg.example:5443":{{"auth":"{auth}"}}}}}}"#);
    let c = entry(from_docker_config(&text, "reg.example:5443", path).unwrap());
    assert_eq!((c.user.as_str(), c.password.as_str()), ("alice", "s3cr:et"));
    let text = r#"{"auths":{"reg.example:5443":{"username":"bob","password":"pw"}}}"#;
    let c = entry(from_docker_config(text, "reg.example:5443", path).unwrap());
    assert_eq!((c.user.as_str(), c.password.as_str()), ("bob", "pw"));
    // another registry's entry is not used
    assert_eq!(
        from_docker_config(text, "other.example", path),
        Ok(Kept::Nothing)
    );
    assert_eq!(
        from_docker_config("{}", "reg.example:5443", path),
        Ok(Kept::Nothing)
    );
    // an identity token (docker login against a token server) is handed on as one
    let text = r#"{"auths":{"reg.example:5443":{"auth":"","identitytoken":"eyJ.tok"}}}"#;
    let c = entry(from_docker_config(text, "reg.example:5443", path).unwrap());
    assert!(c.identity_token);
    let json: serde_json::Value = serde_json::from_str(&c.docker_config_json()).unwrap();
    assert_eq!(
        json["auths"]["reg.example:5443"]["identitytoken"],
        "eyJ.tok"
    );
    assert!(json["auths"]["reg.example:5443"].get("auth").is_none());
}

#[test]
fn a_helper_is_looked_for_first_as_docker_does() {
    let path = Path::new("/home/u/.docker/config.json");
    let both = r#"{"auths":{"reg.example:5443":{}},"credsStore":"desktop","credHelpers":{"reg.example:5443":"pass"}}"#;
    assert_eq!(
        from_docker_config(both, "reg.example:5443", path),
        Ok(Kept::Helper("pass".into()))
    );
    // credHelpers names other registries only: credsStore keeps this one
    assert_eq!(
        from_docker_config(both, "other.example", path),
        Ok(Kept::Helper("desktop".into()))
    );
    // a helper wins over an auths entry holding a password, as in Docker
    let text = r#"{"credsStore":"osxkeychain","auths":{"reg.example:5443":{"username":"u","password":"p"}}}"#;
    assert_eq!(
        from_docker_config(text, "reg.example:5443", path),
        Ok(Kept::Helper("osxkeychain".into()))
    );
    // an empty credsStore is no helper
    let text = r#"{"credsStore":"","auths":{"reg.example:5443":{"username":"u","password":"p"}}}"#;
    assert!(matches!(
        from_docker_config(text, "reg.example:5443", path),
        Ok(Kept::Entry(_))
    ));
    // Docker Hub's helper entry under its index URL
    let hub = r#"{"credHelpers":{"https://index.docker.io/v1/":"gcloud"}}"#;
    assert_eq!(
        from_docker_config(hub, DOCKER_HUB, path),
        Ok(Kept::Helper("gcloud".into()))
    );
}

#[test]
fn hostile_or_unusable_docker_configs_fail_with_the_path_and_no_secret() {
    let path = Path::new("/home/u/.docker/config.json");
    let bad = |text: &str| match from_docker_config(text, "reg.example:5443", path) {
        Err(e) => e.to_string(),
        Ok(c) => panic!("accepted {text}: {c:?}"),
    };
    assert!(bad("{not json").contains("not JSON"));
    assert!(bad(r#"{"auths":{"reg.example:5443":{"auth":"%%%"}}}"#).contains("not base64"));
    let no_colon = base64::engine::general_purpose::STANDARD.encode("justauser");
    assert!(bad(&format!(
        r#"{{"auths":{{"reg.example:5443":{{"auth":"{no_colon}"}}}}}}"#
    ))
    .contains("not user:password"));
    let newline = base64::engine::general_purpose::STANDARD.encode("u:zebra\nquokka");
    let e = bad(&format!(
        r#"{{"auths":{{"reg.example:5443":{{"auth":"{newline}"}}}}}}"#
    ));
    assert!(e.contains("line break") && !e.contains("zebra"), "{e}");
    let e = bad(r#"{"credsStore":"../../bin/sh"}"#);
    assert!(e.contains("cannot name a credential helper"), "{e}");
    let e = bad(r#"{"credsStore":7}"#);
    assert!(e.contains("not a string"), "{e}");
    let e = bad(r#"{"credHelpers":{"reg.example:5443":"ecr-login\u001b[31m"}}"#);
    assert!(!e.contains('\u{1b}'), "escaped: {e}");
    assert!(e.starts_with("/home/u/.docker/config.json: "), "{e}");
}

#[test]
fn credentials_print_no_password_and_make_a_docker_login_config() {
    let c = creds("alice", "hunter2-very-secret");
    let printed = format!("{c} {c:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    let json: serde_json::Value = serde_json::from_str(&c.docker_config_json()).unwrap();
    let auth = json["auths"]["reg.example:5443"]["auth"].as_str().unwrap();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth)
        .unwrap();
    assert_eq!(decoded, b"alice:hunter2-very-secret");
}

#[test]
fn the_ca_file_must_be_a_pem_certificate_and_nothing_more() {
    let dir = std::env::temp_dir().join(format!("hvd-registry-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("profile.toml");
    let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    std::fs::write(dir.join("ca.crt"), cert).unwrap();
    let access = pull_access("ubuntu", Some("ca.crt"), &profile).unwrap();
    assert_eq!(access.ca_pem.as_deref(), Some(cert));
    std::fs::write(
        dir.join("key.pem"),
        format!("{cert}-----BEGIN PRIVATE KEY-----\n"),
    )
    .unwrap();
    let e = pull_access("ubuntu", Some("key.pem"), &profile).unwrap_err();
    assert!(e.to_string().contains("private key"), "{e}");
    std::fs::write(dir.join("junk"), "hello").unwrap();
    assert!(pull_access("ubuntu", Some("junk"), &profile).is_err());
    let e = pull_access("ubuntu", Some("missing.crt"), &profile).unwrap_err();
    assert!(e.to_string().starts_with("container.registry_ca "), "{e}");
    assert!(pull_access("ubuntu", Some("."), &profile).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_docker_config_is_found_where_docker_looks() {
    assert_eq!(
        docker_config_path(Some("/d"), Some("/home/u")),
        Some(PathBuf::from("/d/config.json"))
    );
    assert_eq!(
        docker_config_path(None, Some("/home/u")),
        Some(PathBuf::from("/home/u/.docker/config.json"))
    );
    assert_eq!(docker_config_path(Some(""), None), None);
}

#[test]
fn a_failed_pull_is_one_clear_line() {
    let image = "reg.example:5443/team/hvd:1";
    let e = explain_pull_failure(
        image,
        true,
        "Error response from daemon: Head \"https://reg.example:5443/v2/team/hvd/manifests/1\": unauthorized: authentication required",
    );
    assert!(
        e.starts_with("the registry reg.example:5443 refused the credentials"),
        "{e}"
    );
    let e = explain_pull_failure(image, false, "no basic auth credentials");
    assert!(e.contains("docker login reg.example:5443"), "{e}");
    let e = explain_pull_failure(
        image,
        true,
        "Error response from daemon: manifest for reg.example:5443/team/hvd:1 not found: manifest unknown",
    );
    assert!(
        e.contains("has no image reg.example:5443/team/hvd:1"),
        "{e}"
    );
    let e = explain_pull_failure(image, true, "x509: certificate signed by unknown authority");
    assert!(e.contains("container.registry_ca"), "{e}");
    let e = explain_pull_failure(
        image,
        true,
        "Error response from daemon: Get \"https://reg.example:5443/v2/\": dial tcp 192.0.2.9:5443: connect: connection refused",
    );
    assert!(
        e.ends_with("cannot reach the registry reg.example:5443: dial tcp 192.0.2.9:5443: connect: connection refused"),
        "{e}"
    );
    let e = explain_pull_failure(image, true, "first\nsomething odd \u{1b}[2J\n\n");
    assert!(e.ends_with("something odd \\u{1b}[2J"), "{e}");
}

#[test]
fn a_refused_manifest_is_left_to_the_pull_to_explain() {
    for refused in [
            "no such manifest: reg.example:5443/team/hvd:no-such-tag",
            "errors:\ndenied: requested access to the resource is denied\nunauthorized: authentication required",
        ] {
            assert!(super::registry_refused(refused), "{refused}");
        }
    for other in [
            "docker manifest inspect is only supported on a Docker cli with experimental cli features enabled",
            "Get \"https://reg.example:5443/v2/\": x509: certificate signed by unknown authority",
        ] {
            assert!(!super::registry_refused(other), "{other}");
        }
}
