//! The hard-capped peer map: a slab of entries, an ordered key index, and two intrusive
//! activity lists.
//!
//! Every entry sits on exactly one of two doubly linked lists threaded through the slab:
//! the *clean* list (closed, no failures: carries no information) or the *dirty* list.
//! Each list is ordered by last activity, most recent at the head. A request path
//! ([`Table::touch`]) moves its entry to the head of the list matching its cleanliness in
//! O(1); inserting past the cap evicts the tail of the clean list (the sweep) or, if that is
//! empty, the tail of the dirty list (the least-recently-active entry), also in O(1) plus
//! one `BTreeMap` removal. No insertion ever scans the map, so churning a million distinct
//! addresses through a full map costs O(log n) each.
//!
//! Slots are reused, so each occupant gets a breaker-unique `id`; a permit names slot and
//! id, and a permit whose entry was evicted finds a different id (or a vacant slot) and is
//! ignored, never recreating anything.

use super::entry::Entry;
use std::collections::BTreeMap;

/// Which activity list an entry is on.
const CLEAN: usize = 0;
const DIRTY: usize = 1;

/// Sentinel "no slot".
const NIL: u32 = u32::MAX;

/// Intrusive list links of one slot.
#[derive(Debug, Clone, Copy)]
struct Links {
    prev: u32,
    next: u32,
    list: usize,
}

/// Head (most recently active) and tail (least) of one list.
#[derive(Debug, Clone, Copy)]
struct Ends {
    head: u32,
    tail: u32,
}

impl Ends {
    const EMPTY: Ends = Ends {
        head: NIL,
        tail: NIL,
    };
}

#[derive(Debug)]
struct Node<K> {
    /// `None` while the slot is vacant.
    key: Option<K>,
    id: u64,
    entry: Entry,
    links: Links,
}

/// The bounded map; see the module docs.
#[derive(Debug)]
pub(super) struct Table<K> {
    index: BTreeMap<K, u32>,
    nodes: Vec<Node<K>>,
    vacant: Vec<u32>,
    lists: [Ends; 2],
    cap: usize,
    next_id: u64,
}

impl<K: Ord + Clone> Table<K> {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            index: BTreeMap::new(),
            nodes: Vec::new(),
            vacant: Vec::new(),
            lists: [Ends::EMPTY; 2],
            cap,
            next_id: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    pub(super) fn find(&self, key: &K) -> Option<u32> {
        self.index.get(key).copied()
    }

    pub(super) fn entry(&self, slot: u32) -> &Entry {
        &self.nodes[slot as usize].entry
    }

    pub(super) fn entry_mut(&mut self, slot: u32) -> &mut Entry {
        &mut self.nodes[slot as usize].entry
    }

    pub(super) fn id(&self, slot: u32) -> u64 {
        self.nodes[slot as usize].id
    }

    /// The slot holding entry `id`, if that entry still exists.
    pub(super) fn live(&self, slot: u32, id: u64) -> Option<u32> {
        let node = self.nodes.get(slot as usize)?;
        (node.key.is_some() && node.id == id).then_some(slot)
    }

    /// Inserts a fresh clean entry for `key` (which must be absent) at the head of the
    /// clean list, first evicting one entry if the map is full. Returns the new slot and
    /// the evicted entry, if any.
    pub(super) fn insert(&mut self, key: K) -> (u32, Option<Entry>) {
        let evicted = if self.index.len() >= self.cap {
            self.evict()
        } else {
            None
        };
        let id = self.next_id;
        self.next_id += 1;
        let node = Node {
            key: Some(key.clone()),
            id,
            entry: Entry::new(),
            links: Links {
                prev: NIL,
                next: NIL,
                list: CLEAN,
            },
        };
        let slot = match self.vacant.pop() {
            Some(slot) => {
                self.nodes[slot as usize] = node;
                slot
            }
            None => {
                self.nodes.push(node);
                // `max_peers` is validated against MAX_PEERS_LIMIT, far below u32::MAX.
                u32::try_from(self.nodes.len() - 1).expect("slot count bounded by MAX_PEERS_LIMIT")
            }
        };
        self.index.insert(key, slot);
        self.push_head(slot, CLEAN);
        (slot, evicted)
    }

    /// Marks `slot` as the most recently active entry, on the list its cleanliness picks.
    pub(super) fn touch(&mut self, slot: u32) {
        let list = if self.nodes[slot as usize].entry.is_clean() {
            CLEAN
        } else {
            DIRTY
        };
        if self.lists[list].head == slot {
            return;
        }
        self.unlink(slot);
        self.push_head(slot, list);
    }

    /// Removes the stalest clean entry, else the stalest entry of all.
    fn evict(&mut self) -> Option<Entry> {
        let victim = if self.lists[CLEAN].tail != NIL {
            self.lists[CLEAN].tail
        } else {
            self.lists[DIRTY].tail
        };
        if victim == NIL {
            return None;
        }
        self.unlink(victim);
        let node = &mut self.nodes[victim as usize];
        let key = node.key.take().expect("linked slots are occupied");
        self.index.remove(&key);
        self.vacant.push(victim);
        Some(node.entry.clone())
    }

    fn unlink(&mut self, slot: u32) {
        let Links { prev, next, list } = self.nodes[slot as usize].links;
        if prev == NIL {
            self.lists[list].head = next;
        } else {
            self.nodes[prev as usize].links.next = next;
        }
        if next == NIL {
            self.lists[list].tail = prev;
        } else {
            self.nodes[next as usize].links.prev = prev;
        }
    }

    fn push_head(&mut self, slot: u32, list: usize) {
        let head = self.lists[list].head;
        self.nodes[slot as usize].links = Links {
            prev: NIL,
            next: head,
            list,
        };
        if head == NIL {
            self.lists[list].tail = slot;
        } else {
            self.nodes[head as usize].links.prev = slot;
        }
        self.lists[list].head = slot;
    }

    /// Keys from least to most recently active: the clean list then the dirty list, i.e.
    /// the order in which entries would be evicted. O(n); for tests and diagnostics.
    #[cfg(any(test, feature = "diagnostics"))]
    pub(super) fn eviction_order(&self) -> Vec<K> {
        let mut out = Vec::with_capacity(self.len());
        for list in [CLEAN, DIRTY] {
            let mut at = self.lists[list].tail;
            while at != NIL {
                let node = &self.nodes[at as usize];
                out.extend(node.key.clone());
                at = node.links.prev;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::entry::Phase;

    fn dirty(t: &mut Table<u32>, slot: u32) {
        t.entry_mut(slot).phase = Phase::Closed { failures: 1 };
        t.touch(slot);
    }

    #[test]
    fn sweeps_stalest_clean_before_any_dirty() {
        let mut t = Table::new(3);
        let (a, _) = t.insert(1);
        let (_b, _) = t.insert(2);
        let (_c, _) = t.insert(3);
        dirty(&mut t, a);
        assert_eq!(t.eviction_order(), vec![2, 3, 1]);
        let (_, ev) = t.insert(4);
        assert!(ev.unwrap().is_clean());
        assert_eq!(t.find(&2), None);
        assert_eq!(t.find(&1), Some(a));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn evicts_stalest_dirty_when_nothing_is_clean_and_ids_are_fresh() {
        let mut t = Table::new(2);
        let (a, _) = t.insert(1);
        let (b, _) = t.insert(2);
        dirty(&mut t, a);
        dirty(&mut t, b);
        t.touch(a); // 1 is now the most recent
        let old_b = t.id(b);
        let (c, ev) = t.insert(3);
        assert_eq!(ev.map(|e| e.is_clean()), Some(false));
        assert_eq!(t.find(&2), None);
        assert_eq!(c, b, "vacant slot is reused");
        assert_eq!(t.live(b, old_b), None, "the reused slot has a new id");
        assert_eq!(t.live(c, t.id(c)), Some(c));
    }
}
