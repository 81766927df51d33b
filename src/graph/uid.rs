//! Object uids, kept as 128-bit numbers rather than strings.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::OnceLock;

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

/// Hashes a [`Uid`] for the graph's maps and the work queue, with a key of the process's own.
///
/// Uids are not all the apiserver's: an ownerReference may name any uid, and the apiserver only
/// checks that it is not empty, so whoever may write an object chooses 128 bits that become a
/// key of the graph's index (a virtual owner). An unkeyed hash of them, however well it mixes,
/// can be run backwards: with it, one tenant could send references whose uids all fall in one
/// bucket, and every insert and lookup among them would cost as many comparisons as there are
/// of them, under the graph's lock. So every hash mixes in a 128-bit key drawn once per
/// process, when the first map is made (at start-up), from the operating system's random
/// source (through [`RandomState`], whose SipHash output under its own random key gives the two
/// halves), and known only to the process.
///
/// The mixing is a folded multiply, the core of foldhash (and wyhash): each pair of 64-bit
/// words is combined with the key's halves by xor, multiplied into 128 bits, and the product's
/// halves are xored together; a word left over is folded with the key once more. For a uid,
/// `fold((hi ^ k0) × (lo ^ k1))`: each bit of the result depends on the bits of both factors,
/// so on the key's, and without the key one cannot say which uids fold into the same bucket.
/// The unkeyed mix it replaces (`(h <<< 29 ^ word) × constant`, from 0) is a bijection of each
/// word that anyone can run backwards: for any high half, the low half that gives a chosen
/// hash is one multiply away. This one gives no such handle.
///
/// Why not SipHash (std's `RandomState`), the conservative choice: it costs several times
/// more per uid, and each applied object makes several lookups. Why not foldhash itself: for
/// two words its fast variant computes the same kind of product, and the dependency would add
/// nothing the graph uses. It is not a cryptographic hash: like foldhash, it keeps
/// chosen-collision floods out of hash tables as long as the key stays secret (and so the
/// order in which a map iterates, which follows the hash, had better not be shown to whoever
/// chooses uids). One key for the whole process: every map keyed by uid shares it.
///
/// Its price: one 64×64→128-bit multiply per uid where the unkeyed mix had two 64-bit ones
/// in a row. The graph benchmark (`benches/cluster/graph.rs`) measures it against the unkeyed
/// mix in the same run: the same for applies and removals of random uids, as the apiserver's
/// are, within the noise of a run; a few percent more for sequential uids, which the unkeyed
/// mix spread perfectly over a table's buckets. And a flood of uids colliding under that mix
/// costs what as many random uids cost.
#[derive(Debug, Clone, Copy)]
pub struct UidHasher {
    /// The words folded so far (at first, the key's first half).
    acc: u64,
    /// The key's second half.
    key: u64,
    /// A word waiting for its pair.
    pending: Option<u64>,
}

/// 64 × 64 → 128-bit multiply, the product's halves xored.
#[inline(always)]
fn fold(x: u64, y: u64) -> u64 {
    let product = u128::from(x) * u128::from(y);
    (product as u64) ^ ((product >> 64) as u64)
}

/// Where a word without a pair is folded: any odd constant (π's digits) keeps it apart from a
/// pair whose second word is 0.
const ALONE: u64 = 0x243f_6a88_85a3_08d3;

impl std::hash::Hasher for UidHasher {
    #[inline]
    fn finish(&self) -> u64 {
        match self.pending {
            Some(word) => fold(word ^ self.acc, self.key ^ ALONE),
            None => self.acc,
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        match self.pending.take() {
            Some(first) => self.acc = fold(first ^ self.acc, n ^ self.key),
            None => self.pending = Some(n),
        }
    }

    /// Keys other than a uid's words (none of the graph's): eight bytes at a time, then the
    /// length.
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.write_u64(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(last));
        }
        self.write_u64(bytes.len() as u64);
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(n.into());
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(n.into());
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(n.into());
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    /// An enum's discriminant (a work item's kind, say).
    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}

/// Builds [`UidHasher`]s with the process's key: the `S` of every map keyed by uid.
#[derive(Debug, Clone, Copy)]
pub struct UidHash {
    key: [u64; 2],
}

impl UidHash {
    /// With a key of one's own, for tests.
    #[cfg(test)]
    pub(crate) const fn with_key(key: [u64; 2]) -> Self {
        Self { key }
    }
}

impl Default for UidHash {
    /// With the process's key.
    #[inline]
    fn default() -> Self {
        static KEY: OnceLock<[u64; 2]> = OnceLock::new();
        let key = *KEY.get_or_init(|| {
            // Each RandomState is keyed from the operating system's random source.
            let random = RandomState::new();
            [random.hash_one(0u8), random.hash_one(1u8)]
        });
        Self { key }
    }
}

impl BuildHasher for UidHash {
    type Hasher = UidHasher;

    #[inline]
    fn build_hasher(&self) -> UidHasher {
        UidHasher {
            acc: self.key[0],
            key: self.key[1],
            pending: None,
        }
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
pub(super) mod tests {
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

    /// `n` uids as the apiserver assigns them (random, version 4), from a fixed seed
    /// (splitmix64).
    pub(crate) fn random(n: usize) -> impl Iterator<Item = Uid> {
        let mut state = 0u64;
        let mut next = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        (0..n).map(move |_| {
            let value = (u128::from(next()) << 64) | u128::from(next());
            // The version (4) and the variant (10) bits, as in a UUID the apiserver makes.
            let value = value & !(0xf << 76) | (0x4 << 76);
            let value = value & !(0x3 << 62) | (0x2 << 62);
            Uid::from_u128(value)
        })
    }

    /// Uids whose unkeyed hash (the mix this one replaced) is the same, made as a tenant
    /// would make them: the high half counts up and the low half undoes it.
    pub(crate) fn colliding(n: u64) -> impl Iterator<Item = Uid> {
        const K: u64 = 0x9e3779b97f4a7c15;
        let inverse = (0..6).fold(K, |x, _| {
            x.wrapping_mul(2u64.wrapping_sub(K.wrapping_mul(x)))
        });
        assert_eq!(K.wrapping_mul(inverse), 1);
        let target = 0x0123456789abcdefu64.wrapping_mul(inverse);
        (1..=n).map(move |hi| {
            let lo = target ^ hi.wrapping_mul(K).rotate_left(29);
            Uid::from_u128((u128::from(hi) << 64) | u128::from(lo))
        })
    }

    /// The mix this one replaced: `(h <<< 29 ^ word) × K` over the two halves, from 0.
    fn unkeyed(uid: Uid) -> u64 {
        let mix = |h: u64, n: u64| (h.rotate_left(29) ^ n).wrapping_mul(0x9e3779b97f4a7c15);
        let value = uid.as_u128();
        mix(mix(0, (value >> 64) as u64), value as u64)
    }

    #[test]
    fn the_hash_depends_on_the_key() {
        let (a, b) = (UidHash::with_key([1, 2]), UidHash::with_key([3, 4]));
        let uids = (0..1000u128).map(|n| Uid::from_u128(n * 0x1_0000_0001 + 7));
        let differ = uids.filter(|u| a.hash_one(u) != b.hash_one(u)).count();
        assert_eq!(differ, 1000);
        // And on both halves of the uid.
        let low = a.hash_one(Uid::from_u128(1));
        assert_ne!(low, a.hash_one(Uid::from_u128(1 << 64 | 1)));
        assert_ne!(low, a.hash_one(Uid::from_u128(2)));
        // One process, one key.
        let uid = Uid::from_u128(42);
        assert_eq!(
            UidHash::default().hash_one(uid),
            UidHash::default().hash_one(uid)
        );
    }

    #[test]
    fn uids_that_collide_unkeyed_do_not_collide_keyed() {
        let uids: Vec<Uid> = colliding(10_000).collect();
        assert!(uids.iter().all(|u| unkeyed(*u) == 0x0123456789abcdef));
        for hasher in [UidHash::default(), UidHash::with_key([0, 0])] {
            let hashes: std::collections::HashSet<u64> =
                uids.iter().map(|u| hasher.hash_one(u)).collect();
            assert_eq!(hashes.len(), uids.len());
            // The buckets of a table of 16,384: about as many as for random hashes
            // (16,384 × (1 - e^(-10,000/16,384)) ≈ 7,500).
            let buckets: std::collections::HashSet<u64> =
                hashes.iter().map(|h| h & 0x3fff).collect();
            assert!(buckets.len() > 7_000, "{}", buckets.len());
        }
    }

    #[test]
    fn keys_other_than_uids_hash_every_byte() {
        let hasher = UidHash::default();
        assert_ne!(hasher.hash_one("abc"), hasher.hash_one("abd"));
        assert_ne!(hasher.hash_one("12345678a"), hasher.hash_one("12345678b"));
        assert_ne!(hasher.hash_one(1u8), hasher.hash_one(2u8));
    }
}
