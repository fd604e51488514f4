//! Content addressing: import writes the documented layout, the chunk key is the
//! manifest's BLAKE3 hash, blocks reassemble byte-exact and validate, and malformed
//! manifests are refused saying what was wrong.

use std::fs;
use std::path::{Path, PathBuf};

use peerblock_core::wire::ChunkKey;
use peerblock_tokio::manifest::{
    block_key, import, verify_manifest, ImportError, Manifest, ManifestError, MAX_BLOCK_SIZE,
};

/// A fresh scratch directory under the target dir, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "peerblock-manifest-test-{}-{name}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Deterministic, non-repeating test content.
fn content(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut x: u32 = 0x9e37_79b9;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, bytes).unwrap();
    p
}

fn chunk_dir(store: &Path, chunk: &ChunkKey) -> PathBuf {
    store.join(chunk.to_string())
}

#[test]
fn import_writes_the_manifest_at_index_0_and_the_chunk_key_is_its_blake3_hash() {
    let s = Scratch::new("key");
    let file = write(&s.0, "f", &content(10_000));
    let store = s.0.join("store");
    let report = import(&file, &store, 4096).unwrap();
    let dir = chunk_dir(&store, &report.chunk);
    let manifest_bytes = fs::read(dir.join("0")).unwrap();
    assert_eq!(
        report.chunk.as_bytes(),
        blake3::hash(&manifest_bytes).as_bytes()
    );
    assert!(verify_manifest(&report.chunk, &manifest_bytes));
    let hex = report.chunk.to_string();
    assert_eq!(hex.len(), 64);
    assert_eq!(hex, hex.to_lowercase());
    let m = Manifest::parse(&manifest_bytes).unwrap();
    assert_eq!((m.size, m.block_size, m.blocks()), (10_000, 4096, 3));
    assert_eq!((report.blocks, report.bytes), (3, 10_000));
}

#[test]
fn blocks_reassemble_byte_exact_with_a_short_last_block() {
    let s = Scratch::new("reassemble");
    let data = content(10_000);
    let file = write(&s.0, "f", &data);
    let store = s.0.join("store");
    let report = import(&file, &store, 4096).unwrap();
    let dir = chunk_dir(&store, &report.chunk);
    let m = Manifest::parse(&fs::read(dir.join("0")).unwrap()).unwrap();
    let mut joined = Vec::new();
    for i in 1..=m.blocks() {
        let block = fs::read(dir.join(i.to_string())).unwrap();
        assert!(m.verify_block(i, &block), "block {i}");
        joined.extend_from_slice(&block);
    }
    assert_eq!(fs::read(dir.join("3")).unwrap().len(), 10_000 - 2 * 4096);
    assert_eq!(m.block_len(3), Some(10_000 - 2 * 4096));
    assert!(!dir.join("4").exists());
    assert_eq!(joined, data);
    // Nothing but the chunk directory is left in the store (the temporary one is gone).
    let entries: Vec<_> = fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        entries,
        vec![std::ffi::OsString::from(report.chunk.to_string())]
    );
}

#[test]
fn a_file_of_whole_blocks_has_no_short_block() {
    let s = Scratch::new("whole");
    let file = write(&s.0, "f", &content(8192));
    let report = import(&file, &s.0.join("store"), 4096).unwrap();
    assert_eq!(report.blocks, 2);
}

#[test]
fn an_empty_file_imports_as_zero_blocks() {
    let s = Scratch::new("empty");
    let file = write(&s.0, "f", b"");
    let store = s.0.join("store");
    let report = import(&file, &store, 4096).unwrap();
    assert_eq!((report.blocks, report.bytes), (0, 0));
    let bytes = fs::read(chunk_dir(&store, &report.chunk).join("0")).unwrap();
    assert_eq!(
        bytes,
        b"peerblock-manifest 1\nsize 0\nblock-size 4096\nblocks 0\n".to_vec()
    );
    assert_eq!(Manifest::parse(&bytes).unwrap().blocks(), 0);
}

#[test]
fn importing_the_same_file_twice_gives_the_same_key_and_keeps_the_chunk() {
    let s = Scratch::new("twice");
    let file = write(&s.0, "f", &content(5000));
    let store = s.0.join("store");
    let a = import(&file, &store, 1000).unwrap();
    let b = import(&file, &store, 1000).unwrap();
    assert_eq!(a.chunk, b.chunk);
    assert!(!a.already_present && b.already_present);
    assert_eq!(fs::read_dir(&store).unwrap().count(), 1);
}

#[test]
fn the_block_size_is_part_of_the_key() {
    let s = Scratch::new("bs");
    let file = write(&s.0, "f", &content(5000));
    let a = import(&file, &s.0.join("a"), 1000).unwrap();
    let b = import(&file, &s.0.join("b"), 2000).unwrap();
    assert_ne!(a.chunk, b.chunk);
}

#[test]
fn a_corrupted_block_fails_verification() {
    let s = Scratch::new("corrupt");
    let file = write(&s.0, "f", &content(10_000));
    let store = s.0.join("store");
    let report = import(&file, &store, 4096).unwrap();
    let dir = chunk_dir(&store, &report.chunk);
    let m = Manifest::parse(&fs::read(dir.join("0")).unwrap()).unwrap();
    let mut block = fs::read(dir.join("2")).unwrap();
    assert!(m.verify_block(2, &block));
    block[100] ^= 1;
    assert!(!m.verify_block(2, &block), "a flipped bit");
    let good = fs::read(dir.join("2")).unwrap();
    assert!(
        !m.verify_block(1, &good),
        "the right bytes under the wrong index"
    );
    assert!(!m.verify_block(2, &good[..4000]), "a truncated block");
    assert!(
        !m.verify_block(0, &good) && !m.verify_block(4, &good),
        "no such block"
    );
}

#[test]
fn a_changed_manifest_fails_against_its_key() {
    let m = Manifest {
        size: 3,
        block_size: 4,
        hashes: vec![*blake3::hash(b"abc").as_bytes()],
    };
    let key = m.chunk_key();
    let mut bytes = m.to_bytes();
    assert!(verify_manifest(&key, &bytes));
    bytes[25] ^= 1;
    assert!(!verify_manifest(&key, &bytes));
}

#[test]
fn to_bytes_and_parse_round_trip() {
    let m = Manifest {
        size: 9,
        block_size: 4,
        hashes: vec![[1; 32], [2; 32], [0xab; 32]],
    };
    assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m);
}

fn parse_err(text: &str) -> String {
    match Manifest::parse(text.as_bytes()) {
        Ok(m) => panic!("accepted {text:?}: {m:?}"),
        Err(e) => e.to_string(),
    }
}

const H: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[test]
fn a_manifest_with_a_wrong_header_is_refused_naming_the_line() {
    let msg = parse_err("peerblock-manifest 2\nsize 0\nblock-size 1\nblocks 0\n");
    assert!(
        msg.contains("line 1") && msg.contains("peerblock-manifest 1"),
        "{msg}"
    );
}

#[test]
fn a_manifest_with_a_bad_number_is_refused_naming_the_field() {
    let msg = parse_err("peerblock-manifest 1\nsize 01\nblock-size 1\nblocks 1\n");
    assert!(msg.contains("line 2") && msg.contains("`size`"), "{msg}");
    let msg = parse_err("peerblock-manifest 1\nsize 1\nblocksize 1\nblocks 1\n");
    assert!(
        msg.contains("line 3") && msg.contains("block-size"),
        "{msg}"
    );
}

#[test]
fn a_manifest_whose_block_count_disagrees_with_its_size_is_refused() {
    let msg = parse_err(&format!(
        "peerblock-manifest 1\nsize 5\nblock-size 4\nblocks 1\n{H}\n"
    ));
    assert!(msg.contains("makes 2 blocks"), "{msg}");
}

#[test]
fn a_manifest_missing_hashes_is_refused() {
    let msg = parse_err(&format!(
        "peerblock-manifest 1\nsize 5\nblock-size 4\nblocks 2\n{H}\n"
    ));
    assert!(msg.contains("announces 2 blocks but lists 1"), "{msg}");
}

#[test]
fn a_manifest_with_extra_lines_is_refused() {
    let msg = parse_err(&format!(
        "peerblock-manifest 1\nsize 4\nblock-size 4\nblocks 1\n{H}\n{H}\n"
    ));
    assert!(
        msg.contains("line 6") && msg.contains("more than the 1"),
        "{msg}"
    );
}

#[test]
fn a_manifest_with_an_upper_case_or_short_hash_is_refused() {
    let upper = H.replace('0', "A");
    let msg = parse_err(&format!(
        "peerblock-manifest 1\nsize 4\nblock-size 4\nblocks 1\n{upper}\n"
    ));
    assert!(
        msg.contains("line 5") && msg.contains("lower-case hex"),
        "{msg}"
    );
    let msg = parse_err(&format!(
        "peerblock-manifest 1\nsize 4\nblock-size 4\nblocks 1\n{}\n",
        &H[..63]
    ));
    assert!(msg.contains("line 5"), "{msg}");
}

#[test]
fn a_manifest_without_a_final_newline_is_refused() {
    let msg = parse_err("peerblock-manifest 1\nsize 0\nblock-size 1\nblocks 0");
    assert!(msg.contains("newline"), "{msg}");
}

#[test]
fn a_manifest_with_a_block_size_out_of_range_is_refused() {
    let msg = parse_err("peerblock-manifest 1\nsize 0\nblock-size 0\nblocks 0\n");
    assert!(msg.contains("block size is zero"), "{msg}");
    let msg = parse_err(&format!(
        "peerblock-manifest 1\nsize 0\nblock-size {}\nblocks 0\n",
        MAX_BLOCK_SIZE + 1
    ));
    assert!(msg.contains("above the maximum"), "{msg}");
}

#[test]
fn an_oversized_manifest_is_refused_before_parsing() {
    let big = vec![b'a'; peerblock_tokio::manifest::MAX_MANIFEST_BYTES + 1];
    assert!(matches!(
        Manifest::parse(&big),
        Err(ManifestError::TooLarge(_))
    ));
}

#[test]
fn import_refuses_a_block_size_out_of_range() {
    let s = Scratch::new("range");
    let file = write(&s.0, "f", b"abc");
    assert!(matches!(
        import(&file, &s.0.join("st"), 0),
        Err(ImportError::BlockSize(_))
    ));
    assert!(matches!(
        import(&file, &s.0.join("st"), MAX_BLOCK_SIZE + 1),
        Err(ImportError::BlockSize(_))
    ));
    assert!(
        !s.0.join("st").exists(),
        "nothing is created for a refused import"
    );
}

#[test]
fn block_keys_differ_by_index_and_chunk_and_follow_the_documented_formula() {
    let a = ChunkKey::from_array([7; 32]);
    let b = ChunkKey::from_array([8; 32]);
    assert_ne!(block_key(&a, 1), block_key(&a, 2));
    assert_ne!(block_key(&a, 1), block_key(&b, 1));
    let mut h = blake3::Hasher::new();
    h.update(b"peerblock-block-key-v1\0");
    h.update(&[32]);
    h.update(&[7; 32]);
    h.update(&1u64.to_be_bytes());
    assert_eq!(block_key(&a, 1).0, *h.finalize().as_bytes());
}
