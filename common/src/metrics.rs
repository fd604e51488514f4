//! The node's metrics, kept with the `prometheus-client` crate and rendered in the
//! Prometheus text format ([`Metrics::render`]). Both drivers update the same metrics;
//! the `peerblock-node` binary serves them on its admin address.
//!
//! One [`Metrics`] is created per node and shared (`Arc`) by its server, client, reader and
//! roster service; each part updates the metrics of what it does. Every metric name starts
//! with `peerblock_`. docs/node.md lists them and says where they are served.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use peerblock_core::roster::MembershipStats;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::relay_cache::CacheCounters;

/// A label set with one `reason` label (why a connection was refused).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ReasonLabel {
    /// The refusal reason's wire token (`sessions`, `source-sessions`, ...).
    pub reason: String,
}

/// A label set with one `status` label (an HTTP status code).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct StatusLabel {
    /// The status code.
    pub status: u16,
}

/// A label set with one `outcome` label (how a read or a GET ended).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// The outcome class: for reads `found`, `origin`, `absent`, `busy`, `unavailable`,
    /// `cancelled`; for GETs `ok`, `miss`, `refused`, `failed`, `invalid`, `cancelled`.
    pub outcome: &'static str,
}

/// Every metric the node keeps. Cloning shares the same counters.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// Connections accepted and admitted (a session opened).
    pub connections_accepted: Counter,
    /// Connections refused at accept time, by refusal reason.
    pub connections_refused: Family<ReasonLabel, Counter>,
    /// Admitted connections open now.
    pub sessions_open: Gauge<i64, AtomicI64>,
    /// Responses written, by status (a refusal's `503` included).
    pub requests: Family<StatusLabel, Counter>,
    /// `requests`' `200` counter, found once: [`Metrics::response`] runs per request, and
    /// a family lookup hashes the label and takes the family's lock.
    ok_responses: std::sync::OnceLock<Counter>,
    /// Block body bytes written.
    pub bytes_served: Counter,
    /// Response body bytes handed to sockets and not yet written, node-wide.
    pub inflight_bytes: Gauge<i64, AtomicI64>,
    /// Peers whose circuit is open in this node's client breaker.
    pub breaker_open_peers: Gauge<i64, AtomicI64>,
    /// Live entries in this node's client cooldown table.
    pub cooldowns_live: Gauge<i64, AtomicI64>,
    /// Peers put on the failed cooldown for serving a second invalid block
    /// (core's `client::INVALID_STRIKES`).
    pub invalid_cooldowns: Counter,
    /// Reads finished, by outcome.
    pub read_outcomes: Family<OutcomeLabel, Counter>,
    /// GETs finished, by outcome class.
    pub gets: Family<OutcomeLabel, Counter>,
    /// GET latency in seconds, from the exchange's start to its outcome.
    pub get_seconds: Histogram,
    /// Members in this node's roster table.
    pub roster_members: Gauge<i64, AtomicI64>,
    /// Members placement uses (the node itself included: `Membership::placed`), updated
    /// with `roster_members`.
    pub roster_placed_members: Gauge<i64, AtomicI64>,
    /// `peerblock_roster_rejected_total{reason}`: membership claims rejected, by reason
    /// (`replayed`, `wrong-key`, `bad-signature`, `malformed`, `unverified`,
    /// `rate-limited`, `epoch-refused`); see docs/security.md.
    pub roster_rejected: Family<ReasonLabel, Counter>,
    /// `peerblock_roster_signature_checks_total`: Ed25519 verifications run by the table.
    pub roster_signature_checks: Counter,
    /// `peerblock_roster_verify_cache_hits_total`: records recognised without a check.
    pub roster_verify_cache_hits: Counter,
    /// Block bytes read from store files into user space to be served (a cache miss on
    /// the buffered path). The zero-copy path reads none.
    pub store_read_bytes: Counter,
    /// Block bytes sent with `sendfile` straight from store files (the mio driver's
    /// zero-copy path): never copied through user space.
    pub sendfile_bytes: Counter,
    /// `peerblock_store_corrupt_total`: block files of this node's store that failed
    /// verification when read and were quarantined (renamed `.<index>.corrupt`; see
    /// `peerblock_common::store`). Any increase means bit rot or tampering on this disk.
    pub store_corrupt: Counter,
    /// `peerblock_store_filesystem_avail_bytes`: bytes an unprivileged writer may still
    /// use on the file system holding the store (sampled by the node every
    /// `STORE_FS_SAMPLE`; 0 until the first sample).
    pub store_fs_avail_bytes: Gauge<i64, AtomicI64>,
    /// `peerblock_store_filesystem_size_bytes`: the size of the file system holding the
    /// store (sampled with the above).
    pub store_fs_size_bytes: Gauge<i64, AtomicI64>,
    /// The relay cache's counters (`peerblock_relay_cache_hits_total`, `_inserts_total`,
    /// `_evictions_total`, `_corrupt_total` and the gauge `peerblock_relay_cache_bytes`):
    /// hand them to [`RelayCache::open`](crate::relay_cache::RelayCache::open).
    pub relay_cache: CacheCounters,
    /// The relay's work ([`RelayCounters`]).
    pub relay: RelayCounters,
}

/// What a node's relay counts (`peerblock_relay_*`). Clones share the counters.
#[derive(Clone, Debug, Default)]
pub struct RelayCounters {
    /// `peerblock_relay_misses_total`: relayed requests, each a miss of this node's store
    /// and relay cache that joined the single-flight table.
    pub misses: Counter,
    /// `peerblock_relay_flight_joins_total`: relayed requests that joined a fetch already
    /// in flight for the same block instead of starting one.
    pub flight_joins: Counter,
    /// `peerblock_relay_parent_fetches_total`: upstream fetches asked of the block's
    /// parent (another node).
    pub parent_fetches: Counter,
    /// `peerblock_relay_origin_fetches_total`: upstream fetches asked of the origin.
    pub origin_fetches: Counter,
    /// `peerblock_relay_origin_bytes_total`: block bytes the origin answered.
    pub origin_bytes: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Fresh metrics, registered under their `peerblock_` names.
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Arc::new(Registry::default()),
            connections_accepted: Counter::default(),
            connections_refused: Family::default(),
            sessions_open: Gauge::default(),
            requests: Family::default(),
            ok_responses: std::sync::OnceLock::new(),
            bytes_served: Counter::default(),
            inflight_bytes: Gauge::default(),
            breaker_open_peers: Gauge::default(),
            cooldowns_live: Gauge::default(),
            invalid_cooldowns: Counter::default(),
            read_outcomes: Family::default(),
            gets: Family::default(),
            // 100 µs .. ~52 s in 20 doubling buckets: loopback hits to dial timeouts.
            get_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 20)),
            roster_members: Gauge::default(),
            roster_placed_members: Gauge::default(),
            roster_rejected: Family::default(),
            roster_signature_checks: Counter::default(),
            roster_verify_cache_hits: Counter::default(),
            store_read_bytes: Counter::default(),
            sendfile_bytes: Counter::default(),
            store_corrupt: Counter::default(),
            store_fs_avail_bytes: Gauge::default(),
            store_fs_size_bytes: Gauge::default(),
            relay_cache: CacheCounters::default(),
            relay: RelayCounters::default(),
        };
        let mut registry = Registry::default();
        let r = &mut registry;
        let p = "peerblock";
        r.register(
            format!("{p}_connections_accepted"),
            "Connections accepted and admitted",
            m.connections_accepted.clone(),
        );
        r.register(
            format!("{p}_connections_refused"),
            "Connections refused at accept time, by reason",
            m.connections_refused.clone(),
        );
        r.register(
            format!("{p}_sessions_open"),
            "Admitted connections open now",
            m.sessions_open.clone(),
        );
        r.register(
            format!("{p}_requests"),
            "Responses written, by status",
            m.requests.clone(),
        );
        r.register(
            format!("{p}_served_bytes"),
            "Block body bytes written",
            m.bytes_served.clone(),
        );
        r.register(
            format!("{p}_inflight_bytes"),
            "Response body bytes handed to sockets and not yet written",
            m.inflight_bytes.clone(),
        );
        r.register(
            format!("{p}_breaker_open_peers"),
            "Peers whose circuit is open in the client breaker",
            m.breaker_open_peers.clone(),
        );
        r.register(
            format!("{p}_cooldowns_live"),
            "Live entries in the client cooldown table",
            m.cooldowns_live.clone(),
        );
        r.register(
            format!("{p}_invalid_cooldowns"),
            "Peers put on the failed cooldown for a second invalid block",
            m.invalid_cooldowns.clone(),
        );
        r.register(
            format!("{p}_read_outcomes"),
            "Reads finished, by outcome",
            m.read_outcomes.clone(),
        );
        r.register(
            format!("{p}_gets"),
            "GETs finished, by outcome class",
            m.gets.clone(),
        );
        r.register(
            format!("{p}_get_seconds"),
            "GET latency from start to outcome",
            m.get_seconds.clone(),
        );
        r.register(
            format!("{p}_roster_members"),
            "Members in the roster table",
            m.roster_members.clone(),
        );
        r.register(
            format!("{p}_roster_placed_members"),
            "Members placement uses: verified or spoken for themselves, within the budgets",
            m.roster_placed_members.clone(),
        );
        r.register(
            format!("{p}_roster_rejected"),
            "Membership claims rejected, by reason",
            m.roster_rejected.clone(),
        );
        r.register(
            format!("{p}_roster_signature_checks"),
            "Ed25519 verifications of member records and epochs",
            m.roster_signature_checks.clone(),
        );
        r.register(
            format!("{p}_roster_verify_cache_hits"),
            "Member records recognised as verified without a check",
            m.roster_verify_cache_hits.clone(),
        );
        r.register(
            format!("{p}_store_read_bytes"),
            "Block bytes read from store files into user space to be served",
            m.store_read_bytes.clone(),
        );
        r.register(
            format!("{p}_sendfile_bytes"),
            "Block bytes sent with sendfile straight from store files",
            m.sendfile_bytes.clone(),
        );
        r.register(
            format!("{p}_store_corrupt"),
            "Block files that failed verification when read and were quarantined",
            m.store_corrupt.clone(),
        );
        let c = &m.relay_cache;
        r.register(
            format!("{p}_relay_cache_hits"),
            "Requests answered from the relay cache",
            c.hits.clone(),
        );
        r.register(
            format!("{p}_relay_cache_inserts"),
            "Relayed blocks written into the relay cache",
            c.inserts.clone(),
        );
        r.register(
            format!("{p}_relay_cache_evictions"),
            "Relayed blocks evicted from the relay cache to keep its bound",
            c.evictions.clone(),
        );
        r.register(
            format!("{p}_relay_cache_corrupt"),
            "Relay-cached files that failed their hash and were deleted",
            c.corrupt.clone(),
        );
        r.register(
            format!("{p}_relay_cache_bytes"),
            "Bytes of blocks in the relay cache now",
            c.bytes.clone(),
        );
        let rc = &m.relay;
        r.register(
            format!("{p}_relay_misses"),
            "Relayed requests (misses of the store and the relay cache)",
            rc.misses.clone(),
        );
        r.register(
            format!("{p}_relay_flight_joins"),
            "Relayed requests that joined a fetch already in flight",
            rc.flight_joins.clone(),
        );
        r.register(
            format!("{p}_relay_parent_fetches"),
            "Relay fetches asked of the block's parent",
            rc.parent_fetches.clone(),
        );
        r.register(
            format!("{p}_relay_origin_fetches"),
            "Relay fetches asked of the origin",
            rc.origin_fetches.clone(),
        );
        r.register(
            format!("{p}_store_filesystem_avail_bytes"),
            "Bytes still available to the node on the file system holding its store",
            m.store_fs_avail_bytes.clone(),
        );
        r.register(
            format!("{p}_store_filesystem_size_bytes"),
            "Size of the file system holding the store",
            m.store_fs_size_bytes.clone(),
        );
        r.register(
            format!("{p}_relay_origin_bytes"),
            "Block bytes the origin answered to this node's relay",
            rc.origin_bytes.clone(),
        );
        m.registry = Arc::new(registry);
        m
    }

    /// Sets `roster_placed_members` from `table` (computes its placed members).
    pub fn record_placed(&self, table: &peerblock_core::roster::Membership) {
        self.roster_placed_members.set(table.placed().len() as i64);
    }

    /// Brings the membership counters up to the table's `stats` (cumulative since the
    /// table was created; one table per node, so the counters only move up).
    pub fn record_membership(&self, stats: &MembershipStats) {
        let sync = |c: &Counter, total: u64| {
            let now = c.get();
            if total > now {
                c.inc_by(total - now);
            }
        };
        for (reason, total) in [
            ("replayed", stats.replayed),
            ("wrong-key", stats.wrong_key),
            ("bad-signature", stats.bad_signature),
            ("malformed", stats.malformed),
            ("unverified", stats.unverified_refused),
            ("rate-limited", stats.rate_limited),
            ("epoch-refused", stats.epoch_refused),
        ] {
            if total > 0 {
                sync(
                    &self.roster_rejected.get_or_create(&ReasonLabel {
                        reason: reason.to_owned(),
                    }),
                    total,
                );
            }
        }
        sync(&self.roster_signature_checks, stats.signature_checks);
        sync(&self.roster_verify_cache_hits, stats.cache_hits);
    }

    /// The metrics in the Prometheus text exposition format (`# EOF`-terminated
    /// OpenMetrics text, which Prometheus scrapes as `text/plain`).
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// Counts one refused connection under `reason` (a refusal reason's wire token).
    pub fn refused(&self, reason: &str) {
        self.connections_refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts one response written with `status`.
    pub fn response(&self, status: u16) {
        if status == 200 {
            let ok = self
                .ok_responses
                .get_or_init(|| self.requests.get_or_create(&StatusLabel { status }).clone());
            ok.inc();
            return;
        }
        self.requests.get_or_create(&StatusLabel { status }).inc();
    }

    /// Counts one read that ended with `outcome`.
    pub fn read_outcome(&self, outcome: &'static str) {
        self.read_outcomes
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// Counts one GET that ended with `outcome` after `seconds`.
    pub fn get_outcome(&self, outcome: &'static str, seconds: f64) {
        self.gets.get_or_create(&OutcomeLabel { outcome }).inc();
        self.get_seconds.observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendering_names_every_metric_with_its_labels() {
        let m = Metrics::new();
        m.connections_accepted.inc();
        m.refused("source-sessions");
        m.response(503);
        m.read_outcome("busy");
        m.get_outcome("ok", 0.002);
        m.store_corrupt.inc();
        let text = m.render();
        assert!(text.contains("peerblock_store_corrupt_total 1"), "{text}");
        assert!(
            text.contains("peerblock_connections_accepted_total 1"),
            "{text}"
        );
        assert!(
            text.contains("peerblock_connections_refused_total{reason=\"source-sessions\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("peerblock_requests_total{status=\"503\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("peerblock_read_outcomes_total{outcome=\"busy\"} 1"),
            "{text}"
        );
        assert!(text.contains("peerblock_get_seconds_count 1"), "{text}");
        assert!(text.contains("peerblock_sessions_open 0"), "{text}");
    }

    #[test]
    fn responses_are_counted_by_status_across_clones() {
        let m = Metrics::new();
        // Cloned before any 200: both copies must still count into one series.
        let clone = m.clone();
        m.response(200);
        clone.response(200);
        m.response(200);
        m.response(404);
        let text = m.render();
        assert!(
            text.contains("peerblock_requests_total{status=\"200\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("peerblock_requests_total{status=\"404\"} 1"),
            "{text}"
        );
    }
}
