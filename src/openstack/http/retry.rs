//! Which failures are tried again, how often and after how long: bounded, with exponential
//! backoff and jitter, honouring `Retry-After`.

use std::time::Duration;

use rand::Rng;

use super::Method;

/// When and how long to retry.
///
/// Retried: connection refused / not established (any call: nothing reached the server);
/// other transport failures such as a reset mid-call or a timeout, and HTTP 429, 500, 502,
/// 503, 504 (honouring `Retry-After`), only for calls that may be sent twice
/// ([`Replay::Safe`]: GET, PUT, DELETE, HEAD, unless marked otherwise). A create or an action
/// ([`Replay::Once`]) is never sent again blindly: its caller looks the result up first
/// (`provider::openstack::settle`). 409 only when the caller opted in
/// ([`super::Request::retry_on_conflict`]) and it is not over-quota: the cloud refused it.
/// Nothing else.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Longest `Retry-After` honoured.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(15),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// Whether a call may be sent again when its outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Sending it twice does no more than sending it once (GET, PUT of a whole value, DELETE).
    Safe,
    /// It may have taken effect although no answer came (a create, an action): only the
    /// caller can tell, by looking the result up.
    Once,
}

impl Replay {
    /// By HTTP method: POST and PATCH are [`Replay::Once`].
    pub fn of(method: &Method) -> Replay {
        if matches!(*method, Method::POST | Method::PATCH) {
            Replay::Once
        } else {
            Replay::Safe
        }
    }
}

/// How one attempt failed, for the retry decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No connection was made (refused, DNS, unreachable).
    Connect,
    /// The connection broke or timed out after the request may have been sent.
    Transport,
    Status {
        status: u16,
        retry_after: Option<Duration>,
        over_quota: bool,
    },
}

impl RetryPolicy {
    pub fn is_retryable(replay: Replay, failure: &Failure, retry_on_conflict: bool) -> bool {
        let safe = replay == Replay::Safe;
        match *failure {
            Failure::Connect => true,
            Failure::Transport => safe,
            Failure::Status {
                status, over_quota, ..
            } => match status {
                429 | 500 | 502 | 503 | 504 => safe,
                409 => retry_on_conflict && !over_quota,
                _ => false,
            },
        }
    }

    /// Exponential backoff for the `attempt`-th retry (1-based), with jitter: a random
    /// duration in [d/2, d] where d = min(max_delay, base_delay * 2^(attempt-1)).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(20));
        let ceiling = self.base_delay.saturating_mul(factor).min(self.max_delay);
        ceiling.mul_f64(rand::rng().random_range(0.5..=1.0))
    }

    /// The wait before the next attempt, or `None` to give up. `attempts` is how many were
    /// made so far.
    pub fn next_delay(
        &self,
        attempts: u32,
        replay: Replay,
        failure: &Failure,
        retry_on_conflict: bool,
    ) -> Option<Duration> {
        if attempts >= self.max_attempts || !Self::is_retryable(replay, failure, retry_on_conflict)
        {
            return None;
        }
        match failure {
            Failure::Status {
                retry_after: Some(d),
                ..
            } => Some((*d).clamp(Duration::from_millis(50), self.max_retry_after)),
            _ => Some(self.backoff(attempts)),
        }
    }
}

/// `Retry-After`: delta-seconds or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let delta = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(delta.to_std().unwrap_or(Duration::ZERO))
}
