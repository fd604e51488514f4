//! The `exchange` property: arbitrary operation sequences on a chain of [`Exchange`]s
//! over one (re-dialled or pooled) connection.
//!
//! The input is a config byte pair, then operations (one opcode byte and its arguments
//! each). Every operation is applied to two identical worlds: one feeds the peer's bytes
//! with `handle_input`, the other with `read_buf` + `handle_read`; everything they report
//! must be the same. A model of the current exchange checks the driving contract of
//! `core/src/client/exchange.rs` and `docs/exchange.md`.

use bytes::BytesMut;
use peerblock_core::client::{
    BlockRequest, ClientConfig, ClientEvent, Connection, ConnectionFate, Deadlines, Ending,
    Exchange, ExchangeError, ExchangeRequest, Link, RequestTimeout,
};
use peerblock_core::http::{READ_WINDOW_BYTES, RESPONSE_BUFFER_BYTES};
use peerblock_core::refusal::{self, Refusal, RefusalReason};
use peerblock_core::roster::MAX_ROSTER_BYTES;
use peerblock_core::time::{Duration, Instant};
use peerblock_core::wire::BlockPath;

use crate::ops::{input_through, read_through, Src, Window};

/// Operations per run at most.
const MAX_OPS: usize = 256;
/// Received bytes the driver holds back at most (more is dropped, as a driver with a full
/// receive buffer stops reading the socket).
const MAX_PENDING_INPUT: usize = 64 * 1024;
/// Largest block body a template response carries.
const MAX_TEMPLATE_BODY: u64 = 8 * 1024;

/// What the current exchange asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Get,
    Validated { expected: u64, validate: bool },
    Roster,
}

/// The current exchange and what the model knows about it.
struct Ex {
    m: Exchange,
    kind: Kind,
    /// `Done` was emitted.
    done: bool,
    /// `Head` was emitted.
    head: bool,
    /// `Validate` was emitted (with the body's length).
    validate: Option<usize>,
    /// The validator's verdict given while validating.
    verdict: Option<bool>,
    /// Transmits handed out.
    transmits: usize,
    /// Latest instant the exchange was given.
    seen: Instant,
    /// Latest instant of an input offer. The zero-copy world's machine may not have seen
    /// it (no window lent), so a timeout never goes below it: both worlds' machines then
    /// clamp to the same instant.
    input_at: Instant,
}

impl Window for Exchange {
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
    New(Kind, bool),
    Took(usize),
    /// A `ClientEvent` (not `PartialEq`), in its debug form.
    Event(String),
    Transmit(bytes::Bytes),
    Timeout(Instant, Option<Instant>),
    Pooled(bool),
}

/// One of the two worlds.
struct World {
    zero_copy: bool,
    config: ClientConfig,
    now: Instant,
    ex: Option<Ex>,
    /// A connection handed back by the last exchange.
    pool: Option<Connection>,
    /// The peer's bytes not yet taken.
    input: Vec<u8>,
    /// The peer closed the current connection.
    peer_eof: bool,
    trace: Vec<Rec>,
}

fn client_config(a: u8, b: u8) -> ClientConfig {
    let ms = |bits: u8| Duration::from_millis(200 + 700 * u64::from(bits & 7));
    ClientConfig {
        deadlines: Deadlines {
            dial: ms(a),
            response_header: ms(a >> 3),
            request: if a & 0x40 != 0 {
                RequestTimeout::Caller
            } else {
                RequestTimeout::After(ms(b))
            },
        },
        max_refusal_cooldown: Duration::from_secs(1 + u64::from(b >> 3 & 15)),
        max_body: 1 + u64::from(b >> 4) * 700,
    }
}

/// A chunk of the peer's bytes: a template response (valid or not, sized around what the
/// exchange expects) or raw bytes.
fn chunk(src: &mut Src<'_>, expected: u64) -> Vec<u8> {
    let pick = src.u8();
    let arg = src.u16();
    let len = match arg % 4 {
        0 => expected,
        1 => expected.saturating_sub(1),
        2 => expected + 1,
        _ => u64::from(arg >> 2),
    }
    .min(MAX_TEMPLATE_BODY);
    let body = vec![b'b'; len as usize];
    let with_body = |head: String| {
        let mut v = head.into_bytes();
        v.extend_from_slice(&body);
        v
    };
    match pick % 16 {
        0..=2 => with_body(format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n")),
        3 => {
            let cut = body.len() / 2;
            let mut v = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for part in [&body[..cut], &body[cut..]] {
                if !part.is_empty() {
                    v.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                    v.extend_from_slice(part);
                    v.extend_from_slice(b"\r\n");
                }
            }
            v.extend_from_slice(b"0\r\n\r\n");
            v
        }
        4 => b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\nX-Peerblock-Load: 3\r\n\r\nnot found\n"
            .to_vec(),
        5 => {
            let reasons = [
                RefusalReason::Sessions,
                RefusalReason::SourceSessions,
                RefusalReason::Requests,
                RefusalReason::Rate,
                RefusalReason::InflightBytes,
                RefusalReason::SourceInflightBytes,
            ];
            let mut out = BytesMut::new();
            refusal::encode(
                &Refusal {
                    reason: reasons[usize::from(arg) % reasons.len()],
                    retry_after: Duration::from_millis(u64::from(arg) * 10),
                },
                Some("peer-a"),
                (arg & 1 == 0).then_some(u32::from(arg)),
                &mut out,
            );
            out.to_vec()
        }
        6 => format!(
            "HTTP/1.1 502 Bad Gateway\r\nX-DART-Upstream-Status: {}\r\nContent-Length: 0\r\n\r\n",
            arg % 1000
        )
        .into_bytes(),
        7 => b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(),
        8 => with_body("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_owned()),
        9 => {
            let json = br#"{"epoch":"4","members":[{"id":"peer-a","addr":"10.0.0.2:7000","weight":1}]}"#;
            let mut v = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-DART-Node: peer-a\r\n\r\n",
                json.len()
            )
            .into_bytes();
            v.extend_from_slice(json);
            v
        }
        10 => with_body(format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\nX-Peerblock-Load: 9\r\n\r\n"
        )),
        11 => {
            let v = with_body(format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n"));
            let cut = usize::from(arg) % v.len();
            v[..cut].to_vec()
        }
        12 => b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\n\r\nerr".to_vec(),
        _ => src.bytes(usize::from(arg % 512)).to_vec(),
    }
}

impl World {
    fn new(zero_copy: bool, config: ClientConfig) -> Self {
        World {
            zero_copy,
            config,
            now: Instant::ZERO,
            ex: None,
            pool: None,
            input: Vec::new(),
            peer_eof: false,
            trace: Vec::new(),
        }
    }

    /// The body limit the current exchange reads with.
    fn limit(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Get => self.config.max_body,
            Kind::Validated { expected, .. } => expected,
            Kind::Roster => MAX_ROSTER_BYTES as u64,
        }
    }

    fn start(&mut self, src: &mut Src<'_>) {
        let pick = src.u8();
        let arg = src.u16();
        let kind = match pick % 4 {
            0 => Kind::Get,
            1 | 2 => Kind::Validated {
                expected: u64::from(arg % 4096),
                validate: pick & 0x10 != 0,
            },
            _ => Kind::Roster,
        };
        let path = format!("/peer/v1/block/{arg:064x}/{pick}");
        let block = BlockRequest::new(BlockPath::parse(path.as_bytes()).expect("a valid path"));
        let host = "10.0.0.2:7000";
        let mut request = match kind {
            Kind::Get => ExchangeRequest::get(host, block),
            Kind::Validated { expected, validate } => {
                ExchangeRequest::get_validated(host, block, expected, validate)
            }
            Kind::Roster => ExchangeRequest::roster(host, None),
        };
        if pick & 0x20 != 0 {
            // The caller's own deadline, sometimes already past.
            let at = self
                .now
                .saturating_add(Duration::from_millis(u64::from(src.u8()) * 20))
                .saturating_sub(Duration::from_millis(500));
            request = request.with_deadline(at);
        }
        let pooled = pick & 0x40 != 0 && self.pool.is_some() && !self.peer_eof;
        let link = if pooled {
            Link::Pooled(self.pool.take().expect("pooled"))
        } else {
            // A fresh connection: what the old one held is gone.
            self.pool = None;
            self.input.clear();
            self.peer_eof = false;
            Link::Dial
        };
        let m = Exchange::new(self.now, &self.config, request, link)
            .expect("the fuzz client config and request are valid");
        self.trace.push(Rec::New(kind, pooled));
        self.ex = Some(Ex {
            m,
            kind,
            done: false,
            head: false,
            validate: None,
            verdict: None,
            transmits: 0,
            seen: self.now,
            input_at: self.now,
        });
    }

    fn ex(&mut self) -> Option<&mut Ex> {
        let now = self.now;
        let ex = self.ex.as_mut()?;
        ex.seen = ex.seen.max(now);
        Some(ex)
    }

    /// Drains events (and, if `transmit`, transmits) and checks them against the model.
    fn drain(&mut self, transmit: bool) {
        let now = self.now;
        let Some(ex) = self.ex.as_mut() else {
            return;
        };
        while let Some(event) = ex.m.poll_event() {
            self.trace.push(Rec::Event(format!("{event:?}")));
            assert!(!ex.done, "an event after Done: {event:?}");
            match event {
                ClientEvent::Head { .. } => {
                    assert!(!ex.head, "a second Head");
                    assert!(ex.validate.is_none(), "Head after Validate");
                    ex.head = true;
                }
                ClientEvent::Validate { body } => {
                    assert!(
                        matches!(ex.kind, Kind::Validated { validate: true, .. }),
                        "Validate for an exchange without a validator ({:?})",
                        ex.kind
                    );
                    assert!(ex.head, "Validate before Head");
                    assert!(ex.validate.is_none(), "a second Validate");
                    if let Kind::Validated { expected, .. } = ex.kind {
                        assert_eq!(body.len() as u64, expected, "Validate body length");
                    }
                    ex.validate = Some(body.len());
                }
                ClientEvent::Done(outcome) => {
                    ex.done = true;
                    match &outcome.ending {
                        Ending::Block(body) => {
                            assert!(ex.head, "a block without a Head");
                            match ex.kind {
                                Kind::Get => assert!(
                                    body.len() as u64 <= self.config.max_body,
                                    "get body {} above max_body {}",
                                    body.len(),
                                    self.config.max_body
                                ),
                                Kind::Validated { expected, validate } => {
                                    assert_eq!(body.len() as u64, expected, "validated body");
                                    if validate {
                                        assert_eq!(
                                            ex.verdict,
                                            Some(true),
                                            "a block delivered without a valid verdict"
                                        );
                                    }
                                }
                                Kind::Roster => panic!("a block ending for a roster fetch"),
                            }
                        }
                        Ending::Roster(_) => {
                            assert_eq!(ex.kind, Kind::Roster, "a roster ending for a block GET");
                        }
                        Ending::Failed(ExchangeError::Validation) => {
                            assert_eq!(ex.verdict, Some(false), "Validation failure without one");
                        }
                        _ => {}
                    }
                    assert!(ex.m.is_finished(), "Done but not finished");
                    let reuse = outcome.connection == ConnectionFate::Reuse;
                    let conn = ex.m.take_connection();
                    assert_eq!(
                        conn.is_some(),
                        reuse,
                        "take_connection gives a connection iff the outcome says Reuse"
                    );
                    assert!(ex.m.take_connection().is_none(), "a second connection");
                    self.trace.push(Rec::Pooled(reuse));
                    if conn.is_none() {
                        // The driver closes the socket.
                        self.input.clear();
                        self.peer_eof = false;
                    }
                    self.pool = conn;
                }
                other => panic!("an event this harness does not know: {other:?}"),
            }
        }
        assert_eq!(
            ex.m.is_finished(),
            ex.done,
            "is_finished without Done having been emitted (or the reverse)"
        );
        if ex.done {
            assert!(ex.m.poll_timeout().is_none(), "a deadline after Done");
        }
        if transmit {
            let finished = ex.m.is_finished();
            while let Some(t) = ex.m.poll_transmit(now) {
                assert!(!finished, "a transmit after the outcome");
                ex.transmits += 1;
                assert_eq!(ex.transmits, 1, "a second request transmit");
                assert_eq!(t.status, None, "a request has no status");
                assert!(t.refusal.is_none() && t.body.is_empty());
                assert!(!t.close.ends_connection(), "a request keeps the connection");
                self.trace.push(Rec::Transmit(t.head));
            }
            // poll_transmit may end the exchange (a pooled connection that was closed).
            self.drain(false);
        }
    }

    fn offer(&mut self) {
        let now = self.now;
        let zero_copy = self.zero_copy;
        // After the outcome the bytes belong to the next exchange on the connection.
        let Some(kind) = self.ex.as_ref().filter(|e| !e.done).map(|e| e.kind) else {
            return;
        };
        // The decoder's buffer bound (docs: RESPONSE_BUFFER_BYTES, beyond it only up to the
        // body limit), also while validating a response that closed the decoder.
        let bound = READ_WINDOW_BYTES.min(
            RESPONSE_BUFFER_BYTES.max(usize::try_from(self.limit(kind) + 1).unwrap_or(usize::MAX)),
        );
        let input = std::mem::take(&mut self.input);
        let Some(ex) = self.ex() else {
            return;
        };
        ex.input_at = now;
        let taken = if zero_copy {
            read_through(&mut ex.m, now, &input, bound)
        } else {
            // A driver stops feeding a finished exchange (its `read_buf` is `None` then).
            let m = &mut ex.m;
            input_through(&input, |d| {
                if m.is_finished() {
                    0
                } else {
                    m.handle_input(now, d)
                }
            })
        };
        if ex.m.is_finished() {
            // Once finished, both paths report every byte taken (discarded).
            assert_eq!(
                ex.m.handle_input(now, b"late"),
                4,
                "handle_input after the outcome"
            );
            assert_eq!(ex.m.handle_read(now, 4), 4, "handle_read after the outcome");
        }
        self.input = input;
        self.input.drain(..taken);
        self.trace.push(Rec::Took(taken));
    }

    fn timeout(&mut self, at: Instant) {
        let Some(ex) = self.ex() else {
            return;
        };
        ex.seen = ex.seen.max(at);
        ex.m.handle_timeout(at);
        let next = ex.m.poll_timeout();
        if let Some(d) = next {
            assert!(
                d.at > ex.seen,
                "deadline {d:?} not after {:?} once handle_timeout ran",
                ex.seen
            );
        }
        self.trace.push(Rec::Timeout(at, next.map(|d| d.at)));
    }

    /// Applies one operation.
    fn step(&mut self, op: u8, src: &mut Src<'_>) {
        let pick = usize::from(src.u8());
        self.trace.push(Rec::Op(op, pick));
        let now = self.now;
        match op % 14 {
            0 => {
                if self.ex.as_ref().is_none_or(|e| e.done) {
                    self.start(src);
                    self.drain(pick & 1 == 0);
                }
            }
            1 => {
                if let Some(ex) = self.ex() {
                    ex.m.handle_connected(now);
                }
                self.drain(pick & 1 == 0);
            }
            2 => {
                if let Some(ex) = self.ex() {
                    ex.m.handle_dial_failed(now);
                }
                self.drain(true);
            }
            3 => self.drain(true),
            4 => {
                if let Some(ex) = self.ex() {
                    ex.m.handle_transmitted(now);
                }
                self.drain(true);
            }
            5 | 6 => {
                if self.peer_eof {
                    return;
                }
                let expected = match self.ex.as_ref().map(|e| e.kind) {
                    Some(Kind::Validated { expected, .. }) => expected,
                    Some(Kind::Get) => self.config.max_body,
                    _ => 64,
                };
                let data = chunk(src, expected);
                let room = MAX_PENDING_INPUT - self.input.len();
                self.input.extend_from_slice(&data[..data.len().min(room)]);
                self.offer();
                self.drain(true);
            }
            7 => {
                // Offer held-back input again (after a drain).
                if !self.input.is_empty() {
                    self.offer();
                }
                self.drain(true);
            }
            8 => {
                if self.peer_eof {
                    return;
                }
                self.peer_eof = true;
                if let Some(ex) = self.ex() {
                    ex.m.handle_eof(now);
                }
                self.drain(true);
            }
            9 => {
                let valid = pick & 1 == 0;
                if let Some(ex) = self.ex() {
                    if ex.validate.is_some() && !ex.done && ex.verdict.is_none() {
                        ex.verdict = Some(valid);
                    }
                    ex.m.handle_validated(now, valid);
                }
                self.drain(true);
            }
            10 => {
                if let Some(ex) = self.ex() {
                    ex.m.cancel(now);
                    ex.m.cancel(now);
                }
                self.drain(true);
            }
            11 => {
                // Time passes; the exchange gets its timeout if due.
                self.now = self
                    .now
                    .saturating_add(Duration::from_millis(pick as u64 * 30));
                let due = self
                    .ex
                    .as_ref()
                    .and_then(|e| e.m.poll_timeout())
                    .is_some_and(|d| d.at <= self.now);
                if due {
                    self.timeout(self.now);
                }
                self.drain(true);
            }
            12 => {
                // Jump to the deadline.
                if let Some(d) = self.ex.as_ref().and_then(|e| e.m.poll_timeout()) {
                    self.now = self.now.max(d.at);
                    self.timeout(self.now);
                }
                self.drain(true);
            }
            _ => {
                // A spurious timeout, sometimes with an instant from the past; and an early
                // take_connection, which gives nothing before the outcome.
                let input_at = self.ex.as_ref().map_or(Instant::ZERO, |e| e.input_at);
                let at = self
                    .now
                    .saturating_sub(Duration::from_millis(pick as u64 * 10))
                    .max(input_at);
                self.timeout(at);
                if let Some(ex) = self.ex() {
                    if !ex.m.is_finished() {
                        assert!(ex.m.take_connection().is_none(), "a connection before Done");
                    }
                }
                self.drain(true);
            }
        }
    }
}

/// The `exchange` property (see the module docs and docs/fuzzing.md).
pub fn exchange(data: &[u8]) {
    let mut src = Src::new(data);
    let config = client_config(src.u8(), src.u8());
    let mut worlds = [World::new(false, config), World::new(true, config)];
    let trace = std::env::var_os("PEERBLOCK_FUZZ_TRACE").is_some();
    for _ in 0..MAX_OPS {
        if src.is_empty() {
            break;
        }
        let op = src.u8();
        let mut twin = src.clone();
        worlds[0].step(op, &mut src);
        worlds[1].step(op, &mut twin);
        assert_eq!(
            src.remaining(),
            twin.remaining(),
            "the worlds read different arguments"
        );
        let [a, b] = &mut worlds;
        if trace {
            eprintln!("{:?}", a.trace);
        }
        assert_eq!(
            a.trace, b.trace,
            "handle_input and read_buf/handle_read disagree"
        );
        a.trace.clear();
        b.trace.clear();
    }
    for w in &mut worlds {
        // The caller gives up: every exchange ends with exactly one Done.
        let now = w.now;
        if let Some(ex) = w.ex() {
            ex.m.cancel(now);
        }
        w.drain(false);
        if let Some(ex) = &w.ex {
            assert!(ex.done, "an exchange ended without Done");
        }
    }
}
