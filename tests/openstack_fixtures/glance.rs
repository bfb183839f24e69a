//! Glance: unwrapped bodies and which image a name picks.

use super::*;

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
