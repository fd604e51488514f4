//! The tokio client: one [`Client`] per node, driving core's `client::Exchange` over real
//! sockets with one shared `client::Peers` (breaker, cooldown table, load table, GETs in
//! flight) and a keep-alive connection pool.
//!
//! Every decision is core's. Around each request the client does exactly what
//! `docs/exchange.md` lists, in order:
//!
//! 1. `Peers::admit` (the data path for blocks, the roster path for rosters); a rejection
//!    ends the request at once, without dialing.
//! 2. Waits for one of the peer's connection slots ([`ClientOptions::max_conns_per_peer`]),
//!    bounded by the caller's deadline (or the exchange's request deadline).
//! 3. `Exchange::new` with `Link::Pooled` (an idle connection from the pool) or
//!    `Link::Dial`; a dial is `TcpStream::connect` raced against the exchange's own
//!    `poll_timeout`, so a host that answers nothing is cut at the dial deadline.
//! 4. Writes `poll_transmit` and acknowledges it (`handle_transmitted`), reads into
//!    `read_buf`/`handle_read`, reports end of stream with `handle_eof`, wakes at
//!    `poll_timeout` for `handle_timeout`, reports `ClientEvent::Head` to the caller's
//!    progress hook and answers `ClientEvent::Validate` with the caller's validator.
//! 5. On `Done`: a pooled connection that `retry_fresh` says the peer retired is retried
//!    once on a fresh dial (keeping the ticket); otherwise `Peers::finish`, and the
//!    connection goes back to the pool when the outcome says `ConnectionFate::Reuse`.
//!
//! Dropping a request's future settles its ticket (`Peers::abandon`, through a drop
//! guard): a cancelled GET is never left counted in flight nor holding a probe slot.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};

use peerblock_core::bytes::Bytes;
use peerblock_core::client::{
    BlockRequest, BreakerPath, Caller, ClientEvent, Connection, ConnectionFate, Ending, Exchange,
    ExchangeOutcome, ExchangeRequest, GetTicket, Link, Peers, RequestTimeout,
};
use peerblock_core::placement::PeerId;
use peerblock_core::read::GetOutcome;
use peerblock_core::time::{Clock, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

pub use peerblock_common::client::{
    peer_id_for_addr, ClientError, ClientOptions, Fetched, GetOptions, LinkDelay, Local,
    OutcomeClass, Peer, Pool, PoolConfig, Progress, Validator, DEFAULT_MAX_CONNS_PER_PEER,
    DEFAULT_POOL_IDLE_TIMEOUT, MAX_IDLE_GLOBAL, MAX_IDLE_PER_PEER, MAX_TRACKED_PEERS,
};

/// The node's client. Cheap to clone (an `Arc` inside); every clone shares one `Peers`,
/// one pool and one set of connection slots.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("max_conns_per_peer", &self.inner.opts.max_conns_per_peer)
            .field("pool", &self.inner.opts.pool)
            .finish()
    }
}

struct Inner {
    opts: ClientOptions,
    peers: Mutex<Peers>,
    pool: Mutex<Pool<Pooled>>,
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// A pooled connection: the socket and core's connection state.
struct Pooled {
    stream: TcpStream,
    conn: Connection,
}

/// Settles a ticket that was never finished: a request future dropped mid-way (a hedging
/// loser, a caller that went away) gives its permit back as answered.
struct TicketGuard {
    inner: Arc<Inner>,
    ticket: Option<GetTicket>,
}

impl Drop for TicketGuard {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let now = self.inner.now();
            tracing::debug!(peer = %ticket.peer(), "request dropped: ticket abandoned");
            self.inner.lock_peers().abandon(now, ticket);
        }
    }
}

enum Kind<'a> {
    Block {
        block: BlockRequest<'a>,
        expected: Option<u64>,
        validator: Option<Validator>,
    },
    Roster {
        caller: Option<Caller<'a>>,
    },
}

impl Inner {
    fn now(&self) -> Instant {
        self.opts.clock.to_core(std::time::Instant::now())
    }

    fn lock_peers(&self) -> MutexGuard<'_, Peers> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_pool(&self) -> MutexGuard<'_, Pool<Pooled>> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn slots_for(&self, addr: &str) -> Arc<Semaphore> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = slots.get(addr) {
            return Arc::clone(s);
        }
        if slots.len() >= MAX_TRACKED_PEERS {
            let max = self.opts.max_conns_per_peer;
            slots.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < max);
        }
        let s = Arc::new(Semaphore::new(self.opts.max_conns_per_peer));
        // Still full of busy peers: the new peer's slots are not remembered, so its
        // concurrent requests are bounded only per request. Never the case below 4096
        // peers with connections open at once.
        if slots.len() < MAX_TRACKED_PEERS {
            slots.insert(addr.to_owned(), Arc::clone(&s));
        }
        s
    }
}

impl Client {
    /// A client from `opts`, or the first option that cannot work.
    pub fn new(opts: ClientOptions) -> Result<Client, ClientError> {
        opts.exchange.validate()?;
        let peers = Peers::new(opts.peers.clone())?;
        for (field, value, max) in [
            (
                "max_conns_per_peer",
                opts.max_conns_per_peer,
                Semaphore::MAX_PERMITS,
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
        Ok(Client {
            inner: Arc::new(Inner {
                peers: Mutex::new(peers),
                pool: Mutex::new(Pool::default()),
                slots: Mutex::new(HashMap::new()),
                opts,
            }),
        })
    }

    /// The options in force.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.opts
    }

    /// Core's `now` on the node's clock.
    pub fn now(&self) -> Instant {
        self.inner.now()
    }

    /// Runs `f` with the shared `Peers` locked (briefly: never across an `.await`). The
    /// reader polls its read machine with it as the `PeerView`.
    pub fn with_peers<R>(&self, f: impl FnOnce(&mut Peers) -> R) -> R {
        f(&mut self.inner.lock_peers())
    }

    /// Idle connections in the pool now (all peers).
    pub fn idle_connections(&self) -> usize {
        self.inner.lock_pool().len()
    }

    /// `get`: the block `block` from `peer`, any length up to `ClientConfig::max_body`.
    pub async fn get(&self, peer: &Peer, block: BlockRequest<'_>) -> Fetched {
        self.fetch_block(peer, block, GetOptions::default()).await
    }

    /// `get_validated`: the block of exactly `expected` bytes, accepted only if
    /// `validator` says so (run when core emits `ClientEvent::Validate`).
    pub async fn get_validated(
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
        self.fetch_block(peer, block, opts).await
    }

    /// A block request with every option ([`GetOptions`]): what `get` and
    /// `get_validated` call, and what the reader uses (with a progress hook).
    pub async fn fetch_block(
        &self,
        peer: &Peer,
        block: BlockRequest<'_>,
        opts: GetOptions,
    ) -> Fetched {
        let kind = Kind::Block {
            block,
            expected: opts.expected,
            validator: opts.validator,
        };
        self.request(peer, kind, opts.deadline, opts.progress).await
    }

    /// `fetch_roster`: the roster of the node at `addr`, identifying ourselves as
    /// `caller` (or anonymously). The breaker's roster path: never refused, outcome
    /// still recorded against `member` (the id the roster lists at `addr`) or, for an
    /// address known by nobody, [`peer_id_for_addr`].
    pub async fn fetch_roster(
        &self,
        addr: &str,
        member: Option<PeerId>,
        caller: Option<Caller<'_>>,
    ) -> Fetched {
        let peer = Peer::new(member.unwrap_or_else(|| peer_id_for_addr(addr)), addr);
        self.request(&peer, Kind::Roster { caller }, None, None)
            .await
    }

    async fn request(
        &self,
        peer: &Peer,
        kind: Kind<'_>,
        deadline: Option<Instant>,
        progress: Option<Progress>,
    ) -> Fetched {
        let inner = &self.inner;
        let started = std::time::Instant::now();
        let start = inner.now();
        let path = match kind {
            Kind::Block { .. } => BreakerPath::Data,
            Kind::Roster { .. } => BreakerPath::Roster,
        };
        // 1. The breaker permit and the in-flight count.
        let admitted = inner.lock_peers().admit(start, peer.id, path);
        let ticket = match admitted {
            Ok(t) => t,
            Err(_) => {
                tracing::debug!(peer = %peer.id, addr = %peer.addr, "circuit open: not dialed");
                return self.local(peer, Local::BreakerRejected, started);
            }
        };
        let mut guard = TicketGuard {
            inner: Arc::clone(inner),
            ticket: Some(ticket),
        };
        // 2. A connection slot, bounded by the caller's deadline or the request deadline.
        let bound = deadline.or(match inner.opts.exchange.deadlines.request {
            RequestTimeout::After(d) => Some(start + d),
            RequestTimeout::Caller => None,
        });
        let slots = inner.slots_for(&peer.addr);
        let acquire = Arc::clone(&slots).acquire_owned();
        let permit = match bound.and_then(|b| inner.opts.clock.to_std(b)) {
            Some(at) => tokio::time::timeout_at(at.into(), acquire).await.ok(),
            None => Some(acquire.await),
        };
        let Some(Ok(permit)) = permit else {
            if let Some(t) = guard.ticket.take() {
                inner.lock_peers().abandon(inner.now(), t);
            }
            tracing::debug!(addr = %peer.addr, "no connection slot before the deadline");
            return self.local(peer, Local::NoConnectionSlot, started);
        };
        // 3-5. The exchange, on a pooled connection or a fresh dial; once more fresh if
        // the pooled connection had been retired.
        let mut retried = false;
        let mut allow_pool = true;
        loop {
            let now = inner.now();
            let pooled = if allow_pool {
                let timeout = inner.opts.pool.idle_timeout;
                inner
                    .lock_pool()
                    .take(&peer.addr, std::time::Instant::now(), timeout)
            } else {
                None
            };
            let was_pooled = pooled.is_some();
            let (link, stream) = match pooled {
                Some(p) => (Link::Pooled(p.conn), Some(p.stream)),
                None => (Link::Dial, None),
            };
            let request = match &kind {
                Kind::Block {
                    block,
                    expected: Some(expected),
                    validator,
                } => ExchangeRequest::get_validated(
                    &peer.addr,
                    *block,
                    *expected,
                    validator.is_some(),
                ),
                Kind::Block {
                    block,
                    expected: None,
                    validator: Some(_),
                } => ExchangeRequest::get_checked(&peer.addr, *block),
                Kind::Block { block, .. } => ExchangeRequest::get(&peer.addr, *block),
                Kind::Roster { caller } => ExchangeRequest::roster(&peer.addr, *caller),
            };
            let request = match deadline {
                Some(d) => request.with_deadline(d),
                None => request,
            };
            let exchange = match Exchange::new(now, &inner.opts.exchange, request, link) {
                Ok(e) => e,
                Err(e) => {
                    // The config was validated in `Client::new`: only a request header
                    // that cannot be sent (the caller's origin or caller id) gets here.
                    // Our own misuse: nothing reached the peer, nothing is charged to it.
                    tracing::warn!(addr = %peer.addr, error = %e, "request cannot be sent");
                    if let Some(t) = guard.ticket.take() {
                        inner.lock_peers().abandon(inner.now(), t);
                    }
                    return self.local(peer, Local::Unsendable, started);
                }
            };
            let validator = match &kind {
                Kind::Block { validator, .. } => validator.clone(),
                Kind::Roster { .. } => None,
            };
            let (mut exchange, outcome, stream) = drive(
                inner,
                &peer.addr,
                exchange,
                stream,
                validator.as_ref(),
                progress.as_ref(),
            )
            .await;
            if outcome.retry_fresh && was_pooled && !retried {
                // The peer retired the pooled connection as we reused it: once more, fresh.
                tracing::debug!(addr = %peer.addr, "pooled connection retired: retrying on a fresh dial");
                retried = true;
                allow_pool = false;
                continue;
            }
            if outcome.connection == ConnectionFate::Reuse {
                if let (Some(conn), Some(stream)) = (exchange.take_connection(), stream) {
                    let pooled = Pooled { stream, conn };
                    let now = std::time::Instant::now();
                    inner
                        .lock_pool()
                        .put(&peer.addr, pooled, now, &inner.opts.pool);
                }
            }
            // The connection is in the pool (or closed) before its slot frees up, so a
            // waiter that gets the slot finds it there: open connections never exceed
            // the per-peer bound.
            drop(permit);
            return self.finish(peer, &mut guard, outcome, started, was_pooled, retried);
        }
    }

    fn finish(
        &self,
        peer: &Peer,
        guard: &mut TicketGuard,
        outcome: ExchangeOutcome,
        started: std::time::Instant,
        pooled: bool,
        retried_fresh: bool,
    ) -> Fetched {
        let inner = &self.inner;
        let now = inner.now();
        let ticket = guard
            .ticket
            .take()
            .expect("the ticket is settled once, here");
        let (finished, open, cooldowns) = {
            let mut peers = inner.lock_peers();
            let f = peers.finish(now, ticket, outcome);
            let open = peers.breaker().map_or(0, |b| b.open_count());
            (f, open, peers.cooldowns().len())
        };
        let class = OutcomeClass::of(&finished.ending);
        let elapsed = started.elapsed();
        let m = &inner.opts.metrics;
        m.get_outcome(class.metric(), elapsed.as_secs_f64());
        m.breaker_open_peers.set(open as i64);
        m.cooldowns_live.set(cooldowns as i64);
        if finished.invalid_cooldown {
            m.invalid_cooldowns.inc();
            tracing::warn!(peer = %peer.id, addr = %peer.addr, "second invalid block: peer on the failed cooldown");
        }
        if finished.circuit_opened {
            tracing::warn!(peer = %peer.id, addr = %peer.addr, "circuit opened");
        }
        let fetched = Fetched {
            peer: peer.id,
            get: finished.get,
            ending: Some(finished.ending),
            local: None,
            class,
            elapsed,
            pooled,
            retried_fresh,
        };
        match class {
            OutcomeClass::Ok | OutcomeClass::Absent | OutcomeClass::Cancelled => {
                tracing::debug!(addr = %peer.addr, outcome = %fetched.describe(), "exchange done")
            }
            _ => {
                tracing::warn!(addr = %peer.addr, outcome = %fetched.describe(), "exchange failed")
            }
        }
        fetched
    }

    fn local(&self, peer: &Peer, local: Local, started: std::time::Instant) -> Fetched {
        let class = match local {
            Local::BreakerRejected | Local::Unsendable => OutcomeClass::Unavailable,
            Local::NoConnectionSlot => OutcomeClass::Busy,
        };
        let elapsed = started.elapsed();
        self.inner
            .opts
            .metrics
            .get_outcome(class.metric(), elapsed.as_secs_f64());
        Fetched {
            peer: peer.id,
            get: GetOutcome::Failed,
            ending: None,
            local: Some(local),
            class,
            elapsed,
            pooled: false,
            retried_fresh: false,
        }
    }
}

/// One step of the exchange loop.
enum Step {
    Read(std::io::Result<usize>),
    Timer,
}

/// Sleeps until core's deadline `at` (forever for `None` or an unrepresentable instant).
async fn sleep_to(clock: &Clock, at: Option<Instant>) {
    match at.and_then(|a| clock.to_std(a)) {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Connects to `addr` (`HOST:PORT`), from `local_ip` when given (the first resolved
/// address of the same family; the port is the kernel's choice).
pub(crate) async fn connect(
    addr: &str,
    local_ip: Option<std::net::IpAddr>,
) -> std::io::Result<TcpStream> {
    let Some(ip) = local_ip else {
        return TcpStream::connect(addr).await;
    };
    let target = tokio::net::lookup_host(addr)
        .await?
        .find(|a| a.is_ipv4() == ip.is_ipv4())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::AddrNotAvailable,
                format!("{addr} has no address of the family of {ip}"),
            )
        })?;
    let socket = if ip.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.bind(std::net::SocketAddr::new(ip, 0))?;
    socket.connect(target).await
}

/// Runs `exchange` to its `Done`: dials if it has no stream, writes, reads, wakes at its
/// deadlines. Returns the exchange (for `take_connection`), its outcome and the stream.
async fn drive(
    inner: &Inner,
    addr: &str,
    mut exchange: Exchange,
    mut stream: Option<TcpStream>,
    validator: Option<&Validator>,
    progress: Option<&Progress>,
) -> (Exchange, ExchangeOutcome, Option<TcpStream>) {
    let clock = &inner.opts.clock;
    // Emulated one-way latency (swarm replays only; zero otherwise).
    let one_way = inner
        .opts
        .link_delay
        .as_ref()
        .map_or(std::time::Duration::ZERO, |d| (d.0)(addr));
    let mut first_read = true;
    if stream.is_none() && !exchange.is_finished() {
        // The dial, raced against the exchange's own deadlines (dial, request, caller).
        let mut connect = pin!(async {
            if one_way.is_zero() {
                return connect(addr, inner.opts.local_ip).await;
            }
            tokio::time::sleep(one_way).await;
            let s = connect(addr, inner.opts.local_ip).await?;
            tokio::time::sleep(one_way).await;
            Ok(s)
        });
        loop {
            let deadline = exchange.poll_timeout().map(|d| d.at);
            tokio::select! {
                r = &mut connect => {
                    let now = inner.now();
                    match r {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            stream = Some(s);
                            exchange.handle_connected(now);
                        }
                        Err(e) => {
                            tracing::debug!(addr, error = %e, "dial failed");
                            exchange.handle_dial_failed(now);
                        }
                    }
                    break;
                }
                _ = sleep_to(clock, deadline) => {
                    exchange.handle_timeout(inner.now());
                    if exchange.is_finished() {
                        break;
                    }
                }
            }
        }
    }
    loop {
        // Bytes out.
        while let Some(t) = exchange.poll_transmit(inner.now()) {
            let Some(s) = stream.as_mut() else { break };
            let write = async {
                if !one_way.is_zero() {
                    tokio::time::sleep(one_way).await;
                }
                s.write_all(&t.head).await?;
                s.write_all(&t.body).await
            };
            let deadline = exchange.poll_timeout().map(|d| d.at);
            let written = tokio::select! {
                r = write => Some(r),
                _ = sleep_to(clock, deadline) => None,
            };
            match written {
                Some(Ok(())) => exchange.handle_transmitted(inner.now()),
                Some(Err(e)) => {
                    tracing::debug!(addr, error = %e, "write failed");
                    exchange.handle_eof(inner.now());
                }
                None => exchange.handle_timeout(inner.now()),
            }
        }
        // Events.
        while let Some(event) = exchange.poll_event() {
            match event {
                ClientEvent::Head { status } => {
                    if let Some(p) = progress {
                        p(status);
                    }
                }
                ClientEvent::Validate { body } => {
                    let valid = validator.is_some_and(|v| v(&body));
                    exchange.handle_validated(inner.now(), valid);
                }
                ClientEvent::Done(outcome) => return (exchange, outcome, stream),
                // An event a later core adds (`#[non_exhaustive]`): nothing asked of us.
                _ => {}
            }
        }
        if exchange.is_finished() {
            // Core emits `Done` exactly once, as it finishes, and it was drained above;
            // were it ever missing, end as a cancellation rather than spin.
            tracing::warn!(addr, "exchange finished without an outcome");
            let path = exchange.breaker_path();
            let outcome = ExchangeOutcome::new(Ending::Cancelled, path, ConnectionFate::Close);
            return (exchange, outcome, None);
        }
        // Bytes in, or the next deadline.
        let deadline = exchange.poll_timeout().map(|d| d.at);
        let step = match (stream.as_mut(), exchange.read_buf()) {
            (Some(s), Some(buf)) => tokio::select! {
                r = s.read(buf) => Step::Read(r),
                _ = sleep_to(clock, deadline) => Step::Timer,
            },
            _ if deadline.is_some() => {
                sleep_to(clock, deadline).await;
                Step::Timer
            }
            _ => {
                // Nothing to read and no deadline: the exchange could never end. Core
                // always arms the request deadline or a caller deadline while running,
                // so this is a driver bug; end it rather than hang.
                tracing::warn!(addr, "exchange with nothing to wait for: cancelled");
                exchange.cancel(inner.now());
                continue;
            }
        };
        let now = inner.now();
        match step {
            Step::Read(Ok(0)) => exchange.handle_eof(now),
            Step::Read(Ok(n)) => {
                if first_read && !one_way.is_zero() {
                    // The response's first bytes travel one way (the rest follow them).
                    first_read = false;
                    tokio::time::sleep(one_way).await;
                    exchange.handle_read(inner.now(), n);
                } else {
                    exchange.handle_read(now, n);
                }
            }
            Step::Read(Err(e)) => {
                tracing::debug!(addr, error = %e, "read failed");
                exchange.handle_eof(now);
            }
            Step::Timer => exchange.handle_timeout(now),
        }
    }
}
