//! Content that starts at the origin only (`file.placement = "origin"`): the simulated
//! origin, and the nodes' relays (fetch-on-behalf through the block's parent, single-flight,
//! a bounded cache).
//!
//! What is real and what is modelled:
//!
//! - **Real core.** Readers' GETs carry `X-DART-Origin` (hop 0) through their real client
//!   `Exchange`; every node's `ServerConnection` runs with a `RelayConfig`, so core decides
//!   when a miss is relayed and with which hop (`ServerEvent::Relay`, declined at the hop
//!   bound). Each node's relayed misses go through core's [`RelayFlights`] (one upstream
//!   fetch per flight key, waiters bounded, each waiting at most the server's source
//!   timeout, the one result fanned out to every waiter), and the relay's client's view of
//!   which peers are alive is core's [`CooldownTable`] (the real relay client has no
//!   breaker: a failed dial suppresses the peer for the failed cooldown). Whether a
//!   parent's answer is final is `peerblock_common::relay::parent_answer_is_final`, the
//!   function both drivers use.
//! - **Modelled.** The node-to-node request of a relay and the origin's responses are not
//!   HTTP exchanges: a request reaches its target after a one-way latency
//!   (`relay.node_latency_ms`, `origin.latency_ms`), and a block comes back when the
//!   sender's upload link (the node's, shared with its readers' responses, or the
//!   origin's own, `origin.upload_mbps`) has carried its nominal size. Each relay request
//!   opens its own session at the parent (no pooled node-to-node connections).
//!
//! The flow of an upstream fetch at node `n` for a block (a [`FlightEvent::Fetch`]):
//!
//! 1. The parent is the first holder in the block's close group, nearest first, that the
//!    relay's cooldown table does not suppress; if `n` itself comes first, it has no parent
//!    (it is the nearest live holder) and asks the origin. A node outside the close group
//!    asks the nearest live holder.
//! 2. The parent, the request arriving, admits it (or refuses it: a full listener), then
//!    serves the block from its cache, or (missing it)
//!    makes the same decision as core's relay rule: at or past the hop bound it declines
//!    (a miss), else it relays with hop + 1 through its own flights. Its answer comes back
//!    one latency after its upload link carried the block (a miss: one latency after it).
//! 3. A final answer (the block) answers `n`'s flight; anything else — a miss, a dial
//!    timeout to a dead parent (which the cooldown table then suppresses), a silent
//!    parent's response-header timeout, the request deadline — sends the fetch to the
//!    origin.
//! 4. A block `n` fetched is cached (LRU, `relay.cache_mib`) before its flight's waiters
//!    are answered, and from then on `n` serves it as held.
//!
//! A flight whose waiters all left is abandoned and its fetch cancelled wherever it is (the
//! drivers abort it). A relay request takes a session and a request slot at its parent
//! through the parent's real admission; a full parent refuses, and the relaying node's
//! cooldown table skips it for the refusal's Retry-After. Two ablations
//! (`relay.through_parent = false`: every relaying node asks the origin;
//! `relay.single_flight = false`: every relayed miss fetches on its own) show what each
//! rule buys.

use std::collections::BTreeMap;

use bytes::Bytes;
use peerblock_common::relay::parent_answer_is_final;
use peerblock_core::cooldown::{CooldownConfig, CooldownTable, DialOutcome};
use peerblock_core::read::OriginOutcome;
use peerblock_core::server::{
    FlightConfig, FlightEvent, FlightId, RelayFlights, RequestId, RequestTicket, SessionTicket,
    SourceRequest, SourceResult, Want,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::wire::Hop;
use peerblock_testkit::pump::Armed;

use super::stream::ConnId;
use super::{Ev, World};
use crate::listener::Limit;
use crate::metrics::RelayMetrics;
use crate::model::cache::BlockCache;
use crate::model::node::Health;
use crate::net::Uplink;
use crate::scenario::Scenario;
use crate::slab::Handle;
use crate::trace;

/// The `X-DART-Origin` every reader names (never dialed: the origin is modelled).
pub(super) const ORIGIN_URL: &str = "http://origin.sim:80/hot-file";

/// Transfers of relayed blocks on a node's upload link carry this bit in their id (the
/// HTTP path's own transfer ids count up from 1 and never reach it).
pub(super) const RELAY_TRANSFER: u64 = 1 << 63;

/// Events of the relays and the origin.
#[derive(Debug)]
pub(super) enum RelayEv {
    /// Upstream fetch `up`'s request reaches its parent.
    AtParent { up: u64 },
    /// The parent's answer to `up` reaches the relaying node.
    ParentAnswer { up: u64, result: SourceResult },
    /// `up`'s deadline at the relaying node: `Dial` (the parent never answered the dial),
    /// `Header` (no response head), `Request` (the whole exchange).
    Deadline { up: u64, which: Deadline },
    /// The parent refused `up` (no free slot): its refusal reaches the relaying node.
    ParentRefused { up: u64, retry_after: Duration },
    /// `up`'s request reaches the origin.
    AtOrigin { up: u64 },
    /// The origin's upload link may have finished transfers.
    OriginUplink { gen: u64 },
    /// The origin's block for `up` reaches whoever asked.
    OriginAnswer { up: u64 },
    /// Node `node`'s flight table has a waiter deadline due.
    FlightTimer { node: u32 },
}

/// Which deadline of a relay's upstream request fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deadline {
    /// The dial to a dead parent.
    Dial,
    /// The response head.
    Header,
    /// The whole request.
    Request,
}

/// Who waits in a node's flight table.
#[derive(Debug, Clone, Copy)]
enum Waiter {
    /// A reader's request on the node's server connection `conn`.
    Conn {
        node: u32,
        conn: ConnId,
        req: RequestId,
        block: u32,
    },
    /// Another node's upstream request `up` (the node is its parent).
    Child { up: u64 },
}

/// Who an upstream fetch is for.
#[derive(Debug, Clone, Copy)]
enum For {
    /// Node `node`'s fetch for `via` (started in the node's epoch `epoch`).
    Node { node: u32, via: Via, epoch: u32 },
    /// A reader's own origin fallback for its read.
    Reader { read: Handle },
}

/// Whom a node's upstream fetch answers.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// Its flight in the node's single-flight table.
    Flight(FlightId),
    /// One waiter alone (`relay.single_flight = false`, the ablation).
    Alone(u64),
}

/// Where an upstream fetch is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Asked of parent `p`; `transferring` once the parent started sending the block.
    Parent { p: u32, transferring: bool },
    /// Asked of the origin.
    Origin,
}

#[derive(Debug)]
struct Upstream {
    who: For,
    block: u32,
    request: SourceRequest,
    at: At,
    /// The parent's admission of the request while it answers it.
    slot: Option<Slot>,
    /// A transfer of the block for it is on an upload link now (the origin's for
    /// `At::Origin`, the parent's for `At::Parent`), with the sender's epoch (a crash
    /// since then dropped it from the link; the origin's is always 0).
    sending: Option<u32>,
}

/// A relay request's session and request slot at its parent (core's `Admission`).
#[derive(Debug)]
struct Slot {
    session: SessionTicket<u32>,
    request: RequestTicket<u32>,
    /// The parent's epoch (a crash since then dropped the tickets with its books).
    epoch: u32,
}

/// The source address node `n` has at other nodes' listeners (readers' addresses count up
/// from 0).
fn node_source(n: u32) -> u32 {
    u32::MAX - n
}

/// One node's relay: its single-flight table, its cache and its relay client's cooldowns.
struct NodeRelay {
    flights: RelayFlights<u64>,
    cache: BlockCache,
    cooldown: CooldownTable<u32>,
    armed: Armed,
}

impl NodeRelay {
    /// With `through_parent` (parents by placement, which cannot loop) a node's wants for
    /// one block share a fetch whatever their hop, as the drivers' do.
    fn new(now: Instant, cache_bytes: u64, through_parent: bool) -> Self {
        let config = FlightConfig {
            share_across_hops: through_parent,
            ..FlightConfig::default()
        };
        NodeRelay {
            flights: RelayFlights::new(config, now)
                .expect("core's default flight bounds are valid"),
            cache: BlockCache::new(cache_bytes),
            cooldown: CooldownTable::new(CooldownConfig::default())
                .expect("core's default cooldowns are valid"),
            armed: Armed::default(),
        }
    }
}

/// The origin and every node's relay.
pub(super) struct Relays {
    nodes: Vec<NodeRelay>,
    cache_bytes: u64,
    /// `relay.through_parent`: parents by placement (flights shared across hops).
    through_parent: bool,
    origin: Uplink,
    node_latency: Duration,
    origin_latency: Duration,
    /// How long a waiter waits for its flight: the server's source timeout.
    wait: Duration,
    waiters: BTreeMap<u64, Waiter>,
    next_waiter: u64,
    ups: BTreeMap<u64, Upstream>,
    next_up: u64,
    pub(super) metrics: RelayMetrics,
}

impl std::fmt::Debug for Relays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relays")
            .field("waiters", &self.waiters.len())
            .field("upstream", &self.ups.len())
            .finish_non_exhaustive()
    }
}

/// The hop an upstream request carries.
fn u_hop(u: &Upstream) -> u32 {
    u.request.hop.0
}

fn ms_duration(ms: f64) -> Duration {
    Duration::from_nanos((ms * 1e6) as u64)
}

impl Relays {
    /// The relays of scenario `s`, whose servers wait `wait` (their source timeout) for an
    /// answer.
    pub(super) fn new(s: &Scenario, wait: Duration) -> Self {
        let cache_bytes = s.relay.cache_mib << 20;
        Relays {
            nodes: (0..s.cluster.nodes)
                .map(|_| NodeRelay::new(Instant::ZERO, cache_bytes, s.relay.through_parent))
                .collect(),
            cache_bytes,
            through_parent: s.relay.through_parent,
            origin: Uplink::new(s.origin.upload_mbps * 1e6 / 8.0, f64::INFINITY),
            node_latency: ms_duration(s.relay.node_latency_ms),
            origin_latency: ms_duration(s.origin.latency_ms),
            wait,
            waiters: BTreeMap::new(),
            next_waiter: 0,
            ups: BTreeMap::new(),
            next_up: 0,
            metrics: RelayMetrics {
                file_bytes: s.file.size_mib << 20,
                origin_bytes_by_round: vec![0; s.readers.rounds as usize],
                round_span_ns: vec![0; s.readers.rounds as usize],
                ..RelayMetrics::default()
            },
        }
    }

    /// Whether node `n` serves `block` from its cache (a hit is counted and refreshes the
    /// block's recency).
    pub(super) fn serve_cached(&mut self, n: u32, block: u32) -> bool {
        let hit = self.nodes[n as usize].cache.hit(block);
        if hit {
            self.metrics.cache_hits += 1;
        }
        hit
    }
}

impl World<'_> {
    fn relays(&mut self) -> &mut Relays {
        self.relay.as_mut().expect("file.placement = \"origin\"")
    }

    /// Node `n`'s server connection `conn` emitted `Relay` for request `req`: the miss
    /// joins the node's flights.
    pub(super) fn relay_from_conn(
        &mut self,
        n: u32,
        conn: ConnId,
        req: RequestId,
        request: SourceRequest,
    ) {
        let block = request.path.index as u32;
        self.relays().metrics.relays += 1;
        self.relay_want(
            n,
            Waiter::Conn {
                node: n,
                conn,
                req,
                block,
            },
            request,
        );
    }

    /// A request at node `n` (a reader's relayed miss, or a child's) wants `request`'s
    /// block through `n`'s flights.
    fn relay_want(&mut self, n: u32, waiter: Waiter, request: SourceRequest) {
        let now = self.now;
        let single_flight = self.s.relay.single_flight;
        let r = self.relays();
        let id = r.next_waiter;
        r.next_waiter += 1;
        r.waiters.insert(id, waiter);
        let deadline = now + r.wait;
        if !single_flight {
            // The ablation: every relayed miss makes its own upstream fetch.
            r.metrics.flights_led += 1;
            self.upstream_start(n, Via::Alone(id), request);
            return;
        }
        let r = self.relays();
        match r.nodes[n as usize]
            .flights
            .handle_want(now, &request, id, deadline)
        {
            Ok(Want::Lead(_)) => r.metrics.flights_led += 1,
            Ok(Want::Joined(_)) => r.metrics.flight_joins += 1,
            Ok(Want::Expired) => {}
            Err(_) => {
                r.metrics.flights_full += 1;
                r.waiters.remove(&id);
                self.relay_answer(waiter, SourceResult::Failed);
            }
        }
        self.relay_drain(n);
    }

    /// Drains node `n`'s flight events and arms its flight timer.
    fn relay_drain(&mut self, n: u32) {
        let now = self.now;
        loop {
            let r = self.relays();
            let Some(ev) = r.nodes[n as usize].flights.poll_event() else {
                break;
            };
            match ev {
                FlightEvent::Fetch { id, request } => {
                    self.upstream_start(n, Via::Flight(id), request)
                }
                FlightEvent::Answer { waiter, answer, .. } => {
                    if let Some(w) = self.relays().waiters.remove(&waiter) {
                        self.relay_answer(w, answer.into_source_result());
                    }
                }
                // Nobody waits any more: the fetch is cancelled, as the drivers abort it.
                FlightEvent::Abandon { id, .. } => {
                    let up = self.relays().ups.iter().find_map(|(&up, u)| match u.who {
                        For::Node {
                            node,
                            via: Via::Flight(f),
                            ..
                        } if node == n && f == id => Some(up),
                        _ => None,
                    });
                    if let Some(up) = up {
                        self.cancel_upstream(up);
                    }
                }
            }
        }
        let r = self.relays();
        let node = &mut r.nodes[n as usize];
        let deadline = node.flights.poll_timeout().map(|d| d.at);
        if let Some(at) = node.armed.arm(now, deadline) {
            self.queue
                .push(at, Ev::Relay(Box::new(RelayEv::FlightTimer { node: n })));
        }
    }

    /// A flight's answer for one waiter.
    fn relay_answer(&mut self, waiter: Waiter, result: SourceResult) {
        match waiter {
            Waiter::Conn {
                node,
                conn,
                req,
                block,
            } => self.http_relay_answer(node, conn, req, block, result),
            Waiter::Child { up } => self.parent_reply(up, result),
        }
    }

    /// Node `n` starts an upstream fetch for `via`.
    fn upstream_start(&mut self, n: u32, via: Via, request: SourceRequest) {
        let now = self.now;
        let block = request.path.index as u32;
        let epoch = self.nodes[n as usize].epoch;
        let parent = self.parent_of(n, block);
        let r = self.relays();
        let up = r.next_up;
        r.next_up += 1;
        r.ups.insert(
            up,
            Upstream {
                who: For::Node {
                    node: n,
                    via,
                    epoch,
                },
                block,
                request,
                at: At::Origin,
                slot: None,
                sending: None,
            },
        );
        match parent {
            Some(p) => {
                let hop = u_hop(&self.relays().ups[&up]);
                trace!(
                    self.trace,
                    now,
                    "relay",
                    "n={n} b={block} hop={hop} via={p}"
                );
                self.ask_parent(up, p);
            }
            None => {
                let hop = u_hop(&self.relays().ups[&up]);
                trace!(
                    self.trace,
                    now,
                    "relay",
                    "n={n} b={block} hop={hop} via=origin"
                );
                self.ask_origin(up);
            }
        }
    }

    /// The parent node `n` asks for `block`: the nearest holder its relay client does not
    /// suppress, unless `n` itself is nearer (then none: `n` asks the origin).
    fn parent_of(&mut self, n: u32, block: u32) -> Option<u32> {
        if !self.s.relay.through_parent {
            return None; // the ablation: `Parent::None`, always the origin
        }
        let now = self.now;
        let holders = self.content.holders(block);
        let r = self.relay.as_ref().expect("origin placement");
        let cooldown = &r.nodes[n as usize].cooldown;
        for &h in holders {
            if h == n {
                return None;
            }
            if !cooldown.is_suppressed(now, &h) {
                return Some(h);
            }
        }
        None
    }

    fn ask_parent(&mut self, up: u64, p: u32) {
        let now = self.now;
        let c = &self.s.client;
        let (dial, header, request) = (
            Duration::from_millis(c.dial_timeout_ms),
            Duration::from_millis(c.response_timeout_ms),
            Duration::from_millis(c.request_timeout_ms),
        );
        let down = self.nodes[p as usize].health == Health::Down;
        let r = self.relays();
        r.metrics.parent_fetches += 1;
        let lat = r.node_latency;
        if let Some(u) = r.ups.get_mut(&up) {
            u.at = At::Parent {
                p,
                transferring: false,
            };
        }
        let ev = |e| Ev::Relay(Box::new(e));
        if down {
            self.queue.push(
                now + dial,
                ev(RelayEv::Deadline {
                    up,
                    which: Deadline::Dial,
                }),
            );
            return;
        }
        // A dial's round trip, then the request's one way.
        self.queue
            .push(now + lat + lat + lat, ev(RelayEv::AtParent { up }));
        self.queue.push(
            now + header,
            ev(RelayEv::Deadline {
                up,
                which: Deadline::Header,
            }),
        );
        self.queue.push(
            now + request,
            ev(RelayEv::Deadline {
                up,
                which: Deadline::Request,
            }),
        );
    }

    fn ask_origin(&mut self, up: u64) {
        let now = self.now;
        let r = self.relays();
        r.metrics.origin_requests += 1;
        let lat = r.origin_latency;
        if let Some(u) = r.ups.get_mut(&up) {
            u.at = At::Origin;
        }
        // A dial's round trip, then the request's one way.
        self.queue.push(
            now + lat + lat + lat,
            Ev::Relay(Box::new(RelayEv::AtOrigin { up })),
        );
    }

    /// Dispatches a relay event.
    pub(super) fn relay_event(&mut self, ev: RelayEv) {
        let now = self.now;
        match ev {
            RelayEv::AtParent { up } => self.at_parent(up),
            RelayEv::ParentAnswer { up, result } => {
                let Some(u) = self.relays().ups.get(&up) else {
                    return;
                };
                if !matches!(u.at, At::Parent { .. }) {
                    return; // gave up on the parent already
                }
                if parent_answer_is_final(&result) {
                    self.upstream_done(up);
                } else {
                    self.parent_fallback(up, "answer");
                }
            }
            RelayEv::ParentRefused { up, retry_after } => {
                let Some(u) = self.relays().ups.get(&up) else {
                    return;
                };
                let (At::Parent { p, .. }, For::Node { node, .. }) = (u.at, u.who) else {
                    return;
                };
                // The relay client's cooldown table skips a refusing parent for its
                // Retry-After.
                self.relays().nodes[node as usize].cooldown.record(
                    now,
                    p,
                    DialOutcome::Refused {
                        retry_after: Some(retry_after),
                    },
                );
                self.parent_fallback(up, "refused");
            }
            RelayEv::Deadline { up, which } => {
                let Some(u) = self.relays().ups.get(&up) else {
                    return;
                };
                let At::Parent { p, transferring } = u.at else {
                    return;
                };
                if which == Deadline::Header && transferring {
                    return; // the head arrived: only the request deadline applies now
                }
                let from = match u.who {
                    For::Node { node, .. } => node,
                    For::Reader { .. } => return,
                };
                if u.sending.is_some_and(|e| e == self.nodes[p as usize].epoch) {
                    self.nodes[p as usize]
                        .uplink
                        .cancel(now, RELAY_TRANSFER | up);
                    self.reschedule_uplink(p);
                }
                if let Some(u) = self.relays().ups.get_mut(&up) {
                    u.sending = None;
                }
                if which == Deadline::Dial {
                    // The relay client's cooldown table: a dead parent is skipped from now.
                    self.relays().nodes[from as usize]
                        .cooldown
                        .record(now, p, DialOutcome::Failed);
                }
                let why = match which {
                    Deadline::Dial => "dial",
                    Deadline::Header => "header",
                    Deadline::Request => "request",
                };
                self.parent_fallback(up, why);
            }
            RelayEv::AtOrigin { up } => {
                let Some(block) = self.relays().ups.get(&up).map(|u| u.block) else {
                    return;
                };
                let bytes = self.s.block_bytes(block);
                let r = self.relays();
                r.origin.start(now, up, bytes);
                if let Some(u) = r.ups.get_mut(&up) {
                    u.sending = Some(0);
                }
                self.reschedule_origin();
            }
            RelayEv::OriginUplink { gen } => {
                let r = self.relays();
                if r.origin.generation() != gen {
                    return;
                }
                let done = r.origin.finished(now);
                let round = self.round_at(now);
                for up in done {
                    let Some(u) = self.relays().ups.get_mut(&up) else {
                        continue;
                    };
                    u.sending = None;
                    let block = u.block;
                    let bytes = self.s.block_bytes(block);
                    let r = self.relays();
                    r.metrics.origin_bytes += bytes;
                    r.metrics.origin_bytes_by_round[round] += bytes;
                    let lat = r.origin_latency;
                    self.queue
                        .push(now + lat, Ev::Relay(Box::new(RelayEv::OriginAnswer { up })));
                }
                self.reschedule_origin();
            }
            RelayEv::OriginAnswer { up } => self.upstream_done(up),
            RelayEv::FlightTimer { node } => {
                let r = self.relays();
                let n = &mut r.nodes[node as usize];
                n.armed.fired(now);
                n.flights.handle_timeout(now);
                self.relay_drain(node);
            }
        }
    }

    /// The parent's answer to `up` is not final (`why`: "answer" for a miss or a
    /// failure, else the deadline that fired): the fetch goes to the origin.
    fn parent_fallback(&mut self, up: u64, why: &str) {
        let now = self.now;
        self.release_slot(up);
        let r = self.relays();
        r.metrics.parent_fallbacks += 1;
        let Some(u) = r.ups.get(&up) else {
            return;
        };
        if let (For::Node { node, .. }, At::Parent { p, .. }) = (u.who, u.at) {
            let (block, hop) = (u.block, u_hop(u));
            trace!(
                self.trace,
                now,
                "relay-fallback",
                "n={node} b={block} hop={hop} parent={p} why={why}"
            );
        }
        self.ask_origin(up);
    }

    /// Which round's time window `t` is in.
    fn round_at(&self, t: Instant) -> usize {
        let r = &self.s.readers;
        let secs = t.as_nanos() as f64 / 1e9 - r.first_round_at_secs;
        if secs <= 0.0 || r.round_interval_secs <= 0.0 {
            return 0;
        }
        ((secs / r.round_interval_secs) as usize).min(r.rounds as usize - 1)
    }

    fn reschedule_origin(&mut self) {
        let r = self.relays();
        if let Some((at, gen)) = r.origin.reschedule() {
            let at = at.max(self.now);
            self.queue
                .push(at, Ev::Relay(Box::new(RelayEv::OriginUplink { gen })));
        }
    }

    /// Upstream request `up` reaches its parent: served from the parent's cache, declined
    /// at the hop bound, or relayed on through the parent's own flights.
    fn at_parent(&mut self, up: u64) {
        let Some(u) = self.relays().ups.get(&up) else {
            return;
        };
        let At::Parent { p, .. } = u.at else {
            return;
        };
        let (block, request) = (u.block, u.request.clone());
        let from = match u.who {
            For::Node { node, .. } => node,
            For::Reader { .. } => return,
        };
        if self.nodes[p as usize].health != Health::Up {
            return; // crashed meanwhile, or silent: the deadlines decide
        }
        // The request takes a session and a request slot at the parent, as any
        // connection's does (core's admission; a full parent refuses).
        let now = self.now;
        let node = &mut self.nodes[p as usize];
        let epoch = node.epoch;
        let core = node.admission.core_mut();
        let slot = core
            .open_session(now, node_source(from))
            .and_then(|mut session| match core.begin_request(now, &mut session) {
                Ok(request) => Ok(Slot {
                    session,
                    request,
                    epoch,
                }),
                Err(refusal) => {
                    core.close_session(now, session);
                    Err(refusal)
                }
            });
        match slot {
            Ok(slot) => {
                if let Some(u) = self.relays().ups.get_mut(&up) {
                    u.slot = Some(slot);
                }
            }
            Err(refusal) => {
                self.refuse_child(up, p, refusal);
                return;
            }
        }
        if self.relays().serve_cached(p, block) {
            self.parent_reply(up, SourceResult::Found(Bytes::new()));
            return;
        }
        // Core's relay rule (`server::relay::on_miss`): at or past the bound, decline.
        let max_hop = self.s.relay.max_hop;
        if request.hop.0 >= max_hop {
            self.relays().metrics.hop_declines += 1;
            self.parent_reply(up, SourceResult::Miss);
            return;
        }
        let mut relayed = request;
        relayed.hop = Hop(relayed.hop.0 + 1);
        self.relays().metrics.relays += 1;
        self.relay_want(p, Waiter::Child { up }, relayed);
    }

    /// Parent `p` refuses `up` (a full listener): the refusal reaches the relaying node
    /// one latency later.
    fn refuse_child(&mut self, up: u64, p: u32, refusal: peerblock_core::refusal::Refusal) {
        let now = self.now;
        let limit = Limit::from_reason(refusal.reason);
        self.metrics.limit_hit(limit);
        let lat = self.relays().node_latency;
        trace!(
            self.trace,
            now,
            "relay-refused",
            "n={p} up={up} limit={}",
            limit.as_str()
        );
        self.queue.push(
            now + lat,
            Ev::Relay(Box::new(RelayEv::ParentRefused {
                up,
                retry_after: refusal.retry_after,
            })),
        );
    }

    /// Releases `up`'s slot at its parent (its answer has left, or the relaying node gave
    /// up on it).
    fn release_slot(&mut self, up: u64) {
        let now = self.now;
        let Some(u) = self.relays().ups.get_mut(&up) else {
            return;
        };
        let (At::Parent { p, .. }, Some(mut slot)) = (u.at, u.slot.take()) else {
            return;
        };
        let node = &mut self.nodes[p as usize];
        if node.epoch != slot.epoch {
            return; // the crash dropped the parent's books
        }
        let core = node.admission.core_mut();
        core.finish_request(now, Some(&mut slot.session), slot.request);
        core.close_session(now, slot.session);
    }

    /// The parent of `up` answers it: a block goes out on the parent's upload link, then
    /// one latency to the relaying node; anything else takes the latency alone.
    fn parent_reply(&mut self, up: u64, result: SourceResult) {
        let now = self.now;
        let Some(u) = self.relays().ups.get(&up) else {
            return;
        };
        let (At::Parent { p, .. }, block) = (u.at, u.block) else {
            return;
        };
        if self.nodes[p as usize].health != Health::Up {
            return;
        }
        if let SourceResult::Found(_) = result {
            let epoch = self.nodes[p as usize].epoch;
            // The response is reserved against the parent's byte budgets (at the HTTP
            // path's scale), or refused.
            let scaled = self.http_body(block).len() as u64;
            let node = &mut self.nodes[p as usize];
            let core = node.admission.core_mut();
            let reserved = match self.relay.as_mut().and_then(|r| r.ups.get_mut(&up)) {
                Some(Upstream {
                    slot: Some(slot), ..
                }) => core.reserve_bytes(&mut slot.request, scaled),
                _ => Ok(()),
            };
            if let Err(refusal) = reserved {
                self.release_slot(up);
                self.refuse_child(up, p, refusal);
                return;
            }
            if let Some(u) = self.relays().ups.get_mut(&up) {
                u.at = At::Parent {
                    p,
                    transferring: true,
                };
                u.sending = Some(epoch);
            }
            let bytes = self.s.block_bytes(block);
            self.nodes[p as usize]
                .uplink
                .start(now, RELAY_TRANSFER | up, bytes);
            self.reschedule_uplink(p);
            return;
        }
        self.release_slot(up);
        let lat = self.relays().node_latency;
        self.queue.push(
            now + lat,
            Ev::Relay(Box::new(RelayEv::ParentAnswer { up, result })),
        );
    }

    /// Node `n`'s upload link finished relayed transfer `t` (an answer to a child).
    pub(super) fn relay_transfer_done(&mut self, n: u32, t: u64) {
        let now = self.now;
        let up = t & !RELAY_TRANSFER;
        let Some(u) = self.relays().ups.get_mut(&up) else {
            return;
        };
        u.sending = None;
        let block = u.block;
        self.nodes[n as usize].bytes_served += self.s.block_bytes(block);
        self.release_slot(up);
        let lat = self.relays().node_latency;
        self.queue.push(
            now + lat,
            Ev::Relay(Box::new(RelayEv::ParentAnswer {
                up,
                result: SourceResult::Found(Bytes::new()),
            })),
        );
    }

    /// Upstream fetch `up` got its block (from the parent or the origin).
    fn upstream_done(&mut self, up: u64) {
        let now = self.now;
        let Some(u) = self.relays().ups.remove(&up) else {
            return;
        };
        match u.who {
            For::Node { node, via, epoch } => {
                if self.nodes[node as usize].epoch != epoch {
                    return; // the node crashed since: its flights are gone
                }
                let body = self.http_body(u.block);
                let bytes = self.s.block_bytes(u.block);
                let r = self.relays();
                let relay = &mut r.nodes[node as usize];
                r.metrics.cache_evictions += relay.cache.insert(u.block, bytes);
                match via {
                    Via::Flight(flight) => {
                        relay
                            .flights
                            .handle_result(now, flight, SourceResult::Found(body));
                        self.relay_drain(node);
                    }
                    Via::Alone(waiter) => {
                        if let Some(w) = r.waiters.remove(&waiter) {
                            self.relay_answer(w, SourceResult::Found(body));
                        }
                    }
                }
            }
            For::Reader { read } => {
                let token = self.content.token(u.block);
                if let Some(rs) = self.reads.get_mut(read) {
                    rs.machine.handle_origin(now, OriginOutcome::Found(token));
                    self.drive(read);
                }
            }
        }
    }

    /// A read asked for its origin fallback (`ReadEvent::FetchOrigin`).
    pub(super) fn reader_origin_fetch(&mut self, read: Handle, block: u32) {
        let key = peerblock_core::wire::ChunkKey::from_array(self.content.keys[block as usize].0);
        let r = self.relays();
        r.metrics.reader_origin_fetches += 1;
        let up = r.next_up;
        r.next_up += 1;
        r.ups.insert(
            up,
            Upstream {
                who: For::Reader { read },
                block,
                request: SourceRequest {
                    path: peerblock_core::wire::BlockPath {
                        key,
                        index: u64::from(block),
                    },
                    origin: Some(Bytes::from_static(ORIGIN_URL.as_bytes())),
                    hop: Hop(0),
                },
                at: At::Origin,
                slot: None,
                sending: None,
            },
        );
        self.ask_origin(up);
    }

    /// Node `n`'s server connection `conn` went away: its waiters leave their flights.
    pub(super) fn relay_conn_closed(&mut self, n: u32, conn: ConnId) {
        let Some(r) = self.relay.as_mut() else {
            return;
        };
        let gone: Vec<u64> = r
            .waiters
            .iter()
            .filter(|(_, w)| matches!(w, Waiter::Conn { node, conn: c, .. } if *node == n && *c == conn))
            .map(|(&id, _)| id)
            .collect();
        self.relay_cancel(n, &gone);
    }

    /// Node `n`'s connection `conn` answered request `req` itself (its source timeout).
    pub(super) fn relay_timed_out(&mut self, n: u32, conn: ConnId, req: RequestId) {
        let Some(r) = self.relay.as_mut() else {
            return;
        };
        let gone: Vec<u64> = r
            .waiters
            .iter()
            .filter(|(_, w)| {
                matches!(w, Waiter::Conn { node, conn: c, req: q, .. }
                    if *node == n && *c == conn && *q == req)
            })
            .map(|(&id, _)| id)
            .collect();
        self.relay_cancel(n, &gone);
    }

    fn relay_cancel(&mut self, n: u32, gone: &[u64]) {
        if gone.is_empty() {
            return;
        }
        let now = self.now;
        for id in gone {
            let r = self.relays();
            r.waiters.remove(id);
            r.nodes[n as usize].flights.handle_cancel(now, *id);
            // Without single-flight the waiter's own fetch goes with it.
            let alone = r.ups.iter().find_map(|(&up, u)| match u.who {
                For::Node {
                    via: Via::Alone(w), ..
                } if w == *id => Some(up),
                _ => None,
            });
            if let Some(up) = alone {
                self.cancel_upstream(up);
            }
        }
        self.relay_drain(n);
    }

    /// Nobody wants upstream fetch `up` any more: its request is dropped wherever it is
    /// (the origin's or the parent's transfer stops, the parent's slot is released, and
    /// the parent's own wait for the block leaves its flight).
    fn cancel_upstream(&mut self, up: u64) {
        let now = self.now;
        self.release_slot(up);
        let Some(u) = self.relays().ups.remove(&up) else {
            return;
        };
        match u.at {
            At::Origin => {
                if u.sending.is_some() {
                    self.relays().origin.cancel(now, up);
                    self.reschedule_origin();
                }
            }
            At::Parent { p, .. } => {
                if u.sending.is_some_and(|e| e == self.nodes[p as usize].epoch) {
                    self.nodes[p as usize]
                        .uplink
                        .cancel(now, RELAY_TRANSFER | up);
                    self.reschedule_uplink(p);
                }
                let waiting: Vec<u64> = self
                    .relays()
                    .waiters
                    .iter()
                    .filter(|(_, w)| matches!(w, Waiter::Child { up: c } if *c == up))
                    .map(|(&id, _)| id)
                    .collect();
                self.relay_cancel(p, &waiting);
            }
        }
    }

    /// Node `n` crashed: its flights, cache and relay client are gone (a restart starts
    /// empty); fetches it had upstream are dropped when they come back (epoch).
    pub(super) fn relay_crash(&mut self, n: u32) {
        let now = self.now;
        let Some(r) = self.relay.as_mut() else {
            return;
        };
        let cache = r.cache_bytes;
        r.nodes[n as usize] = NodeRelay::new(now, cache, r.through_parent);
        r.waiters
            .retain(|_, w| !matches!(w, Waiter::Conn { node, .. } if *node == n));
    }
}
