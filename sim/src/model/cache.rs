//! A node's cache of relayed blocks: bounded in bytes, least recently used evicted first
//! (`[relay] cache_mib`; the real node's `[store] cache_bytes`).
//!
//! Deterministic: recency is a counter bumped on every use, and both indices are
//! `BTreeMap`s, so the same sequence of uses evicts the same blocks.

use std::collections::BTreeMap;

/// The relayed blocks one node holds.
#[derive(Debug, Clone)]
pub struct BlockCache {
    capacity: u64,
    bytes: u64,
    tick: u64,
    /// Block → (its size, its last use).
    entries: BTreeMap<u32, (u64, u64)>,
    /// Last use → block (the least recently used first).
    by_use: BTreeMap<u64, u32>,
}

impl BlockCache {
    /// An empty cache of at most `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        BlockCache {
            capacity,
            bytes: 0,
            tick: 0,
            entries: BTreeMap::new(),
            by_use: BTreeMap::new(),
        }
    }

    /// Whether `block` is cached, without counting a use.
    pub fn contains(&self, block: u32) -> bool {
        self.entries.contains_key(&block)
    }

    /// Serves `block` if it is cached (a use: it becomes the most recently used).
    pub fn hit(&mut self, block: u32) -> bool {
        let Some((_, used)) = self.entries.get_mut(&block) else {
            return false;
        };
        self.by_use.remove(used);
        self.tick += 1;
        *used = self.tick;
        self.by_use.insert(self.tick, block);
        true
    }

    /// Caches `block` of `size` bytes (a use), evicting the least recently used blocks
    /// until it fits. Returns how many blocks were evicted. A block larger than the whole
    /// cache is not kept.
    pub fn insert(&mut self, block: u32, size: u64) -> u64 {
        if self.hit(block) || size > self.capacity {
            return 0;
        }
        let mut evicted = 0;
        while self.bytes + size > self.capacity {
            let Some((_, victim)) = self.by_use.pop_first() else {
                break;
            };
            if let Some((bytes, _)) = self.entries.remove(&victim) {
                self.bytes -= bytes;
                evicted += 1;
            }
        }
        self.tick += 1;
        self.entries.insert(block, (size, self.tick));
        self.by_use.insert(self.tick, block);
        self.bytes += size;
        evicted
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops everything (a crashed node's memory).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.by_use.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_bound_evicts_the_least_recently_used() {
        let mut c = BlockCache::new(3 * 100);
        for b in 0..3 {
            assert_eq!(c.insert(b, 100), 0);
        }
        assert!(c.hit(0)); // 1 is now the least recently used
        assert_eq!(c.insert(3, 100), 1);
        assert!(!c.contains(1));
        assert!(c.contains(0) && c.contains(2) && c.contains(3));
        assert_eq!(c.bytes(), 300);
        // A bigger block evicts as many as it needs.
        assert_eq!(c.insert(4, 250), 3);
        assert_eq!((c.len(), c.bytes()), (1, 250));
        // Larger than the whole cache: not kept, nothing evicted.
        assert_eq!(c.insert(5, 301), 0);
        assert!(!c.contains(5) && c.contains(4));
    }
}
