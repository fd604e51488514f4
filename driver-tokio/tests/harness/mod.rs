//! The tokio driver under the conformance harness (`peerblock_testkit::conformance`):
//! `Tokio` implements the blocking harness over `peerblock-tokio`, each server and each
//! client on a multi-threaded runtime of its own. Included by the tokio driver's
//! conformance file and its mixed-pair file.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use peerblock_common::client::{Fetched, GetOptions, Peer};
use peerblock_common::metrics::Metrics;
use peerblock_common::read::{BlockSpec, Candidate, ReadResult};
use peerblock_core::client::{BlockRequest, Caller};
use peerblock_core::placement::PeerId;
use peerblock_core::rng::{child_seed, indexed_seed};
use peerblock_testkit::conformance::{
    ClientSpec, Driver, PeerState, ServerSpec, TestClient, TestServer,
};
use peerblock_tokio::client::{Client, ClientOptions};
use peerblock_tokio::reader::{FixedDiscovery, Reader};
use peerblock_tokio::relay::RelaySource;
use peerblock_tokio::server::{Server, ServerHandle, ServerOptions};
use peerblock_tokio::source::BlockSource;
use tokio::runtime::Runtime;

/// The tokio driver under the conformance harness.
pub struct Tokio;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

impl Driver for Tokio {
    fn name(&self) -> String {
        "tokio".into()
    }

    fn server(&self, spec: ServerSpec) -> Box<dyn TestServer> {
        let rt = runtime();
        let handle = rt.block_on(async {
            let listener = tokio::net::TcpListener::bind(spec.listen)
                .await
                .expect("bind the test server");
            let addr = listener.local_addr().expect("bound address");
            let mut config = spec.config;
            if config.advertised_addr.is_empty() {
                config.advertised_addr = addr.to_string();
            }
            let source: Arc<dyn BlockSource> = match spec.relay {
                None => Arc::new(spec.store),
                Some(relay) => {
                    // The relay's own client, without a breaker (relay.rs's module docs).
                    let mut upstream = ClientOptions::new(spec.clock, spec.metrics.clone());
                    upstream.peers.breaker = None;
                    let upstream = Client::new(upstream).expect("relay client");
                    Arc::new(RelaySource::new(spec.store, upstream, relay.parent))
                }
            };
            let mut options = ServerOptions::new(Arc::new(config), source, spec.clock);
            options.admission = spec.admission;
            options.membership = spec.membership;
            options.metrics = spec.metrics;
            Server::from_listener(listener, options)
                .expect("server options")
                .spawn()
        });
        Box::new(TokioServer {
            addr: handle.local_addr(),
            handle: Some(handle),
            rt: Some(rt),
        })
    }

    fn client(&self, spec: ClientSpec) -> Box<dyn TestClient> {
        let client = Client::new(spec.options).expect("client options");
        Box::new(TokioClient {
            rt: Some(runtime()),
            client,
            read: spec.read,
            seed: spec.seed,
            reads: AtomicU64::new(0),
        })
    }
}

struct TokioServer {
    addr: SocketAddr,
    // Dropped before the runtime (fields drop in order; `Drop` takes both anyway).
    handle: Option<ServerHandle>,
    rt: Option<Runtime>,
}

impl TokioServer {
    fn handle(&self) -> &ServerHandle {
        self.handle.as_ref().expect("server running")
    }

    fn rt(&self) -> &Runtime {
        self.rt.as_ref().expect("runtime running")
    }
}

impl Drop for TokioServer {
    fn drop(&mut self) {
        // Dropping the handle without shutdown closes everything at once.
        if let Some(h) = self.handle.take() {
            let _guard = self.rt.as_ref().map(Runtime::enter);
            drop(h);
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

impl TestServer for TokioServer {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn sessions(&self) -> usize {
        self.handle().sessions()
    }

    fn metrics(&self) -> Metrics {
        self.handle().metrics().clone()
    }

    fn wait_until(
        &self,
        condition: &mut dyn FnMut(&dyn TestServer) -> bool,
        timeout: Duration,
    ) -> bool {
        let handle = self.handle();
        self.rt().block_on(async {
            tokio::time::timeout(timeout, handle.wait_until(|_| condition(self)))
                .await
                .is_ok()
        })
    }

    fn shutdown(mut self: Box<Self>, grace: Duration) {
        let handle = self.handle.take().expect("server running");
        self.rt().block_on(handle.shutdown(grace));
    }
}

struct TokioClient {
    rt: Option<Runtime>,
    client: Client,
    read: peerblock_core::read::ReadConfig,
    seed: u64,
    reads: AtomicU64,
}

impl TokioClient {
    fn rt(&self) -> &Runtime {
        self.rt.as_ref().expect("runtime running")
    }
}

impl Drop for TokioClient {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

impl TestClient for TokioClient {
    fn get(&self, peer: &Peer, block: BlockRequest<'_>, options: GetOptions) -> Fetched {
        self.rt()
            .block_on(self.client.fetch_block(peer, block, options))
    }

    fn roster(&self, addr: &str, caller: Option<(&str, &str, Option<&str>)>) -> Fetched {
        let caller = caller.map(|(id, addr, record)| Caller { id, addr, record });
        self.rt()
            .block_on(self.client.fetch_roster(addr, None, caller))
    }

    fn read(&self, block: BlockSpec, candidates: Vec<Candidate>) -> ReadResult {
        // One reader per call (its discovery is this call's candidates), seeded so that
        // successive calls draw successive seeds as one reader's reads would.
        let n = self.reads.fetch_add(1, Ordering::Relaxed);
        let seed = indexed_seed(child_seed(self.seed, "conformance"), n);
        let reader = Reader::new(
            self.client.clone(),
            Arc::new(FixedDiscovery(candidates)),
            self.read.clone(),
            seed,
        )
        .expect("read config");
        self.rt().block_on(reader.read(block))
    }

    fn idle_connections(&self) -> usize {
        self.client.idle_connections()
    }

    fn peer_state(&self, peer: &PeerId) -> PeerState {
        let now = self.client.now();
        self.client.with_peers(|p| PeerState::of(p, now, peer))
    }
}
