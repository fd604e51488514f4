//! peerblock's HTTP/1.1 path (`network.transport = "http1"`), the simulator as a driver:
//! every GET runs through the real core machines, exchanging real encoded bytes over the
//! simulated network ([`super::stream`]), driven exactly as docs/architecture.md's driving
//! contract says, through the generic pumps of [`peerblock_testkit::pump`]; what a node
//! answers is the node application's ([`super::node_app`]).
//!
//! - The reader side of each GET is a [`peerblock_core::client::Exchange`]: it encodes the
//!   request, runs the dial, response-header and request deadlines, applies the length
//!   rules, sequences validation and classifies the ending. Its response head
//!   (`ClientEvent::Head`) is the read machine's progress input for the GET
//!   (`Read::handle_get_progress`), as it would be for a real driver. Its
//!   [`ExchangeOutcome`] goes to the reader's `client::Peers` (`Peers::finish` with the
//!   GET's ticket), which records it in the breaker, the cooldown table and the load table
//!   and gives the read its outcome. The request is acknowledged as written as soon as it
//!   is sent (the simulated socket takes every byte at once).
//! - Each simulated TCP connection at a node is a [`ServerConnection`], accepted through
//!   the node's real `server::Admission` (a full node's connection answers the reader's
//!   request with the real 503 refusal bytes, then half-closes), which decodes the request,
//!   validates and routes it, takes the request slot, reserves the response bytes and
//!   frames the response; the status and refusal reason come from its `Transmit`.
//! - A response head leaves when the server emits it; a `200`'s body leaves on the node's
//!   upload link (a `stream::Transfer`), and only when the link has carried it is the
//!   transmit acknowledged to the server machine ([`Written::Pending`], then
//!   `handle_transmitted`).
//! - Connections are reused the way the machines allow: an exchange that ends with
//!   `ConnectionFate::Reuse` hands its connection to the reader's pool
//!   (`take_connection`); a reused connection the server had already retired fails with
//!   `retry_fresh` and the GET is retried once on a fresh dial. A server's idle timeout
//!   closes the connection and the close reaches the reader one latency later.
//! - Timers: one pending queue event per machine ([`Armed`]); a machine's earlier deadline
//!   schedules a new one, a later one waits for the pending event to fire.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use peerblock_core::client::Exchange;
use peerblock_core::client::{
    BlockRequest, ClientConfig, Connection, ConnectionFate, Deadlines, Ending, ExchangeOutcome,
    ExchangeRequest, Link, RequestTimeout,
};
use peerblock_core::server::{
    RelayConfig, RequestId, ServerConfig, ServerConnection, SourceResult,
};
use peerblock_core::time::Duration;
use peerblock_core::wire::{BlockPath, ChunkKey, Hop};
use peerblock_testkit::pump::{self, Armed, ClientStep, Written};

use super::node_app::{self, Blocks, NodeApp};
use super::stream::{ConnId, Net, Segment, Transfer};
use super::{relay, Ev, GetPath, World};
use crate::listener::Limit;
use crate::model::content::Content;
use crate::model::node::Health;
use crate::scenario::{Placement, Scenario, WhenFull};
use crate::slab::Handle;
use crate::trace;

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
    /// The exchange's pending `ClientTimer` event.
    armed: Armed,
    /// A fresh retry after a retired pooled connection was already spent.
    retried: bool,
}

impl HttpGet {
    /// Whether the exchange runs on a connection taken from the reader's pool.
    pub(super) fn reuses_connection(&self) -> bool {
        self.pooled
    }
}

/// Events of the HTTP path.
#[derive(Debug)]
pub(super) enum HttpEv {
    /// Something arrives over the simulated network.
    Net(Segment),
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
    /// The upload transfer carrying its `200` body (the transmit being written).
    transfer: Option<u64>,
    /// The nominal size of the block last answered `Found` (its `200` is next out).
    nominal: u64,
    armed: Armed,
    /// The node has closed its sending side (the reader has been sent the end of stream).
    half_closed: bool,
}

/// The HTTP path's state: the network, the node application's bodies, server connections
/// per node and the readers' idle pools.
pub(super) struct Http {
    client: ClientConfig,
    servers: Vec<Arc<ServerConfig>>,
    hosts: Vec<String>,
    net: Net,
    blocks: Blocks,
    conns: BTreeMap<(u32, ConnId), ServerSide>,
    pool: BTreeMap<(u32, u32), Vec<(ConnId, Connection)>>,
    /// The most recent refusal bytes a node wrote (for tests).
    #[cfg(test)]
    last_refusal: Option<Bytes>,
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
                if s.file.placement == Placement::Origin {
                    // Relay-capable nodes: core decides when a miss naming the origin
                    // is relayed, and declines at the hop bound.
                    cfg.relay = Some(RelayConfig {
                        max_hop: s.relay.max_hop,
                        ..RelayConfig::default()
                    });
                }
                Arc::new(cfg)
            })
            .collect();
        Http {
            blocks: Blocks::new(s, content),
            client,
            servers,
            hosts,
            net: Net::new(),
            conns: BTreeMap::new(),
            pool: BTreeMap::new(),
            #[cfg(test)]
            last_refusal: None,
        }
    }
}

/// An HTTP-path network segment for the queue.
fn wire(seg: Segment) -> Ev {
    Ev::Http(Box::new(HttpEv::Net(seg)))
}

/// An HTTP-path timer for the queue.
fn timer(ev: HttpEv) -> Ev {
    Ev::Http(Box::new(ev))
}

impl World<'_> {
    fn http(&mut self) -> &mut Http {
        self.http.as_mut().expect("http1 transport")
    }

    /// The HTTP path's state of GET `g`, if it is an HTTP GET still in `self.gets`.
    fn http_get(&mut self, g: Handle) -> Option<&mut HttpGet> {
        match &mut self.gets.get_mut(g)?.path {
            GetPath::Http1(h) => Some(h),
            GetPath::Modelled(_) => None,
        }
    }

    /// Opens the exchange of a GET of block `block` by reader `r` at node `n`: on a pooled
    /// connection of the reader to the node if `allow_pool` and there is one, else on a
    /// fresh dial. Nothing is sent yet ([`Self::http_launch`]).
    pub(super) fn http_open(
        &mut self,
        r: u32,
        n: u32,
        block: u32,
        allow_pool: bool,
    ) -> Box<HttpGet> {
        let now = self.now;
        let key = ChunkKey::from_array(self.content.keys[block as usize].0);
        let path = BlockPath {
            key,
            index: u64::from(block),
        };
        let http = self.http.as_mut().expect("http1 transport");
        let expected = http.blocks.body(block).len() as u64;
        let pooled = if allow_pool {
            http.pool.get_mut(&(r, n)).and_then(Vec::pop)
        } else {
            None
        };
        let reused = pooled.is_some();
        let (link, conn) = match pooled {
            Some((id, c)) => (Link::Pooled(c), id),
            None => (Link::Dial, http.net.new_conn()),
        };
        // With content at the origin every GET names it (hop 0), so holders relay.
        let block_request = BlockRequest {
            path,
            origin: (self.s.file.placement == Placement::Origin).then_some(relay::ORIGIN_URL),
            hop: Hop(0),
        };
        let request =
            ExchangeRequest::get_validated(&http.hosts[n as usize], block_request, expected, true);
        let exchange = Exchange::new(now, &http.client, request, link)
            .expect("a valid client config (the scenario's) and an encodable request");
        Box::new(HttpGet {
            exchange,
            conn: Some(conn),
            pooled: reused,
            armed: Armed::default(),
            retried: false,
        })
    }

    /// Launches the exchange of GET `g` (opened by [`Self::http_open`], filed in
    /// `self.gets`): dials unless it reuses a pooled connection, and pumps it (a pooled
    /// connection's request goes out now).
    pub(super) fn http_launch(&mut self, g: Handle) {
        let now = self.now;
        let Some(get) = self.gets.get(g) else {
            return;
        };
        let (r, n) = (get.reader, get.node);
        let GetPath::Http1(h) = &get.path else {
            return;
        };
        if let (false, Some(conn)) = (h.pooled, h.conn) {
            let ow = self.latency.one_way(r, n);
            self.queue
                .push(now + ow, wire(Segment::Syn { get: g, conn }));
        }
        self.http_pump_client(g);
    }

    pub(super) fn http_event(&mut self, ev: HttpEv) {
        match ev {
            HttpEv::Net(Segment::Syn { get, conn }) => self.http_syn(get, conn),
            HttpEv::Net(Segment::ToServer {
                get,
                node,
                conn,
                bytes,
                eof,
            }) => self.http_to_server(get, node, conn, bytes, eof),
            HttpEv::Net(Segment::ToClient {
                get,
                reader,
                node,
                conn,
                connected,
                bytes,
                eof,
            }) => self.http_to_client(get, reader, node, conn, connected, bytes, eof),
            HttpEv::ClientTimer { get } => {
                let now = self.now;
                if let Some(h) = self.http_get(get) {
                    h.armed.fired(now);
                    h.exchange.handle_timeout(now);
                }
                self.http_pump_client(get);
            }
            HttpEv::ServerTimer { node, conn, epoch } => {
                let now = self.now;
                let http = self.http.as_mut().expect("http1 transport");
                if let Some(side) = http.conns.get_mut(&(node, conn)) {
                    if side.epoch == epoch {
                        side.armed.fired(now);
                        side.conn.handle_timeout(now);
                    }
                }
                self.http_pump_server(node, conn);
            }
        }
    }

    /// A dial reaches node `n`: blackholed if the node is unreachable, dropped by a full
    /// silent node, else accepted by a new server machine (which may refuse).
    fn http_syn(&mut self, g: Handle, conn: ConnId) {
        let now = self.now;
        let Some(get) = self.gets.get(g) else {
            return; // the GET ended meanwhile: nobody is dialing any more
        };
        let current = match &get.path {
            GetPath::Http1(h) => h.conn,
            GetPath::Modelled(_) => None,
        };
        if current != Some(conn) {
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
                self.queue.push(at, wire(Segment::Syn { get: g, conn }));
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
            node_app::count_refusal(
                &mut self.metrics,
                &mut self.trace,
                now,
                (n, r),
                refusal.reason,
                true,
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
                armed: Armed::default(),
                half_closed: false,
            },
        );
        self.queue.push(
            now + ow,
            wire(Segment::ToClient {
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

    /// Bytes or a half-close from a reader reach node `n`'s connection `conn`.
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
                self.queue
                    .push(now + ow, wire(Segment::fin_to_client(Some(g), r, n, conn)));
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
        pump::feed_server(now, &mut side.conn, node.admission.core_mut(), &bytes);
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
            http.net.take_transfer(t);
            node.uplink.cancel(now, t);
        }
        side.conn.close(now, node.admission.core_mut());
        self.reschedule_uplink(n);
        self.relay_conn_closed(n, conn);
    }

    /// Pumps node `n`'s connection `conn`: the node application answers the machine's
    /// events, its transmits go on the wire (a `200`'s body on the upload link), its
    /// deadline is armed, and a finished connection is closed.
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
        let ow = self.latency.one_way(r, n);
        let reachable = node.reachable();
        let get = side.get;
        let nominal = Cell::new(side.nominal);
        let mut app = NodeApp {
            s: self.s,
            content: &self.content,
            blocks: &http.blocks,
            n,
            silent: node.health == Health::Silent,
            corrupt: node.corrupt,
            keys: &mut node.keys,
            nominal: &nominal,
            relays: self.relay.as_mut(),
            relayed: Vec::new(),
            timed_out: Vec::new(),
        };
        let mut uplink_changed = false;
        let (queue, metrics, trace) = (&mut self.queue, &mut self.metrics, &mut self.trace);
        let uplink = &mut node.uplink;
        let net = &mut http.net;
        #[cfg(test)]
        let last_refusal = &mut http.last_refusal;
        let (transfer, half_closed) = (&mut side.transfer, &mut side.half_closed);
        pump::poll_server(
            now,
            &mut side.conn,
            node.admission.core_mut(),
            &mut app,
            |server, tx| {
                if let Some(reason) = tx.refusal {
                    #[cfg(test)]
                    {
                        *last_refusal = Some(tx.head.clone());
                    }
                    // A refusal at accept was counted when the connection was accepted.
                    if server.refused().is_none() {
                        node_app::count_refusal(metrics, trace, now, (n, r), reason, false);
                    }
                }
                let ends = tx.close.ends_connection();
                if reachable {
                    queue.push(
                        now + ow,
                        wire(Segment::data_to_client(
                            get,
                            r,
                            n,
                            conn,
                            tx.head.clone(),
                            false,
                        )),
                    );
                }
                if tx.status == Some(200) && !tx.body.is_empty() {
                    // The body leaves with the upload model; one response at a time.
                    let t = net.start_transfer(Transfer {
                        node: n,
                        conn,
                        reader: r,
                        get,
                        body: tx.body,
                        close: ends,
                        nominal: nominal.get(),
                    });
                    *transfer = Some(t);
                    uplink.start(now, t, nominal.get());
                    uplink_changed = true;
                    return Written::Pending;
                }
                if reachable {
                    queue.push(
                        now + ow,
                        wire(Segment::data_to_client(get, r, n, conn, tx.body, ends)),
                    );
                }
                // After an error or refusal the node half-closes and lingers: it keeps
                // reading (the machine discards) until the reader closes or the linger
                // ends.
                *half_closed |= ends;
                Written::All
            },
        );
        side.nominal = nominal.get();
        let (relayed, timed_out) = (
            std::mem::take(&mut app.relayed),
            std::mem::take(&mut app.timed_out),
        );
        let finished = side.conn.is_finished();
        let epoch = side.epoch;
        if !finished {
            let deadline = side.conn.poll_timeout().map(|d| d.at);
            if let Some(at) = side.armed.arm(now, deadline) {
                self.queue.push(
                    at,
                    timer(HttpEv::ServerTimer {
                        node: n,
                        conn,
                        epoch,
                    }),
                );
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
                self.queue
                    .push(now + ow, wire(Segment::fin_to_client(get, r, n, conn)));
            }
        }
        if uplink_changed {
            self.reschedule_uplink(n);
        }
        for req in timed_out {
            self.relay_timed_out(n, conn, req);
        }
        for (req, request) in relayed {
            self.relay_from_conn(n, conn, req, request);
        }
    }

    /// The scaled body of `block` (what a `200` carries on the HTTP path).
    pub(super) fn http_body(&self, block: u32) -> Bytes {
        self.http
            .as_ref()
            .expect("http1 transport")
            .blocks
            .body(block)
            .clone()
    }

    /// Node `n`'s flight answered request `req` on connection `conn` (for `block`): the
    /// server machine gets the answer, and the connection is pumped.
    pub(super) fn http_relay_answer(
        &mut self,
        n: u32,
        conn: ConnId,
        req: RequestId,
        block: u32,
        result: SourceResult,
    ) {
        let now = self.now;
        let nominal = self.s.block_bytes(block);
        let node = &mut self.nodes[n as usize];
        let (epoch, corrupt) = (node.epoch, node.corrupt);
        let http = self.http.as_mut().expect("http1 transport");
        let result = match result {
            SourceResult::Found(_) => {
                let mut body = http.blocks.body(block).clone();
                if corrupt {
                    let mut wrong = bytes::BytesMut::from(&body[..]);
                    wrong[0] ^= 0xff;
                    body = wrong.freeze();
                }
                SourceResult::Found(body)
            }
            other => other,
        };
        let Some(side) = http.conns.get_mut(&(n, conn)) else {
            return; // the connection went away meanwhile
        };
        if side.epoch != epoch {
            return;
        }
        if matches!(result, SourceResult::Found(_)) {
            side.nominal = nominal;
        }
        if side
            .conn
            .handle_source(now, node.admission.core_mut(), req, result)
            .is_err()
        {
            return; // answered already (its source timeout)
        }
        self.http_pump_server(n, conn);
    }

    /// The upload link finished transfer `t`: the body goes out, the server machine hears
    /// the response was written.
    pub(super) fn http_transfer_done(&mut self, t: u64) {
        let now = self.now;
        let Some(http) = self.http.as_mut() else {
            return;
        };
        let Some(tr) = http.net.take_transfer(t) else {
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
                wire(Segment::data_to_client(
                    tr.get, tr.reader, n, tr.conn, tr.body, tr.close,
                )),
            );
        }
        // Unreachable now (partitioned): the body is lost, the client's deadlines decide.
        self.http_pump_server(n, tr.conn);
    }

    /// The handshake, bytes or the end of stream reach reader `reader`'s end of `conn`.
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
            self.gets.get(g).is_some_and(|get| match &get.path {
                GetPath::Http1(h) => h.conn == Some(conn),
                GetPath::Modelled(_) => false,
            })
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
        let h = self.http_get(g).expect("target");
        if connected {
            // The request goes out right behind the handshake (the pump writes it).
            h.exchange.handle_connected(now);
        }
        pump::feed_exchange(now, &mut h.exchange, &bytes);
        if eof {
            h.exchange.handle_eof(now);
        }
        self.http_pump_client(g);
    }

    /// Pumps the exchange of GET `g`: writes its request onto the connection (the
    /// simulated socket takes every byte at once, so it is acknowledged at once and the
    /// response-header deadline starts), runs the validator, hears the response head
    /// (the read's progress input) and the outcome; re-arms its deadline.
    fn http_pump_client(&mut self, g: Handle) {
        let now = self.now;
        loop {
            let Some(get) = self.gets.get_mut(g) else {
                return;
            };
            let (r, n, block) = (get.reader, get.node, get.block);
            let GetPath::Http1(h) = &mut get.path else {
                return;
            };
            let Some(http) = self.http.as_ref() else {
                return;
            };
            let (queue, latency, conn) = (&mut self.queue, &self.latency, h.conn);
            let step = pump::poll_exchange(
                now,
                &mut h.exchange,
                |body| http.blocks.validates(block, body),
                |tx| {
                    if let Some(conn) = conn {
                        let ow = latency.one_way(r, n);
                        queue.push(
                            now + ow,
                            wire(Segment::ToServer {
                                get: Some(g),
                                node: n,
                                conn,
                                bytes: tx.head,
                                eof: false,
                            }),
                        );
                    }
                    Written::All
                },
            );
            match step {
                // The response head arrived: the GET is making progress (the read's
                // hedge-on-silence input).
                Some(ClientStep::Head { .. }) => self.get_progress(g),
                Some(ClientStep::Done(outcome)) => {
                    self.http_done(g, outcome);
                    return;
                }
                None => break,
            }
        }
        let Some(h) = self.http_get(g) else {
            return;
        };
        let deadline = h.exchange.poll_timeout().map(|d| d.at);
        if let Some(at) = h.armed.arm(now, deadline) {
            self.queue.push(at, timer(HttpEv::ClientTimer { get: g }));
        }
    }

    /// The exchange of GET `g` ended with `outcome`: its connection goes to the pool or
    /// is closed, a retired pooled connection is retried once fresh, else the GET ends.
    fn http_done(&mut self, g: Handle, mut outcome: ExchangeOutcome) {
        let now = self.now;
        let Some(get) = self.gets.get_mut(g) else {
            return;
        };
        let (r, n, block) = (get.reader, get.node, get.block);
        let GetPath::Http1(h) = &mut get.path else {
            return;
        };
        let conn = h.conn.take();
        let (pooled, retried) = (h.pooled, h.retried);
        let reusable = match (outcome.connection, conn) {
            (ConnectionFate::Reuse, Some(_)) => h.exchange.take_connection(),
            _ => None,
        };
        match (outcome.connection, conn) {
            (ConnectionFate::Reuse, Some(id)) => {
                if let Some(c) = reusable {
                    self.http().pool.entry((r, n)).or_default().push((id, c));
                }
            }
            (_, Some(id)) => self.http_client_close(r, n, id),
            _ => {}
        }
        if outcome.retry_fresh && pooled && !retried {
            // The node retired the pooled connection as we reused it: retry once, fresh.
            trace!(self.trace, now, "retry-fresh", "r={r} n={n}");
            let mut fresh = self.http_open(r, n, block, false);
            fresh.retried = true;
            if let Some(get) = self.gets.get_mut(g) {
                get.path = GetPath::Http1(fresh);
            }
            self.http_launch(g);
            return;
        }
        let result = node_app::result_of(&outcome.ending);
        if let Ending::Block(body) = &mut outcome.ending {
            *body = self.http().blocks.token_of(block, body);
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
            wire(Segment::ToServer {
                get: None,
                node: n,
                conn,
                bytes: Bytes::new(),
                eof: true,
            }),
        );
    }

    /// A GET on the HTTP path is being cancelled (a hedging loser): its exchange `h` is
    /// cancelled and its connection to node `n` closed. Nothing is recorded; the caller
    /// releases the permit.
    pub(super) fn http_cancel(&mut self, h: &mut HttpGet, r: u32, n: u32) {
        h.exchange.cancel(self.now);
        // Its `Done(Cancelled)` is nobody's business: the read asked for the cancel.
        while h.exchange.poll_event().is_some() {}
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
        http.net.crash(n);
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
    use crate::metrics::GetResult;
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
