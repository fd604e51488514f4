//! The node key file and record sequence number (docs/security.md, key management).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::procs::TempDir;
use peerblock_node::identity::{load_or_create_key, next_seq, seq_path};

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

/// Runs `peerblock-node key ARGS` and returns (exit code, stdout, stderr).
fn key_cmd(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(common::procs::BIN)
        .arg("key")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The quoted value of `name = "..."` in `text`.
fn value<'a>(text: &'a str, name: &str) -> &'a str {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name} = ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"));
    line.split('"').nth(1).unwrap()
}

#[test]
fn key_new_creates_an_owner_only_key_once_and_key_show_prints_the_same_identity() {
    let dir = TempDir::new("key-cli");
    let path = dir.join("authority.key");
    let p = path.to_str().unwrap();
    let (code, new, err) = key_cmd(&["new", p]);
    assert_eq!(code, 0, "{err}");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(value(&new, "public_key").len(), 64);
    assert_eq!(value(&new, "id").len(), 64);
    let (code, show, err) = key_cmd(&["show", p]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(show, new);
    // Never over an existing key: the file and its key stay as they were.
    let (code, _, err) = key_cmd(&["new", p]);
    assert_eq!(code, 1);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(key_cmd(&["show", p]).1, new);
}

#[test]
fn key_sign_epoch_prints_config_lines_that_a_node_with_the_authority_key_accepts() {
    let dir = TempDir::new("key-epoch");
    let path = dir.join("authority.key");
    let p = path.to_str().unwrap();
    let (_, new, _) = key_cmd(&["new", p]);
    let (code, lines, err) = key_cmd(&["sign-epoch", "--key", p, "42"]);
    assert_eq!(code, 0, "{err}");
    assert!(lines.contains("\nepoch = 42\n"), "{lines}");
    let toml = format!(
        "[roster]\nauthority_key = \"{}\"\n{lines}",
        value(&new, "public_key")
    );
    let config = peerblock_tokio::config::NodeConfig::from_toml_str(&toml).unwrap();
    let (epoch, sig) = config.signed_epoch().unwrap();
    assert_eq!(epoch, 42);
    assert!(sig.is_some());
    // The signature is over that epoch only: another epoch with it is refused.
    let other = toml.replace("epoch = 42", "epoch = 43");
    let e = peerblock_tokio::config::NodeConfig::from_toml_str(&other)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("roster.epoch_signature"), "{e}");
}

/// Rule (issue 25): `key admit` prints the `[roster] admission` line that a node with that
/// key and the authority's public key accepts, by key file or by public key alike, and
/// that no other node's key accepts.
#[test]
fn key_admit_prints_the_admission_the_admitted_nodes_config_accepts() {
    let dir = TempDir::new("key-admit");
    let (auth, node, other) = (
        dir.join("authority.key"),
        dir.join("node.key"),
        dir.join("other.key"),
    );
    let (a, n, o) = (
        auth.to_str().unwrap(),
        node.to_str().unwrap(),
        other.to_str().unwrap(),
    );
    let (_, auth_out, _) = key_cmd(&["new", a]);
    let (_, node_out, _) = key_cmd(&["new", n]);
    let (_, other_out, _) = key_cmd(&["new", o]);
    let (code, by_file, err) = key_cmd(&["admit", "--key", a, n]);
    assert_eq!(code, 0, "{err}");
    let public = value(&node_out, "public_key");
    let (code, by_key, err) = key_cmd(&["admit", "--key", a, public]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&by_file, "admission"), value(&by_key, "admission"));
    let toml = format!(
        "[roster]\nmembership = \"admitted\"\nauthority_key = \"{}\"\nadmission = \"{}\"\n",
        value(&auth_out, "public_key"),
        value(&by_file, "admission")
    );
    let config = peerblock_tokio::config::NodeConfig::from_toml_str(&toml).unwrap();
    let key = |out: &str| {
        peerblock_core::roster::record::unhex::<32>(value(out, "public_key").as_bytes()).unwrap()
    };
    assert!(config.node_admission(&key(&node_out)).unwrap().is_some());
    assert!(config.node_admission(&key(&other_out)).is_err());
    let (code, _, err) = key_cmd(&["admit", "--key", a, "not-a-key-or-file"]);
    assert_ne!(code, 0, "{err}");
}

#[test]
fn key_sign_epoch_refuses_epoch_zero_and_a_missing_key_file() {
    let dir = TempDir::new("key-epoch-bad");
    let missing = dir.join("nope.key");
    let (code, _, err) = key_cmd(&["sign-epoch", "--key", missing.to_str().unwrap(), "1"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("nope.key"), "{err}");
    let (code, _, err) = key_cmd(&["sign-epoch", "--key", missing.to_str().unwrap(), "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("EPOCH"), "{err}");
}

/// Rule: an empty key file (what a first start on a full disk left before key files were
/// written atomically) holds no key that was ever used: it is replaced by a new key,
/// owner-only, instead of failing every later start.
#[test]
fn an_empty_key_file_is_replaced_by_a_new_key() {
    let dir = TempDir::new("key-empty");
    let path = dir.join("node.key");
    std::fs::write(&path, "").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (key, created) = load_or_create_key(&path).unwrap();
    assert!(created);
    assert_eq!(key.id().len(), 64);
    let (again, _) = load_or_create_key(&path).unwrap();
    assert_eq!(again.id(), key.id());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// Rule: a key that cannot be written (here: a file size limit of 0, as a full disk
/// refuses the bytes) leaves no key file and no temporary file behind, and the next
/// start, with room, creates the key.
#[test]
fn a_key_file_that_cannot_be_written_leaves_nothing_behind() {
    let dir = TempDir::new("key-full");
    let path = dir.join("node.key");
    // `ulimit -f 0`: every write to a file fails (EFBIG); SIGXFSZ ignored so the write
    // returns the error instead of killing the process.
    let script = format!(
        "trap '' XFSZ; ulimit -f 0; exec {} key new {}",
        common::procs::BIN,
        path.display()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("run sh");
    assert!(
        !out.status.success(),
        "writing a key with no room succeeded"
    );
    let left: Vec<_> = std::fs::read_dir(&dir.0).unwrap().flatten().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let (_, created) = load_or_create_key(&path).unwrap();
    assert!(created);
}

/// Rule: a first `serve` start on a store with no room for its key (file size limit 0)
/// fails and leaves no key file; the next start, with room, creates the key and serves.
#[test]
fn a_first_serve_start_without_room_leaves_no_key_and_the_next_start_works() {
    let store = TempDir::new("serve-full");
    let script = format!(
        "trap '' XFSZ; ulimit -f 0; exec {} serve --listen 127.0.0.1:0 --store {}",
        common::procs::BIN,
        store.0.display()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run sh");
    assert!(
        !out.status.success(),
        "serve started with no room for its key"
    );
    assert!(
        !store.join("node.key").exists(),
        "a key file was left: {:?}",
        std::fs::read(store.join("node.key"))
    );
    let leftovers: Vec<_> = std::fs::read_dir(&store.0)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().contains("node.key"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let node = common::procs::Node::start(&store.0, &[], &[]);
    assert!(store.join("node.key").exists());
    assert!(
        node.terminate(),
        "the second start did not serve and stop cleanly"
    );
}
