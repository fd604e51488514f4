//! The peer server on readiness loops: one listening socket registered in every worker's
//! poll, core admission at accept time, each connection owned by the worker that
//! it is dealt to (in turn) and driving core's `ServerConnection`, the bounded refusal path, a
//! buffered and a zero-copy (`sendfile`) body path, and graceful shutdown.
//!
//! ```no_run
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use peerblock_common::store::{FileStore, DEFAULT_MAX_BLOCK_SIZE};
//! use peerblock_core::server::ServerConfig;
//! use peerblock_core::time::Clock;
//! use peerblock_mio::{Runtime, Server, ServerOptions};
//!
//! let clock = Clock::new(std::time::Instant::now());
//! let runtime = Runtime::new(2, clock)?;
//! let config = Arc::new(ServerConfig::new("node-1", "127.0.0.1:7070"));
//! let store = FileStore::new("/var/lib/peerblock", DEFAULT_MAX_BLOCK_SIZE);
//! let server = Server::bind("127.0.0.1:7070".parse()?, ServerOptions::new(config, store))?;
//! let handle = server.start(&runtime);
//! // ... later:
//! handle.shutdown(std::time::Duration::from_secs(5));
//! # Ok(()) }
//! ```
//!
//! How one connection maps core's driving contract onto readiness events is in
//! docs/integrating.md, which uses this module as its worked example.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mio::net::TcpListener;
use mio::{Interest, Token};
use peerblock_common::metrics::{Metrics, RelayCounters};
use peerblock_common::relay::Parent;
use peerblock_common::store::FileStore;
use peerblock_common::SharedMembership;
use peerblock_core::server::{
    Admission, AdmissionConfig, AdmissionConfigError, FlightConfig, RelayFlights, ServerConfig,
    ServerConfigError,
};
use peerblock_core::time::{Clock, Instant};

use crate::client::Client;
use crate::worker::{After, Entry, Ready, Runtime, Worker};

mod conn;
mod flights;
mod listener;
mod relayed_fetch;
mod write;

use conn::ServerConn;
use flights::Flights;
use listener::ListenerEntry;

/// How a `200`'s block body reaches the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyPath {
    /// Blocks are read into memory (kept in the store's hot-block cache) and written from
    /// there, head and body in one vectored write. The default: on these machines'
    /// loopback it measured faster than `sendfile` (docs/benchmarks.md).
    Buffered,
    /// The head is written, then the block straight from its store file with
    /// `sendfile(2)`: no block byte is copied through user space, and no block is held
    /// in memory. The hot-block cache is not used.
    Sendfile,
}

/// Where a relay fetches the blocks its store misses.
#[derive(Clone, Debug)]
pub struct RelayOptions {
    /// The client relayed fetches go through. Give it no breaker (`PeersConfig::breaker
    /// = None`): an origin's answers depend on each requester's credential, so a circuit
    /// opened by other requesters' refusals would answer the next requester 500.
    pub client: Client,
    /// Who is asked before the request's origin: none, a fixed peer, or the block's
    /// parent by placement (the nearest live holder nearer to its key than this node;
    /// see `peerblock_common::relay::Parent`). A parent whose answer is not final (down,
    /// refusing, failing, without the block) sends the relay to the origin itself.
    pub parent: Parent,
    /// Where the relay counts its work (the node's `Metrics::relay`; default: counters of
    /// its own).
    pub counters: RelayCounters,
}

/// Everything a [`Server`] needs. [`ServerOptions::new`] fills the defaults.
#[derive(Clone)]
pub struct ServerOptions {
    /// Core's per-connection configuration. Checked by [`Server::bind`].
    pub config: Arc<ServerConfig>,
    /// Core's admission limits (docs/limits.md). Checked by [`Server::bind`].
    pub admission: AdmissionConfig,
    /// The node's roster table (`None`: a roster of this node alone, nothing learned).
    pub membership: Option<SharedMembership>,
    /// The blocks served.
    pub store: FileStore,
    /// How block bodies are written.
    pub body: BodyPath,
    /// `Some`: fetch what the store misses on the requester's behalf (core decides when,
    /// with `config.relay`); `None`: transport-only.
    pub relay: Option<RelayOptions>,
    /// The node's metrics.
    pub metrics: Metrics,
}

impl ServerOptions {
    /// Default admission limits, no membership, the buffered body path, no relay, fresh
    /// metrics.
    pub fn new(config: Arc<ServerConfig>, store: FileStore) -> Self {
        ServerOptions {
            config,
            admission: AdmissionConfig::default(),
            membership: None,
            store,
            body: BodyPath::Buffered,
            relay: None,
            metrics: Metrics::new(),
        }
    }
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("config", &self.config)
            .field("admission", &self.admission)
            .field("body", &self.body)
            .field("relay", &self.relay.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// `ServerOptions::config` violates an invariant (the field is named).
    #[error("server configuration: {0}")]
    Config(#[from] ServerConfigError),
    /// `ServerOptions::admission` violates an invariant (the fields are named).
    #[error("admission limits: {0}")]
    Admission(#[from] AdmissionConfigError),
    /// The listen address could not be bound.
    #[error("binding the listen address {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// Where the server is in its life.
const RUNNING: u8 = 0;
/// No more accepts, no more reads; in-flight responses finish.
const DRAINING: u8 = 1;
/// Every connection closes now.
const CLOSING: u8 = 2;

/// What the listener entries and every connection of one server share.
pub(crate) struct Shared {
    config: Arc<ServerConfig>,
    admission: Mutex<Admission>,
    membership: Option<SharedMembership>,
    store: FileStore,
    body: BodyPath,
    relay: Option<RelayOptions>,
    metrics: Metrics,
    clock: Clock,
    phase: AtomicU8,
    /// Listener entries and connections alive.
    live: AtomicUsize,
    /// Which worker gets the next accepted connection (round robin).
    next_worker: AtomicUsize,
    /// Bumped (and waiters woken) whenever a connection is admitted, refused or closed.
    changed: Mutex<u64>,
    changed_cv: Condvar,
    /// The relay's single-flight table (used only with a relay).
    flights: Mutex<Flights>,
}

impl Shared {
    fn flights(&self) -> std::sync::MutexGuard<'_, Flights> {
        self.flights.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn admission(&self) -> MutexGuard<'_, Admission> {
        self.admission
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn phase(&self) -> u8 {
        self.phase.load(Ordering::SeqCst)
    }

    fn notify(&self) {
        let mut n = self.changed.lock().unwrap_or_else(PoisonError::into_inner);
        *n += 1;
        self.changed_cv.notify_all();
    }

    fn now(&self) -> Instant {
        self.clock.to_core(std::time::Instant::now())
    }
}

/// A bound, not yet running server. [`start`](Self::start) runs it on a [`Runtime`].
pub struct Server {
    listener: std::net::TcpListener,
    local_addr: SocketAddr,
    options: ServerOptions,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Checks `options` and binds `addr` (port 0 picks a free port). Nothing is accepted
    /// before [`start`](Self::start).
    pub fn bind(addr: SocketAddr, options: ServerOptions) -> Result<Server, ServerError> {
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|source| ServerError::Bind { addr, source })?;
        Server::from_listener(listener, options)
    }

    /// A server on an already bound listener.
    pub fn from_listener(
        listener: std::net::TcpListener,
        options: ServerOptions,
    ) -> Result<Server, ServerError> {
        options.config.validate()?;
        Admission::<IpAddr>::new(options.admission.clone())?;
        let local_addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| ServerError::Bind {
                addr: local_addr,
                source,
            })?;
        Ok(Server {
            listener,
            local_addr,
            options,
        })
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Registers the listener in every worker of `runtime` (each accepts on it; a
    /// connection is dealt to the workers in turn) and returns the handle.
    pub fn start(self, runtime: &Runtime) -> ServerHandle {
        let options = self.options;
        let admission = Admission::new(options.admission).expect("checked in Server::bind");
        let relay_parent = options.relay.as_ref().map(|r| r.parent.clone());
        let shared = Arc::new(Shared {
            config: options.config,
            admission: Mutex::new(admission),
            membership: options.membership,
            store: options.store,
            body: options.body,
            relay: options.relay,
            metrics: options.metrics,
            clock: runtime.clock(),
            phase: AtomicU8::new(RUNNING),
            live: AtomicUsize::new(0),
            next_worker: AtomicUsize::new(0),
            changed: Mutex::new(0),
            changed_cv: Condvar::new(),
            flights: Mutex::new(Flights {
                table: RelayFlights::new(
                    FlightConfig {
                        // Parents by placement cannot loop: a reader's request and a
                        // relay's for one block share one fetch (core's docs).
                        share_across_hops: matches!(relay_parent, Some(Parent::Placement { .. })),
                        ..FlightConfig::default()
                    },
                    runtime.clock().to_core(std::time::Instant::now()),
                )
                .expect("the default flight config is valid"),
                next: 0,
                answers: HashMap::new(),
                fetches: HashMap::new(),
            }),
        });
        for worker in 0..runtime.threads() {
            let listener = match self.listener.try_clone() {
                Ok(l) => TcpListener::from_std(l),
                Err(e) => {
                    tracing::error!(error = %e, "duplicating the listener failed");
                    continue;
                }
            };
            shared.live.fetch_add(1, Ordering::SeqCst);
            let shared = Arc::clone(&shared);
            runtime.remote(worker).run(move |w| {
                let entry = ListenerEntry {
                    shared: Some(shared),
                    listener: Some(listener),
                };
                w.spawn(Entry::new(Box::new(entry)), |w, key, entry| match entry
                    .get::<ListenerEntry>()
                {
                    Some(l) => {
                        let listener = l.listener.as_mut().expect("a new listener entry");
                        w.poll
                            .registry()
                            .register(listener, Token(key.index), Interest::READABLE)
                    }
                    None => Ok(()),
                });
            });
        }
        tracing::info!(addr = %self.local_addr, node = %shared.config.node_id, threads = runtime.threads(), "server listening");
        ServerHandle {
            local_addr: self.local_addr,
            shared,
            runtime: runtime.clone(),
        }
    }
}

/// A running server: its address, a view of its state, graceful shutdown. Dropping it
/// without [`shutdown`](Self::shutdown) closes everything at once.
pub struct ServerHandle {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Runtime,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl ServerHandle {
    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Sessions core's admission holds now.
    pub fn sessions(&self) -> usize {
        self.shared.admission().sessions()
    }

    /// Blocks until `condition` holds, checking it now and whenever a connection is
    /// admitted, refused or closed; `false` if `timeout` passed first.
    pub fn wait_until(
        &self,
        mut condition: impl FnMut(&ServerHandle) -> bool,
        timeout: Duration,
    ) -> bool {
        let end = std::time::Instant::now() + timeout;
        let mut seen = *self
            .shared
            .changed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if condition(self) {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= end {
                return false;
            }
            let guard = self
                .shared
                .changed
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let (guard, _) = self
                .shared
                .changed_cv
                .wait_timeout_while(guard, end - now, |n| *n == seen)
                .unwrap_or_else(PoisonError::into_inner);
            seen = *guard;
        }
    }

    fn set_phase(&self, phase: u8) {
        self.shared.phase.store(phase, Ordering::SeqCst);
        for worker in 0..self.runtime.threads() {
            let shared = Arc::clone(&self.shared);
            self.runtime
                .remote(worker)
                .run(move |w| phase_changed(w, &shared));
        }
    }

    fn wait_drained(&self, timeout: Duration) -> bool {
        self.wait_until(|h| h.shared.live.load(Ordering::SeqCst) == 0, timeout)
    }

    /// Stops accepting at once (every worker closes its copy of the listener), lets
    /// in-flight responses finish for at most `grace` (connections read no new input;
    /// one with nothing in progress closes at once), then closes every remaining
    /// connection. Returns when every connection has ended.
    pub fn shutdown(self, grace: Duration) {
        tracing::info!(addr = %self.local_addr, ?grace, "server shutting down");
        self.set_phase(DRAINING);
        if !self.wait_drained(grace) {
            tracing::info!(addr = %self.local_addr, "grace period over: closing every connection");
            self.set_phase(CLOSING);
            // Bounded: closing is immediate on every worker.
            self.wait_drained(Duration::from_secs(10));
        }
        tracing::info!(addr = %self.local_addr, "server stopped");
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if self.shared.phase() != CLOSING {
            self.set_phase(CLOSING);
        }
    }
}

/// A server's phase changed: drive its entries on this worker (listeners close, idle
/// connections close, busy ones finish or close).
fn phase_changed(w: &mut Worker, shared: &Arc<Shared>) {
    for key in w.keys() {
        w.with_entry(key, |w, key, entry| {
            if let Some(l) = entry.get::<ListenerEntry>().filter(|l| l.is(shared)) {
                l.drive(w, key)
            } else if let Some(c) = entry
                .get::<ServerConn>()
                .filter(|c| Arc::ptr_eq(&c.shared, shared))
            {
                c.drive(w, key, Ready::default())
            } else {
                After::Unchanged
            }
        });
    }
}
