//! Manila: shares, access rules, export locations, limits, request bodies.

use super::*;

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
