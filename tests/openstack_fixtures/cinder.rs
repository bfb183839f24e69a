//! Cinder: volumes, limits, request bodies.

use super::*;

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
