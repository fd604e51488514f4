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
    /// The requests in progress it last advertised, decayed by age
    /// ([`PeerView::load`](super::PeerView::load)); `None` if nothing recent was heard.
    pub load: Option<u32>,
    /// The GETs *for this record* it reported receiving recently, delivered with the
    /// lookup ([`LookupPeer::key_load`](super::LookupPeer::key_load)); `None` if the lookup
    /// carried no hint for it.
    pub key_load: Option<u32>,
}

impl ChoiceOption {
    /// The load the choice compares: what the peer advertised (decayed by age), or `prior`
    /// when nothing recent was heard from it, plus this client's own requests in flight.
    pub fn score(&self, prior: u32) -> u32 {
        self.load.unwrap_or(prior).saturating_add(self.in_flight)
    }
}

/// What a peer without a live load hint is presumed to carry: the mean advertised load of
/// the options that have one (rounded down), or 0 when none has. Presuming such a peer
/// idle instead would steer first reads towards the peers the client never hears from —
/// the unreachable ones first — which the simulator's replay measured as more failed dials
/// and slower downloads; presuming it average keeps the choice fair to it.
pub(crate) fn unknown_load_prior(options: &[ChoiceOption]) -> u32 {
    mean(options.iter().filter_map(|o| o.load))
}

/// How the load-aware choices score the options of one decision: first on per-key hints
/// when the lookup delivered any, then on node-level advertised load.
///
/// The two signals are on different scales (GETs for this record received recently
/// against requests in progress for anything), so they are never added: with per-key
/// hints the score is the pair (per-key hint + own GETs in flight, node-level score),
/// compared in that order, so node load only breaks ties between equally requested
/// holders. Without per-key hints the score is the node-level score alone: the load the
/// peer advertised, decayed by age (the mean of the live loads when none is live), plus this
/// client's own GETs in flight there. Options without a per-key hint in a decision that
/// has some are not scored at all: the choice gives them their uniform share
/// ([`Spread::LeastLoadedOfTwo`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scoring {
    /// Whether per-key hints are compared first.
    pub(crate) by_key: bool,
    /// What an option without a live node-level hint scores.
    pub(crate) node_prior: u32,
}

impl Scoring {
    /// The scoring for one decision among `options`.
    pub(crate) fn of(options: &[ChoiceOption]) -> Self {
        Scoring {
            by_key: options.iter().any(|o| o.key_load.is_some()),
            node_prior: unknown_load_prior(options),
        }
    }

    /// The score of `o`, compared lexicographically: lower is preferred.
    pub(crate) fn score(&self, o: &ChoiceOption) -> (u32, u32) {
        let node = o.score(self.node_prior);
        match (self.by_key, o.key_load) {
            (true, Some(k)) => (k.saturating_add(o.in_flight), node),
            (true, None) => (u32::MAX, node),
            (false, _) => (node, 0),
        }
    }
}

/// The mean of `values`, rounded down; 0 for none.
fn mean(values: impl Iterator<Item = u32>) -> u32 {
    let (sum, n) = values.fold((0u64, 0u64), |(s, k), l| (s + u64::from(l), k + 1));
    // A mean of u32 values fits a u32; no value at all means 0.
    sum.checked_div(n).map_or(0, |mean| mean as u32)
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
    /// Power of two choices on load: draw two distinct members uniformly and keep the one
    /// with the lower score. When the lookup delivered per-key hints
    /// ([`LookupPeer`](super::LookupPeer)), that is the GETs for *this record* each member
    /// reported receiving recently (plus this client's own GETs in flight there; node load
    /// breaks ties), and a member without a hint keeps its uniform share. Otherwise it is
    /// the load the peer advertised in its last response (decayed by age; a peer with no
    /// live load scores the mean of the others' live loads) plus this client's own GETs in
    /// flight. On
    /// a tie keep the first draw, so with no load anywhere it is exactly uniform, never
    /// biased towards the nearest. Two random choices rather than the least loaded of all:
    /// clients acting on the same stale hints would pile onto the one member that looked
    /// idle (herding), which two choices avoid (`docs/read.md` has the measurements).
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
            Spread::LeastLoadedOfTwo => least_loaded_of_two(options, rng),
            Spread::Custom(f) => f(options, rng.next_u64()).min(n - 1),
        }
    }
}

/// [`Spread::LeastLoadedOfTwo`]. The first draw is uniform over all options. In a
/// decision with per-key hints, an option without one is taken as drawn — it gets
/// exactly its uniform share, neither courted nor shunned — and otherwise the second
/// draw and the comparison run among the options *with* a hint. Without per-key hints
/// every option takes part. The lower [`Scoring::score`] wins; a tie keeps the first draw.
fn least_loaded_of_two(options: &[ChoiceOption], rng: &mut impl Rng) -> usize {
    let scoring = Scoring::of(options);
    let first = index_from_draw(rng.next_u64(), options.len());
    let compared = |o: &ChoiceOption| !scoring.by_key || o.key_load.is_some();
    if !compared(&options[first]) {
        return first;
    }
    let others = options.iter().filter(|o| compared(o)).count() - 1;
    if others == 0 {
        return first;
    }
    let nth = index_from_draw(rng.next_u64(), others);
    let second = options
        .iter()
        .enumerate()
        .filter(|&(i, o)| i != first && compared(o))
        .nth(nth)
        .map_or(first, |(i, _)| i);
    if scoring.score(&options[second]) < scoring.score(&options[first]) {
        second
    } else {
        first
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
                load: None,
                key_load: None,
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

    fn advertised(loads: &[Option<u32>]) -> Vec<ChoiceOption> {
        let mut o = opts(&vec![0; loads.len()]);
        for (opt, l) in o.iter_mut().zip(loads) {
            opt.load = *l;
        }
        o
    }

    /// Rule: the advertised load counts. A member advertising more load than every other
    /// is never kept by two distinct draws; uniform (the signal ignored) would pick it
    /// about 1,000 times in 7,000.
    #[test]
    fn least_loaded_of_two_avoids_a_member_advertising_high_load() {
        let o = advertised(&[
            Some(1),
            Some(1),
            Some(1),
            Some(9),
            Some(1),
            Some(1),
            Some(1),
        ]);
        let mut rng = seeded(6);
        let mut busy = 0;
        for _ in 0..7_000 {
            if Spread::LeastLoadedOfTwo.choose(&o, &mut rng) == 3 {
                busy += 1;
            }
        }
        assert_eq!(busy, 0);
        // Own requests in flight add to the advertised load.
        let mut o = advertised(&[
            Some(2),
            Some(0),
            Some(2),
            Some(2),
            Some(2),
            Some(2),
            Some(2),
        ]);
        o[1].in_flight = 5;
        let mut picked = 0;
        for _ in 0..7_000 {
            if Spread::LeastLoadedOfTwo.choose(&o, &mut rng) == 1 {
                picked += 1;
            }
        }
        assert_eq!(picked, 0, "advertised 0 + 5 in flight is the most loaded");
    }

    /// Rule: a member never heard from is presumed as loaded as the average member heard
    /// from, not idle, so it is not favoured (presumed idle, it would win every pairing
    /// against the loaded ones: about 2,000 picks in 7,000).
    #[test]
    fn a_member_without_a_hint_is_presumed_average_not_idle() {
        let o = advertised(&[Some(3), Some(3), Some(3), None, Some(3), Some(3), Some(3)]);
        assert_eq!(unknown_load_prior(&o), 3);
        assert_eq!(unknown_load_prior(&advertised(&[None, None])), 0);
        assert_eq!(
            unknown_load_prior(&advertised(&[Some(1), Some(2), None])),
            1
        );
        let mut rng = seeded(7);
        let mut unknown = 0;
        for _ in 0..7_000 {
            if Spread::LeastLoadedOfTwo.choose(&o, &mut rng) == 3 {
                unknown += 1;
            }
        }
        assert!((800..1_200).contains(&unknown), "{unknown}");
    }

    #[test]
    fn custom_out_of_range_is_clamped() {
        let o = opts(&[0; 3]);
        let mut rng = seeded(5);
        assert_eq!(Spread::Custom(|_, _| usize::MAX).choose(&o, &mut rng), 2);
    }
}
