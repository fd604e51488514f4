//! A bounded map whose entries carry an instant, evicted and purged earliest first.
//!
//! The shape the cooldown table, the load table and the per-key counter share: a key maps
//! to a value stamped with an [`Instant`] (an expiry for the cooldown table, an arrival
//! for the load table and the key counter: either way the entry with the earliest stamp
//! is the first to end). A second index ordered by `(stamp, key)` makes eviction and
//! purging `O(log n)` without scans; ties are broken by key order, so nothing depends on
//! hash order. Private: each user keeps its own public type and rules on top.

use std::collections::{BTreeMap, BTreeSet};

use crate::time::Instant;

/// Key → (stamp, value), at most `capacity` entries. See the module docs.
#[derive(Clone, Debug)]
pub(crate) struct TimedMap<K: Ord + Clone, V> {
    entries: BTreeMap<K, (Instant, V)>,
    /// The same entries ordered by stamp, for eviction and purging without scans.
    by_stamp: BTreeSet<(Instant, K)>,
    capacity: usize,
}

impl<K: Ord + Clone, V> TimedMap<K, V> {
    /// An empty map holding at most `capacity` entries (the callers' configs reject 0).
    pub(crate) fn new(capacity: usize) -> Self {
        debug_assert!(capacity >= 1, "callers validate a capacity of at least 1");
        TimedMap {
            entries: BTreeMap::new(),
            by_stamp: BTreeSet::new(),
            capacity,
        }
    }

    /// The stamp and value held for `key`.
    pub(crate) fn get(&self, key: &K) -> Option<(Instant, &V)> {
        self.entries.get(key).map(|(at, v)| (*at, v))
    }

    /// Removes `key`, returning its stamp and value.
    pub(crate) fn remove(&mut self, key: &K) -> Option<(Instant, V)> {
        let (at, v) = self.entries.remove(key)?;
        self.by_stamp.remove(&(at, key.clone()));
        Some((at, v))
    }

    /// Whether the map holds `capacity` entries (an insert of a new key evicts).
    pub(crate) fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }

    /// The earliest stamp held.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.by_stamp.first().map(|(at, _)| *at)
    }

    /// Stores `value` for `key` at `stamp`, replacing what `key` held. A new key in a full
    /// map first evicts the entry with the earliest stamp (lowest key among equals).
    pub(crate) fn insert(&mut self, key: K, stamp: Instant, value: V) {
        if self.remove(&key).is_none() && self.is_full() {
            if let Some((_, victim)) = self.by_stamp.pop_first() {
                self.entries.remove(&victim);
            }
        }
        self.by_stamp.insert((stamp, key.clone()));
        self.entries.insert(key, (stamp, value));
    }

    /// Drops entries earliest first while `ended(stamp)` holds. `O(k log n)` for `k`
    /// dropped entries; `ended` must be monotone in the stamp (true for a prefix).
    pub(crate) fn purge_while(&mut self, mut ended: impl FnMut(Instant) -> bool) {
        while let Some((at, _)) = self.by_stamp.first() {
            if !ended(*at) {
                break;
            }
            if let Some((_, key)) = self.by_stamp.pop_first() {
                self.entries.remove(&key);
            }
        }
    }

    /// Every entry in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, Instant, &V)> + '_ {
        self.entries.iter().map(|(k, (at, v))| (k, *at, v))
    }

    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.by_stamp.clear();
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> Instant {
        Instant::from_secs(n)
    }

    #[test]
    fn a_new_key_in_a_full_map_evicts_the_earliest_stamp() {
        let mut m = TimedMap::new(2);
        m.insert("a", t(5), 1);
        m.insert("b", t(3), 2);
        m.insert("c", t(9), 3);
        assert_eq!(m.len(), 2);
        assert!(m.get(&"b").is_none(), "b had the earliest stamp");
        assert_eq!(m.get(&"a"), Some((t(5), &1)));
    }

    #[test]
    fn equal_stamps_evict_the_lowest_key_first() {
        let mut m = TimedMap::new(2);
        m.insert("b", t(1), ());
        m.insert("a", t(1), ());
        m.insert("c", t(2), ());
        assert!(m.get(&"a").is_none());
        assert!(m.get(&"b").is_some());
    }

    #[test]
    fn replacing_a_key_never_evicts_and_moves_its_stamp() {
        let mut m = TimedMap::new(2);
        m.insert("a", t(1), 1);
        m.insert("b", t(2), 2);
        m.insert("a", t(7), 3);
        assert_eq!(m.len(), 2);
        assert_eq!(m.earliest(), Some(t(2)));
        assert_eq!(m.remove(&"a"), Some((t(7), 3)));
        assert_eq!(m.earliest(), Some(t(2)));
    }

    #[test]
    fn purge_drops_the_ended_prefix_only() {
        let mut m = TimedMap::new(8);
        for (k, s) in [("a", 1), ("b", 4), ("c", 2), ("d", 9)] {
            m.insert(k, t(s), ());
        }
        m.purge_while(|at| at <= t(4));
        assert_eq!(m.iter().map(|(k, ..)| *k).collect::<Vec<_>>(), ["d"]);
        m.clear();
        assert!(m.is_empty() && m.earliest().is_none());
    }
}
