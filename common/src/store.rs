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

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::fs::{File, Metadata};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use peerblock_core::bytes::Bytes;
use peerblock_core::server::{SourceResult, MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX};
use peerblock_core::wire::{BlockPath, ChunkKey};
use prometheus_client::metrics::counter::Counter;

use crate::manifest::{verify_manifest, Manifest, MAX_MANIFEST_BYTES};
use crate::relay_cache::{CacheRead, RelayCache};

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

/// Most block files whose verification a [`FileStore`] remembers: 65 536 (at most a few
/// MiB of table: a block path, a file identity and a queue slot each, about 120 bytes).
/// That is 64 GiB of store at the default 1 MiB block size; a block evicted from the
/// table is simply hashed again on its next read from disk (once).
pub const MAX_VERIFIED_FILES: usize = 65_536;

/// Most parsed manifests a [`FileStore`] keeps: 64. A parsed manifest holds 32 bytes per
/// block (32 KiB for a 1 GiB file at 1 MiB blocks, 2 MiB at the largest manifest), so the
/// cache stays under 128 MiB in the worst case and a few MiB in practice, and a block read
/// from disk in one of the 64 hottest chunks does not re-read and re-hash the manifest.
pub const MAX_CACHED_MANIFESTS: usize = 64;

/// How a block file's bytes start when it is a manifest: block 0 is verified against the
/// chunk key only then (anything else is a chunk without a manifest: unverifiable).
const MANIFEST_MAGIC: &[u8] = b"peerblock-manifest ";

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
    cache: Arc<Mutex<BlockCache>>,
    lookups: Arc<AtomicU64>,
    verify: Arc<Mutex<VerifyState>>,
    corrupt: Counter,
    hashed: Arc<AtomicU64>,
    relay: Option<Arc<RelayCache>>,
}

/// A file's identity: a file changed on disk (rewritten in place, or replaced by a rename)
/// has another one, so it is verified again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    /// The identity of the file `meta` describes.
    pub fn of(meta: &Metadata) -> FileId {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
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

/// The bytes a verification looks at: already read (the buffered path) or still in the
/// open file (the zero-copy path: hashed with positioned reads, the file's offset kept).
enum Content<'a> {
    Bytes(&'a [u8]),
    File(&'a File, u64),
}

/// The outcome of one verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Verified,
    Unverifiable,
    Corrupt,
}

/// Which block files were verified (by identity) and the parsed manifests, each bounded
/// and evicted oldest first.
#[derive(Debug, Default)]
struct VerifyState {
    files: HashMap<BlockPath, FileId>,
    order: VecDeque<BlockPath>,
    manifests: HashMap<ChunkKey, (FileId, Arc<Manifest>)>,
    manifest_order: VecDeque<ChunkKey>,
}

impl VerifyState {
    fn is_verified(&self, path: &BlockPath, id: &FileId) -> bool {
        self.files.get(path) == Some(id)
    }

    fn record(&mut self, path: BlockPath, id: FileId) {
        if self.files.insert(path, id).is_none() {
            self.order.push_back(path);
        }
        while self.files.len() > MAX_VERIFIED_FILES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.files.remove(&oldest);
        }
    }

    fn forget(&mut self, path: &BlockPath) {
        if self.files.remove(path).is_some() {
            self.order.retain(|p| p != path);
        }
        if path.index == 0 && self.manifests.remove(&path.key).is_some() {
            self.manifest_order.retain(|k| k != &path.key);
        }
    }

    fn manifest(&self, key: &ChunkKey, id: &FileId) -> Option<Arc<Manifest>> {
        match self.manifests.get(key) {
            Some((seen, m)) if seen == id => Some(Arc::clone(m)),
            _ => None,
        }
    }

    fn keep_manifest(&mut self, key: ChunkKey, id: FileId, manifest: Arc<Manifest>) {
        if self.manifests.insert(key, (id, manifest)).is_none() {
            self.manifest_order.push_back(key);
        }
        while self.manifests.len() > MAX_CACHED_MANIFESTS {
            let Some(oldest) = self.manifest_order.pop_front() else {
                break;
            };
            self.manifests.remove(&oldest);
        }
    }
}

/// Reads `len` bytes of `file` from offset 0 with positioned reads (the file's offset is
/// not moved) into a BLAKE3 hash; `None` if the file is shorter than `len` now.
pub(crate) fn hash_file(file: &File, len: u64) -> io::Result<Option<blake3::Hash>> {
    /// Bytes hashed per positioned read: large enough for BLAKE3's SIMD paths and few
    /// system calls, small enough to stay in cache.
    const STEP: usize = 256 * 1024;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; STEP.min(len as usize).max(1)];
    let mut offset = 0u64;
    while offset < len {
        let want = ((len - offset) as usize).min(buf.len());
        let n = file.read_at(&mut buf[..want], offset)?;
        if n == 0 {
            return Ok(None);
        }
        hasher.update(&buf[..n]);
        offset += n as u64;
    }
    Ok(Some(hasher.finalize()))
}

/// The dot-name a rotten block file `<index>` is renamed to in its chunk directory.
pub fn quarantine_name(index: u64) -> String {
    format!(".{index}.corrupt")
}

/// Renames block file `<chunk_dir>/<index>` to its quarantine name ([`quarantine_name`],
/// replacing an older quarantined copy); returns the new path.
pub fn quarantine_file(chunk_dir: &Path, index: u64) -> io::Result<PathBuf> {
    let to = chunk_dir.join(quarantine_name(index));
    std::fs::rename(chunk_dir.join(index.to_string()), &to)?;
    Ok(to)
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

    /// Block files this store (any clone) found rotten and quarantined.
    pub fn corrupt_count(&self) -> u64 {
        self.corrupt.get()
    }

    /// How many times this store (any clone) hashed a block file to verify it (a file
    /// verified once is not hashed again while its identity is unchanged and remembered).
    pub fn verifications(&self) -> u64 {
        self.hashed.load(Ordering::Relaxed)
    }

    fn lock_verify(&self) -> std::sync::MutexGuard<'_, VerifyState> {
        self.verify.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Verifies block `path`, whose open file has identity `id` and content `content`
    /// (module docs): a file verified before with the same identity is not hashed again;
    /// a rotten one is quarantined here.
    fn check(&self, path: &BlockPath, id: FileId, content: Content<'_>) -> Check {
        if self.lock_verify().is_verified(path, &id) {
            return Check::Verified;
        }
        if path.key.as_bytes().len() != blake3::OUT_LEN {
            // Not a BLAKE3 chunk key: the chunk cannot have a manifest.
            return Check::Unverifiable;
        }
        let verdict = if path.index == 0 {
            let owned;
            let bytes = match content {
                Content::Bytes(b) => b,
                Content::File(f, len) => {
                    // The magic first: a block 0 that is not a manifest (test data, say)
                    // is not read whole on every zero-copy open.
                    let mut magic = [0u8; MANIFEST_MAGIC.len()];
                    if (len as usize) < magic.len()
                        || f.read_exact_at(&mut magic, 0).is_err()
                        || magic != MANIFEST_MAGIC
                    {
                        return Check::Unverifiable;
                    }
                    owned = match read_at_most(f, len) {
                        Ok(Some(b)) => b,
                        Ok(None) => return Check::Unverifiable,
                        Err(e) => {
                            tracing::warn!(%path, error = %e, "reading a manifest to verify it failed");
                            return Check::Unverifiable;
                        }
                    };
                    &owned[..]
                }
            };
            if !bytes.starts_with(MANIFEST_MAGIC) {
                return Check::Unverifiable;
            }
            self.hashed.fetch_add(1, Ordering::Relaxed);
            if verify_manifest(&path.key, bytes) {
                Check::Verified
            } else {
                Check::Corrupt
            }
        } else {
            let Some(manifest) = self.manifest_of(&path.key) else {
                return Check::Unverifiable;
            };
            self.hashed.fetch_add(1, Ordering::Relaxed);
            let ok = match content {
                Content::Bytes(b) => manifest.verify_block(path.index, b),
                Content::File(f, len) => {
                    manifest.block_len(path.index) == Some(len)
                        && match hash_file(f, len) {
                            Ok(Some(h)) => {
                                h.as_bytes() == &manifest.hashes[(path.index - 1) as usize]
                            }
                            Ok(None) => false,
                            Err(e) => {
                                tracing::warn!(%path, error = %e, "reading a block to verify it failed");
                                return Check::Unverifiable;
                            }
                        }
                }
            };
            if ok {
                Check::Verified
            } else {
                Check::Corrupt
            }
        };
        match verdict {
            Check::Verified => self.lock_verify().record(*path, id),
            Check::Corrupt => self.quarantine(path, id),
            Check::Unverifiable => {}
        }
        verdict
    }

    /// The verified manifest of chunk `key` (cached, or read from `<chunk>/0` and checked
    /// against the key); `None` if the chunk has none. A rotten manifest is quarantined.
    fn manifest_of(&self, key: &ChunkKey) -> Option<Arc<Manifest>> {
        let path = BlockPath {
            key: *key,
            index: 0,
        };
        let file = self.file_of(&path);
        let f = match File::open(&file) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return self.relayed_manifest(key),
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "opening a manifest failed: its blocks are served unverified");
                return None;
            }
        };
        let meta = f.metadata().ok().filter(Metadata::is_file)?;
        let id = FileId::of(&meta);
        if let Some(m) = self.lock_verify().manifest(key, &id) {
            return Some(m);
        }
        let bytes = match read_at_most(&f, meta.len()) {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "reading a manifest failed: its blocks are served unverified");
                return None;
            }
        };
        if !bytes.starts_with(MANIFEST_MAGIC) {
            return None;
        }
        if !verify_manifest(key, &bytes) {
            self.quarantine(&path, id);
            return None;
        }
        let manifest = Arc::new(Manifest::parse(&bytes).ok()?);
        let mut state = self.lock_verify();
        state.record(path, id);
        state.keep_manifest(*key, id, Arc::clone(&manifest));
        Some(manifest)
    }

    /// The manifest of chunk `key` from the relay cache (checked against the key), if it
    /// holds one. Not remembered: the cache's own hash check makes a re-read cheap to trust.
    fn relayed_manifest(&self, key: &ChunkKey) -> Option<Arc<Manifest>> {
        let path = BlockPath {
            key: *key,
            index: 0,
        };
        let CacheRead::Found(bytes) = self.relay.as_deref()?.get(&path) else {
            return None;
        };
        if !verify_manifest(key, &bytes) {
            return None;
        }
        Manifest::parse(&bytes).ok().map(Arc::new)
    }

    /// Moves rotten block file `path` (still the file with identity `id`) aside, counts
    /// and logs it, and forgets it everywhere.
    fn quarantine(&self, path: &BlockPath, id: FileId) {
        let file = self.file_of(path);
        {
            let mut state = self.lock_verify();
            state.forget(path);
        }
        self.lock_cache().remove(path);
        // Only the file that was checked: a repaired copy renamed into place since is
        // left alone (and verified on its next read).
        match std::fs::symlink_metadata(&file) {
            Ok(m) if FileId::of(&m) == id => {}
            Ok(_) => {
                self.corrupt.inc();
                tracing::warn!(file = %file.display(), "block file failed verification (already replaced on disk)");
                return;
            }
            // Gone: a concurrent read of the same rotten file quarantined it (and counted
            // it), or it was removed by hand.
            Err(_) => return,
        }
        self.corrupt.inc();
        match quarantine_file(&self.chunk_dir(path), path.index) {
            Ok(to) => {
                tracing::warn!(file = %file.display(), quarantined = %to.display(), "block file failed verification: quarantined, answered 404 corrupt")
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "block file failed verification; quarantining it failed")
            }
        }
    }

    /// Whether a block fetched by a relay may be served and cached (module docs of the
    /// drivers' relays): block 0 only if it is the chunk's manifest (BLAKE3 == key);
    /// block `i` is cached only if this store holds the chunk's verified manifest (among
    /// its imported chunks or in its relay cache) and the block verifies against it,
    /// served without being cached when there is no manifest for the chunk, and rejected
    /// when it fails the manifest there is.
    pub fn check_relayed(&self, path: &BlockPath, bytes: &[u8]) -> RelayVerdict {
        if path.index == 0 {
            return if verify_manifest(&path.key, bytes) {
                RelayVerdict::Store
            } else {
                RelayVerdict::Reject
            };
        }
        if path.key.as_bytes().len() != blake3::OUT_LEN {
            return RelayVerdict::ServeOnly;
        }
        match self.manifest_of(&path.key) {
            Some(m) if m.verify_block(path.index, bytes) => RelayVerdict::Store,
            Some(_) => RelayVerdict::Reject,
            None => RelayVerdict::ServeOnly,
        }
    }

    /// Bytes of blocks held in the cache now.
    pub fn cached_bytes(&self) -> u64 {
        self.lock_cache().bytes
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, BlockCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached copy of block `path`, if it is hot (no file access). A hit on a block
    /// the relay cache holds counts as a relay cache hit (the request was answered from
    /// what this node relayed, its in-memory copy).
    pub fn cached(&self, path: &BlockPath) -> Option<Bytes> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let hit = self.lock_cache().get(path);
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
    /// in the chunk directory, `fsync`, rename, `fsync` of the chunk directory (and of the
    /// root when the chunk directory is new), so a block acknowledged survives a crash. A block above `max_block_size` is refused
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
        let new_dir = !dir.is_dir();
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::Write {
            path: dir.clone(),
            source,
        })?;
        if new_dir {
            // The new chunk directory's entry in the root must survive a crash too.
            sync_dir(&self.root).map_err(|source| StoreError::Write {
                path: self.root.to_path_buf(),
                source,
            })?;
        }
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
            std::fs::rename(&temp, &file)?;
            // The rename is durable only once the directory is.
            sync_dir(&dir)
        })();
        written.map_err(|source| {
            let _ = std::fs::remove_file(&temp);
            StoreError::Write {
                path: file.clone(),
                source,
            }
        })
    }

    /// Reads block `path` on the calling thread (blocking) and verifies it
    /// ([`read_block`](Self::read_block)): `Found`, `Miss` if its file does not exist,
    /// `Corrupt` if it was rotten (quarantined), `Failed` (with a warning) on any other I/O error or a
    /// file above `max_block_size`.
    pub fn get_blocking(&self, path: &BlockPath) -> SourceResult {
        self.read_block(path).into_source_result()
    }

    /// Reads block `path` on the calling thread (blocking) and verifies it the first time
    /// this file is read (module docs): `Missing` if its file does not exist, `Corrupt`
    /// (quarantined, with a warning) if it fails verification, `Failed` (with a warning)
    /// on any other I/O error or a file above `max_block_size`. The hot-block cache is not
    /// touched: a driver caches what is `Found`.
    pub fn read_block(&self, path: &BlockPath) -> StoreRead {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let file = self.file_of(path);
        let max = self.max_block_size;
        let read = (|| -> io::Result<Result<(Vec<u8>, FileId), u64>> {
            let f = std::fs::File::open(&file)?;
            let meta = f.metadata()?;
            let len = meta.len();
            if len > max {
                return Ok(Err(len));
            }
            // Read at most max + 1 bytes: a file that grew since `metadata` is caught too.
            let mut buf = Vec::with_capacity(len as usize);
            f.take(max + 1).read_to_end(&mut buf)?;
            if buf.len() as u64 > max {
                return Ok(Err(buf.len() as u64));
            }
            Ok(Ok((buf, FileId::of(&meta))))
        })();
        match read {
            Ok(Ok((buf, id))) => match self.check(path, id, Content::Bytes(&buf)) {
                Check::Verified => StoreRead::Found {
                    block: Bytes::from(buf),
                    verification: Verification::Verified,
                },
                Check::Unverifiable => StoreRead::Found {
                    block: Bytes::from(buf),
                    verification: Verification::Unverifiable,
                },
                Check::Corrupt => StoreRead::Corrupt,
            },
            Ok(Err(len)) => {
                tracing::warn!(file = %file.display(), len, max, "block file above the max block size: not served");
                StoreRead::Failed
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => match self.relay.as_deref() {
                Some(cache) => match cache.get(path) {
                    CacheRead::Found(block) => StoreRead::Found {
                        block,
                        verification: Verification::Verified,
                    },
                    CacheRead::Missing => StoreRead::Missing,
                },
                None => StoreRead::Missing,
            },
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "reading block file failed");
                StoreRead::Failed
            }
        }
    }
}

/// Reads the whole of `f` (expected `len` bytes) with positioned reads; `None` if it is
/// shorter than `len` now.
fn read_at_most(f: &File, len: u64) -> io::Result<Option<Vec<u8>>> {
    let len = len.min(MAX_MANIFEST_BYTES as u64 + 1) as usize;
    let mut buf = vec![0u8; len];
    let mut at = 0;
    while at < len {
        let n = f.read_at(&mut buf[at..], at as u64)?;
        if n == 0 {
            return Ok(None);
        }
        at += n;
    }
    Ok(Some(buf))
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
    /// The file failed verification and was quarantined (`Corrupt`; a warning was
    /// logged).
    Corrupt,
}

impl FileStore {
    /// Opens block `path`'s file for a zero-copy send: `Missing` if it does not exist,
    /// `Failed` (with a warning) on any other error or a file above `max_block_size`,
    /// `Corrupt` if it fails verification (quarantined). The file is read (hashed with
    /// positioned reads) only the first time this file identity is opened; after that it
    /// is opened and `fstat`ed, never read, here. The caller sends exactly `len` bytes; a file truncated under it
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
            Ok((meta.len(), FileId::of(&meta), f))
        });
        match opened {
            Ok((len, id, f)) if len <= self.max_block_size => {
                match self.check(path, id, Content::File(&f, len)) {
                    Check::Corrupt => Opened::Corrupt,
                    Check::Verified | Check::Unverifiable => {
                        Opened::File(OpenBlock { file: f, len })
                    }
                }
            }
            Ok((len, _, _)) => {
                tracing::warn!(file = %file.display(), len, max = self.max_block_size, "block file above the max block size: not served");
                Opened::Failed
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match self.relay.as_deref().and_then(|c| c.open_block(path)) {
                    Some((file, len)) => Opened::File(OpenBlock { file, len }),
                    None => Opened::Missing,
                }
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "opening block file failed");
                Opened::Failed
            }
        }
    }
}

/// `fsync`s directory `dir`, making the entries created or renamed in it durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `fsync`s the directory holding `path` (`.` for a bare file name), so that a file
/// created, linked or renamed there survives a crash.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    sync_dir(dir)
}

/// Whether process `pid` is alive, by `/proc/<pid>`. Without a `/proc` (another OS, a
/// container without it) every process is taken as alive, so nothing is removed.
pub fn pid_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return true;
    }
    pid == std::process::id() || proc.join(pid.to_string()).exists()
}

/// The pid in a temporary name the store or an import writes: `.import-<pid>-<n>` (a
/// directory in the store root) or `.<index>.tmp.<pid>.<n>` (a file in a chunk directory).
pub fn temp_owner(name: &str) -> Option<u32> {
    if let Some(rest) = name.strip_prefix(".import-") {
        let (pid, n) = rest.split_once('-')?;
        n.parse::<u64>().ok()?;
        return pid.parse().ok();
    }
    let rest = name.strip_prefix('.')?;
    let mut parts = rest.split('.');
    let (index, tmp, pid, n) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || tmp != "tmp" {
        return None;
    }
    index.parse::<u64>().ok()?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// The temporary files and directories under `root` left by processes that are gone
/// (`.import-<pid>-<n>` directories in the root, `.<index>.tmp.<pid>.<n>` files in chunk
/// directories, their pid not a live process): what [`remove_stale_temps`] removes. A
/// missing root has none.
pub fn stale_temps(root: &Path) -> io::Result<Vec<PathBuf>> {
    let mut stale = Vec::new();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(stale),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let kind = entry.file_type()?;
        if name.starts_with(".import-") {
            if temp_owner(name).is_some_and(|pid| !pid_alive(pid)) {
                stale.push(entry.path());
            }
            continue;
        }
        if !kind.is_dir() || name.starts_with('.') {
            continue;
        }
        for inner in std::fs::read_dir(entry.path())? {
            let inner = inner?;
            let n = inner.file_name();
            let Some(n) = n.to_str() else { continue };
            if n.contains(".tmp.") && temp_owner(n).is_some_and(|pid| !pid_alive(pid)) {
                stale.push(inner.path());
            }
        }
    }
    stale.sort();
    Ok(stale)
}

/// Removes what [`stale_temps`] finds (a killed import's `.import-*` directory can hold
/// gigabytes), logging each removal; returns the paths removed. Errors on single entries
/// are logged and skipped.
pub fn remove_stale_temps(root: &Path) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for path in stale_temps(root)? {
        let gone = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match gone {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed a stale temporary file of a process that is gone");
                removed.push(path);
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "removing a stale temporary file failed")
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{import, Manifest};

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "peerblock-store-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A store holding an imported 3-block file (blocks of 1000 bytes, the last 500):
    /// the store, the chunk key and the file's bytes.
    fn imported(dir: &Scratch) -> (FileStore, ChunkKey, Vec<u8>) {
        let data: Vec<u8> = (0..2500u32).map(|i| (i * 7 % 251) as u8).collect();
        let file = dir.0.join("input.bin");
        std::fs::write(&file, &data).unwrap();
        let root = dir.0.join("store");
        let report = import(&file, &root, 1000).unwrap();
        (
            FileStore::with_cache(&root, 1 << 20, 1 << 20),
            report.chunk,
            data,
        )
    }

    fn at(key: ChunkKey, index: u64) -> BlockPath {
        BlockPath { key, index }
    }

    fn flip(file: &Path, at: usize) {
        let mut b = std::fs::read(file).unwrap();
        b[at] ^= 0x01;
        std::fs::write(file, b).unwrap();
    }

    fn found(r: StoreRead) -> (Bytes, Verification) {
        match r {
            StoreRead::Found {
                block,
                verification,
            } => (block, verification),
            other => panic!("expected Found, got {other:?}"),
        }
    }

    #[test]
    fn a_sound_block_is_verified_against_the_manifest_and_served() {
        let dir = Scratch::new("sound");
        let (store, key, data) = imported(&dir);
        let (block, v) = found(store.read_block(&at(key, 2)));
        assert_eq!(&block[..], &data[1000..2000]);
        assert_eq!(v, Verification::Verified);
        let (_, v0) = found(store.read_block(&at(key, 0)));
        assert_eq!(v0, Verification::Verified);
        assert_eq!(store.corrupt_count(), 0);
    }

    #[test]
    fn a_rotten_block_is_quarantined_counted_and_answered_corrupt_while_the_others_are_served() {
        let dir = Scratch::new("rotten");
        let (store, key, data) = imported(&dir);
        let file = store.file_of(&at(key, 2));
        flip(&file, 10);
        assert_eq!(store.read_block(&at(key, 2)), StoreRead::Corrupt);
        assert_eq!(store.corrupt_count(), 1);
        assert!(!file.exists(), "the rotten file is no longer served");
        assert!(store.chunk_dir(&at(key, 2)).join(".2.corrupt").is_file());
        assert_eq!(
            store.read_block(&at(key, 2)),
            StoreRead::Missing,
            "quarantined"
        );
        let (b1, _) = found(store.read_block(&at(key, 1)));
        assert_eq!(&b1[..], &data[..1000]);
        let (b3, _) = found(store.read_block(&at(key, 3)));
        assert_eq!(&b3[..], &data[2000..]);
    }

    #[test]
    fn a_block_of_the_wrong_length_is_rotten_even_if_a_prefix_matches() {
        let dir = Scratch::new("short");
        let (store, key, data) = imported(&dir);
        std::fs::write(store.file_of(&at(key, 1)), &data[..999]).unwrap();
        assert_eq!(store.read_block(&at(key, 1)), StoreRead::Corrupt);
    }

    #[test]
    fn a_rotten_manifest_is_quarantined_and_its_blocks_become_unverifiable() {
        let dir = Scratch::new("manifest");
        let (store, key, _) = imported(&dir);
        flip(&store.file_of(&at(key, 0)), 40);
        assert_eq!(store.read_block(&at(key, 0)), StoreRead::Corrupt);
        assert!(store.chunk_dir(&at(key, 0)).join(".0.corrupt").is_file());
        let (_, v) = found(store.read_block(&at(key, 1)));
        assert_eq!(v, Verification::Unverifiable);
    }

    #[test]
    fn a_rotten_manifest_found_while_verifying_a_block_is_quarantined_too() {
        let dir = Scratch::new("manifest-via-block");
        let (store, key, _) = imported(&dir);
        flip(&store.file_of(&at(key, 0)), 40);
        let (_, v) = found(store.read_block(&at(key, 3)));
        assert_eq!(v, Verification::Unverifiable);
        assert_eq!(store.corrupt_count(), 1);
        assert!(!store.file_of(&at(key, 0)).exists());
    }

    #[test]
    fn blocks_of_a_chunk_without_a_manifest_are_served_unverified_as_before() {
        let dir = Scratch::new("bare");
        let store = FileStore::new(dir.0.join("s"), 1 << 20);
        let key = ChunkKey::from_array([9; 32]);
        // A block 0 that is not a manifest (test data), and a block with no block 0.
        store.put_blocking(&at(key, 0), b"not a manifest").unwrap();
        store.put_blocking(&at(key, 5), b"bare block").unwrap();
        let other = ChunkKey::from_array([8; 32]);
        store.put_blocking(&at(other, 1), b"lonely").unwrap();
        for p in [at(key, 0), at(key, 5), at(other, 1)] {
            let (_, v) = found(store.read_block(&p));
            assert_eq!(v, Verification::Unverifiable, "{p}");
        }
        assert_eq!(store.corrupt_count(), 0);
    }

    #[test]
    fn a_verified_file_is_hashed_once_while_its_identity_is_unchanged() {
        let dir = Scratch::new("once");
        let (store, key, _) = imported(&dir);
        let uncached = FileStore::with_cache(store.root(), 1 << 20, 0);
        for _ in 0..5 {
            found(uncached.read_block(&at(key, 1)));
        }
        // The manifest (loaded for block 1) and block 1: one hash each.
        assert_eq!(uncached.verifications(), 1);
        for _ in 0..3 {
            assert!(matches!(uncached.open_block(&at(key, 1)), Opened::File(_)));
        }
        assert_eq!(
            uncached.verifications(),
            1,
            "the zero-copy path shares the table"
        );
    }

    #[test]
    fn a_file_changed_on_disk_after_verification_is_verified_again() {
        let dir = Scratch::new("changed");
        let (store, key, _) = imported(&dir);
        let uncached = FileStore::with_cache(store.root(), 1 << 20, 0);
        found(uncached.read_block(&at(key, 2)));
        // Replaced behind the node's back (a rename gives it a new identity).
        let file = uncached.file_of(&at(key, 2));
        let mut rotten = std::fs::read(&file).unwrap();
        rotten[0] ^= 0x80;
        let tmp = file.with_file_name(".swap");
        std::fs::write(&tmp, &rotten).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        assert_eq!(uncached.read_block(&at(key, 2)), StoreRead::Corrupt);
    }

    #[test]
    fn a_hand_repair_of_a_quarantined_block_is_verified_and_served() {
        let dir = Scratch::new("repair");
        let (store, key, data) = imported(&dir);
        let file = store.file_of(&at(key, 3));
        flip(&file, 3);
        assert_eq!(store.read_block(&at(key, 3)), StoreRead::Corrupt);
        std::fs::write(&file, &data[2000..]).unwrap();
        let (b, v) = found(store.read_block(&at(key, 3)));
        assert_eq!((&b[..], v), (&data[2000..], Verification::Verified));
    }

    #[test]
    fn the_zero_copy_open_verifies_and_quarantines_too() {
        let dir = Scratch::new("open");
        let (store, key, _) = imported(&dir);
        flip(&store.file_of(&at(key, 1)), 999);
        assert!(matches!(store.open_block(&at(key, 1)), Opened::Corrupt));
        assert!(matches!(store.open_block(&at(key, 1)), Opened::Missing));
        flip(&store.file_of(&at(key, 0)), 0);
        // A manifest whose magic rotted no longer looks like one: unverifiable, served.
        assert!(matches!(store.open_block(&at(key, 0)), Opened::File(_)));
        flip(&store.file_of(&at(key, 0)), 0);
        flip(&store.file_of(&at(key, 0)), 30);
        assert!(matches!(store.open_block(&at(key, 0)), Opened::Corrupt));
        assert_eq!(store.corrupt_count(), 2);
    }

    #[test]
    fn a_rotten_file_quarantined_by_two_concurrent_reads_is_counted_once() {
        let dir = Scratch::new("twice");
        let (store, key, _) = imported(&dir);
        let file = store.file_of(&at(key, 1));
        let id = FileId::of(&std::fs::metadata(&file).unwrap());
        // Both readers hashed the same rotten file; each quarantines it.
        store.quarantine(&at(key, 1), id);
        store.clone().quarantine(&at(key, 1), id);
        assert_eq!(store.corrupt_count(), 1);
        assert!(store.chunk_dir(&at(key, 1)).join(".1.corrupt").is_file());
    }

    #[test]
    fn a_rotten_block_never_enters_the_hot_cache() {
        let dir = Scratch::new("nocache");
        let (store, key, _) = imported(&dir);
        flip(&store.file_of(&at(key, 2)), 1);
        assert_eq!(store.read_block(&at(key, 2)), StoreRead::Corrupt);
        assert_eq!(store.cached(&at(key, 2)), None);
        assert_eq!(store.cached_bytes(), 0);
    }

    #[test]
    fn a_relay_stores_only_what_validates() {
        let dir = Scratch::new("relay");
        let (store, key, data) = imported(&dir);
        let manifest = std::fs::read(store.file_of(&at(key, 0))).unwrap();
        assert_eq!(
            store.check_relayed(&at(key, 0), &manifest),
            RelayVerdict::Store
        );
        assert_eq!(
            store.check_relayed(&at(key, 0), b"peerblock-manifest 1\nforged"),
            RelayVerdict::Reject
        );
        assert_eq!(
            store.check_relayed(&at(key, 1), &data[..1000]),
            RelayVerdict::Store
        );
        assert_eq!(
            store.check_relayed(&at(key, 1), &data[1..1001]),
            RelayVerdict::Reject
        );
        let unknown = ChunkKey::from_array([3; 32]);
        assert_eq!(
            store.check_relayed(&at(unknown, 1), b"anything"),
            RelayVerdict::ServeOnly
        );
        assert_eq!(
            store.check_relayed(&at(unknown, 0), b"anything"),
            RelayVerdict::Reject
        );
    }

    /// A store of its own (relay cache of `bound` bytes, nothing imported) and a chunk
    /// imported elsewhere: the manifest's bytes, the chunk key and the file's bytes.
    fn relay_only(dir: &Scratch, bound: u64) -> (FileStore, ChunkKey, Vec<u8>, Vec<u8>) {
        let (origin, key, data) = imported(dir);
        let manifest = std::fs::read(origin.file_of(&at(key, 0))).unwrap();
        let root = dir.0.join("relay");
        let cache = RelayCache::open(&root, bound, Default::default()).unwrap();
        let store = FileStore::with_cache(&root, 1 << 20, 0).with_relay_cache(cache);
        (store, key, manifest, data)
    }

    #[test]
    fn a_relayed_block_kept_is_served_from_the_relay_cache_and_never_imported() {
        let dir = Scratch::new("keep");
        let (store, key, manifest, data) = relay_only(&dir, 1 << 20);
        assert_eq!(store.read_block(&at(key, 1)), StoreRead::Missing);
        assert!(store.keep_relayed(&at(key, 1), &data[..1000]).unwrap());
        let (block, verification) = found(store.read_block(&at(key, 1)));
        assert_eq!(
            (&block[..], verification),
            (&data[..1000], Verification::Verified)
        );
        let Opened::File(open) = store.open_block(&at(key, 1)) else {
            panic!("the zero-copy path misses the relay cache");
        };
        assert_eq!(open.len, 1000);
        assert!(!store.file_of(&at(key, 1)).exists(), "not imported content");
        // Without a relay cache nothing is kept.
        let plain = FileStore::with_cache(dir.0.join("plain"), 1 << 20, 0);
        assert!(!plain.keep_relayed(&at(key, 0), &manifest).unwrap());
        assert_eq!(plain.read_block(&at(key, 0)), StoreRead::Missing);
    }

    #[test]
    fn a_hot_copy_of_a_relay_cached_block_counts_as_a_relay_cache_hit_and_others_do_not() {
        let dir = Scratch::new("hot-hits");
        let (origin, key, data) = imported(&dir);
        let root = dir.0.join("relay-hot");
        let cache = RelayCache::open(&root, 1 << 20, Default::default()).unwrap();
        let store = FileStore::with_cache(&root, 1 << 20, 1 << 20).with_relay_cache(cache);
        let hits = || store.relay_cache().unwrap().counters().hits.get();
        assert!(store.keep_relayed(&at(key, 1), &data[..1000]).unwrap());
        store.cache_insert(at(key, 1), &Bytes::from(data[..1000].to_vec()));
        assert_eq!(store.cached(&at(key, 1)).as_deref(), Some(&data[..1000]));
        assert_eq!(hits(), 1);
        // A hot block the relay cache does not hold (imported here, say) is no relay hit.
        let other = at(key, 2);
        store.cache_insert(other, &Bytes::from_static(b"imported"));
        assert!(store.cached(&other).is_some());
        assert_eq!(hits(), 1);
        drop(origin);
    }

    #[test]
    fn a_manifest_in_the_relay_cache_checks_the_chunks_relayed_blocks() {
        let dir = Scratch::new("relay-manifest");
        let (store, key, manifest, data) = relay_only(&dir, 1 << 20);
        assert_eq!(
            store.check_relayed(&at(key, 1), &data[..1000]),
            RelayVerdict::ServeOnly,
            "no manifest yet"
        );
        store.keep_relayed(&at(key, 0), &manifest).unwrap();
        assert_eq!(
            store.check_relayed(&at(key, 1), &data[..1000]),
            RelayVerdict::Store
        );
        assert_eq!(
            store.check_relayed(&at(key, 2), &data[..1000]),
            RelayVerdict::Reject
        );
    }

    #[test]
    fn the_verified_table_and_the_manifest_cache_keep_their_bounds() {
        let mut state = VerifyState::default();
        let meta = std::fs::metadata(std::env::temp_dir()).unwrap();
        let id = FileId::of(&meta);
        for i in 0..=MAX_VERIFIED_FILES as u64 {
            state.record(at(ChunkKey::from_array([1; 32]), i), id);
        }
        assert_eq!(state.files.len(), MAX_VERIFIED_FILES);
        assert!(
            !state.is_verified(&at(ChunkKey::from_array([1; 32]), 0), &id),
            "oldest evicted"
        );
        let m = Arc::new(Manifest {
            size: 0,
            block_size: 1,
            hashes: Vec::new(),
        });
        for i in 0..=MAX_CACHED_MANIFESTS {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&(i as u64).to_be_bytes());
            state.keep_manifest(ChunkKey::from_array(k), id, Arc::clone(&m));
        }
        assert_eq!(state.manifests.len(), MAX_CACHED_MANIFESTS);
    }

    #[test]
    fn stale_temporaries_of_dead_processes_are_removed_and_live_ones_kept() {
        let dir = Scratch::new("stale");
        let root = dir.0.join("store");
        let chunk = root.join("ab".repeat(32));
        std::fs::create_dir_all(root.join(".import-999999999-0")).unwrap();
        std::fs::write(root.join(".import-999999999-0").join("1"), b"x").unwrap();
        let mine = format!(".import-{}-0", std::process::id());
        std::fs::create_dir_all(root.join(&mine)).unwrap();
        std::fs::create_dir_all(&chunk).unwrap();
        std::fs::write(chunk.join(".3.tmp.999999999.7"), b"x").unwrap();
        std::fs::write(chunk.join(".2.corrupt"), b"x").unwrap();
        std::fs::write(chunk.join("1"), b"x").unwrap();
        let removed = remove_stale_temps(&root).unwrap();
        assert_eq!(
            removed,
            vec![
                root.join(".import-999999999-0"),
                chunk.join(".3.tmp.999999999.7")
            ]
        );
        assert!(root.join(&mine).is_dir(), "a live process's import is kept");
        assert!(chunk.join(".2.corrupt").is_file() && chunk.join("1").is_file());
    }

    #[test]
    fn temporary_names_give_their_owner_pid() {
        assert_eq!(temp_owner(".import-42-0"), Some(42));
        assert_eq!(temp_owner(".3.tmp.42.9"), Some(42));
        assert_eq!(temp_owner(".3.corrupt"), None);
        assert_eq!(temp_owner("3"), None);
        assert_eq!(temp_owner(".import-x-0"), None);
    }

    #[test]
    fn put_leaves_no_temporary_file_and_reads_back() {
        let dir = Scratch::new("put");
        let store = FileStore::new(dir.0.join("s"), 1 << 20);
        let p = at(ChunkKey::from_array([4; 32]), 1);
        store.put_blocking(&p, b"abc").unwrap();
        let names: Vec<_> = std::fs::read_dir(store.chunk_dir(&p))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["1"]);
    }
}
