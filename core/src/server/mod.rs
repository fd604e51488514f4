//! The server side of a peer exchange: admission, relay decisions, single-flight relays, the
//! per-connection machine and response framing.
//!
//! A server's job is to answer fast and explicitly: serve what it holds, say 404 when it
//! cannot provide a block, and refuse with a reason and `Retry-After` when it is full
//! (answering the peer's first request, never speaking first), never accept and stay
//! silent.

mod admission;
mod connection;
mod flight;
mod relay;

pub use admission::{
    Admission, AdmissionConfig, AdmissionConfigError, RateLimit, RequestTicket, SessionTicket,
    DEFAULT_MAX_INFLIGHT_BYTES, DEFAULT_MAX_INFLIGHT_BYTES_PER_SOURCE, DEFAULT_MAX_REFUSALS,
    DEFAULT_MAX_REQUESTS, DEFAULT_MAX_REQUESTS_PER_SESSION, DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_SOURCE, DEFAULT_MAX_TRACKED_SOURCES, DEFAULT_RETRY_AFTER,
};
pub use connection::{
    RequestId, RequestRejection, RosterCaller, ServerConfig, ServerConfigError, ServerConnection,
    ServerEvent, ServerTimer, ServerUsageError, SourceRequest, SourceResult, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_LINGER, DEFAULT_REFUSAL_HEAD_TIMEOUT, DEFAULT_SEND_TIMEOUT, DEFAULT_SOURCE_TIMEOUT,
    MAX_REFUSAL_HEAD_BYTES,
};
pub use flight::{
    FlightAnswer, FlightConfig, FlightConfigError, FlightEvent, FlightId, FlightKey, FlightTimer,
    FlightsFull, RelayFlights, Want, DEFAULT_MAX_BLOCK_BYTES, DEFAULT_MAX_FLIGHTS,
    DEFAULT_MAX_FLIGHT_BYTES, DEFAULT_MAX_WAITERS, DEFAULT_MAX_WAITERS_PER_FLIGHT,
};
pub use relay::{
    Decline, OriginIdentity, RelayConfig, TrustOrigin, DEFAULT_MAX_BLOCK_INDEX, DEFAULT_MAX_HOP,
    MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX,
};
