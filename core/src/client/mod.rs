//! The client side of a peer exchange: one request to one peer.
//!
//! The driver dials, moves bytes and runs timers; this module decides when to give up
//! ([`deadlines`]), reads and classifies the response ([`exchange`]), and says what the
//! ending means for the breaker and the cooldown table ([`outcome`]).

pub mod deadlines;
pub mod exchange;
pub mod outcome;

pub use deadlines::{DeadlineError, Deadlines, RequestTimeout, Timer, TimerTable};
pub use exchange::{
    BlockRequest, Caller, ClientEvent, Connection, Exchange, ExchangeRequest, Link, RequestKind,
};
pub use outcome::{
    BreakerOutcome, BreakerPath, Classification, ConnectionFate, CooldownEntry, Ending,
    ExchangeError, ExchangeOutcome, LengthError, ProtocolError, RosterAnswer,
};

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
