//! Where a server's blocks come from: the [`BlockSource`] trait, a file store
//! ([`FileStore`]) and an in-memory store for tests ([`MemoryStore`]).
//!
//! # File store layout
//!
//! A [`FileStore`] keeps one file per block:
//!
//! ```text
//! <store>/<chunk-hex>/<index>
//! ```
//!
//! - `<chunk-hex>` is the chunk key in canonical lower-case hex, exactly as
//!   `ChunkKey`'s `Display` / `write_hex` writes it (and as it appears in the block path
//!   `/peer/v1/block/<chunk-hex>/<index>`);
//! - `<index>` is the block index in canonical decimal (no sign, no leading zeros but `0`);
//! - the file's whole content is the block, nothing else (no header, no checksum: content
//!   addressing is the manifest's business, see [`crate::manifest`]).
//!
//! Writes ([`FileStore::put`]) go to a temporary file in the chunk directory whose name
//! starts with `.` (so it never parses as an index and is never served) and are renamed
//! into place, so a reader sees either no block or the whole block. A block file larger
//! than the store's `max_block_size` is never loaded: it is answered `Failed` (500) with a
//! warning, so a stray large file cannot pin memory.
//!
//! Every file operation runs on `tokio::task::spawn_blocking`, never on a reactor thread.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::future::Future;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use peerblock_core::bytes::Bytes;
use peerblock_core::server::{SourceRequest, SourceResult, MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX};
use peerblock_core::wire::BlockPath;

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

/// Default [`FileStore`] bound on a block file's size: 64 MiB, the largest block core's
/// default relay index bound is computed for (`MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX`), and the
/// default node-wide in-flight byte budget, so one block can always be served.
pub const DEFAULT_MAX_BLOCK_SIZE: u64 = MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX;

/// A file store operation that failed, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Creating, writing, syncing or renaming a block file failed.
    #[error("writing block file {path}: {source}")]
    Write {
        /// The file (or directory) being written.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The block is larger than the store's `max_block_size`: it could never be served.
    #[error("block for {path} is {len} bytes, above the store's max block size {max}")]
    TooLarge {
        /// The block file it was meant for.
        path: PathBuf,
        /// The block's length.
        len: u64,
        /// The store's bound.
        max: u64,
    },
    /// The blocking task running the operation panicked or was cancelled.
    #[error("the blocking task writing {path} did not complete")]
    Task {
        /// The block file it was writing.
        path: PathBuf,
    },
}

/// Default size of a [`FileStore`]'s hot-block cache: 256 MiB. Many readers want the same
/// blocks at once; serving a hot block from memory keeps the file read (and its hand-off
/// to a blocking thread, about a third of the node's CPU at 4 KiB blocks) off the
/// per-request path.
pub const DEFAULT_CACHE_BYTES: u64 = 256 * 1024 * 1024;

/// Blocks kept as files, one per block: `<root>/<chunk-hex>/<index>` (see the module
/// docs), with a bounded in-memory cache of the blocks served or stored most recently.
/// Cheap to clone (clones share the cache).
///
/// The cache is sound because the store is content-addressed: a block's bytes never
/// change under its path (a [`put`](Self::put) replaces the cached copy too). A block
/// file edited behind the node's back is served from the cache until evicted; readers
/// validate every block end to end, so such a copy is rejected by them.
#[derive(Clone, Debug)]
pub struct FileStore {
    root: Arc<PathBuf>,
    max_block_size: u64,
    cache: Arc<Mutex<BlockCache>>,
}

/// A FIFO-evicted map of blocks bounded by their total size. A block larger than an
/// eighth of the bound is never cached, so one block cannot flush the rest.
#[derive(Debug, Default)]
struct BlockCache {
    blocks: HashMap<BlockPath, Bytes>,
    order: VecDeque<BlockPath>,
    bytes: u64,
    max_bytes: u64,
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

    fn remove(&mut self, path: &BlockPath) {
        if let Some(gone) = self.blocks.remove(path) {
            self.bytes -= gone.len() as u64;
            self.order.retain(|p| p != path);
        }
    }
}

/// Makes temporary file names unique within the process (with the pid across processes).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl FileStore {
    /// A store rooted at `root` that never loads a block file above `max_block_size`
    /// bytes ([`DEFAULT_MAX_BLOCK_SIZE`] is a sane value). The directory is created on the
    /// first [`put`](Self::put); a missing root simply misses every block.
    pub fn new(root: impl Into<PathBuf>, max_block_size: u64) -> Self {
        Self::with_cache(root, max_block_size, DEFAULT_CACHE_BYTES)
    }

    /// [`new`](Self::new) with a hot-block cache of at most `cache_bytes` (0: no cache).
    pub fn with_cache(root: impl Into<PathBuf>, max_block_size: u64, cache_bytes: u64) -> Self {
        FileStore {
            root: Arc::new(root.into()),
            max_block_size,
            cache: Arc::new(Mutex::new(BlockCache {
                max_bytes: cache_bytes,
                ..BlockCache::default()
            })),
        }
    }

    /// Bytes of blocks held in the cache now.
    pub fn cached_bytes(&self) -> u64 {
        self.lock_cache().bytes
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, BlockCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The store's bound on a block file's size.
    pub fn max_block_size(&self) -> u64 {
        self.max_block_size
    }

    /// The directory holding chunk `path.key`'s blocks: `<root>/<chunk-hex>`.
    pub fn chunk_dir(&self, path: &BlockPath) -> PathBuf {
        let mut hex = String::with_capacity(2 * path.key.as_bytes().len());
        path.key
            .write_hex(&mut hex)
            .expect("writing to a String cannot fail");
        self.root.join(hex)
    }

    /// The file holding block `path`: `<root>/<chunk-hex>/<index>`.
    pub fn file_of(&self, path: &BlockPath) -> PathBuf {
        let mut index = String::new();
        write!(index, "{}", path.index).expect("writing to a String cannot fail");
        self.chunk_dir(path).join(index)
    }

    /// Stores block `path` atomically (temporary file, `fsync`, rename), on
    /// `spawn_blocking`. A block above `max_block_size` is refused ([`StoreError::TooLarge`]).
    pub async fn put(&self, path: BlockPath, bytes: Bytes) -> Result<(), StoreError> {
        let store = self.clone();
        let file = self.file_of(&path);
        let block = bytes.clone();
        tokio::task::spawn_blocking(move || store.put_blocking(&path, &block))
            .await
            .map_err(|_| StoreError::Task { path: file })??;
        self.lock_cache().insert(path, &bytes);
        Ok(())
    }

    /// [`put`](Self::put) on the calling thread: for code already off the reactor (inside
    /// `spawn_blocking`, or a plain thread such as an import tool).
    pub fn put_blocking(&self, path: &BlockPath, bytes: &[u8]) -> Result<(), StoreError> {
        let file = self.file_of(path);
        let len = bytes.len() as u64;
        if len > self.max_block_size {
            return Err(StoreError::TooLarge {
                path: file,
                len,
                max: self.max_block_size,
            });
        }
        let dir = self.chunk_dir(path);
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::Write {
            path: dir.clone(),
            source,
        })?;
        let temp = dir.join(format!(
            ".{}.tmp.{}.{}",
            path.index,
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut f = std::fs::File::create(&temp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&temp, &file)
        })();
        written.map_err(|source| {
            let _ = std::fs::remove_file(&temp);
            StoreError::Write {
                path: file.clone(),
                source,
            }
        })
    }

    /// Reads block `path` on the calling thread (blocking): `Miss` if its file does not
    /// exist, `Failed` (with a warning) on any other I/O error or a file above
    /// `max_block_size`.
    pub fn get_blocking(&self, path: &BlockPath) -> SourceResult {
        let file = self.file_of(path);
        let max = self.max_block_size;
        let read = (|| -> io::Result<Result<Vec<u8>, u64>> {
            let f = std::fs::File::open(&file)?;
            let len = f.metadata()?.len();
            if len > max {
                return Ok(Err(len));
            }
            // Read at most max + 1 bytes: a file that grew since `metadata` is caught too.
            let mut buf = Vec::with_capacity(len as usize);
            f.take(max + 1).read_to_end(&mut buf)?;
            if buf.len() as u64 > max {
                return Ok(Err(buf.len() as u64));
            }
            Ok(Ok(buf))
        })();
        match read {
            Ok(Ok(buf)) => SourceResult::Found(Bytes::from(buf)),
            Ok(Err(len)) => {
                tracing::warn!(file = %file.display(), len, max, "block file above the max block size: not served");
                SourceResult::Failed
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => SourceResult::Miss,
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "reading block file failed");
                SourceResult::Failed
            }
        }
    }
}

impl BlockSource for FileStore {
    /// A cached block is answered at once (the server answers it in place, no task); any
    /// other is read on `spawn_blocking` and cached if found.
    fn fetch(&self, request: &SourceRequest) -> BlockFuture {
        let path = request.path;
        if let Some(block) = self.lock_cache().get(&path) {
            return Box::pin(std::future::ready(SourceResult::Found(block)));
        }
        let store = self.clone();
        Box::pin(async move {
            let reader = store.clone();
            let result = tokio::task::spawn_blocking(move || reader.get_blocking(&path))
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(%path, error = %e, "block file read task failed");
                    SourceResult::Failed
                });
            if let SourceResult::Found(block) = &result {
                store.lock_cache().insert(path, block);
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
            store
                .put(block_path(i), Bytes::from(vec![i as u8; 1024]))
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
        store
            .put(block_path(1), Bytes::from(vec![1; 1025]))
            .await
            .unwrap();
        assert_eq!(store.cached_bytes(), 0);
        let off = FileStore::with_cache(&root, 4096, 0);
        off.put(block_path(2), Bytes::from(vec![2; 10]))
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
        store.put(path, Bytes::from_static(b"hello")).await.unwrap();
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
        big.put(path, Bytes::from(vec![7u8; 11])).await.unwrap();
        assert_eq!(small.fetch(&request(path)).await, SourceResult::Failed);
        assert!(matches!(
            small.put(path, Bytes::from(vec![7u8; 11])).await,
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
