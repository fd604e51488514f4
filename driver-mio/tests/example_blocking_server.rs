//! The blocking `std::net` server of docs/integrating.md (examples/blocking_server.rs),
//! run in-process through its `serve` and checked with a plain `std::net` client: a
//! byte-exact 200, a 404, a 400, and a 503 refusal once admission is full. Loopback,
//! port 0, every wait bounded by the client sockets' timeouts.

#[allow(dead_code)] // the example's `main` is not called here
#[path = "../examples/blocking_server.rs"]
mod example;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use peerblock_common::store::{FileStore, DEFAULT_MAX_BLOCK_SIZE};
use peerblock_core::server::AdmissionConfig;
use peerblock_core::wire::{BlockPath, ChunkKey};

/// Longest any one socket call of the client may block.
const BOUND: Duration = Duration::from_secs(10);

static DIRS: AtomicU64 = AtomicU64::new(0);

/// A store directory of its own, removed when the test ends.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn block_path(index: u64) -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([0x5a; 32]),
        index,
    }
}

/// The example's server on 127.0.0.1 port 0 serving a store holding `block_path(1)`
/// (returned). The listener is bound before `serve` runs, so connects wait in its
/// backlog: nothing to wait for.
fn start(admission: AdmissionConfig) -> (SocketAddr, Vec<u8>, TempDir) {
    let dir = std::env::temp_dir().join(format!(
        "peerblock-blocking-server-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::Relaxed)
    ));
    let store = FileStore::new(&dir, DEFAULT_MAX_BLOCK_SIZE);
    let block: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
    store
        .put_blocking(&block_path(1), &block)
        .expect("store the block");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    std::thread::spawn(move || example::serve(listener, store, admission));
    (addr, block, TempDir(dir))
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(BOUND)).expect("read timeout");
    stream
        .set_write_timeout(Some(BOUND))
        .expect("write timeout");
    stream
}

struct Response {
    status: u16,
    head: String,
    body: Vec<u8>,
}

/// Sends `GET path` on `stream` and reads one response (its head, then exactly
/// `Content-Length` body bytes).
fn get(stream: &mut TcpStream, path: &str) -> Response {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("send request");
    let mut buf = Vec::new();
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).expect("read response head");
        assert!(n > 0, "connection closed before a response head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..end].to_vec()).expect("ASCII head");
    let status = head[9..12].parse().expect("status code");
    let len: usize = header(&head, "content-length")
        .expect("Content-Length")
        .parse()
        .expect("numeric Content-Length");
    let mut body = buf[end..].to_vec();
    let mut rest = vec![0u8; len.saturating_sub(body.len())];
    stream.read_exact(&mut rest).expect("read response body");
    body.extend_from_slice(&rest);
    assert_eq!(body.len(), len, "no bytes beyond Content-Length");
    Response { status, head, body }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Reads until the server's FIN (a bounded read: the socket's timeout fails the test).
fn read_to_eof(stream: &mut TcpStream) {
    let mut rest = Vec::new();
    stream
        .read_to_end(&mut rest)
        .expect("the server closes its side");
}

#[test]
fn serves_a_block_byte_exact_on_a_kept_alive_connection() {
    let (addr, block, _dir) = start(AdmissionConfig::default());
    let mut stream = connect(addr);
    for _ in 0..2 {
        let r = get(&mut stream, &block_path(1).to_string());
        assert_eq!(r.status, 200, "{}", r.head);
        assert!(
            r.body == block,
            "the body is the stored block, byte for byte"
        );
        assert_eq!(header(&r.head, "x-dart-node"), Some("blocking-server"));
    }
}

#[test]
fn a_missing_block_is_404() {
    let (addr, _, _dir) = start(AdmissionConfig::default());
    let mut stream = connect(addr);
    let r = get(&mut stream, &block_path(2).to_string());
    assert_eq!(r.status, 404, "{}", r.head);
    // The connection stays usable.
    assert_eq!(get(&mut stream, &block_path(1).to_string()).status, 200);
}

#[test]
fn a_malformed_path_is_400() {
    let (addr, _, _dir) = start(AdmissionConfig::default());
    let mut stream = connect(addr);
    let r = get(&mut stream, "/peer/v1/block/not-hex/1");
    assert_eq!(r.status, 400, "{}", r.head);
}

#[test]
fn a_full_node_answers_503_then_admits_again_once_the_session_is_released() {
    let admission = AdmissionConfig {
        max_sessions: 1,
        max_sessions_per_source: 1,
        ..AdmissionConfig::default()
    };
    let (addr, _, _dir) = start(admission);
    // The first connection holds the node's one session (its answer proves it admitted).
    let mut first = connect(addr);
    assert_eq!(get(&mut first, &block_path(1).to_string()).status, 200);
    // The second is refused at accept, yet its request is read and answered with the 503.
    let mut second = connect(addr);
    let r = get(&mut second, &block_path(1).to_string());
    assert_eq!(r.status, 503, "{}", r.head);
    let reason = header(&r.head, "x-peerblock-refused").expect("a refusal reason");
    assert!(
        ["sessions", "source-sessions"].contains(&reason),
        "{reason}"
    );
    assert!(header(&r.head, "retry-after").is_some(), "{}", r.head);
    // Then the server half-closes (it lingers, reading, until our FIN).
    read_to_eof(&mut second);
    // The first connection is unaffected.
    assert_eq!(get(&mut first, &block_path(1).to_string()).status, 200);
    // Closing it releases the session (core's `close` on the thread's exit): a new
    // connection is admitted. Its accept may race the release, so a refusal is retried,
    // each attempt a full bounded round trip.
    drop(first);
    let deadline = std::time::Instant::now() + BOUND;
    loop {
        let mut next = connect(addr);
        let r = get(&mut next, &block_path(1).to_string());
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503, "{}", r.head);
        assert!(
            std::time::Instant::now() < deadline,
            "the session was never released"
        );
    }
}

#[test]
fn docs_integrating_shows_this_example_verbatim() {
    let page = include_str!("../../docs/integrating.md");
    let code = include_str!("../examples/blocking_server.rs");
    assert!(
        page.contains(&format!("```rust\n{code}```\n")),
        "docs/integrating.md must show examples/blocking_server.rs whole and unchanged"
    );
}
