//! The `server_connection` property: arbitrary operation sequences on several
//! [`ServerConnection`]s sharing one small [`Admission`].
//!
//! The input is a config byte, then operations (one opcode byte and its arguments each).
//! Every operation is applied to two identical worlds: one feeds bytes with
//! `handle_input`, the other with `read_buf` + `handle_read`; everything they report
//! (bytes taken, events, transmits, deadlines, admission counters) must be the same. A
//! model of each connection checks the driving contract of `core/src/server/connection/`.

use std::collections::VecDeque;
use std::sync::Arc;

use peerblock_core::http::REQUEST_BUFFER_BYTES;
use peerblock_core::refusal::Refusal;
use peerblock_core::roster::Roster;
use peerblock_core::server::{
    Admission, AdmissionConfig, RateLimit, RequestId, RequestRejection, ServerConfig,
    ServerConnection, ServerEvent, ServerTimer, SourceResult,
};
use peerblock_core::time::{Deadline, Duration, Instant};
use peerblock_core::transmit::{Close, Transmit};

use crate::ops::{input_through, read_through, Src, Window};

/// Sources the connections come from (fewer than connections, so per-source limits bind).
const SOURCES: u32 = 3;
/// Connections accepted per run at most (the admission allows 3 at once).
const MAX_CONNECTIONS: usize = 8;
/// Operations per run at most.
const MAX_OPS: usize = 256;
/// Received bytes a connection's driver holds back at most (more is dropped, as a driver
/// with a full receive buffer stops reading the socket).
const MAX_PENDING_INPUT: usize = 64 * 1024;

/// One request the machine told the application about (by an event), in event order.
struct Expected {
    id: RequestId,
    /// A block request holding a request ticket (a `Fetch`).
    ticket: bool,
    /// A roster request (answered with `handle_roster`).
    roster: bool,
    /// The statuses its response may have; `None` while it waits for its answer.
    statuses: Option<&'static [u16]>,
    /// Response bytes reserved for it (its ticket's share of the in-flight budget).
    bytes: u64,
}

/// A handed-out transmit not yet acknowledged.
struct Unacked {
    ticket: bool,
    bytes: u64,
    /// This transmit ends the connection: acknowledging it drops the requests queued
    /// behind it (their tickets are released, their asks withdrawn).
    ends: bool,
}

/// One connection and what the model knows about it.
struct Conn {
    m: ServerConnection<u32>,
    source: u32,
    /// Admitted at accept (holds a session ticket until it lingers or is closed).
    admitted: bool,
    closed: bool,
    /// A transmit with [`Close::Linger`] was handed out (its acknowledgement may release
    /// the session early).
    lingering: bool,
    eof: bool,
    /// A transmit that ends the connection was handed out: nothing may follow it.
    ended: bool,
    /// Latest instant this connection was given.
    seen: Instant,
    /// Latest instant of an input offer. The zero-copy world's machine may not have seen
    /// it (no window lent, nothing offered), so a timeout never goes below it: both
    /// worlds' machines then clamp to the same instant.
    input_at: Instant,
    /// Requests announced by events whose response is not handed out yet, in order.
    pending: VecDeque<Expected>,
    unacked: VecDeque<Unacked>,
    /// Every id the machine named, answered or not (for stale answers).
    ids: Vec<RequestId>,
    /// Bytes received and not yet taken.
    input: Vec<u8>,
}

impl Window for ServerConnection<u32> {
    fn window(&mut self) -> Option<&mut [u8]> {
        self.read_buf()
    }
    fn commit(&mut self, now: Instant, n: usize) -> usize {
        self.handle_read(now, n)
    }
}

/// What a world reported, compared between the two worlds after every operation.
#[derive(Debug, PartialEq)]
enum Rec {
    Op(u8, usize),
    Accept(u32, Option<Refusal>),
    Took(usize, usize),
    Event(usize, ServerEvent),
    Transmit(usize, Transmit),
    Acked(usize, bool),
    Answer(usize, RequestId, bool),
    Answered(usize, RequestId, Option<&'static [u16]>),
    Timeout(usize, Instant, Option<Deadline<ServerTimer>>),
    Closed(usize),
    Eof(usize, bool),
}

/// One of the two worlds.
struct World {
    zero_copy: bool,
    admission: Admission<u32>,
    config: Arc<ServerConfig>,
    conns: Vec<Conn>,
    now: Instant,
    /// What this world reported during the current operation, compared with the twin's.
    trace: Vec<Rec>,
}

fn admission_config(c: u8) -> AdmissionConfig {
    AdmissionConfig {
        max_sessions: 3,
        max_sessions_per_source: 2,
        max_requests: 5,
        max_requests_per_session: 1 + usize::from(c & 1),
        max_inflight_bytes: 3000,
        max_inflight_bytes_per_source: 2000,
        rate: (c & 2 != 0).then_some(RateLimit {
            per_second: 2,
            burst: 3,
        }),
        max_tracked_sources: 4,
        retry_after: Duration::from_secs(1),
        // One or two refusals answered at once: the fuzzer reaches the drop path.
        max_refusals: 1 + usize::from((c >> 2) & 1),
    }
}

fn server_config(c: u8) -> ServerConfig {
    let mut config = ServerConfig::new("node-1", "10.0.0.1:7000");
    let secs = |bits: u8| Duration::from_millis(500 + 1500 * u64::from(bits & 3));
    config.idle_timeout = secs(c >> 2);
    config.source_timeout = secs(c >> 4);
    config.send_timeout = secs(c >> 6);
    config.linger = secs(c);
    config.refusal_head_timeout = secs(c >> 1);
    config
}

fn roster() -> Roster {
    Roster::from_json(
        br#"{"epoch":"7","members":[{"id":"peer-a","addr":"10.0.0.2:7000","weight":1}]}"#,
    )
    .expect("the fixed roster decodes")
}

/// A chunk of client bytes: a template request (valid, pipelined, bad) or raw bytes.
fn chunk(src: &mut Src<'_>) -> Vec<u8> {
    let pick = src.u8();
    let arg = src.u8();
    let key = format!("{arg:02x}").repeat(32);
    let block = |conn: &str, version: &str| {
        format!(
            "GET /peer/v1/block/{key}/{} {version}\r\nHost: n\r\n{conn}\r\n",
            arg % 3
        )
        .into_bytes()
    };
    match pick % 16 {
        0..=3 => block("", "HTTP/1.1"),
        4 => block("Connection: close\r\n", "HTTP/1.1"),
        5 => block("", "HTTP/1.0"),
        6 => b"GET /peer/v1/roster HTTP/1.1\r\nHost: n\r\nX-DART-Node: peer-b\r\nX-DART-Peer-Addr: 10.0.0.3:7000\r\n\r\n".to_vec(),
        7 => b"GET /peer/v1/roster HTTP/1.1\r\nHost: n\r\n\r\n".to_vec(),
        8 => b"GET /nowhere HTTP/1.1\r\nHost: n\r\n\r\n".to_vec(),
        9 => format!("POST /peer/v1/block/{key}/1 HTTP/1.1\r\nHost: n\r\nContent-Length: 0\r\n\r\n")
            .into_bytes(),
        10 => b"GET /peer/v1/block/zz/1 HTTP/1.1\r\nHost: n\r\n\r\n".to_vec(),
        11 => {
            // A head over the request head bound (431).
            let mut v = b"GET /peer/v1/roster HTTP/1.1\r\nX-Pad: ".to_vec();
            v.resize(9000 + usize::from(arg) * 8, b'a');
            v.extend_from_slice(b"\r\n\r\n");
            v
        }
        12 => {
            // A prefix of a valid request (the rest may come in a later chunk).
            let v = block("", "HTTP/1.1");
            let cut = usize::from(arg) % v.len();
            v[..cut].to_vec()
        }
        13 => b"GET / HTTP/2.0\r\n\r\n".to_vec(),
        _ => src.bytes(usize::from(arg)).to_vec(),
    }
}

impl World {
    fn new(zero_copy: bool, admission: AdmissionConfig, config: Arc<ServerConfig>) -> Self {
        World {
            zero_copy,
            admission: Admission::new(admission).expect("the fuzz admission config is valid"),
            config,
            conns: Vec::new(),
            now: Instant::ZERO,
            trace: Vec::new(),
        }
    }

    fn accept(&mut self, source: u32) {
        let m =
            ServerConnection::accept(self.now, &mut self.admission, source, self.config.clone())
                .expect("the fuzz server config is valid");
        let admitted = m.refused().is_none();
        self.trace.push(Rec::Accept(source, m.refused()));
        self.conns.push(Conn {
            m,
            source,
            admitted,
            closed: false,
            lingering: false,
            eof: false,
            ended: false,
            seen: self.now,
            input_at: self.now,
            pending: VecDeque::new(),
            unacked: VecDeque::new(),
            ids: Vec::new(),
            input: Vec::new(),
        });
    }

    /// Offers the connection's held-back input through this world's input path.
    fn offer(&mut self, i: usize, at: Instant) {
        let c = &mut self.conns[i];
        c.seen = c.seen.max(at);
        c.input_at = c.input_at.max(at);
        let taken = if self.zero_copy {
            read_through(&mut c.m, at, &c.input, REQUEST_BUFFER_BYTES)
        } else {
            let m = &mut c.m;
            input_through(&c.input, |d| m.handle_input(at, d))
        };
        c.input.drain(..taken);
        self.trace.push(Rec::Took(i, taken));
    }

    /// Handles everything the connection reports: events, then (optionally) transmits.
    fn drain(&mut self, i: usize, transmit: bool) {
        while let Some(event) = self.conns[i].m.poll_event() {
            self.trace.push(Rec::Event(i, event.clone()));
            self.on_event(i, event);
        }
        if self.conns[i].m.needs_admission() {
            // A driver locks the admission and begins the decoded requests at once.
            let now = self.now;
            let c = &mut self.conns[i];
            c.seen = c.seen.max(now);
            c.m.handle_admission(now, &mut self.admission);
            while let Some(event) = self.conns[i].m.poll_event() {
                self.trace.push(Rec::Event(i, event.clone()));
                self.on_event(i, event);
            }
        }
        if transmit {
            self.transmit(i);
        }
    }

    fn on_event(&mut self, i: usize, event: ServerEvent) {
        let c = &mut self.conns[i];
        assert!(!c.closed, "an event after close: {event:?}");
        let fresh = |c: &Conn, id: RequestId| {
            assert!(
                c.ids.last().is_none_or(|&last| last < id),
                "request id {id:?} not after every earlier one ({:?})",
                c.ids.last()
            );
        };
        match event {
            ServerEvent::Fetch { id, .. } => {
                fresh(c, id);
                c.ids.push(id);
                c.pending.push_back(Expected {
                    id,
                    ticket: true,
                    roster: false,
                    statuses: None,
                    bytes: 0,
                });
            }
            ServerEvent::Roster { id, .. } => {
                fresh(c, id);
                c.ids.push(id);
                c.pending.push_back(Expected {
                    id,
                    ticket: false,
                    roster: true,
                    statuses: None,
                    bytes: 0,
                });
            }
            ServerEvent::Rejected { id, status, error } => {
                fresh(c, id);
                assert!(
                    !matches!(error, RequestRejection::Relay(_)),
                    "a relay decline on a transport-only node"
                );
                assert_eq!(
                    status,
                    error.status().code(),
                    "Rejected status vs its error"
                );
                c.ids.push(id);
                c.pending.push_back(Expected {
                    id,
                    ticket: false,
                    roster: false,
                    statuses: Some(std::slice::from_ref(leak_status(status))),
                    bytes: 0,
                });
            }
            ServerEvent::Relay { .. } => panic!("a Relay event on a transport-only node"),
            ServerEvent::SourceTimedOut { id } => {
                let e = c
                    .pending
                    .iter_mut()
                    .find(|e| e.id == id)
                    .unwrap_or_else(|| panic!("SourceTimedOut for unknown request {id:?}"));
                assert!(
                    e.statuses.is_none(),
                    "SourceTimedOut for an answered request"
                );
                e.statuses = Some(&[500]);
            }
            other => panic!("an event this harness does not know: {other:?}"),
        }
    }

    fn transmit(&mut self, i: usize) {
        loop {
            let now = self.now;
            let c = &mut self.conns[i];
            c.seen = c.seen.max(now);
            let finished = c.m.is_finished();
            let Some(t) = c.m.poll_transmit(now) else {
                break;
            };
            assert!(!finished, "a transmit from a finished connection: {t:?}");
            assert!(!c.closed, "a transmit after close");
            assert!(
                !c.ended,
                "a transmit after one that ended the connection: {t:?}"
            );
            self.check_transmit(i, &t);
            self.trace.push(Rec::Transmit(i, t));
        }
    }

    fn check_transmit(&mut self, i: usize, t: &Transmit) {
        let c = &mut self.conns[i];
        let status = t.status.expect("a response names its status");
        match c.pending.pop_front() {
            Some(e) => {
                let statuses = e.statuses.unwrap_or_else(|| {
                    panic!("a response for request {:?} before its answer", e.id)
                });
                assert!(
                    statuses.contains(&status),
                    "request {:?} answered {status}, expected one of {statuses:?}",
                    e.id
                );
                assert_eq!(
                    t.refusal.is_some(),
                    status == 503,
                    "a 503 carries its refusal reason, nothing else does"
                );
                c.unacked.push_back(Unacked {
                    ticket: e.ticket,
                    bytes: e.bytes,
                    ends: t.close.ends_connection(),
                });
            }
            None => {
                // No request announced: only a refusal (at accept, or of a request that
                // found no slot) has no event, and it ends the connection.
                assert_eq!(status, 503, "an unannounced response must be a refusal");
                assert!(t.refusal.is_some(), "a refusal names its reason");
                c.unacked.push_back(Unacked {
                    ticket: false,
                    bytes: 0,
                    ends: t.close.ends_connection(),
                });
            }
        }
        if t.close.ends_connection() {
            c.ended = true;
        }
        if t.close == Close::Linger {
            c.lingering = true;
        }
    }

    fn ack(&mut self, i: usize) {
        let now = self.now;
        let c = &mut self.conns[i];
        c.seen = c.seen.max(now);
        c.m.handle_transmitted(now, &mut self.admission);
        if !c.closed && c.unacked.pop_front().is_some_and(|u| u.ends) {
            c.pending.clear();
        }
        self.trace.push(Rec::Acked(i, c.m.is_finished()));
    }

    fn answer(&mut self, i: usize, src: &mut Src<'_>) {
        let now = self.now;
        let pick = src.u8();
        let arg = src.u16();
        let c = &mut self.conns[i];
        c.seen = c.seen.max(now);
        let open: Vec<usize> = (0..c.pending.len())
            .filter(|&k| c.pending[k].statuses.is_none())
            .collect();
        if pick & 0x80 != 0 || open.is_empty() {
            // A stale, wrong-kind or unknown answer: refused as local misuse.
            let Some(&id) = c.ids.get(usize::from(pick) % c.ids.len().max(1)) else {
                return;
            };
            let waiting = c
                .pending
                .iter()
                .find(|e| e.id == id && e.statuses.is_none());
            let r = if pick & 1 == 0 {
                let ok = waiting.is_some_and(|e| !e.roster);
                let r =
                    c.m.handle_source(now, &mut self.admission, id, SourceResult::Miss);
                assert_eq!(r.is_ok(), ok && !c.closed, "handle_source({id:?}) = {r:?}");
                r
            } else {
                let ok = waiting.is_some_and(|e| e.roster);
                let r = c.m.handle_roster(now, id, &roster());
                assert_eq!(r.is_ok(), ok && !c.closed, "handle_roster({id:?}) = {r:?}");
                r
            };
            if r.is_ok() {
                let e = c.pending.iter_mut().find(|e| e.id == id).expect("waiting");
                e.statuses = Some(if e.roster { &[200] } else { &[404] });
            }
            self.trace.push(Rec::Answer(i, id, r.is_ok()));
            return;
        }
        let k = open[usize::from(pick) % open.len()];
        let id = c.pending[k].id;
        if c.pending[k].roster {
            let r = c.m.handle_roster(now, id, &roster());
            assert!(r.is_ok(), "handle_roster({id:?}) = {r:?}");
            c.pending[k].statuses = Some(&[200]);
            self.trace.push(Rec::Answer(i, id, true));
            return;
        }
        let (result, statuses): (SourceResult, &'static [u16]) = match pick % 5 {
            0 | 1 => (
                SourceResult::Found(vec![b'x'; usize::from(arg % 2500)].into()),
                &[],
            ),
            2 => (SourceResult::Miss, &[404]),
            3 => (SourceResult::Failed, &[500]),
            _ => {
                let status = arg % 1100;
                let expect: &'static [u16] = if (100..=999).contains(&status) {
                    &[502]
                } else {
                    &[500]
                };
                (SourceResult::UpstreamRefused { status }, expect)
            }
        };
        let before = self.admission.inflight_bytes();
        let len = match &result {
            SourceResult::Found(b) => Some(b.len() as u64),
            _ => None,
        };
        let r = c.m.handle_source(now, &mut self.admission, id, result);
        assert!(r.is_ok(), "handle_source({id:?}) = {r:?}");
        let reserved = self.admission.inflight_bytes() - before;
        let e = &mut c.pending[k];
        match len {
            Some(len) if reserved == len => {
                e.bytes = len;
                e.statuses = Some(&[200]);
            }
            Some(_) => {
                assert_eq!(reserved, 0, "a refused reservation reserves nothing");
                e.statuses = Some(&[503]);
            }
            None => {
                assert_eq!(reserved, 0, "only a found block reserves bytes");
                e.statuses = Some(statuses);
            }
        }
        self.trace.push(Rec::Answered(i, id, e.statuses));
    }

    fn timeout(&mut self, i: usize, at: Instant) {
        let c = &mut self.conns[i];
        c.seen = c.seen.max(at);
        c.m.handle_timeout(at);
        if let Some(d) = c.m.poll_timeout() {
            assert!(
                d.at > c.seen,
                "deadline {d:?} not after {:?} once handle_timeout ran",
                c.seen
            );
        }
        self.trace.push(Rec::Timeout(i, at, c.m.poll_timeout()));
    }

    fn close(&mut self, i: usize) {
        let now = self.now;
        let c = &mut self.conns[i];
        c.seen = c.seen.max(now);
        c.m.close(now, &mut self.admission);
        c.closed = true;
        c.pending.clear();
        c.unacked.clear();
        assert!(c.m.is_finished(), "closed but not finished");
        assert!(c.m.poll_event().is_none(), "an event after close");
        assert!(c.m.poll_transmit(now).is_none(), "a transmit after close");
        assert!(c.m.poll_timeout().is_none(), "a deadline after close");
        self.trace.push(Rec::Closed(i));
    }

    /// The admission counters against the model, and against their limits.
    fn check_admission(&self) {
        let a = &self.admission;
        let cfg = a.config();
        assert!(a.sessions() <= cfg.max_sessions, "sessions above the limit");
        assert!(a.requests() <= cfg.max_requests, "requests above the limit");
        assert!(a.refusals() <= cfg.max_refusals, "refusals above the limit");
        assert!(
            a.inflight_bytes() <= cfg.max_inflight_bytes,
            "in-flight bytes above the limit"
        );
        let live = |c: &&Conn| c.admitted && !c.closed;
        let upper = self.conns.iter().filter(live).count();
        let lower = self
            .conns
            .iter()
            .filter(live)
            .filter(|c| !c.lingering)
            .count();
        assert!(
            (lower..=upper).contains(&a.sessions()),
            "sessions {} outside [{lower}, {upper}]: a session ticket leaked or was released twice",
            a.sessions()
        );
        let tickets: usize = self
            .conns
            .iter()
            .map(|c| {
                c.pending.iter().filter(|e| e.ticket).count()
                    + c.unacked.iter().filter(|u| u.ticket).count()
            })
            .sum();
        assert_eq!(
            a.requests(),
            tickets,
            "request tickets held: admission vs model (a ticket leaked or was released twice)"
        );
        let mut total = 0;
        for s in 0..SOURCES {
            let bytes: u64 = self
                .conns
                .iter()
                .filter(|c| c.source == s)
                .map(|c| {
                    c.pending.iter().map(|e| e.bytes).sum::<u64>()
                        + c.unacked.iter().map(|u| u.bytes).sum::<u64>()
                })
                .sum();
            assert_eq!(
                a.source_inflight_bytes(&s),
                bytes,
                "source {s} in-flight bytes"
            );
            assert!(bytes <= cfg.max_inflight_bytes_per_source);
            let sessions = a.source_sessions(&s);
            assert!(sessions <= cfg.max_sessions_per_source);
            let upper = self
                .conns
                .iter()
                .filter(live)
                .filter(|c| c.source == s)
                .count();
            let lower = self
                .conns
                .iter()
                .filter(live)
                .filter(|c| c.source == s && !c.lingering)
                .count();
            assert!(
                (lower..=upper).contains(&sessions),
                "source {s}: sessions {sessions} outside [{lower}, {upper}]"
            );
            total += bytes;
        }
        assert_eq!(
            a.inflight_bytes(),
            total,
            "in-flight bytes: admission vs model"
        );
    }

    /// Applies one operation.
    fn step(&mut self, op: u8, src: &mut Src<'_>) {
        let pick = usize::from(src.u8());
        let n = self.conns.len();
        let open = |w: &World, i: usize| !w.conns[i].closed;
        self.trace.push(Rec::Op(op, pick));
        match op % 13 {
            0 => {
                if n < MAX_CONNECTIONS {
                    self.accept(pick as u32 % SOURCES);
                }
            }
            1..=3 => {
                // Bytes arrive (not after the peer's EOF, not on a closed socket).
                if n == 0 || !open(self, pick % n) || self.conns[pick % n].eof {
                    return;
                }
                let i = pick % n;
                let data = chunk(src);
                let c = &mut self.conns[i];
                let room = MAX_PENDING_INPUT - c.input.len();
                c.input.extend_from_slice(&data[..data.len().min(room)]);
                self.offer(i, self.now);
                self.drain(i, op != 3);
            }
            4 => {
                if n == 0 || !open(self, pick % n) || self.conns[pick % n].eof {
                    return;
                }
                let i = pick % n;
                let now = self.now;
                let c = &mut self.conns[i];
                c.seen = c.seen.max(now);
                c.eof = true;
                c.m.handle_eof(now);
                self.trace.push(Rec::Eof(i, c.m.is_finished()));
                self.drain(i, true);
            }
            5 | 6 => {
                if n == 0 || !open(self, pick % n) {
                    return;
                }
                let i = pick % n;
                self.answer(i, src);
                self.drain(i, true);
            }
            7 => {
                // Acknowledge the oldest transmit, then offer held-back input.
                if n == 0 || !open(self, pick % n) {
                    return;
                }
                let i = pick % n;
                self.ack(i);
                self.drain(i, false);
                if !self.conns[i].input.is_empty() && !self.conns[i].m.is_finished() {
                    self.offer(i, self.now);
                }
                self.drain(i, src.u8() & 1 == 0);
            }
            8 => {
                // Time passes; every connection whose deadline is due gets its timeout.
                let step = u64::from(src.u16()) * 8;
                self.now = self.now.saturating_add(Duration::from_millis(step));
                for i in 0..n {
                    let due = self.conns[i]
                        .m
                        .poll_timeout()
                        .is_some_and(|d| d.at <= self.now);
                    if due && open(self, i) {
                        self.timeout(i, self.now);
                        self.drain(i, true);
                    }
                }
            }
            9 => {
                // Jump to one connection's deadline.
                if n == 0 || !open(self, pick % n) {
                    return;
                }
                let i = pick % n;
                if let Some(d) = self.conns[i].m.poll_timeout() {
                    self.now = self.now.max(d.at);
                    self.timeout(i, self.now);
                    self.drain(i, true);
                }
            }
            10 => {
                // A spurious timeout, sometimes with an instant from the past.
                if n == 0 || !open(self, pick % n) {
                    return;
                }
                let i = pick % n;
                let back = Duration::from_millis(u64::from(src.u8()) * 10);
                let at = self.now.saturating_sub(back).max(self.conns[i].input_at);
                self.timeout(i, at);
                self.drain(i, true);
            }
            11 => {
                if n == 0 {
                    return;
                }
                let i = pick % n;
                self.close(i);
            }
            _ => {
                // The driver closes every finished connection.
                for i in 0..n {
                    if open(self, i) && self.conns[i].m.is_finished() {
                        self.close(i);
                    }
                }
            }
        }
    }
}

/// A `'static` one-element slice for a status (every status a server sends is below 1000).
fn leak_status(status: u16) -> &'static u16 {
    static STATUSES: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    let all = STATUSES.get_or_init(|| (0..1000).collect());
    &all[usize::from(status).min(999)]
}

/// The `server_connection` property (see the module docs and docs/fuzzing.md).
pub fn server_connection(data: &[u8]) {
    let mut src = Src::new(data);
    let c = src.u8();
    let s = src.u8();
    let config = Arc::new(server_config(s));
    let trace = std::env::var_os("PEERBLOCK_FUZZ_TRACE").is_some();
    let mut worlds = [
        World::new(false, admission_config(c), config.clone()),
        World::new(true, admission_config(c), config),
    ];
    for _ in 0..MAX_OPS {
        if src.is_empty() {
            break;
        }
        let op = src.u8();
        // Both worlds read the same operation's arguments.
        let mut twin = src.clone();
        worlds[0].step(op, &mut src);
        worlds[1].step(op, &mut twin);
        assert_eq!(
            src.remaining(),
            twin.remaining(),
            "the worlds read different arguments"
        );
        for w in &mut worlds {
            w.check_admission();
        }
        let [a, b] = &mut worlds;
        if trace {
            eprintln!("op {op}: {:#?}", a.trace);
        }
        assert_eq!(
            a.trace, b.trace,
            "handle_input and read_buf/handle_read disagree"
        );
        a.trace.clear();
        b.trace.clear();
    }
    for w in &mut worlds {
        for i in 0..w.conns.len() {
            w.close(i);
            // Idempotent: a second close releases nothing more.
            w.close(i);
        }
        w.check_admission();
        let a = &w.admission;
        assert_eq!(
            a.sessions(),
            0,
            "sessions left after every connection closed"
        );
        assert_eq!(
            a.requests(),
            0,
            "requests left after every connection closed"
        );
        assert_eq!(
            a.inflight_bytes(),
            0,
            "bytes left after every connection closed"
        );
        assert_eq!(
            a.refusals(),
            0,
            "refusal slots left after every connection closed"
        );
        for s in 0..SOURCES {
            assert_eq!(a.source_sessions(&s), 0);
            assert_eq!(a.source_inflight_bytes(&s), 0);
        }
        if a.config().rate.is_none() {
            assert_eq!(
                a.tracked_sources(),
                0,
                "a source entry outlived its last ticket"
            );
        }
    }
}
