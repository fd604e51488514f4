//! The driver conformance suite: one set of behaviours, written once against a small
//! driver-neutral harness, that every peerblock driver must pass.
//!
//! A driver is **conformant** when every test of [`conformance_suite!`](crate::conformance_suite) passes against it,
//! and against each mixed pair with the other drivers (its client against their servers
//! and the reverse: [`Mixed`]).
//!
//! # Running it against a driver
//!
//! 1. Implement [`Driver`] for a small type of your test crate: [`Driver::server`] starts
//!    your server as [`ServerSpec`] says (on loopback, port 0, serving the given
//!    [`FileStore`]) and returns a [`TestServer`];
//!    [`Driver::client`] builds your client and reader and returns a [`TestClient`]. Every
//!    method of the harness is blocking: an async driver runs its own runtime inside its
//!    implementation (the tokio driver keeps one multi-threaded runtime per server and per client), a
//!    readiness-loop driver its own threads.
//! 2. In one test file: `peerblock_testkit::conformance_suite!(MyDriver::default());`. The
//!    macro expands to one `#[test]` per behaviour, each named for the rule it checks.
//! 3. For mixed pairs: `conformance_suite!(mixed_tokio_server, Mixed::new(Tokio, Mine));`
//!    (a module name, then the driver).
//!
//! Every test talks to real sockets on 127.0.0.0/8 with port 0, bounds every wait (a test
//! that would hang fails after [`TEST_BOUND`]), and waits on events, never on timers. The
//! misbehaving peers the client tests need (closed, blackholed, silent, stalling,
//! oversized, refusing) are plain `std::net` servers of this module ([`canned`]), the
//! same for every driver.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use peerblock_common::client::{ClientOptions, Fetched, GetOptions, Peer};
use peerblock_common::metrics::Metrics;
use peerblock_common::read::{BlockSpec, Candidate, ReadResult};
use peerblock_common::store::FileStore;
use peerblock_common::SharedMembership;
use peerblock_core::breaker::State;
use peerblock_core::client::{BlockRequest, Peers};
use peerblock_core::placement::PeerId;
use peerblock_core::read::PeerView;
use peerblock_core::read::ReadConfig;
use peerblock_core::server::{AdmissionConfig, ServerConfig};
use peerblock_core::time::{Clock, Instant};

pub mod canned;
pub mod suite;

/// Longest any one conformance test may take before it is failed as hung.
pub const TEST_BOUND: Duration = Duration::from_secs(60);

/// A driver under test: starts servers and clients.
pub trait Driver: Send + Sync {
    /// The driver's name, for messages (`tokio`, `mio`, `tokio-server+mio-client`).
    fn name(&self) -> String;

    /// Starts a server as `spec` says and returns once it accepts connections.
    fn server(&self, spec: ServerSpec) -> Box<dyn TestServer>;

    /// A client (and its reader) as `spec` says.
    fn client(&self, spec: ClientSpec) -> Box<dyn TestClient>;
}

/// How the relay of a [`ServerSpec`] fetches missed blocks.
#[derive(Clone, Debug, Default)]
pub struct RelaySpec {
    /// Fetch from this parent (`HOST:PORT`) instead of the request's origin.
    pub parent: Option<String>,
}

/// Everything a test server is started with.
#[derive(Clone)]
pub struct ServerSpec {
    /// Where to listen: a loopback address, port 0 (the driver binds and reports the port
    /// through [`TestServer::addr`]).
    pub listen: SocketAddr,
    /// Core's per-connection configuration. If its `advertised_addr` is empty the driver
    /// sets it to the bound address.
    pub config: ServerConfig,
    /// Core's admission limits.
    pub admission: AdmissionConfig,
    /// The blocks served (the harness puts them in before starting the server). A
    /// file-serving driver serves them from their files; nothing may be cached up front.
    pub store: FileStore,
    /// The node's roster table, answered from and learned into; `None` answers a roster
    /// of the node alone.
    pub membership: Option<SharedMembership>,
    /// `Some`: relay what the store misses (with `config.relay` set); `None`:
    /// transport-only.
    pub relay: Option<RelaySpec>,
    /// The node's clock.
    pub clock: Clock,
    /// The node's metrics.
    pub metrics: Metrics,
}

impl ServerSpec {
    /// A transport-only node `node_id` on `ip` (port 0) serving `store`, with core's
    /// default limits and fresh metrics.
    pub fn new(ip: IpAddr, node_id: &str, store: FileStore) -> ServerSpec {
        ServerSpec {
            listen: SocketAddr::new(ip, 0),
            config: ServerConfig::new(node_id, ""),
            admission: AdmissionConfig::default(),
            store,
            membership: None,
            relay: None,
            clock: Clock::new(std::time::Instant::now()),
            metrics: Metrics::new(),
        }
    }
}

/// A running server under test.
pub trait TestServer: Send + Sync {
    /// The bound address.
    fn addr(&self) -> SocketAddr;

    /// Sessions core's admission holds now.
    fn sessions(&self) -> usize;

    /// The server's metrics.
    fn metrics(&self) -> Metrics;

    /// Blocks until `condition` holds, checked now and again whenever a connection is
    /// admitted, refused or closed; `false` if `timeout` passed first.
    fn wait_until(
        &self,
        condition: &mut dyn FnMut(&dyn TestServer) -> bool,
        timeout: Duration,
    ) -> bool;

    /// Graceful shutdown: stop accepting at once, let in-flight responses finish for at
    /// most `grace`, then close everything. Returns when every connection has ended.
    fn shutdown(self: Box<Self>, grace: Duration);
}

/// Everything a test client is built with.
#[derive(Clone)]
pub struct ClientSpec {
    /// The client's options (its clock and metrics inside).
    pub options: ClientOptions,
    /// The reader's configuration.
    pub read: ReadConfig,
    /// The reader's node seed.
    pub seed: u64,
}

impl ClientSpec {
    /// Core's defaults, a fresh clock and metrics, seed 1.
    pub fn new() -> ClientSpec {
        ClientSpec {
            options: ClientOptions::new(Clock::new(std::time::Instant::now()), Metrics::new()),
            read: ReadConfig::default(),
            seed: 1,
        }
    }
}

impl Default for ClientSpec {
    fn default() -> Self {
        Self::new()
    }
}

/// A client under test. Every call blocks until its outcome.
pub trait TestClient: Send + Sync {
    /// One block request to `peer` ([`GetOptions`] as in both drivers' `fetch_block`).
    fn get(&self, peer: &Peer, block: BlockRequest<'_>, options: GetOptions) -> Fetched;

    /// The roster of the node at `addr`, identifying as `caller` (`(id, addr, record)`:
    /// the record is the `X-Peerblock-Record` value, `RecordSig::to_header`, or `None`
    /// for an unsigned caller) or anonymously.
    fn roster(&self, addr: &str, caller: Option<(&str, &str, Option<&str>)>) -> Fetched;

    /// One read of `block` through core's read machine, with `candidates` as every
    /// lookup's answer. Successive reads of one client draw successive read seeds (as
    /// one reader's reads do: `indexed_seed(child_seed(seed, "reads"), n)` or any other
    /// per-read derivation), so they do not all make the same random choices.
    fn read(&self, block: BlockSpec, candidates: Vec<Candidate>) -> ReadResult;

    /// Idle connections in the client's pool now.
    fn idle_connections(&self) -> usize;

    /// What the client's peer tables (core's `client::Peers`) say of `peer` now.
    fn peer_state(&self, peer: &PeerId) -> PeerState;
}

/// What a client's peer tables (core's `client::Peers`, shared by its GETs and reads)
/// say of one peer at one moment: what the client tests check after a GET, read from
/// core's own tables so that every driver answers alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerState {
    /// `PeerView::eligible`: a read may send the peer a GET now (no cooldown, circuit
    /// not open).
    pub eligible: bool,
    /// `PeerView::refused_for`: how much longer the peer is skipped for a refusal.
    pub refused_for: Option<Duration>,
    /// Its circuit (`Breaker::state`), `None` when the client runs no breaker.
    pub breaker: Option<State>,
    /// Data GETs in flight to it (`Peers::in_flight_to`).
    pub in_flight: u32,
}

impl PeerState {
    /// Reads `peer`'s state from `peers` at `now`: what a driver's
    /// [`TestClient::peer_state`] returns with its `Peers` locked (or on the thread that
    /// owns them).
    pub fn of(peers: &Peers, now: Instant, peer: &PeerId) -> PeerState {
        PeerState {
            eligible: peers.eligible(now, peer),
            refused_for: peers.refused_for(now, peer),
            breaker: peers.breaker().map(|b| b.state(now, peer)),
            in_flight: peers.in_flight_to(peer),
        }
    }
}

/// A driver made of two: `server`'s servers and `client`'s clients. Running the suite
/// against `Mixed::new(a, b)` and `Mixed::new(b, a)` checks that two drivers interoperate.
pub struct Mixed {
    server: Arc<dyn Driver>,
    client: Arc<dyn Driver>,
}

impl Mixed {
    /// Servers from `server`, clients from `client`.
    pub fn new(server: impl Driver + 'static, client: impl Driver + 'static) -> Mixed {
        Mixed {
            server: Arc::new(server),
            client: Arc::new(client),
        }
    }
}

impl Driver for Mixed {
    fn name(&self) -> String {
        format!(
            "{}-server+{}-client",
            self.server.name(),
            self.client.name()
        )
    }

    fn server(&self, spec: ServerSpec) -> Box<dyn TestServer> {
        self.server.server(spec)
    }

    fn client(&self, spec: ClientSpec) -> Box<dyn TestClient> {
        self.client.client(spec)
    }
}
