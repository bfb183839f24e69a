//! Nova's shelve actions, what `stop` and `start` send: `shelve` (the guest shuts down, the
//! root disk becomes a snapshot image, and with the cloud's default `shelved_offload_time = 0`
//! the server is offloaded: on no host, its vCPUs, RAM and GPUs handed back in Placement),
//! `shelveOffload` (admin-only by default: for a server left SHELVED) and `unshelve`. Each is
//! `POST /servers/{id}/action`, 202 with no body.

use serde_json::json;

use super::compute::Compute;
use super::error::OpenStackError;
use super::http::Request;
use super::service::Service;

/// One of Nova's shelve actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShelveAction {
    Shelve,
    ShelveOffload,
    Unshelve,
}

impl ShelveAction {
    /// The body of `POST /servers/{id}/action`: `{"shelve": null}` and so on (unshelve's
    /// `null` picks any availability zone the scheduler likes, from microversion 2.77 on).
    pub fn body(self) -> serde_json::Value {
        let name = match self {
            ShelveAction::Shelve => "shelve",
            ShelveAction::ShelveOffload => "shelveOffload",
            ShelveAction::Unshelve => "unshelve",
        };
        json!({ name: null })
    }
}

impl Compute {
    /// Sends one shelve action to server `id`.
    pub async fn shelve_action(
        &self,
        id: &str,
        action: ShelveAction,
    ) -> Result<(), OpenStackError> {
        let path = format!("servers/{id}/action");
        self.session
            .send(&Request::post(Service::Compute, path, action.body()))
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_the_ones_novas_api_samples_show() {
        assert_eq!(
            ShelveAction::Shelve.body().to_string(),
            r#"{"shelve":null}"#
        );
        assert_eq!(
            ShelveAction::ShelveOffload.body().to_string(),
            r#"{"shelveOffload":null}"#
        );
        assert_eq!(
            ShelveAction::Unshelve.body().to_string(),
            r#"{"unshelve":null}"#
        );
    }
}
