//! The relay cache: blocks a node fetched on a requester's behalf (a relayed miss), kept
//! on disk under a byte bound and evicted least recently used first. It is separate from
//! imported content, which is never evicted.
//!
//! # Layout
//!
//! ```text
//! <store>/.relay-cache/<chunk-hex>/<index>.<blake3-hex>
//! ```
//!
//! The store's own files (`<store>/<chunk-hex>/<index>`) are imported content; the cache
//! lives in a dot-directory beside them, which `check`, imports and the stale-file sweep
//! never treat as a chunk. Each file's name carries the BLAKE3 hash of its content,
//! computed when the block was inserted, so every cached block can be checked, after a
//! restart too: a block is hashed the first time its file is read or opened (and again
//! whenever the file's identity changes), and a file that fails is deleted and counted
//! ([`CacheCounters::corrupt`]): the request becomes a miss (the relay fetches the block
//! again), never a wrong block.
//!
//! What is inserted was validated by the relay before
//! ([`FileStore::check_relayed`](crate::store::FileStore::check_relayed)): the cache
//! guards against rot, not against a wrong block fetched upstream.
//!
//! # Bound and eviction
//!
//! [`RelayCache::open`] scans the directory (files sorted by modification time, oldest
//! first, so a restart keeps the recency order roughly), removes leftovers (temporary
//! files, names that do not parse) and evicts down to the bound. Each insert evicts the
//! least recently used blocks (a hit or an insert makes a block the most recent) until
//! the cache is within `max_bytes` again. A block larger than the bound is not cached.
//! Writes are a temporary file and a rename, without `fsync`: a block lost in a crash is
//! fetched again, a torn one fails its hash.
//!
//! All calls are blocking file I/O on the calling thread, like the rest of the store.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use peerblock_core::bytes::Bytes;
use peerblock_core::wire::{BlockPath, ChunkKey};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use crate::store::FileId;

/// The cache's directory name inside the store's root.
pub const RELAY_CACHE_DIR: &str = ".relay-cache";

/// Default bound on the relay cache: 1 GiB of blocks on disk (`[store] cache_bytes`).
pub const DEFAULT_RELAY_CACHE_BYTES: u64 = 1024 * 1024 * 1024;

/// The cache's counters; clones share them, so a node registers the same counters in its
/// metrics (`peerblock_relay_cache_*`).
#[derive(Clone, Debug, Default)]
pub struct CacheCounters {
    /// Requests answered from the cache (from its file, or from the store's hot in-memory
    /// copy of a block the cache holds).
    pub hits: Counter,
    /// Blocks written into the cache.
    pub inserts: Counter,
    /// Blocks evicted to keep the bound.
    pub evictions: Counter,
    /// Cached files that failed their hash and were deleted.
    pub corrupt: Counter,
    /// Bytes of blocks in the cache now.
    pub bytes: Gauge,
}

/// One cached block.
#[derive(Clone, Copy, Debug)]
struct Entry {
    len: u64,
    hash: blake3::Hash,
    /// Recency: larger is more recent; the key of this entry in `State::order`.
    tick: u64,
    /// The identity of the file last verified, so a page-cached block is hashed once.
    verified: Option<FileId>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<BlockPath, Entry>,
    order: BTreeMap<u64, BlockPath>,
    bytes: u64,
    tick: u64,
}

impl State {
    fn touch(&mut self, path: &BlockPath) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.entries.get_mut(path) {
            self.order.remove(&e.tick);
            e.tick = tick;
            self.order.insert(tick, *path);
        }
    }

    fn remove(&mut self, path: &BlockPath) -> Option<Entry> {
        let e = self.entries.remove(path)?;
        self.order.remove(&e.tick);
        self.bytes -= e.len;
        Some(e)
    }

    fn add(&mut self, path: BlockPath, len: u64, hash: blake3::Hash) {
        self.tick += 1;
        let tick = self.tick;
        self.entries.insert(
            path,
            Entry {
                len,
                hash,
                tick,
                verified: None,
            },
        );
        self.order.insert(tick, path);
        self.bytes += len;
    }
}

/// A block read from the cache ([`RelayCache::get`]).
#[derive(Debug)]
pub enum CacheRead {
    /// The block, its hash checked.
    Found(Bytes),
    /// Not cached (or its file was rotten and is gone now).
    Missing,
}

/// The relay cache (module docs). Share it behind an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct RelayCache {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
    counters: CacheCounters,
}

/// Makes temporary file names unique within the process.
static TEMP: AtomicU64 = AtomicU64::new(0);

fn file_name(path: &BlockPath, hash: &blake3::Hash) -> String {
    format!("{}.{}", path.index, hash.to_hex())
}

/// `<index>.<hash>` back into its parts.
fn parse_name(name: &str) -> Option<(u64, blake3::Hash)> {
    let (index, hash) = name.split_once('.')?;
    if index.is_empty() || (index.len() > 1 && index.starts_with('0')) {
        return None;
    }
    let index = index.parse().ok()?;
    let hash = blake3::Hash::from_hex(hash).ok()?;
    Some((index, hash))
}

impl RelayCache {
    /// Opens (creating it if needed) the cache in `<root>/.relay-cache` with a bound of
    /// `max_bytes`, counting in `counters`: scans what an earlier run left (module docs),
    /// removes leftovers and evicts down to the bound.
    pub fn open(root: &Path, max_bytes: u64, counters: CacheCounters) -> io::Result<RelayCache> {
        let dir = root.join(RELAY_CACHE_DIR);
        std::fs::create_dir_all(&dir)?;
        let cache = RelayCache {
            dir,
            max_bytes,
            state: Mutex::new(State::default()),
            counters,
        };
        cache.scan()?;
        Ok(cache)
    }

    fn scan(&self) -> io::Result<()> {
        let mut found: Vec<(std::time::SystemTime, BlockPath, u64, blake3::Hash)> = Vec::new();
        for chunk in std::fs::read_dir(&self.dir)? {
            let chunk = chunk?;
            let name = chunk.file_name();
            let key = name
                .to_str()
                .and_then(|n| ChunkKey::parse_hex(n.as_bytes()).ok());
            let Some(key) = key.filter(|_| chunk.file_type().is_ok_and(|t| t.is_dir())) else {
                remove_any(&chunk.path());
                continue;
            };
            for block in std::fs::read_dir(chunk.path())? {
                let block = block?;
                let meta = block.metadata()?;
                let parsed = block.file_name().to_str().and_then(parse_name);
                match parsed {
                    Some((index, hash)) if meta.is_file() => {
                        let path = BlockPath { key, index };
                        let when = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                        found.push((when, path, meta.len(), hash));
                    }
                    _ => remove_any(&block.path()),
                }
            }
        }
        found.sort_by_key(|(when, ..)| *when);
        let mut state = self.lock();
        for (_, path, len, hash) in found {
            if let Some(old) = state.remove(&path) {
                // Two copies of one block (a crash between a rename and a removal): the
                // older one goes.
                let _ = std::fs::remove_file(self.file_of(&path, &old.hash));
            }
            state.add(path, len, hash);
        }
        self.evict(&mut state, None);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn chunk_dir(&self, key: &ChunkKey) -> PathBuf {
        self.dir.join(key.to_string())
    }

    fn file_of(&self, path: &BlockPath, hash: &blake3::Hash) -> PathBuf {
        self.chunk_dir(&path.key).join(file_name(path, hash))
    }

    /// Evicts least recently used blocks (never `keep`) until within the bound.
    fn evict(&self, state: &mut State, keep: Option<&BlockPath>) {
        while state.bytes > self.max_bytes {
            let victim = state.order.values().find(|p| Some(*p) != keep).copied();
            let Some(victim) = victim else { break };
            if let Some(e) = state.remove(&victim) {
                let _ = std::fs::remove_file(self.file_of(&victim, &e.hash));
                self.counters.evictions.inc();
            }
        }
        self.counters.bytes.set(state.bytes as i64);
    }

    /// The cache's bound in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Bytes of blocks cached now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Blocks cached now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether block `path` is cached (without touching its recency).
    pub fn contains(&self, path: &BlockPath) -> bool {
        self.lock().entries.contains_key(path)
    }

    /// The cache's counters.
    pub fn counters(&self) -> &CacheCounters {
        &self.counters
    }

    /// Keeps `bytes` as block `path` (already validated by the caller), making it the
    /// most recent block and evicting least recently used ones over the bound. `false` if
    /// it was not kept: larger than the whole bound. An I/O error leaves the cache as it
    /// was.
    pub fn insert(&self, path: &BlockPath, bytes: &[u8]) -> io::Result<bool> {
        let len = bytes.len() as u64;
        if len > self.max_bytes {
            return Ok(false);
        }
        let hash = blake3::hash(bytes);
        {
            let mut state = self.lock();
            if state.entries.get(path).is_some_and(|e| e.hash == hash) {
                state.touch(path);
                return Ok(true);
            }
        }
        let dir = self.chunk_dir(&path.key);
        std::fs::create_dir_all(&dir)?;
        let temp = dir.join(format!(
            ".tmp.{}.{}",
            std::process::id(),
            TEMP.fetch_add(1, Ordering::Relaxed)
        ));
        let target = self.file_of(path, &hash);
        let written = (|| {
            let mut f = File::create(&temp)?;
            f.write_all(bytes)?;
            std::fs::rename(&temp, &target)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        let mut state = self.lock();
        if let Some(old) = state.remove(path) {
            if old.hash != hash {
                let _ = std::fs::remove_file(self.file_of(path, &old.hash));
            }
        }
        state.add(*path, len, hash);
        self.counters.inserts.inc();
        self.evict(&mut state, Some(path));
        Ok(true)
    }

    /// Reads block `path` (at most its recorded length), checking its hash the first time
    /// this file is read; a hit makes it the most recent block. A rotten or vanished file
    /// is forgotten (and deleted, counted) and answered [`CacheRead::Missing`].
    pub fn get(&self, path: &BlockPath) -> CacheRead {
        let Some(entry) = self.lock().entries.get(path).copied() else {
            return CacheRead::Missing;
        };
        let file = self.file_of(path, &entry.hash);
        let read = (|| -> io::Result<(Vec<u8>, FileId)> {
            let f = File::open(&file)?;
            let meta = f.metadata()?;
            let mut buf = Vec::with_capacity(entry.len as usize);
            f.take(entry.len + 1).read_to_end(&mut buf)?;
            Ok((buf, FileId::of(&meta)))
        })();
        match read {
            Ok((buf, id)) => {
                let sound = buf.len() as u64 == entry.len
                    && (entry.verified == Some(id) || blake3::hash(&buf) == entry.hash);
                if !sound {
                    self.drop_rotten(path, &entry);
                    return CacheRead::Missing;
                }
                self.verified(path, &entry, id);
                CacheRead::Found(Bytes::from(buf))
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(file = %file.display(), error = %e, "reading a relay-cached block failed");
                }
                self.forget(path, &entry);
                CacheRead::Missing
            }
        }
    }

    /// Opens block `path`'s file for a zero-copy send: the file (positioned at its start)
    /// and its length, hashed with positioned reads the first time this file is opened.
    /// `None` if not cached, rotten (deleted, counted) or unreadable.
    pub fn open_block(&self, path: &BlockPath) -> Option<(File, u64)> {
        let entry = self.lock().entries.get(path).copied()?;
        let file = self.file_of(path, &entry.hash);
        let opened = File::open(&file).and_then(|f| {
            let meta = f.metadata()?;
            Ok((FileId::of(&meta), meta.len(), f))
        });
        let (id, len, f) = match opened {
            Ok(o) => o,
            Err(_) => {
                self.forget(path, &entry);
                return None;
            }
        };
        let sound = len == entry.len
            && (entry.verified == Some(id)
                || crate::store::hash_file(&f, len).ok().flatten() == Some(entry.hash));
        if !sound {
            self.drop_rotten(path, &entry);
            return None;
        }
        self.verified(path, &entry, id);
        Some((f, len))
    }

    fn verified(&self, path: &BlockPath, entry: &Entry, id: FileId) {
        let mut state = self.lock();
        if let Some(e) = state.entries.get_mut(path) {
            if e.hash == entry.hash {
                e.verified = Some(id);
            }
        }
        state.touch(path);
        drop(state);
        self.counters.hits.inc();
    }

    /// Forgets `path` if it is still `entry` (another thread may have replaced it).
    fn forget(&self, path: &BlockPath, entry: &Entry) -> bool {
        let mut state = self.lock();
        if state
            .entries
            .get(path)
            .is_some_and(|e| e.hash == entry.hash)
        {
            state.remove(path);
            self.counters.bytes.set(state.bytes as i64);
            true
        } else {
            false
        }
    }

    fn drop_rotten(&self, path: &BlockPath, entry: &Entry) {
        if self.forget(path, entry) {
            let file = self.file_of(path, &entry.hash);
            tracing::warn!(file = %file.display(), "a relay-cached block failed its hash: deleted (it will be fetched again)");
            let _ = std::fs::remove_file(&file);
            self.counters.corrupt.inc();
        }
    }
}

fn remove_any(path: &Path) {
    let gone = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    if let Err(e) = gone {
        tracing::warn!(path = %path.display(), error = %e, "removing a leftover in the relay cache failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "peerblock-relay-cache-{tag}-{}-{}",
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

    fn at(index: u64) -> BlockPath {
        BlockPath {
            key: ChunkKey::from_array([7; 32]),
            index,
        }
    }

    fn block(index: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u64 * 31 + index) as u8).collect()
    }

    fn found(r: CacheRead) -> Vec<u8> {
        match r {
            CacheRead::Found(b) => b.to_vec(),
            CacheRead::Missing => panic!("expected a cached block"),
        }
    }

    #[test]
    fn an_inserted_block_reads_back_and_counts_a_hit() {
        let dir = Scratch::new("roundtrip");
        let cache = RelayCache::open(&dir.0, 10_000, CacheCounters::default()).unwrap();
        assert!(matches!(cache.get(&at(1)), CacheRead::Missing));
        assert!(cache.insert(&at(1), &block(1, 1000)).unwrap());
        assert_eq!(found(cache.get(&at(1))), block(1, 1000));
        assert_eq!(cache.counters().hits.get(), 1);
        assert_eq!(cache.counters().inserts.get(), 1);
        assert_eq!(cache.bytes(), 1000);
        assert_eq!(cache.counters().bytes.get(), 1000);
    }

    #[test]
    fn the_cache_keeps_its_byte_bound_evicting_the_least_recently_used() {
        let dir = Scratch::new("lru");
        let cache = RelayCache::open(&dir.0, 3000, CacheCounters::default()).unwrap();
        for i in 1..=3 {
            cache.insert(&at(i), &block(i, 1000)).unwrap();
        }
        // Block 1 is used again: block 2 is now the least recently used.
        found(cache.get(&at(1)));
        cache.insert(&at(4), &block(4, 1000)).unwrap();
        assert!(cache.bytes() <= 3000);
        assert!(cache.contains(&at(1)), "recently used: kept");
        assert!(!cache.contains(&at(2)), "least recently used: evicted");
        assert!(cache.contains(&at(3)) && cache.contains(&at(4)));
        assert_eq!(cache.counters().evictions.get(), 1);
        // The evicted block's file is gone from disk.
        let files = std::fs::read_dir(dir.0.join(RELAY_CACHE_DIR).join(at(2).key.to_string()))
            .unwrap()
            .count();
        assert_eq!(files, 3);
    }

    #[test]
    fn a_block_larger_than_the_bound_is_not_cached_and_zero_caches_nothing() {
        let dir = Scratch::new("big");
        let cache = RelayCache::open(&dir.0, 1000, CacheCounters::default()).unwrap();
        assert!(!cache.insert(&at(1), &block(1, 1001)).unwrap());
        assert!(cache.insert(&at(2), &block(2, 1000)).unwrap());
        assert_eq!(cache.len(), 1);
        let off = RelayCache::open(&dir.0.join("off"), 0, CacheCounters::default()).unwrap();
        assert!(!off.insert(&at(1), &block(1, 1)).unwrap());
        assert!(off.is_empty());
    }

    #[test]
    fn a_rotten_cached_file_is_deleted_counted_and_read_as_a_miss() {
        let dir = Scratch::new("rot");
        let cache = RelayCache::open(&dir.0, 10_000, CacheCounters::default()).unwrap();
        cache.insert(&at(1), &block(1, 1000)).unwrap();
        let file = cache.file_of(&at(1), &blake3::hash(&block(1, 1000)));
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[500] ^= 1;
        std::fs::write(&file, bytes).unwrap();
        assert!(matches!(cache.get(&at(1)), CacheRead::Missing));
        assert!(!file.exists(), "the rotten file is deleted");
        assert_eq!(cache.counters().corrupt.get(), 1);
        assert_eq!(cache.bytes(), 0);
        // The zero-copy path checks too.
        cache.insert(&at(2), &block(2, 1000)).unwrap();
        let file = cache.file_of(&at(2), &blake3::hash(&block(2, 1000)));
        std::fs::write(&file, block(3, 1000)).unwrap();
        assert!(cache.open_block(&at(2)).is_none());
        assert_eq!(cache.counters().corrupt.get(), 2);
    }

    #[test]
    fn a_sound_file_is_hashed_once_and_opened_for_zero_copy() {
        let dir = Scratch::new("open");
        let cache = RelayCache::open(&dir.0, 10_000, CacheCounters::default()).unwrap();
        cache.insert(&at(1), &block(1, 1000)).unwrap();
        let (mut f, len) = cache.open_block(&at(1)).expect("cached");
        assert_eq!(len, 1000);
        let mut back = Vec::new();
        f.read_to_end(&mut back).unwrap();
        assert_eq!(back, block(1, 1000));
        assert!(cache.lock().entries[&at(1)].verified.is_some());
    }

    #[test]
    fn a_restart_finds_the_cached_blocks_and_removes_leftovers() {
        let dir = Scratch::new("restart");
        {
            let cache = RelayCache::open(&dir.0, 10_000, CacheCounters::default()).unwrap();
            cache.insert(&at(1), &block(1, 1000)).unwrap();
            cache.insert(&at(2), &block(2, 500)).unwrap();
        }
        let chunk = dir.0.join(RELAY_CACHE_DIR).join(at(1).key.to_string());
        std::fs::write(chunk.join(".tmp.1.2"), b"torn").unwrap();
        std::fs::write(chunk.join("junk"), b"?").unwrap();
        std::fs::write(dir.0.join(RELAY_CACHE_DIR).join("not-a-chunk"), b"?").unwrap();
        let cache = RelayCache::open(&dir.0, 10_000, CacheCounters::default()).unwrap();
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.bytes(), 1500);
        assert_eq!(found(cache.get(&at(2))), block(2, 500));
        assert!(!chunk.join(".tmp.1.2").exists() && !chunk.join("junk").exists());
        assert!(!dir.0.join(RELAY_CACHE_DIR).join("not-a-chunk").exists());
    }

    #[test]
    fn a_restart_with_a_smaller_bound_evicts_down_to_it() {
        let dir = Scratch::new("shrink");
        {
            let cache = RelayCache::open(&dir.0, 10_000, CacheCounters::default()).unwrap();
            for i in 1..=4 {
                cache.insert(&at(i), &block(i, 1000)).unwrap();
            }
        }
        let cache = RelayCache::open(&dir.0, 2000, CacheCounters::default()).unwrap();
        assert_eq!(cache.bytes(), 2000);
        assert_eq!(cache.counters().evictions.get(), 2);
    }

    #[test]
    fn reinserting_a_changed_block_replaces_its_file() {
        let dir = Scratch::new("replace");
        let cache = RelayCache::open(&dir.0, 10_000, CacheCounters::default()).unwrap();
        cache.insert(&at(1), &block(1, 1000)).unwrap();
        cache.insert(&at(1), &block(9, 800)).unwrap();
        assert_eq!(cache.bytes(), 800);
        assert_eq!(found(cache.get(&at(1))), block(9, 800));
        let files = std::fs::read_dir(dir.0.join(RELAY_CACHE_DIR).join(at(1).key.to_string()))
            .unwrap()
            .count();
        assert_eq!(files, 1);
    }

    #[test]
    fn names_parse_only_in_canonical_form() {
        let h = blake3::hash(b"x");
        assert_eq!(parse_name(&file_name(&at(12), &h)), Some((12, h)));
        assert_eq!(parse_name(&format!("012.{}", h.to_hex())), None);
        assert_eq!(parse_name(&format!(".{}", h.to_hex())), None);
        assert_eq!(parse_name("3.nothex"), None);
        assert_eq!(parse_name("3"), None);
    }
}
