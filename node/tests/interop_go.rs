//! Interop with peers written the way the reference's are: Go's net/http with its default
//! transport and encoding/json (tests/go/refpeer.go, built here with Debian's golang-go).
//! Skipped with a printed reason where `go` is not installed. Loopback only, bounded.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::procs::{import, random_file, run, Node, TempDir};

/// Builds refpeer into `dir`; `None` (with the reason printed) when Go is unavailable.
fn build_refpeer(dir: &TempDir) -> Option<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go/refpeer.go");
    let bin = dir.join("refpeer");
    let built = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(&source)
        .env("GO111MODULE", "off")
        .env("GOCACHE", dir.join("gocache"))
        .env("GOPATH", dir.join("gopath"))
        .output();
    match built {
        Err(e) => {
            eprintln!(
                "SKIP: Go is not installed ({e}); install golang-go to run the Go interop tests"
            );
            None
        }
        Ok(out) if !out.status.success() => {
            panic!(
                "go build refpeer.go failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        }
        Ok(_) => Some(bin),
    }
}

/// A running `refpeer serve DIR ID`, stopped (stdin closed, then killed) on drop.
struct GoPeer {
    child: Child,
    addr: String,
}

impl GoPeer {
    fn start(bin: &Path, dir: &Path, id: &str) -> GoPeer {
        let mut child = Command::new(bin)
            .arg("serve")
            .arg(dir)
            .arg(id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start refpeer");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("refpeer printed no address");
        let addr = line
            .strip_prefix("listening ")
            .expect("refpeer's first line is `listening ADDR`")
            .trim()
            .to_owned();
        GoPeer { child, addr }
    }
}

impl Drop for GoPeer {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.flush();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs refpeer with `args`, bounded; returns stdout.
fn refpeer(bin: &Path, args: &[&str]) -> String {
    let child = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run refpeer");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("refpeer finished in time")
        .expect("refpeer output");
    assert!(
        out.status.success(),
        "refpeer {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_go_client_fetches_blocks_and_the_roster_from_the_node() {
    let tmp = TempDir::new("go-client");
    let Some(bin) = build_refpeer(&tmp) else {
        return;
    };
    let store = TempDir::new("go-client-store");
    let file = tmp.join("input.bin");
    let data = random_file(&file, 40_000, 3);
    let chunk = import(&file, &store.0, 4096);
    let node = Node::start(&store.0, &[], &[]);
    // Ten blocks at once, one goroutine (and so one connection) each, as the reference's
    // client does; the node's default per-source quota is 4 sessions, so the extra
    // connections are refused with a 503 that Go must read as a response, not a transport
    // error. Every answer is either the exact block or that 503.
    let paths: Vec<String> = (1..=10)
        .map(|i| format!("/peer/v1/block/{chunk}/{i}"))
        .collect();
    let mut args = vec!["fetch", node.addr.as_str()];
    args.extend(paths.iter().map(String::as_str));
    let out = refpeer(&bin, &args);
    let mut ok = 0;
    for (i, line) in out.lines().enumerate() {
        let fields: Vec<&str> = line.split(' ').collect();
        assert!(
            !line.contains(" error "),
            "Go saw a transport error: {line}"
        );
        match fields[1] {
            "200" => {
                let start = i * 4096;
                let end = (start + 4096).min(data.len());
                assert_eq!(fields[4], hex(&data[start..end]), "block {}", i + 1);
                ok += 1;
            }
            "503" => {}
            other => panic!("unexpected status {other}: {line}"),
        }
    }
    assert!(
        ok >= 4,
        "fewer blocks than the per-source quota were served: {out}"
    );
    let roster = refpeer(
        &bin,
        &["roster", &node.addr, &"ef".repeat(32), "127.0.0.9:9"],
    );
    assert!(roster.starts_with("status 200"), "{roster}");
    assert!(
        roster.contains(&node.addr),
        "the roster names the node: {roster}"
    );
    // The node's roster carries its signed record (`seq`, `key`, `sig`), which Go's decoder
    // skipped above; the Go caller, which sent no record, is learned as unverified (default
    // `membership = "open"`): listed, with no record fields of its own.
    let again = refpeer(
        &bin,
        &["roster", &node.addr, &"ef".repeat(32), "127.0.0.9:9"],
    );
    assert!(
        again.contains(&"ef".repeat(32)),
        "Go caller learned: {again}"
    );
    let raw = raw_roster(&node.addr);
    let members: Vec<&str> = raw.split("},{").collect();
    let own = members
        .iter()
        .find(|m| m.contains(&node.addr))
        .expect("own entry");
    assert!(
        own.contains("\"sig\":\""),
        "the node signs its record: {raw}"
    );
    let go = members
        .iter()
        .find(|m| m.contains(&"ef".repeat(32)))
        .expect("Go caller listed");
    assert!(
        !go.contains("\"sig\""),
        "the Go caller is unverified: {raw}"
    );
}

/// The node's roster body, fetched anonymously with a blocking socket (bounded).
fn raw_roster(addr: &str) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"GET /peer/v1/roster HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out.split_once("\r\n\r\n").expect("a head").1.to_owned()
}

#[test]
fn the_node_reads_blocks_from_a_go_peer_and_learns_its_roster() {
    let tmp = TempDir::new("go-server");
    let Some(bin) = build_refpeer(&tmp) else {
        return;
    };
    let go_store = TempDir::new("go-server-store");
    let file = tmp.join("input.bin");
    let data = random_file(&file, 100_000, 5);
    let chunk = import(&file, &go_store.0, 16 * 1024);
    let go_id = "cd".repeat(32);
    let go = GoPeer::start(&bin, &go_store.0, &go_id);
    // One block with `get`.
    let one = tmp.join("block1");
    let got = run(
        &[
            "get",
            "--peer",
            &go.addr,
            &chunk,
            "1",
            "-o",
            one.to_str().expect("utf-8"),
        ],
        Duration::from_secs(30),
    );
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert_eq!(std::fs::read(&one).expect("block"), &data[..16 * 1024]);
    // The whole file with `fetch` seeded by the Go peer: the node's client reads the Go
    // roster (capitalised keys, `"Epoch":""`), places blocks over it, and validates every
    // block it reads from Go.
    let out = tmp.join("output.bin");
    let fetched = run(
        &[
            "fetch",
            &chunk,
            "--seed",
            &go.addr,
            "-o",
            out.to_str().expect("utf-8"),
        ],
        Duration::from_secs(60),
    );
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert_eq!(std::fs::read(&out).expect("output"), data);
    // A serving node seeded by the Go peer learns it (and the Go peer learns the node).
    let node_store = TempDir::new("go-server-node");
    let node = Node::start(&node_store.0, &[&go.addr], &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = node
            .lines
            .recv_timeout(left)
            .expect("node never learned the Go peer");
        if line
            .strip_prefix("members ")
            .is_some_and(|n| n.trim() == "2")
        {
            break;
        }
    }
    let roster = refpeer(&bin, &["roster", &go.addr, &"ab".repeat(32), "127.0.0.9:9"]);
    assert!(
        roster.contains(&node.addr),
        "the Go peer learned the node: {roster}"
    );
}
