//! The client-side rate limit: a token bucket.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// A token bucket: `qps` calls a second on average, bursts of up to `burst`.
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    bucket: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: qps.max(0.001),
            burst,
            bucket: Mutex::new((burst, Instant::now())),
        }
    }

    /// Waits for a token. Callers are served in the order they ask.
    pub async fn acquire(&self) {
        let wait = {
            let mut bucket = self.bucket.lock().await;
            let now = Instant::now();
            let (tokens, last) = *bucket;
            let tokens =
                (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst) - 1.0;
            *bucket = (tokens, now);
            (tokens < 0.0).then(|| Duration::from_secs_f64(-tokens / self.qps))
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }
}
