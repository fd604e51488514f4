//! The server's configuration: [`ServerConfig`], its default timeouts and bounds, and
//! what makes one unusable ([`ServerConfigError`]).

use std::sync::Arc;

use core::fmt;

#[cfg(doc)]
use super::{ServerConnection, ServerEvent};
use crate::http::MAX_REQUEST_HEAD_BYTES;
use crate::roster::{MAX_ADDR_LEN, MAX_ID_LEN};
use crate::server::relay::{OriginIdentity, RelayConfig, TrustOrigin};
use crate::time::Duration;
#[cfg(doc)]
use crate::transmit::Transmit;

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
