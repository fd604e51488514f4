//! What both drivers' clients share: how a peer is named ([`Peer`]), the client's options
//! and their bounds ([`ClientOptions`]), what a request gives ([`Fetched`], classified by
//! [`OutcomeClass`]) and the keep-alive pool's bookkeeping ([`Pool`]). Each driver runs
//! the requests itself (the tokio driver on the caller's task, the mio driver on its
//! readiness loops); both follow docs/exchange.md's order of core calls.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use peerblock_core::bytes::Bytes;
use peerblock_core::client::{
    ClientConfig, Ending, ExchangeConfigError, PeersConfig, PeersConfigError, RosterAnswer,
};
use peerblock_core::placement::PeerId;
use peerblock_core::read::GetOutcome;
use peerblock_core::time::{Clock, Instant};

use crate::metrics::Metrics;

/// Most idle connections kept per peer: 32. More than a node ever needs to one peer (its
/// open connections per peer default to 4), small enough that one peer cannot take the
/// whole pool.
pub const MAX_IDLE_PER_PEER: usize = 32;

/// Most idle connections kept in the whole pool: 512. Each costs a socket and a response
/// decoder (a few KiB); 512 covers a 128-node cluster at the default 4 per peer.
pub const MAX_IDLE_GLOBAL: usize = 512;

/// Default idle timeout of a pooled connection: 90 s. Below the server's default idle
/// timeout (120 s), so the client usually retires an idle connection before the server
/// does and a reused connection is rarely one the server has just closed (that case is
/// `retry_fresh`'s).
pub const DEFAULT_POOL_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(90);

/// Default open connections per peer: 4, the server's default per-source session quota.
/// A client that opened one connection per concurrent request would have its extra
/// connections refused for `source-sessions`; further requests wait for a connection.
pub const DEFAULT_MAX_CONNS_PER_PEER: usize = 4;

/// Most peers whose connection slots are tracked at once: 4096, the roster's bound (4095
/// peers plus the node). Entries of peers with no connection open are dropped first.
pub const MAX_TRACKED_PEERS: usize = 4096;

/// The caller's validator for `get_validated`: `true` accepts a body of exactly the expected
/// length. It runs on the request's task, so keep it short (a hash of the block).
pub type Validator = Arc<dyn Fn(&Bytes) -> bool + Send + Sync>;

/// A progress hook: called with the status when a response head arrives
/// (`ClientEvent::Head`). The reader feeds it to `Read::handle_get_progress`.
pub type Progress = Arc<dyn Fn(u16) + Send + Sync>;

/// A peer as the client names it: its placement id (what the breaker and cooldown tables
/// are keyed by) and the `host:port` it is dialed at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The placement id.
    pub id: PeerId,
    /// The `host:port` to dial (also the `Host` header).
    pub addr: String,
}

impl Peer {
    /// A peer with a known id.
    pub fn new(id: PeerId, addr: impl Into<String>) -> Self {
        Peer {
            id,
            addr: addr.into(),
        }
    }

    /// A peer known only by its address: its id is [`peer_id_for_addr`].
    pub fn from_addr(addr: impl Into<String>) -> Self {
        let addr = addr.into();
        Peer {
            id: peer_id_for_addr(&addr),
            addr,
        }
    }
}

/// A stable [`PeerId`] for a caller that knows a peer only by its address: the BLAKE3
/// hash of the address string. The same address always gives the same id, so the breaker
/// and cooldown entries of that address persist across requests.
pub fn peer_id_for_addr(addr: &str) -> PeerId {
    PeerId(*blake3::hash(addr.as_bytes()).as_bytes())
}

/// The pool's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Idle connections kept per peer (at most [`MAX_IDLE_PER_PEER`]).
    pub idle_per_peer: usize,
    /// Idle connections kept in all (at most [`MAX_IDLE_GLOBAL`]).
    pub idle_global: usize,
    /// An idle connection older than this is closed instead of reused.
    pub idle_timeout: std::time::Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            idle_per_peer: MAX_IDLE_PER_PEER,
            idle_global: MAX_IDLE_GLOBAL,
            idle_timeout: DEFAULT_POOL_IDLE_TIMEOUT,
        }
    }
}

/// Everything a driver's client is built from (`peerblock_tokio::client::Client`,
/// `peerblock_mio::Client`).
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Core's exchange configuration (the dial, response-header and request deadlines,
    /// the refusal cap, the body cap).
    pub exchange: ClientConfig,
    /// Core's peer tables (breaker, cooldowns, loads).
    pub peers: PeersConfig,
    /// The pool's bounds.
    pub pool: PoolConfig,
    /// Connections open at once to one peer (default [`DEFAULT_MAX_CONNS_PER_PEER`]);
    /// further requests wait for one, bounded by their deadline.
    pub max_conns_per_peer: usize,
    /// The node's one clock.
    pub clock: Clock,
    /// The node's metrics.
    pub metrics: Metrics,
    /// The local address outgoing connections are made from (`None`: the kernel's
    /// choice). A node listening on one address of a multi-homed host dials from it, so
    /// peers see it as one source.
    pub local_ip: Option<std::net::IpAddr>,
    /// Emulated one-way link latency to a peer address (`None`, the default: none). For
    /// `peerblock-node swarm`'s replays on loopback only; the tokio client applies it.
    pub link_delay: Option<LinkDelay>,
}

/// One-way latency to a peer address (`HOST:PORT`), emulated by the tokio client: the dial
/// is answered one round trip later, a request reaches the peer one way after it is
/// handed to the connection, a response's first bytes are read one way late. Loopback
/// replays only (`peerblock-node swarm`).
#[derive(Clone)]
pub struct LinkDelay(pub Arc<dyn Fn(&str) -> std::time::Duration + Send + Sync>);

impl std::fmt::Debug for LinkDelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkDelay(..)")
    }
}

impl ClientOptions {
    /// Core's defaults, the pool's defaults, 4 connections per peer.
    pub fn new(clock: Clock, metrics: Metrics) -> Self {
        ClientOptions {
            exchange: ClientConfig::default(),
            peers: PeersConfig::default(),
            pool: PoolConfig::default(),
            max_conns_per_peer: DEFAULT_MAX_CONNS_PER_PEER,
            clock,
            metrics,
            local_ip: None,
            link_delay: None,
        }
    }
}

/// A [`ClientOptions`] that cannot work (local misconfiguration), naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Core rejected the exchange configuration.
    #[error("client option `exchange`: {0}")]
    Exchange(#[from] ExchangeConfigError),
    /// Core rejected the peer tables' configuration.
    #[error("client option `peers`: {0}")]
    Peers(#[from] PeersConfigError),
    /// A bound is zero or above its limit.
    #[error("client option `{field}` is {value}: must be in 1..={max}")]
    Bound {
        /// The offending field.
        field: &'static str,
        /// Its value.
        value: usize,
        /// The largest allowed.
        max: usize,
    },
}

/// How a request ended, as printed and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeClass {
    /// The block (or roster) arrived.
    Ok,
    /// The peer does not hold the block (404).
    Absent,
    /// The peer refused for lack of capacity (503 with a refusal header), or the
    /// request waited past its deadline for one of the peer's connection slots.
    Busy,
    /// The body failed validation or had the wrong length, or the peer said its stored
    /// copy is corrupt (`404` + `X-Peerblock-Miss: corrupt`).
    Invalid,
    /// Everything else: the peer could not be reached, timed out, failed or answered
    /// something unusable (the breaker rejected it, a dial failed, ...).
    Unavailable,
    /// The caller cancelled (its own deadline).
    Cancelled,
}

impl OutcomeClass {
    /// The class of an exchange's ending.
    pub fn of(ending: &Ending) -> OutcomeClass {
        use peerblock_core::client::ExchangeError as E;
        match ending {
            Ending::Block(_) | Ending::Roster(_) => OutcomeClass::Ok,
            Ending::Range(answer) if !answer.is_error() => OutcomeClass::Ok,
            Ending::Range(_) => OutcomeClass::Unavailable,
            Ending::Miss => OutcomeClass::Absent,
            Ending::Refused(_) => OutcomeClass::Busy,
            Ending::Cancelled => OutcomeClass::Cancelled,
            Ending::Corrupt | Ending::Failed(E::Validation | E::Length(_)) => OutcomeClass::Invalid,
            Ending::UpstreamRefused { .. } | Ending::Failed(_) => OutcomeClass::Unavailable,
            // An ending a later core adds (the enum is `#[non_exhaustive]`): no block.
            _ => OutcomeClass::Unavailable,
        }
    }

    /// The name printed for it: `ok`, `absent`, `busy`, `invalid`, `unavailable`,
    /// `cancelled`.
    pub fn name(self) -> &'static str {
        match self {
            OutcomeClass::Ok => "ok",
            OutcomeClass::Absent => "absent",
            OutcomeClass::Busy => "busy",
            OutcomeClass::Invalid => "invalid",
            OutcomeClass::Unavailable => "unavailable",
            OutcomeClass::Cancelled => "cancelled",
        }
    }

    /// The `outcome` label of the `peerblock_gets` metric: `ok`, `miss`, `refused`,
    /// `invalid`, `failed`, `cancelled`.
    pub fn metric(self) -> &'static str {
        match self {
            OutcomeClass::Ok => "ok",
            OutcomeClass::Absent => "miss",
            OutcomeClass::Busy => "refused",
            OutcomeClass::Invalid => "invalid",
            OutcomeClass::Unavailable => "failed",
            OutcomeClass::Cancelled => "cancelled",
        }
    }
}

/// Why a request ended without an exchange ending of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// `Peers::admit` rejected it: the peer's circuit is open (or its half-open probes are
    /// taken). Nothing was dialed.
    BreakerRejected,
    /// No connection slot to the peer freed up before the request's deadline. Nothing was
    /// recorded against the peer (its ticket was abandoned).
    NoConnectionSlot,
    /// A header value of the request cannot be sent (control characters in the origin
    /// or the caller's id or address): our own misuse, nothing was sent or recorded.
    Unsendable,
}

/// What one request gave: core's outcome for the read, the exchange's ending, and how it
/// went.
#[derive(Debug)]
pub struct Fetched {
    /// The peer asked.
    pub peer: PeerId,
    /// What the read machine learns (`Peers::finish`'s `GetOutcome`; `Failed` for a local
    /// ending).
    pub get: GetOutcome,
    /// The exchange's ending, handed back by `Peers::finish`; `None` for a local ending.
    pub ending: Option<Ending>,
    /// Why there was no exchange ending, if there was none.
    pub local: Option<Local>,
    /// The printed class.
    pub class: OutcomeClass,
    /// Time from the call to the outcome.
    pub elapsed: std::time::Duration,
    /// Whether the (last) exchange ran on a pooled connection.
    pub pooled: bool,
    /// Whether a retired pooled connection was retried on a fresh dial.
    pub retried_fresh: bool,
}

impl Fetched {
    /// The block's bytes, if the request got them.
    pub fn bytes(&self) -> Option<&Bytes> {
        match &self.get {
            GetOutcome::Found(b) => Some(b),
            _ => None,
        }
    }

    /// The roster answer, for a roster fetch that got one.
    pub fn roster(&self) -> Option<&RosterAnswer> {
        match &self.ending {
            Some(Ending::Roster(r)) => Some(r),
            _ => None,
        }
    }

    /// A one-line description of the ending (for logs and the CLI).
    pub fn describe(&self) -> String {
        match (&self.ending, self.local) {
            (Some(Ending::Failed(e)), _) => format!("{}: {e}", self.class.name()),
            (Some(Ending::Refused(r)), _) => format!(
                "{}: refused ({}), retry after {:?}",
                self.class.name(),
                r.reason
                    .map_or_else(|| "no reason".to_owned(), |r| r.to_string()),
                r.retry_after
            ),
            (Some(Ending::UpstreamRefused { status }), _) => {
                format!("{}: upstream refused with {status}", self.class.name())
            }
            (_, Some(Local::BreakerRejected)) => {
                format!("{}: circuit open, not dialed", self.class.name())
            }
            (_, Some(Local::Unsendable)) => {
                format!("{}: request header cannot be sent", self.class.name())
            }
            (_, Some(Local::NoConnectionSlot)) => {
                format!(
                    "{}: no connection slot before the deadline",
                    self.class.name()
                )
            }
            _ => self.class.name().to_owned(),
        }
    }
}

/// What a block request asks for beyond the block (each driver's `fetch_block`).
#[derive(Clone, Default)]
pub struct GetOptions {
    /// `get_validated`'s exact length; `None` is a plain `get` (bounded by
    /// `ClientConfig::max_body`).
    pub expected: Option<u64>,
    /// The validator: run on a body of exactly `expected` bytes, or, without `expected`,
    /// on a body of any length up to `ClientConfig::max_body` (core's `get_checked`: a
    /// manifest checked against its key). A body it refuses ends the request as a failed
    /// validation (`OutcomeClass::Invalid`).
    pub validator: Option<Validator>,
    /// The caller's own deadline: reaching it ends the request as a cancellation (and
    /// bounds the wait for a connection slot).
    pub deadline: Option<Instant>,
    /// Called when the response head arrives.
    pub progress: Option<Progress>,
}

impl std::fmt::Debug for GetOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetOptions")
            .field("expected", &self.expected)
            .field("validator", &self.validator.is_some())
            .field("deadline", &self.deadline)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// An idle entry and when it went idle.
struct Idle<T> {
    item: T,
    since: std::time::Instant,
}

/// Idle connections per peer address, bounded per peer and globally ([`PoolConfig`]).
/// Generic over what a driver keeps per connection (its socket and core's `Connection`).
pub struct Pool<T> {
    idle: HashMap<String, VecDeque<Idle<T>>>,
    total: usize,
}

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Pool {
            idle: HashMap::new(),
            total: 0,
        }
    }
}

impl<T> Pool<T> {
    /// Idle connections held now, all peers.
    pub fn len(&self) -> usize {
        self.total
    }

    /// Whether no connection is idle.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The most recently pooled live connection to `addr` (the least likely to have been
    /// retired by the peer); expired ones are closed on the way.
    pub fn take(
        &mut self,
        addr: &str,
        now: std::time::Instant,
        timeout: std::time::Duration,
    ) -> Option<T> {
        let list = self.idle.get_mut(addr)?;
        let mut found = None;
        while let Some(idle) = list.pop_back() {
            self.total -= 1;
            if now.saturating_duration_since(idle.since) < timeout {
                found = Some(idle.item);
                break;
            }
        }
        if list.is_empty() {
            self.idle.remove(addr);
        }
        found
    }

    /// Keeps `item` as the newest idle connection to `addr`, closing (dropping) the
    /// oldest of that peer, then the globally oldest, over the bounds.
    pub fn put(&mut self, addr: &str, item: T, now: std::time::Instant, cfg: &PoolConfig) {
        let idle = Idle { item, since: now };
        let list = self.idle.entry(addr.to_owned()).or_default();
        if list.len() >= cfg.idle_per_peer {
            list.pop_front();
            self.total -= 1;
        }
        list.push_back(idle);
        self.total += 1;
        while self.total > cfg.idle_global {
            // Close the globally oldest idle connection.
            let oldest = self
                .idle
                .iter()
                .filter_map(|(a, l)| l.front().map(|i| (i.since, a.clone())))
                .min();
            let Some((_, a)) = oldest else { break };
            if let Some(l) = self.idle.get_mut(&a) {
                l.pop_front();
                self.total -= 1;
                if l.is_empty() {
                    self.idle.remove(&a);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(per_peer: usize, global: usize) -> PoolConfig {
        PoolConfig {
            idle_per_peer: per_peer,
            idle_global: global,
            idle_timeout: std::time::Duration::from_secs(10),
        }
    }

    #[test]
    fn the_pool_keeps_at_most_its_per_peer_bound_dropping_the_oldest() {
        let mut p = Pool::default();
        let t = std::time::Instant::now();
        for i in 0..40u32 {
            p.put("a:1", i, t, &cfg(MAX_IDLE_PER_PEER, MAX_IDLE_GLOBAL));
        }
        assert_eq!(p.len(), MAX_IDLE_PER_PEER);
        // Newest first; the oldest 8 were closed.
        assert_eq!(
            p.take("a:1", t, std::time::Duration::from_secs(10)),
            Some(39)
        );
        let mut rest = Vec::new();
        while let Some(i) = p.take("a:1", t, std::time::Duration::from_secs(10)) {
            rest.push(i);
        }
        assert_eq!(rest.last(), Some(&8));
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn the_pool_keeps_at_most_its_global_bound_dropping_the_globally_oldest() {
        let mut p = Pool::default();
        let t = std::time::Instant::now();
        let c = cfg(MAX_IDLE_PER_PEER, 3);
        for (i, addr) in ["a:1", "b:1", "c:1", "d:1"].into_iter().enumerate() {
            p.put(addr, i, t + std::time::Duration::from_millis(i as u64), &c);
        }
        assert_eq!(p.len(), 3);
        let timeout = std::time::Duration::from_secs(10);
        assert_eq!(p.take("a:1", t, timeout), None, "the oldest was closed");
        assert_eq!(p.take("d:1", t, timeout), Some(3));
    }

    #[test]
    fn an_idle_connection_past_the_idle_timeout_is_closed_not_reused() {
        let mut p = Pool::default();
        let t = std::time::Instant::now();
        let c = cfg(MAX_IDLE_PER_PEER, MAX_IDLE_GLOBAL);
        p.put("a:1", 1u32, t, &c);
        let later = t + std::time::Duration::from_secs(11);
        assert_eq!(p.take("a:1", later, c.idle_timeout), None);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn an_address_gives_the_same_peer_id_every_time() {
        assert_eq!(
            peer_id_for_addr("10.0.0.1:7070"),
            peer_id_for_addr("10.0.0.1:7070")
        );
        assert_ne!(
            peer_id_for_addr("10.0.0.1:7070"),
            peer_id_for_addr("10.0.0.2:7070")
        );
    }
}
