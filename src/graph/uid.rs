//! Object uids, kept as 128-bit numbers rather than strings.

use std::fmt;

/// A Kubernetes uid. UUIDs (what the apiserver assigns) are stored exactly and print back the
/// same; any other string is hashed. Two `u64` halves rather than a `u128`, so that structures
/// holding uids are aligned to 8 bytes, not 16.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uid(u64, u64);

impl Uid {
    pub const fn from_u128(value: u128) -> Self {
        Self((value >> 64) as u64, value as u64)
    }

    pub const fn as_u128(self) -> u128 {
        ((self.0 as u128) << 64) | self.1 as u128
    }

    pub fn parse(text: &str) -> Self {
        if let Some(value) = uuid(text) {
            return Self::from_u128(value);
        }
        // FNV-1a, 128 bits: not a UUID, but still an identity.
        let mut hash: u128 = 0x6c62272e07bb014262b821756295c58d;
        for byte in text.bytes() {
            hash ^= u128::from(byte);
            hash = hash.wrapping_mul(0x0000000001000000000000000000013B);
        }
        Self::from_u128(hash)
    }
}

/// The value of a UUID in its canonical form (8-4-4-4-12 hex digits), read without allocating.
fn uuid(text: &str) -> Option<u128> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return None;
    }
    let mut value = 0u128;
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if *byte != b'-' {
                return None;
            }
            continue;
        }
        let digit = (*byte as char).to_digit(16)?;
        value = (value << 4) | u128::from(digit);
    }
    Some(value)
}

/// Hashes a [`Uid`] for the graph's maps: a UUID is random already (and anything else was
/// hashed into one), so mixing its two halves is enough; much cheaper than SipHash for the
/// several lookups each applied object makes.
#[derive(Debug, Default, Clone, Copy)]
pub struct UidHasher(u64);

impl std::hash::Hasher for UidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached for keys other than a `Uid`: FNV-1a.
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x100000001b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(0x9e3779b97f4a7c15);
    }

    /// An enum's discriminant (a work item's kind, say).
    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}

/// Builds [`UidHasher`]s.
pub type UidHash = std::hash::BuildHasherDefault<UidHasher>;

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = format!("{:032x}", self.as_u128());
        write!(
            f,
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_round_trip() {
        let text = "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4";
        assert_eq!(Uid::parse(text).to_string(), text);
    }

    #[test]
    fn what_is_not_a_canonical_uuid_is_hashed() {
        let uuid = "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4";
        for other in [
            "0c9a8d74x9cb7-44dd-b98e-09fd62def2f4",
            "0c9a8d74-9cb7-44dd-b98e-09fd62def2fg",
            "0c9a8d749cb744ddb98e09fd62def2f4",
        ] {
            assert_ne!(Uid::parse(other), Uid::parse(uuid));
            assert_eq!(Uid::parse(other), Uid::parse(other));
        }
        assert_eq!(
            Uid::parse("0C9A8D74-9CB7-44DD-B98E-09FD62DEF2F4"),
            Uid::parse(uuid)
        );
    }

    #[test]
    fn other_strings_are_distinct_identities() {
        assert_ne!(Uid::parse("a"), Uid::parse("b"));
        assert_eq!(Uid::parse("a"), Uid::parse("a"));
    }
}
