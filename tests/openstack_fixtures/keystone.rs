//! Keystone: tokens and the service catalog from recorded responses.

use super::*;

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
        "http://example.com/identity/v3",
        "the catalog's unversioned Keystone URL gets the v3 the calls go under"
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
        "http://localhost:5000/v3"
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

#[test]
fn application_credentials_and_access_rules_from_keystones_samples() -> TestResult {
    use hvd_cluster::openstack::identity::{parse_created, AppCredential, StoredRule};
    let made = parse_created(&fixture(
        "keystone/application-credential-create-response.json",
    ))?;
    assert_eq!(made.credential.id, "58d61ff8e6e34accb35874016d1dba8b");
    assert_eq!(made.credential.name, "monitoring");
    assert!(!made.credential.unrestricted);
    assert_eq!(made.secret.expose(), "rEaqvJka48mpv");
    assert_eq!(
        format!("{:?}", made.secret),
        "***",
        "the secret never prints"
    );

    let list: Vec<AppCredential> = at(
        &fixture("keystone/application-credential-list-response.json"),
        "application_credentials",
    );
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].access_rules.as_deref(), Some(&[][..]));
    let rules = list[1].access_rules.clone().unwrap_or_default();
    assert_eq!(
        (
            rules[0].service.as_str(),
            rules[0].method.as_str(),
            rules[0].path.as_str()
        ),
        ("monitoring", "GET", "/v2.0/metrics")
    );

    let stored: Vec<StoredRule> = at(
        &fixture("keystone/access-rules-list-response.json"),
        "access_rules",
    );
    assert_eq!(stored[0].id, "07d719df00f349ef8de77d542edf010c");
    assert_eq!(stored[0].path, "/v2.0/metrics");
    Ok(())
}
