//! Verification before serving (module docs, "Holders check what they hold"): file
//! identities, what a [`FileStore`] remembers having verified, the checks, and quarantine.

use std::collections::{HashMap, VecDeque};
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use peerblock_core::wire::{BlockPath, ChunkKey};

use crate::manifest::{verify_manifest, Manifest, MAX_MANIFEST_BYTES};
use crate::relay_cache::CacheRead;

use super::{FileStore, RelayVerdict};

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

/// The bytes a verification looks at: already read (the buffered path) or still in the
/// open file (the zero-copy path: hashed with positioned reads, the file's offset kept).
pub(super) enum Content<'a> {
    Bytes(&'a [u8]),
    File(&'a File, u64),
}

/// The outcome of one verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Check {
    Verified,
    Unverifiable,
    Corrupt,
}

/// Which block files were verified (by identity) and the parsed manifests, each bounded
/// and evicted oldest first.
#[derive(Debug, Default)]
pub(super) struct VerifyState {
    pub(super) files: HashMap<BlockPath, FileId>,
    order: VecDeque<BlockPath>,
    pub(super) manifests: HashMap<ChunkKey, (FileId, Arc<Manifest>)>,
    manifest_order: VecDeque<ChunkKey>,
}

impl VerifyState {
    pub(super) fn is_verified(&self, path: &BlockPath, id: &FileId) -> bool {
        self.files.get(path) == Some(id)
    }

    pub(super) fn record(&mut self, path: BlockPath, id: FileId) {
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

    pub(super) fn keep_manifest(&mut self, key: ChunkKey, id: FileId, manifest: Arc<Manifest>) {
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

impl FileStore {
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
    pub(super) fn check(&self, path: &BlockPath, id: FileId, content: Content<'_>) -> Check {
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
    pub(super) fn quarantine(&self, path: &BlockPath, id: FileId) {
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
}
