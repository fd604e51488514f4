//! A modelled reader: its source address and the per-client state the core machines share
//! across its reads: one [`Peers`] (breaker, cooldown table, load table, GETs in flight),
//! the same aggregate a socket driver keeps.

use peerblock_core::breaker::BreakerConfig;
use peerblock_core::client::{Peers, PeersConfig};
use peerblock_core::cooldown::CooldownConfig;
use peerblock_core::load::LoadConfig;
use peerblock_core::placement::PeerId;
use peerblock_core::read::PeerView;
use peerblock_core::time::{Duration, Instant};

use crate::scenario::Scenario;

/// One reader (a browser, a client process).
#[derive(Debug)]
pub struct Reader {
    /// Source address index (several readers may share one).
    pub source: u32,
    /// What this reader knows about the nodes, keyed by their peer ids: core's client
    /// aggregate, consulted by its reads through [`PeerView`].
    pub peers: Peers,
}

/// Builds the cooldown configuration a scenario asks for.
pub fn cooldown_config(s: &Scenario) -> CooldownConfig {
    CooldownConfig {
        refused: Duration::from_secs(s.client.refused_cooldown_secs),
        failed: Duration::from_secs(s.client.failed_cooldown_secs),
        ..CooldownConfig::default()
    }
}

/// Builds the breaker configuration a scenario asks for (`None` when disabled).
pub fn breaker_config(s: &Scenario) -> Option<BreakerConfig> {
    s.breaker.enabled.then(|| BreakerConfig {
        failure_threshold: s.breaker.failure_threshold,
        cooldown: Duration::from_millis(s.breaker.cooldown_ms),
        half_open_probes: s.breaker.half_open_probes,
        ..BreakerConfig::default()
    })
}

/// The client aggregate's configuration a scenario asks for.
pub fn peers_config(s: &Scenario) -> PeersConfig {
    PeersConfig {
        breaker: breaker_config(s),
        cooldown: cooldown_config(s),
        load: LoadConfig::default(),
    }
}

impl Reader {
    /// A reader with fresh client state.
    pub fn new(source: u32, s: &Scenario) -> Self {
        Reader {
            source,
            peers: Peers::new(peers_config(s)).expect("validated with the scenario"),
        }
    }

    /// Forgets cooldowns, circuits and load hints (a reloaded page); GETs in flight stay
    /// counted.
    pub fn reset(&mut self) {
        self.peers.forget();
    }
}

/// The reader's view is its [`Peers`].
impl PeerView for Reader {
    fn eligible(&self, now: Instant, peer: &PeerId) -> bool {
        self.peers.eligible(now, peer)
    }

    fn refused_for(&self, now: Instant, peer: &PeerId) -> Option<Duration> {
        self.peers.refused_for(now, peer)
    }

    fn in_flight(&self, peer: &PeerId) -> u32 {
        PeerView::in_flight(&self.peers, peer)
    }

    fn load(&self, now: Instant, peer: &PeerId) -> Option<u32> {
        PeerView::load(&self.peers, now, peer)
    }

    fn for_each_refused(&self, now: Instant, f: &mut dyn FnMut(PeerId, Duration)) {
        self.peers.for_each_refused(now, f)
    }
}
