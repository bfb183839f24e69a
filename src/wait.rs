//! One way to wait for something: [`wait_until`] polls a probe until it is ready, fails, or
//! the deadline passes, sleeping between tries; the probe says what it is still waiting for,
//! so a timeout can say it too. The probe is a closure returning a future (`move || async
//! move { .. }`), which keeps the wait `Send` inside a provider's boxed futures.

use std::future::Future;
use std::time::{Duration, Instant};

/// What one try found.
pub enum Probe<T, E> {
    /// Done, with its result.
    Ready(T),
    /// Not yet: what is still awaited (for progress and for the timeout message).
    Waiting(String),
    /// Will not get there: stop now.
    Failed(E),
}

/// Why a wait ended without its result.
#[derive(Debug)]
pub enum WaitError<E> {
    Failed(E),
    /// The deadline passed; `last` is what the last try was still waiting for.
    TimedOut {
        last: String,
        secs: u64,
    },
}

/// Tries `probe` until it is ready or fails; after a try that is still waiting, gives up once
/// `deadline` has passed since the first try, else sleeps `every` and tries again.
pub async fn wait_until<T, E, F, Fut>(
    deadline: Duration,
    every: Duration,
    mut probe: F,
) -> Result<T, WaitError<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Probe<T, E>>,
{
    let started = Instant::now();
    loop {
        match probe().await {
            Probe::Ready(value) => return Ok(value),
            Probe::Failed(e) => return Err(WaitError::Failed(e)),
            Probe::Waiting(last) => {
                if started.elapsed() > deadline {
                    return Err(WaitError::TimedOut {
                        last,
                        secs: deadline.as_secs(),
                    });
                }
                tokio::time::sleep(every).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ready_failed_and_timed_out() {
        let tries = std::sync::atomic::AtomicU32::new(0);
        let tries = &tries;
        let got: Result<u32, WaitError<()>> =
            wait_until(Duration::from_secs(5), Duration::ZERO, move || async move {
                let tries = tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                if tries < 3 {
                    Probe::Waiting(format!("try {tries}"))
                } else {
                    Probe::Ready(tries)
                }
            })
            .await;
        assert_eq!(got.ok(), Some(3));
        let failed: Result<(), WaitError<&str>> =
            wait_until(Duration::from_secs(5), Duration::ZERO, || async {
                Probe::Failed("gone")
            })
            .await;
        assert!(matches!(failed, Err(WaitError::Failed("gone"))));
        let late: Result<(), WaitError<()>> =
            wait_until(Duration::ZERO, Duration::ZERO, || async {
                Probe::Waiting("still building".into())
            })
            .await;
        assert!(
            matches!(late, Err(WaitError::TimedOut { ref last, secs: 0 }) if last == "still building")
        );
    }
}
