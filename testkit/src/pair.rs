//! An in-memory client ↔ server pair: both exchange machines over byte queues, on a
//! virtual clock that jumps straight to the next deadline.
//!
//! The same shape as quinn-proto's test `Pair`: no sockets, no threads, no sleeps. It
//! exists so that exchange behaviour can be tested end to end through the real machines
//! (this crate's tests), and so that the simulator and the drivers' conformance suite can
//! replay the same scenarios against the same expectations.
//!
//! What it models, all of it deterministic:
//!
//! - the dial ([`Dial`]): connects after a latency, is refused, or never answers;
//! - the server's application: a [`BlockSource`] that answers fetch and relay events,
//!   possibly after a delay or never, and a [`Membership`] that answers roster requests;
//! - a silent server ([`Pair::server_silent`]) that accepts and never reads, and a
//!   scripted server ([`Pair::script`]) that answers any request with fixed raw bytes (for
//!   responses the real server never produces: bad lengths, chunked bodies, garbage);
//! - connection reuse: a connection an exchange hands back is used by the next one;
//! - byte accounting ([`PairStats`]): what the harness copied between the machines (the
//!   "network"), and the bodies the server handed out, to check core copies none.
//!
//! Time moves only in [`Pair::run`], and only to the earliest of the machines'
//! `poll_timeout`s and the harness's own scheduled happenings.
//!
//! The machines are driven through the same pumps as the simulator's
//! ([`crate::pump`]): `poll_exchange` for the client's transmits, validation and events,
//! `poll_server` for the server's events (the application answers a zero-delay source
//! reply and a roster at once, a delayed one later) and transmits, each acknowledged as
//! soon as the in-memory wire took it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use peerblock_core::client::{
    ClientConfig, Connection, ConnectionFate, Exchange, ExchangeConfigError, ExchangeOutcome,
    ExchangeRequest, Link,
};
use peerblock_core::roster::{Membership, RosterMember};
use peerblock_core::server::{
    Admission, AdmissionConfig, RequestId, ServerConfig, ServerConnection, ServerEvent,
    SourceRequest, SourceResult,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::wire::BlockPath;

use crate::pump::{self, Answer, ClientStep, Written};

/// When and how the application answers a source request: `Some((delay, result))`, or
/// `None` to never answer (a stalled source).
pub type Reply = Option<(Duration, SourceResult)>;

/// The caller's block validator: `true` accepts the body.
pub type Validator = Box<dyn FnMut(&[u8]) -> bool>;

/// The server application's block store, as the pair sees it.
pub trait BlockSource {
    /// A local lookup ([`ServerEvent::Fetch`]).
    fn fetch(&mut self, now: Instant, request: &SourceRequest) -> Reply;
    /// A relay fetch on the requester's behalf ([`ServerEvent::Relay`]; `request.hop` is
    /// already the relayed hop).
    fn relay(&mut self, now: Instant, request: &SourceRequest) -> Reply;
}

/// A map-backed [`BlockSource`] that records every call.
#[derive(Clone, Debug, Default)]
pub struct MapSource {
    /// Blocks held locally.
    pub blocks: BTreeMap<BlockPath, Bytes>,
    /// What a relay fetch returns (`None`: a miss).
    pub relay_result: Option<SourceResult>,
    /// Overrides every local lookup's result (a failing or refusing source).
    pub fetch_result: Option<SourceResult>,
    /// Delay before answering; `None` (with `stall`) never answers.
    pub delay: Duration,
    /// Never answer.
    pub stall: bool,
    /// Every local lookup, in order.
    pub fetches: Vec<SourceRequest>,
    /// Every relay fetch, in order.
    pub relays: Vec<SourceRequest>,
}

impl MapSource {
    /// A source holding `blocks`.
    pub fn with_blocks(blocks: impl IntoIterator<Item = (BlockPath, Bytes)>) -> Self {
        MapSource {
            blocks: blocks.into_iter().collect(),
            ..MapSource::default()
        }
    }
}

impl BlockSource for MapSource {
    fn fetch(&mut self, _now: Instant, request: &SourceRequest) -> Reply {
        self.fetches.push(request.clone());
        if self.stall {
            return None;
        }
        let result = self.fetch_result.clone().unwrap_or_else(|| {
            self.blocks
                .get(&request.path)
                .map_or(SourceResult::Miss, |b| SourceResult::Found(b.clone()))
        });
        Some((self.delay, result))
    }

    fn relay(&mut self, _now: Instant, request: &SourceRequest) -> Reply {
        self.relays.push(request.clone());
        if self.stall {
            return None;
        }
        Some((
            self.delay,
            self.relay_result.clone().unwrap_or(SourceResult::Miss),
        ))
    }
}

/// How a dial goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dial {
    /// Connects after this latency.
    Connect(Duration),
    /// Fails (connection refused) after this latency.
    Fail(Duration),
    /// Never answers (a dead host: no RST).
    Blackhole,
}

/// What the harness copied and saw.
#[derive(Clone, Debug, Default)]
pub struct PairStats {
    /// Bytes the harness copied from the client's transmits into the server's input.
    pub wire_to_server: u64,
    /// Bytes the harness copied from the server's transmits into the client's input.
    pub wire_to_client: u64,
    /// Bytes the client machine took through `handle_input` (the codec buffers them: the
    /// one receive-side copy inside core).
    pub client_fed: u64,
    /// Every non-empty response body the server handed out (reference-counted clones, so
    /// pointer identity with the source's blocks proves the server copied nothing).
    pub served_bodies: Vec<Bytes>,
    /// Validator invocations.
    pub validations: u32,
    /// [`ClientEvent::Head`](peerblock_core::client::ClientEvent::Head)s the client emitted
    /// (response heads that arrived).
    pub heads: u32,
    /// Connections dialed.
    pub dials: u32,
    /// Connections the server refused at accept.
    pub refused_at_accept: u32,
}

#[derive(Debug)]
enum Happening {
    DialDone { ok: bool },
    Answer { id: RequestId, result: SourceResult },
}

/// The client and the server of one peer link, wired together in memory.
pub struct Pair<B: BlockSource = MapSource> {
    /// The virtual clock.
    pub now: Instant,
    /// The client's configuration (applies to exchanges started afterwards).
    pub client_config: ClientConfig,
    /// The server's configuration (applies to connections accepted afterwards).
    pub server_config: Arc<ServerConfig>,
    /// The server's admission bookkeeping.
    pub admission: Admission<u32>,
    /// The server application's block store.
    pub source: B,
    /// The server application's membership table (answers roster requests, learns callers).
    pub membership: Membership,
    /// How the next dial goes.
    pub dial: Dial,
    /// The client's source key as the server's admission sees it.
    pub source_id: u32,
    /// A server that accepts and then never reads nor answers.
    pub server_silent: bool,
    /// The validator `get_validated` exchanges run (default: accept everything).
    pub validator: Validator,
    /// What the harness copied and saw.
    pub stats: PairStats,
    script: Option<(Bytes, bool)>,
    client: Option<Exchange>,
    server: Option<ServerConnection<u32>>,
    server_closed: bool,
    pooled: Option<Connection>,
    to_server: VecDeque<u8>,
    to_client: VecDeque<u8>,
    scheduled: Vec<(Instant, u64, Happening)>,
    seq: u64,
    outcome: Option<ExchangeOutcome>,
}

/// Most steps [`Pair::run`] takes before declaring the pair stuck: far above any real
/// exchange (a handful of steps), so hitting it means a machine busy-loops.
pub const MAX_STEPS: usize = 100_000;

impl Pair<MapSource> {
    /// A pair with default configurations: server `"server"` at `"server:7070"` holding
    /// `blocks`, admission defaults, client defaults, instant dial.
    pub fn new(blocks: impl IntoIterator<Item = (BlockPath, Bytes)>) -> Self {
        Pair::with_source(
            ServerConfig::new("server", "server:7070"),
            AdmissionConfig::default(),
            MapSource::with_blocks(blocks),
        )
    }
}

impl<B: BlockSource> Pair<B> {
    /// A pair around `source`, with the given server and admission configuration.
    ///
    /// # Panics
    /// If `server` or `admission` violates a startup invariant (a harness misuse).
    pub fn with_source(server: ServerConfig, admission: AdmissionConfig, source: B) -> Self {
        server.validate().expect("valid server config");
        let me = RosterMember {
            id: server.node_id.clone(),
            addr: server.advertised_addr.clone(),
            weight: 1.0,
            record: Default::default(),
        };
        Pair {
            now: Instant::ZERO,
            client_config: ClientConfig::default(),
            server_config: Arc::new(server),
            admission: Admission::new(admission).expect("valid admission config"),
            source,
            membership: Membership::new(me, 1, peerblock_core::roster::MAX_ROSTER_MEMBERS - 1)
                .expect("valid server identity"),
            dial: Dial::Connect(Duration::ZERO),
            source_id: 1,
            server_silent: false,
            validator: Box::new(|_| true),
            stats: PairStats::default(),
            script: None,
            client: None,
            server: None,
            server_closed: false,
            pooled: None,
            to_server: VecDeque::new(),
            to_client: VecDeque::new(),
            scheduled: Vec::new(),
            seq: 0,
            outcome: None,
        }
    }

    /// Replaces the server machine: every request is answered with exactly `response`,
    /// and the connection is closed after it if `close`.
    pub fn script(&mut self, response: impl Into<Bytes>, close: bool) {
        self.script = Some((response.into(), close));
    }

    /// Whether a reusable connection is pooled.
    pub fn has_pooled_connection(&self) -> bool {
        self.pooled.is_some()
    }

    /// The server connection, if one is open.
    pub fn server(&self) -> Option<&ServerConnection<u32>> {
        self.server.as_ref()
    }

    fn schedule(&mut self, at: Instant, what: Happening) {
        self.seq += 1;
        self.scheduled.push((at, self.seq, what));
    }

    /// Starts an exchange: on the pooled connection if there is one, else by dialing.
    pub fn start(&mut self, request: ExchangeRequest<'_>) -> Result<(), ExchangeConfigError> {
        self.outcome = None;
        let link = match self.pooled.take() {
            Some(c) if !self.server_closed && (self.server.is_some() || self.script.is_some()) => {
                Link::Pooled(c)
            }
            _ => {
                self.reset_connection();
                self.stats.dials += 1;
                match self.dial {
                    Dial::Connect(after) => {
                        self.schedule(self.now + after, Happening::DialDone { ok: true })
                    }
                    Dial::Fail(after) => {
                        self.schedule(self.now + after, Happening::DialDone { ok: false })
                    }
                    Dial::Blackhole => {}
                }
                Link::Dial
            }
        };
        self.client = Some(Exchange::new(self.now, &self.client_config, request, link)?);
        Ok(())
    }

    fn reset_connection(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.close(self.now, &mut self.admission);
        }
        self.server_closed = false;
        self.to_server.clear();
        self.to_client.clear();
        self.scheduled
            .retain(|(_, _, h)| !matches!(h, Happening::Answer { .. }));
    }

    /// Starts an exchange and runs it to its outcome.
    ///
    /// # Panics
    /// If the client config or the request is invalid, or the pair gets stuck (see
    /// [`Pair::run`]).
    pub fn exchange(&mut self, request: ExchangeRequest<'_>) -> ExchangeOutcome {
        self.start(request)
            .expect("valid config and encodable request");
        self.run()
    }

    /// Cancels the running exchange as its caller would.
    pub fn cancel(&mut self) {
        if let Some(c) = self.client.as_mut() {
            c.cancel(self.now);
        }
        self.drive();
    }

    /// Runs until the exchange has an outcome, jumping the clock to each next deadline.
    ///
    /// # Panics
    /// If nothing is left to happen and there is no outcome (a machine that neither
    /// finishes nor sets a deadline), or after [`MAX_STEPS`] steps.
    pub fn run(&mut self) -> ExchangeOutcome {
        for _ in 0..MAX_STEPS {
            self.drive();
            if let Some(outcome) = self.outcome.take() {
                return outcome;
            }
            let next = self
                .next_deadline()
                .expect("pair stuck: no outcome, no deadline");
            self.advance_to(next);
        }
        panic!("pair did not finish within {MAX_STEPS} steps");
    }

    /// Runs until time `t` (processing everything due before it), without requiring an
    /// outcome.
    pub fn run_until(&mut self, t: Instant) {
        for _ in 0..MAX_STEPS {
            self.drive();
            match self.next_deadline() {
                Some(next) if next <= t => self.advance_to(next),
                _ => break,
            }
        }
        if self.now < t {
            self.advance_to(t);
            self.drive();
        }
    }

    /// The outcome of the last exchange, if [`Pair::run_until`] reached it.
    pub fn take_outcome(&mut self) -> Option<ExchangeOutcome> {
        self.outcome.take()
    }

    fn next_deadline(&self) -> Option<Instant> {
        let client = self
            .client
            .as_ref()
            .and_then(Exchange::poll_timeout)
            .map(|d| d.at);
        let server = self
            .server
            .as_ref()
            .and_then(ServerConnection::poll_timeout)
            .map(|d| d.at);
        let scheduled = self.scheduled.iter().map(|(t, _, _)| *t).min();
        [client, server, scheduled].into_iter().flatten().min()
    }

    fn advance_to(&mut self, t: Instant) {
        self.now = self.now.max(t);
        let now = self.now;
        // Happenings due now, in scheduling order.
        self.scheduled.sort_by_key(|(t, seq, _)| (*t, *seq));
        while self.scheduled.first().is_some_and(|(t, _, _)| *t <= now) {
            let (_, _, what) = self.scheduled.remove(0);
            self.happen(what);
        }
        if let Some(c) = self.client.as_mut() {
            c.handle_timeout(now);
        }
        if let Some(s) = self.server.as_mut() {
            s.handle_timeout(now);
        }
    }

    fn happen(&mut self, what: Happening) {
        let now = self.now;
        match what {
            Happening::DialDone { ok: false } => {
                if let Some(c) = self.client.as_mut() {
                    c.handle_dial_failed(now);
                }
            }
            Happening::DialDone { ok: true } => {
                if self.script.is_none() {
                    let s = ServerConnection::accept(
                        now,
                        &mut self.admission,
                        self.source_id,
                        Arc::clone(&self.server_config),
                    )
                    .expect("server config validated at construction");
                    if s.refused().is_some() {
                        // It answers the first request with the 503.
                        self.stats.refused_at_accept += 1;
                    }
                    self.server = Some(s);
                    self.server_closed = false;
                }
                if let Some(c) = self.client.as_mut() {
                    c.handle_connected(now);
                }
            }
            Happening::Answer { id, result } => {
                if let Some(s) = self.server.as_mut() {
                    // A stale id (connection replaced) is ignored, as a driver would.
                    let _ = s.handle_source(now, &mut self.admission, id, result);
                }
            }
        }
    }

    /// Moves bytes and events between the machines until neither has anything to do at
    /// the current instant.
    pub fn drive(&mut self) {
        let now = self.now;
        for _ in 0..MAX_STEPS {
            let mut progress = false;
            // Client → wire.
            if let Some(c) = self.client.as_mut() {
                while let Some(t) = c.poll_transmit(now) {
                    let len = t.head.len() + t.body.len();
                    self.stats.wire_to_server += len as u64;
                    self.to_server.extend(t.head.iter().chain(t.body.iter()));
                    // The in-memory wire takes every byte at once: written, acknowledged.
                    c.handle_transmitted(now);
                    progress = true;
                }
            }
            // Wire → server (or the script).
            progress |= self.serve(now);
            // Wire → client.
            if let Some(c) = self.client.as_mut() {
                if c.is_finished() {
                    // The driver stops reading (and closes) once the exchange is over.
                } else if !self.to_client.is_empty() {
                    let (a, _) = self.to_client.as_slices();
                    let taken = c.handle_input(now, a);
                    if taken > 0 {
                        self.stats.client_fed += taken as u64;
                        self.to_client.drain(..taken);
                        progress = true;
                    }
                }
                if self.server_closed && self.to_client.is_empty() && !c.is_finished() {
                    c.handle_eof(now);
                    progress = true;
                }
                let (stats, validator) = (&mut self.stats, &mut self.validator);
                let to_server = &mut self.to_server;
                loop {
                    let step = pump::poll_exchange(
                        now,
                        c,
                        |body| {
                            stats.validations += 1;
                            progress = true;
                            validator(body)
                        },
                        |t| {
                            stats.wire_to_server += (t.head.len() + t.body.len()) as u64;
                            to_server.extend(t.head.iter().chain(t.body.iter()));
                            Written::All
                        },
                    );
                    match step {
                        Some(ClientStep::Head { .. }) => {
                            stats.heads += 1;
                            progress = true;
                        }
                        Some(ClientStep::Done(outcome)) => {
                            if outcome.connection == ConnectionFate::Reuse {
                                self.pooled = c.take_connection();
                            }
                            self.outcome = Some(outcome);
                            progress = true;
                        }
                        None => break,
                    }
                }
            }
            if !progress {
                return;
            }
        }
        panic!("pair drive did not settle within {MAX_STEPS} steps");
    }

    fn serve(&mut self, now: Instant) -> bool {
        let mut progress = false;
        if let Some((response, close)) = self.script.clone() {
            if !self.to_server.is_empty() && !self.server_closed {
                // Any request bytes trigger the scripted answer, once per request head.
                let text: Vec<u8> = self.to_server.drain(..).collect();
                let requests = text.windows(4).filter(|w| *w == b"\r\n\r\n").count();
                for _ in 0..requests {
                    self.stats.wire_to_client += response.len() as u64;
                    self.to_client.extend(response.iter());
                }
                self.server_closed |= close;
                progress = true;
            }
            return progress;
        }
        if self.server_silent {
            return false;
        }
        let Some(s) = self.server.as_mut() else {
            return false;
        };
        if !self.to_server.is_empty() {
            self.to_server.make_contiguous();
            let (a, _) = self.to_server.as_slices();
            let taken = s.handle_input(now, a);
            if taken > 0 {
                self.to_server.drain(..taken);
                progress = true;
            }
        }
        if s.needs_admission() {
            s.handle_admission(now, &mut self.admission);
            progress = true;
        }
        // The application: the block source answers now (a zero delay) or later (a
        // scheduled happening), the membership table answers rosters at once.
        let (source, membership) = (&mut self.source, &mut self.membership);
        let (scheduled, seq) = (&mut self.scheduled, &mut self.seq);
        let mut app = |now: Instant, event: ServerEvent| {
            progress = true;
            let (id, reply) = match event {
                ServerEvent::Fetch { id, request } => (id, source.fetch(now, &request)),
                ServerEvent::Relay { id, request } => (id, source.relay(now, &request)),
                ServerEvent::Roster { id, caller } => {
                    if let Some(caller) = caller {
                        let _ = membership.learn(now, &caller.id, &caller.addr);
                    }
                    return Some(Answer::Roster(id, membership.snapshot()));
                }
                ServerEvent::Rejected { .. } | ServerEvent::SourceTimedOut { .. } => return None,
                // An event a later core adds (`#[non_exhaustive]`): nothing to answer.
                _ => return None,
            };
            match reply? {
                (delay, result) if delay == Duration::ZERO => Some(Answer::Source(id, result)),
                (delay, result) => {
                    *seq += 1;
                    scheduled.push((now + delay, *seq, Happening::Answer { id, result }));
                    None
                }
            }
        };
        let (stats, to_client) = (&mut self.stats, &mut self.to_client);
        let server_closed = &mut self.server_closed;
        let mut wrote = false;
        pump::poll_server(now, s, &mut self.admission, &mut app, |_, t| {
            wrote = true;
            let len = t.head.len() + t.body.len();
            stats.wire_to_client += len as u64;
            to_client.extend(t.head.iter());
            to_client.extend(t.body.iter());
            if !t.body.is_empty() {
                stats.served_bodies.push(t.body.clone());
            }
            if t.close.ends_connection() {
                // Half-closed (or closed): the client reads to EOF; a lingering server
                // keeps discarding input until it finishes.
                *server_closed = true;
            }
            Written::All
        });
        progress |= wrote;
        if s.is_finished() {
            if let Some(mut s) = self.server.take() {
                s.close(now, &mut self.admission);
            }
            self.server_closed = true;
            progress = true;
        }
        progress
    }

    /// Closes the server side abruptly (a crash or reset): every ticket is released.
    pub fn abort_server(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.close(self.now, &mut self.admission);
        }
        self.server_closed = true;
        self.drive();
    }
}
