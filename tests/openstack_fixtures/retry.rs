//! The retry policy's decisions: what is retried, how often, after how long.

use super::*;

#[test]
fn retry_policy_decisions() {
    use Failure::*;
    let status = |s: u16| Status {
        status: s,
        retry_after: None,
        over_quota: false,
    };
    let (get, post, delete, put) = (
        Replay::of(&Method::GET),
        Replay::of(&Method::POST),
        Replay::of(&Method::DELETE),
        Replay::of(&Method::PUT),
    );
    assert_eq!(post, Replay::Once);
    // nothing reached the server: anything may be sent again
    assert!(RetryPolicy::is_retryable(post, &Connect, false));
    // 5xx, 429 and broken connections only when repeating is harmless: a create or an
    // action is looked up by its caller first, never sent again blindly
    for f in [
        status(429),
        status(500),
        status(502),
        status(503),
        status(504),
        Transport,
    ] {
        assert!(RetryPolicy::is_retryable(get, &f, false));
        assert!(RetryPolicy::is_retryable(delete, &f, false));
        assert!(RetryPolicy::is_retryable(put, &f, false));
        assert!(!RetryPolicy::is_retryable(post, &f, false), "{f:?}");
        assert!(!RetryPolicy::is_retryable(Replay::Once, &f, true), "{f:?}");
    }
    // 409 only on request, never over-quota
    assert!(!RetryPolicy::is_retryable(delete, &status(409), false));
    assert!(RetryPolicy::is_retryable(delete, &status(409), true));
    let over = Status {
        status: 409,
        retry_after: None,
        over_quota: true,
    };
    assert!(!RetryPolicy::is_retryable(delete, &over, true));
    // never
    for s in [400, 401, 403, 404, 413, 501] {
        assert!(!RetryPolicy::is_retryable(get, &status(s), true), "{s}");
    }

    let p = RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(350),
        max_retry_after: Duration::from_secs(5),
    };
    for attempt in 1..=6 {
        let ceiling = Duration::from_millis((100u64 << (attempt - 1)).min(350));
        for _ in 0..50 {
            let d = p.backoff(attempt);
            assert!(
                d <= ceiling && d >= ceiling / 2,
                "attempt {attempt}: {d:?} vs {ceiling:?}"
            );
        }
    }
    assert!(p.next_delay(3, get, &status(503), false).is_some());
    assert_eq!(
        p.next_delay(4, get, &status(503), false),
        None,
        "attempts are bounded"
    );
    assert_eq!(p.next_delay(1, get, &status(404), false), None);
    let ra = |secs| Status {
        status: 429,
        retry_after: Some(Duration::from_secs(secs)),
        over_quota: false,
    };
    assert_eq!(
        p.next_delay(1, get, &ra(2), false),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        p.next_delay(1, get, &ra(600), false),
        Some(Duration::from_secs(5)),
        "capped"
    );
    assert_eq!(http::parse_retry_after("7"), Some(Duration::from_secs(7)));
    assert_eq!(
        http::parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
        Some(Duration::ZERO)
    );
    assert_eq!(http::parse_retry_after("soon"), None);
}
