//! `fetch` never leaves wrong bytes and a little rot never makes a file unreadable
//! (issue 27), through the `peerblock-node` binary: real processes on loopback, every
//! wait bounded, nodes killed when the test ends.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::procs::{fetch, import, random_file, run, Node, TempDir, BIN, FETCH_BOUND};

/// Flips one byte in the middle of block `index` of `chunk` in `store`.
fn rot(store: &Path, chunk: &str, index: u64) {
    let path = store.join(chunk).join(index.to_string());
    let mut bytes = std::fs::read(&path).expect("block file");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&path, bytes).expect("rewrite block");
}

/// The hidden temporary files of fetches beside `out` (`.NAME.*.part`).
fn part_files(out: &Path) -> Vec<PathBuf> {
    let prefix = format!(".{}.", out.file_name().unwrap().to_string_lossy());
    std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with(&prefix) && n.ends_with(".part")
        })
        .collect()
}

/// Starts a node on each store (the first is the others' seed) and waits until all have
/// learned each other.
fn start(stores: &[TempDir], extra: &[&str]) -> Vec<Node> {
    let first = Node::start(&stores[0].0, &[], extra);
    let seed = first.addr.clone();
    let mut nodes = vec![first];
    for s in &stores[1..] {
        nodes.push(Node::start(&s.0, &[&seed], extra));
    }
    for n in &nodes[1..] {
        n.wait_members(2);
    }
    nodes[0].wait_members(stores.len());
    nodes
}

/// Rule: one rotten block on each of three holders (3 of 60 copies; every block still has
/// two good copies) never fails a fetch: the read takes the block from another holder
/// and goes on using each holder's other blocks. Ten fetches, every one exact.
#[test]
fn a_rotten_block_on_each_holder_never_fails_a_fetch() {
    let dir = TempDir::new("rot-each");
    let stores = [
        TempDir::new("rot-each-a"),
        TempDir::new("rot-each-b"),
        TempDir::new("rot-each-c"),
    ];
    let file = dir.join("input.bin");
    let data = random_file(&file, 20 * 64 * 1024, 27);
    let chunk = import(&file, &stores[0].0, 64 * 1024);
    for s in &stores[1..] {
        assert_eq!(import(&file, &s.0, 64 * 1024), chunk);
    }
    rot(&stores[0].0, &chunk, 3);
    rot(&stores[1].0, &chunk, 11);
    rot(&stores[2].0, &chunk, 17);
    let nodes = start(&stores, &[]);
    for round in 0..10 {
        let out = dir.join(&format!("out-{round}.bin"));
        let fetched = fetch(&chunk, &nodes[round % 3].addr, &out, &[]);
        let stderr = String::from_utf8_lossy(&fetched.stderr);
        assert!(fetched.status.success(), "round {round}: {stderr}");
        assert!(
            std::fs::read(&out).unwrap() == data,
            "round {round}: wrong bytes"
        );
    }
}

/// Rule: a block rotten on every holder ends the fetch with exit 1 naming that block
/// `invalid` (corrupt: not `unavailable`, not `absent`), and nothing is left behind: no
/// output, no temporary file.
#[test]
fn a_block_rotten_on_every_holder_is_reported_invalid_and_leaves_nothing() {
    let dir = TempDir::new("rot-all");
    let stores = [TempDir::new("rot-all-a"), TempDir::new("rot-all-b")];
    let file = dir.join("input.bin");
    random_file(&file, 8 * 32 * 1024, 5);
    let chunk = import(&file, &stores[0].0, 32 * 1024);
    assert_eq!(import(&file, &stores[1].0, 32 * 1024), chunk);
    for s in &stores {
        rot(&s.0, &chunk, 4);
    }
    let nodes = start(&stores, &[]);
    let out = dir.join("out.bin");
    let fetched = fetch(&chunk, &nodes[1].addr, &out, &[]);
    let stderr = String::from_utf8_lossy(&fetched.stderr);
    assert_eq!(fetched.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("block 4: invalid"), "{stderr}");
    assert!(
        stderr.contains("1 of 8 blocks not read: 1 invalid"),
        "{stderr}"
    );
    assert!(!out.exists(), "no output for a failed fetch");
    assert!(part_files(&out).is_empty(), "temporary files left");
}

/// Rule: a rotten manifest on one of two holders never fails a fetch: the manifest is
/// read through the read engine, so the bad copy is rejected against the key and never
/// asked again; the other holder's copy is used. Twenty fetches, every one exact.
#[test]
fn a_rotten_manifest_on_one_holder_never_fails_a_fetch() {
    let dir = TempDir::new("rot-manifest");
    let stores = [TempDir::new("rot-man-a"), TempDir::new("rot-man-b")];
    let file = dir.join("input.bin");
    let data = random_file(&file, 300_000, 9);
    let chunk = import(&file, &stores[0].0, 64 * 1024);
    assert_eq!(import(&file, &stores[1].0, 64 * 1024), chunk);
    // Still a well-formed manifest, only one hash digit changed: only the key shows it.
    let manifest = stores[0].0.join(&chunk).join("0");
    let mut text = std::fs::read(&manifest).unwrap();
    let last = text.len() - 2;
    text[last] = if text[last] == b'0' { b'1' } else { b'0' };
    std::fs::write(&manifest, text).unwrap();
    let nodes = start(&stores, &[]);
    for round in 0..20 {
        let out = dir.join(&format!("out-{round}.bin"));
        let fetched = fetch(&chunk, &nodes[round % 2].addr, &out, &[]);
        let stderr = String::from_utf8_lossy(&fetched.stderr);
        assert!(fetched.status.success(), "round {round}: {stderr}");
        assert!(std::fs::read(&out).unwrap() == data, "round {round}");
    }
}

/// Rule: two fetches overlapping on one output path each write a temporary file of their
/// own; each that exits 0 renamed exactly its own verified bytes into place, so the
/// output is one file or the other, whole, never a mix, and no temporary file is left.
#[test]
fn overlapping_fetches_to_one_path_never_mix_their_bytes() {
    let dir = TempDir::new("overlap");
    let store = TempDir::new("overlap-a");
    let (small, large) = (dir.join("small.bin"), dir.join("large.bin"));
    let small_data = random_file(&small, 5 * 1024 * 1024, 1);
    let large_data = random_file(&large, 20 * 1024 * 1024, 2);
    let small_chunk = import(&small, &store.0, 256 * 1024);
    let large_chunk = import(&large, &store.0, 256 * 1024);
    // Two fetches from one host share the node's per-source session quota (4 by
    // default, each fetch keeps up to 4 connections): give them room for both.
    let config = dir.join("node.toml");
    std::fs::write(&config, "[listener]\nmax_sessions_per_source = 16\n").unwrap();
    let node = Node::start(&store.0, &[], &["--config", config.to_str().unwrap()]);
    let out = dir.join("out.bin");
    let spawn = |chunk: &str| {
        Command::new(BIN)
            .args(["fetch", chunk, "--seed", &node.addr, "-o"])
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fetch")
    };
    for _ in 0..3 {
        let (a, b) = (spawn(&large_chunk), spawn(&small_chunk));
        let (a, b) = (wait_output(a), wait_output(b));
        assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
        assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
        let got = std::fs::read(&out).unwrap();
        assert!(
            got == small_data || got == large_data,
            "the output is neither file whole ({} bytes)",
            got.len()
        );
        assert!(part_files(&out).is_empty(), "{:?}", part_files(&out));
    }
}

/// `wait_with_output`, bounded by [`FETCH_BOUND`] (killed past it).
fn wait_output(child: std::process::Child) -> std::process::Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(FETCH_BOUND)
        .unwrap_or_else(|_| {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("fetch did not finish in time")
        })
        .expect("fetch output")
}

/// Rule: `-o` naming a device, a FIFO or a directory is refused with exit 2 before
/// anything is fetched; the device stays a device (as root, `-o /dev/null` replaced
/// /dev/null with a regular file).
#[test]
fn an_output_that_is_not_a_regular_file_is_refused_and_left_alone() {
    use std::os::unix::fs::FileTypeExt;
    let dir = TempDir::new("device");
    let fifo = dir.join("pipe");
    let made = Command::new("mkfifo").arg(&fifo).status();
    let chunk = "ab".repeat(32);
    let mut outputs = vec![PathBuf::from("/dev/null"), dir.0.clone()];
    if made.is_ok_and(|s| s.success()) {
        outputs.push(fifo.clone());
    } else {
        eprintln!("mkfifo is missing: the FIFO case is skipped");
    }
    for out in &outputs {
        let fetched = fetch(&chunk, "127.0.0.1:9", out, &[]);
        let stderr = String::from_utf8_lossy(&fetched.stderr);
        assert_eq!(
            fetched.status.code(),
            Some(2),
            "{}: {stderr}",
            out.display()
        );
        assert!(stderr.contains("-o"), "{stderr}");
    }
    let meta = std::fs::metadata("/dev/null").unwrap();
    assert!(meta.file_type().is_char_device());
    if fifo.exists() {
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    }
}

/// Rule: SIGINT during a fetch ends it with exit 130 and removes its temporary file; the
/// output is never created. The node's upload is paced so the fetch is still running when
/// the signal comes (the test waits, bounded, for the temporary file to appear).
#[test]
fn sigint_during_a_fetch_removes_its_temporary_file() {
    let dir = TempDir::new("sigint");
    let store = TempDir::new("sigint-a");
    let file = dir.join("input.bin");
    random_file(&file, 8 * 1024 * 1024, 3);
    let chunk = import(&file, &store.0, 256 * 1024);
    let config = dir.join("node.toml");
    std::fs::write(
        &config,
        "[listener]\nupload_bytes_per_second = 1048576\nsend_timeout = \"60s\"\n",
    )
    .unwrap();
    let node = Node::start(&store.0, &[], &["--config", config.to_str().unwrap()]);
    let out = dir.join("out.bin");
    let child = Command::new(BIN)
        .args(["fetch", &chunk, "--seed", &node.addr, "-o"])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fetch");
    let deadline = Instant::now() + Duration::from_secs(30);
    while part_files(&out).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the fetch never created its temporary file"
        );
        std::thread::yield_now();
    }
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let done = wait_output(child);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(part_files(&out).is_empty(), "{:?}", part_files(&out));
    assert!(!out.exists());
}

/// Rule: a temporary file left by a fetch that was killed (SIGKILL: no chance to clean
/// up) is removed by the next fetch to the same output; one of a live process is not.
#[test]
fn a_killed_fetchs_temporary_file_is_removed_by_the_next_fetch() {
    let dir = TempDir::new("stale-part");
    let store = TempDir::new("stale-part-a");
    let file = dir.join("input.bin");
    let data = random_file(&file, 100_000, 4);
    let chunk = import(&file, &store.0, 64 * 1024);
    let node = Node::start(&store.0, &[], &[]);
    let out = dir.join("out.bin");
    // pid 4194304 is above Linux's pid_max limit: never a live process.
    let dead = dir.join(".out.bin.4194304.7.part");
    let live = dir.join(&format!(".out.bin.{}.7.part", std::process::id()));
    std::fs::write(&dead, vec![0u8; 1000]).unwrap();
    std::fs::write(&live, vec![0u8; 1000]).unwrap();
    let fetched = fetch(&chunk, &node.addr, &out, &[]);
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert_eq!(std::fs::read(&out).unwrap(), data);
    assert!(
        !dead.exists(),
        "the dead fetch's temporary file is still there"
    );
    assert!(live.exists(), "a live process's temporary file was removed");
}

/// Starts `fetch` with stderr read line by line: the child and a channel of its lines.
fn fetch_streaming(
    chunk: &str,
    seed: &str,
    out: &Path,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(BIN)
        .args(["fetch", chunk, "--seed", seed, "-o"])
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fetch");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// A node that allows one session per source, refusing for 1 s: a connection held open
/// from 127.0.0.1 makes every request of a fetch (also from 127.0.0.1) refused with
/// `source-sessions`.
fn one_session_node(dir: &TempDir, store: &TempDir) -> Node {
    let config = dir.join("node.toml");
    std::fs::write(
        &config,
        "[listener]\nmax_sessions_per_source = 1\nretry_after = \"1s\"\n",
    )
    .unwrap();
    Node::start(&store.0, &[], &["--config", config.to_str().unwrap()])
}

/// Rule: a seed that refuses for lack of capacity is waited out, as a read waits out a
/// refusing holder: the fetch says the seeds are busy and why, and succeeds once the
/// seed has room (here: the connection holding its only session for our source closes).
#[test]
fn a_refusing_seed_is_waited_out_and_the_fetch_succeeds() {
    let dir = TempDir::new("busy-seed");
    let store = TempDir::new("busy-seed-a");
    let file = dir.join("input.bin");
    let data = random_file(&file, 200_000, 8);
    let chunk = import(&file, &store.0, 64 * 1024);
    let node = one_session_node(&dir, &store);
    let holder = std::net::TcpStream::connect(&node.addr).unwrap();
    let out = dir.join("out.bin");
    let (child, lines) = fetch_streaming(&chunk, &node.addr, &out);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .expect("the fetch never said the seeds are busy");
        if line.contains("seeds busy (source-sessions), retry after 1 s") {
            break;
        }
    }
    drop(holder);
    let done = wait_output(child);
    let rest: Vec<String> = lines.try_iter().collect();
    assert!(done.status.success(), "{rest:?}");
    assert_eq!(std::fs::read(&out).unwrap(), data);
}

/// Rule: a seed that keeps refusing ends the fetch `busy` (exit 1) with its reason and
/// retry time, never "no seed answered".
#[test]
fn a_seed_that_keeps_refusing_ends_the_fetch_busy_with_its_reason() {
    let dir = TempDir::new("busy-seed-end");
    let store = TempDir::new("busy-seed-end-a");
    let node = one_session_node(&dir, &store);
    let _holder = std::net::TcpStream::connect(&node.addr).unwrap();
    let fetched = fetch(&"ab".repeat(32), &node.addr, &dir.join("out.bin"), &[]);
    let stderr = String::from_utf8_lossy(&fetched.stderr);
    assert_eq!(fetched.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("busy: every seed refused (source-sessions)"),
        "{stderr}"
    );
    assert!(!stderr.contains("no seed answered"), "{stderr}");
}

/// Rule: `get` of block 0 checks the manifest against the chunk key: a holder's rotten
/// manifest is never written out (exit 1, `invalid`), a good one is.
#[test]
fn get_of_a_manifest_checks_it_against_the_key() {
    let dir = TempDir::new("get-manifest");
    let (good, bad) = (TempDir::new("get-man-a"), TempDir::new("get-man-b"));
    let file = dir.join("input.bin");
    random_file(&file, 100_000, 12);
    let chunk = import(&file, &good.0, 64 * 1024);
    assert_eq!(import(&file, &bad.0, 64 * 1024), chunk);
    let manifest = bad.0.join(&chunk).join("0");
    let mut text = std::fs::read(&manifest).unwrap();
    let last = text.len() - 2;
    text[last] = if text[last] == b'0' { b'1' } else { b'0' };
    std::fs::write(&manifest, text).unwrap();
    let (a, b) = (
        Node::start(&good.0, &[], &[]),
        Node::start(&bad.0, &[], &[]),
    );
    let out = dir.join("manifest");
    let got = |peer: &str| {
        run(
            &[
                "get",
                "--peer",
                peer,
                &chunk,
                "0",
                "-o",
                out.to_str().unwrap(),
            ],
            FETCH_BOUND,
        )
    };
    let r = got(&b.addr);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("invalid"), "{stderr}");
    assert!(!out.exists(), "a rotten manifest was written out");
    let r = got(&a.addr);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(good.0.join(&chunk).join("0")).unwrap()
    );
}
