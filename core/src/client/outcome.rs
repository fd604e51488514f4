//! How an exchange ended, and what that means for the breaker and the cooldown table.
//!
//! Every ending of an exchange is exactly one [`Ending`], and [`Ending::classify`] maps it
//! to one breaker outcome and at most one cooldown entry. The table (also in
//! `docs/exchange.md`):
//!
//! | ending | breaker | cooldown | why |
//! |---|---|---|---|
//! | `Block` (200, exact length, validator passed) | answered | – | the peer did its job |
//! | `Miss` (404) | answered | – | "I do not hold it" is a legitimate answer; counting misses would trip breakers on healthy peers |
//! | `Corrupt` (404 + `X-Peerblock-Miss: corrupt`) | answered | – | the holder checked its copy and refused to serve rot: it did its job |
//! | `Roster` (200 roster) | answered | – | as `Block` |
//! | `Refused` (503 + refusal header) | answered | refused (advertised `Retry-After`, bounded) | the peer is alive and said "not now": skip it briefly, never treat it as dead |
//! | `UpstreamRefused` (502 + `X-DART-Upstream-Status`) | answered | – | the relay worked; the requester's credential was refused upstream |
//! | `Cancelled` (the caller gave up) | answered | – | the peer demonstrably responded; charging it would open circuits on healthy peers (hedging losers) |
//! | `Failed(DialFailed)`, `Failed(DialTimeout)` | hard | failed | a peer we cannot connect to is definitive; opening on one observation is cheap and reversible |
//! | `Failed(Protocol)` | hard | – | a protocol violation: the peer does not speak the wire form |
//! | `Failed(Length)`, `Failed(Validation)` | soft | – | wrong bytes for this block: bit rot on one copy is a fault of that block, not of the peer; it spends one unit of the failure budget, so a peer whose every block is wrong still opens its circuit after a few, while one rotten block never stops reads of the peer's other blocks |
//! | `Failed(ResponseHeaderTimeout)`, `Failed(RequestTimeout)` | soft | – | the peer was slow; may be transient |
//! | `Failed(Status)` (500, 503 without refusal header, other) | soft | – | the peer answered but failed; may be transient |
//! | `Failed(Closed)` (connection ended before the response did) | soft | – | a truncated response; may be transient |
//! | `Range(..)` (an object origin's `206`, `416` empty, `200` ignoring `Range`, object changed) | answered | – | the origin answered; what it means is the read's concern (`RangeAnswer`) |
//!
//! ## Feeding the breaker and cooldown table
//!
//! The client machine does not own a breaker or a cooldown table; the driver feeds them:
//!
//! - [`BreakerOutcome`] *is* the breaker's `Outcome` (one type, two names), recorded with
//!   the permit taken when the exchange started.
//! - [`BreakerPath::Data`]: take the permit with the breaker's scoped `admit` before
//!   dialing (and skip the peer if rejected). [`BreakerPath::Roster`]: take it with
//!   `admit_roster`, which never refuses (discovery must reach peers whose circuit is open)
//!   but still records the outcome.
//! - [`CooldownEntry`] *is* the cooldown table's `DialOutcome`: `Refused { retry_after }`
//!   for a refusal, `Failed` for a dial that failed.

use bytes::Bytes;

pub use crate::http::LengthError;

use crate::http::ResponseError;

use crate::refusal::PeerRefusal;
use crate::roster::{Roster, RosterDecodeError};
use crate::time::Duration;

/// What the breaker should record for an exchange: the breaker's own
/// [`Outcome`](crate::breaker::Outcome), so a driver passes it to
/// [`Breaker::record`](crate::breaker::Breaker::record) unchanged.
pub use crate::breaker::Outcome as BreakerOutcome;

/// How the driver takes the breaker permit for this exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerPath {
    /// A block fetch: scoped admission, skipped while the circuit is open.
    Data,
    /// A roster fetch: bypasses admission (there is no other source of membership), but
    /// its outcome is still recorded.
    Roster,
}

/// A dial-level entry for the cooldown table: the table's own
/// [`DialOutcome`](crate::cooldown::DialOutcome), so a driver passes it to
/// [`CooldownTable::record`](crate::cooldown::CooldownTable::record) unchanged. A refusal's
/// `retry_after` is already bounded by [`super::ClientConfig::max_refusal_cooldown`];
/// `None` when the peer sent none (the table's default refused cooldown applies).
pub use crate::cooldown::DialOutcome as CooldownEntry;

/// A response that is not the wire form. The peer's fault: the typed error is kept so a
/// driver can log it, count it and charge the peer (the breaker already records it as a
/// hard failure).
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The response head or body framing is malformed (never a length error, which is
    /// [`ExchangeError::Length`], nor a truncation, which is [`ExchangeError::Closed`]).
    #[error("malformed response: {0}")]
    Http(#[source] ResponseError),
    /// A roster response body is not a valid roster.
    #[error(transparent)]
    Roster(#[from] RosterDecodeError),
    /// A `206` answer to a `Range` request whose `Content-Range` is missing, malformed,
    /// overflowing or names other bytes than asked for.
    #[error("bad Content-Range: {0}")]
    ContentRange(#[from] super::range::ContentRangeError),
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExchangeError {
    /// The driver reported that connecting failed (refused port, unreachable host).
    #[error("could not connect to the peer")]
    DialFailed,
    /// The connection was not established within the dial deadline.
    #[error("connecting to the peer took longer than {0:?}")]
    DialTimeout(Duration),
    /// The response head did not arrive within the response-header deadline.
    #[error("no response head within {0:?}")]
    ResponseHeaderTimeout(Duration),
    /// The exchange did not complete within the request deadline.
    #[error("request did not complete within {0:?}")]
    RequestTimeout(Duration),
    /// The body had the wrong length; no data is returned.
    #[error("block length: {0}")]
    Length(#[from] LengthError),
    /// The caller's validator rejected a body of the exact expected length.
    #[error("the block failed validation")]
    Validation,
    /// The peer answered with a status that is neither success, miss, refusal nor upstream
    /// refusal.
    #[error("unexpected status {0}")]
    Status(u16),
    /// The connection ended before the response did (truncated head or body).
    #[error("connection closed before the response was complete")]
    Closed,
    /// The response violates the wire form.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

/// A fetched roster and who sent it.
#[derive(Clone, Debug, PartialEq)]
pub struct RosterAnswer {
    /// The roster, repaired to include the responder if it omitted itself.
    pub roster: Roster,
    /// The responder's id from its `X-DART-Node` header: liveness is credited to this id,
    /// never to the dialed address (pod-IP reuse can recycle it). `None` if it sent none.
    pub responder: Option<String>,
}

/// How one exchange ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Ending {
    /// 200 with exactly the block bytes (validated if a validator was given).
    Block(Bytes),
    /// 404: the peer does not hold the block.
    Miss,
    /// 404 with `X-Peerblock-Miss: corrupt`: the peer held the block but its stored copy
    /// failed verification and was quarantined. The peer did its job (answered); the
    /// block exists, and this peer has no valid copy of it.
    Corrupt,
    /// A roster fetch succeeded.
    Roster(RosterAnswer),
    /// 503 with the refusal header: the peer is full.
    Refused(PeerRefusal),
    /// 502 with `X-DART-Upstream-Status`: the relay's upstream refused the requester's
    /// credential. The fetch failed; the peer is not to blame.
    UpstreamRefused {
        /// The upstream's status code.
        status: u16,
    },
    /// The caller cancelled (or its own deadline passed) before the exchange ended.
    Cancelled,
    /// A `Range` request's meaningful answer (the table on [`RangeAnswer`](super::RangeAnswer)): the bytes, an
    /// empty object, `Range` ignored, or the object changed.
    Range(super::range::RangeAnswer),
    /// The exchange failed.
    Failed(ExchangeError),
}

/// The breaker outcome and cooldown entry for an ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classification {
    /// What the breaker records.
    pub breaker: BreakerOutcome,
    /// What the cooldown table records, if anything.
    pub cooldown: Option<CooldownEntry>,
}

impl Ending {
    /// The row of the classification table (module docs) this ending falls in.
    pub fn classify(&self) -> Classification {
        use BreakerOutcome::*;
        let (breaker, cooldown) = match self {
            Ending::Block(_) | Ending::Miss | Ending::Corrupt | Ending::Roster(_) => {
                (Answered, None)
            }
            Ending::Refused(r) => (
                Answered,
                Some(CooldownEntry::Refused {
                    retry_after: r.retry_after,
                }),
            ),
            Ending::UpstreamRefused { .. } | Ending::Cancelled => (Answered, None),
            // The origin answered; whether the answer helps is the read's business.
            Ending::Range(_) => (Answered, None),
            Ending::Failed(e) => match e {
                ExchangeError::DialFailed | ExchangeError::DialTimeout(_) => {
                    (HardFailure, Some(CooldownEntry::Failed))
                }
                ExchangeError::Protocol(_) => (HardFailure, None),
                ExchangeError::Length(_)
                | ExchangeError::Validation
                | ExchangeError::ResponseHeaderTimeout(_)
                | ExchangeError::RequestTimeout(_)
                | ExchangeError::Status(_)
                | ExchangeError::Closed => (SoftFailure, None),
            },
        };
        Classification { breaker, cooldown }
    }

    /// Whether this ending is a failure of the fetch from the caller's point of view
    /// (everything except a block, a miss and a roster).
    pub fn is_error(&self) -> bool {
        match self {
            Ending::Range(answer) => answer.is_error(),
            _ => !matches!(self, Ending::Block(_) | Ending::Miss | Ending::Roster(_)),
        }
    }
}

/// Whether the connection an exchange used can carry another request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionFate {
    /// Keep-alive response, body read exactly to its end, nothing left unread: take the
    /// connection with `Exchange::take_connection` and pool it (the next exchange starts
    /// with `Link::Pooled`).
    Reuse,
    /// Close it (the peer asked to, the body was not read to its end, the exchange
    /// failed or was cancelled mid-response, or no connection was ever made).
    Close,
}

/// The complete result of an exchange, handed to the driver once.
#[derive(Debug)]
pub struct ExchangeOutcome {
    /// How it ended (and the data, if any).
    pub ending: Ending,
    /// `ending.classify().breaker`, for convenience.
    pub breaker: BreakerOutcome,
    /// `ending.classify().cooldown`, for convenience.
    pub cooldown: Option<CooldownEntry>,
    /// How the breaker permit was (to be) taken.
    pub path: BreakerPath,
    /// What to do with the connection.
    pub connection: ConnectionFate,
    /// The peer closed a pooled connection before a single response byte arrived: it had
    /// most likely retired the idle connection just as we reused it, so the request never
    /// reached it. Drivers retry once on a fresh connection instead of recording this
    /// outcome (as HTTP clients do for idempotent requests); if they do record it, it is
    /// the soft failure `breaker` says.
    pub retry_fresh: bool,
    /// The load the peer advertised in its response head (`X-Peerblock-Load`), if it sent
    /// one: record it in the driver's [`LoadTable`](crate::load::LoadTable) for
    /// load-aware spreading, whatever the ending (a refusal's load is as telling as a
    /// `200`'s).
    pub load: Option<u32>,
}

impl ExchangeOutcome {
    /// Bundles an ending with its classification.
    pub fn new(ending: Ending, path: BreakerPath, connection: ConnectionFate) -> Self {
        let Classification { breaker, cooldown } = ending.classify();
        ExchangeOutcome {
            ending,
            breaker,
            cooldown,
            path,
            connection,
            retry_fresh: false,
            load: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(e: Ending) -> (BreakerOutcome, Option<CooldownEntry>) {
        let c = e.classify();
        (c.breaker, c.cooldown)
    }

    #[test]
    fn a_block_a_miss_and_a_roster_are_not_errors_the_rest_are() {
        assert!(!Ending::Block(Bytes::from_static(b"x")).is_error());
        assert!(!Ending::Miss.is_error());
        assert!(Ending::Cancelled.is_error());
        assert!(Ending::Failed(ExchangeError::Closed).is_error());
    }

    #[test]
    fn block_is_answered() {
        assert_eq!(
            class(Ending::Block(Bytes::from_static(b"x"))),
            (BreakerOutcome::Answered, None)
        );
    }

    #[test]
    fn miss_is_answered_never_a_failure() {
        assert_eq!(class(Ending::Miss), (BreakerOutcome::Answered, None));
    }

    #[test]
    fn refusal_is_answered_with_a_refused_cooldown() {
        let r = PeerRefusal {
            reason: Some(crate::refusal::RefusalReason::Sessions),
            retry_after: Some(Duration::from_secs(3)),
        };
        assert_eq!(
            class(Ending::Refused(r)),
            (
                BreakerOutcome::Answered,
                Some(CooldownEntry::Refused {
                    retry_after: Some(Duration::from_secs(3))
                })
            )
        );
    }

    #[test]
    fn upstream_refusal_is_answered_but_an_error() {
        let e = Ending::UpstreamRefused { status: 403 };
        assert!(e.is_error());
        assert_eq!(class(e), (BreakerOutcome::Answered, None));
    }

    #[test]
    fn caller_cancellation_is_answered() {
        assert_eq!(class(Ending::Cancelled), (BreakerOutcome::Answered, None));
    }

    #[test]
    fn dial_failure_and_dial_timeout_are_hard_with_failed_cooldown() {
        for e in [
            ExchangeError::DialFailed,
            ExchangeError::DialTimeout(Duration::from_secs(1)),
        ] {
            assert_eq!(
                class(Ending::Failed(e)),
                (BreakerOutcome::HardFailure, Some(CooldownEntry::Failed))
            );
        }
    }

    #[test]
    fn a_protocol_violation_is_hard() {
        assert_eq!(
            class(Ending::Failed(ExchangeError::Protocol(
                ProtocolError::Http(ResponseError::MalformedStatusLine)
            ))),
            (BreakerOutcome::HardFailure, None)
        );
    }

    #[test]
    fn wrong_bytes_for_one_block_are_soft_so_one_rotten_block_never_opens_a_circuit() {
        for e in [
            ExchangeError::Length(LengthError::Long { limit: 1 }),
            ExchangeError::Validation,
        ] {
            let ending = Ending::Failed(e);
            assert!(ending.is_error());
            assert_eq!(class(ending), (BreakerOutcome::SoftFailure, None));
        }
    }

    #[test]
    fn a_corrupt_copy_reported_by_its_holder_is_answered_and_an_error() {
        assert!(Ending::Corrupt.is_error());
        assert_eq!(class(Ending::Corrupt), (BreakerOutcome::Answered, None));
    }

    #[test]
    fn timeouts_statuses_and_truncation_are_soft() {
        for e in [
            ExchangeError::ResponseHeaderTimeout(Duration::from_secs(10)),
            ExchangeError::RequestTimeout(Duration::from_secs(30)),
            ExchangeError::Status(500),
            ExchangeError::Closed,
        ] {
            assert_eq!(
                class(Ending::Failed(e)),
                (BreakerOutcome::SoftFailure, None)
            );
        }
    }
}
