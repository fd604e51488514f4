//! Rules of the mio driver's runtime that the conformance suite (one server per runtime)
//! cannot see: entries of different servers and clients share a worker's loop and timers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use peerblock_common::store::FileStore;
use peerblock_core::server::ServerConfig;
use peerblock_core::time::Clock;
use peerblock_mio::{Runtime, Server, ServerOptions};

fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("peerblock-mio-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn server(rt: &Runtime, store: &FileStore, idle: Duration) -> peerblock_mio::ServerHandle {
    let mut config = ServerConfig::new("node", "node.test:1");
    config.idle_timeout = idle;
    let options = ServerOptions::new(Arc::new(config), store.clone());
    Server::bind("127.0.0.1:0".parse().unwrap(), options)
        .unwrap()
        .start(rt)
}

/// One server's shutdown drives that server's entries only: a connection of another
/// server on the same worker keeps its timer, so its idle timeout still closes it.
#[test]
fn a_servers_shutdown_leaves_the_timers_of_other_entries_on_its_worker_armed() {
    let rt = Runtime::new(1, Clock::new(std::time::Instant::now())).unwrap();
    let dir = scratch("phase");
    let store = FileStore::new(&dir, 1 << 20);
    let a = server(&rt, &store, Duration::from_secs(120));
    let b = server(&rt, &store, Duration::from_millis(300));
    let mut conn = TcpStream::connect(b.local_addr()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // One request answered (a 404, kept alive): every readiness event of the connection
    // has been handled and its idle timer is armed before A's phase changes.
    let path = format!("/peer/v1/block/{}/1", "ab".repeat(32));
    write!(conn, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(conn.read(&mut byte).unwrap(), 1, "the 404's head");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 404 "), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).unwrap();
    a.shutdown(Duration::ZERO);
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = conn
        .read(&mut buf)
        .expect("B closes the idle connection, not a read timeout");
    assert_eq!(n, 0, "a FIN, no bytes");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "closed at B's idle timeout: {:?}",
        started.elapsed()
    );
    b.shutdown(Duration::from_secs(1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two servers on one runtime each answer their own requests (their entries share the
/// workers, never their state).
#[test]
fn two_servers_on_one_runtime_serve_independently() {
    let rt = Runtime::new(2, Clock::new(std::time::Instant::now())).unwrap();
    let (da, db) = (scratch("two-a"), scratch("two-b"));
    let (sa, sb) = (FileStore::new(&da, 1 << 20), FileStore::new(&db, 1 << 20));
    let path = peerblock_core::wire::BlockPath {
        key: peerblock_core::wire::ChunkKey::from_array([3; 32]),
        index: 1,
    };
    sa.put_blocking(&path, b"from a").unwrap();
    let a = server(&rt, &sa, Duration::from_secs(120));
    let b = server(&rt, &sb, Duration::from_secs(120));
    let get = |addr: std::net::SocketAddr| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    };
    let from_a = get(a.local_addr());
    assert!(from_a.starts_with("HTTP/1.1 200 "), "{from_a}");
    assert!(from_a.ends_with("from a"), "{from_a}");
    let from_b = get(b.local_addr());
    assert!(from_b.starts_with("HTTP/1.1 404 "), "{from_b}");
    a.shutdown(Duration::from_secs(1));
    b.shutdown(Duration::from_secs(1));
    let _ = std::fs::remove_dir_all(&da);
    let _ = std::fs::remove_dir_all(&db);
}
