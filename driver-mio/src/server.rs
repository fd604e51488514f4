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
//! docs/integrating.md, which uses this file as its worked example.

use std::collections::HashMap;
use std::io::{self, IoSlice, Read as _, Write as _};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Token};
use peerblock_common::metrics::{Metrics, RelayCounters};
use peerblock_common::object::{ObjectIdentity, Scheme};
use peerblock_common::relay::{
    object_origin, parent_answer_is_final, relayed_result, upstream_of, Parent,
};
use peerblock_common::store::{FileStore, OpenBlock, Opened, RelayVerdict};
use peerblock_common::SharedMembership;
use peerblock_core::client::BlockRequest;
use peerblock_core::server::{
    Admission, AdmissionConfig, AdmissionConfigError, FlightConfig, FlightEvent, FlightId,
    RelayFlights, RequestId, RequestRejection, ServerConfig, ServerConfigError, ServerConnection,
    ServerEvent, SourceRequest, SourceResult,
};
use peerblock_core::time::{Clock, Instant};
use peerblock_core::transmit::{Close, Transmit};

use crate::client::Client;
use crate::worker::{After, Driven, Entry, Key, Ready, Runtime, Worker};
use peerblock_common::client::{GetOptions, Peer};

/// Most connections one worker accepts per wake-up of its listener before it turns to
/// its other sockets (bounded work per wake-up); the rest are accepted next turn.
const ACCEPTS_PER_TURN: usize = 64;

/// How long a listener pauses after an accept error (out of file descriptors, say) before
/// accepting again.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(20);

/// Most reads into one connection per turn.
const READS_PER_TURN: usize = 8;

/// Most bytes written to one connection per turn (head, body and file bytes): a client
/// reading a 64 MiB block as fast as loopback allows cannot hold its worker for the whole
/// block while other connections wait.
const WRITE_BYTES_PER_TURN: usize = 1024 * 1024;

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

/// The relay's single-flight table (core's [`RelayFlights`]: concurrent relayed misses for
/// one block share one upstream fetch) and the answers its waiters wait for, each a
/// continuation that posts the result to the waiter's connection on its worker.
pub(crate) struct Flights {
    table: RelayFlights<u64>,
    next: u64,
    answers: HashMap<u64, Box<dyn FnOnce(SourceResult) + Send>>,
    /// The upstream request of each flight in flight, to cancel when it is abandoned.
    fetches: HashMap<FlightId, crate::client::RequestHandle>,
}

impl Flights {
    /// The events the table has now (taken under the lock, carried out outside it).
    fn events(&mut self) -> Vec<FlightEvent<u64>> {
        std::iter::from_fn(|| self.table.poll_event()).collect()
    }
}

/// Carries out single-flight events outside the table's lock: a fetch starts on worker
/// `w` (only a want, which has its worker, leads one), an answer runs its waiter's
/// continuation, an abandoned flight's fetch runs to its end and its result is ignored.
fn act_on_flights(shared: &Arc<Shared>, mut w: Option<&mut Worker>, events: Vec<FlightEvent<u64>>) {
    for event in events {
        match event {
            FlightEvent::Fetch { id, request } => match w.as_deref_mut() {
                Some(w) => start_flight(shared, w, id, &request),
                None => debug_assert!(false, "a fetch led outside a want"),
            },
            FlightEvent::Answer { waiter, answer, .. } => {
                let answer_to = shared.flights().answers.remove(&waiter);
                if let Some(answer_to) = answer_to {
                    answer_to(answer.into_source_result());
                }
            }
            FlightEvent::Abandon { id, .. } => {
                // Nobody waits any more: the upstream connection is closed at once (its
                // slot and ticket freed), not held until the upstream's deadlines.
                let fetch = shared.flights().fetches.remove(&id);
                if let (Some(handle), Some(relay)) = (fetch, &shared.relay) {
                    relay.client.cancel(handle);
                }
            }
        }
    }
}

/// The result of flight `id`'s upstream fetch: fanned out to its waiters.
fn flight_result(shared: &Arc<Shared>, now: Instant, id: FlightId, result: SourceResult) {
    let events = {
        let mut flights = shared.flights();
        flights.fetches.remove(&id);
        flights.table.handle_result(now, id, result);
        flights.events()
    };
    act_on_flights(shared, None, events);
}

/// A waiter whose request went away (source timeout, connection closed) leaves its flight.
fn leave_flight(shared: &Arc<Shared>, now: Instant, waiter: u64) {
    let events = {
        let mut flights = shared.flights();
        flights.table.handle_cancel(now, waiter);
        flights.answers.remove(&waiter);
        flights.events()
    };
    act_on_flights(shared, None, events);
}

/// Joins (or leads) the flight of `request`'s block on worker `w`, waiting at most the
/// source timeout; `answer` runs with its result, `Failed` at once if the table is full
/// (then `None`). The waiter's id, for [`leave_flight`] if its request goes away. A want
/// of the relay itself (a manifest to check a block) has no request to go away: its
/// flight ends by its upstream fetch's own deadlines.
fn want_flight(
    shared: &Arc<Shared>,
    w: &mut Worker,
    request: &SourceRequest,
    answer: Box<dyn FnOnce(SourceResult) + Send>,
) -> Option<u64> {
    let now = w.now();
    let deadline = now + shared.config.source_timeout;
    let wanted = {
        let mut flights = shared.flights();
        let waiter = flights.next;
        flights.next += 1;
        match flights.table.handle_want(now, request, waiter, deadline) {
            Ok(want) => {
                if let Some(relay) = &shared.relay {
                    relay.counters.misses.inc();
                    if matches!(want, peerblock_core::server::Want::Joined(_)) {
                        relay.counters.flight_joins.inc();
                    }
                }
                flights.answers.insert(waiter, answer);
                Ok((waiter, flights.events()))
            }
            Err(full) => Err((full, answer)),
        }
    };
    match wanted {
        Ok((waiter, events)) => {
            act_on_flights(shared, Some(w), events);
            Some(waiter)
        }
        Err((full, answer)) => {
            tracing::warn!(path = %request.path, error = %full, "relay refused: single-flight table full");
            answer(SourceResult::Failed);
            None
        }
    }
}

/// Starts flight `id`'s one upstream fetch on worker `w`: through the block's parent, else
/// from the origin, validated (see [`RelayedFetch`]); its result goes to the table.
fn start_flight(shared: &Arc<Shared>, w: &mut Worker, id: FlightId, request: &SourceRequest) {
    let Some(relay) = shared.relay.clone() else {
        flight_result(shared, w.now(), id, SourceResult::Miss);
        return;
    };
    let (origin, at_origin) = upstream_of(request, None);
    let now = relay.client.now();
    let parent = relay.client.with_peers(|peers| {
        relay.parent.of(&request.path, &|p| {
            peerblock_core::read::PeerView::eligible(&*peers, now, p)
        })
    });
    if let Some(object) = object_origin(request) {
        // An object origin: the block's parent, else the Range GET to the origin.
        let results = shared.clone();
        let client = relay.client.clone();
        let relayed = RelayedFetch {
            counters: relay.counters.clone(),
            // `start_range` counts its own origin fetch.
            to_origin: false,
            shared: shared.clone(),
            request: request.clone(),
            worker: w.me(),
            client: relay.client.clone(),
            store: shared.store.clone(),
            path: request.path,
            hop: request.hop,
            origin,
            then: None,
            object: Some(Arc::new(object)),
            answer: Box::new(move |result| flight_result(&results, client.now(), id, result)),
        };
        let handle = match parent {
            Some((pid, addr)) => {
                let peer = match pid {
                    Some(pid) => Peer::new(pid, addr),
                    None => Peer::from_addr(addr),
                };
                Some(relayed.start(w, peer))
            }
            None => relayed.start_range(w),
        };
        let mut flights = shared.flights();
        if let Some(handle) = handle {
            if flights.table.flight_of(&flights.table.key_of(request)) == Some(id) {
                flights.fetches.insert(id, handle);
            }
        }
        return;
    }
    let first = match (parent, at_origin.clone()) {
        (Some((id, addr)), _) => {
            let peer = match id {
                Some(id) => Peer::new(id, addr),
                None => Peer::from_addr(addr),
            };
            // The origin after the parent, unless the parent's answer is final.
            (peer, at_origin, false)
        }
        (None, Some(upstream)) => (Peer::from_addr(upstream), None, true),
        (None, None) => {
            tracing::warn!(?origin, "relay: the origin is not an http://HOST:PORT URL");
            flight_result(shared, w.now(), id, SourceResult::Miss);
            return;
        }
    };
    let (results, client) = (shared.clone(), relay.client.clone());
    let relayed = RelayedFetch {
        counters: relay.counters.clone(),
        to_origin: first.2,
        shared: shared.clone(),
        request: request.clone(),
        worker: w.me(),
        client: relay.client.clone(),
        store: shared.store.clone(),
        path: request.path,
        hop: request.hop,
        origin,
        then: first.1,
        object: None,
        answer: Box::new(move |result| flight_result(&results, client.now(), id, result)),
    };
    let handle = relayed.start(w, first.0);
    let mut flights = shared.flights();
    // Kept only while the flight is still in flight (its fetch may have ended already).
    if flights.table.flight_of(&flights.table.key_of(request)) == Some(id) {
        flights.fetches.insert(id, handle);
    }
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

/// One worker's copy of a server's listening socket.
pub(crate) struct ListenerEntry {
    shared: Option<Arc<Shared>>,
    listener: Option<TcpListener>,
}

impl ListenerEntry {
    fn is(&self, shared: &Arc<Shared>) -> bool {
        self.shared.as_ref().is_some_and(|s| Arc::ptr_eq(s, shared))
    }

    /// Accepts what is queued (at most [`ACCEPTS_PER_TURN`]), admitting each connection
    /// at once; closes the listener when the server is no longer running.
    pub(crate) fn drive(&mut self, w: &mut Worker, _key: Key) -> After {
        let (Some(shared), Some(listener)) = (&self.shared, &mut self.listener) else {
            return After::Done;
        };
        if shared.phase() != RUNNING {
            let _ = w.poll.registry().deregister(listener);
            return After::Done;
        }
        for _ in 0..ACCEPTS_PER_TURN {
            match listener.accept() {
                Ok((stream, peer)) => on_accept(w, shared, stream, peer),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return After::Keep(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors, say: try again after a pause (the timer drives
                    // this entry again), so a persistent error does not spin a core.
                    tracing::warn!(error = %e, "accept failed");
                    return After::Keep(Some(w.now() + ACCEPT_ERROR_BACKOFF));
                }
            }
        }
        After::Again(None)
    }
}

impl Drop for ListenerEntry {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.live.fetch_sub(1, Ordering::SeqCst);
            shared.notify();
        }
    }
}

/// Admission at accept time: an admitted connection gets a session; a refused one the
/// light path (within core's `AdmissionConfig::max_refusals`) or, over that bound, an
/// immediate close.
fn on_accept(w: &mut Worker, shared: &Arc<Shared>, stream: TcpStream, peer: SocketAddr) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%peer, error = %e, "setting TCP_NODELAY failed");
    }
    let now = w.now();
    let accepted = {
        let mut admission = shared.admission();
        ServerConnection::accept(now, &mut admission, peer.ip(), Arc::clone(&shared.config))
    };
    let mut machine = match accepted {
        Ok(machine) => machine,
        Err(e) => {
            // Unreachable: the configuration was validated when the server was built.
            tracing::error!(error = %e, "server configuration rejected by core");
            return;
        }
    };
    let admitted = machine.refused().is_none();
    if let Some(refusal) = machine.refused() {
        shared.metrics.refused(refusal.reason.as_token());
        if machine.dropped_at_accept() {
            tracing::debug!(%peer, reason = refusal.reason.as_token(), "connection refused and the refusal path is full: closed at once");
            machine.close(now, &mut shared.admission());
            shared.notify();
            return;
        }
        tracing::debug!(%peer, reason = refusal.reason.as_token(), "connection refused: answering its first request");
    } else {
        shared.metrics.connections_accepted.inc();
        shared.metrics.sessions_open.inc();
        tracing::debug!(%peer, "connection admitted");
    }
    shared.live.fetch_add(1, Ordering::SeqCst);
    shared.notify();
    let conn = ServerConn {
        shared: Arc::clone(shared),
        stream,
        peer,
        machine,
        admitted,
        out: None,
        files: HashMap::new(),
        pending: Vec::new(),
        readable: true,
        writable: true,
        eof: false,
        closed: false,
    };
    // Connections are dealt to the workers in turn: the worker whose poll saw the
    // listener first would otherwise accept a whole burst and serve it alone.
    let target = shared.next_worker.fetch_add(1, Ordering::Relaxed) % w.remotes.len();
    let conn = Box::new(conn);
    w.post(target, move |w| {
        w.spawn(Entry::new(conn), |w, key, entry| {
            match entry.get::<ServerConn>() {
                Some(c) => w.poll.registry().register(
                    &mut c.stream,
                    Token(key.index),
                    Interest::READABLE | Interest::WRITABLE,
                ),
                None => Ok(()),
            }
        });
    });
}

/// A response being written: the transmit, how many of its head and body bytes are
/// written, and for a zero-copy block its file and how much of it is sent.
struct Outgoing {
    tx: Transmit,
    written: usize,
    file: Option<OpenBlock>,
    sent: u64,
}

/// One connection: its socket, its machine, and the response being written. Dropping it
/// calls core's `close` (every exit path).
pub(crate) struct ServerConn {
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    machine: ServerConnection,
    /// Holds a session (counted in `sessions_open`); else a refusal slot.
    admitted: bool,
    out: Option<Outgoing>,
    /// Zero-copy blocks answered and not yet written, by request.
    files: HashMap<RequestId, OpenBlock>,
    /// Relayed fetches in flight: (request, the client request's handle).
    pending: Vec<(RequestId, u64)>,
    readable: bool,
    writable: bool,
    eof: bool,
    closed: bool,
}

/// How a turn of a connection ended.
enum Turn {
    /// Nothing more can be done until the socket or a timer says so.
    Idle,
    /// The work budget ran out with work left.
    Budget,
    /// The connection is over.
    End,
}

impl ServerConn {
    /// A readiness event (or a wake-up with none: a phase change, a source answer).
    pub(crate) fn drive(&mut self, w: &mut Worker, key: Key, ready: Ready) -> After {
        self.readable |= ready.readable;
        self.writable |= ready.writable;
        match self.turn(w, key) {
            Turn::End => {
                self.close();
                After::Done
            }
            Turn::Budget => After::Again(self.deadline()),
            Turn::Idle => After::Keep(self.deadline()),
        }
    }

    /// The machine's deadline is due (or a stale wake-up: harmless).
    pub(crate) fn timeout(&mut self, w: &mut Worker, key: Key) -> After {
        let now = w.now();
        self.machine.handle_timeout(now);
        self.drive(w, key, Ready::default())
    }

    fn deadline(&self) -> Option<Instant> {
        self.machine.poll_timeout().map(|d| d.at)
    }

    fn turn(&mut self, w: &mut Worker, key: Key) -> Turn {
        let mut reads = READS_PER_TURN;
        let mut budget = WRITE_BYTES_PER_TURN;
        loop {
            let phase = self.shared.phase();
            if phase == CLOSING {
                tracing::debug!(peer = %self.peer, "connection closed by shutdown");
                return Turn::End;
            }
            let now = w.now();
            self.pump(w, key, now);
            match self.write(w, key, &mut budget) {
                Ok(true) => {}
                Ok(false) => return Turn::Budget,
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "connection ended by a socket error");
                    return Turn::End;
                }
            }
            // Finished with a transmit still unwritten happens only when core gave up on
            // it (its send-progress deadline passed): the connection ends here too.
            if self.machine.is_finished() {
                tracing::debug!(peer = %self.peer, "connection finished");
                return Turn::End;
            }
            let draining = phase == DRAINING;
            if draining && self.machine.in_progress() == 0 && self.out.is_none() {
                return Turn::End;
            }
            if !self.readable || self.eof || draining {
                return Turn::Idle;
            }
            let Some(buf) = self.machine.read_buf() else {
                // Back-pressure: responses not yet written; the socket stays readable.
                return Turn::Idle;
            };
            if reads == 0 {
                return Turn::Budget;
            }
            reads -= 1;
            let now = w.now();
            match self.stream.read(buf) {
                Ok(0) => {
                    self.eof = true;
                    self.machine.handle_eof(now);
                }
                Ok(n) => {
                    self.machine.handle_read(now, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "connection ended by a read error");
                    return Turn::End;
                }
            }
        }
    }

    /// Begins decoded requests, answers every event that can be answered now, and takes
    /// the next transmit if none is being written.
    fn pump(&mut self, w: &mut Worker, key: Key, now: Instant) {
        if self.machine.needs_admission() {
            let mut admission = self.shared.admission();
            self.machine.handle_admission(now, &mut admission);
        }
        while let Some(event) = self.machine.poll_event() {
            self.on_event(w, key, now, event);
        }
        if self.out.is_none() {
            if let Some(tx) = self.machine.poll_transmit(now) {
                let len = tx.body.len() as u64 + tx.external.map_or(0, |e| e.len);
                self.shared.metrics.inflight_bytes.inc_by(len as i64);
                let file = tx.external.and_then(|e| self.files.remove(&e.request));
                self.out = Some(Outgoing {
                    tx,
                    written: 0,
                    file,
                    sent: 0,
                });
            }
        }
    }

    fn on_event(&mut self, w: &mut Worker, key: Key, now: Instant, event: ServerEvent) {
        match event {
            ServerEvent::Fetch { id, request } => {
                tracing::trace!(peer = %self.peer, path = %request.path, "fetch");
                let (result, file) = self.fetch(&request);
                if let Some(file) = file {
                    self.files.insert(id, file);
                }
                self.answer(now, id, result);
            }
            ServerEvent::Relay { id, request } => {
                tracing::trace!(peer = %self.peer, path = %request.path, hop = request.hop.0, "relay");
                self.relay(w, key, id, &request);
            }
            ServerEvent::Roster { id, caller } => {
                let roster = peerblock_common::roster::answer(
                    self.shared.membership.as_ref(),
                    now,
                    caller.as_ref(),
                    &self.shared.metrics,
                    &self.peer,
                );
                if let Err(e) = self.machine.handle_roster(now, id, &roster) {
                    tracing::debug!(peer = %self.peer, error = %e, "roster answer dropped");
                }
            }
            ServerEvent::Rejected { status, error, .. } => match error {
                RequestRejection::Malformed(_) => {
                    tracing::warn!(peer = %self.peer, status, %error, "malformed request")
                }
                _ => tracing::debug!(peer = %self.peer, status, %error, "request rejected"),
            },
            ServerEvent::SourceTimedOut { id } => {
                tracing::debug!(peer = %self.peer, ?id, "source timed out: answered 500");
                self.files.remove(&id);
                if let Some(at) = self.pending.iter().position(|(p, _)| *p == id) {
                    let (_, waiter) = self.pending.swap_remove(at);
                    let shared = self.shared.clone();
                    leave_flight(&shared, now, waiter);
                }
            }
            // An event a later core adds (`#[non_exhaustive]`): nothing to answer.
            other => tracing::debug!(peer = %self.peer, event = ?other, "server event ignored"),
        }
    }

    /// The block from the store: from the hot-block cache or a read of its file (the
    /// buffered path), or its open file (the zero-copy path). Page-cached reads take
    /// microseconds; this worker's other sockets wait that long.
    fn fetch(&mut self, request: &SourceRequest) -> (SourceResult, Option<OpenBlock>) {
        let store = &self.shared.store;
        let path = request.path;
        match self.shared.body {
            BodyPath::Buffered => {
                if let Some(block) = store.cached(&path) {
                    return (SourceResult::Found(block), None);
                }
                let result = store.get_blocking(&path);
                if let SourceResult::Found(block) = &result {
                    self.shared
                        .metrics
                        .store_read_bytes
                        .inc_by(block.len() as u64);
                    store.cache_insert(path, block);
                }
                (result, None)
            }
            BodyPath::Sendfile => match store.open_block(&path) {
                Opened::File(block) => (SourceResult::External { len: block.len }, Some(block)),
                Opened::Missing => (SourceResult::Miss, None),
                Opened::Failed => (SourceResult::Failed, None),
                Opened::Corrupt => (SourceResult::Corrupt, None),
            },
        }
    }

    /// Hands a source's answer to the machine.
    fn answer(&mut self, now: Instant, id: RequestId, result: SourceResult) {
        let answered = {
            let mut admission = self.shared.admission();
            self.machine.handle_source(now, &mut admission, id, result)
        };
        if let Err(e) = answered {
            self.files.remove(&id);
            tracing::debug!(peer = %self.peer, error = %e, "late source answer dropped");
        }
    }

    /// Joins (or leads) the relayed fetch of the request's block in the single-flight
    /// table; its answer comes back to this connection on this worker.
    fn relay(&mut self, w: &mut Worker, key: Key, id: RequestId, request: &SourceRequest) {
        if self.shared.relay.is_none() {
            let now = w.now();
            self.answer(now, id, SourceResult::Miss);
            return;
        }
        let me = w.me();
        let answer = move |result: SourceResult| {
            me.run(move |w| {
                w.with_entry(key, |w, key, entry| match entry.get::<ServerConn>() {
                    Some(c) => {
                        c.pending.retain(|(p, _)| *p != id);
                        let now = w.now();
                        c.answer(now, id, result);
                        c.drive(w, key, Ready::default())
                    }
                    None => After::Unchanged,
                })
            })
        };
        // Concurrent misses for this block share one upstream fetch; this request waits
        // at most the source timeout (core answers it 500 then anyway).
        let shared = self.shared.clone();
        if let Some(waiter) = want_flight(&shared, w, request, Box::new(answer)) {
            self.pending.push((id, waiter));
        }
    }

    /// Writes the current transmit as far as the socket and the budget allow: head and
    /// body in one vectored write, then a zero-copy block's file with `sendfile`. Each
    /// transmit fully written is acknowledged and the next one taken. `Ok(false)`: the
    /// budget ran out with bytes still to write and the socket still writable.
    fn write(&mut self, w: &mut Worker, key: Key, budget: &mut usize) -> io::Result<bool> {
        loop {
            let Some(out) = &mut self.out else {
                return Ok(true);
            };
            if !self.writable {
                return Ok(true);
            }
            if *budget == 0 {
                return Ok(false);
            }
            let head = &out.tx.head;
            let body = &out.tx.body;
            let buffered = head.len() + body.len();
            let external = out.tx.external.map_or(0, |e| e.len);
            let step = if out.written < buffered {
                let r = if out.written < head.len() {
                    let slices = [IoSlice::new(&head[out.written..]), IoSlice::new(body)];
                    self.stream.write_vectored(&slices)
                } else {
                    let start = out.written - head.len();
                    let end = body.len().min(start + *budget);
                    self.stream.write(&body[start..end])
                };
                r.inspect(|&n| out.written += n)
            } else if out.sent < external {
                let Some(file) = &out.file else {
                    return Err(io::Error::other("a zero-copy response lost its file"));
                };
                let want = ((external - out.sent) as usize).min(*budget);
                let mut offset = out.sent;
                match rustix::fs::sendfile(&self.stream, &file.file, Some(&mut offset), want) {
                    Ok(0) => {
                        // The file shrank under us: the response cannot be completed.
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "block file shorter than its Content-Length",
                        ));
                    }
                    Ok(n) => {
                        out.sent += n as u64;
                        self.shared.metrics.sendfile_bytes.inc_by(n as u64);
                        Ok(n)
                    }
                    Err(e) => Err(io::Error::from(e)),
                }
            } else {
                let Some(Outgoing { tx, .. }) = self.out.take() else {
                    return Ok(true);
                };
                let now = w.now();
                self.transmitted(now, tx)?;
                self.pump(w, key, now);
                continue;
            };
            match step {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => *budget = budget.saturating_sub(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// One transmit is fully written: acknowledge it, count it, act on its `close`.
    fn transmitted(&mut self, now: Instant, tx: Transmit) -> io::Result<()> {
        {
            let mut admission = self.shared.admission();
            self.machine.handle_transmitted(now, &mut admission);
        }
        let metrics = &self.shared.metrics;
        let body = tx.body.len() as u64 + tx.external.map_or(0, |e| e.len);
        metrics.inflight_bytes.dec_by(body as i64);
        if let Some(status) = tx.status {
            metrics.response(status);
        }
        if tx.block {
            metrics.bytes_served.inc_by(body);
        }
        tracing::trace!(peer = %self.peer, status = ?tx.status, body, close = ?tx.close, "response written");
        match tx.close {
            Close::KeepOpen => {}
            // Both end our sending side now; `AfterWrite` has finished the machine, and a
            // lingering one keeps reading (discarded) until EOF or its linger deadline.
            Close::AfterWrite | Close::Linger => {
                if let Err(e) = self.stream.shutdown(std::net::Shutdown::Write) {
                    if e.kind() != io::ErrorKind::NotConnected {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Calls core's `close` (releasing every ticket) and settles the metrics and the
    /// server's counts. Idempotent; also run on drop, so no exit path skips it.
    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let now = self.shared.now();
        {
            let mut admission = self.shared.admission();
            self.machine.close(now, &mut admission);
        }
        self.files.clear();
        // This connection's relayed requests leave their flights (a flight nobody else
        // waits for is abandoned; its fetch runs to its end and its result is ignored).
        let shared = self.shared.clone();
        for (_, waiter) in self.pending.drain(..) {
            leave_flight(&shared, now, waiter);
        }
        if let Some(out) = self.out.take() {
            let len = out.tx.body.len() as u64 + out.tx.external.map_or(0, |e| e.len);
            self.shared.metrics.inflight_bytes.dec_by(len as i64);
        }
        if self.admitted {
            self.shared.metrics.sessions_open.dec();
        }
        self.shared.live.fetch_sub(1, Ordering::SeqCst);
        self.shared.notify();
    }
}

impl Drop for ServerConn {
    fn drop(&mut self) {
        self.close();
    }
}

/// One relayed fetch: from `peer` (the block's parent or the origin), then, when the
/// parent's answer is not final, from the origin `then`; the validated result goes to
/// `answer`.
struct RelayedFetch {
    worker: crate::worker::Remote,
    client: Client,
    store: FileStore,
    path: peerblock_core::wire::BlockPath,
    hop: peerblock_core::wire::Hop,
    origin: Option<String>,
    then: Option<String>,
    /// An object origin's identity: after the parent, the Range GET to the origin; a
    /// found block checked for its length and kept in the hot-block cache only.
    object: Option<Arc<ObjectIdentity>>,
    answer: Box<dyn FnOnce(SourceResult) + Send>,
    counters: RelayCounters,
    /// Whether this fetch asks the origin (not the block's parent).
    to_origin: bool,
    /// The server's shared state: a block `i` that cannot be checked here sends the
    /// chunk's manifest through its single-flight table.
    shared: Arc<Shared>,
    /// The flight's request (its origin and hop are the manifest's too).
    request: SourceRequest,
}

impl RelayedFetch {
    /// Starts the fetch from `peer` on worker `w`; the handle of this first request.
    fn start(self, w: &mut Worker, peer: Peer) -> crate::RequestHandle {
        let origin = self.origin.clone();
        let block = BlockRequest {
            path: self.path,
            origin: origin.as_deref(),
            hop: self.hop,
        };
        let client = self.client.clone();
        let upstream = peer.addr.clone();
        if self.to_origin {
            self.counters.origin_fetches.inc();
        } else {
            self.counters.parent_fetches.inc();
        }
        client.submit_from(
            w,
            &peer,
            block,
            GetOptions::default(),
            Box::new(move |fetched| {
                let peer = Peer::from_addr(upstream);
                let result = relayed_result(fetched.ending.as_ref());
                let path = self.path;
                if let (true, SourceResult::Found(bytes)) = (self.to_origin, &result) {
                    self.counters.origin_bytes.inc_by(bytes.len() as u64);
                }
                tracing::debug!(%path, upstream = %peer.addr, outcome = fetched.describe(), "relayed");
                if self.object.is_some() && !self.object_answer_is_final(&result) {
                    let worker = self.worker.clone();
                    worker.run(move |w| {
                        // The parent could not serve it: the origin's Range GET.
                        let _ = self.start_range(w);
                    });
                    return;
                }
                if !parent_answer_is_final(&result) {
                    if let Some(origin) = self.then.clone() {
                        let worker = self.worker.clone();
                        let next = RelayedFetch {
                            then: None,
                            to_origin: true,
                            ..self
                        };
                        worker.run(move |w| {
                            // The parent could not serve it: the origin itself.
                            let _ = next.start(w, Peer::from_addr(origin));
                        });
                        return;
                    }
                }
                self.finish(result);
            }),
        )
    }

    /// The expected length of this object block (`None` without an object or past its
    /// end).
    fn object_len(&self) -> Option<u64> {
        self.object
            .as_ref()?
            .block_range(self.path.index)
            .map(|(_, len)| len)
    }

    /// Whether the parent's answer for an object block is final: a block of the exact
    /// length, or a refusal passed on.
    fn object_answer_is_final(&self, result: &SourceResult) -> bool {
        match result {
            SourceResult::Found(bytes) => Some(bytes.len() as u64) == self.object_len(),
            other => parent_answer_is_final(other),
        }
    }

    /// The Range GET of this object block from its origin (`http://` only: an
    /// `https://` object is answered `Failed` here, the mio driver has no TLS). `None`
    /// when no request was started (the answer is already given).
    fn start_range(self, w: &mut Worker) -> Option<crate::RequestHandle> {
        let object = self.object.clone()?;
        if object.url.scheme == Scheme::Https {
            tracing::warn!(path = %self.path, "relay: https object origins are not read by the mio driver");
            (self.answer)(SourceResult::Failed);
            return None;
        }
        let index = self.path.index;
        if object.block_range(index).is_none() {
            // Declined by the server's identity screen before it gets here; never asked.
            (self.answer)(SourceResult::Miss);
            return None;
        }
        let client = self.client.clone();
        let shown = object.url.authority();
        self.counters.origin_fetches.inc();
        client.range_from(
            w,
            &object,
            index,
            Box::new(move |fetched| {
                let result = relayed_result(fetched.ending.as_ref());
                if let SourceResult::Found(bytes) = &result {
                    self.counters.origin_bytes.inc_by(bytes.len() as u64);
                }
                tracing::debug!(path = %self.path, origin = %shown, outcome = fetched.describe(), "relayed from the object origin");
                self.finish(result);
            }),
        )
    }

    /// Validates a found block before it is answered (and cached when it may be). A block
    /// `i` of a chunk whose manifest is not here has the manifest (block 0, checked
    /// against the key, one fetch per chunk through the single-flight table) fetched
    /// first, then is checked again; if the manifest cannot be had, the block is served
    /// unchecked (the reader validates it) and cached nowhere. A block of an object
    /// origin has its exact length checked instead.
    fn finish(self, result: SourceResult) {
        if let Some(len) = self.object_len() {
            // An object block: its exact length (no manifest to check it against), then
            // the relay cache and the hot-block cache (never imported content).
            // The waiters are answered once the block is kept (as the manifest-checked
            // path below): a miss after the answer finds it, never a second flight.
            match result {
                SourceResult::Found(bytes) if bytes.len() as u64 == len => {
                    let (answer, found) = (self.answer, bytes.clone());
                    crate::store_writer::keep_checked(
                        &self.store,
                        self.path,
                        bytes,
                        Box::new(move |_| answer(SourceResult::Found(found))),
                    );
                }
                SourceResult::Found(_) => (self.answer)(SourceResult::Failed),
                other => (self.answer)(other),
            }
            return;
        }
        let SourceResult::Found(bytes) = result else {
            (self.answer)(result);
            return;
        };
        let (store, path) = (self.store.clone(), self.path);
        let block = bytes.clone();
        let (shared, worker, answer) = (self.shared, self.worker, self.answer);
        let manifest = SourceRequest {
            path: peerblock_core::wire::BlockPath {
                key: path.key,
                index: 0,
            },
            ..self.request
        };
        crate::store_writer::check_then_put(
            &store.clone(),
            path,
            bytes,
            Box::new(move |verdict| match verdict {
                RelayVerdict::Reject => answer(SourceResult::Failed),
                RelayVerdict::Store => answer(SourceResult::Found(block)),
                RelayVerdict::ServeOnly if path.index == 0 => answer(SourceResult::Found(block)),
                RelayVerdict::ServeOnly => worker.run(move |w| {
                    let then = move |fetched: SourceResult| {
                        if !matches!(fetched, SourceResult::Found(_)) {
                            answer(SourceResult::Found(block));
                            return;
                        }
                        let found = block.clone();
                        crate::store_writer::check_then_put(
                            &store,
                            path,
                            block,
                            Box::new(move |verdict| {
                                answer(match verdict {
                                    RelayVerdict::Reject => SourceResult::Failed,
                                    _ => SourceResult::Found(found),
                                })
                            }),
                        );
                    };
                    want_flight(&shared, w, &manifest, Box::new(then));
                }),
            }),
        );
    }
}

impl Driven for ListenerEntry {
    fn on_ready(&mut self, w: &mut Worker, key: Key, _ready: Ready) -> After {
        self.drive(w, key)
    }

    fn on_timer(&mut self, w: &mut Worker, key: Key) -> After {
        self.drive(w, key)
    }
}

impl Driven for ServerConn {
    fn on_ready(&mut self, w: &mut Worker, key: Key, ready: Ready) -> After {
        self.drive(w, key, ready)
    }

    fn on_timer(&mut self, w: &mut Worker, key: Key) -> After {
        self.timeout(w, key)
    }
}
