//! How a first read picks among the close group: the injected spreading choice.
//!
//! Every client choosing the nearest holder first sends a hot record's whole first-read
//! load to one node while six sit idle. The read machine therefore lets a [`Spread`] pick
//! among the close-group members it has not tried yet (and may ask); past the close group it
//! always goes nearest-first.

use crate::placement::PeerId;
use crate::rng::Rng;

/// One close-group member the choice may pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChoiceOption {
    /// The member.
    pub peer: PeerId,
    /// Its position in the close group by distance (0 = nearest).
    pub rank: usize,
    /// This client's requests in flight to it, from the [`PeerView`](super::PeerView).
    pub in_flight: u32,
}

/// A spreading choice supplied by the integrator: given the options (nearest first, never
/// empty) and a fresh 64-bit random draw, return an index. An index out of range is
/// clamped to the last option, so a buggy choice still stays inside the close group.
pub type CustomChoice = fn(options: &[ChoiceOption], draw: u64) -> usize;

/// The spreading choice among untried close-group members.
#[derive(Clone, Copy, Debug, Default)]
pub enum Spread {
    /// Uniformly random: each holder serves about 1/7 of first reads. The reference choice.
    #[default]
    Uniform,
    /// Nearest first, deterministic, no random draw: the pre-spreading behaviour, for tests
    /// and A/B replays.
    Nearest,
    /// Power of two choices on this client's load: draw two distinct members uniformly and
    /// keep the one with fewer of this client's requests in flight; on a tie keep the first
    /// draw (so with no load it is exactly uniform, never biased towards the nearest).
    /// Evens out a client's concurrent reads of a hot record better than uniform.
    LeastLoadedOfTwo,
    /// The integrator's own choice (see [`CustomChoice`]).
    Custom(CustomChoice),
}

/// A uniform index in `0..n` (n > 0) from a 64-bit draw, without modulo bias worth naming
/// (Lemire's multiply-shift).
#[inline]
pub(crate) fn index_from_draw(draw: u64, n: usize) -> usize {
    ((u128::from(draw) * n as u128) >> 64) as usize
}

impl Spread {
    /// Picks an index into `options` (non-empty, nearest first). Always in range.
    pub(crate) fn choose(&self, options: &[ChoiceOption], rng: &mut impl Rng) -> usize {
        let n = options.len();
        debug_assert!(n > 0);
        if n <= 1 {
            return 0;
        }
        match self {
            Spread::Nearest => 0,
            Spread::Uniform => index_from_draw(rng.next_u64(), n),
            Spread::LeastLoadedOfTwo => {
                let a = index_from_draw(rng.next_u64(), n);
                let mut b = index_from_draw(rng.next_u64(), n - 1);
                if b >= a {
                    b += 1;
                }
                if options[b].in_flight < options[a].in_flight {
                    b
                } else {
                    a
                }
            }
            Spread::Custom(f) => f(options, rng.next_u64()).min(n - 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::seeded;

    fn opts(loads: &[u32]) -> Vec<ChoiceOption> {
        loads
            .iter()
            .enumerate()
            .map(|(i, &l)| ChoiceOption {
                peer: PeerId::from_u64(i as u64),
                rank: i,
                in_flight: l,
            })
            .collect()
    }

    #[test]
    fn least_loaded_of_two_prefers_the_idle_member() {
        let o = opts(&[5, 5, 0, 5, 5, 5, 5]);
        let mut rng = seeded(3);
        let mut idle = 0;
        for _ in 0..7_000 {
            if Spread::LeastLoadedOfTwo.choose(&o, &mut rng) == 2 {
                idle += 1;
            }
        }
        // P(2 among the two draws) = 2/7 ≈ 2,000 of 7,000, against 1,000 for uniform.
        assert!((1_800..2_200).contains(&idle), "{idle}");
    }

    #[test]
    fn least_loaded_of_two_is_uniform_without_load() {
        let o = opts(&[0; 7]);
        let mut rng = seeded(4);
        let mut counts = [0u32; 7];
        for _ in 0..7_000 {
            counts[Spread::LeastLoadedOfTwo.choose(&o, &mut rng)] += 1;
        }
        for c in counts {
            assert!((700..1_300).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn custom_out_of_range_is_clamped() {
        let o = opts(&[0; 3]);
        let mut rng = seeded(5);
        assert_eq!(Spread::Custom(|_, _| usize::MAX).choose(&o, &mut rng), 2);
    }
}
