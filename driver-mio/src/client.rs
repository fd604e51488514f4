//! The client on readiness loops: core's `client::Exchange` over non-blocking sockets,
//! one shared `client::Peers` (breaker, cooldowns, loads, GETs in flight) per client, and
//! per-peer connection slots and keep-alive pools.
//!
//! **Peer affinity.** Every exchange with one peer address runs on one worker (the
//! address's hash picks it): that peer's pool, its connection slots and the requests
//! waiting for a slot all live on that worker, so they need no lock and a waiter is
//! handed the connection its predecessor pooled. Only `Peers` is shared (one mutex,
//! locked around `admit`, `finish`, `abandon` and a read's `poll_event`).
//!
//! Around each request the client makes core's calls in docs/exchange.md's order, as the
//! tokio client does: `Peers::admit`; a connection slot (waiting, bounded by the caller's
//! deadline or the request deadline); `Exchange::new` on a pooled connection or a dial
//! (a non-blocking `connect` whose completion is the socket turning writable, cut by the
//! exchange's own dial deadline); `poll_transmit`/`handle_transmitted`;
//! `read_buf`/`handle_read`/`handle_eof`; `ClientEvent::{Head, Validate, Done}`; once
//! more on a fresh dial if `retry_fresh` says a pooled connection was retired; then the
//! connection back to the pool (before its slot is released) and `Peers::finish`.
//!
//! The blocking calls ([`Client::get`], [`Client::fetch_block`], [`Client::fetch_roster`])
//! wait for the outcome on the calling thread; never call them from a worker thread (a
//! [`Client::submit`] callback runs on one). [`Client::submit`] runs a request with a
//! callback and returns a handle to [`Client::cancel`] it.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use mio::net::TcpStream;
use mio::{Interest, Token};
use peerblock_common::client::{
    ClientError, ClientOptions, Fetched, GetOptions, Local, OutcomeClass, Peer, Pool, PoolConfig,
    Progress, Validator, MAX_IDLE_GLOBAL, MAX_IDLE_PER_PEER,
};
use peerblock_core::bytes::Bytes;
use peerblock_core::client::{
    BlockRequest, BreakerPath, Caller, ClientEvent, Connection, ConnectionFate, Ending, Exchange,
    ExchangeOutcome, ExchangeRequest, GetTicket, Link, Peers, RequestTimeout,
};
use peerblock_core::placement::PeerId;
use peerblock_core::read::GetOutcome;
use peerblock_core::time::Instant;
use peerblock_core::wire::{BlockPath, Hop};

use crate::worker::{After, Driven, Entry, Key, Ready, Remote, Runtime, Worker};

/// Largest `max_conns_per_peer` accepted.
pub const MAX_CONNS_PER_PEER: usize = 65_536;

/// Most reads into one exchange's window per turn (bounded work per wake-up).
const READS_PER_TURN: usize = 16;

/// Names a request started with [`Client::submit`], to [`Client::cancel`] it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHandle {
    worker: usize,
    id: u64,
}

/// The node's client on a [`Runtime`]. Cheap to clone; every clone shares one `Peers`
/// and the same pools and slots.
#[derive(Clone)]
pub struct Client {
    shared: Arc<ClientShared>,
    runtime: Runtime,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("max_conns_per_peer", &self.shared.opts.max_conns_per_peer)
            .field("pool", &self.shared.opts.pool)
            .finish()
    }
}

pub(crate) struct ClientShared {
    id: u64,
    opts: ClientOptions,
    /// The pool bounds each worker keeps (the global bound split over the workers).
    pool: PoolConfig,
    peers: Mutex<Peers>,
    idle: AtomicIsize,
    remotes: Vec<Remote>,
}

impl ClientShared {
    fn lock_peers(&self) -> MutexGuard<'_, Peers> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for ClientShared {
    fn drop(&mut self) {
        // Close this client's pooled connections on every worker.
        let id = self.id;
        for r in &self.remotes {
            r.run(move |w| {
                w.clients.remove(id);
            });
        }
    }
}

/// What one worker keeps for one client: its pools and slots of the peers this worker
/// owns, and its requests in flight.
#[derive(Default)]
pub(crate) struct ClientLocal {
    pool: Pool<Pooled>,
    slots: HashMap<String, Slots>,
    requests: HashMap<u64, Key>,
}

#[derive(Default)]
struct Slots {
    open: usize,
    waiters: VecDeque<Key>,
}

struct Pooled {
    stream: TcpStream,
    conn: Connection,
}

static CLIENT_IDS: AtomicU64 = AtomicU64::new(1);
static REQUEST_IDS: AtomicU64 = AtomicU64::new(1);

/// What a request asks for, owned (it crosses threads).
enum Kind {
    Block {
        path: BlockPath,
        origin: Option<String>,
        hop: Hop,
        expected: Option<u64>,
        validator: Option<Validator>,
    },
    Roster {
        /// The caller's id, advertised address and signed record header.
        caller: Option<(String, String, Option<String>)>,
    },
    /// One byte range of an object on a plain HTTP/1.1 origin (`http://` only).
    Range {
        /// The `Host` header.
        host: String,
        /// Path and query.
        target: String,
        start: u64,
        len: u64,
        total: Option<u64>,
        validator: Option<String>,
    },
}

/// The callback a submitted request ends with (on the peer's worker thread).
pub type Done = Box<dyn FnOnce(Fetched) + Send>;

/// One request, from submission to its callback.
struct Job {
    client: Arc<ClientShared>,
    id: u64,
    peer: Peer,
    kind: Kind,
    deadline: Option<Instant>,
    progress: Option<Progress>,
    done: Option<Done>,
    started: std::time::Instant,
}

impl Job {
    fn path(&self) -> BreakerPath {
        match self.kind {
            Kind::Block { .. } | Kind::Range { .. } => BreakerPath::Data,
            Kind::Roster { .. } => BreakerPath::Roster,
        }
    }

    /// Ends the request without an exchange ending of its own.
    fn local(mut self, local: Local) {
        self.fail_local(local);
    }

    /// [`local`](Self::local) for a job still owned by something else (its callback is
    /// taken, so it runs once).
    fn fail_local(&mut self, local: Local) {
        let class = match local {
            Local::BreakerRejected | Local::Unsendable => OutcomeClass::Unavailable,
            Local::NoConnectionSlot => OutcomeClass::Busy,
        };
        let elapsed = self.started.elapsed();
        self.client
            .opts
            .metrics
            .get_outcome(class.metric(), elapsed.as_secs_f64());
        let fetched = Fetched {
            peer: self.peer.id,
            get: GetOutcome::Failed,
            ending: None,
            local: Some(local),
            class,
            elapsed,
            pooled: false,
            retried_fresh: false,
        };
        if let Some(done) = self.done.take() {
            done(fetched);
        }
    }
}

impl Client {
    /// A client on `runtime` from `opts`, or the first option that cannot work.
    pub fn new(runtime: &Runtime, opts: ClientOptions) -> Result<Client, ClientError> {
        opts.exchange.validate()?;
        let peers = Peers::new(opts.peers.clone())?;
        for (field, value, max) in [
            (
                "max_conns_per_peer",
                opts.max_conns_per_peer,
                MAX_CONNS_PER_PEER,
            ),
            (
                "pool.idle_per_peer",
                opts.pool.idle_per_peer,
                MAX_IDLE_PER_PEER,
            ),
            ("pool.idle_global", opts.pool.idle_global, MAX_IDLE_GLOBAL),
        ] {
            if value == 0 || value > max {
                return Err(ClientError::Bound { field, value, max });
            }
        }
        let threads = runtime.threads();
        let pool = PoolConfig {
            idle_global: opts.pool.idle_global.div_ceil(threads),
            ..opts.pool
        };
        let remotes = (0..threads).map(|i| runtime.remote(i).clone()).collect();
        Ok(Client {
            shared: Arc::new(ClientShared {
                id: CLIENT_IDS.fetch_add(1, Ordering::Relaxed),
                opts,
                pool,
                peers: Mutex::new(peers),
                idle: AtomicIsize::new(0),
                remotes,
            }),
            runtime: runtime.clone(),
        })
    }

    /// The options in force.
    pub fn options(&self) -> &ClientOptions {
        &self.shared.opts
    }

    /// Core's `now` on the node's clock.
    pub fn now(&self) -> Instant {
        self.runtime.now()
    }

    /// Runs `f` with the shared `Peers` locked (briefly).
    pub fn with_peers<R>(&self, f: impl FnOnce(&mut Peers) -> R) -> R {
        f(&mut self.shared.lock_peers())
    }

    /// Requests this client's workers are tracking now (in flight or waiting for a slot),
    /// summed over the workers; a diagnostic (it asks every worker and waits for them).
    pub fn tracked_requests(&self) -> usize {
        let (tx, rx) = std::sync::mpsc::channel();
        let id = self.shared.id;
        for worker in 0..self.runtime.threads() {
            let tx = tx.clone();
            self.runtime.remote(worker).run(move |w| {
                let n = w
                    .clients
                    .get::<ClientLocal>(id)
                    .map_or(0, |l| l.requests.len());
                let _ = tx.send(n);
            });
        }
        drop(tx);
        rx.iter().sum()
    }

    /// Idle connections in the client's pools now (all peers, all workers).
    pub fn idle_connections(&self) -> usize {
        self.shared.idle.load(Ordering::SeqCst).max(0) as usize
    }

    /// `get`: the block from `peer`, any length up to `ClientConfig::max_body`. Blocks.
    pub fn get(&self, peer: &Peer, block: BlockRequest<'_>) -> Fetched {
        self.fetch_block(peer, block, GetOptions::default())
    }

    /// `get_validated`: the block of exactly `expected` bytes, accepted only if
    /// `validator` says so. Blocks.
    pub fn get_validated(
        &self,
        peer: &Peer,
        block: BlockRequest<'_>,
        expected: u64,
        validator: impl Fn(&Bytes) -> bool + Send + Sync + 'static,
    ) -> Fetched {
        let opts = GetOptions {
            expected: Some(expected),
            validator: Some(Arc::new(validator)),
            ..GetOptions::default()
        };
        self.fetch_block(peer, block, opts)
    }

    /// A block request with every option. Blocks until its outcome.
    pub fn fetch_block(&self, peer: &Peer, block: BlockRequest<'_>, opts: GetOptions) -> Fetched {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let job = self.job(peer, block_kind(block, &opts), opts.deadline, opts.progress);
        let peer_id = peer.id;
        self.start(job, Box::new(move |f| drop(tx.send(f))));
        rx.recv().unwrap_or_else(|_| lost(peer_id))
    }

    /// `fetch_roster`: the roster of the node at `addr`, identifying as `caller` (or
    /// anonymously), on the breaker's roster path, recorded against `member` (or the
    /// address's own id). Blocks.
    pub fn fetch_roster(
        &self,
        addr: &str,
        member: Option<PeerId>,
        caller: Option<Caller<'_>>,
    ) -> Fetched {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let peer = roster_peer(addr, member);
        let peer_id = peer.id;
        let job = self.job(&peer, roster_kind(caller), None, None);
        self.start(job, Box::new(move |f| drop(tx.send(f))));
        rx.recv().unwrap_or_else(|_| lost(peer_id))
    }

    /// Starts a block request; `done` is called with its outcome on the peer's worker
    /// thread (keep it short; never block in it). Returns a handle to cancel it.
    pub fn submit(
        &self,
        peer: &Peer,
        block: BlockRequest<'_>,
        opts: GetOptions,
        done: Done,
    ) -> RequestHandle {
        let job = self.job(peer, block_kind(block, &opts), opts.deadline, opts.progress);
        self.start(job, done)
    }

    /// Cancels a submitted request: its ticket is abandoned (nothing is recorded against
    /// the peer), its connection closed, and its callback never called. A request that
    /// has already ended is left alone.
    pub fn cancel(&self, handle: RequestHandle) {
        let client = self.shared.id;
        self.runtime
            .remote(handle.worker)
            .run(move |w| cancel_on(w, client, handle.id));
    }

    /// [`submit`](Self::submit) from code running on worker `w` (a read, a relay, the
    /// roster service).
    pub(crate) fn submit_from(
        &self,
        w: &mut Worker,
        peer: &Peer,
        block: BlockRequest<'_>,
        opts: GetOptions,
        done: Done,
    ) -> RequestHandle {
        let job = self.job(peer, block_kind(block, &opts), opts.deadline, opts.progress);
        self.start_from(w, job, done)
    }

    /// Block `index` of `object` by a `Range` GET to its origin (`http://` only: the
    /// caller answers an `https://` object itself), from code running on worker `w`. The
    /// ending is core's `Range` classification (`Ending::Range`, `Miss`,
    /// `UpstreamRefused`, `Failed`); `None` when the index is past the object's end.
    pub(crate) fn range_from(
        &self,
        w: &mut Worker,
        object: &peerblock_common::object::ObjectIdentity,
        index: u64,
        done: Done,
    ) -> Option<RequestHandle> {
        let (start, len) = object.block_range(index)?;
        let peer = Peer::from_addr(object.url.authority());
        let kind = Kind::Range {
            host: object.url.host_header(),
            target: object.url.target(),
            start,
            len,
            total: Some(object.size),
            validator: (!object.validator.is_empty()).then(|| object.validator.clone()),
        };
        let job = self.job(&peer, kind, None, None);
        Some(self.start_from(w, job, done))
    }

    /// A roster fetch from code running on worker `w`.
    pub(crate) fn roster_from(
        &self,
        w: &mut Worker,
        addr: &str,
        member: Option<PeerId>,
        caller: Option<Caller<'_>>,
        done: Done,
    ) -> RequestHandle {
        let peer = roster_peer(addr, member);
        let job = self.job(&peer, roster_kind(caller), None, None);
        self.start_from(w, job, done)
    }

    /// [`cancel`](Self::cancel) from code running on worker `w`.
    pub(crate) fn cancel_from(&self, w: &mut Worker, handle: RequestHandle) {
        let client = self.shared.id;
        w.post(handle.worker, move |w| cancel_on(w, client, handle.id));
    }

    fn job(
        &self,
        peer: &Peer,
        kind: Kind,
        deadline: Option<Instant>,
        progress: Option<Progress>,
    ) -> Job {
        Job {
            client: Arc::clone(&self.shared),
            id: REQUEST_IDS.fetch_add(1, Ordering::Relaxed),
            peer: peer.clone(),
            kind,
            deadline,
            progress,
            done: None,
            started: std::time::Instant::now(),
        }
    }

    fn start(&self, mut job: Job, done: Done) -> RequestHandle {
        job.done = Some(done);
        let worker = self.runtime.worker_for(&job.peer.addr);
        let handle = RequestHandle { worker, id: job.id };
        self.runtime.remote(worker).run(move |w| start_job(w, job));
        handle
    }

    fn start_from(&self, w: &mut Worker, mut job: Job, done: Done) -> RequestHandle {
        job.done = Some(done);
        let worker = self.runtime.worker_for(&job.peer.addr);
        let handle = RequestHandle { worker, id: job.id };
        w.post(worker, move |w| start_job(w, job));
        handle
    }
}

fn block_kind(block: BlockRequest<'_>, opts: &GetOptions) -> Kind {
    Kind::Block {
        path: block.path,
        origin: block.origin.map(str::to_owned),
        hop: block.hop,
        expected: opts.expected,
        validator: opts.validator.clone(),
    }
}

fn roster_kind(caller: Option<Caller<'_>>) -> Kind {
    Kind::Roster {
        caller: caller.map(|c| {
            (
                c.id.to_owned(),
                c.addr.to_owned(),
                c.record.map(str::to_owned),
            )
        }),
    }
}

fn roster_peer(addr: &str, member: Option<PeerId>) -> Peer {
    match member {
        Some(id) => Peer::new(id, addr),
        None => Peer::from_addr(addr),
    }
}

/// The outcome of a request whose worker went away (the runtime stopped).
fn lost(peer: PeerId) -> Fetched {
    Fetched {
        peer,
        get: GetOutcome::Failed,
        ending: Some(Ending::Cancelled),
        local: None,
        class: OutcomeClass::Cancelled,
        elapsed: std::time::Duration::ZERO,
        pooled: false,
        retried_fresh: false,
    }
}

fn local_of<'a>(w: &'a mut Worker, client: &ClientShared) -> &'a mut ClientLocal {
    w.clients.or_default::<ClientLocal>(client.id)
}

/// On the peer's worker: admit, then take a connection slot or wait for one.
fn start_job(w: &mut Worker, job: Job) {
    let now = w.now();
    let admitted = job.client.lock_peers().admit(now, job.peer.id, job.path());
    let ticket = match admitted {
        Ok(t) => t,
        Err(_) => {
            tracing::debug!(peer = %job.peer.id, addr = %job.peer.addr, "circuit open: not dialed");
            job.local(Local::BreakerRejected);
            return;
        }
    };
    let max = job.client.opts.max_conns_per_peer;
    let local = local_of(w, &job.client);
    let slots = local.slots.entry(job.peer.addr.clone()).or_default();
    if slots.open < max {
        slots.open += 1;
        begin(w, job, ticket, false);
        return;
    }
    // Wait for a slot, bounded by the caller's deadline or the request deadline.
    let bound = job
        .deadline
        .or(match job.client.opts.exchange.deadlines.request {
            RequestTimeout::After(d) => Some(now + d),
            RequestTimeout::Caller => None,
        });
    let (client, id, addr) = (Arc::clone(&job.client), job.id, job.peer.addr.clone());
    let waiting = WaitingGet {
        job: Some(job),
        ticket: Some(ticket),
        bound,
    };
    let key = w.insert(Entry::new(Box::new(waiting)));
    let local = local_of(w, &client);
    local.requests.insert(id, key);
    local.slots.entry(addr).or_default().waiters.push_back(key);
    w.drive(key, Ready::default());
}

/// A request waiting for one of its peer's connection slots.
pub(crate) struct WaitingGet {
    job: Option<Job>,
    ticket: Option<GetTicket>,
    bound: Option<Instant>,
}

impl WaitingGet {
    pub(crate) fn drive(&mut self, _w: &mut Worker, _key: Key) -> After {
        After::Keep(self.bound)
    }

    /// The wait's bound passed: no slot; nothing is recorded against the peer.
    pub(crate) fn timeout(&mut self, w: &mut Worker, _key: Key) -> After {
        let now = w.now();
        if self.bound.is_some_and(|b| b > now) {
            return After::Keep(self.bound);
        }
        if let (Some(job), Some(ticket)) = (self.job.take(), self.ticket.take()) {
            job.client.lock_peers().abandon(now, ticket);
            local_of(w, &job.client).requests.remove(&job.id);
            tracing::debug!(addr = %job.peer.addr, "no connection slot before the deadline");
            job.local(Local::NoConnectionSlot);
        }
        After::Done
    }
}

impl Drop for WaitingGet {
    fn drop(&mut self) {
        if let (Some(job), Some(ticket)) = (&self.job, self.ticket.take()) {
            let now = job.client.opts.clock.to_core(std::time::Instant::now());
            job.client.lock_peers().abandon(now, ticket);
        }
    }
}

/// Frees one of `addr`'s slots and hands it to the first request still waiting.
fn release(w: &mut Worker, client: &Arc<ClientShared>, addr: &str) {
    loop {
        let local = local_of(w, client);
        let Some(slots) = local.slots.get_mut(addr) else {
            return;
        };
        let Some(next) = slots.waiters.pop_front() else {
            slots.open = slots.open.saturating_sub(1);
            if slots.open == 0 {
                local.slots.remove(addr);
            }
            return;
        };
        let mut taken = None;
        w.with_entry(next, |_, _, entry| match entry.get::<WaitingGet>() {
            Some(g) => {
                taken = g.job.take().zip(g.ticket.take());
                After::Done
            }
            None => After::Unchanged,
        });
        if let Some((job, ticket)) = taken {
            // The slot passes to the waiter (`open` is unchanged, so nothing else can
            // take it), started as a task of this worker: never recursively, which a
            // queue of waiters failing at once would turn into a stack overflow.
            w.post(w.id, move |w| begin(w, job, ticket, false));
            return;
        }
    }
}

/// Cancels request `id` of client `client` on this worker.
fn cancel_on(w: &mut Worker, client: u64, id: u64) {
    let Some(local) = w.clients.get_mut::<ClientLocal>(client) else {
        return;
    };
    let Some(key) = local.requests.remove(&id) else {
        return;
    };
    let mut freed = None;
    w.with_entry(key, |w, _, entry| {
        let now = w.now();
        if let Some(c) = entry.get::<ClientConn>() {
            c.exchange.cancel(now);
            if let Some(ticket) = c.ticket.take() {
                c.job.client.lock_peers().abandon(now, ticket);
            }
            c.job.done = None;
            freed = Some((Arc::clone(&c.job.client), c.job.peer.addr.clone()));
            After::Done
        } else if let Some(g) = entry.get::<WaitingGet>() {
            if let (Some(job), Some(ticket)) = (g.job.take(), g.ticket.take()) {
                job.client.lock_peers().abandon(now, ticket);
            }
            After::Done
        } else {
            After::Unchanged
        }
    });
    if let Some((client, addr)) = freed {
        release(w, &client, &addr);
    }
}

/// Starts the exchange of `job` (which holds a slot): on a pooled connection, or a dial.
fn begin(w: &mut Worker, job: Job, ticket: GetTicket, retried: bool) {
    let now = w.now();
    let client = Arc::clone(&job.client);
    let pooled = if retried {
        None
    } else {
        let local = local_of(w, &client);
        let before = local.pool.len();
        let p = local.pool.take(
            &job.peer.addr,
            std::time::Instant::now(),
            client.pool.idle_timeout,
        );
        let after = local.pool.len();
        client
            .idle
            .fetch_sub(before as isize - after as isize, Ordering::SeqCst);
        p
    };
    let was_pooled = pooled.is_some();
    let (link, stream) = match pooled {
        Some(p) => (Link::Pooled(p.conn), Some(p.stream)),
        None => (Link::Dial, None),
    };
    let exchange = match new_exchange(now, &job, link) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(addr = %job.peer.addr, error = %e, "request cannot be sent");
            client.lock_peers().abandon(now, ticket);
            release(w, &client, &job.peer.addr);
            job.local(Local::Unsendable);
            return;
        }
    };
    let (stream, dialing) = match stream {
        Some(s) => (Some(s), false),
        None => match connect(&job.peer.addr, client.opts.local_ip) {
            Ok(s) => (Some(s), true),
            Err(e) => {
                tracing::debug!(addr = %job.peer.addr, error = %e, "dial failed at once");
                (None, true)
            }
        },
    };
    let id = job.id;
    let addr = job.peer.addr.clone();
    let conn = ClientConn {
        job,
        ticket: Some(ticket),
        exchange,
        stream,
        dialing,
        was_pooled,
        retried,
        out: None,
        readable: false,
        writable: false,
        closed: false,
    };
    let placed = w.place(
        Entry::new(Box::new(conn)),
        |w, key, entry| match entry.get::<ClientConn>() {
            Some(c) => c.register(w, key),
            None => Ok(()),
        },
    );
    match placed {
        Ok(key) => {
            // Recorded before the first drive, which may already settle the request.
            local_of(w, &client).requests.insert(id, key);
            w.drive(key, Ready::default());
        }
        Err((e, entry)) => {
            tracing::warn!(addr = %addr, error = %e, "registering a client socket failed");
            if let Some(mut c) = entry.into_inner::<ClientConn>() {
                if let Some(ticket) = c.ticket.take() {
                    client.lock_peers().abandon(w.now(), ticket);
                }
                release(w, &client, &addr);
                c.job.fail_local(Local::Unsendable);
            }
        }
    }
}

fn new_exchange(
    now: Instant,
    job: &Job,
    link: Link,
) -> Result<Exchange, peerblock_core::client::ExchangeConfigError> {
    let host = job.peer.addr.as_str();
    let request = match &job.kind {
        Kind::Block {
            path,
            origin,
            hop,
            expected,
            validator,
        } => {
            let block = BlockRequest {
                path: *path,
                origin: origin.as_deref(),
                hop: *hop,
            };
            match expected {
                Some(expected) => {
                    ExchangeRequest::get_validated(host, block, *expected, validator.is_some())
                }
                None if validator.is_some() => ExchangeRequest::get_checked(host, block),
                None => ExchangeRequest::get(host, block),
            }
        }
        Kind::Roster { caller } => {
            let caller = caller.as_ref().map(|(id, addr, record)| Caller {
                id,
                addr,
                record: record.as_deref(),
            });
            ExchangeRequest::roster(host, caller)
        }
        Kind::Range {
            host,
            target,
            start,
            len,
            total,
            validator,
        } => ExchangeRequest::range(
            host,
            peerblock_core::client::ObjectRange {
                target,
                start: *start,
                len: *len,
                total: *total,
                validator: validator.as_deref(),
            },
        ),
    };
    let request = match job.deadline {
        Some(d) => request.with_deadline(d),
        None => request,
    };
    Exchange::new(now, &job.client.opts.exchange, request, link)
}

/// Resolves `addr` (`HOST:PORT`) and starts a non-blocking connect to it, from
/// `local_ip` when given. A name is resolved on the calling worker, blocking it for the
/// lookup, and only its first address (of `local_ip`'s family) is dialed: name peers by
/// IP address (rosters do). The tokio driver tries every address of a name in turn.
fn connect(addr: &str, local_ip: Option<std::net::IpAddr>) -> io::Result<TcpStream> {
    let target: SocketAddr = match addr.parse() {
        Ok(a) => a,
        Err(_) => addr
            .to_socket_addrs()?
            .find(|a| local_ip.is_none_or(|ip| a.is_ipv4() == ip.is_ipv4()))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("{addr}: no address"),
                )
            })?,
    };
    let Some(ip) = local_ip else {
        return TcpStream::connect(target);
    };
    let domain = socket2::Domain::for_address(target);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_nonblocking(true)?;
    socket.bind(&SocketAddr::new(ip, 0).into())?;
    match socket.connect(&target.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    Ok(TcpStream::from_std(socket.into()))
}

/// One exchange in progress: its request, ticket, machine and socket.
pub(crate) struct ClientConn {
    job: Job,
    ticket: Option<GetTicket>,
    exchange: Exchange,
    stream: Option<TcpStream>,
    dialing: bool,
    was_pooled: bool,
    retried: bool,
    /// The request head being written and how much of it is.
    out: Option<(Bytes, usize)>,
    readable: bool,
    writable: bool,
    closed: bool,
}

impl ClientConn {
    fn register(&mut self, w: &mut Worker, key: Key) -> io::Result<()> {
        if let Some(stream) = &mut self.stream {
            w.poll.registry().register(
                stream,
                Token(key.index),
                Interest::READABLE | Interest::WRITABLE,
            )?;
        }
        if !self.dialing {
            // A pooled connection is connected and writable.
            self.writable = true;
        }
        Ok(())
    }

    pub(crate) fn drive(&mut self, w: &mut Worker, key: Key, ready: Ready) -> After {
        self.readable |= ready.readable;
        self.writable |= ready.writable;
        self.closed |= ready.closed;
        let now = w.now();
        if self.dialing {
            match &self.stream {
                None => {
                    self.dialing = false;
                    self.exchange.handle_dial_failed(now);
                }
                Some(stream) if self.writable || self.closed => match stream.take_error() {
                    Ok(Some(e)) | Err(e) => {
                        tracing::debug!(addr = %self.job.peer.addr, error = %e, "dial failed");
                        self.dialing = false;
                        self.exchange.handle_dial_failed(now);
                    }
                    Ok(None) => match stream.peer_addr() {
                        Ok(_) => {
                            self.dialing = false;
                            let _ = stream.set_nodelay(true);
                            self.exchange.handle_connected(now);
                        }
                        Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                            self.writable = false;
                        }
                        Err(e) => {
                            tracing::debug!(addr = %self.job.peer.addr, error = %e, "dial failed");
                            self.dialing = false;
                            self.exchange.handle_dial_failed(now);
                        }
                    },
                },
                Some(_) => {}
            }
        }
        let mut reads = READS_PER_TURN;
        loop {
            let now = w.now();
            // Events first: the outcome may already be there (a dial failure, a timer).
            while let Some(event) = self.exchange.poll_event() {
                match event {
                    ClientEvent::Head { status } => {
                        if let Some(progress) = &self.job.progress {
                            progress(status);
                        }
                    }
                    ClientEvent::Validate { body } => {
                        let valid = match &self.job.kind {
                            Kind::Block {
                                validator: Some(v), ..
                            } => v(&body),
                            _ => true,
                        };
                        self.exchange.handle_validated(now, valid);
                    }
                    ClientEvent::Done(outcome) => return self.finish(w, key, outcome),
                    // An event a later core adds (`#[non_exhaustive]`): nothing asked of us.
                    _ => {}
                }
            }
            if self.dialing {
                return After::Keep(self.deadline());
            }
            let Some(stream) = self.stream.as_mut() else {
                return After::Keep(self.deadline());
            };
            // The request.
            if self.out.is_none() {
                if let Some(tx) = self.exchange.poll_transmit(now) {
                    self.out = Some((tx.head, 0));
                } else if self.exchange.is_finished() {
                    // `poll_transmit` ended it (a pooled connection that cannot take
                    // another request): its `Done` is waiting.
                    continue;
                }
            }
            let mut progressed = false;
            if let Some((head, written)) = &mut self.out {
                if self.writable {
                    match stream.write(&head[*written..]) {
                        Ok(0) => {
                            self.exchange.handle_eof(now);
                            progressed = true;
                        }
                        Ok(n) => {
                            *written += n;
                            progressed = true;
                            if *written == head.len() {
                                self.out = None;
                                self.exchange.handle_transmitted(now);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable = false,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => progressed = true,
                        Err(e) => {
                            tracing::debug!(addr = %self.job.peer.addr, error = %e, "write failed");
                            self.exchange.handle_eof(now);
                            progressed = true;
                        }
                    }
                }
            }
            // The response.
            if self.readable && reads > 0 {
                if let Some(buf) = self.exchange.read_buf() {
                    reads -= 1;
                    match stream.read(buf) {
                        Ok(0) => {
                            self.readable = false;
                            self.exchange.handle_eof(now);
                        }
                        Ok(n) => {
                            self.exchange.handle_read(now, n);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            tracing::debug!(addr = %self.job.peer.addr, error = %e, "read failed");
                            self.readable = false;
                            self.exchange.handle_eof(now);
                        }
                    }
                    progressed = true;
                }
            } else if self.readable && self.exchange.read_buf().is_some() {
                return After::Again(self.deadline());
            }
            if !progressed {
                return After::Keep(self.deadline());
            }
        }
    }

    pub(crate) fn timeout(&mut self, w: &mut Worker, key: Key) -> After {
        let now = w.now();
        self.exchange.handle_timeout(now);
        self.drive(w, key, Ready::default())
    }

    fn deadline(&self) -> Option<Instant> {
        self.exchange.poll_timeout().map(|d| d.at)
    }

    /// `Done`: retry once fresh if a pooled connection was retired, else pool the
    /// connection, free the slot and settle the ticket.
    fn finish(&mut self, w: &mut Worker, key: Key, outcome: ExchangeOutcome) -> After {
        let now = w.now();
        let client = Arc::clone(&self.job.client);
        if outcome.retry_fresh && self.was_pooled && !self.retried {
            tracing::debug!(addr = %self.job.peer.addr, "pooled connection retired: retrying on a fresh dial");
            self.deregister(w);
            self.stream = None;
            match new_exchange(now, &self.job, Link::Dial) {
                Ok(e) => self.exchange = e,
                Err(_) => return self.settle(w, outcome),
            }
            self.retried = true;
            self.was_pooled = false;
            self.out = None;
            self.readable = false;
            self.writable = false;
            self.closed = false;
            self.dialing = true;
            match connect(&self.job.peer.addr, client.opts.local_ip) {
                Ok(s) => {
                    self.stream = Some(s);
                    if let Err(e) = self.register(w, key) {
                        tracing::debug!(error = %e, "registering the fresh dial failed");
                        self.stream = None;
                    }
                }
                Err(e) => {
                    tracing::debug!(addr = %self.job.peer.addr, error = %e, "dial failed at once")
                }
            }
            return self.drive(w, key, Ready::default());
        }
        if outcome.connection == ConnectionFate::Reuse {
            if let (Some(conn), Some(mut stream)) =
                (self.exchange.take_connection(), self.stream.take())
            {
                let _ = w.poll.registry().deregister(&mut stream);
                let local = local_of(w, &client);
                let before = local.pool.len();
                local.pool.put(
                    &self.job.peer.addr,
                    Pooled { stream, conn },
                    std::time::Instant::now(),
                    &client.pool,
                );
                let after = local.pool.len();
                client
                    .idle
                    .fetch_add(after as isize - before as isize, Ordering::SeqCst);
            }
        }
        self.settle(w, outcome)
    }

    fn deregister(&mut self, w: &mut Worker) {
        if let Some(stream) = &mut self.stream {
            let _ = w.poll.registry().deregister(stream);
        }
    }

    fn settle(&mut self, w: &mut Worker, outcome: ExchangeOutcome) -> After {
        let client = Arc::clone(&self.job.client);
        let addr = self.job.peer.addr.clone();
        // The connection is pooled (or closed) before its slot is freed: a waiter that
        // gets the slot finds it, so open connections never exceed the per-peer bound.
        self.deregister(w);
        self.stream = None;
        local_of(w, &client).requests.remove(&self.job.id);
        release(w, &client, &addr);
        let now = w.now();
        let Some(ticket) = self.ticket.take() else {
            return After::Done;
        };
        let (finished, open, cooldowns) = {
            let mut peers = client.lock_peers();
            let f = peers.finish(now, ticket, outcome);
            let open = peers.breaker().map_or(0, |b| b.open_count());
            (f, open, peers.cooldowns().len())
        };
        let class = OutcomeClass::of(&finished.ending);
        let elapsed = self.job.started.elapsed();
        let m = &client.opts.metrics;
        m.get_outcome(class.metric(), elapsed.as_secs_f64());
        m.breaker_open_peers.set(open as i64);
        m.cooldowns_live.set(cooldowns as i64);
        if finished.invalid_cooldown {
            m.invalid_cooldowns.inc();
            tracing::warn!(peer = %self.job.peer.id, addr = %addr, "second invalid block: peer on the failed cooldown");
        }
        if finished.circuit_opened {
            tracing::warn!(peer = %self.job.peer.id, addr = %addr, "circuit opened");
        }
        let fetched = Fetched {
            peer: self.job.peer.id,
            get: finished.get,
            ending: Some(finished.ending),
            local: None,
            class,
            elapsed,
            pooled: self.was_pooled,
            retried_fresh: self.retried,
        };
        match class {
            OutcomeClass::Ok | OutcomeClass::Absent | OutcomeClass::Cancelled => {
                tracing::debug!(%addr, outcome = %fetched.describe(), "exchange done")
            }
            _ => tracing::warn!(%addr, outcome = %fetched.describe(), "exchange failed"),
        }
        if let Some(done) = self.job.done.take() {
            done(fetched);
        }
        After::Done
    }
}

impl Drop for ClientConn {
    fn drop(&mut self) {
        // A request dropped mid-way (the runtime stopped) settles its ticket.
        if let Some(ticket) = self.ticket.take() {
            let now = self
                .job
                .client
                .opts
                .clock
                .to_core(std::time::Instant::now());
            self.job.client.lock_peers().abandon(now, ticket);
        }
    }
}

impl Driven for ClientConn {
    fn on_ready(&mut self, w: &mut Worker, key: Key, ready: Ready) -> After {
        self.drive(w, key, ready)
    }

    fn on_timer(&mut self, w: &mut Worker, key: Key) -> After {
        self.timeout(w, key)
    }
}

impl Driven for WaitingGet {
    fn on_ready(&mut self, w: &mut Worker, key: Key, _ready: Ready) -> After {
        self.drive(w, key)
    }

    fn on_timer(&mut self, w: &mut Worker, key: Key) -> After {
        self.timeout(w, key)
    }
}
