//! Error envelopes of every service, their classification, and snippets without secrets.

use super::*;

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
        retry_after: None,
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
        retry_after: None,
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
