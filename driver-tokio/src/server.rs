//! The peer server: a listener, core admission at accept time, one task per connection
//! driving core's `ServerConnection`, a bounded light path for refused connections, and
//! graceful shutdown.
//!
//! ```no_run
//! # async fn demo() -> Result<(), peerblock_tokio::server::ServerError> {
//! use std::sync::Arc;
//! use peerblock_core::server::ServerConfig;
//! use peerblock_core::time::Clock;
//! use peerblock_tokio::server::{Server, ServerOptions};
//! use peerblock_tokio::source::{FileStore, DEFAULT_MAX_BLOCK_SIZE};
//!
//! let clock = Clock::new(std::time::Instant::now());
//! let config = Arc::new(ServerConfig::new("node-1", "127.0.0.1:7070"));
//! let store = Arc::new(FileStore::new("/var/lib/peerblock", DEFAULT_MAX_BLOCK_SIZE));
//! let options = ServerOptions::new(config, store, clock);
//! let server = Server::bind("127.0.0.1:7070".parse().unwrap(), options).await?;
//! let handle = server.spawn();
//! // ... later:
//! handle.shutdown(std::time::Duration::from_secs(5)).await;
//! # Ok(()) }
//! ```
//!
//! How each connection task maps core's driving contract onto tokio is in
//! docs/architecture.md ("The tokio driver: server").

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use peerblock_core::roster::{Attestation, LearnOutcome, Roster};
use peerblock_core::server::{
    Admission, AdmissionConfig, AdmissionConfigError, RequestId, RequestRejection, ServerConfig,
    ServerConfigError, ServerConnection, ServerEvent, SourceResult,
};
use peerblock_core::time::{Clock, Instant};
use peerblock_core::transmit::{Close, Transmit};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinError, JoinSet};
use tokio::time::Sleep;

use atomic_waker::AtomicWaker;

use crate::metrics::Metrics;
use crate::pace::{ConnPace, UploadPacing};
use crate::source::{BlockFuture, BlockSource};
use crate::SharedMembership;

/// Bytes a connection's task writes before it yields to the runtime, so that one
/// connection whose socket keeps taking bytes cannot hold a worker while others wait (the
/// mio driver's per-turn write bound plays the same part).
const WRITE_BYTES_PER_TURN: usize = 256 * 1024;

/// How long the accept loop pauses after an accept error (out of file descriptors, say)
/// before accepting again, so a persistent error does not spin a core.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(20);

/// Everything a [`Server`] needs. [`ServerOptions::new`] fills the defaults.
#[derive(Clone)]
pub struct ServerOptions {
    /// Core's per-connection configuration (node id, advertised address, relay policy,
    /// timeouts). Checked by [`Server::bind`].
    pub config: Arc<ServerConfig>,
    /// Core's admission limits (docs/limits.md). Checked by [`Server::bind`].
    pub admission: AdmissionConfig,
    /// The node's roster table: roster requests are answered with its snapshot and
    /// identified callers are learned into it. `None` answers a roster of this node alone
    /// and learns nothing.
    pub membership: Option<SharedMembership>,
    /// Where the blocks come from.
    pub source: Arc<dyn BlockSource>,
    /// The node's one clock (shared with every other machine of the node).
    pub clock: Clock,
    /// The node's metrics (shared with its other parts).
    pub metrics: Metrics,
    /// Upload pacing of response writes (default off; `[listener]
    /// upload_bytes_per_second`, `crate::pace`).
    pub pacing: UploadPacing,
    /// `[listener] when_full = "silent"` (default false: refuse explicitly): the accept
    /// loop pauses while every session is taken, and a refusal is never written (its
    /// connection is closed instead). For replays of the reference transport only.
    pub silent_when_full: bool,
    /// With `silent_when_full`: the reference transport's channel table (`[listener]
    /// max_channels`): sessions + requests in progress at most this; the accept loop
    /// pauses at it and a request over it has its connection closed. `None`: no table.
    pub silent_channels: Option<usize>,
}

impl ServerOptions {
    /// Options with default admission limits, no membership and fresh metrics.
    pub fn new(config: Arc<ServerConfig>, source: Arc<dyn BlockSource>, clock: Clock) -> Self {
        ServerOptions {
            config,
            admission: AdmissionConfig::default(),
            membership: None,
            source,
            clock,
            metrics: Metrics::new(),
            pacing: UploadPacing::off(),
            silent_when_full: false,
            silent_channels: None,
        }
    }
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("config", &self.config)
            .field("admission", &self.admission)
            .field("membership", &self.membership.is_some())
            .field("clock", &self.clock)
            .field("pacing", &self.pacing)
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
    /// The bound listener's own address could not be read.
    #[error("reading the listener's local address: {0}")]
    LocalAddr(#[source] io::Error),
}

/// Where the server is in its life; connection tasks watch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Accepting and serving.
    Running,
    /// Shutdown asked: no more accepts, no more reads; in-flight responses finish.
    Draining,
    /// The grace bound passed (or the handle was dropped): every connection closes now.
    Closing,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Running,
            1 => Phase::Draining,
            _ => Phase::Closing,
        }
    }
}

/// The phase as the connection tasks see it: an atomic each reads at every turn, and one
/// waker slot per connection that a change wakes. Waiting on it costs a connection one
/// atomic waker registration per wake, where a shared `watch` channel cost a lock on the
/// channel's waiter list to register and another to unregister on every wake, both
/// contended by every worker (measured: docs/benchmarks.md, "Fair serving under load").
struct Phases {
    current: AtomicU8,
    next_id: AtomicU64,
    /// Each live connection's waker slot, by connection id.
    wakers: Mutex<BTreeMap<u64, Arc<AtomicWaker>>>,
}

impl Phases {
    fn new() -> Phases {
        Phases {
            current: AtomicU8::new(Phase::Running as u8),
            next_id: AtomicU64::new(0),
            wakers: Mutex::new(BTreeMap::new()),
        }
    }

    fn current(&self) -> Phase {
        Phase::from_u8(self.current.load(Ordering::Acquire))
    }

    /// Moves to `phase` (never back) and wakes every connection.
    fn set(&self, phase: Phase) {
        self.current.fetch_max(phase as u8, Ordering::AcqRel);
        let wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        for waker in wakers.values() {
            waker.wake();
        }
    }

    /// A new connection's waker slot (removed by [`Phases::leave`]).
    fn join(&self) -> (u64, Arc<AtomicWaker>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let waker = Arc::new(AtomicWaker::new());
        self.wakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::clone(&waker));
        (id, waker)
    }

    fn leave(&self, id: u64) {
        self.wakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }
}

/// What the listener and every connection task share.
struct Shared {
    config: Arc<ServerConfig>,
    admission: Mutex<Admission>,
    membership: Option<SharedMembership>,
    source: Arc<dyn BlockSource>,
    clock: Clock,
    metrics: Metrics,
    pacing: UploadPacing,
    silent_when_full: bool,
    silent_channels: Option<usize>,
    /// Woken whenever a connection is admitted, refused or closed
    /// ([`ServerHandle::wait_until`]).
    changed: tokio::sync::Notify,
    /// The phase the connection tasks follow (the accept loop follows the `watch`).
    phases: Phases,
}

impl Shared {
    fn now(&self) -> Instant {
        self.clock.to_core(std::time::Instant::now())
    }

    /// The node's admission. Held only for one core call, never across an `.await`.
    fn admission(&self) -> MutexGuard<'_, Admission> {
        self.admission
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A bound, not yet running server. [`spawn`](Self::spawn) starts it.
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Checks `options` and binds `addr` (port 0 picks a free port; see
    /// [`local_addr`](Self::local_addr)). Nothing is accepted before
    /// [`spawn`](Self::spawn).
    pub async fn bind(addr: SocketAddr, options: ServerOptions) -> Result<Server, ServerError> {
        options.config.validate()?;
        Admission::<IpAddr>::new(options.admission.clone())?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        Server::from_listener(listener, options)
    }

    /// A server on an already bound listener (for an integrator that binds itself).
    pub fn from_listener(
        listener: TcpListener,
        options: ServerOptions,
    ) -> Result<Server, ServerError> {
        options.config.validate()?;
        let admission = Admission::new(options.admission)?;
        let local_addr = listener.local_addr().map_err(ServerError::LocalAddr)?;
        Ok(Server {
            listener,
            local_addr,
            shared: Arc::new(Shared {
                config: options.config,
                admission: Mutex::new(admission),
                membership: options.membership,
                source: options.source,
                clock: options.clock,
                metrics: options.metrics,
                pacing: options.pacing,
                silent_when_full: options.silent_when_full,
                silent_channels: options.silent_channels,
                changed: tokio::sync::Notify::new(),
                phases: Phases::new(),
            }),
        })
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Starts the accept loop on the current tokio runtime and returns its handle.
    /// Dropping the handle without [`ServerHandle::shutdown`] stops the server at once
    /// (no grace).
    pub fn spawn(self) -> ServerHandle {
        let (phase_tx, phase_rx) = watch::channel(Phase::Running);
        // Nothing is ever sent: every task holds a clone of `done_tx`, and `recv` returns
        // `None` once the last one has ended.
        let (done_tx, done_rx) = mpsc::channel::<()>(1);
        let shared = Arc::clone(&self.shared);
        tokio::spawn(accept_loop(self.listener, shared, phase_rx, done_tx));
        tracing::info!(addr = %self.local_addr, node = %self.shared.config.node_id, "server listening");
        ServerHandle {
            local_addr: self.local_addr,
            shared: self.shared,
            phase: phase_tx,
            done: done_rx,
        }
    }
}

/// A running server: its address, a view of its state, and graceful shutdown.
pub struct ServerHandle {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    phase: watch::Sender<Phase>,
    done: mpsc::Receiver<()>,
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

    /// Sessions core's admission holds now (admitted connections not yet closed or
    /// lingering).
    pub fn sessions(&self) -> usize {
        self.shared.admission().sessions()
    }

    /// Requests core's admission holds now (begun and not yet fully written).
    pub fn requests(&self) -> usize {
        self.shared.admission().requests()
    }

    /// Resolves once `condition` holds, checking it now and again whenever a connection
    /// is admitted, refused or closed (and, with a silent channel table, whenever a
    /// response is fully written): lets a test or a tool wait for a state of the
    /// server (`h.sessions() == 2`, a metric reaching a count) without polling on a timer.
    /// Bound it with a timeout if the state may never come.
    pub async fn wait_until(&self, mut condition: impl FnMut(&ServerHandle) -> bool) {
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if condition(self) {
                return;
            }
            changed.await;
        }
    }

    /// Stops accepting at once (the listener is closed), lets in-flight responses finish
    /// for at most `grace` (connections read no new input meanwhile, and one with nothing
    /// in progress closes at once), then closes every remaining connection. Every
    /// connection calls core's `close`. Resolves when every connection task has ended.
    pub async fn shutdown(mut self, grace: Duration) {
        tracing::info!(addr = %self.local_addr, ?grace, "server shutting down");
        self.set_phase(Phase::Draining);
        if tokio::time::timeout(grace, self.done.recv()).await.is_err() {
            tracing::info!(addr = %self.local_addr, "grace period over: closing every connection");
            self.set_phase(Phase::Closing);
            self.done.recv().await;
        }
        tracing::info!(addr = %self.local_addr, "server stopped");
    }
}

impl ServerHandle {
    /// Tells the accept loop (its `watch`) and every connection task (their [`Phases`]).
    fn set_phase(&self, phase: Phase) {
        let _ = self.phase.send(phase);
        self.shared.phases.set(phase);
    }
}

impl Drop for ServerHandle {
    /// Dropped without [`ServerHandle::shutdown`] (or after it): every connection closes
    /// now.
    fn drop(&mut self) {
        self.set_phase(Phase::Closing);
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut phase: watch::Receiver<Phase>,
    done: mpsc::Sender<()>,
) {
    loop {
        if shared.silent_when_full && !wait_for_a_free_session(&shared, &mut phase).await {
            break;
        }
        let accepted = tokio::select! {
            biased;
            _ = phase.changed() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => on_accept(&shared, stream, peer, &done),
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
            }
        }
    }
    tracing::debug!("accept loop ended: listener closed");
}

/// A silent listener accepts nothing while every session is taken (dials wait in the
/// kernel's accept queue, then go unanswered). False when the server stops meanwhile.
async fn wait_for_a_free_session(shared: &Shared, phase: &mut watch::Receiver<Phase>) -> bool {
    loop {
        // Created before the check, so a close between the check and the wait wakes it.
        let changed = shared.changed.notified();
        let full = {
            let a = shared.admission();
            a.sessions() >= a.config().max_sessions
                || shared
                    .silent_channels
                    .is_some_and(|c| a.sessions() + a.requests() >= c)
        };
        if !full {
            return true;
        }
        tokio::select! {
            biased;
            _ = phase.changed() => return false,
            () = changed => {}
        }
    }
}

/// Admission at accept time: an admitted connection gets its task; a refused one the
/// light path (within core's `AdmissionConfig::max_refusals`) or, over that bound, an
/// immediate close.
fn on_accept(shared: &Arc<Shared>, stream: TcpStream, peer: SocketAddr, done: &mpsc::Sender<()>) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%peer, error = %e, "setting TCP_NODELAY failed");
    }
    let now = shared.now();
    let accepted = {
        let mut admission = shared.admission();
        ServerConnection::accept(now, &mut admission, peer.ip(), Arc::clone(&shared.config))
    };
    let machine = match accepted {
        Ok(machine) => machine,
        Err(e) => {
            // Unreachable: the configuration was validated when the server was built.
            tracing::error!(error = %e, "server configuration rejected by core");
            return;
        }
    };
    if let Some(refusal) = machine.refused() {
        shared.metrics.refused(refusal.reason.as_token());
        shared.changed.notify_waiters();
        let mut conn = Conn::new(Arc::clone(shared), stream, peer, machine, false);
        if conn.machine.dropped_at_accept() {
            tracing::debug!(%peer, reason = refusal.reason.as_token(), "connection refused and the refusal path is full: closed at once");
            conn.close();
        } else {
            tracing::debug!(%peer, reason = refusal.reason.as_token(), "connection refused: answering its first request");
            tokio::spawn(refuse(conn, done.clone()));
        }
        return;
    }
    shared.metrics.connections_accepted.inc();
    shared.metrics.sessions_open.inc();
    shared.changed.notify_waiters();
    tracing::debug!(%peer, "connection admitted");
    let conn = Conn::new(Arc::clone(shared), stream, peer, machine, true);
    tokio::spawn(serve(conn, done.clone()));
}

/// An admitted connection's task.
async fn serve(mut conn: Conn, _done: mpsc::Sender<()>) {
    let ended = conn.run().await;
    conn.ended(ended);
}

/// A refused connection's task: the machine (in its refusing state) reads the first
/// request head, hands out the 503 and lingers; the same loop drives it, but it never
/// asks a source and holds one of core's refusal slots instead of a session (released
/// by `close`).
async fn refuse(mut conn: Conn, _done: mpsc::Sender<()>) {
    let ended = conn.run().await;
    conn.ended(ended);
}

/// Why a connection's loop ended.
#[derive(Debug)]
enum Ended {
    /// The machine finished (written `Connection: close`, linger over, EOF with nothing
    /// in progress, idle or send timeout).
    Finished,
    /// Server shutdown.
    Shutdown,
    /// A socket error (reset, broken pipe).
    Io(io::Error),
}

/// What woke a connection's task.
enum Wake {
    Io(io::Result<()>),
    Source(Option<Result<(RequestId, SourceResult), JoinError>>),
    Timer,
    Paced,
    Phase,
}

/// What a connection's task waits for this time round (see [`Conn::poll_wake`]).
struct Wait {
    /// The phase seen: any other wakes the task.
    phase: Phase,
    timer: bool,
    paced: bool,
    sourcing: bool,
    read: bool,
    write: bool,
}

/// A response being written: the transmit and how many of its bytes (head then body) are
/// out.
struct Outgoing {
    tx: Transmit,
    written: usize,
}

/// One connection: its socket, its machine, the source tasks it started, and the
/// response being written. Dropping it calls core's `close` (every exit path).
struct Conn {
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    machine: ServerConnection,
    /// Holds a session (counted in `sessions_open`).
    admitted: bool,
    out: Option<Outgoing>,
    /// Source futures running for this connection, at most core's pipelining depth
    /// (`max_requests_per_session`) at once: core asks one per request in progress, and
    /// an ask that timed out is aborted.
    sources: JoinSet<(RequestId, SourceResult)>,
    asks: Vec<(RequestId, AbortHandle)>,
    eof: bool,
    closed: bool,
    sleep: Pin<Box<Sleep>>,
    armed: Option<std::time::Instant>,
    /// Upload pacing of this connection's writes (`None`: off).
    pace: Option<ConnPace>,
    /// A silent listener's channel table had no room for a request: close.
    silenced: bool,
    /// Bytes written since the task last yielded to the runtime (see [`WRITE_BYTES_PER_TURN`]).
    written_since_yield: usize,
    /// This connection's slot in the server's [`Phases`] (its id and waker).
    phase_slot: (u64, Arc<AtomicWaker>),
}

impl Conn {
    fn new(
        shared: Arc<Shared>,
        stream: TcpStream,
        peer: SocketAddr,
        machine: ServerConnection,
        admitted: bool,
    ) -> Conn {
        Conn {
            stream,
            peer,
            machine,
            admitted,
            out: None,
            sources: JoinSet::new(),
            asks: Vec::new(),
            eof: false,
            closed: false,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: None,
            pace: shared.pacing.connection(shared.now()),
            silenced: false,
            written_since_yield: 0,
            phase_slot: shared.phases.join(),
            shared,
        }
    }

    async fn run(&mut self) -> Ended {
        // One clock read per wake: taken after every `.await`, used by everything the
        // task does until the next one (a few microseconds of work, no waiting).
        let mut now = self.shared.now();
        loop {
            self.pump(now);
            if self.silenced {
                return Ended::Io(io::Error::other(
                    "silent listener: no channel for a request",
                ));
            }
            if let Err(e) = self.write(now) {
                return Ended::Io(e);
            }
            if self.written_since_yield >= WRITE_BYTES_PER_TURN {
                // Fairness: a socket that stays writable and readable (the next request
                // already waiting) never makes this task wait, and tokio's budget does
                // not count `try_write`: yield, so every other connection gets its turn.
                self.written_since_yield = 0;
                tokio::task::yield_now().await;
            }
            // Finished with a transmit still unwritten happens only when core gave up on
            // it (its send-progress deadline passed): the connection ends here too,
            // whatever is left unwritten.
            if self.machine.is_finished() {
                return Ended::Finished;
            }
            let phase = self.shared.phases.current();
            let draining = match phase {
                Phase::Running => false,
                Phase::Closing => return Ended::Shutdown,
                Phase::Draining => {
                    if self.machine.in_progress() == 0 && self.out.is_none() {
                        return Ended::Shutdown;
                    }
                    true
                }
            };
            let want_read = !self.eof && !draining && self.machine.read_buf().is_some();
            let paced = self.pace.as_ref().is_some_and(|p| p.waiting);
            let want_write = self.out.is_some() && !paced;
            self.arm_timer();
            let wait = Wait {
                phase,
                timer: self.armed.is_some(),
                paced,
                sourcing: !self.sources.is_empty(),
                read: want_read,
                write: want_write,
            };
            let mut waited = false;
            let wake = std::future::poll_fn(|cx| {
                let wake = self.poll_wake(cx, &wait);
                waited |= wake.is_pending();
                wake
            })
            .await;
            now = self.shared.now();
            if waited {
                // The task gave its worker back: the fairness count starts again.
                self.written_since_yield = 0;
            }
            match wake {
                Wake::Io(Err(e)) => return Ended::Io(e),
                Wake::Io(Ok(())) => {
                    if want_read {
                        if let Err(e) = self.read(now) {
                            return Ended::Io(e);
                        }
                    }
                    // A writable socket is written at the top of the loop.
                }
                Wake::Source(Some(joined)) => self.on_source(now, joined),
                Wake::Source(None) => {}
                Wake::Timer => {
                    self.armed = None;
                    self.machine.handle_timeout(now);
                }
                Wake::Paced => {
                    if let Some(p) = self.pace.as_mut() {
                        p.waiting = false;
                    }
                }
                // Read again at the top of the loop.
                Wake::Phase => {}
            }
        }
    }

    /// Polls what the connection waits for, in a fixed order: the phase, the timer and
    /// the pacing timer first, so a socket that is always ready cannot keep the
    /// connection's deadlines from firing; then the source tasks, then the socket. Each is
    /// polled directly (`poll_read_ready`, `poll_join_next`, ...): no future is built and
    /// dropped per wake, no random start drawn.
    fn poll_wake(&mut self, cx: &mut Context<'_>, wait: &Wait) -> Poll<Wake> {
        self.phase_slot.1.register(cx.waker());
        if self.shared.phases.current() != wait.phase {
            return Poll::Ready(Wake::Phase);
        }
        if wait.timer && self.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Wake::Timer);
        }
        if wait.paced {
            if let Some(p) = self.pace.as_mut() {
                if p.sleep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Wake::Paced);
                }
            }
        }
        if wait.sourcing {
            if let Poll::Ready(joined) = self.sources.poll_join_next(cx) {
                return Poll::Ready(Wake::Source(joined));
            }
        }
        if wait.read {
            if let Poll::Ready(r) = self.stream.poll_read_ready(cx) {
                return Poll::Ready(Wake::Io(r));
            }
        }
        if wait.write {
            if let Poll::Ready(r) = self.stream.poll_write_ready(cx) {
                return Poll::Ready(Wake::Io(r));
            }
        }
        Poll::Pending
    }

    /// One read into the machine's window (the socket said it is readable).
    fn read(&mut self, now: Instant) -> io::Result<()> {
        let Some(buf) = self.machine.read_buf() else {
            return Ok(());
        };
        let len = buf.len();
        // `try_io` rather than `try_read`: a short read means the socket's receive queue
        // is empty, so its readiness is cleared as tokio's own `poll_read` does. Without
        // that, every request costs a second `recv` that only says "would block" (the
        // client sends its next request only after this response).
        let mut short = None;
        let read = self.stream.try_io(tokio::io::Interest::READABLE, || {
            let n = io::Read::read(&mut &*socket2::SockRef::from(&self.stream), buf)?;
            if n > 0 && n < len {
                short = Some(n);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let read = match (read, short) {
            (_, Some(n)) => Ok(n),
            (read, None) => read,
        };
        match read {
            Ok(0) => {
                self.eof = true;
                self.machine.handle_eof(now);
            }
            Ok(n) => {
                self.machine.handle_read(now, n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Begins decoded requests, answers every event that can be answered now, starts the
    /// source tasks, and takes the next transmit if none is being written.
    fn pump(&mut self, now: Instant) {
        if self.machine.needs_admission() {
            let mut admission = self.shared.admission();
            self.machine.handle_admission(now, &mut admission);
        }
        while let Some(event) = self.machine.poll_event() {
            self.on_event(now, event);
        }
        if self.out.is_none() {
            if let Some(tx) = self.machine.poll_transmit(now) {
                self.shared
                    .metrics
                    .inflight_bytes
                    .inc_by(tx.body.len() as i64);
                self.out = Some(Outgoing { tx, written: 0 });
            }
        }
    }

    fn on_event(&mut self, now: Instant, event: ServerEvent) {
        match event {
            ServerEvent::Fetch { id, request } => {
                if let Some(channels) = self.shared.silent_channels {
                    let a = self.shared.admission();
                    if a.sessions() + a.requests() > channels {
                        // No channel for it: the silent listener closes the stream.
                        self.silenced = true;
                        return;
                    }
                }
                tracing::trace!(peer = %self.peer, path = %request.path, "fetch");
                let future = self.shared.source.fetch(&request);
                self.ask(now, id, future);
            }
            ServerEvent::Relay { id, request } => {
                tracing::trace!(peer = %self.peer, path = %request.path, hop = request.hop.0, "relay");
                let future = self.shared.source.relay(&request);
                self.ask(now, id, future);
            }
            ServerEvent::Roster { id, caller } => {
                let roster = match &self.shared.membership {
                    Some(membership) => {
                        let mut table = membership.lock().unwrap_or_else(PoisonError::into_inner);
                        if let Some(caller) = &caller {
                            // The budget of new members is per source IP; the record (if
                            // any) is verified by the table.
                            let source = self.peer.ip().to_string();
                            let (record, weight) =
                                Attestation::from_header(caller.record.as_deref());
                            let weight = caller.record.is_some().then_some(weight);
                            match table.learn_caller(
                                now,
                                &source,
                                &caller.id,
                                &caller.addr,
                                &record,
                                weight,
                            ) {
                                Ok(LearnOutcome::Rejected(why)) => {
                                    tracing::debug!(peer = %self.peer, id = %caller.id, reason = why.name(), "roster caller rejected")
                                }
                                Ok(outcome) => {
                                    tracing::debug!(peer = %self.peer, id = %caller.id, addr = %caller.addr, ?outcome, "roster caller learned")
                                }
                                Err(e) => {
                                    tracing::debug!(peer = %self.peer, id = %caller.id, error = %e, "roster caller not learned")
                                }
                            }
                            self.shared.metrics.record_membership(table.stats());
                            self.shared
                                .metrics
                                .roster_members
                                .set(table.len() as i64 + 1);
                            self.shared.metrics.record_placed(&table);
                        }
                        table.snapshot()
                    }
                    // No table: core adds this node's own entry to the empty roster.
                    None => Roster::empty(),
                };
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
                if let Some(at) = self.asks.iter().position(|(ask, _)| *ask == id) {
                    let (_, handle) = self.asks.swap_remove(at);
                    handle.abort();
                }
            }
            // An event a later core adds (`#[non_exhaustive]`): nothing to answer.
            other => tracing::debug!(peer = %self.peer, event = ?other, "server event ignored"),
        }
    }

    /// Runs a source future: polled once in place (a source that answers at once, such
    /// as a memory store or a cache hit, costs no task), else spawned on the connection's
    /// source set, whose answer comes back through [`Self::on_source`].
    fn ask(&mut self, now: Instant, id: RequestId, mut future: BlockFuture) {
        let mut cx = Context::from_waker(Waker::noop());
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(result) => self.answer(now, id, result),
            Poll::Pending => {
                let handle = self.sources.spawn(async move { (id, future.await) });
                self.asks.push((id, handle));
            }
        }
    }

    /// A source task ended: its answer goes to the machine.
    fn on_source(&mut self, now: Instant, joined: Result<(RequestId, SourceResult), JoinError>) {
        let (id, result) = match joined {
            Ok(answer) => answer,
            Err(e) if e.is_cancelled() => return,
            Err(e) => {
                let task = e.id();
                let Some(&(id, _)) = self.asks.iter().find(|(_, h)| h.id() == task) else {
                    return;
                };
                tracing::warn!(peer = %self.peer, error = %e, "block source panicked: answered 500");
                (id, SourceResult::Failed)
            }
        };
        self.asks.retain(|(ask, _)| *ask != id);
        self.answer(now, id, result);
    }

    /// Hands a source's answer to the machine.
    fn answer(&mut self, now: Instant, id: RequestId, result: SourceResult) {
        let answered = {
            let mut admission = self.shared.admission();
            self.machine.handle_source(now, &mut admission, id, result)
        };
        if let Err(e) = answered {
            tracing::debug!(peer = %self.peer, error = %e, "late source answer dropped");
        }
    }

    /// Writes the current transmit (vectored: head and body, the body never copied) as
    /// far as the socket takes it, acknowledging each one fully written and taking the
    /// next, until the socket would block or nothing is left.
    fn write(&mut self, now: Instant) -> io::Result<()> {
        while let Some(out) = &mut self.out {
            if self.written_since_yield >= WRITE_BYTES_PER_TURN {
                return Ok(()); // the caller yields, then writes on (rule: fair turns)
            }
            if self.shared.silent_when_full && out.tx.refusal.is_some() {
                // A silent listener never answers a refusal: the connection just closes.
                return Err(io::Error::other("silent listener: refusal withheld"));
            }
            let head = &out.tx.head;
            let body = &out.tx.body;
            let total = head.len() + body.len();
            if out.written < total {
                // Paced: at most the grant (the rest waits for the pacing timer).
                let allow = match self.pace.as_mut() {
                    Some(p) => match p.grant(&self.shared.clock, now, total - out.written) {
                        Some(n) => n,
                        None => return Ok(()),
                    },
                    None => total - out.written,
                };
                let end = out.written + allow;
                let written = if out.written < head.len() {
                    let slices = [
                        IoSlice::new(&head[out.written..end.min(head.len())]),
                        IoSlice::new(&body[..end.saturating_sub(head.len())]),
                    ];
                    self.stream.try_write_vectored(&slices)
                } else {
                    self.stream
                        .try_write(&body[out.written - head.len()..end - head.len()])
                };
                let taken = *written.as_ref().unwrap_or(&0);
                if let Some(p) = self.pace.as_mut() {
                    p.refund(allow - taken);
                }
                match written {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        out.written += n;
                        self.written_since_yield += n;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) => return Err(e),
                }
                if out.written < total {
                    continue;
                }
            }
            let Some(Outgoing { tx, .. }) = self.out.take() else {
                break;
            };
            self.transmitted(now, tx)?;
            self.pump(now);
        }
        Ok(())
    }

    /// One transmit is fully written: acknowledge it, count it, act on its `close`.
    fn transmitted(&mut self, now: Instant, tx: Transmit) -> io::Result<()> {
        {
            let mut admission = self.shared.admission();
            self.machine.handle_transmitted(now, &mut admission);
        }
        if self.shared.silent_channels.is_some() {
            // A request's channel is free again: say so to `ServerHandle::wait_until`.
            // Only with a channel table (replays), so serving pays nothing for it.
            self.shared.changed.notify_waiters();
        }
        let metrics = &self.shared.metrics;
        let body = tx.body.len() as u64;
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
                if let Err(e) =
                    socket2::SockRef::from(&self.stream).shutdown(std::net::Shutdown::Write)
                {
                    if e.kind() != io::ErrorKind::NotConnected {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Keeps one timer armed no later than the machine's deadline. The timer is moved
    /// only when the deadline comes earlier than the armed one (or nothing is armed):
    /// every answered request pushes the idle deadline later, and moving a tokio timer
    /// costs a lock on the runtime's timer wheel each time. A timer that fires before the
    /// machine's deadline costs one spurious `handle_timeout` (harmless by core's
    /// contract) and is armed again at the deadline then current.
    fn arm_timer(&mut self) {
        let at = self
            .machine
            .poll_timeout()
            .and_then(|d| self.shared.clock.to_std(d.at));
        match (at, self.armed) {
            (Some(at), Some(armed)) if armed <= at => {}
            (Some(at), _) => {
                self.sleep
                    .as_mut()
                    .reset(tokio::time::Instant::from_std(at));
                self.armed = Some(at);
            }
            (None, _) => self.armed = None,
        }
    }

    /// The loop ended: log why, then close.
    fn ended(&mut self, ended: Ended) {
        match &ended {
            Ended::Finished => tracing::debug!(peer = %self.peer, "connection finished"),
            Ended::Shutdown => tracing::debug!(peer = %self.peer, "connection closed by shutdown"),
            Ended::Io(e) => {
                tracing::debug!(peer = %self.peer, error = %e, "connection ended by a socket error")
            }
        }
        self.close();
    }

    /// Calls core's `close` (releasing every ticket), aborts the source tasks and settles
    /// the metrics. Idempotent; also run on drop, so no exit path skips it.
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
        self.sources.abort_all();
        self.asks.clear();
        if let Some(out) = self.out.take() {
            self.shared
                .metrics
                .inflight_bytes
                .dec_by(out.tx.body.len() as i64);
        }
        if self.admitted {
            self.shared.metrics.sessions_open.dec();
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.close();
        self.shared.phases.leave(self.phase_slot.0);
        self.shared.changed.notify_waiters();
    }
}
