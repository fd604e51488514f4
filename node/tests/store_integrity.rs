//! Issue 27 end to end through the `peerblock-node` binary: holders check what they hold
//! (quarantine, `404` + `X-Peerblock-Miss: corrupt`, the corrupt counter, hand repairs),
//! `check` finds rot and `check --repair --seed` restores it, re-import repairs, stale
//! temporary files of killed processes are removed when `serve` starts, and a relay never
//! persists a block it could not validate. Real processes on 127.0.0.0/8 with ephemeral
//! ports; every wait is on an event (a line, a response, an exit) with a bound.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::procs::{import, random_file, run, Node, TempDir, BIN};

/// Bound on one HTTP exchange with a node.
const EXCHANGE_BOUND: Duration = Duration::from_secs(20);

/// Bound on a `check` run.
const CHECK_BOUND: Duration = Duration::from_secs(60);

/// The `serve` flags of each body path: tokio, mio buffered, mio sendfile (the last needs
/// a config file, written into `dir`).
fn driver_flags(kind: &str, dir: &TempDir) -> Vec<String> {
    match kind {
        "tokio" => vec![],
        "mio" => ["--driver", "mio", "--threads", "2"]
            .map(String::from)
            .to_vec(),
        "sendfile" => {
            let config = dir.join("sendfile.toml");
            std::fs::write(&config, "[listener]\nbody_path = \"sendfile\"\n").expect("config");
            vec![
                "--driver".into(),
                "mio".into(),
                "--threads".into(),
                "2".into(),
                "--config".into(),
                config.to_str().expect("utf-8 path").into(),
            ]
        }
        other => panic!("unknown driver {other}"),
    }
}

/// One response: status, head (lower-cased), body.
struct Response {
    status: u16,
    head: String,
    body: Vec<u8>,
}

/// `GET path` with `Connection: close` (and `extra` header lines), read to the end.
fn http_get(addr: &str, path: &str, extra: &str) -> Response {
    let mut s = TcpStream::connect(addr).expect("connect to the node");
    s.set_read_timeout(Some(EXCHANGE_BOUND)).expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n{extra}\r\n"
    )
    .expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the response");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head")
        + 4;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head[9..12].parse().expect("a status code");
    Response {
        status,
        head,
        body: raw[end..].to_vec(),
    }
}

fn block(addr: &str, chunk: &str, index: u64) -> Response {
    http_get(addr, &format!("/peer/v1/block/{chunk}/{index}"), "")
}

/// The node's metrics text (started with `--metrics`; its address is the line after
/// `listening`).
fn metrics(metrics_addr: &str) -> String {
    String::from_utf8(http_get(metrics_addr, "/metrics", "").body).expect("utf-8 metrics")
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).expect("read block");
    b[at] ^= 0x20;
    std::fs::write(path, b).expect("rewrite block");
}

/// A file of `len` bytes imported into `store` at `block_size`: the input, its bytes
/// and the chunk key.
fn imported(
    dir: &TempDir,
    store: &Path,
    len: usize,
    block_size: usize,
) -> (PathBuf, Vec<u8>, String) {
    let file = dir.join("input.bin");
    let data = random_file(&file, len, 27);
    let chunk = import(&file, store, block_size);
    (file, data, chunk)
}

fn a_rotten_block_on_a_holder_is_quarantined_and_answered_404_corrupt(kind: &str) {
    let dir = TempDir::new("rot-serve");
    let store = TempDir::new("rot-serve-a");
    let (_, data, chunk) = imported(&dir, &store.0, 4 * 64 * 1024, 64 * 1024);
    let chunk_dir = store.0.join(&chunk);
    flip(&chunk_dir.join("2"), 1000);
    let mut flags = driver_flags(kind, &dir);
    flags.extend(["--metrics".to_owned(), "127.0.0.1:0".to_owned()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let node = Node::start(&store.0, &[], &flags);
    let admin = node.metrics_addr();
    let r = block(&node.addr, &chunk, 2);
    assert_eq!(r.status, 404, "{}", r.head);
    assert!(
        r.head.contains("x-peerblock-miss: corrupt\r\n"),
        "the 404 says corrupt: {}",
        r.head
    );
    assert!(chunk_dir.join(".2.corrupt").is_file(), "quarantined");
    assert!(!chunk_dir.join("2").exists(), "never served again");
    for i in [1u64, 3, 4] {
        let r = block(&node.addr, &chunk, i);
        assert_eq!(r.status, 200, "block {i}: {}", r.head);
        let at = (i as usize - 1) * 64 * 1024;
        assert!(r.body == data[at..at + 64 * 1024], "block {i} bytes");
    }
    assert!(
        metrics(&admin).contains("peerblock_store_corrupt_total 1\n"),
        "the corrupt counter"
    );
    // A hand repair (the good bytes put back) is served without a restart.
    std::fs::write(chunk_dir.join("2"), &data[64 * 1024..2 * 64 * 1024]).expect("repair");
    let r = block(&node.addr, &chunk, 2);
    assert_eq!(r.status, 200, "the hand repair is served: {}", r.head);
    assert!(r.body == data[64 * 1024..2 * 64 * 1024]);
}

#[test]
fn a_rotten_block_on_a_tokio_holder_is_quarantined_and_answered_404_corrupt_while_the_others_are_served(
) {
    a_rotten_block_on_a_holder_is_quarantined_and_answered_404_corrupt("tokio");
}

#[test]
fn a_rotten_block_on_a_mio_holder_is_quarantined_and_answered_404_corrupt_while_the_others_are_served(
) {
    a_rotten_block_on_a_holder_is_quarantined_and_answered_404_corrupt("mio");
}

#[test]
fn a_rotten_block_on_a_mio_sendfile_holder_is_quarantined_and_answered_404_corrupt_while_the_others_are_served(
) {
    a_rotten_block_on_a_holder_is_quarantined_and_answered_404_corrupt("sendfile");
}

fn check(args: &[&str]) -> (Option<i32>, String, String) {
    let out = run(args, CHECK_BOUND);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_finds_rot_and_check_repair_with_a_seed_restores_it_from_the_cluster() {
    let dir = TempDir::new("check");
    let (a, b) = (TempDir::new("check-a"), TempDir::new("check-b"));
    let (file, data, chunk) = imported(&dir, &a.0, 5 * 32 * 1024 + 99, 32 * 1024);
    assert_eq!(import(&file, &b.0, 32 * 1024), chunk);
    let a_store = a.0.to_str().expect("utf-8 path");
    let (code, out, err) = check(&["check", "--store", a_store]);
    assert_eq!(code, Some(0), "a clean store: {out}{err}");
    assert!(out.contains(&format!("{chunk} ok: 6 blocks")), "{out}");
    let chunk_dir = a.0.join(&chunk);
    let manifest = std::fs::read(chunk_dir.join("0")).expect("manifest");
    flip(&chunk_dir.join("2"), 5);
    std::fs::remove_file(chunk_dir.join("5")).expect("lose block 5");
    let (code, out, _) = check(&["check", "--store", a_store]);
    assert_eq!(code, Some(1), "damage found: {out}");
    assert!(
        out.contains("block 2 rotten") && out.contains("block 5 missing"),
        "{out}"
    );
    assert!(
        chunk_dir.join("2").exists(),
        "a check without --repair changes nothing"
    );
    // The holder B serves the good copies; the repair reads them through the read engine.
    let node = Node::start(&b.0, &[], &[]);
    let (code, out, err) = check(&[
        "check", "--store", a_store, "--repair", "--seed", &node.addr,
    ]);
    assert_eq!(code, Some(0), "repaired: {out}{err}");
    assert!(out.contains("repaired from the cluster"), "{out}");
    assert!(std::fs::read(chunk_dir.join("2")).expect("block 2") == data[32 * 1024..64 * 1024]);
    assert!(
        std::fs::read(chunk_dir.join("5")).expect("block 5") == data[4 * 32 * 1024..5 * 32 * 1024]
    );
    // A lost manifest is re-fetched too, then the blocks are checked against it.
    std::fs::remove_file(chunk_dir.join("0")).expect("lose the manifest");
    let (code, out, _) = check(&["check", "--store", a_store]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("manifest missing"), "{out}");
    let (code, out, err) = check(&[
        "check", "--store", a_store, "--repair", "--seed", &node.addr,
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        std::fs::read(chunk_dir.join("0")).expect("manifest"),
        manifest
    );
    let (code, out, _) = check(&["check", "--store", a_store]);
    assert_eq!(code, Some(0), "clean after the repairs: {out}");
}

#[test]
fn check_repair_without_a_seed_quarantines_rot_and_still_exits_1() {
    let dir = TempDir::new("check-q");
    let a = TempDir::new("check-q-a");
    let (_, _, chunk) = imported(&dir, &a.0, 3 * 4096, 4096);
    let chunk_dir = a.0.join(&chunk);
    flip(&chunk_dir.join("3"), 0);
    let store = a.0.to_str().expect("utf-8 path");
    let (code, out, _) = check(&["check", "--store", store, "--repair"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("block 3 rotten (quarantined)"), "{out}");
    assert!(chunk_dir.join(".3.corrupt").is_file() && !chunk_dir.join("3").exists());
}

#[test]
fn reimport_repairs_a_rotten_block_and_a_lost_manifest() {
    let dir = TempDir::new("reimport");
    let a = TempDir::new("reimport-a");
    let (file, data, chunk) = imported(&dir, &a.0, 3 * 8192 + 5, 8192);
    let chunk_dir = a.0.join(&chunk);
    let manifest = std::fs::read(chunk_dir.join("0")).expect("manifest");
    flip(&chunk_dir.join("1"), 17);
    std::fs::remove_file(chunk_dir.join("0")).expect("lose the manifest");
    let out = run(
        &[
            "import",
            file.to_str().expect("utf-8 path"),
            "--store",
            a.0.to_str().expect("utf-8 path"),
            "--block-size",
            "8192",
        ],
        CHECK_BOUND,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "re-import over a damaged chunk: {err}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), chunk);
    assert!(
        err.contains("repaired the manifest (block 0): it was missing"),
        "{err}"
    );
    assert!(err.contains("repaired block 1: it was rotten"), "{err}");
    assert_eq!(
        std::fs::read(chunk_dir.join("0")).expect("manifest"),
        manifest
    );
    assert!(std::fs::read(chunk_dir.join("1")).expect("block 1") == data[..8192]);
    let leftovers = std::fs::read_dir(&a.0)
        .expect("store")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".import-"))
        .count();
    assert_eq!(leftovers, 0, "no temporary directory is left");
}

#[test]
fn a_killed_import_leaves_a_temporary_directory_that_serve_removes_at_start() {
    let dir = TempDir::new("killed");
    let store = TempDir::new("killed-a");
    // A sparse 96 MiB file in 16 KiB blocks: thousands of fsynced block files, so the
    // import is still running when its first progress line (10%) is read.
    let file = dir.join("big.bin");
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(96 * 1024 * 1024))
        .expect("sparse file");
    let mut child = Command::new(BIN)
        .args(["import", file.to_str().expect("utf-8 path"), "--store"])
        .arg(&store.0)
        .args(["--block-size", "16KiB"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn import");
    let pid = child.id();
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("the import's first progress line");
        if line.contains('%') {
            break;
        }
    }
    child.kill().expect("kill -9 the import");
    let _ = child.wait();
    let temp = store.0.join(format!(".import-{pid}-0"));
    assert!(temp.is_dir(), "the killed import left {}", temp.display());
    // And a planted stale block temporary file in a chunk directory.
    let chunk_dir = store.0.join("ab".repeat(32));
    std::fs::create_dir_all(&chunk_dir).expect("chunk dir");
    let tmp_file = chunk_dir.join(".1.tmp.999999999.0");
    std::fs::write(&tmp_file, b"half a block").expect("stale temp file");
    let live = store.0.join(format!(".import-{}-0", std::process::id()));
    std::fs::create_dir_all(&live).expect("a live process's import");
    // `listening` is printed after the start-up cleanup.
    let node = Node::start(&store.0, &[], &[]);
    assert!(
        !temp.exists(),
        "serve removed the killed import's directory"
    );
    assert!(
        !tmp_file.exists(),
        "serve removed the stale block temporary file"
    );
    assert!(
        live.is_dir(),
        "a live process's temporary directory is kept"
    );
    drop(node);
}

/// Rule: a relay keeps a relayed manifest only if it validates, and then in its relay cache,
/// never among its imported content.
fn a_relay_does_not_persist_a_rotten_block_0(driver: &[&str]) {
    use peerblock_testkit::conformance::canned::{self, Reply};
    let dir = TempDir::new("relay-rot");
    let origin_store = TempDir::new("relay-rot-origin");
    let relay_store = TempDir::new("relay-rot-relay");
    let (_, _, chunk) = imported(&dir, &origin_store.0, 3000, 1000);
    let mut manifest = std::fs::read(origin_store.0.join(&chunk).join("0")).expect("manifest");
    // An origin that serves a rotten manifest (a holder of ours never would).
    let last = manifest.len() - 2;
    manifest[last] ^= 0x01;
    let origin = canned::serve(move |_, _, _| Reply::Bytes(canned::ok(&manifest)));
    let relay = Node::start(&relay_store.0, &[], driver);
    let origin_header = format!("X-DART-Origin: http://{}\r\n", origin.addr);
    let r = http_get(
        &relay.addr,
        &format!("/peer/v1/block/{chunk}/0"),
        &origin_header,
    );
    assert_eq!(
        r.status, 500,
        "a rotten relayed manifest is not served: {}",
        r.head
    );
    assert!(
        !relay_store.0.join(&chunk).exists()
            && !relay_store.0.join(".relay-cache").join(&chunk).exists(),
        "the relay persisted a block it could not validate"
    );
    // The sound manifest, from the origin's real holder, is served and persisted.
    let holder = Node::start(&origin_store.0, &[], &[]);
    let origin_header = format!("X-DART-Origin: http://{}\r\n", holder.addr);
    let r = http_get(
        &relay.addr,
        &format!("/peer/v1/block/{chunk}/0"),
        &origin_header,
    );
    assert_eq!(r.status, 200, "{}", r.head);
    let cached: Vec<_> = std::fs::read_dir(relay_store.0.join(".relay-cache").join(&chunk))
        .expect("the relay cache holds the chunk")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        cached.iter().any(|n| n.starts_with("0.")),
        "a valid manifest is kept in the relay cache: {cached:?}"
    );
    assert!(
        !relay_store.0.join(&chunk).exists(),
        "a relayed manifest became imported content"
    );
}

#[test]
fn a_tokio_relay_does_not_persist_a_rotten_block_0() {
    a_relay_does_not_persist_a_rotten_block_0(&[]);
}

#[test]
fn a_mio_relay_does_not_persist_a_rotten_block_0() {
    a_relay_does_not_persist_a_rotten_block_0(&["--driver", "mio", "--threads", "2"]);
}
