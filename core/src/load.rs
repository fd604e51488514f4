//! Server-advertised load: what each peer last said it was doing, and how old that is.
//!
//! A client's own requests in flight say little about a hot holder's load: many clients
//! each send it one request, and every one of them sees an idle peer. The peer itself knows
//! better, so every peerblock response (`200`, `404`, the `503` refusal) carries its
//! requests in progress at the moment the head was written
//! ([`wire::header::LOAD`](crate::wire::header::LOAD)). The client driver records each value
//! here and answers [`PeerView::load`](crate::read::PeerView::load) from it, so a
//! load-aware spreading choice sees what *other* clients are doing to a holder.
//!
//! A hint is only as good as it is fresh. Requests for blocks finish in about a second, so
//! a load reported several seconds ago says almost nothing about now: [`LoadTable::load`]
//! decays a hint linearly to nothing over [`LoadConfig::horizon`] (rounding up, so a
//! non-zero hint stays visible until it ages out) and forgets it after that.
//!
//! The table is bounded ([`LoadConfig::capacity`]): when full, the oldest hint (the first
//! to age out) is evicted, in `O(log n)` through a second index ordered by arrival, as the
//! [`CooldownTable`](crate::cooldown::CooldownTable) does by expiry. It is generic over
//! the peer key: the read machine's view uses [`PeerId`](crate::placement::PeerId), a
//! driver may use a socket address, the simulator a node index.
//!
//! Time never goes backwards in a correct driver; if it does, a hint "from the future"
//! counts as brand new (age zero) rather than panicking or being dropped.

use std::collections::{BTreeMap, BTreeSet};

use crate::time::{Duration, Instant};

/// How long an advertised load is believed, decaying linearly to zero: 10 s. A block
/// transfer of a few MiB takes about a second on a browser link, so an old hint mostly
/// says whether the holder is generally busy, not what it is doing now; the linear decay
/// lets fresh hints dominate. Shorter horizons leave too few live hints for a client that
/// hears from each holder only now and then (the simulator's replay, busiest node's bytes
/// against uniform: 1 s −6 %, 5 s −9 %, 10 s −12 %, 30 s −11 %; see docs/read.md).
pub const DEFAULT_LOAD_HORIZON: Duration = Duration::from_secs(10);

/// Default number of peers with a remembered load: the same 4096 as the cooldown table
/// and the breaker, far above the peers one client hears from within a horizon.
pub const DEFAULT_LOAD_CAPACITY: usize = 4096;

/// The largest load a hint keeps: a peer's header is its input, and a hostile or broken
/// peer saying `4294967295` must not overflow the choice's sums. 2^20 requests in
/// progress is far beyond any real listener (peerblock's default allows 512).
pub const MAX_ADVERTISED_LOAD: u32 = 1 << 20;

/// How long hints live and how many are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadConfig {
    /// Age at which a hint has decayed to nothing and is forgotten (default 5 s).
    pub horizon: Duration,
    /// Most peers remembered at once (default 4096, at least 1).
    pub capacity: usize,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            horizon: DEFAULT_LOAD_HORIZON,
            capacity: DEFAULT_LOAD_CAPACITY,
        }
    }
}

/// A [`LoadConfig`] the integrator got wrong (local misuse, never a peer's fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadConfigError {
    /// `capacity` was 0: the table could not remember the hint it was just given.
    #[error("load config: capacity must be at least 1")]
    ZeroCapacity,
    /// `horizon` was 0: every hint would be dead on arrival.
    #[error("load config: horizon must be longer than zero")]
    ZeroHorizon,
}

#[derive(Clone, Copy, Debug)]
struct Hint {
    load: u32,
    at: Instant,
}

/// The bounded table of advertised loads. See the module docs.
#[derive(Clone, Debug)]
pub struct LoadTable<K: Ord + Clone> {
    config: LoadConfig,
    hints: BTreeMap<K, Hint>,
    /// The same hints ordered by arrival, for eviction and purging without scans.
    by_age: BTreeSet<(Instant, K)>,
}

impl<K: Ord + Clone> LoadTable<K> {
    /// An empty table, or an error naming the bad field.
    pub fn new(config: LoadConfig) -> Result<Self, LoadConfigError> {
        if config.capacity == 0 {
            return Err(LoadConfigError::ZeroCapacity);
        }
        if config.horizon.is_zero() {
            return Err(LoadConfigError::ZeroHorizon);
        }
        Ok(LoadTable {
            config,
            hints: BTreeMap::new(),
            by_age: BTreeSet::new(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &LoadConfig {
        &self.config
    }

    /// Records that `peer` advertised `load` requests in progress in a response received
    /// at `now`. The newest hint replaces any older one; values above
    /// [`MAX_ADVERTISED_LOAD`] are clamped. When the table is full the oldest hint goes.
    pub fn record(&mut self, now: Instant, peer: K, load: u32) {
        self.purge(now);
        self.remove(&peer);
        if self.hints.len() >= self.config.capacity {
            if let Some((_, oldest)) = self.by_age.pop_first() {
                self.hints.remove(&oldest);
            }
        }
        let load = load.min(MAX_ADVERTISED_LOAD);
        self.by_age.insert((now, peer.clone()));
        self.hints.insert(peer, Hint { load, at: now });
    }

    /// Forgets `peer`'s hint. Returns whether one was held.
    pub fn remove(&mut self, peer: &K) -> bool {
        match self.hints.remove(peer) {
            Some(old) => {
                self.by_age.remove(&(old.at, peer.clone()));
                true
            }
            None => false,
        }
    }

    /// The load `peer` last advertised and how long ago, if that is within the horizon.
    pub fn advertised(&self, now: Instant, peer: &K) -> Option<(u32, Duration)> {
        let h = self.hints.get(peer)?;
        let age = now.saturating_duration_since(h.at);
        (age < self.config.horizon).then_some((h.load, age))
    }

    /// `peer`'s advertised load decayed by age: `load × (horizon − age) / horizon`, rounded
    /// up (a busy peer stays visibly busy until its hint ages out), or `None` when nothing
    /// was heard within the horizon.
    pub fn load(&self, now: Instant, peer: &K) -> Option<u32> {
        let (load, age) = self.advertised(now, peer)?;
        let horizon = self.config.horizon.as_nanos();
        let left = horizon - age.as_nanos();
        let scaled = (u128::from(load) * left).div_ceil(horizon);
        Some(scaled as u32) // ≤ load: fits
    }

    /// Drops every hint that has aged out by `now`. `O(k log n)` for `k` dropped hints.
    pub fn purge(&mut self, now: Instant) {
        while let Some((at, _)) = self.by_age.first() {
            if now.saturating_duration_since(*at) < self.config.horizon {
                break;
            }
            if let Some((_, peer)) = self.by_age.pop_first() {
                self.hints.remove(&peer);
            }
        }
    }

    /// Hints held (including aged-out ones not yet purged).
    pub fn len(&self) -> usize {
        self.hints.len()
    }

    /// Whether no hint is held.
    pub fn is_empty(&self) -> bool {
        self.hints.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(capacity: usize) -> LoadTable<u32> {
        LoadTable::new(LoadConfig {
            capacity,
            ..LoadConfig::default()
        })
        .unwrap()
    }

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    #[test]
    fn a_hint_decays_linearly_and_ages_out_at_the_horizon() {
        let mut t = table(8);
        t.record(ms(0), 1, 10);
        assert_eq!(t.load(ms(0), &1), Some(10));
        assert_eq!(t.load(ms(5_000), &1), Some(5));
        assert_eq!(
            t.load(ms(9_999), &1),
            Some(1),
            "rounds up until it ages out"
        );
        assert_eq!(t.load(ms(10_000), &1), None);
        assert_eq!(
            t.advertised(ms(4_000), &1),
            Some((10, Duration::from_secs(4)))
        );
        t.purge(ms(9_999));
        assert_eq!(t.len(), 1);
        t.purge(ms(10_000));
        assert!(t.is_empty());
    }

    #[test]
    fn the_newest_hint_replaces_the_old_one() {
        let mut t = table(8);
        t.record(ms(0), 1, 10);
        t.record(ms(1_000), 1, 2);
        assert_eq!(t.len(), 1);
        assert_eq!(t.advertised(ms(1_000), &1), Some((2, Duration::ZERO)));
        // The old arrival instant no longer ages the peer out.
        assert_eq!(t.load(ms(10_500), &1), Some(1));
    }

    #[test]
    fn full_table_evicts_the_oldest_hint() {
        let mut t = table(3);
        for (i, peer) in [10u32, 20, 30].into_iter().enumerate() {
            t.record(ms(i as u64 * 100), peer, 1);
        }
        t.record(ms(300), 40, 1);
        assert_eq!(t.len(), 3);
        assert_eq!(t.load(ms(300), &10), None, "oldest evicted");
        for peer in [20, 30, 40] {
            assert!(t.load(ms(300), &peer).is_some());
        }
    }

    #[test]
    fn stays_bounded_under_churn() {
        let mut t = table(64);
        for i in 0..10_000u32 {
            t.record(ms(u64::from(i)), i, i);
            assert!(t.len() <= 64);
        }
        // Only the newest 64 survive.
        assert!(t.load(ms(10_000), &9_999).is_some());
        assert!(t.load(ms(10_000), &9_935).is_none());
    }

    #[test]
    fn hostile_values_are_clamped_and_time_going_backwards_is_harmless() {
        let mut t = table(4);
        t.record(ms(1_000), 1, u32::MAX);
        assert_eq!(t.load(ms(1_000), &1), Some(MAX_ADVERTISED_LOAD));
        assert_eq!(
            t.load(ms(0), &1),
            Some(MAX_ADVERTISED_LOAD),
            "age saturates at zero"
        );
    }

    #[test]
    fn bad_config_names_the_field() {
        let zero_cap = LoadConfig {
            capacity: 0,
            ..LoadConfig::default()
        };
        assert_eq!(
            LoadTable::<u32>::new(zero_cap).unwrap_err(),
            LoadConfigError::ZeroCapacity
        );
        let zero_horizon = LoadConfig {
            horizon: Duration::ZERO,
            ..LoadConfig::default()
        };
        assert_eq!(
            LoadTable::<u32>::new(zero_horizon).unwrap_err(),
            LoadConfigError::ZeroHorizon
        );
    }
}
