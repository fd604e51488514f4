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
//! to age out) is evicted, in `O(log n)` through a second index ordered by arrival (the
//! crate's private timed map, which the
//! [`CooldownTable`](crate::cooldown::CooldownTable) keeps ordered by expiry). It is generic over
//! the peer key: the read machine's view uses [`PeerId`](crate::placement::PeerId), a
//! driver may use a socket address, the simulator a node index.
//!
//! Time never goes backwards in a correct driver; if it does, a hint "from the future"
//! counts as brand new (age zero) rather than panicking or being dropped.
//!
//! Node-level load mixes every hot record a node holds, and a response tells a client
//! only about the node that sent it. The node side of the finer signal lives here too:
//! [`KeyCounter`], a bounded, decayed count of the GETs a node received per key, which a
//! node reports in its lookup replies so that readers can compare a record's holders by
//! that record's load before asking any of them
//! ([`LookupPeer`](crate::read::LookupPeer)).

use crate::time::{Duration, Instant};
use crate::timed::TimedMap;

/// How long an advertised load is believed, decaying linearly to zero: 10 s. A block
/// transfer of a few MiB takes about a second on a browser link, so an old hint mostly
/// says whether the holder is generally busy, not what it is doing now; the linear decay
/// lets fresh hints dominate. Shorter horizons leave too few live hints for a client that
/// hears from each holder only now and then (docs/read.md has the replay's figures for
/// each horizon).
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
    /// Age at which a hint has decayed to nothing and is forgotten (default
    /// [`DEFAULT_LOAD_HORIZON`], 10 s).
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

/// A [`LoadConfig`] or [`KeyCounterConfig`] the integrator got wrong (local misuse, never
/// a peer's fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadConfigError {
    /// `capacity` was 0: the table could not remember the hint it was just given.
    #[error("load config: capacity must be at least 1")]
    ZeroCapacity,
    /// `horizon` was 0: every hint would be dead on arrival.
    #[error("load config: horizon must be longer than zero")]
    ZeroHorizon,
    /// A [`KeyCounterConfig::half_life`] of 0: every count would vanish at once.
    #[error("key counter config: half_life must be longer than zero")]
    ZeroHalfLife,
}

/// The bounded table of advertised loads. See the module docs.
#[derive(Clone, Debug)]
pub struct LoadTable<K: Ord + Clone> {
    config: LoadConfig,
    /// Peer → advertised load, stamped with the instant it arrived.
    hints: TimedMap<K, u32>,
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
            hints: TimedMap::new(config.capacity),
            config,
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
        // Replaces the peer's older hint; full, the oldest hint makes room.
        self.hints.insert(peer, now, load.min(MAX_ADVERTISED_LOAD));
    }

    /// Forgets `peer`'s hint. Returns whether one was held.
    pub fn remove(&mut self, peer: &K) -> bool {
        self.hints.remove(peer).is_some()
    }

    /// The load `peer` last advertised and how long ago, if that is within the horizon.
    pub fn advertised(&self, now: Instant, peer: &K) -> Option<(u32, Duration)> {
        let (at, load) = self.hints.get(peer)?;
        let age = now.saturating_duration_since(at);
        (age < self.config.horizon).then_some((*load, age))
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
        let horizon = self.config.horizon;
        self.hints
            .purge_while(|at| now.saturating_duration_since(at) >= horizon);
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

/// Default half-life of a [`KeyCounter`]'s counts: 30 s. A hot record's first reads come
/// in bursts (a page load: tens of clients within seconds), so the count should cover a
/// burst and forget one a few minutes old; with 30 s it is about 43 s worth of requests.
/// Longer and shorter half-lives did no better in the simulator's replay (docs/read.md),
/// so the choice follows this reasoning.
pub const DEFAULT_KEY_HALF_LIFE: Duration = Duration::from_secs(30);

/// Default number of keys a [`KeyCounter`] remembers: a node serves a handful of hot
/// records at a time; 4,096 keys (about 200 KiB) keeps every key requested within many
/// half-lives on any realistic node, and the least recently requested key goes first.
pub const DEFAULT_KEY_CAPACITY: usize = 4096;

/// Fixed-point fraction bits of a [`KeyCounter`] count: decay is integer arithmetic (no
/// floating point, so every platform reports the same counts).
const KEY_FRACTION_BITS: u32 = 16;

/// A key unrequested for this many half-lives is forgotten: even a count at the
/// [`MAX_ADVERTISED_LOAD`] cap (2^20) has decayed below 2^-12 of a GET by then.
const KEY_FORGET_HALF_LIVES: u32 = 32;

/// How a [`KeyCounter`] decays and how many keys it keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyCounterConfig {
    /// Age at which a request counts half (default [`DEFAULT_KEY_HALF_LIFE`]).
    pub half_life: Duration,
    /// Most keys remembered at once (default [`DEFAULT_KEY_CAPACITY`], at least 1).
    pub capacity: usize,
}

impl Default for KeyCounterConfig {
    fn default() -> Self {
        KeyCounterConfig {
            half_life: DEFAULT_KEY_HALF_LIFE,
            capacity: DEFAULT_KEY_CAPACITY,
        }
    }
}

/// A node's bounded, decayed count of the GETs it received per key: what it reports in
/// its lookup replies so that readers can spread first reads of a hot record by *that
/// record's* load ([`LookupPeer`](crate::read::LookupPeer)).
///
/// Each GET counts 1 when it arrives and decays exponentially with
/// [`KeyCounterConfig::half_life`], so the count is the recent request rate times the
/// half-life / ln 2, without keeping one entry per request. Decay is a piecewise-linear
/// approximation of `2^(-age/half_life)` in integer arithmetic: exact at whole
/// half-lives, linear in between (at most 6 % above the true curve), monotone, the same
/// on every platform.
///
/// Memory is bounded by [`KeyCounterConfig::capacity`] entries: when full, the key
/// requested least recently is evicted (`O(log n)` through an index by last request, as
/// [`LoadTable`] does); its count is the most decayed of those it could be compared with
/// when requests are sparse. Keys unrequested for 32 half-lives are forgotten by
/// [`KeyCounter::purge`] (their counts are below 2^-12 by then).
/// Generic over the key type (a record [`Key`](crate::placement::Key), a block index in
/// the simulator). Time going backwards counts as no time passing.
#[derive(Clone, Debug)]
pub struct KeyCounter<K: Ord + Clone> {
    config: KeyCounterConfig,
    /// Key → its decayed count at the stamp (fixed point with [`KEY_FRACTION_BITS`]),
    /// stamped with the key's last request.
    counts: TimedMap<K, u64>,
}

impl<K: Ord + Clone> KeyCounter<K> {
    /// An empty counter, or an error naming the bad field.
    pub fn new(config: KeyCounterConfig) -> Result<Self, LoadConfigError> {
        if config.capacity == 0 {
            return Err(LoadConfigError::ZeroCapacity);
        }
        if config.half_life.is_zero() {
            return Err(LoadConfigError::ZeroHalfLife);
        }
        Ok(KeyCounter {
            counts: TimedMap::new(config.capacity),
            config,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &KeyCounterConfig {
        &self.config
    }

    /// `value`, counted at `at`, decayed to `now`.
    fn decayed(&self, value: u64, at: Instant, now: Instant) -> u64 {
        let half = self.config.half_life.as_nanos();
        let age = now.saturating_duration_since(at).as_nanos();
        let whole = age / half;
        if whole >= u128::from(KEY_FORGET_HALF_LIVES) {
            return 0;
        }
        let v = value >> whole;
        let frac = age % half;
        // v × (1 − frac / (2 × half)): the chord between two whole half-lives.
        let cut = (u128::from(v) * frac) / (2 * half);
        v - cut as u64
    }

    /// Counts one GET for `key` arriving at `now`; returns the count including it.
    pub fn bump(&mut self, now: Instant, key: K) -> u32 {
        let before = match self.counts.remove(&key) {
            Some((at, old)) => self.decayed(old, at, now),
            None => {
                self.purge(now);
                0
            }
        };
        let cap = u64::from(MAX_ADVERTISED_LOAD) << KEY_FRACTION_BITS;
        let value = (before + (1 << KEY_FRACTION_BITS)).min(cap);
        // Full, the key requested least recently makes room.
        self.counts.insert(key, now, value);
        Self::whole(value)
    }

    fn whole(value: u64) -> u32 {
        // Round half up; bounded by MAX_ADVERTISED_LOAD, so it fits.
        ((value + (1 << (KEY_FRACTION_BITS - 1))) >> KEY_FRACTION_BITS) as u32
    }

    /// The decayed count of GETs for `key` at `now`, rounded to the nearest whole GET
    /// (0 for a key never requested or forgotten). What a lookup reply reports.
    pub fn count(&self, now: Instant, key: &K) -> u32 {
        self.counts
            .get(key)
            .map_or(0, |(at, value)| Self::whole(self.decayed(*value, at, now)))
    }

    /// Forgets every key whose count has decayed to nothing by `now`.
    pub fn purge(&mut self, now: Instant) {
        let forget = self.config.half_life.saturating_mul(KEY_FORGET_HALF_LIVES);
        self.counts
            .purge_while(|at| now.saturating_duration_since(at) >= forget);
    }

    /// Forgets everything (a restarted node).
    pub fn clear(&mut self) {
        self.counts.clear();
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
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
        assert!(t.is_empty());
        t.record(ms(0), 1, 10);
        assert!(!t.is_empty());
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
    fn remove_forgets_a_hint_and_says_whether_one_was_held() {
        let mut t = table(8);
        t.record(ms(0), 1, 10);
        assert!(t.remove(&1));
        assert_eq!(t.load(ms(0), &1), None);
        assert!(!t.remove(&1), "nothing held any more");
        assert!(!t.remove(&2), "never held");
    }

    #[test]
    fn the_table_keeps_the_configuration_it_was_made_with() {
        let config = LoadConfig {
            horizon: Duration::from_secs(3),
            capacity: 5,
        };
        assert_eq!(
            LoadTable::<u32>::new(config.clone()).unwrap().config(),
            &config
        );
        let config = KeyCounterConfig {
            half_life: Duration::from_secs(7),
            capacity: 9,
        };
        assert_eq!(
            KeyCounter::<u32>::new(config.clone()).unwrap().config(),
            &config
        );
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

    fn counter(capacity: usize) -> KeyCounter<u32> {
        KeyCounter::new(KeyCounterConfig {
            capacity,
            half_life: Duration::from_secs(30),
        })
        .unwrap()
    }

    /// Rule: each GET counts 1 and halves every half-life (exactly at whole half-lives,
    /// linearly in between, never increasing).
    #[test]
    fn a_key_count_halves_every_half_life() {
        let mut c = counter(8);
        for _ in 0..8 {
            c.bump(ms(0), 7);
        }
        assert_eq!(c.count(ms(0), &7), 8);
        assert_eq!(c.count(ms(30_000), &7), 4);
        assert_eq!(c.count(ms(60_000), &7), 2);
        assert_eq!(c.count(ms(15_000), &7), 6, "linear within a half-life");
        let mut last = u32::MAX;
        for t in (0..200_000).step_by(1_000) {
            let n = c.count(ms(t), &7);
            assert!(n <= last, "never increases");
            last = n;
        }
        assert_eq!(c.count(ms(0), &8), 0, "never requested");
        // A bump adds to the decayed count.
        assert_eq!(c.bump(ms(30_000), 7), 5);
    }

    /// Rule: memory is bounded; when full, the key requested least recently goes, and a
    /// key unrequested for 32 half-lives is forgotten.
    #[test]
    fn key_counter_is_bounded_and_evicts_the_least_recently_requested_key() {
        let mut c = counter(3);
        assert!(c.is_empty());
        c.bump(ms(0), 1);
        assert!(!c.is_empty());
        c.bump(ms(1), 2);
        c.bump(ms(2), 3);
        c.bump(ms(3), 1); // 1 is now the most recent
        c.bump(ms(4), 4);
        assert_eq!(c.len(), 3);
        assert_eq!(c.count(ms(4), &2), 0, "least recently requested evicted");
        for k in [1, 3, 4] {
            assert!(c.count(ms(4), &k) > 0);
        }
        for i in 0..10_000u32 {
            c.bump(ms(10 + u64::from(i)), i);
            assert!(c.len() <= 3);
        }
        c.purge(ms(10_010 + 32 * 30_000));
        assert!(c.is_empty());
        c.bump(ms(0), 9);
        c.clear();
        assert!(c.is_empty());
    }

    /// Rule: counts are bounded by [`MAX_ADVERTISED_LOAD`] (they go into replies and sums),
    /// time going backwards counts as no time passing, and a bad config names the field.
    #[test]
    fn key_counts_are_clamped_time_backwards_is_harmless_and_config_is_checked() {
        let mut c = counter(2);
        for _ in 0..3 {
            c.bump(ms(1_000), 1);
        }
        assert_eq!(c.count(ms(0), &1), 3, "age saturates at zero");
        assert_eq!(c.bump(ms(0), 1), 4);
        let mut big = counter(1);
        big.counts.insert(
            5,
            ms(0),
            u64::from(MAX_ADVERTISED_LOAD) << KEY_FRACTION_BITS,
        );
        assert_eq!(big.bump(ms(0), 5), MAX_ADVERTISED_LOAD);
        assert_eq!(
            KeyCounter::<u32>::new(KeyCounterConfig {
                capacity: 0,
                ..KeyCounterConfig::default()
            })
            .unwrap_err(),
            LoadConfigError::ZeroCapacity
        );
        assert_eq!(
            KeyCounter::<u32>::new(KeyCounterConfig {
                half_life: Duration::ZERO,
                ..KeyCounterConfig::default()
            })
            .unwrap_err(),
            LoadConfigError::ZeroHalfLife
        );
    }
}
