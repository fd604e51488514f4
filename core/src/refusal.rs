//! Refusals: "not now", said explicitly and fast.
//!
//! A node that has no free slot answers `503 Service Unavailable` with the refusal header
//! (`X-Peerblock-Refused: <reason>`) and `Retry-After`, then closes. Everything about a
//! refusal lives here, used by the server (encode), the client (decode and cap) and the
//! read machine and cooldown table (the cap):
//!
//! - [`RefusalReason`]: which limit was hit, and its wire token;
//! - [`Refusal`]: a reason and the advertised wait, as the server decides it;
//! - [`encode`]: the complete 503 response;
//! - [`retry_after_secs`]: how a wait is rounded for `Retry-After`;
//! - [`PeerRefusal`] and [`PeerRefusal::from_head`]: a refusal as a client read it, its
//!   wait bounded by the one cap, [`DEFAULT_MAX_RETRY_AFTER`];
//! - [`DEFAULT_REFUSED_COOLDOWN`]: how long a refusing peer is skipped when it said nothing.

use bytes::BytesMut;
use core::fmt;

use crate::http::{OutgoingResponse, ResponseHead, ResponseKind};
use crate::time::Duration;

/// How long a refusing peer is skipped when its refusal carries no usable `Retry-After`:
/// 15 s, the reference's refusal cooldown (against 30 minutes for a failed dial).
pub const DEFAULT_REFUSED_COOLDOWN: Duration = Duration::from_secs(15);

/// The one cap on how long a peer's `Retry-After` can make us skip it: 15 s.
///
/// A read waits out a refusal at most three times and the reference bounds that at 45 s in
/// all (3 × 15 s), so a peer cannot banish itself from clients for longer than the
/// refusal cooldown. The client ([`crate::client::ClientConfig::max_refusal_cooldown`]),
/// the cooldown table ([`crate::cooldown::CooldownConfig::max_retry_after`]) and the read
/// machine ([`crate::read::ReadConfig`]) all default to this value.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(15);

/// Which limit caused a refusal. Sent on the wire in the refusal header (see
/// [`RefusalReason::as_token`]) so an operator reading client logs knows what to raise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefusalReason {
    /// [`AdmissionConfig::max_sessions`](crate::server::AdmissionConfig::max_sessions) reached.
    Sessions,
    /// [`AdmissionConfig::max_sessions_per_source`](crate::server::AdmissionConfig::max_sessions_per_source) reached for this source.
    SourceSessions,
    /// [`AdmissionConfig::max_requests`](crate::server::AdmissionConfig::max_requests) reached.
    Requests,
    /// The source's rate bucket is empty.
    Rate,
    /// [`AdmissionConfig::max_inflight_bytes`](crate::server::AdmissionConfig::max_inflight_bytes) would be exceeded.
    InflightBytes,
    /// [`AdmissionConfig::max_inflight_bytes_per_source`](crate::server::AdmissionConfig::max_inflight_bytes_per_source) would be exceeded.
    SourceInflightBytes,
}

impl RefusalReason {
    /// Every reason, in wire-token order (for parsers and tests).
    pub const ALL: [RefusalReason; 6] = [
        RefusalReason::Sessions,
        RefusalReason::SourceSessions,
        RefusalReason::Requests,
        RefusalReason::Rate,
        RefusalReason::InflightBytes,
        RefusalReason::SourceInflightBytes,
    ];

    /// The token sent in the refusal header.
    pub const fn as_token(self) -> &'static str {
        match self {
            RefusalReason::Sessions => "sessions",
            RefusalReason::SourceSessions => "source-sessions",
            RefusalReason::Requests => "requests",
            RefusalReason::Rate => "rate",
            RefusalReason::InflightBytes => "inflight-bytes",
            RefusalReason::SourceInflightBytes => "source-inflight-bytes",
        }
    }

    /// Parses a refusal header token (ASCII case-insensitive, surrounding whitespace
    /// ignored). `None` for a token this version does not know: the refusal still counts,
    /// only its reason is unknown.
    pub fn from_token(token: &[u8]) -> Option<RefusalReason> {
        let token = token.trim_ascii();
        RefusalReason::ALL
            .into_iter()
            .find(|r| r.as_token().as_bytes().eq_ignore_ascii_case(token))
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_token())
    }
}

/// "Not now": the limit that was hit and how long the client should stay away.
///
/// `Copy` and allocation-free: producing one costs nothing, which keeps refusing cheap
/// under the very overload that causes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Which limit was hit.
    pub reason: RefusalReason,
    /// How long to stay away (advertised as `Retry-After`, rounded up to whole seconds).
    pub retry_after: Duration,
}

/// `Retry-After` for a wait of `d`: whole seconds, rounded up, at least 1 (a refusal that
/// says "retry in 0 s" would invite an immediate retry storm).
pub fn retry_after_secs(d: Duration) -> u64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    secs.max(1)
}

/// Encodes the complete refusal response into `out`: `503`, the refusal header with the
/// reason token, `Retry-After` ([`retry_after_secs`]), `Connection: close`, the node's
/// advertised load if given (a refusal is the moment a node is most worth steering
/// around), and a short text body.
///
/// A node id that cannot be sent as a header value is left out rather than failing the
/// response.
pub fn encode(refusal: &Refusal, node: Option<&str>, load: Option<u32>, out: &mut BytesMut) {
    let mut response = OutgoingResponse::new(
        ResponseKind::Refused {
            reason: refusal.reason.as_token(),
            retry_after_secs: retry_after_secs(refusal.retry_after),
        },
        node,
    );
    response.load = load;
    if response.encode(out).is_err() {
        response.node = None;
        let _ = response.encode(out);
    }
    out.extend_from_slice(response.kind.error_body());
}

/// A refusal as a client read it from a response head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerRefusal {
    /// The reason token, if the peer sent one this version knows.
    pub reason: Option<RefusalReason>,
    /// The advertised wait, bounded by the cap given to [`PeerRefusal::from_head`];
    /// `None` when the peer sent none (then [`DEFAULT_REFUSED_COOLDOWN`] applies).
    pub retry_after: Option<Duration>,
}

impl PeerRefusal {
    /// The refusal `head` carries (a `503` with the refusal header), its wait bounded by
    /// `cap`; `None` for any other response (a plain 503 is a failure, not a refusal).
    pub fn from_head(head: &ResponseHead, cap: Duration) -> Option<PeerRefusal> {
        if head.status() != 503 || !head.is_refusal() {
            return None;
        }
        Some(PeerRefusal {
            reason: head.refused().and_then(RefusalReason::from_token),
            retry_after: head.retry_after().map(|d| d.min(cap)),
        })
    }

    /// How long to skip the peer: its bounded wait, or [`DEFAULT_REFUSED_COOLDOWN`].
    pub fn cooldown(&self) -> Duration {
        self.retry_after.unwrap_or(DEFAULT_REFUSED_COOLDOWN)
    }
}
