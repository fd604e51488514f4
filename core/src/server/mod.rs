//! The server side of a peer exchange: admission, relay decisions, the
//! per-connection machine and response framing.
//!
//! A server's job is to answer fast and explicitly: serve what it holds, say 404 when it
//! cannot provide a block, and refuse with a reason and `Retry-After` when it is full
//! (answering the peer's first request, never speaking first), never accept and stay
//! silent.

pub mod admission;
pub mod connection;
pub mod relay;

pub use admission::{
    Admission, AdmissionConfig, AdmissionConfigError, RateLimit, RequestTicket, SessionTicket,
};
pub use connection::{
    RequestId, RequestRejection, RosterCaller, ServerConfig, ServerConfigError, ServerConnection,
    ServerEvent, ServerTimer, ServerUsageError, SourceRequest, SourceResult, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_LINGER, DEFAULT_REFUSAL_HEAD_TIMEOUT, DEFAULT_SEND_TIMEOUT, DEFAULT_SOURCE_TIMEOUT,
    MAX_REFUSAL_HEAD_BYTES,
};
pub use relay::{Decline, OriginIdentity, RelayConfig, TrustOrigin};
