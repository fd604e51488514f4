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
//! # Holders check what they hold
//!
//! Before a block read from disk is served the first time, the store verifies it: block 0
//! (the manifest, when it is one: it starts with [`crate::manifest::MANIFEST_HEADER`]) against the chunk
//! key, block `i` against the chunk's manifest ([`Manifest::verify_block`], the manifest
//! loaded from `<chunk>/0` and verified against the key). What was verified is remembered
//! by file identity (device, inode, length, modification and change times) in a bounded
//! table ([`MAX_VERIFIED_FILES`]), so a page-cached block is hashed once, not on every
//! read, and a file changed on disk (a hand repair, a re-import) is verified again. Parsed
//! manifests are kept in a small bounded cache ([`MAX_CACHED_MANIFESTS`]).
//!
//! A block that fails is **quarantined**: renamed to `.<index>.corrupt` in its chunk
//! directory (a dot-name: never parsed as an index, never served), a warning names the
//! file, the store's corrupt counter (`peerblock_store_corrupt_total`) goes up, and the
//! request is answered [`StoreRead::Corrupt`] (core's `SourceResult::Corrupt`: `404` with
//! `X-Peerblock-Miss: corrupt`). A rotten manifest is quarantined the same way; the
//! chunk's other blocks then have no manifest.
//!
//! **Unverifiable blocks.** A chunk whose `<chunk>/0` is missing, or is not a manifest
//! (does not start with the manifest header: blocks written by tests, or by
//! `peerblock-node swarm`, which stores bare blocks without a manifest), has nothing to
//! verify its blocks against: they are served as they are, as before verification
//! existed ([`Verification::Unverifiable`]). Readers still validate every block end to
//! end. The hot-block cache holds only verified bytes and bytes of such unverifiable
//! chunks.
//!
//! # Relayed blocks
//!
//! Blocks a relay fetched for a requester are not imported content: with a relay cache
//! ([`FileStore::with_relay_cache`], [`crate::relay_cache`]) they are kept in
//! `<store>/.relay-cache/` under a byte bound, least recently used first out, and
//! [`FileStore::read_block`] / [`FileStore::open_block`] answer from there when the store
//! itself has no such block. Imported blocks are never evicted.
//!
//! # Stale temporary files
//!
//! A process killed mid-write leaves `.import-<pid>-<n>` directories (in the store) and
//! `.<index>.tmp.<pid>.<n>` files (in chunk directories). [`remove_stale_temps`] removes
//! those whose pid is not a live process (`/proc/<pid>` does not exist); `serve` and
//! `check` run it at start.
//!
//! Every call here is blocking file I/O on the calling thread; each driver decides where
//! it runs (the tokio driver on `spawn_blocking`, the mio driver on its worker threads,
//! where a read of a page-cached block costs microseconds). [`FileStore::open_block`]
//! hands out the open file itself for a zero-copy (`sendfile`) path.

mod cache;
mod read;
mod temps;
#[cfg(test)]
mod tests;
mod verify;
mod write;

pub use cache::DEFAULT_CACHE_BYTES;
pub use read::{OpenBlock, Opened};
pub use temps::{pid_alive, remove_stale_temps, stale_temps, temp_owner};
pub(crate) use verify::hash_file;
pub use verify::{
    quarantine_file, quarantine_name, FileId, MAX_CACHED_MANIFESTS, MAX_VERIFIED_FILES,
};
pub use write::{sync_dir, sync_parent};

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use peerblock_core::bytes::Bytes;
use peerblock_core::server::{SourceResult, MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX};
use peerblock_core::wire::BlockPath;
use prometheus_client::metrics::counter::Counter;

#[cfg(doc)]
use crate::manifest::Manifest;
use crate::relay_cache::RelayCache;

use cache::BlockCache;
use verify::VerifyState;

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

/// Blocks kept as files, one per block: `<root>/<chunk-hex>/<index>` (see the module
/// docs), with a bounded in-memory cache of the blocks served or stored most recently.
/// Cheap to clone (clones share the cache, the verification table and the corrupt
/// counter).
///
/// Every block read from disk is verified before it is served (module docs, "Holders
/// check what they hold"); the hot-block cache holds only verified blocks (and blocks of
/// chunks without a manifest). A block file edited behind the node's back after it was
/// cached is served from the cache until evicted: the cached bytes were verified.
#[derive(Clone, Debug)]
pub struct FileStore {
    root: Arc<PathBuf>,
    max_block_size: u64,
    cache: Arc<RwLock<BlockCache>>,
    lookups: Arc<AtomicU64>,
    verify: Arc<Mutex<VerifyState>>,
    corrupt: Counter,
    hashed: Arc<AtomicU64>,
    relay: Option<Arc<RelayCache>>,
}

/// What the store knows about a block's bytes when it serves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// Checked: block 0 against the chunk key, block `i` against the chunk's manifest.
    Verified,
    /// The chunk has no manifest (module docs): nothing to check against; served as is.
    Unverifiable,
}

/// What [`FileStore::read_block`] found: the store-level verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreRead {
    /// The block's bytes, verified or unverifiable (never rotten).
    Found {
        /// The bytes.
        block: Bytes,
        /// Whether they were checked.
        verification: Verification,
    },
    /// No such block file.
    Missing,
    /// The file failed verification and was quarantined (`404` + `X-Peerblock-Miss:
    /// corrupt`).
    Corrupt,
    /// The file exists but cannot be served: unreadable, or above `max_block_size`.
    Failed,
}

impl StoreRead {
    /// Core's answer for this verdict.
    pub fn into_source_result(self) -> SourceResult {
        match self {
            StoreRead::Found { block, .. } => SourceResult::Found(block),
            StoreRead::Missing => SourceResult::Miss,
            StoreRead::Corrupt => SourceResult::Corrupt,
            StoreRead::Failed => SourceResult::Failed,
        }
    }
}

/// What a relay may do with a block it fetched ([`FileStore::check_relayed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayVerdict {
    /// Validated (block 0 against the key, block `i` against a manifest this store
    /// holds, imported or relay-cached): serve it and keep it in the relay cache
    /// ([`FileStore::keep_relayed`]).
    Store,
    /// Block `i` of a chunk whose manifest this store does not hold: it could not be
    /// checked. Serve it (the reader validates it end to end) but cache it nowhere, so a
    /// wrong block fetched once is never served again; a relay that can fetches the
    /// chunk's manifest and checks again.
    ServeOnly,
    /// It fails validation: do not serve it, do not cache it (`Failed`).
    Reject,
}

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
            cache: Arc::new(RwLock::new(BlockCache {
                max_bytes: cache_bytes,
                ..BlockCache::default()
            })),
            lookups: Arc::new(AtomicU64::new(0)),
            verify: Arc::default(),
            corrupt: Counter::default(),
            hashed: Arc::default(),
            relay: None,
        }
    }

    /// This store with a relay cache ([`crate::relay_cache`]): blocks kept with
    /// [`keep_relayed`](Self::keep_relayed) are served from it when the store itself has
    /// no such block, and a chunk's manifest found there verifies its other blocks.
    pub fn with_relay_cache(mut self, cache: RelayCache) -> Self {
        self.relay = Some(Arc::new(cache));
        self
    }

    /// The relay cache, if this store has one.
    pub fn relay_cache(&self) -> Option<&RelayCache> {
        self.relay.as_deref()
    }

    /// Keeps block `path`, fetched by a relay and validated
    /// ([`check_relayed`](Self::check_relayed)), in the relay cache (blocking file I/O).
    /// `Ok(false)` when it was not kept: no relay cache (`[store] cache_bytes = 0`), or a
    /// block larger than the cache's bound. Imported content is never touched.
    pub fn keep_relayed(&self, path: &BlockPath, bytes: &[u8]) -> Result<bool, StoreError> {
        let Some(cache) = &self.relay else {
            return Ok(false);
        };
        cache
            .insert(path, bytes)
            .map_err(|source| StoreError::Write {
                path: self.root.join(crate::relay_cache::RELAY_CACHE_DIR),
                source,
            })
    }

    /// This store counting the blocks it quarantines in `counter` (the node's
    /// `peerblock_store_corrupt_total`, [`crate::metrics::Metrics::store_corrupt`]).
    pub fn with_corrupt_counter(mut self, counter: Counter) -> Self {
        self.corrupt = counter;
        self
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
}
