//! Durations written the way Kubernetes and Go write them: `90s`, `1m30s`, `500ms`, `1h`.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {0:?}: expected a sequence of numbers with units h, m, s, ms, us or ns, like 90s or 1m30s"
)]
pub struct DurationError(pub String);

/// Parses a Go-style duration (no sign; at least one number with a unit).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let err = || DurationError(text.to_owned());
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(err());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (number, tail) = rest.split_at(number_len);
        let value: f64 = number.parse().map_err(|_| err())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(err()),
        };
        // Each part fits, but their sum may not: a value written to stop a worker is an error.
        total = total
            .checked_add(Duration::try_from_secs_f64(value * seconds).map_err(|_| err())?)
            .ok_or_else(err)?;
        rest = tail;
    }
    Ok(total)
}

/// Writes `duration` as [`parse`] reads it, to the millisecond: `1h2m3s`, `1m40s`, `2.5s`,
/// `100ms`, `0ms`.
pub fn format(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let (hours, rest) = (millis / 3_600_000, millis % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    let (seconds, millis) = (rest / 1000, rest % 1000);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    if seconds > 0 || millis > 0 {
        out.push_str(&seconds.to_string());
        if millis > 0 {
            out.push_str(format!(".{millis:03}").trim_end_matches('0'));
        }
        out.push('s');
    }
    out
}

/// A wait that doubles after each failure, from `first` up to `max`, and starts over after a
/// success. Each wait is longer by up to a fifth, at random ([`JITTER`]): loops that failed
/// together (every watch, when the apiserver restarts) do not retry in lockstep.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            next: first,
        }
    }

    /// The wait after one more failure.
    pub fn failed(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        jittered(wait)
    }

    /// The wait the next failure will get, before its jitter.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// A success: the next failure waits `first` again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// How much longer than its backoff a wait may be, as a fraction of it.
pub const JITTER: f64 = 0.2;

/// `wait`, longer by a random part of [`JITTER`] of it.
fn jittered(wait: Duration) -> Duration {
    use std::hash::BuildHasher;
    // Each RandomState has keys of its own: a random number without a generator to keep.
    let random = std::collections::hash_map::RandomState::new().hash_one(wait);
    let fraction = (random % 1_000_000) as f64 / 1_000_000.0;
    wait.mul_f64(1.0 + JITTER * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_starts_over() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let within = |wait: Duration, secs: u64| {
            let least = Duration::from_secs(secs);
            assert!(
                wait >= least && wait <= least.mul_f64(1.0 + JITTER),
                "{wait:?} for {secs}s"
            );
        };
        for secs in [1, 2, 4, 5, 5] {
            within(backoff.failed(), secs);
        }
        backoff.reset();
        within(backoff.failed(), 1);
    }

    #[test]
    fn waits_that_start_together_spread_out() {
        let waits: std::collections::HashSet<Duration> = (0..50)
            .map(|_| Backoff::new(Duration::from_secs(1), Duration::from_secs(5)).failed())
            .collect();
        assert!(waits.len() > 40, "{} distinct waits of 50", waits.len());
    }

    #[test]
    fn a_sum_past_the_largest_duration_is_an_error() {
        let text = "10000000000000000000s10000000000000000000s";
        assert!(parse("10000000000000000000s").is_ok(), "each part fits");
        assert_eq!(parse(text), Err(DurationError(text.to_owned())));
    }

    #[test]
    fn parses_go_durations() {
        for (text, expected) in [
            ("10s", Duration::from_secs(10)),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1.5h", Duration::from_secs(5400)),
            ("2us", Duration::from_micros(2)),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for text in ["", "10", "s", "-1s", "1x", "1s2", "1..2s", "1e400h"] {
            assert!(parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn format_writes_what_parse_reads() {
        for (duration, text) in [
            (Duration::ZERO, "0ms"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_millis(2500), "2.5s"),
            (Duration::from_secs(100), "1m40s"),
            (Duration::from_secs(3723), "1h2m3s"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_millis(60_050), "1m0.05s"),
        ] {
            assert_eq!(format(duration), text);
            assert_eq!(parse(text).unwrap(), duration, "{text}");
        }
    }
}
