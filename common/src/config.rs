//! The node's TOML configuration (`peerblock-node serve --config FILE`).
//!
//! Four tables, every key optional (a missing key keeps core's default), unknown keys
//! refused:
//!
//! - `[listener]`: every admission limit of core's `server::AdmissionConfig` under the
//!   names of docs/limits.md (`rate` as `rate = { per_second = N, burst = N }`), the
//!   server's connection deadlines (`idle_timeout`, `source_timeout`, `send_timeout`,
//!   `linger`, `refusal_head_timeout`) and the relay policy (`relay`, `max_hop`);
//! - `[client]`: the client exchange's deadlines and caps and the connection pool bounds;
//! - `[read]`: what of core's `read::ReadConfig` an operator tunes, and the fetch
//!   parallelism;
//! - `[roster]`: core's `roster::RefreshConfig` timings, the membership capacity and the
//!   membership policy (`membership`, `key_file`, `authority_key`, `epoch`,
//!   `epoch_signature`, `max_new_per_source`, `learn_interval`, `max_placed_per_host`,
//!   `max_placed_per_prefix`; docs/security.md).
//!
//! **Durations** are strings: a whole number and a unit, one of `ms`, `s`, `m`, `h`
//! (`"1500ms"`, `"15s"`, `"2m"`), at most [`MAX_DURATION`]. Byte amounts and counts are
//! plain integers. docs/node.md lists every key with its default and rule.
//!
//! Loading ([`NodeConfig::from_toml_str`], [`NodeConfig::from_file`]) checks everything
//! once, with core's own validators (`AdmissionConfig::validate`,
//! `ServerConfig::validate`, `ClientConfig::validate`, `ReadConfig::validate`,
//! `RefreshConfig::validate`); their errors are reported under the TOML key they concern
//! (`listener.max_sessions_per_source`), so a node never starts with a configuration
//! core would refuse later.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use peerblock_core::client::{
    ClientConfig, DeadlineError, Deadlines, ExchangeConfigError, RequestTimeout,
};
use peerblock_core::pace::PaceConfig;
use peerblock_core::read::{ReadConfig, ReadConfigError};
use peerblock_core::roster::record::{unhex, verify_epoch};
use peerblock_core::roster::{
    MembershipMode, MembershipPolicy, RefreshConfig, RefreshConfigError, DEFAULT_LEARN_INTERVAL,
    DEFAULT_MAX_CHECKS_PER_SOURCE, DEFAULT_MAX_NEW_PER_SOURCE, DEFAULT_MAX_PLACED_PER_HOST,
    DEFAULT_MAX_PLACED_PER_PREFIX, MAX_ROSTER_MEMBERS,
};
use peerblock_core::server::{
    AdmissionConfig, AdmissionConfigError, RateLimit, RelayConfig, ServerConfig, ServerConfigError,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_LINGER, DEFAULT_REFUSAL_HEAD_TIMEOUT, DEFAULT_SEND_TIMEOUT,
    DEFAULT_SOURCE_TIMEOUT,
};
use serde::{Deserialize, Deserializer};

/// Longest duration any key accepts: 24 hours. Every timer of a node is seconds to
/// minutes (the longest, the roster interval, is capped at 24 h by core); a larger value
/// is a typo, and bounding it keeps `Instant + duration` far from overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// Largest configuration file read (bytes). A node's configuration is a few dozen lines;
/// the bound keeps a mistaken `--config /dev/zero` from exhausting memory.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Default `[client] pool_idle_per_peer`: idle connections kept per peer. A read keeps at
/// most two GETs in flight per block and a fetch reads a few blocks at once, so 32 covers
/// the connections a busy fetch reuses against one holder.
pub const DEFAULT_POOL_IDLE_PER_PEER: usize = 32;

/// Default `[client] pool_idle_total`: idle connections kept node-wide (sockets and their
/// buffers held for reuse; 512 × a few KiB).
pub const DEFAULT_POOL_IDLE_TOTAL: usize = 512;

/// Default `[client] pool_idle_timeout`: 90 s, below the server's 120 s idle timeout, so
/// the client retires an idle connection before the server closes it under it.
pub const DEFAULT_POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Default `[client] max_connections_per_peer`: 4, the server's default
/// `max_sessions_per_source`: a fifth connection would only be refused.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 4;

/// Upper bound on `[client] max_connections_per_peer` and the pool sizes' per-peer bound:
/// 64 connections to one peer is far past any server's per-source quota.
pub const MAX_CONNECTIONS_PER_PEER_LIMIT: usize = 64;

/// Upper bound on `[client] pool_idle_total`: 16384 idle sockets, well inside a default
/// file-descriptor limit raised for a server.
pub const MAX_POOL_IDLE_TOTAL: usize = 16384;

/// Default `[read] parallel`: blocks a `fetch` reads at once.
pub const DEFAULT_PARALLEL: usize = 8;

/// Upper bound on `[read] parallel` (and `fetch --parallel`): each block read holds up to
/// two GETs and a block's bytes, so 64 × 2 × 64 MiB bounds a fetch's memory.
pub const MAX_PARALLEL: usize = 64;

/// Default `[roster] capacity`: the largest membership core keeps
/// (`MAX_ROSTER_MEMBERS - 1` peers besides this node, so a full snapshot fits a roster).
pub const DEFAULT_ROSTER_CAPACITY: usize = MAX_ROSTER_MEMBERS - 1;

/// A configuration that cannot be used. Every variant names the key (or file) and the
/// rule it breaks.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_CONFIG_BYTES`].
    #[error("config file {path} is {len} bytes, above the {MAX_CONFIG_BYTES}-byte bound")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// Not TOML, an unknown key, or a value of the wrong type or form. The TOML error
    /// names the key and shows its line.
    #[error("config: {0}")]
    Toml(#[from] toml::de::Error),
    /// A value out of range or a broken invariant between keys.
    #[error("config key `{key}`: {rule}")]
    Invalid {
        /// The TOML key at fault, with its table (`listener.max_sessions`).
        key: String,
        /// The rule it breaks.
        rule: String,
    },
}

impl ConfigError {
    fn invalid(key: impl Into<String>, rule: impl fmt::Display) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            rule: rule.to_string(),
        }
    }

    /// The TOML key at fault, if the error concerns one key.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// A duration as written in the configuration: `"<whole number><unit>"`, unit `ms`, `s`,
/// `m` or `h`.
fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// Parses a configuration duration (`"250ms"`, `"15s"`, `"2m"`, `"1h"`); the error says
/// what is wrong with `text`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    if number.is_empty() {
        return Err(format!(
            "duration {text:?} must start with a whole number (e.g. \"15s\", \"250ms\")"
        ));
    }
    let n: u64 = number
        .parse()
        .map_err(|_| format!("duration {text:?} is too large"))?;
    let ms_per = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(format!("duration {text:?} has no unit: use ms, s, m or h")),
        _ => {
            return Err(format!(
                "duration {text:?} has unit {unit:?}: use ms, s, m or h"
            ))
        }
    };
    let d = n
        .checked_mul(ms_per)
        .map(Duration::from_millis)
        .filter(|d| *d <= MAX_DURATION)
        .ok_or_else(|| format!("duration {text:?} is above the 24h bound"))?;
    Ok(d)
}

/// `[listener] rate`: the optional per-source request-rate bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateTable {
    /// Sustained requests per second per source (non-zero).
    pub per_second: u32,
    /// Requests a source may make back to back (non-zero).
    pub burst: u32,
}

/// `[listener]`: admission limits, server deadlines, relay policy.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenerConfig {
    /// Connections open at once (default 256).
    pub max_sessions: usize,
    /// Connections open at once from one source address (default 4).
    pub max_sessions_per_source: usize,
    /// Requests in progress node-wide (default 512).
    pub max_requests: usize,
    /// Requests in progress on one connection (default 2).
    pub max_requests_per_session: usize,
    /// Response body bytes reserved and not yet written, node-wide (default 64 MiB).
    pub max_inflight_bytes: u64,
    /// The same per source address (default 16 MiB).
    pub max_inflight_bytes_per_source: u64,
    /// Optional per-source rate bucket (default off).
    pub rate: Option<RateTable>,
    /// Entries in the per-source table (default 1024).
    pub max_tracked_sources: usize,
    /// What a capacity refusal advertises in `Retry-After` (default 15 s).
    #[serde(deserialize_with = "de_duration")]
    pub retry_after: Duration,
    /// Refused connections answered at once; over it a refused connection is closed
    /// unanswered (default 256).
    pub max_refusals: usize,
    /// A connection with nothing in progress is closed after this (default 120 s).
    #[serde(deserialize_with = "de_duration")]
    pub idle_timeout: Duration,
    /// A source fetch unanswered this long is answered 500 (default 10 s).
    #[serde(deserialize_with = "de_duration")]
    pub source_timeout: Duration,
    /// A response not acknowledged by the socket this long ends the connection (30 s).
    #[serde(deserialize_with = "de_duration")]
    pub send_timeout: Duration,
    /// How long a connection lingers after an error response or a refusal (default 2 s).
    #[serde(deserialize_with = "de_duration")]
    pub linger: Duration,
    /// How long a refused connection waits for its request head (default 2 s).
    #[serde(deserialize_with = "de_duration")]
    pub refusal_head_timeout: Duration,
    /// Whether this node relays requests for blocks it does not hold (default true).
    pub relay: bool,
    /// Relays stop at this hop count (default 3; 1 or more).
    pub max_hop: u32,
    /// Bytes of hot blocks the store keeps in memory (default 256 MiB; 0 turns the cache
    /// off; a block above an eighth of it is never cached).
    pub block_cache_bytes: u64,
    /// How block bodies reach the socket (default `buffered`; `sendfile` is the mio
    /// driver's zero-copy path and needs `serve --driver mio`).
    pub body_path: BodyPathKey,
    /// The node's upload budget, bytes per second, shared by all its connections (a
    /// token bucket, core's `pace`, with 50 ms of burst); `0` (the default) = no limit.
    /// Otherwise at least core's `pace::MIN_RATE`. Tokio driver only.
    pub upload_bytes_per_second: u64,
    /// A ceiling on each connection's upload, bytes per second (its own bucket, on top of
    /// the node's); `0` (the default) = none. Otherwise at least `pace::MIN_RATE`. Tokio
    /// driver only.
    pub connection_upload_bytes_per_second: u64,
    /// What a full listener does (default `refuse`: the explicit 503 + `Retry-After`);
    /// `silent` replays the reference's old transport for `peerblock-node swarm`. Tokio
    /// driver only.
    pub when_full: WhenFullKey,
    /// With `when_full = "silent"`: the reference transport's channel table, counted as a
    /// silent listener over HTTP/1.1 can (sessions + requests in progress at most this);
    /// `0` (the default) = none. Replays only.
    pub max_channels: usize,
    /// A PEM file of CA certificates the relay trusts, besides the system's roots, when
    /// it reads an `https://` object origin for a requester (`fetch URL`). Default none.
    /// Tokio driver only: the mio relay reads plain `http://` object origins only.
    pub relay_origin_ca: Option<std::path::PathBuf>,
}

/// `[listener] when_full`: how a full listener turns work away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WhenFullKey {
    /// Explicit refusal: `503` with the refusal header and `Retry-After` (peerblock).
    #[default]
    Refuse,
    /// The reference's old transport, for replays: while every session is taken the
    /// listener stops accepting (dials beyond its small accept queue get no answer), and a
    /// request or connection that would be refused is closed without an answer.
    Silent,
}

/// `[listener] body_path`: how a `200`'s block body is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyPathKey {
    /// Read into memory (the hot-block cache) and written from there.
    #[default]
    Buffered,
    /// Written straight from the store file with `sendfile(2)` (mio driver only).
    Sendfile,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        let a = AdmissionConfig::default();
        ListenerConfig {
            max_sessions: a.max_sessions,
            max_sessions_per_source: a.max_sessions_per_source,
            max_requests: a.max_requests,
            max_requests_per_session: a.max_requests_per_session,
            max_inflight_bytes: a.max_inflight_bytes,
            max_inflight_bytes_per_source: a.max_inflight_bytes_per_source,
            rate: None,
            max_tracked_sources: a.max_tracked_sources,
            retry_after: a.retry_after,
            max_refusals: a.max_refusals,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            source_timeout: DEFAULT_SOURCE_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            linger: DEFAULT_LINGER,
            refusal_head_timeout: DEFAULT_REFUSAL_HEAD_TIMEOUT,
            relay: true,
            max_hop: RelayConfig::default().max_hop,
            block_cache_bytes: crate::store::DEFAULT_CACHE_BYTES,
            body_path: BodyPathKey::Buffered,
            upload_bytes_per_second: 0,
            connection_upload_bytes_per_second: 0,
            when_full: WhenFullKey::Refuse,
            max_channels: 0,
            relay_origin_ca: None,
        }
    }
}

/// `[client]`: exchange deadlines and caps, connection pool bounds.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientTable {
    /// Connection not established in time: a dial failure (default 1 s).
    #[serde(deserialize_with = "de_duration")]
    pub dial_timeout: Duration,
    /// Response head not complete this long after the request was written (default 10 s).
    #[serde(deserialize_with = "de_duration")]
    pub response_header_timeout: Duration,
    /// Whole exchange, dial included (default 30 s).
    #[serde(deserialize_with = "de_duration")]
    pub request_timeout: Duration,
    /// Cap on the wait a refusal's `Retry-After` can impose (default 15 s; at most 5 m).
    /// Also the read's `max_retry_after`, so the client and the read agree.
    #[serde(deserialize_with = "de_duration")]
    pub max_refusal_cooldown: Duration,
    /// Largest body read without an expected length (default 64 MiB).
    pub max_body: u64,
    /// Idle connections kept per peer (default 32).
    pub pool_idle_per_peer: usize,
    /// Idle connections kept node-wide (default 512).
    pub pool_idle_total: usize,
    /// An idle pooled connection is closed after this (default 90 s).
    #[serde(deserialize_with = "de_duration")]
    pub pool_idle_timeout: Duration,
    /// Connections open at once to one peer, idle or busy (default 4).
    pub max_connections_per_peer: usize,
    /// How long the cooldown table skips a peer whose dial failed or timed out (default
    /// 30 min, the reference's). Until it ends the peer is not asked at all, not even by
    /// its circuit's half-open probe.
    #[serde(deserialize_with = "de_duration")]
    pub failed_dial_cooldown: Duration,
}

impl Default for ClientTable {
    fn default() -> Self {
        let c = ClientConfig::default();
        let request = match c.deadlines.request {
            RequestTimeout::After(d) => d,
            RequestTimeout::Caller => Duration::from_secs(30),
        };
        ClientTable {
            dial_timeout: c.deadlines.dial,
            response_header_timeout: c.deadlines.response_header,
            request_timeout: request,
            max_refusal_cooldown: c.max_refusal_cooldown,
            max_body: c.max_body,
            pool_idle_per_peer: DEFAULT_POOL_IDLE_PER_PEER,
            pool_idle_total: DEFAULT_POOL_IDLE_TOTAL,
            pool_idle_timeout: DEFAULT_POOL_IDLE_TIMEOUT,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            failed_dial_cooldown: peerblock_core::cooldown::DEFAULT_FAILED_COOLDOWN,
        }
    }
}

/// `[read]`: the read engine's tunables and the fetch parallelism.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReadTable {
    /// Peers that hold a block; also how many `NotFound`s prove absence (default 7, 1..=16).
    pub close_group_size: usize,
    /// A GET silent this long gets a hedge GET alongside it (default 1 s).
    #[serde(deserialize_with = "de_duration")]
    pub hedge_delay: Duration,
    /// Pause before a retry round; least a refusal wait lasts (default 1 s).
    #[serde(deserialize_with = "de_duration")]
    pub retry_delay: Duration,
    /// Refusal waits before a read ends busy (default 3, at most 16).
    pub max_refusal_waits: u32,
    /// Retry rounds when nobody refused (default 1, at most 16).
    pub max_plain_retries: u32,
    /// How long a read skips a peer that refused without `Retry-After` (default 15 s,
    /// at most 5 m).
    #[serde(deserialize_with = "de_duration")]
    pub refused_cooldown: Duration,
    /// A GET unanswered this long is abandoned by the read (default 10 s).
    #[serde(deserialize_with = "de_duration")]
    pub get_timeout: Duration,
    /// A lookup running this long is given up (default 10 s).
    #[serde(deserialize_with = "de_duration")]
    pub lookup_timeout: Duration,
    /// Blocks a `fetch` reads at once (default 8, 1..=64); `fetch --parallel` overrides it.
    pub parallel: usize,
}

impl Default for ReadTable {
    fn default() -> Self {
        let r = ReadConfig::default();
        ReadTable {
            close_group_size: r.close_group_size,
            hedge_delay: r.hedge_delay,
            retry_delay: r.retry_delay,
            max_refusal_waits: r.max_refusal_waits,
            max_plain_retries: r.max_plain_retries,
            refused_cooldown: r.refused_cooldown,
            get_timeout: r.get_timeout,
            lookup_timeout: r.lookup_timeout,
            parallel: DEFAULT_PARALLEL,
        }
    }
}

/// `[roster]`: roster refresh timings and the membership capacity.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RosterTable {
    /// Mean time between roster rounds (default 30 s, at most 24 h).
    #[serde(deserialize_with = "de_duration")]
    pub interval: Duration,
    /// Each round is due `interval ± jitter` (default 3 s; below `interval`).
    #[serde(deserialize_with = "de_duration")]
    pub jitter: Duration,
    /// Peers asked per round (default 2, 1..=16, at most `max_in_flight`).
    pub fanout: usize,
    /// Roster fetches outstanding at once (default 8, 1..=64).
    pub max_in_flight: usize,
    /// A roster fetch not ended this long after its round is abandoned (default 40 s).
    #[serde(deserialize_with = "de_duration")]
    pub fetch_timeout: Duration,
    /// Peers the membership table keeps besides this node (default 4095, 1..=4095).
    pub capacity: usize,
    /// `"open"` (default: verified records and unverified claims are learned) or
    /// `"verified-only"` (nothing unverified is learned).
    pub membership: MembershipKey,
    /// The node's secret key file (64 hex digits of its Ed25519 seed); default
    /// `STORE/node.key`, created on first start with owner-only permissions.
    pub key_file: Option<PathBuf>,
    /// The cluster authority's public key (64 hex digits): only epochs it signed are
    /// adopted from peers. Without it, no peer changes this node's epoch.
    pub authority_key: Option<String>,
    /// This node's epoch at start (default 0). Above 0 with `authority_key`, it needs
    /// `epoch_signature`.
    pub epoch: u64,
    /// The authority's signature over `epoch` (128 hex digits), served with the roster.
    pub epoch_signature: Option<String>,
    /// New members one source may add per `learn_interval` (default 256, at least 1).
    pub max_new_per_source: usize,
    /// Signature checks one source's claims may cost per `learn_interval` (default 512, at
    /// least 1).
    pub max_checks_per_source: usize,
    /// The window of `max_new_per_source` (default 30 s).
    #[serde(deserialize_with = "de_duration")]
    pub learn_interval: Duration,
    /// Members placed per host of their address (default 4, at least 1; core's
    /// `Membership::placed`).
    pub max_placed_per_host: usize,
    /// Members placed per network prefix, IPv4 /24 or IPv6 /48 (default 64, at least 1).
    pub max_placed_per_prefix: usize,
    /// This node's admission certificate (128 hex digits, `peerblock-node key admit`):
    /// the authority's signature over its public key, served with its record. Needs
    /// `authority_key`; checked at start against the node's key.
    pub admission: Option<String>,
    /// With `membership = "admitted"`: addresses (`host:port`) whose unsigned member is
    /// placed once it answered from there (Go reference peers).
    pub allow: Vec<String>,
}

/// `[roster] membership`: whether unverified claims are learned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MembershipKey {
    /// Learn verified records and unverified claims.
    #[default]
    Open,
    /// Learn verified records only.
    VerifiedOnly,
    /// Learn as `open`; place only members the authority admitted (and allowed
    /// addresses).
    Admitted,
}

impl Default for RosterTable {
    fn default() -> Self {
        let r = RefreshConfig::default();
        RosterTable {
            interval: r.interval,
            jitter: r.jitter,
            fanout: r.fanout,
            max_in_flight: r.max_in_flight,
            fetch_timeout: r.fetch_timeout,
            capacity: DEFAULT_ROSTER_CAPACITY,
            membership: MembershipKey::Open,
            key_file: None,
            authority_key: None,
            epoch: 0,
            epoch_signature: None,
            max_new_per_source: DEFAULT_MAX_NEW_PER_SOURCE,
            max_checks_per_source: DEFAULT_MAX_CHECKS_PER_SOURCE,
            learn_interval: DEFAULT_LEARN_INTERVAL,
            max_placed_per_host: DEFAULT_MAX_PLACED_PER_HOST,
            max_placed_per_prefix: DEFAULT_MAX_PLACED_PER_PREFIX,
            admission: None,
            allow: Vec::new(),
        }
    }
}

/// The node's whole configuration. `Default` is every core default; build one from TOML
/// with [`NodeConfig::from_toml_str`] or [`NodeConfig::from_file`], which validate it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// `[listener]`.
    pub listener: ListenerConfig,
    /// `[client]`.
    pub client: ClientTable,
    /// `[read]`.
    pub read: ReadTable,
    /// `[roster]`.
    pub roster: RosterTable,
    /// `[store]`.
    pub store: StoreTable,
}

/// `[store]`: what the node keeps besides its imported content.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreTable {
    /// Bytes of relayed blocks kept on disk in the relay cache (`<store>/.relay-cache`,
    /// least recently used first out; default 1 GiB; 0 keeps none). Imported content is
    /// never evicted and does not count.
    pub cache_bytes: u64,
}

impl Default for StoreTable {
    fn default() -> Self {
        StoreTable {
            cache_bytes: crate::relay_cache::DEFAULT_RELAY_CACHE_BYTES,
        }
    }
}

/// The connection pool's bounds, from `[client]` (plain fields for the client module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolOptions {
    /// Idle connections kept per peer.
    pub idle_per_peer: usize,
    /// Idle connections kept node-wide.
    pub idle_total: usize,
    /// An idle connection is closed after this.
    pub idle_timeout: Duration,
    /// Connections open at once to one peer.
    pub max_connections_per_peer: usize,
}

impl NodeConfig {
    /// Parses and validates a configuration. Every error names its key and rule.
    pub fn from_toml_str(text: &str) -> Result<NodeConfig, ConfigError> {
        let config: NodeConfig = toml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads (at most [`MAX_CONFIG_BYTES`]), parses and validates a configuration file.
    /// Blocking: call it at start-up or from `spawn_blocking`.
    pub fn from_file(path: &Path) -> Result<NodeConfig, ConfigError> {
        use std::io::Read;
        let read_err = |source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        let mut text = String::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read_err)?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge {
                path: path.to_owned(),
                len: text.len() as u64,
            });
        }
        Self::from_toml_str(&text)
    }

    /// Checks every rule: core's validators for the parts core owns (errors mapped to the
    /// TOML key names), this crate's bounds for the rest.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.admission()
            .validate()
            .map_err(|e| ConfigError::invalid(admission_key(&e), &e))?;
        // The node id and address are the command line's; placeholders check the timeouts.
        self.server_config("peerblock-config-check", "127.0.0.1:1")
            .validate()
            .map_err(|e| ConfigError::invalid(server_key(&e), e))?;
        if self.listener.max_hop == 0 {
            return Err(ConfigError::invalid(
                "listener.max_hop",
                "is zero: every relay would be declined (set `relay = false` to disable relaying)",
            ));
        }
        for (key, rate) in [
            (
                "listener.upload_bytes_per_second",
                self.listener.upload_bytes_per_second,
            ),
            (
                "listener.connection_upload_bytes_per_second",
                self.listener.connection_upload_bytes_per_second,
            ),
        ] {
            if rate != 0 {
                PaceConfig::with_rate(rate)
                    .validate()
                    .map_err(|e| ConfigError::invalid(key, format!("{e}: set 0 for no limit")))?;
            }
        }
        if self.listener.max_channels != 0 && self.listener.when_full != WhenFullKey::Silent {
            return Err(ConfigError::invalid(
                "listener.max_channels",
                "applies only to a silent listener (when_full = \"silent\"): set 0 or add when_full = \"silent\"",
            ));
        }
        self.client_config()
            .validate()
            .map_err(|e| ConfigError::invalid(client_key(&e), e))?;
        self.validate_pool()?;
        self.read_config()
            .validate()
            .map_err(|e| ConfigError::invalid(read_key(&e), &e))?;
        let p = self.read.parallel;
        if p == 0 || p > MAX_PARALLEL {
            return Err(ConfigError::invalid(
                "read.parallel",
                format!("is {p}: must be in 1..={MAX_PARALLEL}"),
            ));
        }
        self.refresh_config(Vec::new())
            .validate()
            .map_err(|e| ConfigError::invalid(refresh_key(&e), &e))?;
        let c = self.roster.capacity;
        if c == 0 || c > DEFAULT_ROSTER_CAPACITY {
            return Err(ConfigError::invalid(
                "roster.capacity",
                format!("is {c}: must be in 1..={DEFAULT_ROSTER_CAPACITY}"),
            ));
        }
        self.membership_policy()?;
        self.signed_epoch()?;
        Ok(())
    }

    /// Core's membership policy, from `[roster]`. Errors name the key.
    pub fn membership_policy(&self) -> Result<MembershipPolicy, ConfigError> {
        let r = &self.roster;
        let authority = match &r.authority_key {
            None => None,
            Some(text) => Some(unhex::<32>(text.as_bytes()).ok_or_else(|| {
                ConfigError::invalid("roster.authority_key", "is not 64 hex digits")
            })?),
        };
        let policy = MembershipPolicy {
            mode: match r.membership {
                MembershipKey::Open => MembershipMode::Open,
                MembershipKey::VerifiedOnly => MembershipMode::VerifiedOnly,
                MembershipKey::Admitted => MembershipMode::Admitted,
            },
            authority,
            max_new_per_source: r.max_new_per_source,
            max_checks_per_source: r.max_checks_per_source,
            learn_interval: r.learn_interval,
            max_placed_per_host: r.max_placed_per_host,
            max_placed_per_prefix: r.max_placed_per_prefix,
            allow: r.allow.clone(),
        };
        policy
            .validate()
            .map_err(|e| ConfigError::invalid(format!("roster.{}", policy_key(e.field())), &e))?;
        Ok(policy)
    }

    /// The start epoch and its authority signature, if any (`roster.epoch`,
    /// `roster.epoch_signature`), checked against `roster.authority_key`.
    pub fn signed_epoch(&self) -> Result<(u64, Option<[u8; 64]>), ConfigError> {
        let r = &self.roster;
        let Some(text) = &r.epoch_signature else {
            return Ok((r.epoch, None));
        };
        let sig = unhex::<64>(text.as_bytes()).ok_or_else(|| {
            ConfigError::invalid("roster.epoch_signature", "is not 128 hex digits")
        })?;
        let key = self.membership_policy()?.authority.ok_or_else(|| {
            ConfigError::invalid(
                "roster.epoch_signature",
                "is set without roster.authority_key to check it",
            )
        })?;
        if !verify_epoch(&key, r.epoch, &sig) {
            return Err(ConfigError::invalid(
                "roster.epoch_signature",
                format!(
                    "is not roster.authority_key's signature over roster.epoch {}",
                    r.epoch
                ),
            ));
        }
        Ok((r.epoch, Some(sig)))
    }

    /// This node's admission certificate (`roster.admission`), checked: 128 hex digits,
    /// with `authority_key` set, and that key's signature over `public_key` (the node's
    /// own). `None` when not configured.
    pub fn node_admission(&self, public_key: &[u8; 32]) -> Result<Option<[u8; 64]>, ConfigError> {
        let Some(text) = &self.roster.admission else {
            return Ok(None);
        };
        let cert = unhex::<64>(text.as_bytes())
            .ok_or_else(|| ConfigError::invalid("roster.admission", "is not 128 hex digits"))?;
        let key = self.membership_policy()?.authority.ok_or_else(|| {
            ConfigError::invalid(
                "roster.admission",
                "is set without roster.authority_key to check it",
            )
        })?;
        if !peerblock_core::roster::record::verify_admission(&key, public_key, &cert) {
            return Err(ConfigError::invalid(
                "roster.admission",
                "is not roster.authority_key's admission of this node's key (key admit --key AUTHORITY_FILE NODE_KEY_FILE)",
            ));
        }
        Ok(Some(cert))
    }

    fn validate_pool(&self) -> Result<(), ConfigError> {
        let c = &self.client;
        let range = |key: &str, v: usize, max: usize| {
            if v == 0 || v > max {
                Err(ConfigError::invalid(
                    format!("client.{key}"),
                    format!("is {v}: must be in 1..={max}"),
                ))
            } else {
                Ok(())
            }
        };
        range(
            "max_connections_per_peer",
            c.max_connections_per_peer,
            MAX_CONNECTIONS_PER_PEER_LIMIT,
        )?;
        range("pool_idle_total", c.pool_idle_total, MAX_POOL_IDLE_TOTAL)?;
        range(
            "pool_idle_per_peer",
            c.pool_idle_per_peer,
            c.pool_idle_total,
        )?;
        if c.pool_idle_timeout.is_zero() {
            return Err(ConfigError::invalid(
                "client.pool_idle_timeout",
                "is zero: no connection could ever be reused",
            ));
        }
        if c.failed_dial_cooldown.is_zero() {
            return Err(ConfigError::invalid(
                "client.failed_dial_cooldown",
                "is zero: a peer that cannot be dialed would be dialed again at once",
            ));
        }
        Ok(())
    }

    /// The upload pacing of `[listener]`: the node's shared bucket and the per-connection
    /// ceiling, each `None` when off.
    pub fn upload_pacing(&self) -> (Option<PaceConfig>, Option<PaceConfig>) {
        let on = |rate: u64| (rate != 0).then(|| PaceConfig::with_rate(rate));
        (
            on(self.listener.upload_bytes_per_second),
            on(self.listener.connection_upload_bytes_per_second),
        )
    }

    /// Core's admission limits, from `[listener]`.
    pub fn admission(&self) -> AdmissionConfig {
        let l = &self.listener;
        AdmissionConfig {
            max_sessions: l.max_sessions,
            max_sessions_per_source: l.max_sessions_per_source,
            max_requests: l.max_requests,
            max_requests_per_session: l.max_requests_per_session,
            max_inflight_bytes: l.max_inflight_bytes,
            max_inflight_bytes_per_source: l.max_inflight_bytes_per_source,
            rate: l.rate.map(|r| RateLimit {
                per_second: r.per_second,
                burst: r.burst,
            }),
            max_tracked_sources: l.max_tracked_sources,
            retry_after: l.retry_after,
            max_refusals: l.max_refusals,
        }
    }

    /// Core's server configuration for node `node_id` advertised at `addr`, with
    /// `[listener]`'s deadlines and relay policy (the identity rule stays core's
    /// `TrustOrigin`).
    pub fn server_config(
        &self,
        node_id: impl Into<String>,
        addr: impl Into<String>,
    ) -> ServerConfig {
        let l = &self.listener;
        let mut s = ServerConfig::new(node_id, addr);
        s.idle_timeout = l.idle_timeout;
        s.source_timeout = l.source_timeout;
        s.send_timeout = l.send_timeout;
        s.linger = l.linger;
        s.refusal_head_timeout = l.refusal_head_timeout;
        s.relay = l.relay.then(|| RelayConfig {
            max_hop: l.max_hop,
            ..RelayConfig::default()
        });
        // An object origin's chunk key must agree with its URL's identity (404 before any
        // cache or upstream access otherwise); a wire-form origin is trusted as before.
        s.identity = std::sync::Arc::new(crate::object::ObjectOriginIdentity);
        s
    }

    /// Core's client configuration, from `[client]`.
    pub fn client_config(&self) -> ClientConfig {
        let c = &self.client;
        ClientConfig {
            deadlines: Deadlines {
                dial: c.dial_timeout,
                response_header: c.response_header_timeout,
                request: RequestTimeout::After(c.request_timeout),
            },
            max_refusal_cooldown: c.max_refusal_cooldown,
            max_body: c.max_body,
        }
    }

    /// The connection pool's bounds, from `[client]`.
    pub fn pool(&self) -> PoolOptions {
        let c = &self.client;
        PoolOptions {
            idle_per_peer: c.pool_idle_per_peer,
            idle_total: c.pool_idle_total,
            idle_timeout: c.pool_idle_timeout,
            max_connections_per_peer: c.max_connections_per_peer,
        }
    }

    /// Core's read configuration: `[read]` over core's defaults, with `max_retry_after`
    /// taken from `[client] max_refusal_cooldown` (one refusal cap for client and read).
    pub fn read_config(&self) -> ReadConfig {
        let r = &self.read;
        ReadConfig {
            close_group_size: r.close_group_size,
            hedge_delay: r.hedge_delay,
            retry_delay: r.retry_delay,
            max_refusal_waits: r.max_refusal_waits,
            max_plain_retries: r.max_plain_retries,
            refused_cooldown: r.refused_cooldown,
            max_retry_after: self.client.max_refusal_cooldown,
            get_timeout: r.get_timeout,
            lookup_timeout: r.lookup_timeout,
            ..ReadConfig::default()
        }
    }

    /// Core's roster refresh configuration, from `[roster]`, asking `seeds` (the
    /// `--seed` addresses) first.
    pub fn refresh_config(&self, seeds: Vec<String>) -> RefreshConfig {
        let r = &self.roster;
        RefreshConfig {
            interval: r.interval,
            jitter: r.jitter,
            fanout: r.fanout,
            seeds,
            max_in_flight: r.max_in_flight,
            fetch_timeout: r.fetch_timeout,
        }
    }
}

/// The `[listener]` key an admission error concerns.
fn admission_key(e: &AdmissionConfigError) -> String {
    let field = match e {
        AdmissionConfigError::Zero { field } => field,
        AdmissionConfigError::PerSourceAboveGlobal { per_source, .. } => per_source,
        AdmissionConfigError::SourceCanTakeAllRequests { .. } => "max_sessions_per_source",
        AdmissionConfigError::SourceTableTooSmall { .. } => "max_tracked_sources",
        AdmissionConfigError::ZeroRetryAfter => "retry_after",
    };
    format!("listener.{field}")
}

/// The `[listener]` key a server configuration error concerns.
fn server_key(e: &ServerConfigError) -> String {
    match e {
        ServerConfigError::ZeroTimeout { field } => format!("listener.{field}"),
        ServerConfigError::Identity { field, .. } => (*field).to_owned(),
    }
}

/// The `[client]` key a client configuration error concerns.
fn client_key(e: &ExchangeConfigError) -> String {
    let key = match e {
        ExchangeConfigError::Deadline(DeadlineError::Zero { field }) => match *field {
            "dial" => "dial_timeout",
            "response_header" => "response_header_timeout",
            "request" => "request_timeout",
            other => other,
        },
        ExchangeConfigError::Zero { field, .. } => field,
        ExchangeConfigError::Request(_) => "request",
    };
    format!("client.{key}")
}

/// The key a read configuration error concerns (`max_retry_after` is
/// `[client] max_refusal_cooldown`).
fn read_key(e: &ReadConfigError) -> String {
    let field = match e {
        ReadConfigError::CloseGroupSize(_) => "close_group_size",
        ReadConfigError::ZeroDuration(f)
        | ReadConfigError::RefusalCooldownTooLong { field: f, .. } => f,
        ReadConfigError::TooManyRefusalWaits(_) => "max_refusal_waits",
        ReadConfigError::TooManyRetries(_) => "max_plain_retries",
    };
    if field == "max_retry_after" {
        "client.max_refusal_cooldown".to_owned()
    } else {
        format!("read.{field}")
    }
}

/// The `[roster]` key of a membership policy field.
fn policy_key(field: &str) -> &str {
    match field {
        "mode" => "membership",
        "authority" => "authority_key",
        f => f,
    }
}

/// The `[roster]` key a refresh configuration error concerns (`--seed` for a seed).
fn refresh_key(e: &RefreshConfigError) -> String {
    match e.field() {
        "seeds" => "--seed".to_owned(),
        f => format!("roster.{f}"),
    }
}

/// Maps a refresh configuration error (from [`NodeConfig::refresh_config`] with the
/// command line's seeds) to the key or flag at fault.
pub fn refresh_error(e: &RefreshConfigError) -> ConfigError {
    ConfigError::invalid(refresh_key(e), e)
}

/// Maps a server configuration error (from [`NodeConfig::server_config`] with the
/// command line's id and address) to the key or flag at fault (`node_id` is `--id`,
/// `advertised_addr` is `--listen`).
pub fn server_error(e: &ServerConfigError) -> ConfigError {
    let key = match server_key(e).as_str() {
        "node_id" => "--id".to_owned(),
        "advertised_addr" => "--listen".to_owned(),
        other => other.to_owned(),
    };
    ConfigError::invalid(key, e)
}
