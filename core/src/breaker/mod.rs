//! Per-peer circuit breaking: a dead peer costs one failed attempt, not a dial timeout on
//! every read, and a healthy peer is never ejected by a stale or misclassified result.
//!
//! A [`Breaker`] tracks one circuit per peer key (drivers key by address, the simulator by
//! node index). Callers classify each exchange as an [`Outcome`]; the breaker moves each
//! circuit through [`State::Closed`] → [`State::Open`] → [`State::HalfOpen`] → closed or
//! back to open. The full transition table is [`TRANSITIONS`], rendered in
//! `docs/breaker.md`.
//!
//! # Driving contract
//!
//! The breaker is sans-IO and owns no timers: the cooldown ending and an unreported
//! probe's lease running out are applied lazily, the next time a call with a `now` looks at
//! that peer, so there is nothing to poll and no deadline to drive.
//!
//! * Data requests: [`Breaker::admit`] before dialing; on `Err(Rejected)` skip the peer
//!   (no dial). Report the result with [`Breaker::record`], or [`Breaker::release`] if the
//!   caller abandoned the request (cancellation counts as answered: the peer did nothing
//!   wrong, and the half-open probe slot is freed).
//! * Membership (roster) requests: [`Breaker::admit_roster`], which never refuses, then
//!   `record`. Roster outcomes count, but never take or override data-probe slots.
//! * Callers managing their own lifecycle: [`Breaker::allow`] and the unscoped
//!   [`Breaker::record_success`] / [`record_failure`](Breaker::record_failure) /
//!   [`record_hard_failure`](Breaker::record_hard_failure), which count against whatever
//!   the circuit is at the moment of the report.
//! * Read paths: [`Breaker::healthy`] and [`Breaker::state`] are read-only observers
//!   (`&self`) that never stamp activity, so a read machine's `PeerView` or a metrics
//!   scrape cannot change which entry is evicted next.
//!
//! Time must not go backwards. If it does, the breaker clamps: every call treats an
//! earlier `now` as the latest time a request path has shown it, so nothing panics, no
//! deadline fires early, and no cooldown is stamped in the past.
//!
//! # Generations
//!
//! Each admission returns a [`Permit`] bound to the peer's entry and the entry's
//! generation; opening, reopening and recovering a circuit start a new generation and
//! results from older ones are ignored ([`Recorded::Stale`]). See the docs of
//! [`Permit`] for why.
//!
//! # Bounded map
//!
//! At most [`BreakerConfig::max_peers`] peers are tracked. Creating an entry past the cap
//! first sweeps the least-recently-active *clean* entry (closed, no failures, no probes),
//! else evicts the least-recently-active entry of all. Both are O(1) list operations plus
//! one `BTreeMap` update (see `table`). Evicting a dirty entry forgets that peer's circuit,
//! which is safe: it is the peer no request has touched for the longest time, and if it is
//! still sick the next request re-creates the entry and re-accumulates the failures.
//!
//! # Optional behaviours (off by default)
//!
//! * [`BreakerConfig::max_open_share`]: a circuit may open only while at most that
//!   percentage of tracked peers (counting the one about to open) would be non-closed, and
//!   always when no other circuit is open. A circuit held closed by the cap keeps its
//!   failure budget spent, so its next failure tries again.
//! * [`BreakerConfig::backoff`]: each consecutive failed probe round doubles the cooldown
//!   (capped, jittered from a seeded ChaCha8 stream).

mod config;
mod entry;
mod outcome;
mod permit;
mod table;
mod transitions;

pub use config::{
    Backoff, BreakerConfig, ConfigError, BACKOFF_FACTOR, DEFAULT_COOLDOWN,
    DEFAULT_FAILURE_THRESHOLD, DEFAULT_HALF_OPEN_PROBES, DEFAULT_MAX_PEERS, DEFAULT_PROBE_LEASE,
    MAX_PEERS_LIMIT,
};
pub use outcome::{Outcome, State};
pub use permit::{Permit, PermitKind, Recorded, Rejected};
pub use transitions::{Event, Transition, TRANSITIONS};

use crate::rng::{seeded, ChaCha8Rng};
use crate::time::Instant;
use entry::{Change, Via, View};
use table::Table;

/// Per-peer circuit breakers over a hard-capped map; see the [module docs](self).
#[derive(Debug)]
pub struct Breaker<K> {
    config: BreakerConfig,
    table: Table<K>,
    /// Tracked circuits that are not closed (open or half-open).
    open: usize,
    /// Jitter stream of the optional backoff; `None` when backoff is off.
    rng: Option<ChaCha8Rng>,
    /// The latest `now` seen by a request path; earlier times are clamped to it.
    latest: Instant,
}

impl<K: Ord + Clone> Breaker<K> {
    /// A breaker with `config`, or the first configuration problem found.
    pub fn new(config: BreakerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let rng = config.backoff.as_ref().map(|b| seeded(b.seed));
        Ok(Self {
            table: Table::new(config.max_peers),
            config,
            open: 0,
            rng,
            latest: Instant::ZERO,
        })
    }

    /// The configuration this breaker was built with.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// Asks to send a data request to `key`. `Ok` carries the permit to report its outcome
    /// with; `Err` means skip the peer without dialing. Stamps activity either way (an
    /// actively routed-to sick peer keeps its open circuit).
    pub fn admit(&mut self, now: Instant, key: &K) -> Result<Permit, Rejected> {
        let now = self.clock(now);
        let slot = self.slot_for(key);
        self.settle(slot, now);
        let admitted = self.table.entry_mut(slot).admit(now, &self.config);
        self.table.touch(slot);
        match admitted {
            Ok(probe) => Ok(self.permit(
                slot,
                if probe {
                    PermitKind::Probe
                } else {
                    PermitKind::Data
                },
            )),
            Err(view) => Err(Rejected {
                state: view.state(),
                retry_after: match view {
                    View::Open { until } => Some(until - now),
                    View::Closed | View::HalfOpen { .. } => None,
                },
            }),
        }
    }

    /// Admits a membership (roster) request regardless of the circuit: for a roster there
    /// is no alternative source, so refusing to ask would be refusing to ever learn about
    /// the peer. The outcome still counts, without taking or overriding data-probe slots.
    pub fn admit_roster(&mut self, now: Instant, key: &K) -> Permit {
        let now = self.clock(now);
        let slot = self.slot_for(key);
        self.settle(slot, now);
        self.table.touch(slot);
        self.permit(slot, PermitKind::Roster)
    }

    /// Reports the outcome of the request `permit` was issued for. A permit from an older
    /// generation, or for an entry since evicted, changes nothing (not even activity).
    pub fn record(&mut self, now: Instant, permit: Permit, outcome: Outcome) -> Recorded {
        let now = self.clock(now);
        let Some(slot) = self.table.live(permit.slot, permit.entry) else {
            return Recorded::Stale;
        };
        self.settle(slot, now);
        if self.table.entry(slot).generation != permit.generation {
            return Recorded::Stale;
        }
        let via = match permit.kind {
            PermitKind::Data => Via::Data,
            PermitKind::Probe => Via::Probe,
            PermitKind::Roster => Via::Roster,
        };
        self.apply(slot, now, via, outcome);
        Recorded::Applied
    }

    /// Gives a permit back for a request the caller abandoned (a hedging loser, a client
    /// that went away). Recorded as [`Outcome::Answered`]: the peer is not at fault, and a
    /// half-open probe slot is freed.
    pub fn release(&mut self, now: Instant, permit: Permit) -> Recorded {
        self.record(now, permit, Outcome::Answered)
    }

    /// Unscoped admission: whether a data request may go to `key` now. In half-open this
    /// reserves a probe slot, which the caller must settle with one `record_*` report.
    pub fn allow(&mut self, now: Instant, key: &K) -> bool {
        self.admit(now, key).is_ok()
    }

    /// Unscoped report: `key` answered. Counts against the circuit as it is now: resets a
    /// closed count, settles an outstanding half-open probe, and recovers an open or
    /// unprobed half-open circuit. An untracked key stays untracked.
    pub fn record_success(&mut self, now: Instant, key: &K) {
        let now = self.clock(now);
        if let Some(slot) = self.table.find(key) {
            self.settle(slot, now);
            self.apply(slot, now, Via::Unscoped, Outcome::Answered);
        }
    }

    /// Unscoped report: a soft failure of `key` (spends one unit of budget; fails a
    /// half-open probe; does not restamp an open circuit's cooldown).
    pub fn record_failure(&mut self, now: Instant, key: &K) {
        self.record_unscoped_failure(now, key, Outcome::SoftFailure);
    }

    /// Unscoped report: a hard failure of `key` (opens a closed circuit at once; fails a
    /// half-open probe; does not restamp an open circuit's cooldown).
    pub fn record_hard_failure(&mut self, now: Instant, key: &K) {
        self.record_unscoped_failure(now, key, Outcome::HardFailure);
    }

    /// The circuit of `key` as of `now` (untracked peers are closed). Read-only: never
    /// stamps activity.
    pub fn state(&self, now: Instant, key: &K) -> State {
        self.view(now, key).state()
    }

    /// Whether a data request to `key` would be admitted now, without reserving anything:
    /// closed, or half-open with a free probe slot. Read-only: never stamps activity.
    pub fn healthy(&self, now: Instant, key: &K) -> bool {
        match self.view(now, key) {
            View::Closed => true,
            View::Open { .. } => false,
            View::HalfOpen { can_admit } => can_admit,
        }
    }

    /// Tracked circuits that are not closed (open or half-open).
    pub fn open_count(&self) -> usize {
        self.open
    }

    /// Tracked peers (never more than [`BreakerConfig::max_peers`]).
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no peer is tracked.
    pub fn is_empty(&self) -> bool {
        self.table.len() == 0
    }

    /// Whether `key` currently has an entry. Read-only.
    pub fn is_tracked(&self, key: &K) -> bool {
        self.table.find(key).is_some()
    }

    /// Tracked keys in eviction order (next victim first: clean entries from stalest, then
    /// the rest from stalest). O(n) and allocating; for diagnostics and tests, so only
    /// with the `diagnostics` feature (the test kit turns it on).
    #[cfg(feature = "diagnostics")]
    pub fn eviction_order(&self) -> Vec<K> {
        self.table.eviction_order()
    }

    /// Clamps a request path's `now` to the latest seen and remembers it.
    fn clock(&mut self, now: Instant) -> Instant {
        self.latest = self.latest.max(now);
        self.latest
    }

    fn view(&self, now: Instant, key: &K) -> View {
        let now = now.max(self.latest);
        match self.table.find(key) {
            Some(slot) => self.table.entry(slot).view(now, &self.config),
            None => View::Closed,
        }
    }

    fn record_unscoped_failure(&mut self, now: Instant, key: &K, outcome: Outcome) {
        let now = self.clock(now);
        let slot = self.slot_for(key);
        self.settle(slot, now);
        self.apply(slot, now, Via::Unscoped, outcome);
    }

    fn slot_for(&mut self, key: &K) -> u32 {
        if let Some(slot) = self.table.find(key) {
            return slot;
        }
        let (slot, evicted) = self.table.insert(key.clone());
        if evicted.is_some_and(|e| !e.is_closed()) {
            self.open -= 1;
        }
        slot
    }

    fn settle(&mut self, slot: u32, now: Instant) {
        self.table
            .entry_mut(slot)
            .settle(now, &self.config, self.rng.as_mut());
    }

    fn apply(&mut self, slot: u32, now: Instant, via: Via, outcome: Outcome) {
        let may_open = match self.config.max_open_share {
            None => true,
            Some(percent) => {
                self.open == 0 || (self.open + 1) * 100 <= usize::from(percent) * self.table.len()
            }
        };
        let change = self
            .table
            .entry_mut(slot)
            .apply(now, via, outcome, &self.config, may_open);
        match change {
            Change::None => {}
            Change::Opened => self.open += 1,
            Change::Closed => self.open -= 1,
        }
        self.table.touch(slot);
    }

    fn permit(&self, slot: u32, kind: PermitKind) -> Permit {
        Permit {
            slot,
            entry: self.table.id(slot),
            generation: self.table.entry(slot).generation,
            kind,
        }
    }
}
