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
/// request head has); a longer head is answered `431` and closed.
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
/// [`METRICS_CONTENT_TYPE`], any other path `404`, any other method `405`, a head that is
/// not HTTP or longer than [`MAX_METRICS_HEAD_BYTES`] `400`/`431`; every answer closes the
/// connection. One short task per connection, at most [`MAX_METRICS_CONNECTIONS`] at once,
/// each bounded by [`METRICS_IO_TIMEOUT`] for reading and again for writing.
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
            if let Err(e) = answer_scrape(stream, &metrics).await {
                tracing::debug!(%peer, error = %e, "metrics endpoint: connection ended");
            }
            drop(permit);
        });
    }
}

/// Reads one request head and answers it (see [`serve_metrics`]).
async fn answer_scrape(
    mut stream: tokio::net::TcpStream,
    metrics: &Metrics,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read_head = async {
        loop {
            if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
                return Ok(true);
            }
            if head.len() >= MAX_METRICS_HEAD_BYTES {
                return Ok(false);
            }
            let want = buf.len().min(MAX_METRICS_HEAD_BYTES - head.len());
            let n = stream.read(&mut buf[..want]).await?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed before a complete request head",
                ));
            }
            head.extend_from_slice(&buf[..n]);
        }
    };
    let complete = tokio::time::timeout(METRICS_IO_TIMEOUT, read_head)
        .await
        .map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "request head timed out")
        })??;
    let (status, body, head_only) = if !complete {
        (
            "431 Request Header Fields Too Large",
            String::from("request head too large\n"),
            false,
        )
    } else {
        let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let mut parts = line.trim_end_matches('\r').split(' ');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(method), Some(target), Some(version), None) if version.starts_with("HTTP/1.") => {
                let path = target.split('?').next().unwrap_or_default();
                match (method, path) {
                    ("GET" | "HEAD", "/metrics") => ("200 OK", metrics.render(), method == "HEAD"),
                    ("GET" | "HEAD", _) => (
                        "404 Not Found",
                        String::from("not found: try /metrics\n"),
                        method == "HEAD",
                    ),
                    _ => (
                        "405 Method Not Allowed",
                        String::from("only GET /metrics\n"),
                        false,
                    ),
                }
            }
            _ => (
                "400 Bad Request",
                String::from("not an HTTP/1.1 request\n"),
                false,
            ),
        }
    };
    let content_type = if status.starts_with("200") {
        METRICS_CONTENT_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        response.push_str("Allow: GET, HEAD\r\n");
    }
    response.push_str("\r\n");
    let write = async {
        stream.write_all(response.as_bytes()).await?;
        if !head_only {
            stream.write_all(body.as_bytes()).await?;
        }
        stream.shutdown().await
    };
    tokio::time::timeout(METRICS_IO_TIMEOUT, write)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "answer timed out"))?
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

    /// Sends `request` to the endpoint at `addr` and returns the whole answer.
    async fn ask(addr: std::net::SocketAddr, request: &[u8]) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn the_endpoint_answers_get_metrics_with_the_rendered_text() {
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let m = Metrics::new();
            m.connections_accepted.inc();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let server = tokio::spawn(serve_metrics(listener, m, async {
                let _ = stopped.await;
            }));
            let answer = ask(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
            assert!(
                answer.contains(&format!("Content-Type: {METRICS_CONTENT_TYPE}\r\n")),
                "{answer}"
            );
            assert!(
                answer.contains("peerblock_connections_accepted_total 1"),
                "{answer}"
            );
            let (head, body) = answer.split_once("\r\n\r\n").unwrap();
            assert!(
                head.contains(&format!("Content-Length: {}", body.len())),
                "{head}"
            );
            let _ = stop.send(());
            server.await.unwrap().unwrap();
        })
        .await
        .expect("bounded");
    }

    #[tokio::test]
    async fn the_endpoint_answers_404_for_other_paths_and_405_for_other_methods() {
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(serve_metrics(
                listener,
                Metrics::new(),
                std::future::pending(),
            ));
            let answer = ask(addr, b"GET /peer/v1/roster HTTP/1.1\r\n\r\n").await;
            assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
            assert!(!answer.contains("peerblock_"), "{answer}");
            let answer = ask(addr, b"POST /metrics HTTP/1.1\r\n\r\n").await;
            assert!(answer.starts_with("HTTP/1.1 405 "), "{answer}");
            server.abort();
        })
        .await
        .expect("bounded");
    }

    #[tokio::test]
    async fn the_endpoint_refuses_a_head_above_its_bound() {
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(serve_metrics(
                listener,
                Metrics::new(),
                std::future::pending(),
            ));
            let mut req = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
            req.resize(MAX_METRICS_HEAD_BYTES, b'a'); // all read: closing leaves nothing unread to reset the answer away
            let answer = ask(addr, &req).await;
            assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
            server.abort();
        })
        .await
        .expect("bounded");
    }
}
