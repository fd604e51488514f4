//! The node's metrics ([`Metrics`], kept in `peerblock-common` and shared with the mio
//! driver) and the admin endpoint that serves them over HTTP/1.1, with the health and
//! readiness probes an orchestrator asks ([`serve_admin`], [`serve_metrics`]).

use std::sync::Arc;

pub use peerblock_common::metrics::*;

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

/// What `GET /readyz` asks: `Ok(())` when the node is ready, else why it is not (one line,
/// the reasons joined by `; `). Called on a blocking thread: it may read the file system.
pub type ReadinessCheck = std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Path of the liveness probe: `200 ok` while the process answers at all.
pub const HEALTHZ_PATH: &str = "/healthz";

/// Path of the readiness probe: `200 ready`, or `503` with the reasons (see
/// [`ReadinessCheck`]).
pub const READYZ_PATH: &str = "/readyz";

/// Serves the metrics over HTTP/1.1 on `listener` until `shutdown` completes: the admin
/// endpoint of [`serve_admin`] with no readiness check (`/readyz` is always `200`).
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    serve_admin(listener, metrics, None, shutdown).await
}

/// Serves the admin endpoint over HTTP/1.1 on `listener` until `shutdown` completes.
///
/// Answers `GET /metrics` (and `HEAD`) with [`Metrics::render`] as
/// [`METRICS_CONTENT_TYPE`]; `GET` [`HEALTHZ_PATH`] with `200 ok` (liveness: the process
/// and its runtime answer); `GET` [`READYZ_PATH`] with `200 ready` when `readiness` passes
/// (or is `None`), else `503` and `not ready: ` followed by its reasons; any other path
/// `404`, any other method `405`; every answer closes the connection. The HTTP/1.1 framing is hyper's (this is an operator's endpoint,
/// not the peer wire form, which is core's): a head longer than [`MAX_METRICS_HEAD_BYTES`]
/// is answered `431`, a malformed one `400`. One short task per connection, at most
/// [`MAX_METRICS_CONNECTIONS`] at once, the head bounded by [`METRICS_IO_TIMEOUT`] and the
/// whole exchange by twice that.
///
/// The endpoint runs on its own admin address (`--metrics ADDR`), never the peer port:
/// the peer port is metered by admission and refuses when full, exactly when an operator
/// needs the numbers; and the admin address can be bound to loopback or a management
/// network while the peer port faces the world.
pub async fn serve_admin(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    readiness: Option<ReadinessCheck>,
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
        let readiness = readiness.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let ready = match (request.method(), request.uri().path(), &readiness) {
                    (&hyper::Method::GET | &hyper::Method::HEAD, READYZ_PATH, Some(check)) => {
                        Some(check.clone())
                    }
                    _ => None,
                };
                let answer = answer_scrape(&request, &metrics);
                async move {
                    let answer = match ready {
                        Some(check) => answer_ready(
                            tokio::task::spawn_blocking(move || check())
                                .await
                                .unwrap_or_else(|e| Err(format!("readiness check failed: {e}"))),
                        ),
                        None => answer,
                    };
                    Ok::<_, std::convert::Infallible>(answer)
                }
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
        (true, HEALTHZ_PATH | READYZ_PATH) => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            String::from(if request.uri().path() == HEALTHZ_PATH {
                "ok\n"
            } else {
                "ready\n"
            }),
        ),
        (true, _) => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            String::from("not found: try /metrics, /healthz or /readyz\n"),
        ),
        (false, _) => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            String::from("only GET /metrics, /healthz or /readyz\n"),
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

/// The answer to `GET /readyz` given the readiness check's verdict.
fn answer_ready(
    verdict: Result<(), String>,
) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
    use hyper::{header, Response, StatusCode};
    let (status, body) = match verdict {
        Ok(()) => (StatusCode::OK, String::from("ready\n")),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    };
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
        .expect("a status, one static header and a body make a valid response")
}
