//! The server connection machine: one accepted connection, from admission to close.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use core::fmt;
use core::net::IpAddr;

use super::admission::{Admission, RequestTicket, SessionTicket};
use super::relay::{self, OriginIdentity, RelayConfig, TrustOrigin};
use crate::http::{OutgoingResponse, Request, RequestDecoder, ResponseKind, Route};
use crate::refusal::{self, Refusal};
use crate::roster::{check_identity, Roster, MAX_ADDR_LEN, MAX_ID_LEN};
use crate::time::{Duration, Instant};
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

/// Configuration shared by a server's connections.
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
}

impl ServerConfig {
    /// A transport-only configuration for node `node_id` advertised at `addr`.
    pub fn new(node_id: impl Into<String>, addr: impl Into<String>) -> Self {
        ServerConfig {
            node_id: node_id.into(),
            advertised_addr: addr.into(),
            relay: None,
            identity: Arc::new(TrustOrigin),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

impl ServerConfig {
    /// Checks the configuration; drivers call this once at startup. (A connection never
    /// fails on a bad configuration: an unsendable node id is left out of the headers.)
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
        if self.idle_timeout.is_zero() {
            return Err(ServerConfigError::ZeroIdleTimeout);
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
}

/// What the machine asks the application to do. Answer each with the matching
/// `handle_*` call; answers may come in any order, responses still go out in request
/// order.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// A roster request: if `caller` is present, learn it (`Membership::learn`); answer
    /// with [`ServerConnection::handle_roster`]. `None` is an anonymous caller, which
    /// teaches nothing.
    Roster {
        /// The request.
        id: RequestId,
        /// Who asked, if they said.
        caller: Option<RosterCaller>,
    },
}

/// The application's answer to a [`ServerEvent::Fetch`] or [`ServerEvent::Relay`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceResult {
    /// The complete block: served as 200 without copying.
    Found(Bytes),
    /// Not held (404, or a relay decision for a [`ServerEvent::Fetch`]).
    Miss,
    /// The source failed (500).
    Failed,
    /// A relay's upstream refused the requester's credential with `status` (502 +
    /// `X-DART-Upstream-Status`).
    UpstreamRefused {
        /// The upstream's status code (100..=999).
        status: u16,
    },
}

/// Bytes to write, in order: the head, then the body (often empty for errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The response head.
    pub head: Bytes,
    /// The response body: the application's block bytes themselves for a 200.
    pub body: Bytes,
    /// Close the connection after writing this response.
    pub close: bool,
}

/// Local misuse of the machine's API (never a peer's fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServerUsageError {
    /// The id names no request waiting for this kind of answer.
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
    /// An idle timeout of zero would close every connection at accept.
    #[error("server `idle_timeout` is zero: every connection would close at once")]
    ZeroIdleTimeout,
}

/// The outcome of [`ServerConnection::accept`].
#[derive(Debug)]
pub enum Accept<S = IpAddr> {
    /// Admitted: drive the connection.
    Admitted(ServerConnection<S>),
    /// Refused: write `response` (the complete 503 refusal) and close. Nothing was reserved.
    Refused {
        /// Which limit, and the advertised wait.
        refusal: Refusal,
        /// The complete response bytes.
        response: Bytes,
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
    close_after: bool,
}

/// One accepted connection, sans-IO.
///
/// # Driving contract
///
/// - Create with [`accept`](Self::accept) when a connection arrives; a refusal is
///   answered by writing its bytes and closing.
/// - Feed received bytes with [`handle_input`](Self::handle_input) (it returns how many it
///   took; offer the rest after the next transmit is acknowledged), the peer's half-close
///   with [`handle_eof`](Self::handle_eof).
/// - Drain [`poll_event`](Self::poll_event) and answer each event
///   ([`handle_source`](Self::handle_source), [`handle_roster`](Self::handle_roster)).
/// - Drain [`poll_transmit`](Self::poll_transmit), write each [`Transmit`] in order, and
///   acknowledge each fully written one with [`handle_transmitted`](Self::handle_transmitted):
///   that is when its request slot and byte budget are released.
/// - Wake at [`poll_timeout`](Self::poll_timeout) and call
///   [`handle_timeout`](Self::handle_timeout) (idle connections close).
/// - When [`is_finished`](Self::is_finished) (or on any socket error or shutdown), close
///   the socket and call [`close`](Self::close), which releases every ticket exactly once.
///
/// Every call that can admit or release takes the server's shared [`Admission`]; pass the
/// same one the connection was accepted with. Time never goes backwards: an earlier `now`
/// is treated as the latest seen.
pub struct ServerConnection<S = IpAddr> {
    config: Arc<ServerConfig>,
    session: SessionTicket<S>,
    decoder: RequestDecoder,
    queue: VecDeque<Slot<S>>,
    unacked: VecDeque<Option<RequestTicket<S>>>,
    events: VecDeque<ServerEvent>,
    next_id: u64,
    closing: bool,
    idle_since: Option<Instant>,
    latest: Instant,
    head_buf: BytesMut,
}

impl<S: fmt::Debug> fmt::Debug for ServerConnection<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConnection")
            .field("source", self.session.source())
            .field("queued", &self.queue.len())
            .field("unacked", &self.unacked.len())
            .field("closing", &self.closing)
            .finish_non_exhaustive()
    }
}

/// Head buffer reserved per connection: a handful of response heads (each under 300
/// bytes) before the buffer has to grow or reclaim.
const HEAD_BUFFER_BYTES: usize = 1024;

impl<S: Ord + Clone> ServerConnection<S> {
    /// Admission at connect: admits the connection from `source`, or returns the refusal
    /// response to write before closing. A refusal reserves nothing.
    pub fn accept(
        now: Instant,
        admission: &mut Admission<S>,
        source: S,
        config: Arc<ServerConfig>,
    ) -> Accept<S> {
        match admission.open_session(now, source) {
            Ok(session) => Accept::Admitted(ServerConnection {
                config,
                session,
                decoder: RequestDecoder::new(),
                queue: VecDeque::new(),
                unacked: VecDeque::new(),
                events: VecDeque::new(),
                next_id: 0,
                closing: false,
                idle_since: Some(now),
                latest: now,
                head_buf: BytesMut::with_capacity(HEAD_BUFFER_BYTES),
            }),
            Err(refusal) => {
                let mut out = BytesMut::with_capacity(256);
                let load = advertised_load(admission);
                refusal::encode(&refusal, Some(&config.node_id), load, &mut out);
                Accept::Refused {
                    refusal,
                    response: out.freeze(),
                }
            }
        }
    }

    /// The source this connection was admitted for.
    pub fn source(&self) -> &S {
        self.session.source()
    }

    fn clamp(&mut self, now: Instant) -> Instant {
        self.latest = self.latest.max(now);
        self.latest
    }

    /// Requests decoded and not yet acknowledged as written.
    pub fn in_progress(&self) -> usize {
        self.queue.len() + self.unacked.len()
    }

    /// Bytes received from the client. Returns how many were taken.
    pub fn handle_input(
        &mut self,
        now: Instant,
        admission: &mut Admission<S>,
        data: &[u8],
    ) -> usize {
        let now = self.clamp(now);
        if self.closing {
            return data.len();
        }
        let taken = self.decoder.feed(data);
        self.advance(now, admission);
        taken
    }

    /// The client closed its sending side: no more requests; queued ones are still
    /// answered.
    pub fn handle_eof(&mut self, now: Instant) {
        self.clamp(now);
        self.closing = true;
    }

    /// How many bytes [`handle_input`](Self::handle_input) would take now.
    pub fn room(&self) -> usize {
        if self.closing {
            0
        } else {
            self.decoder.room()
        }
    }

    /// Decodes requests while the connection's depth allows.
    fn advance(&mut self, now: Instant, admission: &mut Admission<S>) {
        let depth = admission.config().max_requests_per_session;
        while !self.closing && self.in_progress() < depth {
            match self.decoder.decode() {
                Ok(None) => break,
                Ok(Some(request)) => self.on_request(now, admission, request),
                Err(e) => {
                    let kind = kind_for_status(e.status());
                    self.push_fixed(kind, true, advertised_load(admission));
                }
            }
        }
    }

    fn new_id(&mut self) -> RequestId {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        id
    }

    fn push_fixed(&mut self, kind: ResponseKind<'_>, close: bool, load: Option<u32>) {
        let id = self.new_id();
        let transmit = self.frame(kind, Bytes::new(), close, load);
        self.closing |= transmit.close;
        self.idle_since = None;
        self.queue.push_back(Slot {
            id,
            ticket: None,
            kind: SlotKind::Fixed,
            close_after: transmit.close,
            ready: Some(transmit),
        });
    }

    fn on_request(&mut self, now: Instant, admission: &mut Admission<S>, request: Request) {
        let close = !request.keep_alive();
        let route = match request.route() {
            Ok(route) => route,
            Err(rejection) => {
                // 404 unknown path, 405 method, 400 path/hop: the source is never invoked.
                let load = advertised_load(admission);
                self.push_fixed(kind_for_status(rejection.status()), close, load);
                return;
            }
        };
        match route {
            Route::Roster => {
                let caller = roster_caller(&request);
                let id = self.new_id();
                self.idle_since = None;
                self.closing |= close;
                self.queue.push_back(Slot {
                    id,
                    ticket: None,
                    kind: SlotKind::Roster,
                    ready: None,
                    close_after: close,
                });
                self.events.push_back(ServerEvent::Roster { id, caller });
            }
            Route::Block { path, hop } => {
                let ticket = match admission.begin_request(now, &mut self.session) {
                    Ok(t) => t,
                    Err(refusal) => {
                        self.push_refusal(&refusal, advertised_load(admission));
                        return;
                    }
                };
                let origin = request.origin_bytes();
                let id = self.new_id();
                self.idle_since = None;
                self.closing |= close;
                let source_request = SourceRequest { path, origin, hop };
                let declined = match (&self.config.relay, &source_request.origin) {
                    (Some(relay), Some(origin)) => {
                        let identity: &dyn OriginIdentity = &*self.config.identity;
                        match core::str::from_utf8(origin) {
                            Ok(o) => {
                                relay::screen(relay, identity, o, path.key.as_bytes(), path.index)
                                    .is_err()
                            }
                            Err(_) => true,
                        }
                    }
                    _ => false,
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
                };
                if declined {
                    // A requester error: 404 before any cache or upstream access.
                    let load = advertised_load(admission);
                    slot.ready =
                        Some(self.frame(ResponseKind::NotFound, Bytes::new(), close, load));
                } else {
                    self.events.push_back(ServerEvent::Fetch {
                        id,
                        request: source_request,
                    });
                }
                self.queue.push_back(slot);
            }
        }
    }

    fn push_refusal(&mut self, refusal: &Refusal, load: Option<u32>) {
        let id = self.new_id();
        let mut out = BytesMut::with_capacity(256);
        refusal::encode(refusal, Some(&self.config.node_id), load, &mut out);
        self.closing = true;
        self.idle_since = None;
        self.queue.push_back(Slot {
            id,
            ticket: None,
            kind: SlotKind::Fixed,
            close_after: true,
            ready: Some(Transmit {
                head: out.freeze(),
                body: Bytes::new(),
                close: true,
            }),
        });
    }

    fn frame(
        &mut self,
        kind: ResponseKind<'_>,
        body: Bytes,
        close: bool,
        load: Option<u32>,
    ) -> Transmit {
        let mut response = OutgoingResponse::new(kind, Some(&self.config.node_id));
        response.close = close;
        response.load = load;
        let close = response.closes();
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
            close,
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
        self.clamp(now);
        let config = Arc::clone(&self.config);
        let relay = config.relay;
        let slot = self
            .slot_mut(id)
            .ok_or(ServerUsageError::UnknownRequest(id))?;
        let SlotKind::Block { request, relayed } = &mut slot.kind else {
            return Err(ServerUsageError::UnknownRequest(id));
        };
        let close = slot.close_after;
        let kind = match result {
            SourceResult::Found(block) => {
                let len = block.len() as u64;
                let ticket = slot
                    .ticket
                    .as_mut()
                    .ok_or(ServerUsageError::UnknownRequest(id))?;
                if let Err(refusal) = admission.reserve_bytes(ticket, len) {
                    let mut out = BytesMut::with_capacity(256);
                    let load = advertised_load(admission);
                    refusal::encode(&refusal, Some(&config.node_id), load, &mut out);
                    slot.close_after = true;
                    slot.ready = Some(Transmit {
                        head: out.freeze(),
                        body: Bytes::new(),
                        close: true,
                    });
                    self.closing = true;
                    return Ok(());
                }
                let load = advertised_load(admission);
                let transmit = self.frame(
                    ResponseKind::Block {
                        content_length: len,
                    },
                    block,
                    close,
                    load,
                );
                self.set_ready(id, transmit);
                return Ok(());
            }
            SourceResult::Miss => match (relay, &request.origin, *relayed) {
                (Some(config), Some(_), false) => match relay::on_miss(&config, request.hop.0) {
                    Ok(next) => {
                        *relayed = true;
                        let mut relayed_request = request.clone();
                        relayed_request.hop = Hop(next);
                        self.events.push_back(ServerEvent::Relay {
                            id,
                            request: relayed_request,
                        });
                        return Ok(());
                    }
                    Err(_) => ResponseKind::NotFound,
                },
                _ => ResponseKind::NotFound,
            },
            SourceResult::Failed => ResponseKind::InternalServerError,
            SourceResult::UpstreamRefused { status } if (100..=999).contains(&status) => {
                ResponseKind::UpstreamRefused {
                    upstream_status: status,
                }
            }
            SourceResult::UpstreamRefused { .. } => ResponseKind::InternalServerError,
        };
        let transmit = self.frame(kind, Bytes::new(), close, advertised_load(admission));
        self.set_ready(id, transmit);
        Ok(())
    }

    fn set_ready(&mut self, id: RequestId, transmit: Transmit) {
        if let Some(slot) = self.queue.iter_mut().find(|s| s.id == id) {
            self.closing |= transmit.close;
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
            // Roster answers are not block reads; nobody spreads by them.
            None,
        );
        self.set_ready(id, transmit);
        Ok(())
    }

    /// The next thing for the application to do.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// The next response to write, strictly in request order: a response whose source
    /// answered early waits for the ones before it.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let ready = self.queue.front().is_some_and(|s| s.ready.is_some());
        if !ready {
            return None;
        }
        let mut slot = self.queue.pop_front()?;
        self.unacked.push_back(slot.ticket.take());
        slot.ready.take()
    }

    /// The oldest written-but-unacknowledged [`Transmit`] has been fully written: release
    /// its request slot and bytes, and decode more pipelined requests.
    pub fn handle_transmitted(&mut self, now: Instant, admission: &mut Admission<S>) {
        let now = self.clamp(now);
        if let Some(ticket) = self.unacked.pop_front() {
            if let Some(ticket) = ticket {
                admission.finish_request(now, Some(&mut self.session), ticket);
            }
            if self.in_progress() == 0 {
                self.idle_since = Some(now);
            }
        }
        self.advance(now, admission);
    }

    /// Whether the connection is done: close the socket and call [`close`](Self::close).
    pub fn is_finished(&self) -> bool {
        self.closing && self.in_progress() == 0
    }

    /// The idle deadline, while nothing is in progress.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closing {
            return None;
        }
        self.idle_since.map(|t| t + self.config.idle_timeout)
    }

    /// Closes an idle connection whose deadline passed. Spurious calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clamp(now);
        if self.poll_timeout().is_some_and(|at| at <= now) {
            self.closing = true;
        }
    }

    /// Ends the connection (finished, peer reset, error, shutdown): releases every request
    /// ticket and the session exactly once. Consumes the machine.
    pub fn close(mut self, now: Instant, admission: &mut Admission<S>) {
        let now = self.latest.max(now);
        for slot in self.queue.drain(..) {
            if let Some(ticket) = slot.ticket {
                admission.finish_request(now, None, ticket);
            }
        }
        for ticket in self.unacked.drain(..).flatten() {
            admission.finish_request(now, None, ticket);
        }
        admission.close_session(now, self.session);
    }
}

fn roster_caller(request: &Request) -> Option<RosterCaller> {
    let id = core::str::from_utf8(request.node()?).ok()?;
    let addr = core::str::from_utf8(request.peer_addr()?).ok()?;
    check_identity(id, addr).ok()?;
    Some(RosterCaller {
        id: id.to_owned(),
        addr: addr.to_owned(),
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
        let mut c = ServerConfig::new("n", "h:1");
        c.idle_timeout = Duration::ZERO;
        assert_eq!(c.validate(), Err(ServerConfigError::ZeroIdleTimeout));
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
