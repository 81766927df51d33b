//! The versions of the apiservers that answer at one address. While a control plane is
//! upgraded (or rolled back), apiservers of two versions answer there, and each replica's
//! connection may reach only one of them: written for whichever version the replica's last
//! answer showed, the configuration would flip between its two shapes (with `matchConditions`
//! from 1.28, without before) at every round. So the configuration records in
//! [`SERVED_VERSIONS_ANNOTATION`] each version answered lately and when it last was, and it is
//! written for the oldest of them, the shape every one of those servers understands.
//!
//! A version is recorded when it is first answered; while others are recorded too, it is
//! recorded again once its record is [`REFRESH`] old, and forgotten once it is [`FORGET`] old:
//! a new version becomes the one written for when no replica has answered an older one for
//! that long. When a version appears, the others' records count as at most [`FORGET`] minus
//! [`REFRESH`] old (they may be old only because nothing changed), so a replica still reaching
//! one has [`REFRESH`] to record it again before it is forgotten. One version alone stays
//! recorded as it is: a control plane that is not changing costs no writes; while several are,
//! each costs a write every [`REFRESH`]. A record dated more than [`AHEAD`] after now (a clock
//! far off, a hand edit) counts as made now.
//!
//! Only versions that some replica's connection reaches are heard of: an old apiserver that no
//! replica reaches is not recorded, and the configuration may be written for a newer version
//! while it still serves.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp, Unit};

use super::registration::ServerVersion;

/// The annotation on the MutatingWebhookConfiguration, e.g.
/// `1.27=2026-05-04T10:00:00Z,1.28=2026-05-04T10:02:10Z`.
pub const SERVED_VERSIONS_ANNOTATION: &str = "syncgc.io/served-versions";

/// How old a version's record may grow while other versions are recorded.
pub const REFRESH: SignedDuration = SignedDuration::from_secs(120);
/// How long a version no replica answers stays recorded while others are.
pub const FORGET: SignedDuration = SignedDuration::from_secs(360);
/// How far after now a record may be dated before it counts as made now.
pub const AHEAD: SignedDuration = SignedDuration::from_secs(60);

/// The versions recorded, each with when it was last answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served(BTreeMap<ServerVersion, Timestamp>);

impl Served {
    /// The record in the annotation's value; an entry that does not read is left out (and so
    /// is dropped at the next write).
    pub fn parse(value: &str) -> Self {
        Self(
            value
                .split(',')
                .filter_map(|entry| {
                    let (version, at) = entry.trim().split_once('=')?;
                    Some((version.parse().ok()?, at.parse().ok()?))
                })
                .collect(),
        )
    }

    /// Takes in that a replica's apiserver answered `version` at `now`.
    pub fn answered(&mut self, version: ServerVersion, now: Timestamp) {
        let now = now.round(Unit::Second).unwrap_or(now);
        let at = |age: SignedDuration| now.checked_sub(age).unwrap_or(now);
        for last in self.0.values_mut() {
            if last.duration_since(now) > AHEAD {
                *last = now;
            }
        }
        match self.0.get(&version) {
            None => {
                for last in self.0.values_mut() {
                    *last = (*last).max(at(FORGET - REFRESH));
                }
                self.0.insert(version, now);
            }
            Some(last) if self.0.len() > 1 && now.duration_since(*last) >= REFRESH => {
                self.0.insert(version, now);
            }
            Some(_) => {}
        }
        self.0
            .retain(|v, last| *v == version || now.duration_since(*last) < FORGET);
    }

    /// The version the configuration is written for: the oldest recorded.
    pub fn oldest(&self) -> Option<ServerVersion> {
        self.0.keys().next().copied()
    }

    /// Whether apiservers of more than one version answered lately.
    pub fn mixed(&self) -> bool {
        self.0.len() > 1
    }
}

impl std::fmt::Display for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (version, at)) in self.0.iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            write!(f, "{comma}{version}={at}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(minor: u32) -> ServerVersion {
        ServerVersion { major: 1, minor }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn the_record_reads_back_what_it_writes_and_skips_what_does_not_read() {
        let mut served = Served::default();
        served.answered(v(27), at(0));
        served.answered(v(28), at(10));
        let written = served.to_string();
        assert_eq!(
            written,
            "1.27=2027-01-15T08:00:00Z,1.28=2027-01-15T08:00:10Z"
        );
        assert_eq!(Served::parse(&written), served);
        assert_eq!(
            Served::parse("1.28=2027-01-15T08:00:10Z, garbage,1.x=2027-01-15T08:00:10Z,1.29=no"),
            Served([(v(28), at(10))].into())
        );
        assert_eq!(Served::parse(""), Served::default());
    }

    #[test]
    fn one_version_alone_is_never_written_again() {
        let mut served = Served::default();
        served.answered(v(30), at(0));
        let first = served.clone();
        for hour in 1..100 {
            served.answered(v(30), at(hour * 3600));
        }
        assert_eq!(served, first);
        assert_eq!(served.oldest(), Some(v(30)));
    }

    /// Two replicas, each connected to one apiserver of an upgrade, rounds every 10 s: the
    /// configuration is written for the old version throughout, and for the new one only once
    /// no replica has reached an old apiserver for [`FORGET`]; the record changes a handful of
    /// times, not at every round.
    #[test]
    fn an_upgrade_moves_the_configuration_once_the_old_servers_are_gone() {
        let mut served = Served::default();
        // Installed long before the upgrade.
        served.answered(v(27), at(-30 * 86_400));
        let mut writes = 0;
        let mut round = |served: &mut Served, version: u32, t: i64| {
            let before = served.clone();
            served.answered(v(version), at(t));
            if *served != before {
                writes += 1;
            }
            served.oldest().unwrap()
        };
        // Twenty minutes with one replica on each version.
        for t in (0..1200).step_by(10) {
            assert_eq!(round(&mut served, 28, t), v(27), "at {t}s");
            assert_eq!(round(&mut served, 27, t + 5), v(27), "at {t}s");
        }
        // The last old apiserver is gone at 1200 s.
        let mut moved = None;
        for t in (1200..2400).step_by(5) {
            if round(&mut served, 28, t) == v(28) && moved.is_none() {
                moved = Some(t);
            }
        }
        let moved = moved.expect("written for 1.28 in the end");
        assert!(
            (1200..=1200 + FORGET.as_secs()).contains(&moved),
            "moved at {moved}s"
        );
        assert_eq!(served.0.len(), 1);
        // About one write per version and REFRESH while both are answered, a few around.
        let bound = 2 * (moved as usize / REFRESH.as_secs() as usize) + 4;
        assert!(writes <= bound, "{writes} writes, more than {bound}");
    }

    /// A version that appears after a long quiet does not forget the old one at once: a
    /// replica still reaching an old apiserver has time to say so.
    #[test]
    fn a_new_version_leaves_time_to_hear_from_the_old() {
        let mut served = Served::default();
        served.answered(v(27), at(0));
        served.answered(v(28), at(86_400));
        assert_eq!(served.oldest(), Some(v(27)));
        served.answered(v(28), at(86_400 + 60));
        assert_eq!(served.oldest(), Some(v(27)), "the old one is kept a while");
        served.answered(v(27), at(86_400 + 70));
        served.answered(v(28), at(86_400 + 300));
        assert_eq!(
            served.oldest(),
            Some(v(27)),
            "refreshed by a replica that reached it"
        );
        served.answered(v(28), at(86_400 + 70 + FORGET.as_secs()));
        assert_eq!(
            served.oldest(),
            Some(v(28)),
            "forgotten once nobody reached it"
        );
    }

    /// A record dated far ahead (a clock off, a hand edit) neither pins the old version until
    /// that date nor is rewritten at every round.
    #[test]
    fn a_record_dated_ahead_counts_as_made_now() {
        let mut served = Served([(v(27), at(86_400)), (v(28), at(0))].into());
        served.answered(v(28), at(10));
        assert_eq!(served.0[&v(27)], at(10));
        let once = served.clone();
        served.answered(v(28), at(20));
        assert_eq!(served, once, "no second write");
        served.answered(v(28), at(10 + FORGET.as_secs()));
        assert_eq!(served.oldest(), Some(v(28)));
    }

    /// An older version (a rollback, an old apiserver behind the address again) is the one
    /// written for at once.
    #[test]
    fn an_older_version_is_written_for_at_once() {
        let mut served = Served::default();
        served.answered(v(30), at(0));
        served.answered(v(29), at(10));
        assert_eq!(served.oldest(), Some(v(29)));
    }
}
