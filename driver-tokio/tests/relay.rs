//! Relay over real sockets: a requester asks a relay-capable node (`RelaySource`) for a
//! block it does not hold, naming an origin; core decides whether to relay (the hop bound)
//! and the source fetches, caches and serves it, or passes an upstream refusal on as a
//! `502` that does not blame the relay. Loopback only, each test bounded.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use peerblock_core::breaker::State;
use peerblock_core::bytes::Bytes;
use peerblock_core::client::{BlockRequest, Ending};
use peerblock_core::server::{RelayConfig, ServerConfig};
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey, Hop};
use peerblock_tokio::client::{Client, ClientOptions, Peer};
use peerblock_tokio::metrics::Metrics;
use peerblock_tokio::relay::RelaySource;
use peerblock_tokio::server::{Server, ServerHandle, ServerOptions};
use peerblock_tokio::source::{FileStore, MemoryStore, DEFAULT_MAX_BLOCK_SIZE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const BOUND: Duration = Duration::from_secs(30);

async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(BOUND, body)
        .await
        .expect("test exceeded its time bound");
}

fn loopback() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)
}

fn block_path() -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([0x5a; 32]),
        index: 3,
    }
}

fn client() -> Client {
    Client::new(ClientOptions::new(
        Clock::new(std::time::Instant::now()),
        Metrics::new(),
    ))
    .expect("client")
}

/// An origin node serving `block` from memory.
async fn origin(block: Bytes) -> (ServerHandle, MemoryStore) {
    let store = MemoryStore::new();
    store.insert(block_path(), block);
    let config = Arc::new(ServerConfig::new("origin", "origin.test:1"));
    let options = ServerOptions::new(
        config,
        Arc::new(store.clone()),
        Clock::new(std::time::Instant::now()),
    );
    let handle = Server::bind(loopback(), options)
        .await
        .expect("bind origin")
        .spawn();
    (handle, store)
}

/// A relay-capable node over an empty file store in `dir`, relaying up to `max_hop`.
async fn relay(dir: &std::path::Path, max_hop: u32) -> (ServerHandle, FileStore) {
    let store = FileStore::new(dir, DEFAULT_MAX_BLOCK_SIZE);
    let mut config = ServerConfig::new("relay", "relay.test:1");
    config.relay = Some(RelayConfig {
        max_hop,
        ..RelayConfig::default()
    });
    let mut upstream = ClientOptions::new(Clock::new(std::time::Instant::now()), Metrics::new());
    upstream.peers.breaker = None;
    let upstream = Client::new(upstream).expect("relay client");
    let source = RelaySource::new(store.clone(), upstream, None);
    let options = ServerOptions::new(
        Arc::new(config),
        Arc::new(source),
        Clock::new(std::time::Instant::now()),
    );
    let handle = Server::bind(loopback(), options)
        .await
        .expect("bind relay")
        .spawn();
    (handle, store)
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("peerblock-relay-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[tokio::test]
async fn a_relay_fetches_a_missing_block_from_the_origin_caches_it_and_serves_it() {
    bounded(async {
        let dir = temp_dir("fetch");
        let block = Bytes::from(vec![0x42u8; 100_000]);
        let (origin, origin_store) = origin(block.clone()).await;
        let (relay, relay_store) = relay(&dir, 3).await;
        let url = format!("http://{}", origin.local_addr());
        let c = client();
        let peer = Peer::from_addr(relay.local_addr().to_string());
        let request = BlockRequest {
            path: block_path(),
            origin: Some(&url),
            hop: Hop(0),
        };
        let fetched = c.get(&peer, request).await;
        assert_eq!(fetched.bytes(), Some(&block), "{}", fetched.describe());
        assert_eq!(origin_store.fetches(), 1, "the relay asked the origin once");
        assert!(
            relay_store.file_of(&block_path()).is_file(),
            "the relay cached what it fetched"
        );
        // The second request is served from the relay's cache: the origin is not asked.
        let again = c.get(&peer, request).await;
        assert_eq!(again.bytes(), Some(&block));
        assert_eq!(origin_store.fetches(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

#[tokio::test]
async fn a_request_at_the_hop_bound_is_not_relayed_and_the_origin_is_never_asked() {
    bounded(async {
        let dir = temp_dir("hop");
        let (origin, origin_store) = origin(Bytes::from_static(b"block")).await;
        let (relay, _) = relay(&dir, 2).await;
        let url = format!("http://{}", origin.local_addr());
        let c = client();
        let peer = Peer::from_addr(relay.local_addr().to_string());
        let request = BlockRequest {
            path: block_path(),
            origin: Some(&url),
            hop: Hop(2),
        };
        let fetched = c.get(&peer, request).await;
        assert!(
            matches!(fetched.ending, Some(Ending::Miss)),
            "{}",
            fetched.describe()
        );
        assert_eq!(
            origin_store.fetches(),
            0,
            "a request at the bound is never relayed"
        );
        // One hop below the bound is relayed.
        let below = BlockRequest {
            hop: Hop(1),
            ..request
        };
        let fetched = c.get(&peer, below).await;
        assert_eq!(fetched.bytes().map(|b| &b[..]), Some(&b"block"[..]));
        assert_eq!(origin_store.fetches(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

/// An origin that refuses every request's credential with `403`.
async fn refusing_origin() -> SocketAddr {
    let listener = TcpListener::bind(loopback()).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s
                    .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_upstream_refusal_is_passed_on_as_502_without_blaming_the_relay() {
    bounded(async {
        let dir = temp_dir("refused");
        let origin = refusing_origin().await;
        let (relay, relay_store) = relay(&dir, 3).await;
        let url = format!("http://{origin}/presigned?sig=expired");
        let c = client();
        let peer = Peer::from_addr(relay.local_addr().to_string());
        let request = BlockRequest {
            path: block_path(),
            origin: Some(&url),
            hop: Hop(0),
        };
        // More upstream refusals than the breaker's failure threshold: none is the relay's
        // fault, so its circuit stays closed.
        for _ in 0..10 {
            let fetched = c.get(&peer, request).await;
            assert!(
                matches!(
                    fetched.ending,
                    Some(Ending::UpstreamRefused { status: 403 })
                ),
                "{}",
                fetched.describe()
            );
        }
        let now = c.now();
        let state = c.with_peers(|p| p.breaker().map(|b| b.state(now, &peer.id)));
        assert_eq!(
            state,
            Some(State::Closed),
            "the relay was blamed for its upstream's refusal"
        );
        assert!(
            !relay_store.file_of(&block_path()).exists(),
            "nothing cached"
        );
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}
