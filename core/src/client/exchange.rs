//! The client exchange machine: one request to one peer, from dial to classified outcome.

use bytes::{Bytes, BytesMut};

use super::deadlines::{ClientTimer, RequestTimeout, TimerTable};
use super::outcome::{
    BreakerPath, ConnectionFate, Ending, ExchangeError, ExchangeOutcome, ProtocolError,
    RosterAnswer,
};
use super::range::{
    head_validator, is_etag, ContentRange, ContentRangeError, ObjectChange, ObjectRange,
    RangeAnswer,
};
use super::{ClientConfig, ExchangeConfigError};
use crate::http::{
    BodyLimit, OutgoingRequest, RangeRequest, RequestTarget, ResponseDecoder, ResponseError,
    ResponseEvent, ResponseHead,
};
use crate::refusal::PeerRefusal;
use crate::roster::{Roster, MAX_ROSTER_BYTES};
use crate::time::{Deadline, Instant};
use crate::transmit::{Close, Transmit};
use crate::wire::{BlockPath, Hop};

/// A live HTTP/1.1 connection's client-side state, kept between exchanges.
///
/// An exchange that ends with [`ConnectionFate::Reuse`] hands it back through
/// [`Exchange::take_connection`]; start the next exchange on the same socket with
/// [`Link::Pooled`]. It holds the response decoder (and
/// so its receive buffer), which is why a reused connection costs no allocation.
#[derive(Debug)]
pub struct Connection {
    decoder: ResponseDecoder,
    exchanges: u64,
}

impl Connection {
    fn new() -> Self {
        Connection {
            decoder: ResponseDecoder::new(),
            exchanges: 0,
        }
    }

    /// Exchanges completed on this connection so far.
    pub fn exchanges(&self) -> u64 {
        self.exchanges
    }
}

/// How the exchange reaches the peer.
#[derive(Debug)]
pub enum Link {
    /// The driver is dialing a new connection now: the dial deadline runs until
    /// [`Exchange::handle_connected`] (or [`Exchange::handle_dial_failed`]).
    Dial,
    /// An idle connection from the driver's pool, returned by an earlier exchange.
    Pooled(Connection),
}

/// A block to fetch.
#[derive(Clone, Copy, Debug)]
pub struct BlockRequest<'a> {
    /// Which block.
    pub path: BlockPath,
    /// `X-DART-Origin`: lets a relay-capable peer fetch the block on our behalf.
    pub origin: Option<&'a str>,
    /// `X-DART-Hop`: relay depth; omitted on the wire when zero.
    pub hop: Hop,
}

impl BlockRequest<'_> {
    /// A cache-only request for `path` (no origin, hop 0).
    pub fn new(path: BlockPath) -> BlockRequest<'static> {
        BlockRequest {
            path,
            origin: None,
            hop: Hop(0),
        }
    }
}

/// The caller's self-identification on a roster request.
#[derive(Clone, Copy, Debug)]
pub struct Caller<'a> {
    /// Our node id (`X-DART-Node`).
    pub id: &'a str,
    /// Our advertised listen address (`X-DART-Peer-Addr`).
    pub addr: &'a str,
    /// Our signed record (`X-Peerblock-Record`, [`RecordSig::to_header`](crate::roster::RecordSig::to_header)); `None`
    /// sends none (an unverified caller, as a reference peer is).
    pub record: Option<&'a str>,
}

/// What an exchange asks for.
#[derive(Clone, Copy, Debug)]
pub enum RequestKind<'a> {
    /// `get`: the block, any length up to [`ClientConfig::max_body`].
    Get(BlockRequest<'a>),
    /// `get_validated`: the block of exactly `expected` bytes, then (if `validate`) the
    /// caller's validator, sequenced through [`ClientEvent::Validate`].
    GetValidated {
        /// Which block.
        block: BlockRequest<'a>,
        /// The exact length the block must have.
        expected: u64,
        /// Whether to hand the body to the caller's validator before success.
        validate: bool,
    },
    /// `get_checked`: the block, any length up to [`ClientConfig::max_body`], then the
    /// caller's validator (sequenced through [`ClientEvent::Validate`]): for a record whose
    /// length is not known in advance but whose content can be checked, such as a
    /// manifest against its content key.
    GetChecked(BlockRequest<'a>),
    /// `fetch_roster`: the peer's roster. Takes the breaker's roster path.
    Roster {
        /// Who we are, so the peer can learn us; `None` is an anonymous fetch.
        caller: Option<Caller<'a>>,
    },
    /// One byte range of an object on a plain HTTP/1.1 server (an object URL's origin,
    /// not a peer): `GET <target>` with `Range` and the object's precondition, classified
    /// by the table on [`RangeAnswer`](super::RangeAnswer). `host` is the URL's `Host` value. Takes the data
    /// path of the breaker (a driver may give origin fetches a breakerless client).
    Range(ObjectRange<'a>),
}

/// One exchange's request.
#[derive(Clone, Copy, Debug)]
pub struct ExchangeRequest<'a> {
    /// The peer's `host:port` (the `Host` header, and the address a roster responder that
    /// omits itself is repaired with).
    pub host: &'a str,
    /// What to ask for.
    pub kind: RequestKind<'a>,
    /// The caller's own deadline: reaching it ends the exchange as [`Ending::Cancelled`].
    pub caller_deadline: Option<Instant>,
}

impl<'a> ExchangeRequest<'a> {
    /// `get` of `block` from `host`.
    pub fn get(host: &'a str, block: BlockRequest<'a>) -> Self {
        ExchangeRequest {
            host,
            kind: RequestKind::Get(block),
            caller_deadline: None,
        }
    }

    /// `get_validated` of `block` from `host`: exactly `expected` bytes, then the
    /// validator if `validate`.
    pub fn get_validated(
        host: &'a str,
        block: BlockRequest<'a>,
        expected: u64,
        validate: bool,
    ) -> Self {
        ExchangeRequest {
            host,
            kind: RequestKind::GetValidated {
                block,
                expected,
                validate,
            },
            caller_deadline: None,
        }
    }

    /// `get_checked` of `block` from `host`: any length up to the body cap, then the
    /// validator.
    pub fn get_checked(host: &'a str, block: BlockRequest<'a>) -> Self {
        ExchangeRequest {
            host,
            kind: RequestKind::GetChecked(block),
            caller_deadline: None,
        }
    }

    /// One byte range of an object at `host` (the URL's `Host` value).
    pub fn range(host: &'a str, range: ObjectRange<'a>) -> Self {
        ExchangeRequest {
            host,
            kind: RequestKind::Range(range),
            caller_deadline: None,
        }
    }

    /// `fetch_roster` from `host`, identifying ourselves as `caller` (or anonymously).
    pub fn roster(host: &'a str, caller: Option<Caller<'a>>) -> Self {
        ExchangeRequest {
            host,
            kind: RequestKind::Roster { caller },
            caller_deadline: None,
        }
    }

    /// The same request bounded by the caller's own deadline.
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.caller_deadline = Some(deadline);
        self
    }
}

/// What the machine asks of the driver besides bytes.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientEvent {
    /// The final response head arrived (interim `1xx` heads are skipped): the exchange is
    /// making progress. Emitted at most once, before any other event of the response.
    /// A driver running a read tells the read machine (its GET progress input), so a GET
    /// whose bytes are flowing is not hedged as if it were silent.
    Head {
        /// The response status.
        status: u16,
    },
    /// Run the caller's validator on `body` (exactly the expected length), then report
    /// with [`Exchange::handle_validated`]. Timers keep running meanwhile.
    Validate {
        /// The complete body.
        body: Bytes,
    },
    /// The exchange is over. Emitted exactly once.
    Done(ExchangeOutcome),
}

#[derive(Debug)]
enum Want {
    Block {
        validate: bool,
    },
    Roster {
        host: String,
    },
    Range {
        start: u64,
        last: u64,
        total: Option<u64>,
        validator: Option<String>,
    },
}

#[derive(Debug)]
enum State {
    /// Waiting for the driver's dial.
    Dialing,
    /// Request queued for [`Exchange::poll_transmit`].
    Sending,
    /// Request handed to the driver (acknowledged or not); reading the response.
    Receiving,
    /// Body handed to the validator.
    Validating { body: Bytes },
    /// Outcome produced.
    Done,
}

/// One request to one peer, sans-IO.
///
/// # Driving contract
///
/// The same verbs as every machine in core (`docs/architecture.md`):
///
/// 1. Create with [`Exchange::new`] (it validates the config and the request): with
///    [`Link::Dial`] the driver dials now and reports
///    [`handle_connected`](Self::handle_connected) or
///    [`handle_dial_failed`](Self::handle_dial_failed); with [`Link::Pooled`] the request
///    is ready at once.
/// 2. Write what [`poll_transmit`](Self::poll_transmit) returns (one [`Transmit`]: the
///    request head, no body, [`Close::KeepOpen`]) and, once every byte of it is written,
///    acknowledge it with [`handle_transmitted`](Self::handle_transmitted). The
///    response-header deadline starts at that acknowledgement.
/// 3. Feed received bytes: read the socket into [`read_buf`](Self::read_buf) and report
///    with [`handle_read`](Self::handle_read), or hand a slice to
///    [`handle_input`](Self::handle_input). Both return how many bytes were taken (keep
///    the rest for after the next drain) and agree in every state: nothing before the
///    request is handed out, what the decoder takes while the response is read, and
///    everything (discarded) once the exchange is finished. The peer's close is
///    [`handle_eof`](Self::handle_eof).
/// 4. Drain [`poll_event`](Self::poll_event) until `None` after every input: a
///    [`ClientEvent::Head`] says the response head arrived; a [`ClientEvent::Validate`]
///    asks for the validator's verdict ([`handle_validated`](Self::handle_validated)); a
///    [`ClientEvent::Done`] carries the classified outcome and, if reusable, the
///    connection ([`take_connection`](Self::take_connection)).
/// 5. Wake at [`poll_timeout`](Self::poll_timeout) (a [`Deadline`] naming the
///    [`ClientTimer`]) and call [`handle_timeout`](Self::handle_timeout); spurious calls
///    are harmless. The caller may [`cancel`](Self::cancel) at any time (idempotent).
///    [`is_finished`](Self::is_finished) says the outcome has been produced.
///
/// Time never goes backwards: an earlier `now` than already seen is treated as the latest
/// seen. After the outcome every input is ignored (bytes are reported taken) and
/// `poll_timeout` is `None`.
#[derive(Debug)]
pub struct Exchange {
    config: ClientConfig,
    want: Want,
    limit: BodyLimit,
    path: BreakerPath,
    state: State,
    timers: TimerTable,
    latest: Instant,
    request: Option<Bytes>,
    connection: Option<Connection>,
    head: Option<ResponseHead>,
    event: Option<ClientEvent>,
    /// Started on a pooled connection.
    pooled: bool,
    /// Any response byte arrived.
    received: bool,
    /// The load the peer advertised in the response head, once it arrived.
    load: Option<u32>,
    /// The request was acknowledged as fully written: only then may the connection be
    /// reused (a half-written request on a pooled connection would corrupt the next).
    written: bool,
    /// A [`ClientEvent::Head`] waiting in `poll_event` (it precedes `event`).
    head_event: Option<u16>,
    /// The status whose body `limit` bounds: `200`, or `206` for a `Range` request.
    success: u16,
}

/// Bytes offered to the exchange: a slice, or `n` bytes read into the `read_buf` window.
#[derive(Clone, Copy)]
enum Input<'a> {
    Slice(&'a [u8]),
    Window(usize),
}

impl Input<'_> {
    fn len(self) -> usize {
        match self {
            Input::Slice(data) => data.len(),
            Input::Window(n) => n,
        }
    }
}

impl Exchange {
    /// Starts an exchange at `now`. Fails, with nothing reaching the wire, on local
    /// misuse: a `config` that [`ClientConfig::validate`] rejects (the error names the
    /// field) or a header value in `request` that cannot be sent (control characters).
    /// A caller deadline already past ends the exchange at once, as a cancellation.
    pub fn new(
        now: Instant,
        config: &ClientConfig,
        request: ExchangeRequest<'_>,
        link: Link,
    ) -> Result<Exchange, ExchangeConfigError> {
        config.validate()?;
        let mut buf = BytesMut::new();
        if let RequestKind::Range(range) = request.kind {
            let last = range.last().ok_or(ExchangeConfigError::Zero {
                field: "range.len",
                why: "an empty or overflowing range asks for no byte",
            })?;
            let (if_match, if_unmodified_since) = match range.validator {
                Some(v) if v.starts_with('"') => (Some(v), None),
                Some(v) if is_etag(v) => (None, None),
                Some(v) => (None, Some(v)),
                None => (None, None),
            };
            RangeRequest {
                target: range.target,
                host: request.host,
                first: range.start,
                last,
                if_match,
                if_unmodified_since,
            }
            .encode(&mut buf)?;
            let want = Want::Range {
                start: range.start,
                last,
                total: range.total,
                validator: range.validator.map(str::to_owned),
            };
            return Ok(Self::start(
                now,
                config,
                request.caller_deadline,
                link,
                (buf, want, BodyLimit::Exact(range.len), BreakerPath::Data),
                206,
            ));
        }
        let (outgoing, want, limit, path) = match request.kind {
            RequestKind::Get(block) => (
                block_request(request.host, &block),
                Want::Block { validate: false },
                BodyLimit::AtMost(config.max_body),
                BreakerPath::Data,
            ),
            RequestKind::GetChecked(block) => (
                block_request(request.host, &block),
                Want::Block { validate: true },
                BodyLimit::AtMost(config.max_body),
                BreakerPath::Data,
            ),
            RequestKind::GetValidated {
                block,
                expected,
                validate,
            } => (
                block_request(request.host, &block),
                Want::Block { validate },
                BodyLimit::Exact(expected),
                BreakerPath::Data,
            ),
            RequestKind::Roster { caller } => (
                OutgoingRequest {
                    target: RequestTarget::Roster,
                    host: request.host,
                    hop: None,
                    origin: None,
                    node: caller.map(|c| c.id),
                    peer_addr: caller.map(|c| c.addr),
                    record: caller.and_then(|c| c.record),
                    epoch: None,
                    close: false,
                },
                Want::Roster {
                    host: request.host.to_owned(),
                },
                BodyLimit::AtMost(MAX_ROSTER_BYTES as u64),
                BreakerPath::Roster,
            ),
            RequestKind::Range(_) => unreachable!("handled above"),
        };
        outgoing.encode(&mut buf)?;
        Ok(Self::start(
            now,
            config,
            request.caller_deadline,
            link,
            (buf, want, limit, path),
            200,
        ))
    }

    /// The machine for an encoded request (`new`'s second half).
    fn start(
        now: Instant,
        config: &ClientConfig,
        caller_deadline: Option<Instant>,
        link: Link,
        (buf, want, limit, path): (BytesMut, Want, BodyLimit, BreakerPath),
        success: u16,
    ) -> Exchange {
        let mut timers = TimerTable::default();
        if let RequestTimeout::After(d) = config.deadlines.request {
            timers.set(ClientTimer::Request, now + d);
        }
        if let Some(at) = caller_deadline {
            timers.set(ClientTimer::Caller, at);
        }
        let pooled = matches!(link, Link::Pooled(_));
        let (state, connection) = match link {
            Link::Dial => {
                timers.set(ClientTimer::Dial, now + config.deadlines.dial);
                (State::Dialing, None)
            }
            Link::Pooled(c) => (State::Sending, Some(c)),
        };
        let mut exchange = Exchange {
            config: *config,
            want,
            limit,
            path,
            state,
            timers,
            latest: now,
            request: Some(buf.freeze()),
            connection,
            head: None,
            event: None,
            pooled,
            received: false,
            load: None,
            written: false,
            head_event: None,
            success,
        };
        // A deadline already in the past (a caller deadline before now) ends it at once.
        exchange.handle_timeout(now);
        exchange
    }

    /// After a [`ClientEvent::Done`] whose outcome says [`ConnectionFate::Reuse`]: the
    /// connection, to pool. `None` otherwise (and on a second call).
    pub fn take_connection(&mut self) -> Option<Connection> {
        if self.is_finished() {
            self.connection.take()
        } else {
            None
        }
    }

    /// How the driver takes the breaker permit for this exchange.
    pub fn breaker_path(&self) -> BreakerPath {
        self.path
    }

    /// Whether the outcome has been produced (it may still be waiting in `poll_event`).
    pub fn is_finished(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn clamp(&mut self, now: Instant) -> Instant {
        self.latest = self.latest.max(now);
        self.latest
    }

    /// The dial succeeded. Ignored unless dialing.
    pub fn handle_connected(&mut self, now: Instant) {
        self.clamp(now);
        if matches!(self.state, State::Dialing) {
            self.timers.stop(ClientTimer::Dial);
            self.connection = Some(Connection::new());
            self.state = State::Sending;
        }
    }

    /// The dial failed (connection refused, host unreachable). Ignored unless dialing.
    pub fn handle_dial_failed(&mut self, now: Instant) {
        self.clamp(now);
        if matches!(self.state, State::Dialing) {
            self.finish(Ending::Failed(ExchangeError::DialFailed));
        }
    }

    /// The request to write, once: its head (the body is empty), `status` `None`, and
    /// [`Close::KeepOpen`]. Acknowledge it with
    /// [`handle_transmitted`](Self::handle_transmitted) once fully written. `None` before
    /// the connection is up, after the request was handed out, and once finished. A
    /// pooled connection that can no longer carry a request finishes the exchange as
    /// [`ExchangeError::Closed`] here.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.clamp(now);
        if !matches!(self.state, State::Sending) {
            return None;
        }
        let request = self.request.take()?;
        let (limit, success) = (self.limit, self.success);
        let conn = self.connection.as_mut()?;
        let expected = if success == 200 {
            conn.decoder.expect(limit)
        } else {
            conn.decoder.expect_status(limit, success)
        };
        if expected.is_err() {
            // A pooled connection that cannot take another request: it was closed.
            self.finish(Ending::Failed(ExchangeError::Closed));
            return None;
        }
        self.state = State::Receiving;
        Some(Transmit {
            head: request,
            body: Bytes::new(),
            status: None,
            refusal: None,
            block: false,
            close: Close::KeepOpen,
            external: None,
        })
    }

    /// The request from [`poll_transmit`](Self::poll_transmit) is fully written. Starts
    /// the response-header deadline (unless the head already arrived): from here on the
    /// wait is the peer's. Only an acknowledged request lets the connection be reused.
    /// Ignored when no request is outstanding (a spurious or repeated acknowledgement).
    pub fn handle_transmitted(&mut self, now: Instant) {
        let now = self.clamp(now);
        let outstanding = self.request.is_none()
            && !self.written
            && matches!(self.state, State::Receiving | State::Validating { .. });
        if !outstanding {
            return;
        }
        self.written = true;
        if matches!(self.state, State::Receiving) && self.head.is_none() {
            self.timers.set(
                ClientTimer::ResponseHeader,
                now + self.config.deadlines.response_header,
            );
        }
    }

    /// Bytes received from the peer. Returns how many were taken; keep the rest and offer
    /// them again after draining events. Before the request is handed out nothing is
    /// taken (0); once the exchange is finished every byte is discarded and reported as
    /// taken. Always the same count as [`handle_read`](Self::handle_read) would give.
    pub fn handle_input(&mut self, now: Instant, data: &[u8]) -> usize {
        self.take(now, Input::Slice(data))
    }

    /// A window to read the peer's bytes into directly, saving the copy
    /// [`handle_input`](Self::handle_input) makes into the decoder's buffer (see
    /// [`ResponseDecoder::read_buf`](crate::http::ResponseDecoder::read_buf)). Write what
    /// the socket read at its start, then call [`handle_read`](Self::handle_read).
    /// `None` (never an empty window, which a read would report as end of stream) when
    /// nothing would be taken now: before the request is handed out, once finished, or
    /// with a full buffer (drain events first).
    pub fn read_buf(&mut self) -> Option<&mut [u8]> {
        match (&self.state, self.connection.as_mut()) {
            (State::Receiving | State::Validating { .. }, Some(conn)) => {
                let window = conn.decoder.read_buf();
                if window.is_empty() {
                    None
                } else {
                    Some(window)
                }
            }
            _ => None,
        }
    }

    /// `n` bytes were read into the [`read_buf`](Self::read_buf) window: the same as
    /// [`handle_input`](Self::handle_input) with those bytes, without the copy, and the
    /// same return in every state (never more than the window held while receiving).
    pub fn handle_read(&mut self, now: Instant, n: usize) -> usize {
        self.take(now, Input::Window(n))
    }

    fn take(&mut self, now: Instant, input: Input<'_>) -> usize {
        self.clamp(now);
        match self.state {
            // Nothing sent yet: not now (the driver keeps the bytes).
            State::Dialing | State::Sending => return 0,
            // Finished: anything more is discarded.
            State::Done => return input.len(),
            State::Receiving | State::Validating { .. } => {}
        }
        let Some(conn) = self.connection.as_mut() else {
            // Receiving always has a connection (the request went out on one).
            return input.len();
        };
        let taken = match input {
            Input::Slice(data) => conn.decoder.feed(data),
            Input::Window(n) => conn.decoder.advance(n),
        };
        if matches!(self.state, State::Receiving) {
            self.received |= taken > 0;
            self.drive();
        }
        // Validating: the response is complete; stray bytes stay buffered, which makes
        // the decoder non-idle, so the connection is not reused.
        taken
    }

    /// The peer closed its side (or the connection broke).
    pub fn handle_eof(&mut self, now: Instant) {
        self.clamp(now);
        match self.state {
            State::Receiving => {
                if let Some(conn) = self.connection.as_mut() {
                    conn.decoder.handle_eof();
                }
                self.drive();
                if matches!(self.state, State::Receiving) {
                    self.finish(Ending::Failed(ExchangeError::Closed));
                }
            }
            State::Sending => {
                self.finish(Ending::Failed(ExchangeError::Closed));
            }
            _ => {
                // Validating or done: the body is complete; only reuse is lost.
                if let Some(conn) = self.connection.as_mut() {
                    conn.decoder.handle_eof();
                }
            }
        }
    }

    /// The validator's verdict on the body from [`ClientEvent::Validate`].
    pub fn handle_validated(&mut self, now: Instant, valid: bool) {
        self.clamp(now);
        if let State::Validating { body } = &self.state {
            let body = body.clone();
            self.finish(if valid {
                Ending::Block(body)
            } else {
                Ending::Failed(ExchangeError::Validation)
            });
        }
    }

    /// The caller gave up (a hedging loser, a client that went away). Recorded as
    /// answered: the peer is not to blame. Idempotent; ignored once finished.
    pub fn cancel(&mut self, now: Instant) {
        self.clamp(now);
        if !self.is_finished() {
            self.finish(Ending::Cancelled);
        }
    }

    /// The earliest deadline and which [`ClientTimer`] it is, or `None` once finished.
    pub fn poll_timeout(&self) -> Option<Deadline<ClientTimer>> {
        if self.is_finished() {
            return None;
        }
        self.timers.next()
    }

    /// Fires whichever deadline has passed at `now`. Spurious calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clamp(now);
        if self.is_finished() {
            return;
        }
        let Some(timer) = self.timers.expired(now) else {
            return;
        };
        let d = self.config.deadlines;
        let ending = match timer {
            ClientTimer::Caller => Ending::Cancelled,
            ClientTimer::Dial => Ending::Failed(ExchangeError::DialTimeout(d.dial)),
            ClientTimer::ResponseHeader => {
                Ending::Failed(ExchangeError::ResponseHeaderTimeout(d.response_header))
            }
            ClientTimer::Request => {
                Ending::Failed(ExchangeError::RequestTimeout(match d.request {
                    RequestTimeout::After(t) => t,
                    RequestTimeout::Caller => Default::default(),
                }))
            }
        };
        self.finish(ending);
    }

    /// The next thing for the driver to do; drain until `None` after every input.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        if let Some(status) = self.head_event.take() {
            return Some(ClientEvent::Head { status });
        }
        self.event.take()
    }

    /// Runs the decoder until it needs more input or the exchange ends.
    fn drive(&mut self) {
        while matches!(self.state, State::Receiving) {
            let Some(conn) = self.connection.as_mut() else {
                return;
            };
            match conn.decoder.poll() {
                Ok(None) => return,
                Ok(Some(ResponseEvent::Head(head))) => {
                    self.timers.stop(ClientTimer::ResponseHeader);
                    self.load = head.load();
                    self.head_event = Some(head.status());
                    if let Some(ending) = self.range_head(&head) {
                        // Decided at the head: the body is never read.
                        self.finish_with(ending, false);
                        return;
                    }
                    self.head = Some(head);
                }
                Ok(Some(ResponseEvent::Body(body))) => {
                    let Some(head) = self.head.take() else {
                        // The decoder emits every body after its head; were it ever not
                        // to, these bytes were not the response we asked for.
                        self.finish(Ending::Failed(ExchangeError::Protocol(
                            ProtocolError::Http(ResponseError::Unsolicited),
                        )));
                        return;
                    };
                    self.on_response(head, body);
                }
                Err(e) => {
                    let ending = match (self.head.take(), e) {
                        // The status was already decided by a non-200 head; a broken
                        // error body only costs the connection.
                        (Some(head), _) if head.status() != self.success => {
                            self.classify_status(&head)
                        }
                        (_, e) => Ending::Failed(response_error(e)),
                    };
                    self.finish(ending);
                }
            }
        }
    }

    fn classify_status(&self, head: &ResponseHead) -> Ending {
        match head.status() {
            404 if head.is_corrupt_miss() => Ending::Corrupt,
            404 => Ending::Miss,
            // A refusal only with its header (`from_head` checks it); a plain 503 fails.
            503 => match PeerRefusal::from_head(head, self.config.max_refusal_cooldown) {
                Some(refusal) => Ending::Refused(refusal),
                None => Ending::Failed(ExchangeError::Status(503)),
            },
            502 => match head.upstream_status() {
                Some(status) => Ending::UpstreamRefused { status },
                None => Ending::Failed(ExchangeError::Status(502)),
            },
            status => Ending::Failed(ExchangeError::Status(status)),
        }
    }

    /// A `Range` exchange's ending decided by its head (every status but a good `206`);
    /// `None` to read the body (or for any other request kind).
    fn range_head(&self, head: &ResponseHead) -> Option<Ending> {
        let Want::Range {
            start,
            last,
            total,
            validator,
        } = &self.want
        else {
            return None;
        };
        let range = head.content_range().map(ContentRange::parse);
        let protocol = |e| Ending::Failed(ExchangeError::Protocol(ProtocolError::ContentRange(e)));
        Some(match head.status() {
            206 => {
                let (first, sent_last, got_total) = match range {
                    None => return Some(protocol(ContentRangeError::Missing)),
                    Some(Err(e)) => return Some(protocol(e)),
                    Some(Ok(ContentRange::Unsatisfied { .. })) => {
                        return Some(protocol(ContentRangeError::Malformed))
                    }
                    Some(Ok(ContentRange::Bytes { first, last, total })) => (first, last, total),
                };
                if let Some(expected) = *total {
                    if got_total != expected {
                        return Some(Ending::Range(RangeAnswer::Changed(ObjectChange::Size {
                            expected,
                            got: got_total,
                        })));
                    }
                }
                if (first, sent_last) != (*start, *last) {
                    return Some(protocol(ContentRangeError::OtherRange {
                        asked_first: *start,
                        asked_last: *last,
                        first,
                        last: sent_last,
                    }));
                }
                if let Some(changed) = validator_change(validator.as_deref(), head) {
                    return Some(Ending::Range(RangeAnswer::Changed(changed)));
                }
                return None;
            }
            200 => Ending::Range(RangeAnswer::Ignored),
            412 => Ending::Range(RangeAnswer::Changed(ObjectChange::Precondition)),
            416 => match range {
                Some(Ok(ContentRange::Unsatisfied { total: 0 })) if *start == 0 => {
                    match validator_change(validator.as_deref(), head) {
                        Some(changed) => Ending::Range(RangeAnswer::Changed(changed)),
                        None => Ending::Range(RangeAnswer::Empty {
                            validator: head_validator(head.etag(), head.last_modified()),
                        }),
                    }
                }
                Some(Ok(ContentRange::Unsatisfied { total: got }))
                    if total.is_some_and(|t| t != got) =>
                {
                    Ending::Range(RangeAnswer::Changed(ObjectChange::Size {
                        expected: total.unwrap_or_default(),
                        got,
                    }))
                }
                _ => Ending::Failed(ExchangeError::Status(416)),
            },
            404 => Ending::Miss,
            status @ (401 | 403) => Ending::UpstreamRefused { status },
            status => Ending::Failed(ExchangeError::Status(status)),
        })
    }

    fn on_response(&mut self, head: ResponseHead, body: Bytes) {
        let reusable = head.keep_alive();
        if let Want::Range { total, .. } = &self.want {
            // Only a 206 whose head passed `range_head` gets here, its body exactly `len`.
            let total = head
                .content_range()
                .and_then(|v| ContentRange::parse(v).ok())
                .map_or(total.unwrap_or_default(), |r| match r {
                    ContentRange::Bytes { total, .. } | ContentRange::Unsatisfied { total } => {
                        total
                    }
                });
            let validator = head_validator(head.etag(), head.last_modified());
            self.finish_with(
                Ending::Range(RangeAnswer::Part {
                    body,
                    total,
                    validator,
                }),
                reusable,
            );
            return;
        }
        if head.status() != 200 {
            let ending = self.classify_status(&head);
            self.finish_with(ending, reusable);
            return;
        }
        match &self.want {
            Want::Block { validate: true } => {
                self.head = Some(head);
                self.event = Some(ClientEvent::Validate { body: body.clone() });
                self.state = State::Validating { body };
            }
            Want::Block { validate: false } => self.finish_with(Ending::Block(body), reusable),
            Want::Range { .. } => unreachable!("handled above"),
            Want::Roster { host } => {
                let responder = head
                    .node()
                    .and_then(|n| core::str::from_utf8(n).ok())
                    .map(str::to_owned);
                let ending = match Roster::from_json(&body) {
                    Ok(mut roster) => {
                        if let Some(id) = &responder {
                            roster.ensure_member(id, host);
                        }
                        Ending::Roster(RosterAnswer { roster, responder })
                    }
                    Err(e) => Ending::Failed(ExchangeError::Protocol(ProtocolError::Roster(e))),
                };
                self.finish_with(ending, reusable);
            }
        }
    }

    fn finish(&mut self, ending: Ending) {
        let reusable = matches!(self.state, State::Validating { .. })
            && self.head.as_ref().is_some_and(ResponseHead::keep_alive);
        self.finish_with(ending, reusable);
    }

    fn finish_with(&mut self, ending: Ending, keep_alive: bool) {
        self.state = State::Done;
        self.timers.stop_all();
        self.head = None;
        let fate = match self.connection.as_mut() {
            Some(c) if keep_alive && self.written && c.decoder.is_idle() => {
                c.exchanges += 1;
                ConnectionFate::Reuse
            }
            _ => {
                self.connection = None;
                ConnectionFate::Close
            }
        };
        let retry_fresh = self.pooled
            && !self.received
            && matches!(ending, Ending::Failed(ExchangeError::Closed));
        let mut outcome = ExchangeOutcome::new(ending, self.path, fate);
        outcome.retry_fresh = retry_fresh;
        outcome.load = self.load;
        self.event = Some(ClientEvent::Done(outcome));
    }
}

/// How the answer's validator differs from the expected one, if it does: an ETag is
/// compared with the answer's ETag, a date with its `Last-Modified`; a missing one
/// differs.
fn validator_change(expected: Option<&str>, head: &ResponseHead) -> Option<ObjectChange> {
    let expected = expected?;
    let got = if is_etag(expected) {
        head.etag()
    } else {
        head.last_modified()
    };
    let got = got.map(|g| String::from_utf8_lossy(g).into_owned());
    (got.as_deref() != Some(expected)).then(|| ObjectChange::Validator {
        expected: expected.to_owned(),
        got,
    })
}

fn block_request<'a>(host: &'a str, block: &BlockRequest<'a>) -> OutgoingRequest<'a> {
    let mut r = OutgoingRequest::block(host, block.path);
    r.origin = block.origin;
    r.hop = (block.hop.0 > 0).then_some(block.hop);
    r
}

fn response_error(e: ResponseError) -> ExchangeError {
    match e {
        ResponseError::Length(l) => ExchangeError::Length(l),
        ResponseError::Truncated => ExchangeError::Closed,
        other => ExchangeError::Protocol(ProtocolError::Http(other)),
    }
}
