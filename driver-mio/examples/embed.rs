//! Embedding the mio driver: a program puts its own blocks (here an in-memory map) into the
//! `FileStore` the mio server serves (a temporary directory), serves them on 127.0.0.1,
//! port 0, reads one back through the reader, shuts the server down and exits.
//! Run: `cargo run -p peerblock-mio --example embed`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use peerblock_common::client::{ClientOptions, Peer};
use peerblock_common::metrics::Metrics;
use peerblock_common::read::{BlockSpec, Candidate};
use peerblock_common::store::{FileStore, DEFAULT_MAX_BLOCK_SIZE};
use peerblock_core::bytes::Bytes;
use peerblock_core::placement::Key;
use peerblock_core::read::{LookupPeer, ReadConfig, ReadOutcome};
use peerblock_core::server::ServerConfig;
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};
use peerblock_mio::{Client, FixedDiscovery, Reader, Runtime, Server, ServerOptions};

pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = BlockPath {
        key: ChunkKey::from_array([7; 32]),
        index: 0,
    };
    let block = Bytes::from_static(b"a hot block, put into the store from the application");
    let blocks = HashMap::from([(path, block.clone())]);

    // The mio server serves a `FileStore`: the application's blocks go into one.
    let root = std::env::temp_dir().join(format!("peerblock-embed-{}", std::process::id()));
    let store = FileStore::new(&root, DEFAULT_MAX_BLOCK_SIZE);
    for (path, bytes) in &blocks {
        store.put_blocking(path, bytes)?;
    }

    // Two worker threads carry the server, the client and the reader alike.
    let clock = Clock::new(Instant::now());
    let runtime = Runtime::new(2, clock)?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    let config = Arc::new(ServerConfig::new("embed-node", addr.clone()));
    let handle =
        Server::from_listener(listener, ServerOptions::new(config, store))?.start(&runtime);

    // The reader: a client, and a discovery that names our one server as the holder.
    let client = Client::new(&runtime, ClientOptions::new(clock, Metrics::new()))?;
    let peer = Peer::from_addr(&addr);
    let holder = Candidate {
        peer: LookupPeer::new(peer.id),
        addr: peer.addr,
    };
    let discovery = Arc::new(FixedDiscovery(vec![holder]));
    let reader = Reader::new(&runtime, client, discovery, ReadConfig::default(), 1)?;
    let expected = block.clone();
    let got = reader.read(BlockSpec {
        key: Key([7; 32]),
        path,
        expected: Some(block.len() as u64),
        validator: Some(Arc::new(move |b: &Bytes| *b == expected)),
        origin: None,
    });
    handle.shutdown(Duration::from_secs(1));
    std::fs::remove_dir_all(&root)?;
    match got.outcome {
        ReadOutcome::Found(bytes) => println!("read {} bytes from {addr}", bytes.len()),
        other => return Err(format!("read failed: {other:?}").into()),
    }
    Ok(())
}
