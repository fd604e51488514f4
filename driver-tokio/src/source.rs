//! Where a server's blocks come from: the [`BlockSource`] trait, the file store
//! ([`FileStore`], kept in `peerblock-common` and shared with the mio driver; its layout is
//! documented there) served through `spawn_blocking`, and an in-memory store for tests
//! ([`MemoryStore`]).
//!
//! Every file operation runs on `tokio::task::spawn_blocking`, never on a reactor thread:
//! [`FileStore`]'s reads through [`BlockSource::fetch`], its writes through [`put`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use peerblock_core::bytes::Bytes;
use peerblock_core::server::{SourceRequest, SourceResult};
use peerblock_core::wire::BlockPath;

pub use peerblock_common::store::{
    FileStore, OpenBlock, Opened, StoreError, DEFAULT_CACHE_BYTES, DEFAULT_MAX_BLOCK_SIZE,
};

/// Stores block `path` in `store` atomically ([`FileStore::put_blocking`]) on
/// `spawn_blocking`, then keeps it in the store's hot-block cache. A block above the
/// store's `max_block_size` is refused ([`StoreError::TooLarge`]).
pub async fn put(store: &FileStore, path: BlockPath, bytes: Bytes) -> Result<(), StoreError> {
    let writer = store.clone();
    let file = store.file_of(&path);
    let block = bytes.clone();
    tokio::task::spawn_blocking(move || writer.put_blocking(&path, &block))
        .await
        .map_err(|_| StoreError::Task { path: file })??;
    store.cache_insert(path, &bytes);
    Ok(())
}

/// The future a [`BlockSource`] returns.
pub type BlockFuture = Pin<Box<dyn Future<Output = SourceResult> + Send + 'static>>;

/// The application's blocks, as the server asks for them.
///
/// The server calls [`fetch`](Self::fetch) for core's `ServerEvent::Fetch` and
/// [`relay`](Self::relay) for `ServerEvent::Relay` (core has already decided that the
/// request may be relayed and incremented its hop), each on a task of its own, and hands
/// the answer back to core with `ServerConnection::handle_source`. Core answers a source
/// that takes longer than its source timeout with a `500`; the server then aborts the
/// task running the future.
///
/// Implementations must not block the calling thread: blocking file I/O belongs on
/// `tokio::task::spawn_blocking`.
pub trait BlockSource: Send + Sync + 'static {
    /// The block `request.path` if this node holds it: `Found`, `Miss` or `Failed`.
    fn fetch(&self, request: &SourceRequest) -> BlockFuture;

    /// Fetches the block on the requester's behalf from this node's parent or the origin
    /// named in `request.origin`, with `request.hop` (already one higher). The default is
    /// a transport-only node: `Miss`.
    fn relay(&self, request: &SourceRequest) -> BlockFuture {
        let _ = request;
        Box::pin(std::future::ready(SourceResult::Miss))
    }
}

impl BlockSource for FileStore {
    /// A cached block is answered at once (the server answers it in place, no task); any
    /// other is read on `spawn_blocking` ([`FileStore::read_block`]: verified the first
    /// time its file is read, quarantined and answered `Corrupt` if rotten) and cached if
    /// found.
    fn fetch(&self, request: &SourceRequest) -> BlockFuture {
        let path = request.path;
        if let Some(block) = self.cached(&path) {
            return Box::pin(std::future::ready(SourceResult::Found(block)));
        }
        let store = self.clone();
        Box::pin(async move {
            let reader = store.clone();
            let result = tokio::task::spawn_blocking(move || reader.read_block(&path))
                .await
                .map(peerblock_common::store::StoreRead::into_source_result)
                .unwrap_or_else(|e| {
                    tracing::warn!(%path, error = %e, "block file read task failed");
                    SourceResult::Failed
                });
            if let SourceResult::Found(block) = &result {
                store.cache_insert(path, block);
            }
            result
        })
    }
}

/// How a [`MemoryStore`] answers, so tests can provoke the server's error paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemoryBehaviour {
    /// Answer from the map: `Found` or `Miss`.
    #[default]
    Serve,
    /// Answer `Failed` to every fetch (the server answers 500).
    Fail,
    /// Wait this long, then answer from the map (a source timeout shorter than this makes
    /// the server answer 500).
    Delay(Duration),
}

/// Blocks in memory, for tests and examples: a map from [`BlockPath`] to [`Bytes`]. It
/// holds exactly what was inserted (the caller bounds it), counts the fetches it answered
/// and can be switched to fail or to delay its answers ([`MemoryBehaviour`]). Cloning
/// shares the same map, switch and counter (keep a clone to change the store after handing
/// it to a server).
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    inner: Arc<MemoryInner>,
}

#[derive(Debug, Default)]
struct MemoryInner {
    blocks: Mutex<HashMap<BlockPath, Bytes>>,
    behaviour: Mutex<MemoryBehaviour>,
    fetches: AtomicU64,
    /// Woken on every fetch ([`MemoryStore::wait_fetches`]).
    fetched: tokio::sync::Notify,
}

impl MemoryStore {
    /// An empty store that serves what it holds.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) block `path`.
    pub fn insert(&self, path: BlockPath, block: Bytes) {
        self.lock_blocks().insert(path, block);
    }

    /// Removes block `path`; returns whether it was held.
    pub fn remove(&self, path: &BlockPath) -> bool {
        self.lock_blocks().remove(path).is_some()
    }

    /// Changes how later fetches are answered.
    pub fn set_behaviour(&self, behaviour: MemoryBehaviour) {
        *self
            .inner
            .behaviour
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = behaviour;
    }

    /// How many times [`BlockSource::fetch`] was called.
    pub fn fetches(&self) -> u64 {
        self.inner.fetches.load(Ordering::SeqCst)
    }

    /// Resolves once the store has answered (or started answering) at least `n` fetches.
    pub async fn wait_fetches(&self, n: u64) {
        loop {
            let fetched = self.inner.fetched.notified();
            tokio::pin!(fetched);
            fetched.as_mut().enable();
            if self.fetches() >= n {
                return;
            }
            fetched.await;
        }
    }

    fn lock_blocks(&self) -> std::sync::MutexGuard<'_, HashMap<BlockPath, Bytes>> {
        self.inner
            .blocks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lookup(&self, path: &BlockPath) -> SourceResult {
        match self.lock_blocks().get(path) {
            Some(block) => SourceResult::Found(block.clone()),
            None => SourceResult::Miss,
        }
    }
}

impl BlockSource for MemoryStore {
    fn fetch(&self, request: &SourceRequest) -> BlockFuture {
        self.inner.fetches.fetch_add(1, Ordering::SeqCst);
        self.inner.fetched.notify_waiters();
        let behaviour = *self
            .inner
            .behaviour
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match behaviour {
            MemoryBehaviour::Serve => Box::pin(std::future::ready(self.lookup(&request.path))),
            MemoryBehaviour::Fail => Box::pin(std::future::ready(SourceResult::Failed)),
            MemoryBehaviour::Delay(wait) => {
                let store = self.clone();
                let path = request.path;
                Box::pin(async move {
                    tokio::time::sleep(wait).await;
                    store.lookup(&path)
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peerblock_core::wire::{ChunkKey, Hop};
    use std::path::PathBuf;

    static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

    fn request(path: BlockPath) -> SourceRequest {
        SourceRequest {
            path,
            origin: None,
            hop: Hop(0),
        }
    }

    fn scratch(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "peerblock-source-{tag}-{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ))
    }

    fn block_path(index: u64) -> BlockPath {
        BlockPath {
            key: ChunkKey::from_array([7; 32]),
            index,
        }
    }

    #[tokio::test]
    async fn a_block_read_once_is_served_from_the_cache_without_its_file() {
        let root = scratch("cache-hit");
        let store = FileStore::with_cache(&root, 1024, 8 * 1024);
        let path = block_path(1);
        store.put_blocking(&path, b"hot").unwrap();
        let first = store.fetch(&request(path)).await;
        assert_eq!(first, SourceResult::Found(Bytes::from_static(b"hot")));
        std::fs::remove_file(store.file_of(&path)).unwrap();
        let again = store.fetch(&request(path)).await;
        assert_eq!(
            again,
            SourceResult::Found(Bytes::from_static(b"hot")),
            "a cache hit"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn the_cache_keeps_its_byte_bound_dropping_the_oldest_blocks_first() {
        let root = scratch("cache-bound");
        // 8 KiB of cache: eight 1 KiB blocks fit (each at the 1/8 limit).
        let store = FileStore::with_cache(&root, 4096, 8 * 1024);
        for i in 0..12 {
            put(&store, block_path(i), Bytes::from(vec![i as u8; 1024]))
                .await
                .unwrap();
            assert!(
                store.cached_bytes() <= 8 * 1024,
                "bound kept after block {i}"
            );
        }
        assert_eq!(store.cached_bytes(), 8 * 1024);
        for i in 0..4 {
            std::fs::remove_file(store.file_of(&block_path(i))).unwrap();
            assert_eq!(
                store.fetch(&request(block_path(i))).await,
                SourceResult::Miss,
                "block {i} was evicted"
            );
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn a_block_above_an_eighth_of_the_cache_is_never_cached_and_zero_disables_it() {
        let root = scratch("cache-big");
        let store = FileStore::with_cache(&root, 4096, 8 * 1024);
        put(&store, block_path(1), Bytes::from(vec![1; 1025]))
            .await
            .unwrap();
        assert_eq!(store.cached_bytes(), 0);
        let off = FileStore::with_cache(&root, 4096, 0);
        put(&off, block_path(2), Bytes::from(vec![2; 10]))
            .await
            .unwrap();
        assert_eq!(
            off.fetch(&request(block_path(2))).await,
            SourceResult::Found(Bytes::from(vec![2; 10]))
        );
        assert_eq!(off.cached_bytes(), 0);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn file_store_puts_under_the_documented_layout_and_reads_back() {
        let root = scratch("layout");
        let store = FileStore::new(&root, 1024);
        let path = BlockPath {
            key: ChunkKey::from_bytes(&[0x0a, 0xbc]).unwrap(),
            index: 17,
        };
        put(&store, path, Bytes::from_static(b"hello"))
            .await
            .unwrap();
        assert_eq!(store.file_of(&path), root.join("0abc").join("17"));
        let names: Vec<_> = std::fs::read_dir(root.join("0abc"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["17"], "no temporary file is left behind");
        assert_eq!(
            store.fetch(&request(path)).await,
            SourceResult::Found(Bytes::from_static(b"hello"))
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn file_store_missing_block_is_a_miss() {
        let store = FileStore::new(scratch("missing"), 1024);
        let path = BlockPath {
            key: ChunkKey::from_bytes(&[1]).unwrap(),
            index: 0,
        };
        assert_eq!(store.fetch(&request(path)).await, SourceResult::Miss);
    }

    #[tokio::test]
    async fn file_store_block_above_the_max_block_size_fails_unread() {
        let root = scratch("oversize");
        let big = FileStore::new(&root, 100);
        let small = FileStore::new(&root, 10);
        let path = BlockPath {
            key: ChunkKey::from_bytes(&[2]).unwrap(),
            index: 3,
        };
        put(&big, path, Bytes::from(vec![7u8; 11])).await.unwrap();
        assert_eq!(small.fetch(&request(path)).await, SourceResult::Failed);
        assert!(matches!(
            put(&small, path, Bytes::from(vec![7u8; 11])).await,
            Err(StoreError::TooLarge {
                len: 11,
                max: 10,
                ..
            })
        ));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn file_store_unreadable_block_fails() {
        let root = scratch("unreadable");
        let store = FileStore::new(&root, 1 << 20);
        let path = BlockPath {
            key: ChunkKey::from_bytes(&[3]).unwrap(),
            index: 0,
        };
        // A directory where the block file should be: an I/O error other than NotFound.
        std::fs::create_dir_all(store.file_of(&path)).unwrap();
        assert_eq!(store.fetch(&request(path)).await, SourceResult::Failed);
        let _ = std::fs::remove_dir_all(&root);
    }
}
