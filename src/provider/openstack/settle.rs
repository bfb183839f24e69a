//! Creates, actions and deletes through a flaky cloud. A call whose outcome is unknown (no
//! answer, a lost answer, a 5xx, a 429, a 409) may have taken effect, so it is never sent
//! again blindly: the result is looked up first (by name and the cluster's tag, or by what
//! the action leaves behind) and adopted if it is there, the call made again if not. Bounded,
//! with exponential backoff and jitter, honouring `Retry-After`. A definite refusal (any
//! other 4xx) fails at once with the cloud's message.
//!
//! The decisions ([`after_failure`], [`adoption`]) are plain functions; [`settle`] and
//! [`confirm_gone`] run them.

use std::future::Future;
use std::time::Duration;

use rand::Rng;

use crate::openstack::error::Certainty;
use crate::openstack::{OpenStackError, Remote, RuleCreate, SecurityGroupRule};
use crate::provider::ProviderError;

/// How often a create or an action is tried, and the waits between tries.
#[derive(Debug, Clone)]
pub struct SettlePolicy {
    /// Attempts in all, the first included.
    pub attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Longest `Retry-After` honoured.
    pub max_retry_after: Duration,
}

impl Default for SettlePolicy {
    fn default() -> Self {
        SettlePolicy {
            attempts: 6,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// What to do after a failed create or action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Stop with this error: the cloud refused, or the attempts are spent.
    GiveUp,
    /// Wait this long, then look the result up (adopt it, or try again if absent).
    LookUp(Duration),
}

/// The decision after the `attempts`-th failed try (1-based). `jitter` in [0, 1] scales the
/// backoff between its half and its whole (`rand` in [`settle`], fixed in tests).
pub fn after_failure(
    policy: &SettlePolicy,
    certainty: Certainty,
    attempts: u32,
    jitter: f64,
) -> Next {
    let Certainty::Ambiguous { retry_after } = certainty else {
        return Next::GiveUp;
    };
    if attempts >= policy.attempts {
        // Still look once: the last try may have worked.
        return Next::LookUp(Duration::ZERO);
    }
    let wait = match retry_after {
        Some(d) => d.min(policy.max_retry_after),
        None => {
            let factor = 2u32.saturating_pow(attempts.saturating_sub(1).min(20));
            let ceiling = policy
                .base_delay
                .saturating_mul(factor)
                .min(policy.max_delay);
            ceiling.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
        }
    };
    Next::LookUp(wait)
}

/// What to do with a resource found by name after an unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adoption {
    /// Ours and tagged: take it as it is.
    Adopt,
    /// Ours by name, its tag lost (or not yet set): take it and tag it.
    AdoptAndTag,
    /// Another cluster's (it carries another `hvd-cluster:` tag): leave it alone.
    NotOurs,
}

/// By the found resource's tags: `ours` is this cluster's tag.
pub fn adoption(tags: &[String], ours: &str) -> Adoption {
    if tags.iter().any(|t| t == ours) {
        Adoption::Adopt
    } else if tags.iter().any(|t| t.starts_with("hvd-cluster:")) {
        Adoption::NotOurs
    } else {
        Adoption::AdoptAndTag
    }
}

/// The error once a create or action is given up on: the call and what the cloud said
/// (shortened and escaped), how many tries, and that `up` resumes.
pub fn gave_up(e: &OpenStackError, attempts: u32) -> ProviderError {
    let tries = if attempts > 1 {
        format!(" (tried {attempts} times, looking the result up after each)")
    } else {
        String::new()
    };
    unsettled(e, tries)
}

/// The look-up after the `attempts`-th try failed itself.
fn look_up_failed(e: &OpenStackError, attempts: u32) -> ProviderError {
    unsettled(
        e,
        format!(" (looking up whether try {attempts} took effect)"),
    )
}

fn unsettled(e: &OpenStackError, tries: String) -> ProviderError {
    if !e.certainty().is_ambiguous() {
        return ProviderError::from_openstack(e);
    }
    ProviderError::Unsettled {
        call: crate::input::shown_message(&e.to_string(), 400),
        tries,
    }
}

/// Runs `attempt` until it succeeds; after an unknown outcome waits, then runs `look_up`:
/// `Some` is adopted, `None` means try again. Never two creates without a look-up between.
pub async fn settle<T, A, AF, L, LF>(
    policy: &SettlePolicy,
    mut attempt: A,
    mut look_up: L,
) -> Result<T, ProviderError>
where
    A: FnMut() -> AF,
    AF: Future<Output = Result<T, OpenStackError>>,
    L: FnMut() -> LF,
    LF: Future<Output = Result<Option<T>, OpenStackError>>,
{
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let err = match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let jitter = rand::rng().random_range(0.0..=1.0);
        match after_failure(policy, err.certainty(), attempts, jitter) {
            Next::GiveUp => return Err(gave_up(&err, attempts)),
            Next::LookUp(wait) => {
                tokio::time::sleep(wait).await;
                match look_up().await {
                    Ok(Some(found)) => return Ok(found),
                    Ok(None) if attempts < policy.attempts => continue,
                    Ok(None) => return Err(gave_up(&err, attempts)),
                    Err(lookup_err) => return Err(look_up_failed(&lookup_err, attempts)),
                }
            }
        }
    }
}

/// A delete whose outcome is unknown after its retries: done if `exists` says it is gone.
pub async fn confirm_gone<D, L, LF>(deleted: D, exists: L) -> Result<(), ProviderError>
where
    D: Future<Output = Result<(), OpenStackError>>,
    L: FnOnce() -> LF,
    LF: Future<Output = Result<bool, OpenStackError>>,
{
    match deleted.await {
        Ok(()) => Ok(()),
        Err(e) if e.certainty().is_ambiguous() => match exists().await {
            Ok(false) => Ok(()),
            Ok(true) => Err(gave_up(&e, 1)),
            Err(lookup_err) => Err(look_up_failed(&lookup_err, 1)),
        },
        Err(e) => Err(ProviderError::from_openstack(&e)),
    }
}

/// Whether an existing rule is the one `want` would create (neutron's own uniqueness test:
/// direction, ethertype, protocol, ports, remote).
pub(super) fn rule_matches(want: &RuleCreate, have: &SecurityGroupRule) -> bool {
    let (min, max) = match want.port_range {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    let (prefix, group) = match &want.remote {
        // neutron may store an any-address prefix as no prefix
        Remote::Cidr(c) if c == "0.0.0.0/0" || c == "::/0" => {
            (have.remote_ip_prefix.as_deref().filter(|p| p == c), None)
        }
        Remote::Cidr(c) => (Some(c.as_str()), None),
        Remote::Group(g) => (None, Some(g.as_str())),
        Remote::Any => (None, None),
    };
    have.direction == want.direction.as_str()
        && have.ethertype == want.ethertype.as_str()
        && have.protocol.as_deref().map(str::to_ascii_lowercase)
            == want.protocol.as_deref().map(str::to_ascii_lowercase)
        && have.port_range_min == min
        && have.port_range_max == max
        && have.remote_ip_prefix.as_deref() == prefix
        && have.remote_group_id.as_deref() == group
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openstack::error::{certainty_of_status, classify, ApiError};

    fn api(status: u16, retry_after: Option<Duration>) -> OpenStackError {
        classify(ApiError {
            service: "neutron",
            method: "POST".into(),
            path: "/v2.0/security-groups".into(),
            status,
            code: None,
            message: "boom \u{1b}[31m".into(),
            request_id: None,
            retry_after,
        })
    }

    #[test]
    fn failures_are_definite_or_ambiguous() {
        let ambiguous = Certainty::Ambiguous { retry_after: None };
        for s in [409, 429, 500, 502, 503, 504] {
            assert_eq!(api(s, None).certainty(), ambiguous, "{s}");
        }
        for s in [400, 401, 403, 404, 405, 413, 422, 501] {
            assert_eq!(api(s, None).certainty(), Certainty::Definite, "{s}");
        }
        let later = Some(Duration::from_secs(3));
        assert_eq!(
            api(429, later).certainty(),
            Certainty::Ambiguous { retry_after: later }
        );
        assert!(certainty_of_status(503, later).is_ambiguous());
        let reset = OpenStackError::Transport {
            service: "neutron",
            method: "POST".into(),
            url: "http://x/v2.0/security-groups".into(),
            message: "connection reset by peer".into(),
        };
        assert_eq!(reset.certainty(), ambiguous);
        let lost = OpenStackError::Decode {
            service: "nova",
            method: "POST".into(),
            path: "/servers".into(),
            message: "EOF".into(),
            snippet: String::new(),
        };
        assert_eq!(
            lost.certainty(),
            ambiguous,
            "a garbled 2xx may have created it"
        );
        // over quota is a refusal, whatever its status
        let quota = classify(ApiError {
            code: Some("OverQuota".into()),
            ..match api(409, None) {
                OpenStackError::Api(e) => *e,
                _ => unreachable!(),
            }
        });
        assert!(quota.is_quota_exceeded());
        assert_eq!(quota.certainty(), Certainty::Definite);
        assert_eq!(
            OpenStackError::Invalid("x".into()).certainty(),
            Certainty::Definite
        );
    }

    #[test]
    fn retry_and_adopt_decisions() {
        let p = SettlePolicy {
            attempts: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
            max_retry_after: Duration::from_secs(5),
        };
        let amb = Certainty::Ambiguous { retry_after: None };
        assert_eq!(after_failure(&p, Certainty::Definite, 1, 0.5), Next::GiveUp);
        assert_eq!(
            after_failure(&p, amb, 1, 1.0),
            Next::LookUp(Duration::from_millis(100))
        );
        assert_eq!(
            after_failure(&p, amb, 1, 0.0),
            Next::LookUp(Duration::from_millis(50))
        );
        assert_eq!(
            after_failure(&p, amb, 3, 1.0),
            Next::LookUp(Duration::from_millis(350)),
            "capped"
        );
        assert_eq!(
            after_failure(&p, amb, 4, 1.0),
            Next::LookUp(Duration::ZERO),
            "the last try is looked up at once, then given up"
        );
        let ra = |s| Certainty::Ambiguous {
            retry_after: Some(Duration::from_secs(s)),
        };
        assert_eq!(
            after_failure(&p, ra(2), 1, 0.0),
            Next::LookUp(Duration::from_secs(2))
        );
        assert_eq!(
            after_failure(&p, ra(600), 1, 0.0),
            Next::LookUp(Duration::from_secs(5))
        );

        let ours = "hvd-cluster:a";
        assert_eq!(adoption(&[ours.to_string()], ours), Adoption::Adopt);
        assert_eq!(adoption(&[], ours), Adoption::AdoptAndTag);
        assert_eq!(adoption(&["x".into()], ours), Adoption::AdoptAndTag);
        assert_eq!(adoption(&["hvd-cluster:b".into()], ours), Adoption::NotOurs);
    }

    #[test]
    fn giving_up_names_the_call_and_says_up_resumes() {
        let e = gave_up(&api(500, None), 6).to_string();
        assert!(
            e.starts_with("neutron POST /v2.0/security-groups: HTTP 500: boom \\u{1b}[31m"),
            "{e}"
        );
        assert!(e.contains("tried 6 times"), "{e}");
        assert!(e.contains("running `up` again resumes"), "{e}");
        let e = gave_up(&api(400, None), 1).to_string();
        assert!(!e.contains("resumes"), "a refusal is not retried: {e}");
    }

    fn run<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn a_lost_create_is_adopted_not_made_twice() {
        use std::cell::Cell;
        let p = SettlePolicy {
            attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            max_retry_after: Duration::from_millis(5),
        };
        // created, answer lost: one create, one look-up that adopts it
        let (creates, lookups) = (Cell::new(0), Cell::new(0));
        let r = run(settle(
            &p,
            || async {
                creates.set(creates.get() + 1);
                Err::<&str, _>(api(503, None))
            },
            || async {
                lookups.set(lookups.get() + 1);
                Ok(Some("adopted"))
            },
        ));
        assert_eq!(r.ok(), Some("adopted"));
        assert_eq!((creates.get(), lookups.get()), (1, 1));
        // not created: looked up, created again
        let (creates, lookups) = (Cell::new(0), Cell::new(0));
        let r = run(settle(
            &p,
            || async {
                creates.set(creates.get() + 1);
                if creates.get() == 1 {
                    Err(api(500, None))
                } else {
                    Ok("made")
                }
            },
            || async {
                lookups.set(lookups.get() + 1);
                Ok(None)
            },
        ));
        assert_eq!(r.ok(), Some("made"));
        assert_eq!((creates.get(), lookups.get()), (2, 1));
        // a refusal: no look-up, no second try
        let (creates, lookups) = (Cell::new(0), Cell::new(0));
        let r = run(settle(
            &p,
            || async {
                creates.set(creates.get() + 1);
                Err::<&str, _>(api(400, None))
            },
            || async {
                lookups.set(lookups.get() + 1);
                Ok(None)
            },
        ));
        assert!(r.is_err());
        assert_eq!((creates.get(), lookups.get()), (1, 0));
        // bounded: every try looked up, then given up
        let (creates, lookups) = (Cell::new(0), Cell::new(0));
        let r = run(settle(
            &p,
            || async {
                creates.set(creates.get() + 1);
                Err::<&str, _>(api(502, None))
            },
            || async {
                lookups.set(lookups.get() + 1);
                Ok(None)
            },
        ));
        assert!(r.is_err());
        assert_eq!((creates.get(), lookups.get()), (3, 3));
    }

    #[test]
    fn a_lost_delete_counts_when_the_resource_is_gone() {
        assert!(run(confirm_gone(async { Err(api(500, None)) }, || async {
            Ok(false)
        }))
        .is_ok());
        assert!(run(confirm_gone(async { Err(api(500, None)) }, || async {
            Ok(true)
        }))
        .is_err());
        assert!(run(confirm_gone(async { Err(api(400, None)) }, || async {
            Ok(false)
        }))
        .is_err());
    }

    #[test]
    fn a_rule_is_found_again_by_what_makes_it_unique() {
        let want = RuleCreate {
            security_group_id: "g".into(),
            protocol: Some("tcp".into()),
            port_range: Some((22, 22)),
            remote: Remote::Cidr("203.0.113.0/24".into()),
            ..RuleCreate::default()
        };
        let have = SecurityGroupRule {
            id: "r".into(),
            security_group_id: "g".into(),
            direction: "ingress".into(),
            ethertype: "IPv4".into(),
            protocol: Some("tcp".into()),
            port_range_min: Some(22),
            port_range_max: Some(22),
            remote_ip_prefix: Some("203.0.113.0/24".into()),
            remote_group_id: None,
            description: Some("anything".into()),
        };
        assert!(rule_matches(&want, &have));
        let other_port = SecurityGroupRule {
            port_range_max: Some(23),
            ..have.clone()
        };
        assert!(!rule_matches(&want, &other_port));
        let egress = SecurityGroupRule {
            direction: "egress".into(),
            ..have.clone()
        };
        assert!(!rule_matches(&want, &egress));
        let by_group = RuleCreate {
            remote: Remote::Group("peer".into()),
            port_range: None,
            protocol: None,
            ..want.clone()
        };
        let group_rule = SecurityGroupRule {
            protocol: None,
            port_range_min: None,
            port_range_max: None,
            remote_ip_prefix: None,
            remote_group_id: Some("peer".into()),
            ..have.clone()
        };
        assert!(rule_matches(&by_group, &group_rule));
        assert!(!rule_matches(&want, &group_rule));
    }
}
