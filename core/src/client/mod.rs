//! The client side of a peer exchange: one request to one peer.
//!
//! The driver dials, moves bytes and runs timers; this module decides when to give up
//! ([`Deadlines`]), reads and classifies the response ([`Exchange`]), says what the
//! ending means for the breaker and the cooldown table ([`ExchangeOutcome`]), and keeps
//! the client's shared knowledge of its peers, which the read machine consults
//! ([`Peers`]).

mod deadlines;
mod exchange;
mod outcome;
mod peers;
mod range;

pub use deadlines::{
    ClientTimer, DeadlineError, Deadlines, RequestTimeout, DEFAULT_DIAL_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_RESPONSE_HEADER_TIMEOUT,
};
pub use exchange::{
    BlockRequest, Caller, ClientEvent, Connection, Exchange, ExchangeRequest, Link, RequestKind,
};
pub use outcome::{
    BreakerOutcome, BreakerPath, Classification, ConnectionFate, CooldownEntry, Ending,
    ExchangeError, ExchangeOutcome, LengthError, ProtocolError, RosterAnswer,
};
pub use peers::{
    get_outcome, placement_members, Finished, GetTicket, Peers, PeersConfig, PeersConfigError,
    INVALID_STRIKES, INVALID_WINDOW, MAX_INVALID_TRACKED,
};
pub use range::{
    head_validator, is_etag, ContentRange, ContentRangeError, ObjectChange, ObjectRange,
    RangeAnswer,
};

use crate::http::EncodeError;
use crate::time::Duration;

/// Default [`ClientConfig::max_body`]: 64 MiB.
///
/// The cap on a body read without an expected length (`get` rather than
/// `get_validated`): no peer can pin more client memory than a server's whole default
/// in-flight budget.
pub const DEFAULT_MAX_BODY: u64 = 64 * 1024 * 1024;

/// Configuration shared by a client's exchanges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// The three deadlines.
    pub deadlines: Deadlines,
    /// Upper bound on the suppression a refusal's `Retry-After` can ask for.
    /// Default [`crate::refusal::DEFAULT_MAX_RETRY_AFTER`], the one refusal cap.
    pub max_refusal_cooldown: Duration,
    /// Largest body read when the caller gave no expected length. Default
    /// [`DEFAULT_MAX_BODY`].
    pub max_body: u64,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            deadlines: Deadlines::default(),
            max_refusal_cooldown: crate::refusal::DEFAULT_MAX_RETRY_AFTER,
            max_body: DEFAULT_MAX_BODY,
        }
    }
}

/// Local misuse found by [`Exchange::new`]: a configuration that could never let an
/// exchange succeed, or a request that cannot be sent. Nothing reached the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeConfigError {
    /// A deadline in [`ClientConfig::deadlines`] is zero (the error names the field).
    #[error(transparent)]
    Deadline(#[from] DeadlineError),
    /// A bound in [`ClientConfig`] is zero.
    #[error("client config `{field}` is zero: {why}")]
    Zero {
        /// The offending field.
        field: &'static str,
        /// What a zero would do.
        why: &'static str,
    },
    /// A header value of the request cannot be sent (control characters).
    #[error(transparent)]
    Request(#[from] EncodeError),
}

impl ClientConfig {
    /// Checks every field: each deadline ([`Deadlines::validate`]), `max_body` and
    /// `max_refusal_cooldown` non-zero. [`Exchange::new`] calls it.
    pub fn validate(&self) -> Result<(), ExchangeConfigError> {
        self.deadlines.validate()?;
        if self.max_body == 0 {
            return Err(ExchangeConfigError::Zero {
                field: "max_body",
                why: "every unvalidated GET would fail on its first body byte",
            });
        }
        if self.max_refusal_cooldown.is_zero() {
            return Err(ExchangeConfigError::Zero {
                field: "max_refusal_cooldown",
                why: "a refusing peer would never be skipped",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default body cap is 64 MiB, and no more than a server's whole default budget of
    /// response bytes in flight.
    #[test]
    fn the_default_body_cap_is_64_mib_a_servers_whole_default_in_flight_budget() {
        let cap = ClientConfig::default().max_body;
        assert_eq!(cap, 64 << 20);
        assert_eq!(
            cap,
            crate::server::AdmissionConfig::default().max_inflight_bytes
        );
    }

    #[test]
    fn default_config_is_valid() {
        assert_eq!(ClientConfig::default().validate(), Ok(()));
    }

    #[test]
    fn zero_bounds_are_config_errors_naming_the_field() {
        let c = ClientConfig {
            max_body: 0,
            ..ClientConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(ExchangeConfigError::Zero {
                field: "max_body",
                ..
            })
        ));
        let c = ClientConfig {
            max_refusal_cooldown: Duration::ZERO,
            ..ClientConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(ExchangeConfigError::Zero {
                field: "max_refusal_cooldown",
                ..
            })
        ));
        let mut c = ClientConfig::default();
        c.deadlines.response_header = Duration::ZERO;
        assert_eq!(
            c.validate(),
            Err(ExchangeConfigError::Deadline(DeadlineError::Zero {
                field: "response_header"
            }))
        );
    }
}
