//! Dial-level suppression: which endpoints the client is skipping, why, and until when.
//!
//! A dial ends in one of two ways worth remembering:
//!
//! - **Refused**: the node answered and said it is full (HTTP `503` with a refusal header,
//!   a transport-level refusal). The node is alive; it is skipped only briefly (default
//!   [`DEFAULT_REFUSED_COOLDOWN`], 15 s, or the node's own `Retry-After` bounded by
//!   [`CooldownConfig::max_retry_after`]).
//! - **Failed**: the dial timed out, was reset, or reached something that is not the node.
//!   The endpoint is skipped for a long time (default [`DEFAULT_FAILED_COOLDOWN`], 30 min).
//!
//! The table is bounded ([`CooldownConfig::capacity`]). When it is full the entry that
//! expires first is evicted, so a short refusal never pushes out a long failure. Entries
//! end at their expiry instant (an entry recorded at `t` for 15 s suppresses up to but not
//! including `t + 15 s`), and every operation that takes `now` treats ended entries as gone;
//! [`CooldownTable::purge`] drops them from memory. Operations are `O(log n)`: the table
//! keeps a second index ordered by expiry (the crate's private timed map, shared with the
//! load table), so eviction and purging never scan.
//!
//! The table is generic over the endpoint key `E`: drivers use a socket address or string,
//! the simulator a node index, the read machine's [`PeerView`](crate::read::PeerView) a
//! [`PeerId`](crate::placement::PeerId).

use crate::refusal::{DEFAULT_MAX_RETRY_AFTER, DEFAULT_REFUSED_COOLDOWN};
use crate::time::{Duration, Instant};
use crate::timed::TimedMap;

/// How long an endpoint whose dial failed is skipped: the reference dial-failure cooldown.
/// A failed dial cost a full timeout; trying again soon would cost another.
pub const DEFAULT_FAILED_COOLDOWN: Duration = Duration::from_secs(30 * 60);

/// Default table capacity: matches the breaker's peer map (4096), comfortably above the
/// number of distinct endpoints a client touches in 30 minutes, small enough (a few
/// hundred KiB) to never matter.
pub const DEFAULT_CAPACITY: usize = 4096;

/// What a dial to an endpoint ended in, as far as suppression cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DialOutcome {
    /// The node answered and declined for lack of capacity.
    Refused {
        /// The node's advertised `Retry-After`, if any (bounded by config before use).
        retry_after: Option<Duration>,
    },
    /// The dial failed: timeout, reset, wrong node, authentication failure.
    Failed,
}

/// Why an endpoint is being skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suppression {
    /// Skipped briefly because it refused: it is alive and may hold what we want.
    Refused,
    /// Skipped for long because the dial failed.
    Failed,
}

/// Cooldown lengths and table bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CooldownConfig {
    /// Suppression after a refusal without `Retry-After` (default 15 s).
    pub refused: Duration,
    /// Suppression after a failed dial (default 30 min).
    pub failed: Duration,
    /// Upper bound applied to a peer's `Retry-After` (default 15 s, the one cap
    /// [`DEFAULT_MAX_RETRY_AFTER`]).
    pub max_retry_after: Duration,
    /// Most endpoints remembered at once (default 4096, must be at least 1).
    pub capacity: usize,
}

impl Default for CooldownConfig {
    fn default() -> Self {
        CooldownConfig {
            refused: DEFAULT_REFUSED_COOLDOWN,
            failed: DEFAULT_FAILED_COOLDOWN,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            capacity: DEFAULT_CAPACITY,
        }
    }
}

/// A [`CooldownConfig`] the integrator got wrong (local misuse, never a peer's fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CooldownConfigError {
    /// `capacity` was 0: the table could not remember the entry it was just given.
    #[error("cooldown config: capacity must be at least 1")]
    ZeroCapacity,
}

/// The bounded suppression table. See the module docs.
#[derive(Clone, Debug)]
pub struct CooldownTable<E: Ord + Clone> {
    config: CooldownConfig,
    /// Endpoint → why it is skipped, stamped with the instant the suppression ends.
    entries: TimedMap<E, Suppression>,
}

impl<E: Ord + Clone> CooldownTable<E> {
    /// An empty table, or an error naming the bad field.
    pub fn new(config: CooldownConfig) -> Result<Self, CooldownConfigError> {
        if config.capacity == 0 {
            return Err(CooldownConfigError::ZeroCapacity);
        }
        Ok(CooldownTable {
            entries: TimedMap::new(config.capacity),
            config,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &CooldownConfig {
        &self.config
    }

    /// How long `outcome` suppresses an endpoint under this config.
    pub fn cooldown_for(&self, outcome: DialOutcome) -> Duration {
        match outcome {
            DialOutcome::Refused { retry_after: None } => self.config.refused,
            DialOutcome::Refused {
                retry_after: Some(ra),
            } => ra.min(self.config.max_retry_after),
            DialOutcome::Failed => self.config.failed,
        }
    }

    /// Records that a dial to `endpoint` ended in `outcome` at `now`.
    ///
    /// The latest observation replaces any earlier entry for the endpoint: a refusal after
    /// a failure proves the node is back and answering, so it is skipped only briefly.
    /// When the table is full, the entry expiring first is evicted (possibly the new one
    /// itself is never stored, if it would expire before everything already held).
    pub fn record(&mut self, now: Instant, endpoint: E, outcome: DialOutcome) {
        self.purge(now);
        self.remove(&endpoint);
        let kind = match outcome {
            DialOutcome::Refused { .. } => Suppression::Refused,
            DialOutcome::Failed => Suppression::Failed,
        };
        let until = now.saturating_add(self.cooldown_for(outcome));
        if until <= now {
            return; // a zero cooldown suppresses nothing
        }
        if self.entries.is_full() && self.entries.earliest().is_some_and(|first| first > until) {
            return; // the newcomer is the earliest to expire: it is the one evicted
        }
        // Full, the entry expiring first makes room.
        self.entries.insert(endpoint, until, kind);
    }

    /// Forgets `endpoint` (a later dial succeeded). Returns whether it was held.
    pub fn remove(&mut self, endpoint: &E) -> bool {
        self.entries.remove(endpoint).is_some()
    }

    /// Why and for how much longer `endpoint` is skipped at `now`, if it is.
    pub fn suppression(&self, now: Instant, endpoint: &E) -> Option<(Suppression, Duration)> {
        let (until, kind) = self.entries.get(endpoint)?;
        (until > now).then(|| (*kind, until - now))
    }

    /// Whether dials to `endpoint` should be skipped at `now`.
    pub fn is_suppressed(&self, now: Instant, endpoint: &E) -> bool {
        self.suppression(now, endpoint).is_some()
    }

    /// Time left on `endpoint`'s refusal at `now`, if it is skipped for a refusal.
    pub fn refused_for(&self, now: Instant, endpoint: &E) -> Option<Duration> {
        match self.suppression(now, endpoint)? {
            (Suppression::Refused, left) => Some(left),
            (Suppression::Failed, _) => None,
        }
    }

    /// Live refusals at `now` with their time left, in endpoint order. Ended refusals are
    /// never listed, whether or not they were purged yet.
    pub fn refusals(&self, now: Instant) -> impl Iterator<Item = (&E, Duration)> + '_ {
        self.entries
            .iter()
            .filter(move |(_, until, kind)| **kind == Suppression::Refused && *until > now)
            .map(move |(ep, until, _)| (ep, until - now))
    }

    /// Drops every entry that has ended by `now`. `O(k log n)` for `k` ended entries.
    pub fn purge(&mut self, now: Instant) {
        self.entries.purge_while(|until| until <= now);
    }

    /// Entries held (including ended ones not yet purged).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> Instant {
        Instant::from_secs(secs)
    }

    fn table(capacity: usize) -> CooldownTable<&'static str> {
        CooldownTable::new(CooldownConfig {
            capacity,
            ..CooldownConfig::default()
        })
        .unwrap()
    }

    const REFUSED: DialOutcome = DialOutcome::Refused { retry_after: None };

    /// Rule: a refusal expires after its shorter cooldown while a failure does not.
    #[test]
    fn refusal_expires_after_its_cooldown_while_a_failure_does_not() {
        let mut tab = table(16);
        tab.record(t(0), "refuser", REFUSED);
        tab.record(t(0), "dead", DialOutcome::Failed);
        assert!(tab.is_suppressed(t(14), &"refuser"));
        assert!(!tab.is_suppressed(t(15), &"refuser"));
        assert!(tab.is_suppressed(t(15), &"dead"));
        assert!(tab.is_suppressed(t(30 * 60 - 1), &"dead"));
        assert!(!tab.is_suppressed(t(30 * 60), &"dead"));
    }

    /// Rule: when full, the entry expiring first goes, so a refusal never evicts a failure.
    #[test]
    fn eviction_drops_a_refusal_before_a_longer_failure() {
        let mut tab = table(2);
        tab.record(t(0), "dead", DialOutcome::Failed);
        tab.record(t(1), "refuser", REFUSED);
        tab.record(t(2), "dead2", DialOutcome::Failed);
        assert_eq!(tab.len(), 2);
        assert!(tab.is_suppressed(t(3), &"dead"));
        assert!(tab.is_suppressed(t(3), &"dead2"));
        assert!(!tab.is_suppressed(t(3), &"refuser"));
        // A refusal arriving at a table full of failures is itself the earliest to expire.
        tab.record(t(4), "refuser", REFUSED);
        assert!(tab.is_suppressed(t(5), &"dead"));
        assert!(!tab.is_suppressed(t(5), &"refuser"));
    }

    /// Rule: live refusals are listed with their time left and dropped once they end.
    #[test]
    fn live_refusals_are_listed_with_time_left_and_dropped_once_ended() {
        let mut tab = table(16);
        tab.record(t(0), "a", REFUSED);
        tab.record(t(5), "b", REFUSED);
        tab.record(t(5), "dead", DialOutcome::Failed);
        let live: Vec<_> = tab.refusals(t(10)).collect();
        assert_eq!(
            live,
            vec![
                (&"a", Duration::from_secs(5)),
                (&"b", Duration::from_secs(10))
            ]
        );
        let live: Vec<_> = tab.refusals(t(15)).collect();
        assert_eq!(live, vec![(&"b", Duration::from_secs(5))]);
        tab.purge(t(15));
        assert_eq!(tab.len(), 2);
        tab.purge(t(20));
        assert_eq!(tab.refusals(t(20)).count(), 0);
        assert_eq!(tab.len(), 1, "only the failure remains");
    }

    #[test]
    fn retry_after_is_honoured_but_bounded() {
        let mut tab = table(16);
        let ra = |s| DialOutcome::Refused {
            retry_after: Some(Duration::from_secs(s)),
        };
        tab.record(t(0), "short", ra(3));
        tab.record(t(0), "long", ra(3600));
        assert_eq!(
            tab.refused_for(t(0), &"short"),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            tab.refused_for(t(0), &"long"),
            Some(DEFAULT_MAX_RETRY_AFTER)
        );
        tab.record(t(0), "zero", ra(0));
        assert!(!tab.is_suppressed(t(0), &"zero"));
    }

    #[test]
    fn latest_observation_wins_and_remove_forgets() {
        let mut tab = table(16);
        tab.record(t(0), "x", DialOutcome::Failed);
        tab.record(t(1), "x", REFUSED);
        assert_eq!(
            tab.suppression(t(1), &"x"),
            Some((Suppression::Refused, Duration::from_secs(15)))
        );
        assert!(tab.remove(&"x"));
        assert!(!tab.is_suppressed(t(1), &"x"));
        assert!(tab.is_empty());
    }

    /// Rule: a newcomer to a full table is dropped only if it expires *before* everything
    /// held; on a tie with the earliest entry it replaces that entry (the latest
    /// observation wins).
    #[test]
    fn eviction_tie_keeps_the_newcomer() {
        let mut tab = table(2);
        tab.record(t(0), "a", REFUSED); // until 15
        tab.record(t(0), "dead", DialOutcome::Failed);
        tab.record(t(0), "b", REFUSED); // until 15: ties with "a"
        assert_eq!(tab.len(), 2);
        assert!(tab.is_suppressed(t(1), &"b"), "the newcomer is held");
        assert!(
            !tab.is_suppressed(t(1), &"a"),
            "the old entry of the tie went"
        );
        assert!(tab.is_suppressed(t(1), &"dead"));
    }

    /// Rule: the table reports the configuration it was built with.
    #[test]
    fn config_is_the_one_given() {
        let config = CooldownConfig {
            refused: Duration::from_secs(3),
            failed: Duration::from_secs(600),
            max_retry_after: Duration::from_secs(9),
            capacity: 7,
        };
        let tab = CooldownTable::<u32>::new(config.clone()).unwrap();
        assert_eq!(tab.config(), &config);
        assert_ne!(tab.config(), &CooldownConfig::default());
    }

    /// Rule: `is_empty` is true exactly when no entry is held (ended ones count until
    /// purged, like `len`).
    #[test]
    fn is_empty_tracks_held_entries() {
        let mut tab = table(4);
        assert!(tab.is_empty());
        tab.record(t(0), "a", REFUSED);
        assert!(!tab.is_empty());
        assert!(!tab.is_suppressed(t(20), &"a"));
        assert!(!tab.is_empty(), "ended but not purged");
        tab.purge(t(20));
        assert!(tab.is_empty());
    }

    #[test]
    fn zero_capacity_is_a_config_error() {
        let r = CooldownTable::<u32>::new(CooldownConfig {
            capacity: 0,
            ..CooldownConfig::default()
        });
        assert_eq!(r.unwrap_err(), CooldownConfigError::ZeroCapacity);
    }
}
