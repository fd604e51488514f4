//! [`StaticView`]: a plain, explicit [`PeerView`] for tests and simulations.

use std::collections::{BTreeMap, BTreeSet};

use peerblock_core::placement::PeerId;
use peerblock_core::read::PeerView;
use peerblock_core::time::{Duration, Instant};

/// A plain, explicit view for tests and simulations: sets of blocked peers, refusal end
/// instants and load counters, all in ordered maps so iteration never depends on hashing.
#[derive(Clone, Debug, Default)]
pub struct StaticView {
    /// Peers that are never eligible (circuit open, long failure).
    pub blocked: BTreeSet<PeerId>,
    /// Peers refusing until the given instant (exclusive).
    pub refused_until: BTreeMap<PeerId, Instant>,
    /// Requests in flight per peer.
    pub load: BTreeMap<PeerId, u32>,
    /// Advertised (already decayed) load per peer, as [`PeerView::load`] reports it.
    pub advertised: BTreeMap<PeerId, u32>,
}

impl StaticView {
    /// An empty view: everyone eligible, nobody refusing, no load.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks `peer` as refusing until `until`.
    pub fn refuse_until(&mut self, peer: PeerId, until: Instant) {
        self.refused_until.insert(peer, until);
    }

    /// Marks `peer` ineligible.
    pub fn block(&mut self, peer: PeerId) {
        self.blocked.insert(peer);
    }
}

impl PeerView for StaticView {
    fn eligible(&self, now: Instant, peer: &PeerId) -> bool {
        !self.blocked.contains(peer) && self.refused_for(now, peer).is_none()
    }

    fn refused_for(&self, now: Instant, peer: &PeerId) -> Option<Duration> {
        let until = *self.refused_until.get(peer)?;
        (until > now).then(|| until - now)
    }

    fn in_flight(&self, peer: &PeerId) -> u32 {
        self.load.get(peer).copied().unwrap_or(0)
    }

    fn load(&self, _now: Instant, peer: &PeerId) -> Option<u32> {
        self.advertised.get(peer).copied()
    }

    fn for_each_refused(&self, now: Instant, f: &mut dyn FnMut(PeerId, Duration)) {
        for (p, until) in &self.refused_until {
            if *until > now {
                f(*p, *until - now);
            }
        }
    }
}
