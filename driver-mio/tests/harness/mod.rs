//! The mio driver under the conformance harness (`peerblock_testkit::conformance`): each
//! server and each client on a two-worker runtime of its own. Included by the mio
//! driver's conformance file and by the mixed-pair file of the tokio driver.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use peerblock_common::client::{ClientOptions, Fetched, GetOptions, Peer};
use peerblock_common::metrics::Metrics;
use peerblock_common::read::{BlockSpec, Candidate, ReadResult};
use peerblock_core::client::{BlockRequest, Caller};
use peerblock_core::placement::PeerId;
use peerblock_core::rng::{child_seed, indexed_seed};
use peerblock_mio::{
    BodyPath, Client, FixedDiscovery, Reader, RelayOptions, Runtime, Server, ServerHandle,
    ServerOptions,
};
use peerblock_testkit::conformance::{
    ClientSpec, Driver, PeerState, ServerSpec, TestClient, TestServer,
};

/// Worker threads of every test runtime: two, so that cross-worker paths (a read on one
/// worker, its GET on another; accepts on both) are exercised.
const THREADS: usize = 2;

/// The mio driver, serving block bodies on `body`.
pub struct Mio {
    /// The server's body path.
    pub body: BodyPath,
}

impl Mio {
    /// The default (buffered) body path.
    pub fn buffered() -> Mio {
        Mio {
            body: BodyPath::Buffered,
        }
    }

    /// The zero-copy path.
    pub fn sendfile() -> Mio {
        Mio {
            body: BodyPath::Sendfile,
        }
    }
}

impl Driver for Mio {
    fn name(&self) -> String {
        match self.body {
            BodyPath::Buffered => "mio".into(),
            BodyPath::Sendfile => "mio-sendfile".into(),
        }
    }

    fn server(&self, spec: ServerSpec) -> Box<dyn TestServer> {
        let runtime = Runtime::new(THREADS, spec.clock).expect("mio runtime");
        let listener = std::net::TcpListener::bind(spec.listen).expect("bind the test server");
        let addr = listener.local_addr().expect("bound address");
        let mut config = spec.config;
        if config.advertised_addr.is_empty() {
            config.advertised_addr = addr.to_string();
        }
        let mut options = ServerOptions::new(Arc::new(config), spec.store);
        options.admission = spec.admission;
        options.membership = spec.membership;
        options.metrics = spec.metrics.clone();
        options.body = self.body;
        if let Some(relay) = spec.relay {
            // The relay's own client, without a breaker (the relay's docs say why).
            let mut upstream = ClientOptions::new(spec.clock, spec.metrics);
            upstream.peers.breaker = None;
            let client = Client::new(&runtime, upstream).expect("relay client");
            options.relay = Some(RelayOptions {
                client,
                parent: relay.parent.map_or(
                    peerblock_common::relay::Parent::None,
                    peerblock_common::relay::Parent::Fixed,
                ),
                counters: Default::default(),
            });
        }
        let handle = Server::from_listener(listener, options)
            .expect("server options")
            .start(&runtime);
        Box::new(MioServer {
            addr,
            handle: Some(handle),
            _runtime: runtime,
        })
    }

    fn client(&self, spec: ClientSpec) -> Box<dyn TestClient> {
        let runtime = Runtime::new(THREADS, spec.options.clock).expect("mio runtime");
        let client = Client::new(&runtime, spec.options).expect("client options");
        Box::new(MioClient {
            runtime,
            client,
            read: spec.read,
            seed: spec.seed,
            reads: AtomicU64::new(0),
        })
    }
}

struct MioServer {
    addr: SocketAddr,
    handle: Option<ServerHandle>,
    _runtime: Runtime,
}

impl MioServer {
    fn handle(&self) -> &ServerHandle {
        self.handle.as_ref().expect("server running")
    }
}

impl TestServer for MioServer {
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
        self.handle().wait_until(|_| condition(self), timeout)
    }

    fn shutdown(mut self: Box<Self>, grace: Duration) {
        let handle = self.handle.take().expect("server running");
        handle.shutdown(grace);
    }
}

struct MioClient {
    runtime: Runtime,
    client: Client,
    read: peerblock_core::read::ReadConfig,
    seed: u64,
    reads: AtomicU64,
}

impl TestClient for MioClient {
    fn get(&self, peer: &Peer, block: BlockRequest<'_>, options: GetOptions) -> Fetched {
        self.client.fetch_block(peer, block, options)
    }

    fn roster(&self, addr: &str, caller: Option<(&str, &str, Option<&str>)>) -> Fetched {
        let caller = caller.map(|(id, addr, record)| Caller { id, addr, record });
        self.client.fetch_roster(addr, None, caller)
    }

    fn read(&self, block: BlockSpec, candidates: Vec<Candidate>) -> ReadResult {
        let n = self.reads.fetch_add(1, Ordering::Relaxed);
        let seed = indexed_seed(child_seed(self.seed, "conformance"), n);
        let reader = Reader::new(
            &self.runtime,
            self.client.clone(),
            Arc::new(FixedDiscovery(candidates)),
            self.read.clone(),
            seed,
        )
        .expect("read config");
        reader.read(block)
    }

    fn idle_connections(&self) -> usize {
        self.client.idle_connections()
    }

    fn peer_state(&self, peer: &PeerId) -> PeerState {
        let now = self.client.now();
        self.client.with_peers(|p| PeerState::of(p, now, peer))
    }
}
