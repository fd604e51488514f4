//! Where a record lives: XOR-distance close groups and weighted rendezvous hashing.
//!
//! Two placement schemes feed the read machine with candidates:
//!
//! - **Close groups** (DHT deployments): peers and records share one 256-bit space; a
//!   record is held by the [`DEFAULT_CLOSE_GROUP_SIZE`] peers nearest to its key by XOR
//!   distance. [`close_group`] and [`sort_by_distance`] compute that from whatever
//!   candidates the integrator's discovery returned.
//! - **Rendezvous hashing** (roster deployments): every member scores every key with a
//!   stable hash scaled by the member's weight; the owner order is the members sorted by
//!   score ([`owners`]). Over many keys, each member is first owner in proportion to its
//!   weight, and adding or removing a member only moves the keys that member wins or loses.
//!
//! Both are pure functions of their inputs: no process-random hashing, so every client,
//! every driver and the simulator agree on the same order.

use core::fmt;

/// The close-group size of the reference network: a record is stored on its 7 nearest
/// peers, so 7 `NotFound` answers from the nearest peers prove it absent.
pub const DEFAULT_CLOSE_GROUP_SIZE: usize = 7;

/// Writes the first four bytes as hex followed by an ellipsis: enough to tell ids apart in
/// logs and traces without 64-character lines.
fn short_hex(bytes: &[u8; 32], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for b in &bytes[..4] {
        write!(f, "{b:02x}")?;
    }
    f.write_str("…")
}

fn full_hex(bytes: &[u8; 32]) -> String {
    use fmt::Write;
    let mut s = String::with_capacity(64);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A peer's 256-bit identity in the placement space.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PeerId(pub [u8; 32]);

/// A record's (block's) 256-bit key in the same space as [`PeerId`]; for content-addressed
/// blocks it is the content hash.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Key(pub [u8; 32]);

/// XOR distance between a key and a peer. Ordered as a 256-bit big-endian integer, which
/// is what byte-array ordering gives, so "nearer" is simply "smaller".
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Distance(pub [u8; 32]);

impl PeerId {
    /// A peer id whose bytes are `u64` `n` in big-endian in the last eight bytes: handy for
    /// tests and simulations that want readable, ordered ids.
    pub fn from_u64(n: u64) -> Self {
        let mut b = [0u8; 32];
        b[24..].copy_from_slice(&n.to_be_bytes());
        PeerId(b)
    }

    /// All 64 hex digits (Debug and Display show only a short prefix).
    pub fn to_hex(&self) -> String {
        full_hex(&self.0)
    }
}

impl Key {
    /// A key whose last eight bytes are `n` big-endian (see [`PeerId::from_u64`]).
    pub fn from_u64(n: u64) -> Self {
        let mut b = [0u8; 32];
        b[24..].copy_from_slice(&n.to_be_bytes());
        Key(b)
    }

    /// XOR distance from this key to `peer`.
    #[inline]
    pub fn distance(&self, peer: &PeerId) -> Distance {
        let mut d = [0u8; 32];
        for (i, out) in d.iter_mut().enumerate() {
            *out = self.0[i] ^ peer.0[i];
        }
        Distance(d)
    }

    /// All 64 hex digits.
    pub fn to_hex(&self) -> String {
        full_hex(&self.0)
    }
}

/// A 64-hex-digit id or key that could not be parsed (bad input from whoever supplied it:
/// a roster file, a peer's membership message, a command line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseIdError {
    /// The text was not exactly 64 bytes long (its length in bytes: a non-ASCII
    /// character counts for each of its UTF-8 bytes).
    #[error("expected 64 hex digits, got {0} bytes")]
    Length(usize),
    /// The byte at this offset is not a hex digit (`0-9`, `a-f`, `A-F`).
    #[error("invalid hex digit at byte {0}")]
    Digit(usize),
}

fn parse_hex32(s: &str) -> Result<[u8; 32], ParseIdError> {
    let bytes = s.as_bytes();
    if bytes.len() != 64 {
        return Err(ParseIdError::Length(bytes.len()));
    }
    let digit = |i: usize| -> Result<u8, ParseIdError> {
        let b = bytes[i];
        match b {
            b'0'..=b'9' => Ok(b - b'0'),
            b'a'..=b'f' => Ok(b - b'a' + 10),
            b'A'..=b'F' => Ok(b - b'A' + 10),
            _ => Err(ParseIdError::Digit(i)),
        }
    };
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = (digit(2 * i)? << 4) | digit(2 * i + 1)?;
    }
    Ok(out)
}

impl core::str::FromStr for PeerId {
    type Err = ParseIdError;
    /// Parses the 64-hex-digit form printed by [`PeerId::to_hex`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_hex32(s).map(PeerId)
    }
}

impl core::str::FromStr for Key {
    type Err = ParseIdError;
    /// Parses the 64-hex-digit form printed by [`Key::to_hex`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_hex32(s).map(Key)
    }
}

impl fmt::Debug for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PeerId(")?;
        short_hex(&self.0, f)?;
        f.write_str(")")
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        short_hex(&self.0, f)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(")?;
        short_hex(&self.0, f)?;
        f.write_str(")")
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        short_hex(&self.0, f)
    }
}

/// Sorts `peers` nearest-first to `key` (ties cannot happen between distinct ids: XOR with
/// a fixed key is a bijection).
pub fn sort_by_distance(key: &Key, peers: &mut [PeerId]) {
    peers.sort_unstable_by_key(|p| key.distance(p));
}

/// The nearest `size` distinct candidates to `key`, nearest first: the record's close group
/// as far as these candidates know.
pub fn close_group(key: &Key, candidates: &[PeerId], size: usize) -> Vec<PeerId> {
    let mut v = candidates.to_vec();
    sort_by_distance(key, &mut v);
    v.dedup();
    v.truncate(size);
    v
}

/// A roster member for rendezvous placement.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// The member's identity (also the hash input, so an address change does not move keys).
    pub id: PeerId,
    /// Where to reach it (opaque here; drivers parse it).
    pub addr: String,
    /// Relative capacity. Members with a weight that is not a positive finite number never
    /// own a key ahead of a positively weighted one.
    pub weight: f64,
}

/// A stable 64-bit mix of a key and a member id (SplitMix64 finaliser folded over the
/// eight 64-bit words). Not cryptographic: placement needs spread and stability, and a
/// peer choosing its own id can already choose where it sits in XOR space too.
fn rendezvous_hash(key: &Key, id: &PeerId) -> u64 {
    let mut h: u64 = 0x243f_6a88_85a3_08d3; // pi digits: an arbitrary fixed start
    for chunk in key.0.chunks_exact(8).chain(id.0.chunks_exact(8)) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        h = mix64(h ^ u64::from_be_bytes(w));
    }
    h
}

fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The weighted rendezvous score of `member` for `key`: `weight / -ln(u)` with `u` uniform
/// in (0, 1) from the stable hash. The member with the highest score wins; with this form
/// each member wins with probability `weight / total weight` (the minimum of independent
/// exponentials with rates `weight_i`).
pub fn rendezvous_score(key: &Key, member: &Member) -> f64 {
    if !(member.weight.is_finite() && member.weight > 0.0) {
        return 0.0;
    }
    let h = rendezvous_hash(key, &member.id);
    // 53 random bits, centred in their bucket so u is never exactly 0 or 1.
    let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    member.weight / -u.ln()
}

/// Indices into `members` in owner order for `key`: highest rendezvous score first, ties
/// (only possible for non-positive weights) broken by id so the order is total.
pub fn owner_order(key: &Key, members: &[Member]) -> Vec<usize> {
    let mut scored: Vec<(f64, usize)> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (rendezvous_score(key, m), i))
        .collect();
    scored.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| members[a.1].id.cmp(&members[b.1].id))
    });
    scored.into_iter().map(|(_, i)| i).collect()
}

/// `members` in owner order for `key` (see [`owner_order`]).
pub fn owners<'m>(key: &Key, members: &'m [Member]) -> Vec<&'m Member> {
    owner_order(key, members)
        .into_iter()
        .map(|i| &members[i])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{seeded, Rng};

    fn random_id(rng: &mut impl Rng) -> [u8; 32] {
        let mut b = [0u8; 32];
        rng.fill_bytes(&mut b);
        b
    }

    #[test]
    fn ids_and_keys_print_their_first_four_bytes_in_hex() {
        let mut b = [0u8; 32];
        b[..5].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0x01]);
        let (p, k) = (PeerId(b), Key(b));
        assert_eq!(p.to_string(), "deadbeef…");
        assert_eq!(format!("{p:?}"), "PeerId(deadbeef…)");
        assert_eq!(k.to_string(), "deadbeef…");
        assert_eq!(format!("{k:?}"), "Key(deadbeef…)");
        assert_eq!(p.to_hex().len(), 64);
        assert!(p.to_hex().starts_with("deadbeef01"));
        assert_eq!(k.to_hex(), p.to_hex());
    }

    #[test]
    fn xor_distance_orders_nearest_first() {
        let key = Key::from_u64(0b1000);
        let peers: Vec<PeerId> = [0b1001u64, 0b0000, 0b1000, 0b1111]
            .into_iter()
            .map(PeerId::from_u64)
            .collect();
        let group = close_group(&key, &peers, 3);
        assert_eq!(
            group,
            vec![
                PeerId::from_u64(0b1000),
                PeerId::from_u64(0b1001),
                PeerId::from_u64(0b1111)
            ]
        );
        assert_eq!(key.distance(&PeerId::from_u64(0b1000)), Distance([0; 32]));
    }

    #[test]
    fn close_group_is_the_nearest_seven_deduplicated() {
        let mut rng = seeded(1);
        let key = Key(random_id(&mut rng));
        let mut peers: Vec<PeerId> = (0..40).map(|_| PeerId(random_id(&mut rng))).collect();
        peers.extend_from_slice(&peers.clone()[..5]);
        let group = close_group(&key, &peers, DEFAULT_CLOSE_GROUP_SIZE);
        assert_eq!(group.len(), 7);
        let worst = key.distance(group.last().unwrap());
        let nearer_outside = peers
            .iter()
            .filter(|p| !group.contains(p))
            .filter(|p| key.distance(p) < worst)
            .count();
        assert_eq!(nearer_outside, 0);
    }

    #[test]
    fn ids_print_as_short_hex() {
        let id = PeerId([0xab; 32]);
        assert_eq!(format!("{id:?}"), "PeerId(abababab…)");
        assert_eq!(id.to_hex().len(), 64);
        assert_eq!(id.to_hex().parse::<PeerId>(), Ok(id));
        let key = Key::from_u64(0xdead_beef);
        assert_eq!(key.to_hex().parse::<Key>(), Ok(key));
        assert_eq!("ab".parse::<PeerId>(), Err(ParseIdError::Length(2)));
        let mut bad = id.to_hex();
        bad.replace_range(10..11, "g");
        assert_eq!(bad.parse::<PeerId>(), Err(ParseIdError::Digit(10)));
    }

    /// Rule: ids and keys parse from 64 hex digits of either case (the same bytes as the
    /// lower-case form `to_hex` prints); a wrong length is reported in bytes.
    #[test]
    fn id_parsing_takes_either_case_and_counts_length_in_bytes() {
        let id = PeerId([0xab; 32]);
        assert_eq!(id.to_hex().to_uppercase().parse::<PeerId>(), Ok(id));
        let key = Key([0xcd; 32]);
        assert_eq!("Cd".repeat(32).parse::<Key>(), Ok(key));
        // 63 ASCII digits and one two-byte character: 65 bytes.
        let text = format!("{}é", "0".repeat(63));
        assert_eq!(text.parse::<Key>(), Err(ParseIdError::Length(65)));
        // 62 digits and one two-byte character: 64 bytes, the first bad byte at 62.
        let text = format!("{}é", "0".repeat(62));
        assert_eq!(text.parse::<Key>(), Err(ParseIdError::Digit(62)));
    }

    /// Rendezvous: each member is first owner in proportion to its weight (statistical,
    /// fixed seed, 30,000 keys, tolerance ±1.5 percentage points).
    #[test]
    fn rendezvous_first_owner_is_proportional_to_weight() {
        let mut rng = seeded(0x5eed);
        let weights = [1.0, 2.0, 3.0, 4.0];
        let members: Vec<Member> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Member {
                id: PeerId(random_id(&mut rng)),
                addr: format!("10.0.0.{i}:8080"),
                weight: w,
            })
            .collect();
        let mut wins = [0u32; 4];
        let trials = 30_000;
        for _ in 0..trials {
            let key = Key(random_id(&mut rng));
            wins[owner_order(&key, &members)[0]] += 1;
        }
        let total: f64 = weights.iter().sum();
        for (i, w) in weights.iter().enumerate() {
            let share = f64::from(wins[i]) / f64::from(trials);
            let expected = w / total;
            assert!(
                (share - expected).abs() < 0.015,
                "member {i}: share {share:.3}, expected {expected:.3} ({wins:?})"
            );
        }
    }

    #[test]
    fn rendezvous_removing_a_member_moves_only_its_keys() {
        let mut rng = seeded(7);
        let members: Vec<Member> = (0..6)
            .map(|i| Member {
                id: PeerId(random_id(&mut rng)),
                addr: format!("m{i}"),
                weight: 1.0,
            })
            .collect();
        let fewer = &members[1..];
        for _ in 0..2_000 {
            let key = Key(random_id(&mut rng));
            let before = owners(&key, &members)[0].id;
            let after = owners(&key, fewer)[0].id;
            if before != members[0].id {
                assert_eq!(before, after);
            }
        }
    }

    #[test]
    fn non_positive_weights_never_win_over_positive() {
        let members = vec![
            Member {
                id: PeerId::from_u64(1),
                addr: "a".into(),
                weight: 0.0,
            },
            Member {
                id: PeerId::from_u64(2),
                addr: "b".into(),
                weight: f64::NAN,
            },
            Member {
                id: PeerId::from_u64(3),
                addr: "c".into(),
                weight: 0.1,
            },
        ];
        for k in 0..100 {
            assert_eq!(owner_order(&Key::from_u64(k), &members), vec![2, 0, 1]);
        }
    }
}
