//! A modelled reader: its source address and the per-client state the core machines share
//! across its reads (one cooldown table, one circuit breaker, its requests in flight).

use std::collections::BTreeMap;

use peerblock_core::breaker::{Breaker, BreakerConfig, Outcome, Permit, Rejected, State};
use peerblock_core::cooldown::{CooldownConfig, CooldownTable, DialOutcome};
use peerblock_core::load::{LoadConfig, LoadTable};
use peerblock_core::placement::PeerId;
use peerblock_core::read::PeerView;
use peerblock_core::time::{Duration, Instant};

use crate::model::content::node_of;
use crate::scenario::Scenario;

/// One reader (a browser, a client process).
#[derive(Debug)]
pub struct Reader {
    /// Source address index (several readers may share one).
    pub source: u32,
    /// Dial-level suppression: Refused (short) vs Failed (long).
    pub cooldown: CooldownTable<PeerId>,
    /// Per-peer circuit breaker keyed by node index, if the scenario runs one.
    pub breaker: Option<Breaker<u32>>,
    /// This reader's GETs in flight per node.
    pub in_flight: BTreeMap<u32, u32>,
    /// The load each node last advertised in a response to this reader, by node index.
    pub loads: LoadTable<u32>,
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

impl Reader {
    /// A reader with fresh client state.
    pub fn new(source: u32, s: &Scenario) -> Self {
        let mut r = Reader {
            source,
            cooldown: CooldownTable::new(cooldown_config(s)).expect("validated"),
            breaker: None,
            in_flight: BTreeMap::new(),
            loads: LoadTable::new(LoadConfig::default()).expect("default is valid"),
        };
        r.reset(s);
        r
    }

    /// Forgets cooldowns and circuits (a reloaded page).
    pub fn reset(&mut self, s: &Scenario) {
        self.cooldown = CooldownTable::new(cooldown_config(s)).expect("validated");
        self.breaker = breaker_config(s).map(|c| Breaker::new(c).expect("validated"));
        self.loads = LoadTable::new(LoadConfig::default()).expect("default is valid");
    }

    /// Records the load `node` advertised in a response that reached this reader at `now`.
    pub fn heard_load(&mut self, now: Instant, node: u32, load: u32) {
        self.loads.record(now, node, load);
    }

    /// Asks the breaker to admit a GET to `node`. `Ok(None)` when there is no breaker.
    pub fn admit(&mut self, now: Instant, node: u32) -> Result<Option<Permit>, Rejected> {
        match self.breaker.as_mut() {
            None => Ok(None),
            Some(b) => b.admit(now, &node).map(Some),
        }
    }

    /// Reports a GET's outcome to the breaker; returns whether it opened the circuit.
    pub fn record(
        &mut self,
        now: Instant,
        node: u32,
        permit: Option<Permit>,
        outcome: Outcome,
    ) -> bool {
        let (Some(b), Some(p)) = (self.breaker.as_mut(), permit) else {
            return false;
        };
        let before = b.state(now, &node);
        let _ = b.record(now, p, outcome);
        before != State::Open && b.state(now, &node) == State::Open
    }

    /// Gives back the permit of a GET the read cancelled (not the peer's fault).
    pub fn release(&mut self, now: Instant, permit: Option<Permit>) {
        if let (Some(b), Some(p)) = (self.breaker.as_mut(), permit) {
            let _ = b.release(now, p);
        }
    }

    /// Records a dial-level outcome against `peer` in the cooldown table.
    pub fn suppress(&mut self, now: Instant, peer: PeerId, outcome: DialOutcome) {
        self.cooldown.record(now, peer, outcome);
    }

    /// Counts a GET to `node` going out.
    pub fn get_started(&mut self, node: u32) {
        *self.in_flight.entry(node).or_insert(0) += 1;
    }

    /// Counts a GET to `node` ending.
    pub fn get_ended(&mut self, node: u32) {
        if let Some(n) = self.in_flight.get_mut(&node) {
            *n -= 1;
            if *n == 0 {
                self.in_flight.remove(&node);
            }
        }
    }
}

impl PeerView for Reader {
    fn eligible(&self, now: Instant, peer: &PeerId) -> bool {
        !self.cooldown.is_suppressed(now, peer)
            && self
                .breaker
                .as_ref()
                .is_none_or(|b| b.healthy(now, &node_of(peer)))
    }

    fn refused_for(&self, now: Instant, peer: &PeerId) -> Option<Duration> {
        self.cooldown.refused_for(now, peer)
    }

    fn in_flight(&self, peer: &PeerId) -> u32 {
        self.in_flight.get(&node_of(peer)).copied().unwrap_or(0)
    }

    fn load(&self, now: Instant, peer: &PeerId) -> Option<u32> {
        self.loads.load(now, &node_of(peer))
    }

    fn for_each_refused(&self, now: Instant, f: &mut dyn FnMut(PeerId, Duration)) {
        for (p, left) in self.cooldown.refusals(now) {
            f(*p, left);
        }
    }
}
