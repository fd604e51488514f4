//! End to end through the `peerblock-node` binary: real processes on loopback, each test
//! bounded in time (every wait has a bound; nodes are killed when the test ends).

mod common;

use std::time::Duration;

use common::procs::{fetch, import, random_file, Node, TempDir};

/// The `serve` flags of each driver: tokio (the default) and mio.
const TOKIO: &[&str] = &[];
const MIO: &[&str] = &["--driver", "mio", "--threads", "2"];

/// Runs `$rule(a, b)` with nodes A and B on each pair of drivers: both tokio, both mio,
/// and each mixed way, one `#[test]` per pair named `$rule::<pair>`.
macro_rules! on_every_driver_pair {
    ($($rule:ident),* $(,)?) => {
        $(
            mod $rule {
                #[test]
                fn tokio_tokio() {
                    super::$rule(super::TOKIO, super::TOKIO)
                }
                #[test]
                fn mio_mio() {
                    super::$rule(super::MIO, super::MIO)
                }
                #[test]
                fn mio_tokio() {
                    super::$rule(super::MIO, super::TOKIO)
                }
                #[test]
                fn tokio_mio() {
                    super::$rule(super::TOKIO, super::MIO)
                }
            }
        )*
    };
}

on_every_driver_pair!(
    live_nodes_learn_each_other_through_the_roster_exchange,
    a_file_imported_on_one_node_is_fetched_byte_exact_through_another_nodes_seed,
    a_corrupted_block_on_one_holder_is_rejected_by_validation_and_read_from_another,
);

fn live_nodes_learn_each_other_through_the_roster_exchange(da: &[&str], db: &[&str]) {
    let (a_store, b_store) = (TempDir::new("learn-a"), TempDir::new("learn-b"));
    let a = Node::start(&a_store.0, &[], da);
    let b = Node::start(&b_store.0, &[&a.addr], db);
    // B asked A (its seed) for A's roster and so knows A; A learned B as an identified
    // caller of that request.
    b.wait_members(2);
    a.wait_members(2);
}

fn a_file_imported_on_one_node_is_fetched_byte_exact_through_another_nodes_seed(
    da: &[&str],
    db: &[&str],
) {
    let dir = TempDir::new("fetch");
    let (a_store, b_store) = (TempDir::new("fetch-a"), TempDir::new("fetch-b"));
    let file = dir.join("input.bin");
    let data = random_file(&file, 3 * 1024 * 1024 + 12_345, 7);
    let chunk = import(&file, &a_store.0, 256 * 1024);
    let a = Node::start(&a_store.0, &[], da);
    let b = Node::start(&b_store.0, &[&a.addr], db);
    b.wait_members(2);
    let out = dir.join("output.bin");
    let fetched = fetch(&chunk, &b.addr, &out, &[]);
    let stderr = String::from_utf8_lossy(&fetched.stderr);
    assert!(fetched.status.success(), "fetch failed: {stderr}");
    assert_eq!(std::fs::read(&out).expect("output written"), data);
    // The report names the holder that served the bytes.
    let report = String::from_utf8_lossy(&fetched.stdout);
    assert!(
        report.contains(&a.addr),
        "report does not name {}: {report}",
        a.addr
    );
}

fn a_corrupted_block_on_one_holder_is_rejected_by_validation_and_read_from_another(
    da: &[&str],
    db: &[&str],
) {
    let dir = TempDir::new("corrupt");
    let stores = [TempDir::new("corrupt-a"), TempDir::new("corrupt-b")];
    let file = dir.join("input.bin");
    let data = random_file(&file, 2 * 1024 * 1024, 11);
    let chunk = import(&file, &stores[0].0, 128 * 1024);
    assert_eq!(import(&file, &stores[1].0, 128 * 1024), chunk);
    // Every data block on holder A is corrupted (one byte flipped): any read that goes to
    // A first must reject it and read the block from B.
    let blocks = std::fs::read_dir(stores[0].0.join(&chunk)).expect("chunk dir");
    let mut corrupted = 0;
    for entry in blocks {
        let path = entry.expect("dir entry").path();
        if path.file_name().is_some_and(|n| n == "0") {
            continue; // the manifest stays intact
        }
        let mut bytes = std::fs::read(&path).expect("block");
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::write(&path, bytes).expect("rewrite block");
        corrupted += 1;
    }
    assert_eq!(corrupted, 16);
    let a = Node::start(&stores[0].0, &[], da);
    let b = Node::start(&stores[1].0, &[&a.addr], db);
    b.wait_members(2);
    let out = dir.join("output.bin");
    let fetched = fetch(&chunk, &b.addr, &out, &[]);
    let stderr = String::from_utf8_lossy(&fetched.stderr);
    assert!(fetched.status.success(), "fetch failed: {stderr}");
    assert_eq!(std::fs::read(&out).expect("output written"), data);
    let report = String::from_utf8_lossy(&fetched.stdout);
    let a_line = report
        .lines()
        .find(|l| l.starts_with(&a.addr))
        .unwrap_or_else(|| panic!("report has no line for holder A {}: {report}", a.addr));
    // `ADDR N bytes K blocks I invalid ...`: A's intact manifest may be what it served;
    // no data block of A was accepted, and at least one was rejected.
    let field = |name: &str| -> u64 {
        let words: Vec<&str> = a_line.split(' ').collect();
        let at = words
            .iter()
            .position(|w| *w == name)
            .expect("field in report");
        words[at - 1]
            .parse()
            .expect("a number before the field name")
    };
    let manifest_len = std::fs::metadata(stores[0].0.join(&chunk).join("0"))
        .expect("manifest")
        .len();
    assert!(
        field("bytes") <= manifest_len,
        "A's corrupted data was accepted: {a_line}"
    );
    assert!(field("invalid") > 0, "A was never tried: {a_line}");
}

#[test]
fn fetch_of_an_unknown_chunk_fails_with_its_outcome_class_never_a_crash() {
    let (dir, store) = (TempDir::new("unknown"), TempDir::new("unknown-a"));
    let a = Node::start(&store.0, &[], &[]);
    let chunk = "ab".repeat(32);
    let fetched = fetch(&chunk, &a.addr, &dir.join("out.bin"), &[]);
    assert_eq!(fetched.status.code(), Some(1), "{fetched:?}");
    let stderr = String::from_utf8_lossy(&fetched.stderr);
    assert!(stderr.contains("absent"), "{stderr}");
}

#[test]
fn serve_announces_the_id_derived_from_a_name_and_stops_cleanly_on_sigterm() {
    serve_stops_cleanly_on_sigterm(TOKIO);
}

#[test]
fn serve_on_the_mio_driver_announces_its_id_and_stops_cleanly_on_sigterm() {
    serve_stops_cleanly_on_sigterm(MIO);
}

#[test]
fn serve_on_the_mio_driver_with_sendfile_serves_exact_blocks() {
    let dir = TempDir::new("sendfile");
    let (a_store, b_store) = (TempDir::new("sendfile-a"), TempDir::new("sendfile-b"));
    let file = dir.join("input.bin");
    let data = random_file(&file, 2 * 1024 * 1024 + 7, 5);
    let chunk = import(&file, &a_store.0, 256 * 1024);
    let config = dir.join("sendfile.toml");
    std::fs::write(&config, "[listener]\nbody_path = \"sendfile\"\n").expect("config");
    let config = config.to_str().expect("utf-8 path");
    let a = Node::start(&a_store.0, &[], &["--driver", "mio", "--config", config]);
    let b = Node::start(&b_store.0, &[&a.addr], MIO);
    b.wait_members(2);
    let out = dir.join("output.bin");
    let fetched = fetch(&chunk, &b.addr, &out, &[]);
    let stderr = String::from_utf8_lossy(&fetched.stderr);
    assert!(fetched.status.success(), "fetch failed: {stderr}");
    assert_eq!(std::fs::read(&out).expect("output written"), data);
}

fn serve_stops_cleanly_on_sigterm(driver: &[&str]) {
    use std::io::BufRead;
    let store = TempDir::new("sigterm");
    let mut child = std::process::Command::new(common::procs::BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--id",
            "node-a",
            "--store",
        ])
        .arg(&store.0)
        .args(driver)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let first = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("listening line");
    assert!(first.starts_with("listening 127.0.0.1:"), "{first:?}");
    let pid = child.id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("serve exits after SIGTERM within its shutdown grace")
        .expect("serve output");
    let err = String::from_utf8_lossy(&out.stderr);
    let mut h = blake3::Hasher::new();
    h.update(b"peerblock-node-id-v1\0node-a");
    let id = h.finalize().to_hex().to_string();
    assert!(err.contains(&id), "the derived id is announced: {err}");
    assert!(out.status.success(), "a SIGTERM is a clean stop: {err}");
}
