//! The hot-block cache: the blocks a [`FileStore`] served or stored most recently, held in
//! memory under a byte bound.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;

use peerblock_core::bytes::Bytes;
use peerblock_core::wire::BlockPath;

use super::FileStore;

/// Default size of a [`FileStore`]'s hot-block cache: 256 MiB. Many readers want the same
/// blocks at once; serving a hot block from memory keeps the file read (and its hand-off
/// to a blocking thread, about a third of the node's CPU at 4 KiB blocks) off the
/// per-request path.
pub const DEFAULT_CACHE_BYTES: u64 = 256 * 1024 * 1024;

/// A FIFO-evicted map of blocks bounded by their total size. A block larger than an
/// eighth of the bound is never cached, so one block cannot flush the rest.
#[derive(Debug, Default)]
pub(super) struct BlockCache {
    pub(super) blocks: HashMap<BlockPath, Bytes>,
    pub(super) order: VecDeque<BlockPath>,
    pub(super) bytes: u64,
    pub(super) max_bytes: u64,
}

impl BlockCache {
    fn get(&self, path: &BlockPath) -> Option<Bytes> {
        self.blocks.get(path).cloned()
    }

    fn insert(&mut self, path: BlockPath, block: &Bytes) {
        let len = block.len() as u64;
        if self.max_bytes == 0 || len > self.max_bytes / 8 {
            self.remove(&path);
            return;
        }
        if let Some(old) = self.blocks.insert(path, block.clone()) {
            self.bytes -= old.len() as u64;
        } else {
            self.order.push_back(path);
        }
        self.bytes += len;
        while self.bytes > self.max_bytes {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.blocks.remove(&oldest) {
                self.bytes -= gone.len() as u64;
            }
        }
    }

    pub(super) fn remove(&mut self, path: &BlockPath) {
        if let Some(gone) = self.blocks.remove(path) {
            self.bytes -= gone.len() as u64;
            self.order.retain(|p| p != path);
        }
    }
}

impl FileStore {
    /// Bytes of blocks held in the cache now.
    pub fn cached_bytes(&self) -> u64 {
        self.read_cache().bytes
    }

    /// The cache for a lookup: shared, so concurrent hits never wait for each other (a
    /// FIFO cache's hit changes nothing).
    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, BlockCache> {
        self.cache.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn lock_cache(&self) -> std::sync::RwLockWriteGuard<'_, BlockCache> {
        self.cache.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached copy of block `path`, if it is hot (no file access). A hit on a block
    /// the relay cache holds counts as a relay cache hit (the request was answered from
    /// what this node relayed, its in-memory copy).
    pub fn cached(&self, path: &BlockPath) -> Option<Bytes> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let hit = self.read_cache().get(path);
        if hit.is_some() {
            // The relay cache's lock only when it holds anything (its byte gauge is an
            // atomic): a node that never relayed pays nothing on its hot path.
            if let Some(relay) = self.relay.as_deref() {
                if relay.counters().bytes.get() > 0 && relay.contains(path) {
                    relay.counters().hits.inc();
                }
            }
        }
        hit
    }

    /// Keeps `block` as block `path`'s cached copy (unless it is above an eighth of the
    /// cache's bound, or the cache is off), evicting the oldest blocks over the bound.
    pub fn cache_insert(&self, path: BlockPath, block: &Bytes) {
        self.lock_cache().insert(path, block);
    }
}
