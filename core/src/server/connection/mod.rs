//! The server connection machine: one accepted connection, from admission to close.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use core::fmt;
use core::net::IpAddr;

use super::admission::{Admission, RequestTicket, SessionTicket};
use super::relay::{self, Decline, OriginIdentity};
use crate::http::{Request, RequestDecoder, RequestError, ResponseKind, Route};
use crate::refusal::Refusal;
use crate::roster::check_identity;
use crate::roster::record::MAX_RECORD_HEADER_LEN;
use crate::time::{Deadline, Instant};
use crate::transmit::{Close, External, Transmit};
use crate::wire::Status;

mod config;
mod events;
mod respond;
#[cfg(test)]
mod tests;

pub use config::{
    ServerConfig, ServerConfigError, DEFAULT_IDLE_TIMEOUT, DEFAULT_LINGER,
    DEFAULT_REFUSAL_HEAD_TIMEOUT, DEFAULT_SEND_TIMEOUT, DEFAULT_SOURCE_TIMEOUT,
    MAX_REFUSAL_HEAD_BYTES,
};
pub use events::{
    RequestRejection, RosterCaller, ServerEvent, ServerTimer, ServerUsageError, SourceRequest,
    SourceResult,
};

/// Size of the window [`ServerConnection::read_buf`] offers while input is only read to be
/// discarded (lingering, refusing): one small buffer per such connection, allocated when
/// first needed. A head up to [`MAX_REFUSAL_HEAD_BYTES`] takes two reads.
const DISCARD_WINDOW_BYTES: usize = 4 * 1024;

/// Names one request on one connection (unique for the connection's life).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(u64);

/// The node's load as its responses advertise it (`X-Peerblock-Load`): requests in
/// progress now, saturating at `u32::MAX`.
fn advertised_load<S: Ord + Clone>(admission: &Admission<S>) -> Option<u32> {
    Some(u32::try_from(admission.requests()).unwrap_or(u32::MAX))
}

#[derive(Debug)]
enum SlotKind {
    Block {
        request: SourceRequest,
        relayed: bool,
    },
    Roster,
    Fixed,
}

#[derive(Debug)]
struct Slot<S> {
    id: RequestId,
    ticket: Option<RequestTicket<S>>,
    kind: SlotKind,
    ready: Option<Ready>,
    /// The request asked to close the connection after its response.
    close_after: bool,
    /// When the application was asked (the [`ServerTimer::Source`] clock); `None` once
    /// answered or for a slot that asks nothing.
    asked_at: Option<Instant>,
}

/// A slot's answer, waiting for its turn in request order.
#[derive(Debug)]
enum Ready {
    /// Framed already (refusals, errors, rosters).
    Framed(Transmit),
    /// A found block, framed only when it is handed out ([`ServerConnection::poll_transmit`]),
    /// so the answer (taken under the driver's admission lock) does not encode the head.
    Block(FoundBlock),
}

/// What framing a found block's response needs, kept from the answer.
#[derive(Debug)]
struct FoundBlock {
    len: u64,
    body: Bytes,
    close: bool,
    /// The advertised load at answer time.
    load: Option<u32>,
    external: Option<External>,
}

impl From<Transmit> for Ready {
    fn from(transmit: Transmit) -> Ready {
        Ready::Framed(transmit)
    }
}

/// A decoded request waiting for admission, or the decoder's error in its place.
#[derive(Debug)]
enum Decoded {
    Request(Request),
    Malformed(RequestError),
}

/// A connection refused at accept, waiting for the end of the peer's first request head.
#[derive(Debug)]
struct RefusalHead {
    refusal: Refusal,
    load: Option<u32>,
    /// Bytes read so far.
    seen: usize,
    /// Where the scan for the blank line ending the head is: 0 inside a line, 1 at the
    /// start of a line, 2 after a CR at the start of a line.
    state: u8,
    deadline: Instant,
}

impl RefusalHead {
    /// Scans `data`; true once the head's blank line has been seen or the byte bound hit.
    /// Inside a line it jumps to the next LF instead of stepping through every byte.
    fn scan(&mut self, data: &[u8]) -> bool {
        let n = data.len().min(MAX_REFUSAL_HEAD_BYTES - self.seen);
        let mut i = 0;
        while i < n {
            if self.state == 0 {
                match data[i..n].iter().position(|&b| b == b'\n') {
                    Some(p) => {
                        i += p + 1;
                        self.state = 1;
                        continue;
                    }
                    None => {
                        i = n;
                        break;
                    }
                }
            }
            let b = data[i];
            i += 1;
            self.state = match (self.state, b) {
                // The head is done: the machine takes the refusal head and never
                // scans again, so `seen` is not counted on.
                (_, b'\n') => return true,
                (1, b'\r') => 2,
                _ => 0,
            };
        }
        self.seen += i;
        self.seen >= MAX_REFUSAL_HEAD_BYTES
    }
}

/// Which window the last [`ServerConnection::read_buf`] lent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lent {
    Nothing,
    Decoder,
    Discard(usize),
}

/// A handed-out transmit not yet acknowledged: the ticket its acknowledgement releases and
/// what happens to the connection afterwards.
#[derive(Debug)]
struct Unacked<S> {
    ticket: Option<RequestTicket<S>>,
    close: Close,
}

/// One accepted connection, sans-IO.
///
/// # Driving contract
///
/// - Create with [`accept`](Self::accept) when a connection arrives. A connection refused
///   by admission is still a machine ([`refused`](Self::refused) says why): it reads the
///   peer's first request head and answers it with the 503, so drive it like any other.
///   While [`AdmissionConfig::max_refusals`](crate::server::AdmissionConfig::max_refusals)
///   refused connections are being answered, a further refused one is finished at accept
///   ([`dropped_at_accept`](Self::dropped_at_accept)): close its socket at once.
/// - Bytes in: read the socket into [`read_buf`](Self::read_buf) and report the count with
///   [`handle_read`](Self::handle_read), or pass a slice to
///   [`handle_input`](Self::handle_input); both return how many bytes were taken (offer
///   the rest after the next acknowledgement). `read_buf` returning `None` means "take
///   nothing now" (the connection's pipeline is full), never EOF. While the machine only
///   discards input (lingering, refusing, finished) both paths take everything. The peer's
///   half-close is [`handle_eof`](Self::handle_eof); requests already received are still
///   answered.
/// - Then, if [`needs_admission`](Self::needs_admission), lock the node's [`Admission`]
///   and call [`handle_admission`](Self::handle_admission): that is where decoded requests
///   begin (take their request slot). Plain byte reads never touch the admission.
/// - Drain [`poll_event`](Self::poll_event) and answer each request event
///   ([`handle_source`](Self::handle_source), [`handle_roster`](Self::handle_roster)).
/// - Drain [`poll_transmit`](Self::poll_transmit), write each [`Transmit`] in order (head
///   then body), and acknowledge each fully written one with
///   [`handle_transmitted`](Self::handle_transmitted): that is when its request slot and
///   byte budget are released. Then act on its [`Close`]: `AfterWrite` closes the socket;
///   `Linger` shuts down the write side and keeps reading (and feeding the machine) until
///   EOF or [`is_finished`](Self::is_finished).
/// - Wake at [`poll_timeout`](Self::poll_timeout) and call
///   [`handle_timeout`](Self::handle_timeout).
/// - When [`is_finished`](Self::is_finished) (or on any socket error or shutdown), close
///   the socket and call [`close`](Self::close), which releases every ticket exactly once
///   (it is idempotent).
///
/// Calls that begin or end a session or request ([`accept`](Self::accept),
/// [`handle_admission`](Self::handle_admission), [`handle_source`](Self::handle_source),
/// [`handle_transmitted`](Self::handle_transmitted), [`close`](Self::close)) take the
/// server's shared [`Admission`]; pass the same one the connection was accepted with.
/// Time never goes backwards: an earlier `now` is treated as the latest seen.
pub struct ServerConnection<S = IpAddr> {
    config: Arc<ServerConfig>,
    source: S,
    /// `None` for a connection refused at accept, and once closed.
    session: Option<SessionTicket<S>>,
    refused: Option<Refusal>,
    /// Holds one of the admission's refusal slots (released by `close`).
    holds_refusal: bool,
    /// Refused while every refusal slot was taken: finished at accept, never answered.
    dropped: bool,
    /// The admission's `max_requests_per_session`: requests decoded ahead at most.
    depth: usize,
    /// `None` for a connection refused at accept (it never decodes a request).
    decoder: Option<RequestDecoder>,
    /// No more requests will be decoded: the last one asked to close, or was malformed.
    decode_ended: bool,
    decoded: VecDeque<Decoded>,
    queue: VecDeque<Slot<S>>,
    unacked: VecDeque<Unacked<S>>,
    events: VecDeque<ServerEvent>,
    next_id: u64,
    /// No more requests begin: a response that ends the connection is queued.
    stopped: bool,
    eof: bool,
    finished: bool,
    /// A transmit that ends the connection has been handed out: nothing may follow it.
    output_ended: bool,
    closed: bool,
    refusal_head: Option<RefusalHead>,
    idle_since: Option<Instant>,
    /// The [`ServerTimer::SendProgress`] clock, while a transmit is unacknowledged.
    send_since: Option<Instant>,
    linger_until: Option<Instant>,
    latest: Instant,
    head_buf: BytesMut,
    discard: Vec<u8>,
    lent: Lent,
}

impl<S: fmt::Debug> fmt::Debug for ServerConnection<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConnection")
            .field("source", &self.source)
            .field("refused", &self.refused)
            .field("dropped", &self.dropped)
            .field("decoded", &self.decoded.len())
            .field("queued", &self.queue.len())
            .field("unacked", &self.unacked.len())
            .field("stopped", &self.stopped)
            .field("eof", &self.eof)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

/// Head buffer reserved per connection: a handful of response heads (each under 300
/// bytes) before the buffer has to grow or reclaim.
const HEAD_BUFFER_BYTES: usize = 1024;

/// Head buffer of a connection refused at accept: its one 503 (under 300 bytes).
const REFUSAL_BUFFER_BYTES: usize = 256;

impl<S: Ord + Clone> ServerConnection<S> {
    /// A connection from `source` arrived: admits it, or, when admission refuses, returns
    /// a machine in the refusing state (holding no session ticket) that answers the peer's
    /// first request head with the 503 ([`refused`](Self::refused) names the refusal).
    ///
    /// `Err` only for an invalid `config` (local misconfiguration); nothing is reserved.
    pub fn accept(
        now: Instant,
        admission: &mut Admission<S>,
        source: S,
        config: Arc<ServerConfig>,
    ) -> Result<Self, ServerConfigError> {
        config.validate()?;
        let depth = admission.config().max_requests_per_session;
        let (session, refused, decoder, head_buf) =
            match admission.open_session(now, source.clone()) {
                Ok(session) => (
                    Some(session),
                    None,
                    Some(RequestDecoder::new()),
                    BytesMut::with_capacity(HEAD_BUFFER_BYTES),
                ),
                Err(refusal) => (
                    None,
                    Some(refusal),
                    None,
                    BytesMut::with_capacity(REFUSAL_BUFFER_BYTES),
                ),
            };
        // A refused connection is answered only within the refusal bound; over it the
        // machine is finished at once and the driver closes the socket unanswered.
        let holds_refusal = refused.is_some() && admission.take_refusal();
        let dropped = refused.is_some() && !holds_refusal;
        let refusal_head = refused
            .filter(|_| holds_refusal)
            .map(|refusal| RefusalHead {
                refusal,
                load: advertised_load(admission),
                seen: 0,
                state: 0,
                deadline: now + config.refusal_head_timeout,
            });
        Ok(ServerConnection {
            config,
            source,
            session,
            refused,
            holds_refusal,
            dropped,
            depth,
            decoder,
            decode_ended: refused.is_some(),
            decoded: VecDeque::new(),
            queue: VecDeque::new(),
            unacked: VecDeque::new(),
            events: VecDeque::new(),
            next_id: 0,
            stopped: refused.is_some(),
            eof: false,
            finished: dropped,
            output_ended: false,
            closed: false,
            refusal_head,
            idle_since: refused.is_none().then_some(now),
            send_since: None,
            linger_until: None,
            latest: now,
            head_buf,
            discard: Vec::new(),
            lent: Lent::Nothing,
        })
    }

    /// The source this connection came from.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The refusal, if admission refused this connection at accept.
    pub fn refused(&self) -> Option<Refusal> {
        self.refused
    }

    /// Admission refused this connection while
    /// [`AdmissionConfig::max_refusals`](crate::server::AdmissionConfig::max_refusals)
    /// refused connections were already being answered: the machine is finished at
    /// accept, reads nothing and writes nothing. Close the socket at once (calling
    /// [`close`](Self::close) is still right, and harmless). [`refused`](Self::refused)
    /// still says why it was refused.
    pub fn dropped_at_accept(&self) -> bool {
        self.dropped
    }

    fn clamp(&mut self, now: Instant) -> Instant {
        self.latest = self.latest.max(now);
        self.latest
    }

    /// Requests decoded and not yet acknowledged as written (waiting for admission, for
    /// their answer, or for their acknowledgement).
    pub fn in_progress(&self) -> usize {
        self.decoded.len() + self.queue.len() + self.unacked.len()
    }

    /// Whether input is read only to be discarded: nothing more will be decoded (the last
    /// request asked to close or was malformed, a response ending the connection is
    /// queued, the connection lingers, refuses or is finished).
    fn discarding(&self) -> bool {
        self.finished || self.stopped || self.decode_ended || self.linger_until.is_some()
    }

    /// A window to read received bytes into; report how many were written with
    /// [`handle_read`](Self::handle_read). `None` means "take nothing now" (the pipeline is
    /// full: acknowledge a transmit first), never an empty slice. While the machine only
    /// discards input (see [`handle_input`](Self::handle_input)) it lends a small scratch
    /// window.
    pub fn read_buf(&mut self) -> Option<&mut [u8]> {
        if self.discarding() {
            if self.discard.is_empty() {
                self.discard.resize(DISCARD_WINDOW_BYTES, 0);
            }
            self.lent = Lent::Discard(self.discard.len());
            return Some(&mut self.discard);
        }
        let decoder = self.decoder.as_mut()?;
        if decoder.room() == 0 {
            self.lent = Lent::Nothing;
            return None;
        }
        self.lent = Lent::Decoder;
        Some(decoder.read_buf())
    }

    /// `n` bytes were written at the start of the last [`read_buf`](Self::read_buf)
    /// window. Returns how many were taken (at most that window's length; 0 if no window
    /// was lent since the last input). Equivalent to [`handle_input`](Self::handle_input)
    /// with those bytes.
    pub fn handle_read(&mut self, now: Instant, n: usize) -> usize {
        let now = self.clamp(now);
        match core::mem::replace(&mut self.lent, Lent::Nothing) {
            Lent::Nothing => 0,
            Lent::Discard(len) => {
                let n = n.min(len);
                if self.refusal_head.is_some() {
                    let scratch = core::mem::take(&mut self.discard);
                    self.refusing_input(now, &scratch[..n]);
                    self.discard = scratch;
                }
                n
            }
            Lent::Decoder => {
                let Some(decoder) = self.decoder.as_mut() else {
                    return 0;
                };
                let taken = decoder.advance(n);
                self.pump_decode();
                taken
            }
        }
    }

    /// Bytes received from the client. Returns how many were taken: all of them while
    /// the machine only discards input (after a request that closes the connection or a
    /// malformed one, while refusing or lingering, once finished), else what fits the
    /// receive buffer (offer the rest after the next acknowledgement).
    pub fn handle_input(&mut self, now: Instant, data: &[u8]) -> usize {
        let now = self.clamp(now);
        self.lent = Lent::Nothing;
        if self.refusal_head.is_some() {
            self.refusing_input(now, data);
            return data.len();
        }
        if self.discarding() {
            return data.len();
        }
        let Some(decoder) = self.decoder.as_mut() else {
            return data.len();
        };
        let taken = decoder.feed(data);
        self.pump_decode();
        taken
    }

    /// The refused peer's request head is complete (or its bound was hit): queue the 503.
    fn refusal_input(&mut self, now: Instant) {
        let Some(head) = self.refusal_head.take() else {
            return;
        };
        self.clamp(now);
        let transmit = self.refusal_transmit(&head.refusal, head.load);
        let id = self.new_id();
        self.queue.push_back(Slot {
            id,
            ticket: None,
            kind: SlotKind::Fixed,
            ready: Some(transmit.into()),
            close_after: true,
            asked_at: None,
        });
    }

    fn refusing_input(&mut self, now: Instant, data: &[u8]) {
        let done = self.refusal_head.as_mut().is_some_and(|h| h.scan(data));
        if done {
            self.refusal_input(now);
        }
    }

    /// A refused connection stops waiting for its request head (end of stream or its
    /// deadline): a partial head is answered with the refusal, no byte at all ends the
    /// connection without one.
    fn end_refusal_wait(&mut self, now: Instant) {
        match &self.refusal_head {
            Some(head) if head.seen > 0 => self.refusal_input(now),
            Some(_) => {
                self.refusal_head = None;
                self.finished = true;
            }
            None => {}
        }
    }

    /// The client closed its sending side: no more bytes will come. Requests already
    /// received (buffered or decoded) are still answered; the connection finishes once
    /// they are written.
    pub fn handle_eof(&mut self, now: Instant) {
        let now = self.clamp(now);
        self.eof = true;
        if self.refusal_head.is_some() {
            self.end_refusal_wait(now);
            return;
        }
        if self.linger_until.is_some() {
            self.finished = true;
            return;
        }
        self.pump_decode();
        self.check_eof_finished();
    }

    /// After EOF, the connection is finished once nothing is in progress (every complete
    /// buffered request was decoded: decoding stops only at the pipeline depth).
    fn check_eof_finished(&mut self) {
        if self.eof && self.in_progress() == 0 && self.linger_until.is_none() {
            self.finished = true;
        }
    }

    /// Decodes buffered requests while the pipeline depth allows; they wait for
    /// [`handle_admission`](Self::handle_admission).
    fn pump_decode(&mut self) {
        if self.decode_ended || self.stopped || self.finished {
            return;
        }
        let Some(decoder) = self.decoder.as_mut() else {
            return;
        };
        while self.decoded.len() + self.queue.len() + self.unacked.len() < self.depth {
            match decoder.decode() {
                Ok(None) => break,
                Ok(Some(request)) => {
                    self.idle_since = None;
                    let last = !request.keep_alive();
                    self.decoded.push_back(Decoded::Request(request));
                    if last {
                        self.decode_ended = true;
                        break;
                    }
                }
                Err(e) => {
                    self.idle_since = None;
                    self.decoded.push_back(Decoded::Malformed(e));
                    self.decode_ended = true;
                    break;
                }
            }
        }
    }

    /// Whether decoded requests wait for [`handle_admission`](Self::handle_admission).
    pub fn needs_admission(&self) -> bool {
        !self.decoded.is_empty() && !self.finished
    }

    /// Begins every decoded request, in order: routes it, takes its request slot (or
    /// queues the refusal), and emits its event. Call it when
    /// [`needs_admission`](Self::needs_admission); a spurious call is harmless.
    pub fn handle_admission(&mut self, now: Instant, admission: &mut Admission<S>) {
        let now = self.clamp(now);
        self.admit_decoded(now, admission);
    }

    fn admit_decoded(&mut self, now: Instant, admission: &mut Admission<S>) {
        while let Some(decoded) = self.decoded.pop_front() {
            if self.stopped || self.finished {
                self.decoded.clear();
                break;
            }
            match decoded {
                Decoded::Request(request) => self.on_request(now, admission, request),
                Decoded::Malformed(e) => {
                    let load = advertised_load(admission);
                    self.push_fixed(
                        kind_for_status(e.status()),
                        true,
                        true,
                        load,
                        RequestRejection::Malformed(e),
                    );
                }
            }
        }
    }

    fn new_id(&mut self) -> RequestId {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        id
    }

    /// Queues an error response for a rejected request, after its `Rejected` event.
    fn push_fixed(
        &mut self,
        kind: ResponseKind<'_>,
        close: bool,
        linger: bool,
        load: Option<u32>,
        error: RequestRejection,
    ) {
        let id = self.new_id();
        let transmit = self.frame(kind, Bytes::new(), close, linger, load);
        self.stopped |= transmit.close.ends_connection();
        self.events.push_back(ServerEvent::Rejected {
            id,
            status: kind.status().code(),
            error,
        });
        self.queue.push_back(Slot {
            id,
            ticket: None,
            kind: SlotKind::Fixed,
            close_after: transmit.close.ends_connection(),
            ready: Some(transmit.into()),
            asked_at: None,
        });
    }

    fn on_request(&mut self, now: Instant, admission: &mut Admission<S>, request: Request) {
        let close = !request.keep_alive();
        let route = match request.route() {
            Ok(route) => route,
            Err(rejection) => {
                // 404 unknown path, 405 method, 400 path/hop: the source is never invoked.
                let load = advertised_load(admission);
                let kind = kind_for_status(rejection.status());
                self.push_fixed(kind, close, false, load, RequestRejection::Route(rejection));
                return;
            }
        };
        match route {
            Route::Roster => {
                let caller = roster_caller(&request);
                let id = self.new_id();
                self.stopped |= close;
                self.queue.push_back(Slot {
                    id,
                    ticket: None,
                    kind: SlotKind::Roster,
                    ready: None,
                    close_after: close,
                    asked_at: Some(now),
                });
                self.events.push_back(ServerEvent::Roster { id, caller });
            }
            Route::Block { path, hop } => {
                let Some(session) = self.session.as_mut() else {
                    return;
                };
                let ticket = match admission.begin_request(now, session) {
                    Ok(t) => t,
                    Err(refusal) => {
                        self.push_refusal(&refusal, advertised_load(admission));
                        return;
                    }
                };
                let origin = request.origin_bytes();
                let id = self.new_id();
                self.stopped |= close;
                let source_request = SourceRequest { path, origin, hop };
                let declined = match (&self.config.relay, &source_request.origin) {
                    (Some(relay), Some(origin)) => {
                        let identity: &dyn OriginIdentity = &*self.config.identity;
                        match core::str::from_utf8(origin) {
                            Ok(o) => {
                                relay::screen(relay, identity, o, path.key.as_bytes(), path.index)
                                    .err()
                            }
                            Err(_) => Some(Decline::IdentityMismatch),
                        }
                    }
                    _ => None,
                };
                let mut slot = Slot {
                    id,
                    ticket: Some(ticket),
                    kind: SlotKind::Block {
                        request: source_request.clone(),
                        relayed: false,
                    },
                    ready: None,
                    close_after: close,
                    asked_at: None,
                };
                if let Some(decline) = declined {
                    // A requester error: 404 before any cache or upstream access.
                    let load = advertised_load(admission);
                    self.events.push_back(ServerEvent::Rejected {
                        id,
                        status: Status::NotFound.code(),
                        error: RequestRejection::Relay(decline),
                    });
                    slot.ready = Some(
                        self.frame(ResponseKind::NotFound, Bytes::new(), close, false, load)
                            .into(),
                    );
                } else {
                    slot.asked_at = Some(now);
                    self.events.push_back(ServerEvent::Fetch {
                        id,
                        request: source_request,
                    });
                }
                self.queue.push_back(slot);
            }
        }
    }

    /// The next thing for the application to know or do.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// Whether the connection is done: close the socket and call [`close`](Self::close).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The earliest deadline and which timer it is; `None` once finished.
    pub fn poll_timeout(&self) -> Option<Deadline<ServerTimer>> {
        if self.finished {
            return None;
        }
        let c = &self.config;
        let refusal = self
            .refusal_head
            .as_ref()
            .map(|h| (h.deadline, ServerTimer::RefusalHead));
        let linger = self.linger_until.map(|at| (at, ServerTimer::Linger));
        let send = self
            .send_since
            .map(|t| (t + c.send_timeout, ServerTimer::SendProgress));
        let source = self
            .queue
            .iter()
            .filter_map(|s| s.asked_at)
            .min()
            .map(|t| (t + c.source_timeout, ServerTimer::Source));
        let idle = if self.in_progress() == 0 && !self.stopped && !self.eof {
            self.idle_since
                .map(|t| (t + c.idle_timeout, ServerTimer::Idle))
        } else {
            None
        };
        [refusal, linger, send, source, idle]
            .into_iter()
            .flatten()
            .min_by_key(|&(at, timer)| (at, timer))
            .map(|(at, timer)| Deadline { at, timer })
    }

    /// Acts on every deadline that has passed: idle, send-progress and linger end the
    /// connection; an unanswered source is answered `500`; a refused connection that
    /// waited long enough is answered (or ended, if nothing arrived). Spurious calls are
    /// harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clamp(now);
        if self.finished {
            return;
        }
        let c = Arc::clone(&self.config);
        if self
            .refusal_head
            .as_ref()
            .is_some_and(|h| h.deadline <= now)
        {
            self.end_refusal_wait(now);
            if self.finished {
                return;
            }
        }
        if self.linger_until.is_some_and(|at| at <= now)
            || self.send_since.is_some_and(|t| t + c.send_timeout <= now)
        {
            self.finished = true;
            return;
        }
        let due: Vec<RequestId> = self
            .queue
            .iter()
            .filter(|s| s.asked_at.is_some_and(|t| t + c.source_timeout <= now))
            .map(|s| s.id)
            .collect();
        for id in due {
            let close = self
                .queue
                .iter()
                .find(|s| s.id == id)
                .is_some_and(|s| s.close_after);
            // Load is not advertised on a timeout answer: it is framed without the
            // admission (a timer input never takes it).
            let transmit = self.frame(
                ResponseKind::InternalServerError,
                Bytes::new(),
                close,
                false,
                None,
            );
            self.set_ready(id, transmit);
            self.events.push_back(ServerEvent::SourceTimedOut { id });
        }
        if self.in_progress() == 0
            && !self.stopped
            && !self.eof
            && self.idle_since.is_some_and(|t| t + c.idle_timeout <= now)
        {
            self.finished = true;
        }
    }

    /// Ends the connection (finished, peer reset, error, shutdown): releases every request
    /// ticket and the session exactly once. Idempotent: later calls do nothing. Afterwards
    /// the machine is finished, hands out nothing and discards input.
    pub fn close(&mut self, now: Instant, admission: &mut Admission<S>) {
        let now = self.clamp(now);
        self.finished = true;
        if self.closed {
            return;
        }
        self.closed = true;
        self.decoded.clear();
        self.events.clear();
        self.refusal_head = None;
        self.linger_until = None;
        self.send_since = None;
        for slot in self.queue.drain(..) {
            if let Some(ticket) = slot.ticket {
                admission.finish_request(now, None, ticket);
            }
        }
        for done in self.unacked.drain(..) {
            if let Some(ticket) = done.ticket {
                admission.finish_request(now, None, ticket);
            }
        }
        if let Some(session) = self.session.take() {
            admission.close_session(now, session);
        }
        if self.holds_refusal {
            self.holds_refusal = false;
            admission.release_refusal();
        }
    }
}

fn roster_caller(request: &Request) -> Option<RosterCaller> {
    let id = core::str::from_utf8(request.node()?).ok()?;
    let addr = core::str::from_utf8(request.peer_addr()?).ok()?;
    check_identity(id, addr).ok()?;
    let record = request
        .record()
        .map(|r| r[..r.len().min(MAX_RECORD_HEADER_LEN + 1)].to_vec());
    Some(RosterCaller {
        id: id.to_owned(),
        addr: addr.to_owned(),
        record,
    })
}

fn kind_for_status(status: Status) -> ResponseKind<'static> {
    match status {
        Status::NotFound => ResponseKind::NotFound,
        Status::MethodNotAllowed => ResponseKind::MethodNotAllowed,
        Status::HeaderFieldsTooLarge => ResponseKind::HeaderFieldsTooLarge,
        Status::HttpVersionNotSupported => ResponseKind::HttpVersionNotSupported,
        Status::InternalServerError => ResponseKind::InternalServerError,
        _ => ResponseKind::BadRequest,
    }
}
