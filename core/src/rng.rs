//! Randomness plumbing.
//!
//! Core never touches a global or OS random source. A machine that needs randomness takes
//! a `&mut impl Rng` in the call that needs it, or owns a [`ChaCha8Rng`] seeded in
//! its constructor. Independent subsystems get independent streams derived from one
//! parent seed with [`child_seed`], so adding a random draw in one subsystem never shifts
//! the draws of another: same seed, same bytes.

pub use rand_chacha::ChaCha8Rng;
/// The RNG trait machines accept, and the seeding trait (re-exported so integrators need
/// no direct dependency on `rand_core`).
pub use rand_core::{Rng, SeedableRng};

/// A ChaCha8 generator seeded from a 64-bit seed.
pub fn seeded(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Derives the seed of an independent child stream named `label` from `parent`.
///
/// The label is hashed with FNV-1a and mixed with the parent through SplitMix64, whose
/// finaliser is a bijection with good avalanche: distinct labels give unrelated streams,
/// and the derivation is stable across platforms and releases (it is part of the
/// "same seed, same trace" promise, so it must never change silently).
pub fn child_seed(parent: u64, label: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in label.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    splitmix64(parent ^ splitmix64(h))
}

/// Derives the seed of the `index`-th member of a family of child streams (for example
/// one per simulated node).
pub fn indexed_seed(parent: u64, index: u64) -> u64 {
    splitmix64(parent.wrapping_add(index.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rule: the derivations are part of the "same seed, same trace" promise, so their
    /// outputs are pinned to literal values (computed independently from the FNV-1a and
    /// SplitMix64 definitions); changing the derivation changes every simulator trace and
    /// must fail here.
    #[test]
    fn child_and_indexed_seeds_are_pinned() {
        assert_eq!(child_seed(42, "net"), 0x6e1c_b74d_7584_60b9);
        assert_eq!(child_seed(42, "faults"), 0x5071_9b38_7174_2387);
        assert_eq!(child_seed(43, "net"), 0x86ed_d999_9a14_dcca);
        // Parents with many bits set: the label's hash shares bits with them, so mixing
        // with anything but XOR shows.
        assert_eq!(child_seed(u64::MAX, "net"), 0x8ae0_b14d_08df_58e1);
        assert_eq!(
            child_seed(0x5555_5555_5555_5555, "faults"),
            0x9c71_3d97_c826_fefc
        );
        assert_eq!(indexed_seed(7, 0), 0x63cb_e1e4_5932_0dd7);
        assert_eq!(indexed_seed(7, 1), 0x044c_3cd7_f43c_661c);
    }

    /// Rule: a seeded stream is a fixed ChaCha8 stream, pinned to its first outputs as
    /// recorded with rand_chacha 0.10 (a change of generator, of `seed_from_u64` or a
    /// dependency upgrade that changes the stream would shift every trace).
    #[test]
    fn seeded_streams_are_pinned() {
        let mut a = seeded(9);
        assert_eq!(
            [a.next_u64(), a.next_u64()],
            [2_105_193_198_852_477_983, 14_425_513_180_924_374_802]
        );
    }
}
