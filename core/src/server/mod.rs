//! The server side of a peer exchange: admission, relay decisions, the
//! per-connection machine and response framing.
//!
//! A server's job is to answer fast and explicitly: serve what it holds, say 404 when it
//! cannot provide a block, and refuse at once with a reason and `Retry-After` when it is
//! full, never accept and stay silent.

pub mod admission;
pub mod connection;
pub mod relay;

pub use admission::{
    Admission, AdmissionConfig, AdmissionConfigError, RateLimit, RequestTicket, SessionTicket,
};
pub use connection::{
    Accept, RequestId, RosterCaller, ServerConfig, ServerConnection, ServerEvent, ServerUsageError,
    SourceRequest, SourceResult, Transmit, DEFAULT_IDLE_TIMEOUT,
};
pub use relay::{Decline, OriginIdentity, RelayConfig, TrustOrigin};
