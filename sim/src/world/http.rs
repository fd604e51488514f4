//! peerblock's HTTP/1.1 path (`network.transport = "http1"`): every GET runs through the
//! real core machines, exchanging real encoded bytes over the simulated link.
//!
//! - The reader side of each GET is a [`peerblock_core::client::Exchange`]: it encodes the
//!   request, runs the dial, response-header and request deadlines, applies the length
//!   rules, sequences validation and classifies the ending. Its [`ExchangeOutcome`] goes to
//!   the reader's `client::Peers` (`Peers::finish` with the GET's ticket), which records it
//!   in the breaker, the cooldown table and the load table and gives the read its outcome.
//!   The request is acknowledged as written as soon as it is sent (the simulated socket
//!   takes every byte at once).
//! - Each simulated TCP connection at a node is a [`ServerConnection`], accepted through
//!   the node's real `server::Admission` (a full node's connection answers the reader's
//!   request with the real 503 refusal bytes, then half-closes), which decodes the request,
//!   validates and routes it, takes the request slot, reserves the response bytes and
//!   frames the response; the status and refusal reason come from its `Transmit`. Its `Fetch` event is answered by
//!   the node model: the block's body if the node holds it, a miss otherwise; a silent node
//!   never answers.
//! - Bytes cross the link after the one-way latency. A response head leaves when the server
//!   emits it; a `200`'s body leaves when the node's upload link has carried the block's
//!   **nominal** size (the bandwidth model decides transfer time, as for the reference
//!   arms), and only then is the transmit acknowledged to the server machine.
//! - Bodies are scaled: a block's body is its content token padded to 1/[`BODY_SCALE`] of
//!   the nominal size, and the node's byte budgets are scaled the same way, so the server
//!   machine's in-flight byte accounting admits exactly what it would for the real sizes.
//! - Connections are reused the way the machines allow: an exchange that ends with
//!   `ConnectionFate::Reuse` hands its connection to the reader's pool
//!   (`take_connection`); a reused connection the server had already retired fails with
//!   `retry_fresh` and the GET is retried once on a fresh dial. A server's idle timeout
//!   closes the connection and the close reaches the reader one latency later.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use peerblock_core::client::Exchange;
use peerblock_core::client::{
    BlockRequest, ClientConfig, ClientEvent, Connection, ConnectionFate, Deadlines, Ending,
    ExchangeError, ExchangeOutcome, ExchangeRequest, Link, RequestTimeout,
};
use peerblock_core::server::{ServerConfig, ServerConnection, ServerEvent, SourceResult};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::wire::{BlockPath, ChunkKey};

use super::{Ev, World};
use crate::listener::Limit;
use crate::metrics::GetResult;
use crate::model::content::Content;
use crate::model::node::Health;
use crate::scenario::{Scenario, WhenFull};
use crate::slab::Handle;
use crate::trace;

/// Bodies and byte budgets on the HTTP path are 1/`BODY_SCALE` of their nominal size.
///
/// Carrying real 4 MiB bodies through the machines would cost a copy per response (tens
/// of gigabytes per replay); the transfer *time* comes from the upload model anyway. Block
/// sizes are whole KiB and budgets whole MiB, so dividing both by 1024 keeps every
/// admission decision exact.
pub const BODY_SCALE: u64 = 1024;

/// A simulated connection's id (unique per run).
pub(super) type ConnId = u64;

/// The reader side of one GET on the HTTP path.
#[derive(Debug)]
pub(super) struct HttpGet {
    exchange: Exchange,
    /// The connection the exchange runs on: assigned (pooled, or a fresh id for the dial)
    /// when the exchange starts; `None` once it ended and the connection went back to the
    /// pool or was closed.
    conn: Option<ConnId>,
    /// Whether the connection came from the pool.
    pooled: bool,
    /// The earliest deadline a `ClientTimer` event is already scheduled for. A later
    /// deadline is not scheduled while it is pending: when it fires (spuriously, as far as
    /// the machine is concerned) the pump re-arms at the machine's current deadline. This
    /// keeps one pending timer per exchange instead of one per deadline change.
    armed: Option<Instant>,
    /// A fresh retry after a retired pooled connection was already spent.
    retried: bool,
}

/// Events of the HTTP path.
#[derive(Debug)]
pub(super) enum HttpEv {
    /// A dial (SYN) reaches the node.
    Syn { get: Handle, conn: ConnId },
    /// Bytes (and/or the close) from a reader reach the node's connection.
    ToServer {
        /// The GET the bytes belong to (`None` for a close).
        get: Option<Handle>,
        node: u32,
        conn: ConnId,
        bytes: Bytes,
        eof: bool,
    },
    /// Bytes (and/or the handshake, the close) from a node reach the reader.
    ToClient {
        get: Option<Handle>,
        reader: u32,
        node: u32,
        conn: ConnId,
        connected: bool,
        bytes: Bytes,
        eof: bool,
    },
    /// An exchange deadline.
    ClientTimer { get: Handle },
    /// A server connection deadline (idle, source, send progress, linger, refusal head).
    ServerTimer { node: u32, conn: ConnId, epoch: u32 },
}

struct ServerSide {
    conn: ServerConnection<u32>,
    reader: u32,
    epoch: u32,
    /// The GET whose request the connection is answering.
    get: Option<Handle>,
    /// The upload transfer carrying its `200` body.
    transfer: Option<u64>,
    /// The nominal size of the block last answered `Found` (its `200` is next out).
    nominal: u64,
    armed: Option<Instant>,
    /// The node has closed its sending side (the reader has been sent the end of stream).
    half_closed: bool,
}

struct Transfer {
    node: u32,
    conn: ConnId,
    reader: u32,
    get: Option<Handle>,
    body: Bytes,
    close: bool,
    nominal: u64,
}

/// The HTTP path's state: server connections per node, the readers' idle pools and the
/// `200` bodies on the upload links.
pub(super) struct Http {
    client: ClientConfig,
    servers: Vec<Arc<ServerConfig>>,
    hosts: Vec<String>,
    conns: BTreeMap<(u32, ConnId), ServerSide>,
    pool: BTreeMap<(u32, u32), Vec<(ConnId, Connection)>>,
    transfers: BTreeMap<u64, Transfer>,
    next_conn: ConnId,
    next_transfer: u64,
    /// Per block: the content token (what the read machine gets) and the scaled body a
    /// correct holder serves, built once (responses hand out clones, no copies).
    tokens: Vec<Bytes>,
    bodies: Vec<Bytes>,
    /// The most recent refusal bytes a node wrote (for tests).
    #[cfg(test)]
    last_refusal: Option<Bytes>,
}

/// The scaled body a correct holder of `block` serves: the token, padded.
pub(super) fn body_for(token: Bytes, nominal: u64) -> Bytes {
    let len = (nominal / BODY_SCALE).max(token.len() as u64) as usize;
    let mut b = BytesMut::with_capacity(len);
    b.extend_from_slice(&token);
    b.resize(len, 0);
    b.freeze()
}

impl Http {
    pub(super) fn new(s: &Scenario, content: &Content) -> Self {
        let c = &s.client;
        let client = ClientConfig {
            deadlines: Deadlines {
                dial: Duration::from_millis(c.dial_timeout_ms),
                response_header: Duration::from_millis(c.response_timeout_ms),
                request: RequestTimeout::After(Duration::from_millis(c.request_timeout_ms)),
            },
            // peerblock's client bound on an advertised Retry-After (15 s).
            ..ClientConfig::default()
        };
        let hosts: Vec<String> = (0..s.cluster.nodes).map(|n| format!("n{n}:7070")).collect();
        let servers = hosts
            .iter()
            .enumerate()
            .map(|(n, h)| {
                let mut cfg = ServerConfig::new(format!("n{n}"), h.clone());
                cfg.idle_timeout = Duration::from_secs(s.listener.session_idle_secs.max(1));
                Arc::new(cfg)
            })
            .collect();
        let tokens: Vec<Bytes> = (0..s.blocks()).map(|b| content.token(b)).collect();
        let bodies = tokens
            .iter()
            .enumerate()
            .map(|(b, t)| body_for(t.clone(), s.block_bytes(b as u32)))
            .collect();
        Http {
            tokens,
            bodies,
            client,
            servers,
            hosts,
            conns: BTreeMap::new(),
            pool: BTreeMap::new(),
            transfers: BTreeMap::new(),
            next_conn: 1,
            next_transfer: 1,
            #[cfg(test)]
            last_refusal: None,
        }
    }
}

/// An HTTP-path event for the queue.
fn boxed(ev: HttpEv) -> Ev {
    Ev::Http(Box::new(ev))
}

fn result_of(ending: &Ending) -> GetResult {
    match ending {
        Ending::Block(_) => GetResult::Found,
        Ending::Miss => GetResult::NotFound,
        Ending::Refused(_) => GetResult::Refused,
        Ending::Cancelled => GetResult::Cancelled,
        Ending::Failed(e) => match e {
            ExchangeError::DialFailed | ExchangeError::DialTimeout(_) => GetResult::DialFailed,
            ExchangeError::ResponseHeaderTimeout(_) | ExchangeError::RequestTimeout(_) => {
                GetResult::TimedOut
            }
            ExchangeError::Length(_) | ExchangeError::Validation | ExchangeError::Protocol(_) => {
                GetResult::Corrupt
            }
            _ => GetResult::Closed,
        },
        _ => GetResult::Closed,
    }
}

impl World<'_> {
    fn http(&mut self) -> &mut Http {
        self.http.as_mut().expect("http1 transport")
    }

    /// Starts the exchange of GET `g` (already in `self.gets`): on a pooled connection of
    /// the reader to the node if there is one, else on a fresh dial. Returns whether it
    /// reused a connection.
    pub(super) fn http_start(&mut self, g: Handle, allow_pool: bool) -> bool {
        let now = self.now;
        let Some(get) = self.gets.get(g) else {
            return false;
        };
        let (r, n, block) = (get.reader, get.node, get.block);
        let key = ChunkKey::from_array(self.content.keys[block as usize].0);
        let path = BlockPath {
            key,
            index: u64::from(block),
        };
        let http = self.http.as_mut().expect("http1 transport");
        let expected = http.bodies[block as usize].len() as u64;
        let pooled = if allow_pool {
            http.pool.get_mut(&(r, n)).and_then(Vec::pop)
        } else {
            None
        };
        let reused = pooled.is_some();
        let (link, conn) = match pooled {
            Some((id, c)) => (Link::Pooled(c), id),
            None => {
                let id = http.next_conn;
                http.next_conn += 1;
                (Link::Dial, id)
            }
        };
        let request = ExchangeRequest::get_validated(
            &http.hosts[n as usize],
            BlockRequest::new(path),
            expected,
            true,
        );
        let exchange = Exchange::new(now, &http.client, request, link)
            .expect("a valid client config (the scenario's) and an encodable request");
        if let Some(get) = self.gets.get_mut(g) {
            get.http = Some(Box::new(HttpGet {
                exchange,
                conn: Some(conn),
                pooled: reused,
                armed: None,
                retried: false,
            }));
        }
        if !reused {
            let ow = self.latency.one_way(r, n);
            self.queue
                .push(now + ow, boxed(HttpEv::Syn { get: g, conn }));
        }
        self.http_pump_client(g);
        reused
    }

    pub(super) fn http_event(&mut self, ev: HttpEv) {
        match ev {
            HttpEv::Syn { get, conn } => self.http_syn(get, conn),
            HttpEv::ToServer {
                get,
                node,
                conn,
                bytes,
                eof,
            } => self.http_to_server(get, node, conn, bytes, eof),
            HttpEv::ToClient {
                get,
                reader,
                node,
                conn,
                connected,
                bytes,
                eof,
            } => self.http_to_client(get, reader, node, conn, connected, bytes, eof),
            HttpEv::ClientTimer { get } => {
                let now = self.now;
                if let Some(h) = self.gets.get_mut(get).and_then(|g| g.http.as_mut()) {
                    if h.armed == Some(now) {
                        h.armed = None;
                    }
                    h.exchange.handle_timeout(now);
                }
                self.http_pump_client(get);
            }
            HttpEv::ServerTimer { node, conn, epoch } => {
                let now = self.now;
                let http = self.http.as_mut().expect("http1 transport");
                if let Some(side) = http.conns.get_mut(&(node, conn)) {
                    if side.epoch == epoch {
                        if side.armed == Some(now) {
                            side.armed = None;
                        }
                        side.conn.handle_timeout(now);
                    }
                }
                self.http_pump_server(node, conn);
            }
        }
    }

    fn http_syn(&mut self, g: Handle, conn: ConnId) {
        let now = self.now;
        let Some(get) = self.gets.get(g) else {
            return; // the GET ended meanwhile: nobody is dialing any more
        };
        if get.http.as_ref().and_then(|h| h.conn) != Some(conn) {
            return;
        }
        let (r, n) = (get.reader, get.node);
        let node = &mut self.nodes[n as usize];
        if !node.reachable() {
            return; // never answered: the exchange's dial deadline decides
        }
        let source = self.readers[r as usize].source;
        let epoch = node.epoch;
        let limits = self.s.listener.clone();
        let full_limit = {
            let core = node.admission.core_mut();
            if core.sessions() >= limits.max_sessions as usize {
                Some(Limit::Sessions)
            } else if core.source_sessions(&source) >= limits.max_sessions_per_source as usize {
                Some(Limit::SourceSessions)
            } else {
                None
            }
        };
        let ow = self.latency.one_way(r, n);
        if let (Some(limit), WhenFull::Silent) = (full_limit, limits.when_full) {
            self.metrics.limit_hit(limit);
            if let Some(at) = self.dial_dropped(g, n, r, limit) {
                self.queue.push(at, boxed(HttpEv::Syn { get: g, conn }));
            }
            return;
        }
        let config = Arc::clone(&self.http().servers[n as usize]);
        let node = &mut self.nodes[n as usize];
        let server = ServerConnection::accept(now, node.admission.core_mut(), source, config)
            .expect("server config validated when the scenario was built");
        if let Some(refusal) = server.refused() {
            // The kernel accepted the connection; the server answers the reader's request
            // with its refusal, then half-closes.
            let limit = Limit::from_reason(refusal.reason);
            self.metrics.limit_hit(limit);
            trace!(
                self.trace,
                now,
                "refuse",
                "n={n} r={r} limit={}",
                limit.as_str()
            );
        }
        self.http().conns.insert(
            (n, conn),
            ServerSide {
                conn: server,
                reader: r,
                epoch,
                get: Some(g),
                transfer: None,
                nominal: 0,
                armed: None,
                half_closed: false,
            },
        );
        self.queue.push(
            now + ow,
            boxed(HttpEv::ToClient {
                get: Some(g),
                reader: r,
                node: n,
                conn,
                connected: true,
                bytes: Bytes::new(),
                eof: false,
            }),
        );
        self.http_pump_server(n, conn);
    }

    fn http_to_server(&mut self, g: Option<Handle>, n: u32, conn: ConnId, bytes: Bytes, eof: bool) {
        let now = self.now;
        let node = &self.nodes[n as usize];
        let (epoch, reachable) = (node.epoch, node.reachable());
        let http = self.http.as_mut().expect("http1 transport");
        let live = http.conns.get(&(n, conn)).is_some_and(|s| s.epoch == epoch);
        if !live {
            http.conns.remove(&(n, conn));
            if reachable && !bytes.is_empty() {
                // A segment for a connection the node does not know (it restarted, or
                // retired the connection): reset.
                let Some((g, r)) = g.and_then(|g| self.gets.get(g).map(|get| (g, get.reader)))
                else {
                    return;
                };
                let ow = self.latency.one_way(r, n);
                self.queue.push(
                    now + ow,
                    boxed(HttpEv::ToClient {
                        get: Some(g),
                        reader: r,
                        node: n,
                        conn,
                        connected: false,
                        bytes: Bytes::new(),
                        eof: true,
                    }),
                );
            }
            return;
        }
        if eof {
            self.http_close_server(n, conn);
            return;
        }
        if !reachable {
            return; // lost on the way
        }
        let node = &mut self.nodes[n as usize];
        let http = self.http.as_mut().expect("http1 transport");
        let side = http.conns.get_mut(&(n, conn)).expect("live");
        side.get = g;
        let mut off = 0;
        while off < bytes.len() {
            let taken = side.conn.handle_input(now, &bytes[off..]);
            if side.conn.needs_admission() {
                side.conn.handle_admission(now, node.admission.core_mut());
            }
            if taken == 0 {
                break;
            }
            off += taken;
        }
        self.http_pump_server(n, conn);
    }

    /// The reader closed connection `conn` (or the node is dropping it): release it.
    fn http_close_server(&mut self, n: u32, conn: ConnId) {
        let now = self.now;
        let http = self.http.as_mut().expect("http1 transport");
        let Some(mut side) = http.conns.remove(&(n, conn)) else {
            return;
        };
        let node = &mut self.nodes[n as usize];
        if let Some(t) = side.transfer {
            http.transfers.remove(&t);
            node.uplink.cancel(now, t);
        }
        side.conn.close(now, node.admission.core_mut());
        self.reschedule_uplink(n);
    }

    /// Answers the server machine's events and ships what it transmits.
    fn http_pump_server(&mut self, n: u32, conn: ConnId) {
        let now = self.now;
        let Some(http) = self.http.as_mut() else {
            return;
        };
        let Some(side) = http.conns.get_mut(&(n, conn)) else {
            return;
        };
        let node = &mut self.nodes[n as usize];
        let r = side.reader;
        while let Some(ev) = side.conn.poll_event() {
            match ev {
                ServerEvent::Fetch { id, request } => {
                    if node.health == Health::Silent {
                        continue; // accepts, never answers
                    }
                    let block = request.path.index as u32;
                    if self.s.client.lookup_load_hints {
                        // The node counts every GET it receives, per block, for its
                        // lookup replies (as the modelled path does on arrival).
                        node.keys.bump(now, block);
                    }
                    let result = if self.content.holds(n, block) {
                        let mut body = http.bodies[block as usize].clone();
                        if node.corrupt {
                            let mut wrong = BytesMut::from(&body[..]);
                            wrong[0] ^= 0xff;
                            body = wrong.freeze();
                        }
                        side.nominal = self.s.block_bytes(block);
                        SourceResult::Found(body)
                    } else {
                        SourceResult::Miss
                    };
                    let _ = side
                        .conn
                        .handle_source(now, node.admission.core_mut(), id, result);
                }
                ServerEvent::Relay { id, .. } => {
                    let _ = side.conn.handle_source(
                        now,
                        node.admission.core_mut(),
                        id,
                        SourceResult::Miss,
                    );
                }
                // Peer errors and source timeouts: nothing to answer.
                ServerEvent::Roster { .. }
                | ServerEvent::Rejected { .. }
                | ServerEvent::SourceTimedOut { .. } => {}
            }
        }
        let ow = self.latency.one_way(r, n);
        let reachable = node.reachable();
        let get = side.get;
        let mut uplink_changed = false;
        while let Some(tx) = side.conn.poll_transmit(now) {
            if let Some(reason) = tx.refusal {
                #[cfg(test)]
                {
                    http.last_refusal = Some(tx.head.clone());
                }
                // A refusal at accept was counted when the connection was accepted.
                if side.conn.refused().is_none() {
                    let limit = Limit::from_reason(reason);
                    self.metrics.limit_hit(limit);
                    trace!(
                        self.trace,
                        now,
                        "turned-away",
                        "n={n} r={r} limit={}",
                        limit.as_str()
                    );
                }
            }
            let ends = tx.close.ends_connection();
            if reachable {
                self.queue.push(
                    now + ow,
                    boxed(HttpEv::ToClient {
                        get,
                        reader: r,
                        node: n,
                        conn,
                        connected: false,
                        bytes: tx.head.clone(),
                        eof: false,
                    }),
                );
            }
            if tx.status == Some(200) && !tx.body.is_empty() {
                let nominal = side.nominal;
                let t = http.next_transfer;
                http.next_transfer += 1;
                http.transfers.insert(
                    t,
                    Transfer {
                        node: n,
                        conn,
                        reader: r,
                        get,
                        body: tx.body,
                        close: ends,
                        nominal,
                    },
                );
                side.transfer = Some(t);
                node.uplink.start(now, t, nominal);
                uplink_changed = true;
                // The body leaves with the upload model; one response at a time.
                break;
            }
            if reachable {
                self.queue.push(
                    now + ow,
                    boxed(HttpEv::ToClient {
                        get,
                        reader: r,
                        node: n,
                        conn,
                        connected: false,
                        bytes: tx.body,
                        eof: ends,
                    }),
                );
            }
            // After an error or refusal the node half-closes and lingers: it keeps
            // reading (the machine discards) until the reader closes or the linger ends.
            side.half_closed |= ends;
            side.conn.handle_transmitted(now, node.admission.core_mut());
        }
        let finished = side.conn.is_finished();
        let next = side.conn.poll_timeout().map(|d| d.at);
        let epoch = side.epoch;
        if !finished {
            if let Some(at) = next {
                if side.armed.is_none_or(|armed| at < armed) {
                    side.armed = Some(at);
                    self.queue.push(
                        at.max(now),
                        boxed(HttpEv::ServerTimer {
                            node: n,
                            conn,
                            epoch,
                        }),
                    );
                }
            }
        }
        let idle_close = finished && side.transfer.is_none();
        if idle_close {
            // Closed by the server (idle timeout, `Connection: close` written, lingering
            // over): the close reaches the reader one latency later, unless the node
            // already half-closed.
            let mut side = http.conns.remove(&(n, conn)).expect("present");
            side.conn.close(now, node.admission.core_mut());
            if reachable && !side.half_closed {
                self.queue.push(
                    now + ow,
                    boxed(HttpEv::ToClient {
                        get,
                        reader: r,
                        node: n,
                        conn,
                        connected: false,
                        bytes: Bytes::new(),
                        eof: true,
                    }),
                );
            }
        }
        if uplink_changed {
            self.reschedule_uplink(n);
        }
    }

    /// The upload link finished transfer `t`: the body goes out, the server machine hears
    /// the response was written.
    pub(super) fn http_transfer_done(&mut self, t: u64) {
        let now = self.now;
        let Some(http) = self.http.as_mut() else {
            return;
        };
        let Some(tr) = http.transfers.remove(&t) else {
            return;
        };
        let n = tr.node;
        let node = &mut self.nodes[n as usize];
        node.bytes_served += tr.nominal;
        if let Some(side) = http.conns.get_mut(&(n, tr.conn)) {
            side.transfer = None;
            side.half_closed |= tr.close;
            side.conn.handle_transmitted(now, node.admission.core_mut());
        }
        if node.reachable() {
            let ow = self.latency.one_way(tr.reader, n);
            self.queue.push(
                now + ow,
                boxed(HttpEv::ToClient {
                    get: tr.get,
                    reader: tr.reader,
                    node: n,
                    conn: tr.conn,
                    connected: false,
                    bytes: tr.body,
                    eof: tr.close,
                }),
            );
        }
        // Unreachable now (partitioned): the body is lost, the client's deadlines decide.
        self.http_pump_server(n, tr.conn);
    }

    #[allow(clippy::too_many_arguments)]
    fn http_to_client(
        &mut self,
        g: Option<Handle>,
        reader: u32,
        node: u32,
        conn: ConnId,
        connected: bool,
        bytes: Bytes,
        eof: bool,
    ) {
        let now = self.now;
        let target = g.filter(|&g| {
            self.gets
                .get(g)
                .and_then(|get| get.http.as_ref())
                .is_some_and(|h| h.conn == Some(conn))
        });
        let Some(g) = target else {
            // Nobody is reading this connection: a pooled connection the server closed
            // leaves the pool.
            if eof {
                if let Some(list) = self.http().pool.get_mut(&(reader, node)) {
                    list.retain(|(id, _)| *id != conn);
                }
            }
            return;
        };
        if !bytes.is_empty() {
            // The response's first bytes reach the client: progress for the read's hedge.
            self.get_progress(g);
        }
        let h = self
            .gets
            .get_mut(g)
            .and_then(|get| get.http.as_mut())
            .expect("target");
        if connected {
            h.exchange.handle_connected(now);
            // The request goes out right behind the handshake.
            if let Some(req) = h.exchange.poll_transmit(now) {
                self.http_send(g, req.head);
            }
        }
        let h = self
            .gets
            .get_mut(g)
            .and_then(|get| get.http.as_mut())
            .expect("target");
        let mut off = 0;
        while off < bytes.len() {
            let taken = h.exchange.handle_input(now, &bytes[off..]);
            if taken == 0 {
                break;
            }
            off += taken;
        }
        if eof {
            h.exchange.handle_eof(now);
        }
        self.http_pump_client(g);
    }

    /// Writes the request of GET `g` onto its connection: the simulated socket takes
    /// every byte at once, so the exchange hears at once that it was written (its
    /// response-header deadline starts now).
    fn http_send(&mut self, g: Handle, request: Bytes) {
        let now = self.now;
        let Some(get) = self.gets.get_mut(g) else {
            return;
        };
        let (r, n) = (get.reader, get.node);
        let Some(h) = get.http.as_mut() else {
            return;
        };
        h.exchange.handle_transmitted(now);
        let Some(conn) = h.conn else {
            return;
        };
        let ow = self.latency.one_way(r, n);
        self.queue.push(
            self.now + ow,
            boxed(HttpEv::ToServer {
                get: Some(g),
                node: n,
                conn,
                bytes: request,
                eof: false,
            }),
        );
    }

    /// Drains the exchange of GET `g`: the request to send, the validator's question, the
    /// outcome; re-arms its deadline.
    fn http_pump_client(&mut self, g: Handle) {
        let now = self.now;
        loop {
            let Some(get) = self.gets.get_mut(g) else {
                return;
            };
            let block = get.block;
            let Some(h) = get.http.as_mut() else {
                return;
            };
            let Some(http) = self.http.as_ref() else {
                return;
            };
            if let Some(req) = h.exchange.poll_transmit(now) {
                self.http_send(g, req.head);
                continue;
            }
            match h.exchange.poll_event() {
                // The response head arrived: the GET is making progress. (The replay's
                // read machines hear only complete outcomes; a progress input for the
                // read is wired where the read machine takes one.)
                Some(ClientEvent::Head { .. }) => {}
                Some(ClientEvent::Validate { body }) => {
                    // The driver's validator: the body must be this block's.
                    let valid = body.starts_with(&http.tokens[block as usize]);
                    h.exchange.handle_validated(now, valid);
                }
                Some(ClientEvent::Done(outcome)) => {
                    self.http_done(g, outcome);
                    return;
                }
                None => break,
            }
        }
        let Some(h) = self.gets.get_mut(g).and_then(|get| get.http.as_mut()) else {
            return;
        };
        if let Some(at) = h.exchange.poll_timeout().map(|d| d.at) {
            if h.armed.is_none_or(|armed| at < armed) {
                h.armed = Some(at);
                self.queue
                    .push(at.max(now), boxed(HttpEv::ClientTimer { get: g }));
            }
        }
    }

    fn http_done(&mut self, g: Handle, mut outcome: ExchangeOutcome) {
        let now = self.now;
        let Some(get) = self.gets.get_mut(g) else {
            return;
        };
        let (r, n, block) = (get.reader, get.node, get.block);
        let Some(mut h) = get.http.take() else {
            return;
        };
        let conn = h.conn.take();
        match (outcome.connection, conn) {
            (ConnectionFate::Reuse, Some(id)) => {
                if let Some(c) = h.exchange.take_connection() {
                    self.http().pool.entry((r, n)).or_default().push((id, c));
                }
            }
            (_, Some(id)) => self.http_client_close(r, n, id),
            _ => {}
        }
        if outcome.retry_fresh && h.pooled && !h.retried {
            // The node retired the pooled connection as we reused it: retry once, fresh.
            trace!(self.trace, now, "retry-fresh", "r={r} n={n}");
            self.http_start(g, false);
            if let Some(h) = self.gets.get_mut(g).and_then(|get| get.http.as_mut()) {
                h.retried = true;
            }
            return;
        }
        let result = result_of(&outcome.ending);
        if let Ending::Block(body) = &mut outcome.ending {
            let token_len = self.http().tokens[block as usize].len();
            *body = body.slice(..token_len.min(body.len()));
        }
        // The reader's `Peers` records the advertised load, the cooldown entry and the
        // breaker outcome, and gives the read machine its outcome.
        self.end_get_outcome(g, result, outcome);
    }

    /// The reader closes its end of connection `conn` to node `n`.
    fn http_client_close(&mut self, r: u32, n: u32, conn: ConnId) {
        let ow = self.latency.one_way(r, n);
        self.queue.push(
            self.now + ow,
            boxed(HttpEv::ToServer {
                get: None,
                node: n,
                conn,
                bytes: Bytes::new(),
                eof: true,
            }),
        );
    }

    /// A GET on the HTTP path is being cancelled (a hedging loser): its exchange `h` is
    /// cancelled and its connection to node `n` closed. Nothing is recorded; the caller releases the permit.
    pub(super) fn http_cancel(&mut self, h: &mut HttpGet, r: u32, n: u32) {
        h.exchange.cancel(self.now);
        let _ = h.exchange.poll_event();
        if let Some(id) = h.conn.take() {
            self.http_client_close(r, n, id);
        }
    }

    /// A fresh-page reader went away: its pooled connections close.
    pub(super) fn http_page_closed(&mut self, reader: u32) {
        let Some(http) = self.http.as_mut() else {
            return;
        };
        let keys: Vec<(u32, u32)> = http
            .pool
            .range((reader, 0)..=(reader, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            let list = self.http().pool.remove(&k).unwrap_or_default();
            for (id, _) in list {
                self.http_client_close(k.0, k.1, id);
            }
        }
    }

    /// Node `n` crashed: its connections and transfers are gone (its admission was reset
    /// with it, so nothing is released).
    pub(super) fn http_crash(&mut self, n: u32) {
        let Some(http) = self.http.as_mut() else {
            return;
        };
        let dead: Vec<(u32, ConnId)> = http
            .conns
            .range((n, 0)..=(n, ConnId::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in dead {
            http.conns.remove(&k);
        }
        http.transfers.retain(|_, t| t.node != n);
    }
}

impl std::fmt::Debug for ServerSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSide")
            .field("conn", &self.conn)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use crate::trace::Trace;

    const BASE: &str = r#"
[cluster]
nodes = 1
close_group = 1
upload_mbps = 1.0
[network]
latency = { dist = "constant", ms = 10.0 }
transport = "http1"
[listener]
max_sessions = 1
max_sessions_per_source = 1
max_requests = 4
max_requests_per_session = 1
when_full = "refuse"
retry_after_secs = 15
[file]
size_mib = 1
block_kib = 1024
[readers]
start_spread_secs = 0.0
rounds = 1
parallel_blocks = 1
[client]
lookup_rtts = 1
response_timeout_ms = 2000
request_timeout_ms = 30000
"#;

    fn scenario(extra: &str, readers: u32) -> Scenario {
        let text = BASE.replace("[readers]\n", &format!("[readers]\ncount = {readers}\n"));
        let text = format!("{text}{extra}");
        Scenario::parse(&text, "http.toml", "http").expect("valid test scenario")
    }

    /// Processes one event; `false` once nothing is left.
    fn step(w: &mut World<'_>) -> bool {
        let Some((at, ev)) = w.queue.pop() else {
            return false;
        };
        w.now = at;
        w.dispatch(ev);
        true
    }

    #[test]
    fn a_node_at_its_session_limit_answers_with_the_real_refusal_bytes() {
        // Rule: admission at connect refuses a full node with the complete 503, refusal
        // header and Retry-After, and the reader's cooldown table suppresses the node for
        // exactly the advertised Retry-After (the client machine's classification).
        let s = scenario("", 2);
        let mut w = World::new(&s, 1, Trace::new(None), &[]);
        while w.metrics.refusals == 0 {
            assert!(step(&mut w), "nobody was refused");
        }
        let bytes = w.http.as_ref().unwrap().last_refusal.clone().unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{text}"
        );
        assert!(text.contains("X-Peerblock-Refused: sessions\r\n"), "{text}");
        assert!(text.contains("Retry-After: 15\r\n"), "{text}");
        assert!(text.contains("Connection: close\r\n"), "{text}");
        let peer = w.content.ids[0];
        let refused: Vec<_> = w
            .readers
            .iter()
            .filter_map(|r| r.peers.cooldowns().refused_for(w.now, &peer))
            .collect();
        assert_eq!(refused, vec![Duration::from_secs(15)]);
        assert_eq!(w.metrics.get_count(GetResult::Refused), 1);
    }

    #[test]
    fn a_silent_node_trips_the_exchanges_response_header_deadline_exactly() {
        // Rule: the response-header deadline runs from the moment the request is handed
        // to the connection (after the 2 × 10 ms handshake) and fires at exactly its
        // configured 2 s; it is a timeout, not a connection failure.
        let s = scenario(
            "[[faults]]\nat_secs = 0.0\nkind = \"silent\"\nnode = 0\n",
            1,
        );
        let mut w = World::new(&s, 1, Trace::new(None), &[]);
        let mut started = None;
        while w.metrics.get_count(GetResult::TimedOut) == 0 {
            assert!(step(&mut w), "the GET never timed out");
            if started.is_none() && !w.gets.is_empty() {
                started = Some(w.now);
            }
        }
        let sent = started.unwrap() + Duration::from_millis(20);
        assert_eq!(w.now, sent + Duration::from_millis(2000));
        // The silent node accepted the connection: the server machine held a session.
        assert_eq!(w.metrics.get_count(GetResult::DialFailed), 0);
    }
}
