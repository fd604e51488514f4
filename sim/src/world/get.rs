//! One GET: its start and end on both paths, and in between, on the multiplexed reference
//! arms, the node model (dial, session admission, request admission, the upload queue, the
//! response, and the client's classification of how it ended). The HTTP/1.1 arms' middle
//! is in `http1`.

use peerblock_core::client::{
    BreakerPath, ConnectionFate, CooldownEntry, Ending, ExchangeOutcome, GetTicket,
};
use peerblock_core::read::{GetId, GetOutcome};
use peerblock_core::time::{Duration, Instant};

use super::{handle_of, relay, tid, Ev, Get, GetPath, Modelled, Phase, Reply, World};
use crate::listener::Limit;
use crate::metrics::GetResult;
use crate::model::node::Health;
use crate::scenario::WhenFull;
use crate::slab::Handle;
use crate::trace;

impl World<'_> {
    pub(super) fn start_get(&mut self, h: Handle, id: GetId, node: u32) {
        let now = self.now;
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        let (r, block) = (rs.reader, rs.block);
        let hedged = !rs.gets.is_empty();
        if rs.opening_sent < 2 {
            rs.opening_sent += 1;
            let round = self.downloads[rs.download as usize].round;
            self.metrics
                .opening_get(round as usize, block as usize, node as usize);
        }
        if !rs.first_sent {
            rs.first_sent = true;
            let round = self.downloads[rs.download as usize].round;
            self.metrics
                .first_get(round as usize, block as usize, node as usize);
        }
        let peer = self.content.ids[node as usize];
        // The breaker permit, and the GET counted in flight, in the reader's `Peers`.
        let Ok(admitted) = self.readers[r as usize]
            .peers
            .admit(now, peer, BreakerPath::Data)
        else {
            // The view said eligible a moment ago; a half-open circuit whose probe slot
            // was just taken can still say no. The GET fails without a dial.
            trace!(self.trace, now, "get-rejected", "r={r} b={block} n={node}");
            if let Some(rs) = self.reads.get_mut(h) {
                rs.machine.handle_get(now, id, GetOutcome::Failed);
            }
            return;
        };
        self.metrics.gets_total += 1;
        if hedged {
            self.metrics.gets_hedged += 1;
        }
        if self.http.is_some() {
            self.start_http_get(h, id, r, node, block, hedged, admitted);
            return;
        }
        // The modelled path serves only the multiplexed reference arms (HTTP/1.1 returned
        // above): one session per reader and node, connection 0, carrying every request.
        let node_ref = &mut self.nodes[node as usize];
        let existing = node_ref.usable_connection(r, now, self.idle);
        let session = existing.is_some();
        let conn = match existing {
            Some(c) => {
                node_ref.claim(r, c);
                c
            }
            None => 0,
        };
        let epoch = node_ref.epoch;
        let bytes = self.s.block_bytes(block);
        let reserve = match self.s.listener.reserve_kib {
            0 => bytes,
            k => bytes.min(k * 1024),
        };
        let g = self.insert_get(Get {
            read: h,
            id,
            reader: r,
            node,
            block,
            admitted,
            dials: 1,
            path: GetPath::Modelled(Modelled {
                phase: if session {
                    Phase::Requested
                } else {
                    Phase::Dialing
                },
                conn,
                epoch,
                reserved: reserve,
                bytes,
                ticket: None,
                advertised: None,
            }),
        });
        trace!(
            self.trace,
            now,
            "get",
            "r={r} b={block} n={node} hedge={} dial={}",
            u8::from(hedged),
            u8::from(!session)
        );
        let ow = self.latency.one_way(r, node);
        let c = &self.s.client;
        if session {
            self.queue.push(now + ow, Ev::RequestArrive { get: g });
            self.arm_request_timeouts(g, now);
        } else {
            self.queue.push(now + ow, Ev::DialArrive { get: g });
            self.queue.push(
                now + Duration::from_millis(c.dial_timeout_ms),
                Ev::DialTimeout { get: g },
            );
        }
    }

    /// `start_get` on the HTTP path: the GET is a real client exchange (see `http1`).
    #[allow(clippy::too_many_arguments)]
    fn start_http_get(
        &mut self,
        h: Handle,
        id: GetId,
        r: u32,
        node: u32,
        block: u32,
        hedged: bool,
        admitted: GetTicket,
    ) {
        let now = self.now;
        let exchange = self.http_open(r, node, block, true);
        let reused = exchange.reuses_connection();
        let g = self.insert_get(Get {
            read: h,
            id,
            reader: r,
            node,
            block,
            admitted,
            dials: 1,
            path: GetPath::Http1(exchange),
        });
        self.http_launch(g);
        trace!(
            self.trace,
            now,
            "get",
            "r={r} b={block} n={node} hedge={} dial={}",
            u8::from(hedged),
            u8::from(!reused)
        );
    }

    /// Files `get` with the GETs in flight and under its read; returns its handle.
    fn insert_get(&mut self, get: Get) -> Handle {
        let (read, id) = (get.read, get.id);
        let g = self.gets.insert(get);
        if let Some(rs) = self.reads.get_mut(read) {
            rs.gets.push((id, g));
        }
        g
    }

    pub(super) fn arm_request_timeouts(&mut self, g: Handle, sent: Instant) {
        let c = &self.s.client;
        self.queue.push(
            sent + Duration::from_millis(c.response_timeout_ms),
            Ev::ResponseTimeout { get: g },
        );
        self.queue.push(
            sent + Duration::from_millis(c.request_timeout_ms),
            Ev::RequestTimeout { get: g },
        );
    }

    pub(super) fn dial_arrive(&mut self, g: Handle) {
        let now = self.now;
        let Some((get, m)) = self
            .gets
            .get(g)
            .and_then(|get| Some((get, get.modelled()?)))
        else {
            return;
        };
        let (r, n, conn) = (get.reader, get.node, m.conn);
        let node = &mut self.nodes[n as usize];
        if !node.reachable() {
            return; // never answered: the dial timeout decides
        }
        let source = self.readers[r as usize].source;
        match node.open_session(r, conn, source, now, self.idle) {
            Ok(()) => {
                node.claim(r, conn);
                let epoch = node.epoch;
                let ow = self.latency.one_way(r, n);
                if let Some(m) = self.gets.get_mut(g).and_then(Get::modelled_mut) {
                    m.phase = Phase::Requested;
                    m.epoch = epoch;
                }
                // Handshake back to the reader, then the request out.
                self.queue.push(now + ow * 2, Ev::RequestArrive { get: g });
                self.arm_request_timeouts(g, now + ow);
            }
            Err(limit) => {
                self.metrics.limit_hit(limit);
                match self.s.listener.when_full {
                    WhenFull::Silent => {
                        if let Some(at) = self.dial_dropped(g, n, r, limit) {
                            self.queue.push(at, Ev::DialArrive { get: g });
                        }
                    }
                    WhenFull::Refuse => {
                        trace!(
                            self.trace,
                            now,
                            "refuse",
                            "n={n} r={r} limit={}",
                            limit.as_str()
                        );
                        let ow = self.latency.one_way(r, n);
                        self.advertise(g, n);
                        self.queue.push(
                            now + ow,
                            Ev::Deliver {
                                get: g,
                                reply: Reply::Refused(limit),
                            },
                        );
                    }
                }
            }
        }
    }

    /// Node `n`, full at `limit`, drops the dial of GET `g` without a word. The reader
    /// retransmits the dial on a doubling schedule until its dial timeout; a slot freed
    /// meanwhile admits a retransmission. Returns when the next retransmission reaches the
    /// node (`None` if retransmission is off or the GET is gone).
    pub(super) fn dial_dropped(
        &mut self,
        g: Handle,
        n: u32,
        r: u32,
        limit: Limit,
    ) -> Option<Instant> {
        let now = self.now;
        trace!(
            self.trace,
            now,
            "silent",
            "n={n} r={r} limit={}",
            limit.as_str()
        );
        let first = self.s.network.dial_retransmit_ms;
        if first == 0 {
            return None;
        }
        let get = self.gets.get_mut(g)?;
        let wait = Duration::from_millis(first << (get.dials - 1).min(20));
        get.dials += 1;
        Some(now + wait)
    }

    pub(super) fn request_arrive(&mut self, g: Handle) {
        let now = self.now;
        let Some((get, m)) = self
            .gets
            .get(g)
            .and_then(|get| Some((get, get.modelled()?)))
        else {
            return;
        };
        let (r, n, block, bytes, reserved, epoch, conn) = (
            get.reader, get.node, get.block, m.bytes, m.reserved, m.epoch, m.conn,
        );
        let holds = self.content.holds(n, block);
        let ow = self.latency.one_way(r, n);
        let node = &mut self.nodes[n as usize];
        if !node.reachable() || node.epoch != epoch || node.health == Health::Silent {
            return; // lost, or accepted and never answered: the client's timeouts decide
        }
        if self.s.client.lookup_load_hints {
            // The node counts every GET it receives, per block, for its lookup replies.
            node.keys.bump(now, block);
        }
        if !holds {
            node.touch(r, conn, now, self.idle);
            self.advertise(g, n);
            self.queue.push(
                now + ow,
                Ev::Deliver {
                    get: g,
                    reply: Reply::NotFound,
                },
            );
            return;
        }
        match node.begin_request(r, conn, now, reserved) {
            Ok(ticket) => {
                node.uplink.start(now, tid(g), bytes);
                if let Some(m) = self.gets.get_mut(g).and_then(Get::modelled_mut) {
                    m.ticket = Some(ticket);
                }
                self.reschedule_uplink(n);
                self.advertise(g, n);
                self.queue.push(now + ow, Ev::FirstByte { get: g });
            }
            Err(limit) => {
                self.metrics.limit_hit(limit);
                let reply = match self.s.listener.when_full {
                    WhenFull::Silent => Reply::Closed,
                    WhenFull::Refuse => Reply::Refused(limit),
                };
                if let Reply::Refused(_) = reply {
                    self.advertise(g, n);
                }
                trace!(
                    self.trace,
                    now,
                    "turned-away",
                    "n={n} r={r} limit={}",
                    limit.as_str()
                );
                self.queue.push(now + ow, Ev::Deliver { get: g, reply });
            }
        }
    }

    /// Stamps the response head the node is writing for GET `g` with its load header: the
    /// transfers node `n` has in progress now (including this response's own).
    pub(super) fn advertise(&mut self, g: Handle, n: u32) {
        let load = self.nodes[n as usize].uplink.active();
        if let Some(m) = self.gets.get_mut(g).and_then(Get::modelled_mut) {
            m.advertised = Some(load);
        }
    }

    /// The reader receives the response head of GET `g` now: it records the node's
    /// advertised load (once per response).
    pub(super) fn hear_load(&mut self, g: Handle) {
        let now = self.now;
        let Some(get) = self.gets.get_mut(g) else {
            return;
        };
        let (r, n) = (get.reader, get.node);
        let Some(m) = get.modelled_mut() else {
            return;
        };
        if let Some(load) = m.advertised.take() {
            let peer = self.content.ids[n as usize];
            self.readers[r as usize].peers.record_load(now, peer, load);
        }
    }

    pub(super) fn reschedule_uplink(&mut self, n: u32) {
        if let Some((at, gen)) = self.nodes[n as usize].uplink.reschedule() {
            self.queue
                .push(at.max(self.now), Ev::Uplink { node: n, gen });
        }
    }

    pub(super) fn uplink_done(&mut self, n: u32, gen: u64) {
        let now = self.now;
        if self.nodes[n as usize].uplink.generation() != gen {
            return;
        }
        let done = self.nodes[n as usize].uplink.finished(now);
        if self.http.is_some() {
            for t in done {
                if t & relay::RELAY_TRANSFER != 0 {
                    self.relay_transfer_done(n, t);
                } else {
                    self.http_transfer_done(t);
                }
            }
            self.reschedule_uplink(n);
            return;
        }
        for t in done {
            let g = handle_of(t);
            let Some(get) = self.gets.get_mut(g) else {
                continue;
            };
            let r = get.reader;
            let Some(m) = get.modelled_mut() else {
                continue;
            };
            let (bytes, conn) = (m.bytes, m.conn);
            let ticket = m.ticket.take();
            let node = &mut self.nodes[n as usize];
            if let Some(ticket) = ticket {
                node.finish_request(r, conn, now, ticket, self.idle);
            }
            node.bytes_served += bytes;
            let reply = if node.corrupt {
                Reply::Corrupt
            } else {
                Reply::Found
            };
            if node.reachable() {
                let ow = self.latency.one_way(r, n);
                self.queue.push(now + ow, Ev::Deliver { get: g, reply });
            }
            // Unreachable now (partitioned): the response is lost, the client times out.
        }
        self.reschedule_uplink(n);
    }

    /// Releases whatever node `n` still holds for reader `r`'s modelled GET `g` that is
    /// ending early: its share of the upload link and its request slot (unless a crash
    /// already wiped both).
    fn release_at_node(&mut self, g: Handle, (r, n): (u32, u32), m: &mut Modelled) {
        let node = &mut self.nodes[n as usize];
        if m.epoch != node.epoch {
            return; // the crash already wiped the node's books; the ticket dies with them
        }
        if m.phase != Phase::Dialing {
            // It had a connection assigned (reused, or its dial was accepted).
            node.unclaim(r, m.conn, self.now, self.idle);
        }
        let Some(ticket) = m.ticket.take() else {
            return;
        };
        node.uplink.cancel(self.now, tid(g));
        node.finish_request(r, m.conn, self.now, ticket, self.idle);
        self.reschedule_uplink(n);
    }

    /// Ends a GET of the modelled path with `result`: its ending, classified by the core
    /// client (`Ending::classify`), is what the breaker and the cooldown table learn. The
    /// load was heard at the response head (`hear_load`).
    pub(super) fn end_get(&mut self, g: Handle, result: GetResult, ending: Ending) {
        let outcome = ExchangeOutcome::new(ending, BreakerPath::Data, ConnectionFate::Close);
        self.end_get_outcome(g, result, outcome);
    }

    /// Ends a GET with `result` and the exchange's `outcome` (built from the ending on the
    /// modelled path, the exchange machine's own on the HTTP path): releases the node
    /// side, settles the GET's ticket in the reader's `Peers` (load, cooldown, breaker,
    /// in flight) and hands the read machine its outcome.
    pub(super) fn end_get_outcome(
        &mut self,
        g: Handle,
        result: GetResult,
        outcome: ExchangeOutcome,
    ) {
        let now = self.now;
        let Some(mut get) = self.gets.remove(g) else {
            return;
        };
        let (r, n) = (get.reader, get.node);
        // On the HTTP path the server machines keep the node's books; only the modelled
        // path has node state to release.
        if let GetPath::Modelled(m) = &mut get.path {
            self.release_at_node(g, (r, n), m);
        }
        let finished = self.readers[r as usize]
            .peers
            .finish(now, get.admitted, outcome);
        if let Some(CooldownEntry::Refused { .. }) = finished.cooldown {
            self.metrics.refusals += 1;
        }
        if finished.circuit_opened {
            self.metrics.breaker_opens += 1;
            trace!(self.trace, now, "breaker-open", "r={r} n={n}");
        }
        self.metrics.get_result(result);
        trace!(
            self.trace,
            now,
            "get-end",
            "r={r} b={} n={n} res={}",
            get.block,
            result.as_str()
        );
        if let Some(rs) = self.reads.get_mut(get.read) {
            rs.gets.retain(|(id, _)| *id != get.id);
            rs.machine.handle_get(now, get.id, finished.get);
        }
        self.drive(get.read);
    }

    pub(super) fn cancel_get(&mut self, h: Handle, id: GetId) {
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        let Some(pos) = rs.gets.iter().position(|(i, _)| *i == id) else {
            return;
        };
        let (_, g) = rs.gets.remove(pos);
        let Some(mut get) = self.gets.remove(g) else {
            return;
        };
        let (r, n) = (get.reader, get.node);
        match &mut get.path {
            GetPath::Http1(http) => self.http_cancel(http, r, n),
            GetPath::Modelled(m) => self.release_at_node(g, (r, n), m),
        }
        // Not the peer's fault: the permit goes back as answered.
        self.readers[get.reader as usize]
            .peers
            .abandon(self.now, get.admitted);
        self.metrics.get_result(GetResult::Cancelled);
        trace!(
            self.trace,
            self.now,
            "cancel",
            "r={} b={} n={}",
            get.reader,
            get.block,
            get.node
        );
    }
}
