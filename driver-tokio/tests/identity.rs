//! The node key file and record sequence number (docs/security.md, key management).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::procs::TempDir;
use peerblock_tokio::identity::{load_or_create_key, next_seq, seq_path};

#[test]
fn a_key_is_created_owner_only_once_and_reused() {
    let dir = TempDir::new("key-create");
    let path = dir.join("node.key");
    let (key, created) = load_or_create_key(&path).unwrap();
    assert!(created);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let (again, created) = load_or_create_key(&path).unwrap();
    assert!(!created);
    assert_eq!(again.id(), key.id(), "the same identity across restarts");
    assert_eq!(key.id().len(), 64);
}

#[test]
fn a_key_file_readable_by_others_is_refused() {
    let dir = TempDir::new("key-perm");
    let path = dir.join("node.key");
    load_or_create_key(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = load_or_create_key(&path).unwrap_err().to_string();
    assert!(e.contains("readable by others"), "{e}");
}

#[test]
fn a_key_file_that_is_not_a_key_is_refused() {
    let dir = TempDir::new("key-bad");
    let path = dir.join("node.key");
    std::fs::write(&path, "not hex\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = load_or_create_key(&path).unwrap_err().to_string();
    assert!(e.contains("64 hex digits"), "{e}");
}

#[test]
fn every_start_signs_a_higher_sequence_number() {
    let dir = TempDir::new("key-seq");
    let path = dir.join("node.key");
    let a = next_seq(&path).unwrap();
    let b = next_seq(&path).unwrap();
    assert!(b > a);
    // Even if the sequence file is lost, the clock keeps it above 0 (seconds since 1970).
    std::fs::remove_file(seq_path(&path)).unwrap();
    assert!(next_seq(&path).unwrap() > 1_700_000_000);
}
