//! The tokio server over real loopback sockets: a raw `TcpStream` client writes request
//! bytes and decodes the responses with core's `ResponseDecoder`.
//!
//! Only what the driver conformance suite (`peerblock_testkit::conformance`, run on this
//! driver by `conformance.rs`) does not check: behaviours that need a `MemoryStore`
//! (a delayed or counted source), the tokio server's refusal-task bound, and interop with
//! curl. Everything else the server does is a conformance rule.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use peerblock_core::bytes::Bytes;
use peerblock_core::http::{BodyLimit, ResponseDecoder, ResponseEvent, ResponseHead};
use peerblock_core::server::{AdmissionConfig, ServerConfig};
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};
use peerblock_tokio::server::{Server, ServerHandle, ServerOptions};
use peerblock_tokio::source::{BlockSource, MemoryBehaviour, MemoryStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Every test body is bounded by this.
const TEST_BOUND: Duration = Duration::from_secs(30);

async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_BOUND, body)
        .await
        .expect("test exceeded its time bound");
}

fn loopback() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)
}

fn path(chunk: u8, index: u64) -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([chunk; 32]),
        index,
    }
}

/// A block whose bytes depend on its path, so a mix-up shows.
fn block_for(p: &BlockPath, len: usize) -> Bytes {
    let seed = p.key.as_bytes()[0] as u64 * 1_000_003 + p.index;
    Bytes::from(
        (0..len)
            .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
            .collect::<Vec<u8>>(),
    )
}

fn get(p: &BlockPath) -> String {
    format!("GET {p} HTTP/1.1\r\nHost: test\r\n\r\n")
}

/// Options for a test node serving `source`.
fn options(source: Arc<dyn BlockSource>) -> ServerOptions {
    let config = Arc::new(ServerConfig::new("srv", "srv.test:7070"));
    ServerOptions::new(config, source, Clock::new(std::time::Instant::now()))
}

async fn start(options: ServerOptions) -> ServerHandle {
    Server::bind(loopback(), options)
        .await
        .expect("bind")
        .spawn()
}

/// A node over a fresh memory store, with `tweak` applied to its options.
async fn node(tweak: impl FnOnce(&mut ServerOptions)) -> (ServerHandle, MemoryStore) {
    let store = MemoryStore::new();
    let mut o = options(Arc::new(store.clone()));
    tweak(&mut o);
    (start(o).await, store)
}

fn with_config(o: &mut ServerOptions, edit: impl FnOnce(&mut ServerConfig)) {
    let mut c = (*o.config).clone();
    edit(&mut c);
    o.config = Arc::new(c);
}

struct Response {
    head: ResponseHead,
    body: Bytes,
}

impl Response {
    fn status(&self) -> u16 {
        self.head.status()
    }
}

/// A raw HTTP/1.1 client on one connection.
struct Client {
    stream: TcpStream,
    decoder: ResponseDecoder,
    expecting: bool,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        Client::from_stream(TcpStream::connect(addr).await.expect("connect"))
    }

    /// Connects from the loopback address `from` (another source for admission).
    async fn connect_from(from: Ipv4Addr, addr: SocketAddr) -> Client {
        let socket = TcpSocket::new_v4().expect("socket");
        socket
            .bind(SocketAddr::new(IpAddr::V4(from), 0))
            .expect("bind client");
        Client::from_stream(socket.connect(addr).await.expect("connect"))
    }

    fn from_stream(stream: TcpStream) -> Client {
        Client {
            stream,
            decoder: ResponseDecoder::new(),
            expecting: false,
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write request");
    }

    /// The next complete response.
    async fn response(&mut self) -> Response {
        if !self.expecting {
            self.decoder
                .expect(BodyLimit::AtMost(64 * 1024 * 1024))
                .expect("decoder idle");
            self.expecting = true;
        }
        let mut head = None;
        loop {
            match self.decoder.poll().expect("a well-formed response") {
                Some(ResponseEvent::Head(h)) => head = Some(h),
                Some(ResponseEvent::Body(body)) => {
                    self.expecting = false;
                    return Response {
                        head: head.expect("head before body"),
                        body,
                    };
                }
                None => {
                    let buf = self.decoder.read_buf();
                    let n = self.stream.read(buf).await.expect("read response");
                    if n == 0 {
                        self.decoder.handle_eof();
                    } else {
                        self.decoder.advance(n);
                    }
                }
            }
        }
    }

    async fn get(&mut self, p: &BlockPath) -> Response {
        self.send(get(p).as_bytes()).await;
        self.response().await
    }
}

/// A miss asks the source exactly once (the conformance rule `a_block_not_held_is_404`
/// only asks that the store was asked at least once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_asks_the_source_exactly_once_and_is_404() {
    bounded(async {
        let (handle, store) = node(|_| {}).await;
        let mut c = Client::connect(handle.local_addr()).await;
        let r = c.get(&path(2, 5)).await;
        assert_eq!(r.status(), 404);
        assert_eq!(store.fetches(), 1, "the source was asked exactly once");
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// A source slower than `source_timeout` (a delayed `MemoryStore`) is answered 500 at the
/// timeout (no conformance rule: the suite's nodes serve a file store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_slower_than_source_timeout_is_500() {
    bounded(async {
        let (handle, store) =
            node(|o| with_config(o, |c| c.source_timeout = Duration::from_millis(100))).await;
        let p = path(6, 0);
        store.insert(p, block_for(&p, 100));
        store.set_behaviour(MemoryBehaviour::Delay(Duration::from_secs(20)));
        let mut c = Client::connect(handle.local_addr()).await;
        let started = std::time::Instant::now();
        let r = c.get(&p).await;
        let took = started.elapsed();
        println!("source timeout answered 500 after {took:?} (source_timeout 100 ms)");
        assert_eq!(r.status(), 500);
        assert!(took < Duration::from_secs(5), "{took:?}");
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Opens one admitted connection per address of `from`, each proven admitted by one
/// served request.
async fn admitted(addr: SocketAddr, from: &[Ipv4Addr], p: &BlockPath) -> Vec<Client> {
    let mut clients = Vec::new();
    for ip in from {
        let mut c = Client::connect_from(*ip, addr).await;
        assert_eq!(c.get(p).await.status(), 200);
        clients.push(c);
    }
    clients
}

/// Core's bound on refusals answered at once (`AdmissionConfig::max_refusals`, here 8):
/// the tokio server closes a refused connection over it without an answer, and a freed
/// refusal slot answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_beyond_the_refusal_bound_are_closed_at_once() {
    const MAX_REFUSALS: usize = 8;
    bounded(async {
        let (handle, store) = node(|o| {
            o.admission = AdmissionConfig {
                max_sessions: 1,
                max_sessions_per_source: 1,
                max_refusals: MAX_REFUSALS,
                ..AdmissionConfig::default()
            };
            with_config(o, |c| c.refusal_head_timeout = Duration::from_secs(20));
        })
        .await;
        let p = path(15, 0);
        store.insert(p, block_for(&p, 100));
        let addr = handle.local_addr();
        let mut kept = admitted(addr, &[Ipv4Addr::LOCALHOST], &p).await;
        // Refused diallers that send nothing hold every refusal task (their head wait is
        // 20 s).
        let mut silent = Vec::new();
        for _ in 0..MAX_REFUSALS {
            silent.push(Client::connect(addr).await);
        }
        let refused_total = |h: &ServerHandle| {
            let text = h.metrics().render();
            let key = "peerblock_connections_refused_total{reason=\"sessions\"} ";
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map_or(0, |n| n.parse::<usize>().unwrap())
        };
        handle
            .wait_until(|h| refused_total(h) >= MAX_REFUSALS)
            .await;
        // One more is closed without an answer, long before any head wait could end.
        let started = std::time::Instant::now();
        let mut extra = Client::connect(addr).await;
        let _ = extra.stream.write_all(get(&p).as_bytes()).await;
        let mut buf = [0u8; 512];
        let read = extra.stream.read(&mut buf).await;
        let took = started.elapsed();
        println!("refusal over the task bound closed after {took:?}: {read:?}");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "no answer over the bound: {read:?}"
        );
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert_eq!(refused_total(&handle), MAX_REFUSALS + 1);
        // A refusal task frees its permit when its connection ends: a silent dialler that
        // leaves makes room, and the next refused connection is answered with the 503.
        drop(silent.pop());
        let mut answered = None;
        for _ in 0..100 {
            let mut c = Client::connect(addr).await;
            c.send(get(&p).as_bytes()).await;
            let mut buf = [0u8; 512];
            if let Ok(n) = c.stream.read(&mut buf).await {
                if n > 0 {
                    answered = Some(String::from_utf8_lossy(&buf[..n]).into_owned());
                    break;
                }
            }
        }
        let answered = answered.expect("a freed refusal task answers again");
        assert!(answered.starts_with("HTTP/1.1 503"), "{answered}");
        assert_eq!(kept[0].get(&p).await.status(), 200);
        drop(silent);
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Shutdown asked while a request's source is still fetching (a `MemoryStore` delayed
/// 300 ms, so not a byte of the response is written yet) lets that response finish
/// byte-exact, then the listener is closed. The conformance rule
/// `graceful_shutdown_finishes_an_inflight_response_then_refuses_connects` shuts down
/// only once the response has started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_a_response_whose_source_is_still_fetching() {
    bounded(async {
        let (handle, store) = node(|_| {}).await;
        let p = path(12, 0);
        let block = block_for(&p, 1024 * 1024);
        store.insert(p, block.clone());
        let addr = handle.local_addr();
        // The response is still to come when shutdown is asked: the source answers late,
        // and the reader (a small receive buffer) takes the body slowly after that.
        store.set_behaviour(MemoryBehaviour::Delay(Duration::from_millis(300)));
        let socket = TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        let mut c = Client::from_stream(socket.connect(addr).await.expect("connect"));
        c.send(get(&p).as_bytes()).await;
        store.wait_fetches(1).await;
        let stopping = tokio::spawn(handle.shutdown(Duration::from_secs(10)));
        let r = c.response().await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.body.len(), block.len());
        assert_eq!(r.body, block);
        stopping.await.expect("shutdown resolved");
        let refused = TcpStream::connect(addr).await;
        assert!(refused.is_err(), "the listener is closed: {refused:?}");
    })
    .await;
}

/// Interop: curl fetches a block byte-exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_fetches_a_block_byte_exact() {
    bounded(async {
        let curl = std::process::Command::new("curl").arg("--version").output();
        if !curl.is_ok_and(|o| o.status.success()) {
            println!("skipped: curl is not on PATH");
            return;
        }
        let (handle, store) = node(|_| {}).await;
        let p = path(13, 4);
        let block = block_for(&p, 300_001);
        store.insert(p, block.clone());
        let url = format!("http://{}{p}", handle.local_addr());
        let out = tokio::process::Command::new("curl")
            .args(["-s", "--max-time", "10", &url])
            .output()
            .await
            .expect("run curl");
        assert!(out.status.success(), "curl failed: {out:?}");
        assert_eq!(out.stdout.len(), block.len());
        assert_eq!(&out.stdout[..], &block[..]);
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}
