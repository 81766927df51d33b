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
        let hex: String = text.chars().filter(|c| *c != '-').collect();
        if text.len() == 36
            && hex.len() == 32
            && let Ok(value) = u128::from_str_radix(&hex, 16)
        {
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
    fn other_strings_are_distinct_identities() {
        assert_ne!(Uid::parse("a"), Uid::parse("b"));
        assert_eq!(Uid::parse("a"), Uid::parse("a"));
    }
}
