//! The client-side rate limit: a token bucket.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// A token bucket: `qps` calls a second on average, bursts of up to `burst`.
#[derive(Debug)]
pub struct RateLimiter {
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl RateLimiter {
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            bucket: Mutex::new(Bucket {
                qps: qps.max(0.001),
                burst,
                tokens: burst,
                last: Instant::now(),
            }),
        }
    }

    /// Waits for a token. Callers are served in the order they ask.
    pub async fn acquire(&self) {
        let wait = {
            let mut bucket = self.bucket.lock().await;
            let now = Instant::now();
            let tokens = bucket.filled(now) - 1.0;
            bucket.tokens = tokens;
            bucket.last = now;
            (tokens < 0.0).then(|| Duration::from_secs_f64(-tokens / bucket.qps))
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }

    /// Raises the rate and the burst to at least `qps` and `burst`, from now on.
    pub async fn at_least(&self, qps: f64, burst: u32) {
        let mut bucket = self.bucket.lock().await;
        let now = Instant::now();
        bucket.tokens = bucket.filled(now);
        bucket.last = now;
        bucket.qps = bucket.qps.max(qps);
        bucket.burst = bucket.burst.max(f64::from(burst));
    }
}

impl Bucket {
    /// The tokens at `now`.
    fn filled(&self, now: Instant) -> f64 {
        (self.tokens + now.duration_since(self.last).as_secs_f64() * self.qps).min(self.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long `n` acquisitions take, in the paused clock's seconds.
    async fn take(limiter: &RateLimiter, n: usize) -> f64 {
        let started = Instant::now();
        for _ in 0..n {
            limiter.acquire().await;
        }
        started.elapsed().as_secs_f64()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_free_then_calls_come_at_the_rate() {
        let limiter = RateLimiter::new(10.0, 5);
        assert_eq!(take(&limiter, 5).await, 0.0);
        let took = take(&limiter, 10).await;
        assert!((took - 1.0).abs() < 0.01, "{took}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_raised_rate_holds_from_then_on_and_never_lowers() {
        let limiter = RateLimiter::new(10.0, 5);
        take(&limiter, 5).await;
        limiter.at_least(100.0, 50).await;
        limiter.at_least(1.0, 1).await;
        let took = take(&limiter, 100).await;
        assert!((took - 1.0).abs() < 0.02, "{took}");
    }
}
