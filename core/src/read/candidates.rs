//! The peers one read knows about, nearest first, with what each has told it.

use smallvec::SmallVec;

use crate::placement::{Distance, Key, PeerId};
use crate::time::Instant;

use super::config::MAX_CANDIDATES;

/// Inline capacity of the candidate list: a close group plus a few, so the common read
/// never touches the heap for it.
pub(crate) const INLINE_CANDIDATES: usize = 12;

/// What one candidate has told this read so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tried {
    /// Not asked in this round.
    Untried,
    /// A GET is in flight.
    InFlight,
    /// Answered that it does not hold the record (kept across rounds: it is evidence).
    NotFound,
    /// Declined for lack of capacity; skipped until `until` by the read's own reckoning.
    Refused { until: Instant },
    /// No usable answer this round (dial failure, timeout, bad response).
    Failed,
    /// Answered with a copy that is not the record (failed validation, or reported
    /// corrupt by its holder). Kept across rounds: the read never asks it again.
    Invalid,
}

/// One known peer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    pub(crate) peer: PeerId,
    pub(crate) distance: Distance,
    pub(crate) tried: Tried,
    /// The per-key load hint its latest lookup reply carried (clamped), if any.
    pub(crate) key_load: Option<u32>,
}

/// The order key of the peer at `rank` of a ranked lookup (placement order, best first):
/// the rank in the first four bytes, so ranks order before anything else, then the XOR
/// distance's remaining bytes (distinct peers at one rank stay distinct).
pub(crate) fn ranked_distance(key: &Key, peer: &PeerId, rank: usize) -> Distance {
    let mut d = key.distance(peer).0;
    d[..4].copy_from_slice(&(rank.min(u32::MAX as usize) as u32).to_be_bytes());
    Distance(d)
}

/// The order key of a peer a ranked read does not rank (a refusing peer the view lists,
/// not among the candidates): after every ranked candidate.
pub(crate) fn unranked_distance(key: &Key, peer: &PeerId) -> Distance {
    let mut d = key.distance(peer).0;
    d[..4].copy_from_slice(&[0xff; 4]);
    Distance(d)
}

/// Known peers ordered nearest-first, deduplicated, at most [`MAX_CANDIDATES`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Candidates {
    list: SmallVec<[Candidate; INLINE_CANDIDATES]>,
}

impl Candidates {
    /// Adds `peer` in distance order unless known; when full, keeps the nearest. A hint
    /// (`Some`) replaces the one a known peer had; `None` keeps it (a plain lookup says
    /// nothing new about load).
    pub(crate) fn insert(&mut self, key: &Key, peer: PeerId, key_load: Option<u32>) {
        self.insert_at(key.distance(&peer), peer, key_load);
    }

    /// [`insert`](Self::insert) at an order key of the caller's (a placement rank,
    /// [`ranked_distance`]). A peer already known keeps its place (its hint is updated as
    /// `insert` does).
    pub(crate) fn insert_at(&mut self, distance: Distance, peer: PeerId, key_load: Option<u32>) {
        if let Some(c) = self.list.iter_mut().find(|c| c.peer == peer) {
            if key_load.is_some() {
                c.key_load = key_load;
            }
            return;
        }
        let pos = match self.list.binary_search_by(|c| c.distance.cmp(&distance)) {
            Ok(pos) => {
                // Same distance from one key means same peer.
                if key_load.is_some() {
                    self.list[pos].key_load = key_load;
                }
                return;
            }
            Err(pos) => pos,
        };
        if pos >= MAX_CANDIDATES {
            return;
        }
        if self.list.len() == MAX_CANDIDATES {
            // Drop the farthest peer that is not mid-GET; if every one is, keep the list.
            let Some(victim) = self.list.iter().rposition(|c| c.tried != Tried::InFlight) else {
                return;
            };
            if victim < pos {
                return;
            }
            self.list.remove(victim);
        }
        if self.list.len() == INLINE_CANDIDATES {
            // Spill once, straight to the bound: one allocation, never a growth series.
            self.list.reserve_exact(MAX_CANDIDATES - INLINE_CANDIDATES);
        }
        self.list.insert(
            pos,
            Candidate {
                peer,
                distance,
                tried: Tried::Untried,
                key_load,
            },
        );
    }

    pub(crate) fn as_slice(&self) -> &[Candidate] {
        &self.list
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn get(&self, peer: &PeerId) -> Option<&Candidate> {
        self.list.iter().find(|c| c.peer == *peer)
    }

    pub(crate) fn set(&mut self, peer: &PeerId, tried: Tried) {
        if let Some(c) = self.list.iter_mut().find(|c| c.peer == *peer) {
            c.tried = tried;
        }
    }

    pub(crate) fn set_at(&mut self, index: usize, tried: Tried) {
        self.list[index].tried = tried;
    }

    /// How many candidates nearer than `distance` answered `NotFound`.
    pub(crate) fn not_found_nearer_than(&self, distance: &Distance) -> usize {
        self.list
            .iter()
            .take_while(|c| c.distance < *distance)
            .filter(|c| c.tried == Tried::NotFound)
            .count()
    }

    /// How many candidates answered `NotFound` (the reference client's absence count).
    pub(crate) fn not_found(&self) -> usize {
        self.list
            .iter()
            .filter(|c| c.tried == Tried::NotFound)
            .count()
    }

    /// The absence rule: the record is authoritatively absent only when the nearest
    /// `group` known peers all answered `NotFound`.
    ///
    /// Counting *any* `group` answers is not enough: when the true holders are dead or
    /// unreachable, the next-nearest peers (who never held the record) answer `NotFound`
    /// honestly, and counting them would report a missing record where the truth is that
    /// its holders could not be reached (`Unavailable`). A peer past the nearest `group`
    /// cannot be a holder once those all said `NotFound`, so it never delays absence.
    pub(crate) fn nearest_answered_not_found(&self, group: usize) -> bool {
        self.list.len() >= group
            && self.list[..group]
                .iter()
                .all(|c| c.tried == Tried::NotFound)
    }

    /// How many candidates answered with an invalid copy.
    pub(crate) fn invalid(&self) -> usize {
        self.list
            .iter()
            .filter(|c| c.tried == Tried::Invalid)
            .count()
    }

    /// Whether a retry round could ask anyone again: a candidate that failed or refused.
    pub(crate) fn any_retryable(&self) -> bool {
        self.list
            .iter()
            .any(|c| matches!(c.tried, Tried::Refused { .. } | Tried::Failed))
    }

    /// A new round asks again everyone who did not answer `NotFound` or an invalid copy.
    pub(crate) fn reset_for_round(&mut self) {
        for c in &mut self.list {
            if matches!(c.tried, Tried::Refused { .. } | Tried::Failed) {
                c.tried = Tried::Untried;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_nearest_bounded_and_deduplicated() {
        let key = Key::from_u64(0);
        let mut c = Candidates::default();
        for n in (0..100u64).rev() {
            c.insert(&key, PeerId::from_u64(n), None);
            c.insert(&key, PeerId::from_u64(n), Some(1));
        }
        assert_eq!(c.len(), MAX_CANDIDATES);
        let ids: Vec<PeerId> = c.as_slice().iter().map(|c| c.peer).collect();
        let want: Vec<PeerId> = (0..MAX_CANDIDATES as u64).map(PeerId::from_u64).collect();
        assert_eq!(ids, want);
    }

    #[test]
    fn get_finds_a_known_candidate_with_what_it_told_and_nothing_else() {
        let key = Key::from_u64(0);
        let mut c = Candidates::default();
        c.insert(&key, PeerId::from_u64(3), Some(7));
        c.set(&PeerId::from_u64(3), Tried::NotFound);
        let got = c.get(&PeerId::from_u64(3)).expect("known");
        assert_eq!(got.peer, PeerId::from_u64(3));
        assert_eq!((got.tried, got.key_load), (Tried::NotFound, Some(7)));
        assert!(c.get(&PeerId::from_u64(4)).is_none());
    }

    #[test]
    fn a_full_list_gives_the_farthest_free_place_to_a_nearer_newcomer() {
        // 32 peers at even ids, all mid-GET but the farthest (62, at index 31). A newcomer
        // (61) whose place is exactly that index takes it: the farthest free peer goes.
        let key = Key::from_u64(0);
        let mut c = Candidates::default();
        for n in 0..MAX_CANDIDATES as u64 {
            c.insert(&key, PeerId::from_u64(2 * n), None);
        }
        for i in 0..MAX_CANDIDATES - 1 {
            c.set_at(i, Tried::InFlight);
        }
        c.insert(&key, PeerId::from_u64(61), None);
        assert_eq!(c.len(), MAX_CANDIDATES);
        assert_eq!(c.as_slice()[MAX_CANDIDATES - 1].peer, PeerId::from_u64(61));
        assert!(c.get(&PeerId::from_u64(62)).is_none());
        // A newcomer farther than every peer it could displace is not taken.
        c.set_at(MAX_CANDIDATES - 1, Tried::InFlight);
        c.insert(&key, PeerId::from_u64(59), None);
        assert!(
            c.get(&PeerId::from_u64(59)).is_none(),
            "every peer is mid-GET"
        );
    }

    #[test]
    fn not_found_nearer_than_counts_only_strictly_nearer_peers() {
        let key = Key::from_u64(0);
        let mut c = Candidates::default();
        for n in 0..4 {
            c.insert(&key, PeerId::from_u64(n), None);
            c.set(&PeerId::from_u64(n), Tried::NotFound);
        }
        let third = key.distance(&PeerId::from_u64(2));
        assert_eq!(
            c.not_found_nearer_than(&third),
            2,
            "peers 0 and 1, not 2 itself"
        );
        assert_eq!(c.not_found(), 4);
    }

    #[test]
    fn the_list_spills_once_straight_to_its_bound() {
        let key = Key::from_u64(0);
        let mut c = Candidates::default();
        for n in 0..=INLINE_CANDIDATES as u64 {
            c.insert(&key, PeerId::from_u64(n), None);
        }
        assert_eq!(c.list.capacity(), MAX_CANDIDATES);
    }
}
