//! Embedding the tokio driver: a service serves blocks from its own `BlockSource` (here an
//! in-memory map) on 127.0.0.1, port 0, and reads one back through the reader; then it
//! shuts the server down and exits. Run: `cargo run -p peerblock-tokio --example embed`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use peerblock_core::bytes::Bytes;
use peerblock_core::placement::Key;
use peerblock_core::read::{LookupPeer, ReadConfig, ReadOutcome};
use peerblock_core::server::{ServerConfig, SourceRequest, SourceResult};
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};
use peerblock_tokio::client::{Client, ClientOptions, Peer};
use peerblock_tokio::metrics::Metrics;
use peerblock_tokio::reader::{BlockSpec, Candidate, FixedDiscovery, Reader};
use peerblock_tokio::server::{Server, ServerOptions};
use peerblock_tokio::source::{BlockFuture, BlockSource};

/// The integrator's own blocks: answered at once from memory.
struct MapSource(HashMap<BlockPath, Bytes>);

impl BlockSource for MapSource {
    fn fetch(&self, request: &SourceRequest) -> BlockFuture {
        let answer = match self.0.get(&request.path) {
            Some(block) => SourceResult::Found(block.clone()),
            None => SourceResult::Miss,
        };
        Box::pin(std::future::ready(answer))
    }
}

#[tokio::main]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = Clock::new(Instant::now());
    let path = BlockPath {
        key: ChunkKey::from_array([7; 32]),
        index: 0,
    };
    let block = Bytes::from_static(b"a hot block, served from the application's memory");
    let source = Arc::new(MapSource(HashMap::from([(path, block.clone())])));

    // The server: core's configuration, our source, the node's clock.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let config = Arc::new(ServerConfig::new("embed-node", addr.clone()));
    let server = Server::from_listener(listener, ServerOptions::new(config, source, clock))?;
    let handle = server.spawn();

    // The reader: a client, and a discovery that names our one server as the holder.
    let client = Client::new(ClientOptions::new(clock, Metrics::new()))?;
    let peer = Peer::from_addr(&addr);
    let holder = Candidate {
        peer: LookupPeer::new(peer.id),
        addr: peer.addr,
    };
    let discovery = Arc::new(FixedDiscovery(vec![holder]));
    let reader = Reader::new(client, discovery, ReadConfig::default(), 1)?;
    let expected = block.clone();
    let got = reader
        .read(BlockSpec {
            key: Key([7; 32]),
            path,
            expected: Some(block.len() as u64),
            validator: Some(Arc::new(move |b: &Bytes| *b == expected)),
            origin: None,
        })
        .await;
    match got.outcome {
        ReadOutcome::Found(bytes) => println!("read {} bytes from {addr}", bytes.len()),
        other => return Err(format!("read failed: {other:?}").into()),
    }
    handle.shutdown(Duration::from_secs(1)).await;
    Ok(())
}
