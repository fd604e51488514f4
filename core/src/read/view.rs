//! What the read machine asks its driver at decision time: [`PeerView`].
//!
//! The machine owns no breaker, no cooldown table and no load counters: those are shared by
//! every read (and every exchange) of a client, so the driver owns them and answers for
//! them through this trait. The machine asks only while deciding (in
//! [`Read::poll_event`](super::Read::poll_event)), so the answers are always current.

use crate::cooldown::CooldownTable;
use crate::load::LoadTable;
use crate::placement::PeerId;
use crate::time::{Duration, Instant};

/// The driver's knowledge about peers, consulted by the read machine.
pub trait PeerView {
    /// Whether a GET may go to `peer` now: not suppressed by a cooldown, circuit not open.
    /// The machine never sends a GET to an ineligible peer.
    fn eligible(&self, now: Instant, peer: &PeerId) -> bool;

    /// If `peer` is skipped because it refused, how much longer. A refused peer should
    /// also be ineligible; the machine treats it as ineligible either way.
    fn refused_for(&self, now: Instant, peer: &PeerId) -> Option<Duration>;

    /// This client's requests in flight to `peer` (for load-aware spreading). Default 0.
    fn in_flight(&self, _peer: &PeerId) -> u32 {
        0
    }

    /// The requests in progress `peer` last advertised in a response (its
    /// [`header::LOAD`](crate::wire::header::LOAD)), decayed by age, or `None` if nothing
    /// recent was heard. This is what other clients are doing to the peer, which this
    /// client's own [`in_flight`](PeerView::in_flight) cannot show. Drivers answer it
    /// from a [`LoadTable`]; the default (no hints) makes load-aware spreading fall back to
    /// this client's own load.
    fn load(&self, _now: Instant, _peer: &PeerId) -> Option<u32> {
        None
    }

    /// Calls `f` for every peer currently skipped for a refusal, with its time left,
    /// including peers discovery left out of its answer. The default reports none (a
    /// transport without refusals), which keeps the single-retry behaviour.
    fn for_each_refused(&self, _now: Instant, _f: &mut dyn FnMut(PeerId, Duration)) {}
}

/// A cooldown table keyed by peer id is a complete view of dial-level suppression: a
/// suppressed peer is ineligible, and its refusals are listed. (No load, no breaker: a
/// driver combining several sources implements [`PeerView`] itself and delegates here.)
impl PeerView for CooldownTable<PeerId> {
    fn eligible(&self, now: Instant, peer: &PeerId) -> bool {
        !self.is_suppressed(now, peer)
    }

    fn refused_for(&self, now: Instant, peer: &PeerId) -> Option<Duration> {
        CooldownTable::refused_for(self, now, peer)
    }

    fn for_each_refused(&self, now: Instant, f: &mut dyn FnMut(PeerId, Duration)) {
        for (p, left) in self.refusals(now) {
            f(*p, left);
        }
    }
}

/// A load table keyed by peer id answers [`PeerView::load`] and nothing else: everyone
/// eligible, nobody refusing. Drivers combine it with their cooldown table and breaker in
/// their own view; on its own it is handy for tests of the spreading choice.
impl PeerView for LoadTable<PeerId> {
    fn eligible(&self, _now: Instant, _peer: &PeerId) -> bool {
        true
    }

    fn refused_for(&self, _now: Instant, _peer: &PeerId) -> Option<Duration> {
        None
    }

    fn load(&self, now: Instant, peer: &PeerId) -> Option<u32> {
        LoadTable::load(self, now, peer)
    }
}

impl<V: PeerView + ?Sized> PeerView for &V {
    fn eligible(&self, now: Instant, peer: &PeerId) -> bool {
        (**self).eligible(now, peer)
    }
    fn refused_for(&self, now: Instant, peer: &PeerId) -> Option<Duration> {
        (**self).refused_for(now, peer)
    }
    fn in_flight(&self, peer: &PeerId) -> u32 {
        (**self).in_flight(peer)
    }
    fn load(&self, now: Instant, peer: &PeerId) -> Option<u32> {
        (**self).load(now, peer)
    }
    fn for_each_refused(&self, now: Instant, f: &mut dyn FnMut(PeerId, Duration)) {
        (**self).for_each_refused(now, f)
    }
}
