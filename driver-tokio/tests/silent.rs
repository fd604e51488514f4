//! `[listener] when_full = "silent"` (the reference transport, for `swarm` replays) over
//! real sockets: while every session is taken the listener accepts nothing and a waiting
//! dial is served once a session frees; a connection that would be refused is closed
//! without a byte; the default still answers 503 at once.

use std::sync::Arc;
use std::time::Duration;

use peerblock_core::bytes::Bytes;
use peerblock_core::server::{AdmissionConfig, ServerConfig};
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};
use peerblock_tokio::server::{Server, ServerHandle, ServerOptions};
use peerblock_tokio::source::MemoryStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn path() -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([9; 32]),
        index: 1,
    }
}

async fn node(silent: bool, admission: AdmissionConfig) -> ServerHandle {
    node_with_channels(silent, admission, None).await
}

async fn node_with_channels(
    silent: bool,
    admission: AdmissionConfig,
    channels: Option<usize>,
) -> ServerHandle {
    let store = MemoryStore::new();
    store.insert(path(), Bytes::from(vec![1u8; 1000]));
    let config = Arc::new(ServerConfig::new("s", "s.test:1"));
    let mut o = ServerOptions::new(
        config,
        Arc::new(store),
        Clock::new(std::time::Instant::now()),
    );
    o.admission = admission;
    o.silent_when_full = silent;
    o.silent_channels = channels;
    Server::bind("127.0.0.1:0".parse().unwrap(), o)
        .await
        .unwrap()
        .spawn()
}

async fn request(addr: std::net::SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(format!("GET {} HTTP/1.1\r\nHost: t\r\n\r\n", path()).as_bytes())
        .await
        .unwrap();
    c
}

/// The status of the first response on `c` within `within`; `None` if nothing came,
/// `Some(0)` if the connection closed without a byte.
async fn status(c: &mut TcpStream, within: Duration) -> Option<u16> {
    let mut buf = vec![0u8; 2048];
    match tokio::time::timeout(within, c.read(&mut buf)).await {
        Err(_) => None,
        Ok(Ok(0)) | Ok(Err(_)) => Some(0),
        Ok(Ok(n)) => {
            let text = String::from_utf8_lossy(&buf[..n]);
            text.split(' ').nth(1).and_then(|s| s.parse().ok())
        }
    }
}

fn one_session() -> AdmissionConfig {
    AdmissionConfig {
        max_sessions: 1,
        max_sessions_per_source: 1,
        max_requests: 4,
        max_requests_per_session: 2,
        ..AdmissionConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_full_listener_accepts_nothing_until_a_session_frees() {
    let handle = node(true, one_session()).await;
    let addr = handle.local_addr();
    let mut first = request(addr).await;
    assert_eq!(status(&mut first, Duration::from_secs(5)).await, Some(200));
    // Every session is taken: the second dial waits in the accept queue, unanswered.
    let mut second = request(addr).await;
    assert_eq!(status(&mut second, Duration::from_millis(500)).await, None);
    // The first connection closes: the second is accepted and served.
    drop(first);
    assert_eq!(status(&mut second, Duration::from_secs(5)).await, Some(200));
    handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_listener_closes_what_it_would_refuse_without_a_byte() {
    // Two sessions, one per source: the second connection from 127.0.0.1 is refused at
    // accept (source-sessions) and, silent, closed without its 503.
    let admission = AdmissionConfig {
        max_sessions: 2,
        ..one_session()
    };
    let handle = node(true, admission.clone()).await;
    let mut first = request(handle.local_addr()).await;
    assert_eq!(status(&mut first, Duration::from_secs(5)).await, Some(200));
    let mut second = request(handle.local_addr()).await;
    assert_eq!(status(&mut second, Duration::from_secs(5)).await, Some(0));
    handle.shutdown(Duration::from_secs(1)).await;
    // The default refuses explicitly.
    let handle = node(false, admission).await;
    let mut first = request(handle.local_addr()).await;
    assert_eq!(status(&mut first, Duration::from_secs(5)).await, Some(200));
    let mut second = request(handle.local_addr()).await;
    assert_eq!(status(&mut second, Duration::from_secs(5)).await, Some(503));
    handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_channel_table_counts_sessions_and_requests() {
    // Three channels: each session holds one, each request in progress another.
    let admission = AdmissionConfig {
        max_sessions: 4,
        max_sessions_per_source: 4,
        max_requests: 16,
        max_requests_per_session: 2,
        ..AdmissionConfig::default()
    };
    let handle = node_with_channels(true, admission, Some(3)).await;
    let addr = handle.local_addr();
    // A response's bytes reach the client before the server has acknowledged them and
    // released the request's channel: wait for the release before the next request.
    let released = || async {
        tokio::time::timeout(
            Duration::from_secs(5),
            handle.wait_until(|h| h.requests() == 0),
        )
        .await
        .expect("the request's channel is released once its response is written");
    };
    let mut first = request(addr).await;
    assert_eq!(status(&mut first, Duration::from_secs(5)).await, Some(200));
    released().await;
    let mut second = request(addr).await;
    assert_eq!(status(&mut second, Duration::from_secs(5)).await, Some(200));
    released().await;
    // Two idle sessions hold two channels: a third session fits, its request does not.
    let mut third = request(addr).await;
    assert_eq!(status(&mut third, Duration::from_secs(5)).await, Some(0));
    handle.shutdown(Duration::from_secs(1)).await;
}
