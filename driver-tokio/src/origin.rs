//! Object origins: plain HTTP/1.1 or HTTPS servers (nginx, an object store, a presigned
//! link) read by byte ranges, for `peerblock-node fetch URL` and for relays whose request
//! names an object origin (`peerblock_common::object`).
//!
//! [`ObjectClient`] drives core's `Exchange` with a `Range` request
//! (`RequestKind::Range`, classified by core: see `docs/exchange.md`) over a stream that
//! is either plain TCP or TLS (rustls with the ring provider; the system's roots plus an
//! optional extra CA file, [`tls_config`]). The driver only moves bytes: the dial (and the
//! TLS handshake) run under the exchange's dial deadline, the rest under its
//! response-header and request deadlines. Idle connections are kept per origin (at most
//! [`MAX_IDLE_PER_ORIGIN`]) for the next range.
//!
//! An origin has no breaker here: its answers depend on each requester's URL (a `403` for
//! one expired link says nothing about the next), and a read gives up on the origin after
//! one answer anyway.
//!
//! [`ObjectOrigin`] is the reader's `OriginFetch` for one object: the Range GET of a
//! block, its length checked, what went wrong kept for the command to say
//! ([`OriginProblem`]), and the bytes counted.

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use peerblock_common::object::{ObjectIdentity, ObjectUrl, Scheme};
use peerblock_core::client::{
    ClientConfig, ClientEvent, Connection, ConnectionFate, Ending, Exchange, ExchangeRequest, Link,
    ObjectChange, ObjectRange, RangeAnswer,
};
use peerblock_core::read::OriginOutcome;
use peerblock_core::time::{Clock, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::TlsConnector;

use crate::reader::{BlockSpec, OriginFetch, OriginFuture};

/// Idle connections kept per origin (scheme and authority). A fetch reads at most
/// `--parallel` (default 8) blocks at once; eight connections cover it.
pub const MAX_IDLE_PER_ORIGIN: usize = 8;

/// Origins whose idle connections are remembered at once; past it the table is emptied
/// (the connections close) before a new origin is added.
pub const MAX_ORIGINS: usize = 64;

/// The TLS client configuration for HTTPS origins: the system's root certificates
/// (`rustls-native-certs`) plus every certificate in `extra_ca` (a PEM file), ring as the
/// crypto provider, TLS 1.2 and 1.3. Fails, naming the file, if `extra_ca` cannot be read
/// or holds no certificate (with no root at all, every https origin fails its handshake).
pub fn tls_config(extra_ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!(error = %e, "a system root certificate could not be loaded");
    }
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(added, "system root certificates");
    if let Some(path) = extra_ca {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("{}: cannot read the CA certificates: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{}: holds no PEM certificate", path.display()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("{}: a certificate is not usable: {e}", path.display()))?;
        }
    }
    if roots.is_empty() {
        // Every https origin will then fail its handshake (`unavailable`), which names
        // the problem per origin; a plain-http read needs no roots at all.
        tracing::warn!("no root certificate: none in the system store and no extra CA file");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A connection to an origin: plain TCP or TLS over TCP.
pub enum OriginStream {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for OriginStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            OriginStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for OriginStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            OriginStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_flush(cx),
            OriginStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            OriginStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The range client of a command or a relay. Cheap to clone.
#[derive(Clone)]
pub struct ObjectClient {
    inner: Arc<Inner>,
    /// The local address origin connections are made from (`None`: the kernel's choice).
    local_ip: Option<std::net::IpAddr>,
}

struct Inner {
    config: ClientConfig,
    clock: Clock,
    tls: Option<Arc<rustls::ClientConfig>>,
    idle: Mutex<HashMap<String, Vec<(OriginStream, Connection)>>>,
    bytes: AtomicU64,
    fetches: AtomicU64,
}

impl std::fmt::Debug for ObjectClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectClient")
            .field("tls", &self.inner.tls.is_some())
            .finish()
    }
}

/// What one range fetch gave.
#[derive(Debug)]
pub struct RangeFetched {
    /// Core's classified ending, or our own misuse (a request that cannot be sent).
    pub ending: Result<Ending, String>,
    /// Time from the call to the ending.
    pub elapsed: std::time::Duration,
}

impl ObjectClient {
    /// A client whose exchanges use `config`'s deadlines (validated by the exchange) on
    /// `clock`; `tls` for `https://` origins (`None`: an https URL fails at once).
    pub fn new(
        config: ClientConfig,
        clock: Clock,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> ObjectClient {
        ObjectClient {
            inner: Arc::new(Inner {
                config,
                clock,
                tls,
                idle: Mutex::new(HashMap::new()),
                bytes: AtomicU64::new(0),
                fetches: AtomicU64::new(0),
            }),
            local_ip: None,
        }
    }

    /// The same client dialing origins from `local_ip` (an address of this host; `None`:
    /// the kernel's choice), as `fetch --bind` and the node's own client do.
    pub fn with_local_ip(mut self, local_ip: Option<std::net::IpAddr>) -> ObjectClient {
        self.local_ip = local_ip;
        self
    }

    fn now(&self) -> Instant {
        self.inner.clock.to_core(std::time::Instant::now())
    }

    /// Body bytes received in `206` answers so far (the origin's egress to us).
    pub fn bytes(&self) -> u64 {
        self.inner.bytes.load(Ordering::Relaxed)
    }

    /// Range fetches started so far.
    pub fn fetches(&self) -> u64 {
        self.inner.fetches.load(Ordering::Relaxed)
    }

    /// One byte range of `url`'s object: an idle connection to the origin if there is one,
    /// else a dial (and a TLS handshake for `https://`), then core's `Range` exchange.
    pub async fn range(&self, url: &ObjectUrl, range: ObjectRange<'_>) -> RangeFetched {
        let started = std::time::Instant::now();
        self.inner.fetches.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}://{}", url.scheme.as_str(), url.authority());
        let host = url.host_header();
        let mut allow_pool = true;
        let (mut exchange, ending, fate, stream) = loop {
            let pooled = if allow_pool {
                let mut idle = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner());
                idle.get_mut(&key).and_then(Vec::pop)
            } else {
                None
            };
            let was_pooled = pooled.is_some();
            let (link, stream) = match pooled {
                Some((s, c)) => (Link::Pooled(c), Some(s)),
                None => (Link::Dial, None),
            };
            let exchange = match Exchange::new(
                self.now(),
                &self.inner.config,
                ExchangeRequest::range(&host, range),
                link,
            ) {
                Ok(e) => e,
                Err(e) => {
                    return RangeFetched {
                        ending: Err(format!("the range request cannot be sent: {e}")),
                        elapsed: started.elapsed(),
                    }
                }
            };
            let (exchange, ending, fate, retry_fresh, stream) =
                self.drive(url, exchange, stream).await;
            if retry_fresh && was_pooled {
                // The origin retired the idle connection as we reused it (its keep-alive
                // timeout): once more on a fresh dial, as HTTP clients do.
                tracing::debug!(origin = %url.authority(), "idle origin connection retired: retrying fresh");
                allow_pool = false;
                continue;
            }
            break (exchange, ending, fate, stream);
        };
        if let Ending::Range(RangeAnswer::Part { body, .. }) = &ending {
            self.inner
                .bytes
                .fetch_add(body.len() as u64, Ordering::Relaxed);
        }
        if fate == ConnectionFate::Reuse {
            if let (Some(conn), Some(stream)) = (exchange.take_connection(), stream) {
                let mut idle = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner());
                if idle.len() >= MAX_ORIGINS && !idle.contains_key(&key) {
                    idle.clear();
                }
                let list = idle.entry(key).or_default();
                if list.len() < MAX_IDLE_PER_ORIGIN {
                    list.push((stream, conn));
                }
            }
        }
        RangeFetched {
            ending: Ok(ending),
            elapsed: started.elapsed(),
        }
    }

    async fn dial(&self, url: &ObjectUrl) -> std::io::Result<OriginStream> {
        let tcp = crate::client::connect(&url.authority(), self.local_ip).await?;
        let _ = tcp.set_nodelay(true);
        match url.scheme {
            Scheme::Http => Ok(OriginStream::Plain(tcp)),
            Scheme::Https => {
                let Some(tls) = &self.inner.tls else {
                    return Err(std::io::Error::other("no TLS configuration for https://"));
                };
                let name = rustls_pki_types::ServerName::try_from(url.server_name().to_owned())
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                let s = TlsConnector::from(tls.clone()).connect(name, tcp).await?;
                Ok(OriginStream::Tls(Box::new(s)))
            }
        }
    }

    /// Runs `exchange` to its end; returns it (for `take_connection`), the ending, the
    /// connection's fate, whether a fresh retry is due (`retry_fresh`) and the stream.
    async fn drive(
        &self,
        url: &ObjectUrl,
        mut exchange: Exchange,
        mut stream: Option<OriginStream>,
    ) -> (Exchange, Ending, ConnectionFate, bool, Option<OriginStream>) {
        let clock = &self.inner.clock;
        if stream.is_none() && !exchange.is_finished() {
            let mut dial = std::pin::pin!(self.dial(url));
            loop {
                let deadline = exchange.poll_timeout().map(|d| d.at);
                tokio::select! {
                    r = &mut dial => {
                        match r {
                            Ok(s) => {
                                stream = Some(s);
                                exchange.handle_connected(self.now());
                            }
                            Err(e) => {
                                tracing::debug!(origin = %url.authority(), error = %e, "origin dial failed");
                                exchange.handle_dial_failed(self.now());
                            }
                        }
                        break;
                    }
                    _ = sleep_to(clock, deadline) => {
                        exchange.handle_timeout(self.now());
                        if exchange.is_finished() {
                            break;
                        }
                    }
                }
            }
        }
        loop {
            while let Some(t) = exchange.poll_transmit(self.now()) {
                let Some(s) = stream.as_mut() else { break };
                let write = async {
                    s.write_all(&t.head).await?;
                    s.write_all(&t.body).await?;
                    s.flush().await
                };
                let deadline = exchange.poll_timeout().map(|d| d.at);
                let written = tokio::select! {
                    r = write => Some(r),
                    _ = sleep_to(clock, deadline) => None,
                };
                match written {
                    Some(Ok(())) => exchange.handle_transmitted(self.now()),
                    Some(Err(_)) => exchange.handle_eof(self.now()),
                    None => exchange.handle_timeout(self.now()),
                }
            }
            while let Some(event) = exchange.poll_event() {
                match event {
                    ClientEvent::Head { .. } => {}
                    // Range exchanges never ask for validation.
                    ClientEvent::Validate { .. } => exchange.handle_validated(self.now(), true),
                    ClientEvent::Done(outcome) => {
                        return (
                            exchange,
                            outcome.ending,
                            outcome.connection,
                            outcome.retry_fresh,
                            stream,
                        )
                    }
                    // An event a later core adds (`#[non_exhaustive]`): nothing asked.
                    _ => {}
                }
            }
            let deadline = exchange.poll_timeout().map(|d| d.at);
            let step = match (stream.as_mut(), exchange.read_buf()) {
                (Some(s), Some(buf)) => tokio::select! {
                    r = s.read(buf) => Some(r),
                    _ = sleep_to(clock, deadline) => None,
                },
                _ if deadline.is_some() => {
                    sleep_to(clock, deadline).await;
                    None
                }
                _ => {
                    exchange.cancel(self.now());
                    continue;
                }
            };
            let now = self.now();
            match step {
                Some(Ok(0)) | Some(Err(_)) => exchange.handle_eof(now),
                Some(Ok(n)) => {
                    exchange.handle_read(now, n);
                }
                None => exchange.handle_timeout(now),
            }
        }
    }
}

async fn sleep_to(clock: &Clock, at: Option<Instant>) {
    match at.and_then(|a| clock.to_std(a)) {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The identity probe: `Range: bytes=0-0` on `url`. Gives the object's size and validator.
pub async fn probe(client: &ObjectClient, url: &ObjectUrl) -> Result<(u64, String), OriginProblem> {
    let target = url.target();
    let fetched = client.range(url, ObjectRange::probe(&target)).await;
    match fetched.ending.map_err(OriginProblem::Local)? {
        Ending::Range(RangeAnswer::Part {
            total, validator, ..
        }) => Ok((total, validator.unwrap_or_default())),
        Ending::Range(RangeAnswer::Empty { validator }) => Ok((0, validator.unwrap_or_default())),
        other => {
            Err(OriginProblem::of(&other).unwrap_or(OriginProblem::Unavailable(describe(&other))))
        }
    }
}

/// What went wrong at an object origin, as the command says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OriginProblem {
    /// `404`: the object is not at the origin.
    Absent,
    /// `401`/`403`: the origin refused the URL's credential.
    Refused(u16),
    /// The origin sent the whole object (`200`): it ignored `Range`.
    RangeIgnored,
    /// The object changed since the read began.
    Changed(ObjectChange),
    /// A block of the wrong length.
    Length {
        /// The block.
        index: u64,
        /// Its expected length.
        expected: u64,
        /// What came.
        got: u64,
    },
    /// The origin could not be reached or answered something unusable.
    Unavailable(String),
    /// Our own misuse (a URL that cannot be sent).
    Local(String),
}

impl OriginProblem {
    /// The problem an ending names, if it names one the command reports by name.
    pub fn of(ending: &Ending) -> Option<OriginProblem> {
        Some(match ending {
            Ending::Miss => OriginProblem::Absent,
            Ending::UpstreamRefused { status } => OriginProblem::Refused(*status),
            Ending::Range(RangeAnswer::Ignored) => OriginProblem::RangeIgnored,
            Ending::Range(RangeAnswer::Changed(c)) => OriginProblem::Changed(c.clone()),
            _ => return None,
        })
    }

    /// Whether the read must stop (nothing written): the object changed or cannot be
    /// read by ranges.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            OriginProblem::RangeIgnored | OriginProblem::Changed(_) | OriginProblem::Length { .. }
        )
    }
}

impl std::fmt::Display for OriginProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OriginProblem::Absent => f.write_str("absent at origin (404)"),
            OriginProblem::Refused(s) => write!(f, "origin refused ({s})"),
            OriginProblem::RangeIgnored => f.write_str(
                "the origin ignored Range (200 with the whole object): it cannot be read by blocks",
            ),
            OriginProblem::Changed(c) => write!(f, "the object changed during the read: {c}"),
            OriginProblem::Length {
                index,
                expected,
                got,
            } => write!(f, "block {index}: {got} bytes, {expected} expected"),
            OriginProblem::Unavailable(why) => write!(f, "origin unavailable: {why}"),
            OriginProblem::Local(why) => f.write_str(why),
        }
    }
}

fn describe(ending: &Ending) -> String {
    match ending {
        Ending::Failed(e) => e.to_string(),
        other => format!("{other:?}"),
    }
}

/// Reads block `index` of `object` from its origin: the Range GET, its length checked.
pub async fn fetch_block(
    client: &ObjectClient,
    object: &ObjectIdentity,
    index: u64,
) -> Result<peerblock_core::bytes::Bytes, OriginProblem> {
    let Some((start, len)) = object.block_range(index) else {
        return Err(OriginProblem::Local(format!(
            "block {index} is past the object's {} blocks",
            object.blocks()
        )));
    };
    let target = object.url.target();
    let range = ObjectRange {
        target: &target,
        start,
        len,
        total: Some(object.size),
        validator: (!object.validator.is_empty()).then_some(object.validator.as_str()),
    };
    let fetched = client.range(&object.url, range).await;
    match fetched.ending.map_err(OriginProblem::Local)? {
        Ending::Range(RangeAnswer::Part { body, .. }) if body.len() as u64 == len => Ok(body),
        Ending::Range(RangeAnswer::Part { body, .. }) => Err(OriginProblem::Length {
            index,
            expected: len,
            got: body.len() as u64,
        }),
        other => Err(OriginProblem::of(&other)
            .unwrap_or_else(|| OriginProblem::Unavailable(describe(&other)))),
    }
}

/// The reader's `OriginFetch` for one object: its blocks by Range GET. The first problem
/// the origin showed is kept ([`ObjectOrigin::problem`]) for the command to report.
#[derive(Clone)]
pub struct ObjectOrigin {
    client: ObjectClient,
    object: Arc<ObjectIdentity>,
    problem: Arc<Mutex<Option<OriginProblem>>>,
    blocks: Arc<AtomicU64>,
}

impl ObjectOrigin {
    /// The origin of `object`, read through `client`.
    pub fn new(client: ObjectClient, object: Arc<ObjectIdentity>) -> ObjectOrigin {
        ObjectOrigin {
            client,
            object,
            problem: Arc::default(),
            blocks: Arc::default(),
        }
    }

    /// The first problem the origin showed, if any; a fatal one (the object changed,
    /// `Range` ignored, a wrong length) wins over an earlier non-fatal one.
    pub fn problem(&self) -> Option<OriginProblem> {
        self.problem
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Blocks the origin gave this reader.
    pub fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::Relaxed)
    }

    /// Body bytes the origin sent this reader.
    pub fn bytes(&self) -> u64 {
        self.client.bytes()
    }

    fn note(&self, problem: OriginProblem) {
        let mut p = self.problem.lock().unwrap_or_else(|e| e.into_inner());
        if p.as_ref()
            .is_none_or(|old| !old.is_fatal() && problem.is_fatal())
        {
            *p = Some(problem);
        }
    }
}

impl OriginFetch for ObjectOrigin {
    fn fetch(&self, block: &BlockSpec) -> OriginFuture {
        let this = self.clone();
        let index = block.path.index;
        Box::pin(async move {
            match fetch_block(&this.client, &this.object, index).await {
                Ok(bytes) => {
                    this.blocks.fetch_add(1, Ordering::Relaxed);
                    OriginOutcome::Found(bytes)
                }
                Err(problem) => {
                    tracing::debug!(index, %problem, "origin fetch");
                    let absent = problem == OriginProblem::Absent;
                    this.note(problem);
                    if absent {
                        OriginOutcome::NotFound
                    } else {
                        OriginOutcome::Failed
                    }
                }
            }
        })
    }
}
