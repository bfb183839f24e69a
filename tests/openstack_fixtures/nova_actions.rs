//! Nova server actions through the scripted cloud: the `reboot` action's path, body and
//! answers, as Nova's API reference ("Reboot Server (reboot Action)") gives them:
//! `POST /servers/{server_id}/action` with `{"reboot": {"type": "SOFT" | "HARD"}}`, 202 and
//! no body; 409 while the server's state forbids it.

use super::request_path::{canned, fast, Canned, MockCloud, AUTH};
use super::*;
use hvd_cluster::openstack::compute::RebootType;
use hvd_cluster::openstack::error::Certainty;

#[test]
fn the_reboot_body_is_the_api_references() {
    assert_eq!(RebootType::Soft.body(), json!({"reboot": {"type": "SOFT"}}));
    assert_eq!(RebootType::Hard.body(), json!({"reboot": {"type": "HARD"}}));
}

#[tokio::test]
async fn a_soft_reboot_is_one_post_of_the_action_and_a_refusal_is_not_sent_again() -> TestResult {
    let mock = MockCloud::start();
    mock.route(AUTH, vec![mock.token_response(3600)]);
    let action = "POST /compute/v2.1/servers/9168b536-cd40-4630-b43f-b259807c6e87/action";
    mock.route(
        action,
        vec![Canned {
            status: 202,
            headers: Vec::new(),
            body: String::new(),
        }],
    );
    let os = OpenStack::connect_with(&mock.config(), fast()).await?;
    let compute = os.compute();
    compute
        .reboot_server("9168b536-cd40-4630-b43f-b259807c6e87", RebootType::Soft)
        .await?;
    let seen = mock.seen(action);
    assert_eq!(seen.len(), 1);
    let body: Value = serde_json::from_str(&seen[0].body)?;
    assert_eq!(body, json!({"reboot": {"type": "SOFT"}}));
    assert_eq!(
        seen[0]
            .headers
            .get("x-openstack-nova-api-version")
            .map(String::as_str),
        Some(service::NOVA_MICROVERSION)
    );

    // Nova's real 409 to an action in the wrong state: the session does not send it again
    // (an action never is, blindly); the provider's settle looks the server up instead.
    mock.route(
        action,
        vec![canned(
            409,
            fixture("errors/nova-409-conflictingRequest.json"),
        )],
    );
    let refused = compute
        .reboot_server("9168b536-cd40-4630-b43f-b259807c6e87", RebootType::Soft)
        .await
        .err()
        .ok_or("a 409 is an error")?;
    assert_eq!(mock.seen(action).len(), 2, "one more POST, not retried");
    assert!(refused.is_conflict(), "{refused}");
    assert!(matches!(refused.certainty(), Certainty::Ambiguous { .. }));
    assert!(
        refused.to_string().contains("Cannot 'stop' instance"),
        "{refused}"
    );
    Ok(())
}
