//! Upload pacing in the tokio server over real loopback sockets: a node's budget is what
//! its responses get, shared by its connections; the per-connection ceiling holds one
//! connection to its rate while others use the rest; without pacing nothing waits. And the
//! client side of `swarm`'s emulated links: `ClientOptions::link_delay`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use peerblock_core::bytes::Bytes;
use peerblock_core::client::BlockRequest;
use peerblock_core::pace::PaceConfig;
use peerblock_core::server::ServerConfig;
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};
use peerblock_tokio::client::{Client, ClientOptions, GetOptions, Peer};
use peerblock_tokio::metrics::Metrics;
use peerblock_tokio::pace::UploadPacing;
use peerblock_tokio::server::{Server, ServerHandle, ServerOptions};
use peerblock_tokio::source::MemoryStore;

const BLOCK: usize = 200_000;

fn path(index: u64) -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([7; 32]),
        index,
    }
}

async fn node(pacing: impl FnOnce(Clock) -> UploadPacing) -> ServerHandle {
    let clock = Clock::new(Instant::now());
    let store = MemoryStore::new();
    for i in 0..4 {
        store.insert(path(i), Bytes::from(vec![i as u8; BLOCK]));
    }
    let config = Arc::new(ServerConfig::new("paced", "paced.test:1"));
    let mut o = ServerOptions::new(config, Arc::new(store), clock);
    o.pacing = pacing(clock);
    Server::bind("127.0.0.1:0".parse().unwrap(), o)
        .await
        .expect("bind")
        .spawn()
}

/// Fetches blocks `0..n` at once over `n` connections; the time until all arrived.
async fn fetch_all(handle: &ServerHandle, n: u64) -> Duration {
    let clock = Clock::new(Instant::now());
    let client = Client::new(ClientOptions::new(clock, Metrics::new())).unwrap();
    let peer = Peer::from_addr(handle.local_addr().to_string());
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (client, peer) = (client.clone(), peer.clone());
        tasks.spawn(async move {
            let opts = GetOptions {
                expected: Some(BLOCK as u64),
                ..GetOptions::default()
            };
            let f = client
                .fetch_block(&peer, BlockRequest::new(path(i)), opts)
                .await;
            assert_eq!(f.bytes().map(|b| b.len()), Some(BLOCK), "{}", f.describe());
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    started.elapsed()
}

fn now(clock: Clock) -> peerblock_core::time::Instant {
    clock.to_core(Instant::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_budget_is_shared_by_its_connections() {
    // 400 kB/s (20 kB burst): two 200 kB responses at once take about a second together,
    // one alone about half that.
    let rate = 400_000;
    let handle =
        node(|c| UploadPacing::new(Some(PaceConfig::with_rate(rate)), None, now(c)).unwrap()).await;
    let one = fetch_all(&handle, 1).await;
    assert!(
        one >= Duration::from_millis(400) && one < Duration::from_millis(900),
        "one block took {one:?}"
    );
    let two = fetch_all(&handle, 2).await;
    assert!(
        two >= Duration::from_millis(850) && two < Duration::from_millis(1600),
        "two blocks at once took {two:?}"
    );
    handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_connection_ceiling_holds_each_connection_to_its_rate() {
    // 400 kB/s per connection under a large node budget: two connections at once each
    // take about half a second, not a second.
    let handle = node(|c| {
        UploadPacing::new(
            Some(PaceConfig::with_rate(100_000_000)),
            Some(PaceConfig::with_rate(400_000)),
            now(c),
        )
        .unwrap()
    })
    .await;
    let two = fetch_all(&handle, 2).await;
    assert!(
        two >= Duration::from_millis(400) && two < Duration::from_millis(900),
        "two blocks at once took {two:?}"
    );
    handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pacing_nothing_waits() {
    let handle = node(|_| UploadPacing::off()).await;
    let four = fetch_all(&handle, 4).await;
    assert!(
        four < Duration::from_millis(300),
        "four blocks took {four:?}"
    );
    handle.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emulated_link_delay_costs_two_round_trips_fresh_and_one_pooled() {
    let handle = node(|_| UploadPacing::off()).await;
    let clock = Clock::new(Instant::now());
    let mut o = ClientOptions::new(clock, Metrics::new());
    let one_way = Duration::from_millis(100);
    o.link_delay = Some(peerblock_tokio::client::LinkDelay(Arc::new(move |_| {
        one_way
    })));
    let client = Client::new(o).unwrap();
    let peer = Peer::from_addr(handle.local_addr().to_string());
    let opts = || GetOptions {
        expected: Some(BLOCK as u64),
        ..GetOptions::default()
    };
    // Fresh: the handshake (a round trip), the request (one way), the response (one way).
    let f = client
        .fetch_block(&peer, BlockRequest::new(path(0)), opts())
        .await;
    assert!(f.bytes().is_some(), "{}", f.describe());
    assert!(
        f.elapsed >= 4 * one_way && f.elapsed < 4 * one_way + Duration::from_millis(400),
        "{:?}",
        f.elapsed
    );
    // Pooled: one round trip.
    let f = client
        .fetch_block(&peer, BlockRequest::new(path(1)), opts())
        .await;
    assert!(f.pooled, "reused");
    assert!(
        f.elapsed >= 2 * one_way && f.elapsed < 2 * one_way + Duration::from_millis(400),
        "{:?}",
        f.elapsed
    );
    handle.shutdown(Duration::from_secs(1)).await;
}
