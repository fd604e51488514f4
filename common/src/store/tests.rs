//! Tests of the file store: verification and quarantine, the hot and relay caches, writes
//! and stale temporaries.

use super::*;
use crate::manifest::{import, Manifest};
use peerblock_core::wire::ChunkKey;

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
