//! The server connection machine: one accepted connection, from admission to close.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use core::fmt;
use core::net::IpAddr;

use super::admission::{Admission, RequestTicket, SessionTicket};
use super::relay::{self, Decline, OriginIdentity, RelayConfig, TrustOrigin};
use crate::http::{
    OutgoingResponse, Rejection, Request, RequestDecoder, RequestError, ResponseKind, Route,
    MAX_REQUEST_HEAD_BYTES,
};
use crate::refusal::{self, Refusal};
use crate::roster::record::MAX_RECORD_HEADER_LEN;
use crate::roster::{check_identity, Roster, MAX_ADDR_LEN, MAX_ID_LEN};
use crate::time::{Deadline, Duration, Instant};
use crate::transmit::{Close, External, Transmit};
use crate::wire::{BlockPath, Hop, Status};

/// Default [`ServerConfig::idle_timeout`]: 120 s.
///
/// A connection with nothing in progress is closed after this long, so a silent or
/// dribbling client cannot hold a session slot forever. It is measured from the moment the
/// connection became idle (accept, or the last response written), not from the last byte,
/// so a request head dribbled one byte at a time still has to complete within it. Above
/// the 90 s idle-pool timeout common HTTP clients use, so a pooled client normally retires
/// a connection before the server does.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Default [`ServerConfig::source_timeout`]: 10 s.
///
/// How long the application may take to answer a [`ServerEvent::Fetch`],
/// [`ServerEvent::Relay`] or [`ServerEvent::Roster`] before the request is answered `500`
/// (and [`ServerEvent::SourceTimedOut`] tells the application to drop its work). 10 s is
/// the reference client's response-header timeout: a requester has given up waiting for
/// the head by then, so holding the request slot and the pipeline any longer only serves
/// nobody. Answering (rather than closing) keeps the connection's other requests alive.
pub const DEFAULT_SOURCE_TIMEOUT: Duration = Duration::from_secs(10);

/// Default [`ServerConfig::send_timeout`]: 30 s.
///
/// How long a handed-out [`Transmit`] may stay unacknowledged (measured from when it was
/// handed out, or from the previous acknowledgement, whichever is later) before the
/// connection ends and releases everything it holds. 30 s is the reference client's whole
/// request timeout: no reader waits longer for a block, so a response still unwritten
/// after it is held for a reader that is gone, or one too slow to matter, and its request
/// slot and byte budget belong to someone else.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Default [`ServerConfig::linger`]: 2 s.
///
/// After an error response or a refusal that ends the connection, the driver half-closes
/// and keeps reading (the machine discards the input) until the peer closes or this long
/// has passed since the response was written. Closing at once while the peer is still
/// sending makes the kernel answer with a reset that can destroy the response before the
/// peer reads it (RFC 9112 §9.6). 2 s covers a peer's in-flight bytes and its read of the
/// response on any sane round trip, and keeps lingering sockets few under the very
/// overload that produces refusals.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(2);

/// Default [`ServerConfig::refusal_head_timeout`]: 2 s.
///
/// A connection refused at accept waits this long for the peer's first request head, then
/// answers it with the 503 (HTTP/1.1 answers requests; a response written before the
/// request is lost on Go's client, which logs "Unsolicited response"). A client that
/// dialled to send a request sends it within a round trip of connecting, so 2 s is ample
/// and bounds what a silent dialler costs a full node. If nothing at all arrived by then
/// the connection ends without a byte; if part of a head arrived it is answered anyway.
pub const DEFAULT_REFUSAL_HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// Most bytes a connection refused at accept reads while waiting for the end of the
/// peer's first request head: [`MAX_REQUEST_HEAD_BYTES`], the bound a served request head
/// has. A peer that sends more without ending a head is answered the 503 at once.
pub const MAX_REFUSAL_HEAD_BYTES: usize = MAX_REQUEST_HEAD_BYTES;

/// Size of the window [`ServerConnection::read_buf`] offers while input is only read to be
/// discarded (lingering, refusing): one small buffer per such connection, allocated when
/// first needed. A head up to [`MAX_REFUSAL_HEAD_BYTES`] takes two reads.
const DISCARD_WINDOW_BYTES: usize = 4 * 1024;

/// Configuration shared by a server's connections. Checked by
/// [`ServerConnection::accept`] (see [`ServerConfig::validate`]).
#[derive(Clone)]
pub struct ServerConfig {
    /// This node's id, echoed as `X-DART-Node` on every response.
    pub node_id: String,
    /// This node's advertised peer address: its own roster entry is repaired with it if
    /// the application's roster omits the node.
    pub advertised_addr: String,
    /// Relay policy; `None` makes a transport-only node (serves what it holds, 404 else).
    pub relay: Option<RelayConfig>,
    /// The application's chunk-key / origin identity rule (used only with `relay`).
    pub identity: Arc<dyn OriginIdentity + Send + Sync>,
    /// See [`DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// See [`DEFAULT_SOURCE_TIMEOUT`].
    pub source_timeout: Duration,
    /// See [`DEFAULT_SEND_TIMEOUT`].
    pub send_timeout: Duration,
    /// See [`DEFAULT_LINGER`].
    pub linger: Duration,
    /// See [`DEFAULT_REFUSAL_HEAD_TIMEOUT`].
    pub refusal_head_timeout: Duration,
}

impl ServerConfig {
    /// A transport-only configuration for node `node_id` advertised at `addr`, with the
    /// default timeouts.
    pub fn new(node_id: impl Into<String>, addr: impl Into<String>) -> Self {
        ServerConfig {
            node_id: node_id.into(),
            advertised_addr: addr.into(),
            relay: None,
            identity: Arc::new(TrustOrigin),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            source_timeout: DEFAULT_SOURCE_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            linger: DEFAULT_LINGER,
            refusal_head_timeout: DEFAULT_REFUSAL_HEAD_TIMEOUT,
        }
    }

    /// Checks the configuration. [`ServerConnection::accept`] calls it for every
    /// connection; drivers may call it once at startup to fail early.
    pub fn validate(&self) -> Result<(), ServerConfigError> {
        let fields = [
            ("node_id", &self.node_id, MAX_ID_LEN),
            ("advertised_addr", &self.advertised_addr, MAX_ADDR_LEN),
        ];
        for (field, value, max) in fields {
            let problem = if value.is_empty() {
                "empty"
            } else if value.len() > max {
                "too long"
            } else if !value.bytes().all(|b| b.is_ascii_graphic()) {
                "not a visible-ASCII header value"
            } else {
                continue;
            };
            return Err(ServerConfigError::Identity { field, problem });
        }
        let timeouts = [
            ("idle_timeout", self.idle_timeout),
            ("source_timeout", self.source_timeout),
            ("send_timeout", self.send_timeout),
            ("linger", self.linger),
            ("refusal_head_timeout", self.refusal_head_timeout),
        ];
        for (field, value) in timeouts {
            if value.is_zero() {
                return Err(ServerConfigError::ZeroTimeout { field });
            }
        }
        Ok(())
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("node_id", &self.node_id)
            .field("advertised_addr", &self.advertised_addr)
            .field("relay", &self.relay)
            .field("idle_timeout", &self.idle_timeout)
            .field("source_timeout", &self.source_timeout)
            .field("send_timeout", &self.send_timeout)
            .field("linger", &self.linger)
            .field("refusal_head_timeout", &self.refusal_head_timeout)
            .finish_non_exhaustive()
    }
}

/// Names one request on one connection (unique for the connection's life).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(u64);

/// A block request handed to the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceRequest {
    /// The block.
    pub path: BlockPath,
    /// `X-DART-Origin`, a zero-copy slice of the request head.
    pub origin: Option<Bytes>,
    /// The hop to use: the request's for a [`ServerEvent::Fetch`]; one higher (the value
    /// the relayed request must carry) for a [`ServerEvent::Relay`].
    pub hop: Hop,
}

/// A roster caller's self-identification (both headers present and within bounds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RosterCaller {
    /// `X-DART-Node`.
    pub id: String,
    /// `X-DART-Peer-Addr`: the advertised address, never the connection's source.
    pub addr: String,
    /// `X-Peerblock-Record`, raw (at most
    /// [`MAX_RECORD_HEADER_LEN`](crate::roster::record::MAX_RECORD_HEADER_LEN) bytes are
    /// kept; a longer value is kept cut, and reads as malformed): the caller's signed
    /// record, `None` when absent. Read it with
    /// [`Attestation::from_header`](crate::roster::Attestation::from_header); the table
    /// verifies it ([`Membership::learn_caller`](crate::roster::Membership::learn_caller)).
    pub record: Option<Vec<u8>>,
}

/// Why a peer's request was answered with an error status: the peer's fault, reported in
/// [`ServerEvent::Rejected`] so a driver can log it, count it and charge the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestRejection {
    /// The request's framing or head was malformed (`400`, `431`, `505`); the connection
    /// ends after the response.
    #[error("malformed request: {0}")]
    Malformed(RequestError),
    /// A well-framed request that is not served (`404` unknown path, `405`, `400` bad path
    /// or hop); the connection stays usable.
    #[error("request not served: {0}")]
    Route(Rejection),
    /// A relay request declined before any cache or upstream access (`404`).
    #[error("relay declined: {0}")]
    Relay(Decline),
}

impl RequestRejection {
    /// The status the request is answered with.
    pub fn status(&self) -> Status {
        match self {
            RequestRejection::Malformed(e) => e.status(),
            RequestRejection::Route(r) => r.status(),
            RequestRejection::Relay(_) => Status::NotFound,
        }
    }
}

/// What the machine tells the application. Answer `Fetch`, `Relay` and `Roster` with the
/// matching `handle_*` call; answers may come in any order, responses still go out in
/// request order. Drain events before transmits: an event about a request always comes
/// before that request's response is handed out.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerEvent {
    /// Look the block up locally; answer with [`ServerConnection::handle_source`].
    Fetch {
        /// The request.
        id: RequestId,
        /// What to look up.
        request: SourceRequest,
    },
    /// The block is not held and the request may be relayed: fetch it from this node's
    /// parent or the origin with `request.hop` (already incremented); answer with
    /// [`ServerConnection::handle_source`].
    Relay {
        /// The request.
        id: RequestId,
        /// What to fetch, with the relayed hop.
        request: SourceRequest,
    },
    /// A roster request: if `caller` is present, learn it (`Membership::learn_caller`, with its record); answer
    /// with [`ServerConnection::handle_roster`]. `None` is an anonymous caller, which
    /// teaches nothing.
    Roster {
        /// The request.
        id: RequestId,
        /// Who asked, if they said.
        caller: Option<RosterCaller>,
    },
    /// The peer's request was bad and is answered with `status` (the peer's fault: log
    /// it, count it, charge the peer). Nothing to answer.
    Rejected {
        /// The request (its error response is the one with this position in the order).
        id: RequestId,
        /// The status of the error response.
        status: u16,
        /// What was wrong.
        error: RequestRejection,
    },
    /// The application did not answer request `id` within
    /// [`ServerConfig::source_timeout`]: it was answered `500`. Drop the lookup or relay
    /// fetch; a late answer returns [`ServerUsageError::UnknownRequest`].
    SourceTimedOut {
        /// The request.
        id: RequestId,
    },
}

/// The application's answer to a [`ServerEvent::Fetch`] or [`ServerEvent::Relay`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceResult {
    /// The complete block: served as 200 without copying.
    Found(Bytes),
    /// The block is held and is `len` bytes long; the driver sends those bytes itself
    /// after the response head (a zero-copy path: `sendfile` from the store's open file).
    /// Reserved against the byte budgets and framed exactly like `Found`; the response's
    /// [`Transmit`] has an empty `body` and `external: Some(External { request: id, len })`
    /// naming this request.
    External {
        /// The block's length in bytes (its `Content-Length`).
        len: u64,
    },
    /// Not held (404, or a relay decision for a [`ServerEvent::Fetch`]).
    Miss,
    /// The source failed (500).
    Failed,
    /// The block was held but its stored copy failed verification (the source
    /// quarantined it): `404` with `X-Peerblock-Miss: corrupt`, so readers ask another
    /// holder and never take the answer as proof of absence. A relay-capable server
    /// treats it as a miss for the relay decision (a request naming an origin is relayed,
    /// fetching a good copy).
    Corrupt,
    /// A relay's upstream refused the requester's credential with `status` (502 +
    /// `X-DART-Upstream-Status`).
    UpstreamRefused {
        /// The upstream's status code (100..=999).
        status: u16,
    },
}

/// The machine's timers: which deadline [`ServerConnection::poll_timeout`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerTimer {
    /// Nothing in progress for [`ServerConfig::idle_timeout`]: the connection ends.
    Idle,
    /// A `Fetch`/`Relay`/`Roster` unanswered for [`ServerConfig::source_timeout`]: it is
    /// answered `500`.
    Source,
    /// A handed-out [`Transmit`] unacknowledged for [`ServerConfig::send_timeout`]: the
    /// connection ends.
    SendProgress,
    /// Lingering after an error response or refusal for [`ServerConfig::linger`]: the
    /// connection ends.
    Linger,
    /// A connection refused at accept still waiting for a request head after
    /// [`ServerConfig::refusal_head_timeout`]: answered if part of a head arrived, else
    /// ended without a byte.
    RefusalHead,
}

/// Local misuse of the machine's API (never a peer's fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServerUsageError {
    /// The id names no request waiting for this kind of answer (answered already, timed
    /// out, or the connection was closed).
    #[error("no request {0:?} is waiting for this answer")]
    UnknownRequest(RequestId),
}

/// A server configuration that cannot work. Local misconfiguration, named by field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServerConfigError {
    /// `node_id` or `advertised_addr` is empty, too long for a roster entry, or not
    /// sendable as a header value.
    #[error("server `{field}` is unusable: {problem}")]
    Identity {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A timeout of zero would end every connection (or answer every request `500`) at
    /// once.
    #[error("server `{field}` is zero: it would fire at once")]
    ZeroTimeout {
        /// The offending field.
        field: &'static str,
    },
}

/// The node's load as its responses advertise it (`X-Peerblock-Load`): requests in
/// progress now, saturating at `u32::MAX`.
fn advertised_load<S: Ord + Clone>(admission: &Admission<S>) -> Option<u32> {
    Some(u32::try_from(admission.requests()).unwrap_or(u32::MAX))
}

/// Encodes a head. A node id that cannot be sent as a header value (see
/// [`ServerConfig::validate`]) is dropped rather than failing the response: every other
/// value in our responses is produced by this module and always valid.
fn encode_into(response: &OutgoingResponse<'_>, out: &mut BytesMut) {
    if response.encode(out).is_err() {
        let mut plain = *response;
        plain.node = None;
        let _ = plain.encode(out);
    }
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
    ready: Option<Transmit>,
    /// The request asked to close the connection after its response.
    close_after: bool,
    /// When the application was asked (the [`ServerTimer::Source`] clock); `None` once
    /// answered or for a slot that asks nothing.
    asked_at: Option<Instant>,
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
            ready: Some(transmit),
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
            ready: Some(transmit),
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
                    slot.ready =
                        Some(self.frame(ResponseKind::NotFound, Bytes::new(), close, false, load));
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

    fn refusal_transmit(&mut self, refusal: &Refusal, load: Option<u32>) -> Transmit {
        refusal::encode(
            refusal,
            Some(&self.config.node_id),
            load,
            &mut self.head_buf,
        );
        Transmit {
            head: self.head_buf.split().freeze(),
            body: Bytes::new(),
            status: Some(Status::ServiceUnavailable.code()),
            refusal: Some(refusal.reason),
            block: false,
            close: Close::Linger,
            external: None,
        }
    }

    fn push_refusal(&mut self, refusal: &Refusal, load: Option<u32>) {
        let id = self.new_id();
        let transmit = self.refusal_transmit(refusal, load);
        self.stopped = true;
        self.queue.push_back(Slot {
            id,
            ticket: None,
            kind: SlotKind::Fixed,
            close_after: true,
            ready: Some(transmit),
            asked_at: None,
        });
    }

    /// Frames a response. `close`: the request asked to close (`Close::AfterWrite`);
    /// `linger`: the response ends the connection because of an error (`Close::Linger`,
    /// also implied by a kind that forces the close).
    fn frame(
        &mut self,
        kind: ResponseKind<'_>,
        body: Bytes,
        close: bool,
        linger: bool,
        load: Option<u32>,
    ) -> Transmit {
        let mut response = OutgoingResponse::new(kind, Some(&self.config.node_id));
        response.close = close || linger;
        response.load = load;
        let close = if !response.closes() {
            Close::KeepOpen
        } else if linger || kind.forces_close() {
            Close::Linger
        } else {
            Close::AfterWrite
        };
        let body = if matches!(
            kind,
            ResponseKind::Block { .. } | ResponseKind::Roster { .. }
        ) {
            body
        } else {
            response.error_body()
        };
        encode_into(&response, &mut self.head_buf);
        Transmit {
            head: self.head_buf.split().freeze(),
            body,
            status: Some(kind.status().code()),
            refusal: None,
            block: matches!(kind, ResponseKind::Block { .. }),
            close,
            external: None,
        }
    }

    fn slot_mut(&mut self, id: RequestId) -> Option<&mut Slot<S>> {
        self.queue
            .iter_mut()
            .find(|s| s.id == id && s.ready.is_none())
    }

    /// The application's answer for a [`ServerEvent::Fetch`] or [`ServerEvent::Relay`].
    pub fn handle_source(
        &mut self,
        now: Instant,
        admission: &mut Admission<S>,
        id: RequestId,
        result: SourceResult,
    ) -> Result<(), ServerUsageError> {
        let now = self.clamp(now);
        let config = Arc::clone(&self.config);
        let relay = config.relay;
        let slot = self
            .slot_mut(id)
            .ok_or(ServerUsageError::UnknownRequest(id))?;
        let SlotKind::Block { request, relayed } = &mut slot.kind else {
            return Err(ServerUsageError::UnknownRequest(id));
        };
        let close = slot.close_after;
        let (len, body, external) = match result {
            SourceResult::Found(block) => (block.len() as u64, block, None),
            SourceResult::External { len } => {
                (len, Bytes::new(), Some(External { request: id, len }))
            }
            other => {
                let kind = match other {
                    SourceResult::Found(_) | SourceResult::External { .. } => return Ok(()),
                    SourceResult::Miss | SourceResult::Corrupt => {
                        let miss = if other == SourceResult::Corrupt {
                            ResponseKind::Corrupt
                        } else {
                            ResponseKind::NotFound
                        };
                        match (relay, &request.origin, *relayed) {
                            (Some(config), Some(_), false) => {
                                match relay::on_miss(&config, request.hop.0) {
                                    Ok(next) => {
                                        *relayed = true;
                                        slot.asked_at = Some(now);
                                        let mut relayed_request = request.clone();
                                        relayed_request.hop = Hop(next);
                                        self.events.push_back(ServerEvent::Relay {
                                            id,
                                            request: relayed_request,
                                        });
                                        return Ok(());
                                    }
                                    Err(_) => miss,
                                }
                            }
                            _ => miss,
                        }
                    }
                    SourceResult::Failed => ResponseKind::InternalServerError,
                    SourceResult::UpstreamRefused { status } if (100..=999).contains(&status) => {
                        ResponseKind::UpstreamRefused {
                            upstream_status: status,
                        }
                    }
                    SourceResult::UpstreamRefused { .. } => ResponseKind::InternalServerError,
                };
                let transmit =
                    self.frame(kind, Bytes::new(), close, false, advertised_load(admission));
                self.set_ready(id, transmit);
                return Ok(());
            }
        };
        let ticket = slot
            .ticket
            .as_mut()
            .ok_or(ServerUsageError::UnknownRequest(id))?;
        if let Err(refusal) = admission.reserve_bytes(ticket, len) {
            let load = advertised_load(admission);
            let transmit = self.refusal_transmit(&refusal, load);
            self.stopped = true;
            self.set_ready(id, transmit);
            return Ok(());
        }
        let load = advertised_load(admission);
        let mut transmit = self.frame(
            ResponseKind::Block {
                content_length: len,
            },
            body,
            close,
            false,
            load,
        );
        transmit.external = external;
        self.set_ready(id, transmit);
        Ok(())
    }

    fn set_ready(&mut self, id: RequestId, transmit: Transmit) {
        if let Some(slot) = self.queue.iter_mut().find(|s| s.id == id) {
            slot.asked_at = None;
            slot.ready = Some(transmit);
        }
    }

    /// The application's roster for a [`ServerEvent::Roster`]. The node's own entry is
    /// added if missing (members always include the sender).
    pub fn handle_roster(
        &mut self,
        now: Instant,
        id: RequestId,
        roster: &Roster,
    ) -> Result<(), ServerUsageError> {
        self.clamp(now);
        let slot = self
            .slot_mut(id)
            .ok_or(ServerUsageError::UnknownRequest(id))?;
        if !matches!(slot.kind, SlotKind::Roster) {
            return Err(ServerUsageError::UnknownRequest(id));
        }
        let close = slot.close_after;
        let body = if roster.contains(&self.config.node_id) {
            roster.to_json()
        } else {
            let mut repaired = roster.clone();
            repaired.ensure_member(&self.config.node_id, &self.config.advertised_addr);
            repaired.to_json()
        };
        let body = Bytes::from(body);
        let transmit = self.frame(
            ResponseKind::Roster {
                content_length: body.len() as u64,
            },
            body,
            close,
            false,
            // Roster answers are not block reads; nobody spreads by them.
            None,
        );
        self.set_ready(id, transmit);
        Ok(())
    }

    /// The next thing for the application to know or do.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// The next response to write, strictly in request order: a response whose source
    /// answered early waits for the ones before it. `now` starts its
    /// [`ServerTimer::SendProgress`] clock. `None` once finished.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let now = self.clamp(now);
        if self.finished || self.output_ended {
            return None;
        }
        let ready = self.queue.front().is_some_and(|s| s.ready.is_some());
        if !ready {
            return None;
        }
        let mut slot = self.queue.pop_front()?;
        let transmit = slot.ready.take()?;
        if self.unacked.is_empty() {
            self.send_since = Some(now);
        }
        self.unacked.push_back(Unacked {
            ticket: slot.ticket.take(),
            close: transmit.close,
        });
        // Nothing follows a response that ends the connection (the driver closes or
        // half-closes after it); the requests queued behind it are never answered.
        self.output_ended = transmit.close.ends_connection();
        Some(transmit)
    }

    /// The oldest handed-out, unacknowledged [`Transmit`] has been fully written: release
    /// its request slot and bytes, act on its [`Close`], and decode and begin more
    /// pipelined requests. If it ended the connection, the requests queued behind it are
    /// dropped (slots released, unpolled asks withdrawn). A spurious call (nothing
    /// unacknowledged) is harmless.
    pub fn handle_transmitted(&mut self, now: Instant, admission: &mut Admission<S>) {
        let now = self.clamp(now);
        let Some(done) = self.unacked.pop_front() else {
            return;
        };
        if let Some(ticket) = done.ticket {
            admission.finish_request(now, self.session.as_mut(), ticket);
        }
        self.send_since = (!self.unacked.is_empty()).then_some(now);
        if done.close.ends_connection() {
            // The requests queued behind the response that ended the connection will never
            // be answered: give their slots and bytes back now rather than at `close`, and
            // withdraw the asks for them not yet polled (answers to ones already polled
            // are `Err(UnknownRequest)`, as after a source timeout).
            for slot in self.queue.drain(..) {
                if let Some(ticket) = slot.ticket {
                    admission.finish_request(now, None, ticket);
                }
            }
            self.events.retain(|e| {
                !matches!(
                    e,
                    ServerEvent::Fetch { .. }
                        | ServerEvent::Relay { .. }
                        | ServerEvent::Roster { .. }
                )
            });
        }
        match done.close {
            Close::KeepOpen => {}
            Close::AfterWrite => self.finished = true,
            Close::Linger if self.eof => self.finished = true,
            Close::Linger => {
                // A lingering connection only drains: it gives its session slot back now
                // (as a connection refused at accept never held one), bounded by time
                // alone, so the overload that caused the refusal is not prolonged.
                self.linger_until = Some(now + self.config.linger);
                if let Some(session) = self.session.take() {
                    admission.close_session(now, session);
                }
            }
        }
        if self.finished || self.linger_until.is_some() {
            return;
        }
        if self.in_progress() == 0 {
            self.idle_since = Some(now);
        }
        self.pump_decode();
        self.admit_decoded(now, admission);
        self.check_eof_finished();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_validation_names_the_field() {
        assert_eq!(ServerConfig::new("n", "h:1").validate(), Ok(()));
        let e = ServerConfig::new("", "h:1").validate().unwrap_err();
        assert_eq!(
            e,
            ServerConfigError::Identity {
                field: "node_id",
                problem: "empty"
            }
        );
        let e = ServerConfig::new("n\r\nX: y", "h:1")
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("node_id"));
        let e = ServerConfig::new("n", "a".repeat(MAX_ADDR_LEN + 1))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("advertised_addr"));
        for field in [
            "idle_timeout",
            "source_timeout",
            "send_timeout",
            "linger",
            "refusal_head_timeout",
        ] {
            let mut c = ServerConfig::new("n", "h:1");
            match field {
                "idle_timeout" => c.idle_timeout = Duration::ZERO,
                "source_timeout" => c.source_timeout = Duration::ZERO,
                "send_timeout" => c.send_timeout = Duration::ZERO,
                "linger" => c.linger = Duration::ZERO,
                _ => c.refusal_head_timeout = Duration::ZERO,
            }
            assert_eq!(c.validate(), Err(ServerConfigError::ZeroTimeout { field }));
        }
    }

    #[test]
    fn identity_fields_of_exactly_their_bound_are_accepted_and_one_byte_more_refused() {
        let at_bound = ServerConfig::new("n".repeat(MAX_ID_LEN), "a".repeat(MAX_ADDR_LEN));
        assert_eq!(at_bound.validate(), Ok(()));
        let too_long = |field| ServerConfigError::Identity {
            field,
            problem: "too long",
        };
        let long_id = ServerConfig::new("n".repeat(MAX_ID_LEN + 1), "h:1");
        assert_eq!(long_id.validate(), Err(too_long("node_id")));
        let long_addr = ServerConfig::new("n", "a".repeat(MAX_ADDR_LEN + 1));
        assert_eq!(long_addr.validate(), Err(too_long("advertised_addr")));
    }

    #[test]
    fn config_debug_names_every_field_with_its_value() {
        let mut c = ServerConfig::new("node-7", "h.test:7070");
        c.idle_timeout = Duration::from_secs(11);
        c.source_timeout = Duration::from_secs(12);
        c.send_timeout = Duration::from_secs(13);
        c.linger = Duration::from_secs(14);
        c.refusal_head_timeout = Duration::from_secs(15);
        let text = format!("{c:?}");
        for part in [
            "ServerConfig",
            "node_id: \"node-7\"",
            "advertised_addr: \"h.test:7070\"",
            "relay",
            "idle_timeout",
            "source_timeout",
            "send_timeout",
            "linger",
            "refusal_head_timeout",
        ] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
        for secs in 11..=15 {
            let value = format!("{:?}", Duration::from_secs(secs));
            assert!(text.contains(&value), "{value} missing from {text}");
        }
    }

    #[test]
    fn a_refused_connection_reads_a_head_of_the_whole_bound_in_two_windows_of_4_kib() {
        use crate::server::AdmissionConfig;
        let mut adm: Admission<u32> = Admission::new(AdmissionConfig {
            max_sessions: 1,
            max_sessions_per_source: 1,
            ..AdmissionConfig::default()
        })
        .unwrap();
        let t0 = Instant::ZERO;
        let config = Arc::new(ServerConfig::new("n", "h:1"));
        let mut held = ServerConnection::accept(t0, &mut adm, 1, config.clone()).unwrap();
        let mut conn = ServerConnection::accept(t0, &mut adm, 2, config).unwrap();
        assert!(conn.refused().is_some());
        // A head of exactly the bound, no blank line: each window is 4 KiB, so the second
        // read reaches the bound and the 503 is due.
        assert_eq!(MAX_REFUSAL_HEAD_BYTES, 8 * 1024);
        for read in 0..2 {
            assert!(
                conn.poll_transmit(t0).is_none(),
                "answered before read {read}"
            );
            let window = conn.read_buf().expect("a discard window").len();
            assert_eq!(window, 4 * 1024, "read {read}");
            assert_eq!(conn.handle_read(t0, window), window);
        }
        let t = conn.poll_transmit(t0).expect("answered at the bound");
        assert_eq!(t.status, Some(503));
        held.close(t0, &mut adm);
        conn.close(t0, &mut adm);
    }

    #[test]
    fn connection_debug_shows_its_source_and_state() {
        use crate::server::AdmissionConfig;
        let mut adm: Admission<u32> = Admission::new(AdmissionConfig::default()).unwrap();
        let config = Arc::new(ServerConfig::new("n", "h:1"));
        let mut conn = ServerConnection::accept(Instant::ZERO, &mut adm, 77, config).unwrap();
        let text = format!("{conn:?}");
        for part in [
            "ServerConnection",
            "source: 77",
            "refused: None",
            "decoded: 0",
            "queued: 0",
            "unacked: 0",
            "eof: false",
            "finished: false",
        ] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
        conn.handle_eof(Instant::ZERO);
        assert!(format!("{conn:?}").contains("eof: true"));
        conn.close(Instant::ZERO, &mut adm);
    }

    #[test]
    fn unsendable_node_id_is_left_out_rather_than_failing_the_response() {
        let mut out = BytesMut::new();
        refusal::encode(
            &Refusal {
                reason: crate::refusal::RefusalReason::Sessions,
                retry_after: Duration::from_secs(1),
            },
            Some("bad\r\nid"),
            None,
            &mut out,
        );
        let text = core::str::from_utf8(&out).unwrap();
        assert!(text.starts_with("HTTP/1.1 503 "));
        assert!(!text.contains("bad"));
    }
}
