//! The node's metrics, kept with the `prometheus-client` crate and rendered in the
//! Prometheus text format ([`Metrics::render`]).
//!
//! One [`Metrics`] is created per node and shared (`Arc`) by its server, client, reader and
//! roster service; each part updates the metrics of what it does. Every metric name starts
//! with `peerblock_`. docs/node.md lists them and says where they are served.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

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
    /// Block body bytes written.
    pub bytes_served: Counter,
    /// Response body bytes handed to sockets and not yet written, node-wide.
    pub inflight_bytes: Gauge<i64, AtomicI64>,
    /// Peers whose circuit is open in this node's client breaker.
    pub breaker_open_peers: Gauge<i64, AtomicI64>,
    /// Live entries in this node's client cooldown table.
    pub cooldowns_live: Gauge<i64, AtomicI64>,
    /// Reads finished, by outcome.
    pub read_outcomes: Family<OutcomeLabel, Counter>,
    /// GETs finished, by outcome class.
    pub gets: Family<OutcomeLabel, Counter>,
    /// GET latency in seconds, from the exchange's start to its outcome.
    pub get_seconds: Histogram,
    /// Members in this node's roster table.
    pub roster_members: Gauge<i64, AtomicI64>,
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
            bytes_served: Counter::default(),
            inflight_bytes: Gauge::default(),
            breaker_open_peers: Gauge::default(),
            cooldowns_live: Gauge::default(),
            read_outcomes: Family::default(),
            gets: Family::default(),
            // 100 µs .. ~52 s in 20 doubling buckets: loopback hits to dial timeouts.
            get_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 20)),
            roster_members: Gauge::default(),
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
        m.registry = Arc::new(registry);
        m
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

/// Content type of [`serve_metrics`]' answer: the OpenMetrics text that
/// [`Metrics::render`] produces (Prometheus negotiates and scrapes it).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Largest request head the metrics endpoint reads (8 KiB, the bound a served peer
/// request head has, and hyper's smallest read buffer); a longer head is answered `431`
/// and closed.
pub const MAX_METRICS_HEAD_BYTES: usize = 8 * 1024;

/// How long the metrics endpoint waits for a request head, and then for its answer to be
/// written: a scraper sends its request at once; a silent connection is closed.
pub const METRICS_IO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Scrape connections served at once. A Prometheus server scrapes one connection at a
/// time; 16 leaves room for a few humans with curl. Further connections are closed at
/// once without an answer (each costs one accept and one close).
pub const MAX_METRICS_CONNECTIONS: usize = 16;

/// Serves the metrics over HTTP/1.1 on `listener` until `shutdown` completes.
///
/// Answers `GET /metrics` (and `HEAD`) with [`Metrics::render`] as
/// [`METRICS_CONTENT_TYPE`], any other path `404`, any other method `405`; every answer
/// closes the connection. The HTTP/1.1 framing is hyper's (this is an operator's endpoint,
/// not the peer wire form, which is core's): a head longer than [`MAX_METRICS_HEAD_BYTES`]
/// is answered `431`, a malformed one `400`. One short task per connection, at most
/// [`MAX_METRICS_CONNECTIONS`] at once, the head bounded by [`METRICS_IO_TIMEOUT`] and the
/// whole exchange by twice that.
///
/// The endpoint runs on its own admin address (`--metrics ADDR`), never the peer port:
/// the peer port is metered by admission and refuses when full, exactly when an operator
/// needs the numbers; and the admin address can be bound to loopback or a management
/// network while the peer port faces the world.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_METRICS_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Per-connection errors (a reset before accept, descriptor exhaustion)
                    // must not end the endpoint; back off briefly so a persistent error
                    // does not spin.
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "metrics endpoint: connection bound reached, closing");
            drop(stream);
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let answer = answer_scrape(&request, &metrics);
                async move { Ok::<_, std::convert::Infallible>(answer) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .title_case_headers(true)
                .max_buf_size(MAX_METRICS_HEAD_BYTES)
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(METRICS_IO_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            match tokio::time::timeout(2 * METRICS_IO_TIMEOUT, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "metrics endpoint: connection ended")
                }
                Err(_) => tracing::debug!(%peer, "metrics endpoint: connection timed out"),
            }
            drop(permit);
        });
    }
}

/// The answer to one request of the metrics endpoint (see [`serve_metrics`]).
fn answer_scrape<B>(
    request: &hyper::Request<B>,
    metrics: &Metrics,
) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
    use hyper::{header, Method, Response, StatusCode};
    let readable = matches!(*request.method(), Method::GET | Method::HEAD);
    let (status, content_type, body) = match (readable, request.uri().path()) {
        (true, "/metrics") => (StatusCode::OK, METRICS_CONTENT_TYPE, metrics.render()),
        (true, _) => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            String::from("not found: try /metrics\n"),
        ),
        (false, _) => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            String::from("only GET /metrics\n"),
        ),
    };
    let mut response = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type);
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response = response.header(header::ALLOW, "GET, HEAD");
    }
    response
        .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
        .expect("a status, two static headers and a body make a valid response")
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
        let text = m.render();
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
}
