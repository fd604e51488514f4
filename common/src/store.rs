//! The file store both drivers serve from: one file per block, atomic writes, bounded
//! reads and a bounded hot-block cache ([`FileStore`]).
//!
//! # Layout
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
//! Writes ([`FileStore::put_blocking`]) go to a temporary file in the chunk directory
//! whose name starts with `.` (so it never parses as an index and is never served) and
//! are renamed into place, so a reader sees either no block or the whole block. A block
//! file larger than the store's `max_block_size` is never loaded: it is answered `Failed`
//! (500) with a warning, so a stray large file cannot pin memory.
//!
//! Every call here is blocking file I/O on the calling thread; each driver decides where
//! it runs (the tokio driver on `spawn_blocking`, the mio driver on its worker threads,
//! where a read of a page-cached block costs microseconds). [`FileStore::open_block`]
//! hands out the open file itself for a zero-copy (`sendfile`) path.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use peerblock_core::bytes::Bytes;
use peerblock_core::server::{SourceResult, MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX};
use peerblock_core::wire::BlockPath;

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
/// change under its path (a [`put_blocking`](Self::put_blocking) followed by [`cache_insert`](Self::cache_insert) replaces the cached copy too). A block
/// file edited behind the node's back is served from the cache until evicted; readers
/// validate every block end to end, so such a copy is rejected by them.
#[derive(Clone, Debug)]
pub struct FileStore {
    root: Arc<PathBuf>,
    max_block_size: u64,
    cache: Arc<Mutex<BlockCache>>,
    lookups: Arc<AtomicU64>,
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
    /// first [`put_blocking`](Self::put_blocking); a missing root simply misses every block.
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
            lookups: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Bytes of blocks held in the cache now.
    pub fn cached_bytes(&self) -> u64 {
        self.lock_cache().bytes
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, BlockCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached copy of block `path`, if it is hot (no file access).
    pub fn cached(&self, path: &BlockPath) -> Option<Bytes> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        self.lock_cache().get(path)
    }

    /// How many times this store (any clone of it) was asked for a block, through
    /// [`cached`](Self::cached), [`get_blocking`](Self::get_blocking) or
    /// [`open_block`](Self::open_block) (one request may count more than once: a cache
    /// miss then a file read). For tests: a request the server must never hand to its
    /// source (a bad hop, a malformed path) leaves it unchanged, whichever path a driver
    /// serves from.
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// Keeps `block` as block `path`'s cached copy (unless it is above an eighth of the
    /// cache's bound, or the cache is off), evicting the oldest blocks over the bound.
    pub fn cache_insert(&self, path: BlockPath, block: &Bytes) {
        self.lock_cache().insert(path, block);
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

    /// Stores block `path` atomically on the calling thread (blocking): a temporary file
    /// in the chunk directory, `fsync`, rename. A block above `max_block_size` is refused
    /// ([`StoreError::TooLarge`]). The cache is not touched (a driver that wants the
    /// stored block hot calls [`cache_insert`](Self::cache_insert)); an async runtime runs
    /// this off its reactor (the tokio driver on `spawn_blocking`).
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
        self.lookups.fetch_add(1, Ordering::Relaxed);
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

/// An open block file for a zero-copy path: the file and its length, checked against the
/// store's `max_block_size` when opened.
#[derive(Debug)]
pub struct OpenBlock {
    /// The open block file, positioned at its start.
    pub file: File,
    /// The file's length when opened: the bytes to send.
    pub len: u64,
}

/// What [`FileStore::open_block`] found.
#[derive(Debug)]
pub enum Opened {
    /// The block file, open.
    File(OpenBlock),
    /// No such block (`Miss`).
    Missing,
    /// The file exists but cannot be served: unreadable, or above `max_block_size`
    /// (`Failed`; a warning was logged).
    Failed,
}

impl FileStore {
    /// Opens block `path`'s file for a zero-copy send, without reading it: `Missing` if
    /// it does not exist, `Failed` (with a warning) on any other error or a file above
    /// `max_block_size`. The caller sends exactly `len` bytes; a file truncated under it
    /// makes the send end early, which the caller must treat as a failed response (close
    /// the connection), never pad.
    pub fn open_block(&self, path: &BlockPath) -> Opened {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let file = self.file_of(path);
        let opened = File::open(&file).and_then(|f| {
            let meta = f.metadata()?;
            // A directory (or any non-regular file) opens on Linux and has a length, but
            // sendfile cannot send it: answered 500 here rather than a 200 head whose body
            // never comes.
            if !meta.is_file() {
                return Err(io::Error::other("not a regular file"));
            }
            Ok((meta.len(), f))
        });
        match opened {
            Ok((len, f)) if len <= self.max_block_size => Opened::File(OpenBlock { file: f, len }),
            Ok((len, _)) => {
                tracing::warn!(file = %file.display(), len, max = self.max_block_size, "block file above the max block size: not served");
                Opened::Failed
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Opened::Missing,
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "opening block file failed");
                Opened::Failed
            }
        }
    }
}
