//! The machine's vocabulary with the application: the requests it hands out
//! ([`ServerEvent`]), the answers it takes ([`SourceResult`]), its timers and usage errors.

use bytes::Bytes;

use crate::http::{Rejection, RequestError};
use crate::server::relay::Decline;
use crate::wire::{BlockPath, Hop, Status};

use super::RequestId;
#[cfg(doc)]
use super::{ServerConfig, ServerConnection};
#[cfg(doc)]
use crate::transmit::Transmit;

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
