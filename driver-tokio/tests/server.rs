//! The tokio server over real loopback sockets: a raw `TcpStream` client writes request
//! bytes and decodes the responses with core's `ResponseDecoder`.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use peerblock_core::bytes::Bytes;
use peerblock_core::http::{BodyLimit, ResponseDecoder, ResponseEvent, ResponseHead};
use peerblock_core::roster::{Membership, RosterMember};
use peerblock_core::server::{AdmissionConfig, ServerConfig};
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey, ROSTER_PATH};
use peerblock_tokio::server::{Server, ServerHandle, ServerOptions, MAX_REFUSAL_TASKS};
use peerblock_tokio::source::{BlockSource, FileStore, MemoryBehaviour, MemoryStore};
use peerblock_tokio::SharedMembership;
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

    /// Waits for the server to close the connection: true on a clean end of stream.
    async fn closed_by_server(&mut self) -> bool {
        let mut buf = [0u8; 64];
        matches!(self.stream.read(&mut buf).await, Ok(0))
    }

    async fn get(&mut self, p: &BlockPath) -> Response {
        self.send(get(p).as_bytes()).await;
        self.response().await
    }
}

/// Waits until the node holds `n` sessions (woken by every admission and close, within
/// the test bound).
async fn sessions_become(handle: &ServerHandle, n: usize) {
    handle.wait_until(|h| h.sessions() == n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_from_memory_store_is_byte_exact() {
    bounded(async {
        let (handle, store) = node(|_| {}).await;
        let p = path(1, 0);
        let block = block_for(&p, 256 * 1024 + 7);
        store.insert(p, block.clone());
        let mut c = Client::connect(handle.local_addr()).await;
        let r = c.get(&p).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.body, block);
        assert_eq!(r.head.node(), Some(&b"srv"[..]));
        // The same connection serves again (keep-alive).
        let r = c.get(&p).await;
        assert_eq!(r.body, block);
        let metrics = handle.metrics().render();
        assert!(
            metrics.contains("peerblock_requests_total{status=\"200\"} 2"),
            "{metrics}"
        );
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// A unique scratch directory under the system temp dir, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "peerblock-srv-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_from_file_store_is_byte_exact() {
    bounded(async {
        let dir = TempDir::new("roundtrip");
        let store = FileStore::new(&dir.0, 4 * 1024 * 1024);
        let blocks: Vec<(BlockPath, Bytes)> = (0..3)
            .map(|i| {
                let p = path(0xab, i);
                (p, block_for(&p, 100_000 + i as usize))
            })
            .collect();
        for (p, b) in &blocks {
            peerblock_tokio::source::put(&store, *p, b.clone())
                .await
                .expect("put");
        }
        // The documented layout: <store>/<chunk-hex>/<index>.
        let file = dir.0.join("ab".repeat(32)).join("2");
        assert_eq!(std::fs::read(&file).expect("block file"), blocks[2].1);
        let handle = start(options(Arc::new(store))).await;
        let mut c = Client::connect(handle.local_addr()).await;
        for (p, b) in &blocks {
            let r = c.get(p).await;
            assert_eq!(r.status(), 200);
            assert_eq!(&r.body, b);
        }
        assert_eq!(c.get(&path(0xab, 9)).await.status(), 404);
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_not_held_is_404() {
    bounded(async {
        let (handle, store) = node(|_| {}).await;
        let mut c = Client::connect(handle.local_addr()).await;
        let r = c.get(&path(2, 5)).await;
        assert_eq!(r.status(), 404);
        assert_eq!(store.fetches(), 1);
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_block_path_is_400() {
    bounded(async {
        let (handle, store) = node(|_| {}).await;
        let mut c = Client::connect(handle.local_addr()).await;
        c.send(b"GET /peer/v1/block/zz/0 HTTP/1.1\r\nHost: test\r\n\r\n")
            .await;
        assert_eq!(c.response().await.status(), 400);
        assert_eq!(store.fetches(), 0);
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_other_than_get_is_405() {
    bounded(async {
        let (handle, store) = node(|_| {}).await;
        let mut c = Client::connect(handle.local_addr()).await;
        let req = format!(
            "POST {} HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n",
            path(3, 0)
        );
        c.send(req.as_bytes()).await;
        let r = c.response().await;
        assert_eq!(r.status(), 405);
        assert_eq!(store.fetches(), 0);
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_hop_is_400_and_the_source_is_never_invoked() {
    bounded(async {
        let (handle, store) = node(|_| {}).await;
        let p = path(4, 0);
        store.insert(p, block_for(&p, 100));
        let mut c = Client::connect(handle.local_addr()).await;
        let req = format!("GET {p} HTTP/1.1\r\nHost: test\r\nX-DART-Hop: abc\r\n\r\n");
        c.send(req.as_bytes()).await;
        assert_eq!(c.response().await.status(), 400);
        assert_eq!(store.fetches(), 0, "the source must not be asked");
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_failure_is_500() {
    bounded(async {
        let (handle, store) = node(|_| {}).await;
        let p = path(5, 0);
        store.insert(p, block_for(&p, 100));
        store.set_behaviour(MemoryBehaviour::Fail);
        let mut c = Client::connect(handle.local_addr()).await;
        assert_eq!(c.get(&p).await.status(), 500);
        // The connection stays usable.
        store.set_behaviour(MemoryBehaviour::Serve);
        assert_eq!(c.get(&p).await.status(), 200);
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_then_half_close_get_every_response_in_order() {
    bounded(async {
        let (handle, store) = node(|_| {}).await;
        let paths = [path(7, 0), path(7, 1), path(7, 2)];
        for (i, p) in paths.iter().enumerate() {
            store.insert(*p, block_for(p, 50_000 + 1000 * i));
        }
        let mut c = Client::connect(handle.local_addr()).await;
        let all: String = paths.iter().map(get).collect();
        c.send(all.as_bytes()).await;
        c.stream.shutdown().await.expect("half-close");
        for p in &paths {
            let r = c.response().await;
            assert_eq!(r.status(), 200);
            assert_eq!(r.body, block_for(p, r.body.len()), "response for {p}");
            assert_eq!(r.body.len(), 50_000 + 1000 * p.index as usize);
        }
        assert!(c.closed_by_server().await);
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_clients_all_get_exact_bytes() {
    bounded(async {
        const CLIENTS: usize = 64;
        const REQUESTS: usize = 20;
        let (handle, store) = node(|o| {
            o.admission = AdmissionConfig {
                max_sessions: 128,
                max_sessions_per_source: CLIENTS,
                ..AdmissionConfig::default()
            }
        })
        .await;
        let mut paths = Vec::new();
        for chunk in 0..8u8 {
            for index in 0..8u64 {
                let p = path(100 + chunk, index);
                store.insert(p, block_for(&p, 1024 + 4099 * (index as usize)));
                paths.push(p);
            }
        }
        let paths = Arc::new(paths);
        let addr = handle.local_addr();
        let started = std::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for client in 0..CLIENTS {
            let paths = Arc::clone(&paths);
            tasks.spawn(async move {
                let mut c = Client::connect(addr).await;
                for i in 0..REQUESTS {
                    let p = paths[(client * 7 + i * 13) % paths.len()];
                    let r = c.get(&p).await;
                    assert_eq!(r.status(), 200, "client {client} request {i}");
                    assert_eq!(r.body.len(), 1024 + 4099 * p.index as usize);
                    assert_eq!(r.body, block_for(&p, r.body.len()));
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("client task");
        }
        println!(
            "{CLIENTS} clients x {REQUESTS} requests answered byte-exact in {:?}",
            started.elapsed()
        );
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Opens `n` admitted connections, each proven admitted by one served request.
async fn admitted(addr: SocketAddr, from: &[Ipv4Addr], p: &BlockPath) -> Vec<Client> {
    let mut clients = Vec::new();
    for ip in from {
        let mut c = Client::connect_from(*ip, addr).await;
        assert_eq!(c.get(p).await.status(), 200);
        clients.push(c);
    }
    clients
}

/// Connects from `from`, sends one request and returns the response and its latency
/// (from the start of the connect to the complete response).
async fn refused(from: Ipv4Addr, addr: SocketAddr, p: &BlockPath) -> (Response, Duration) {
    let started = std::time::Instant::now();
    let mut c = Client::connect_from(from, addr).await;
    let r = c.get(p).await;
    (r, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_node_refuses_the_third_connection_with_503_and_retry_after() {
    bounded(async {
        let (handle, store) = node(|o| {
            o.admission = AdmissionConfig {
                max_sessions: 2,
                max_sessions_per_source: 2,
                ..AdmissionConfig::default()
            }
        })
        .await;
        let p = path(8, 0);
        store.insert(p, block_for(&p, 4096));
        let addr = handle.local_addr();
        let mut kept = admitted(addr, &[Ipv4Addr::LOCALHOST; 2], &p).await;
        let (r, latency) = refused(Ipv4Addr::LOCALHOST, addr, &p).await;
        println!("refusal latency (connect to complete 503): {latency:?}");
        assert_eq!(r.status(), 503);
        assert_eq!(r.head.refused(), Some(&b"sessions"[..]));
        assert!(r.head.retry_after().is_some(), "Retry-After present");
        assert!(latency < Duration::from_secs(2), "{latency:?}");
        for c in &mut kept {
            let r = c.get(&p).await;
            assert_eq!(r.status(), 200);
            assert_eq!(r.body, block_for(&p, 4096));
        }
        let metrics = handle.metrics().render();
        assert!(
            metrics.contains("peerblock_connections_refused_total{reason=\"sessions\"} 1"),
            "{metrics}"
        );
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_at_its_quota_is_refused_while_another_source_is_admitted() {
    bounded(async {
        let (handle, store) = node(|o| {
            o.admission = AdmissionConfig {
                max_sessions_per_source: 1,
                ..AdmissionConfig::default()
            }
        })
        .await;
        let p = path(9, 0);
        store.insert(p, block_for(&p, 4096));
        let addr = handle.local_addr();
        let other = Ipv4Addr::new(127, 0, 0, 2);
        let mut kept = admitted(addr, &[Ipv4Addr::LOCALHOST, other], &p).await;
        let (r, latency) = refused(Ipv4Addr::LOCALHOST, addr, &p).await;
        println!("per-source refusal latency (connect to complete 503): {latency:?}");
        assert_eq!(r.status(), 503);
        assert_eq!(r.head.refused(), Some(&b"source-sessions"[..]));
        assert!(r.head.retry_after().is_some());
        assert!(latency < Duration::from_secs(2), "{latency:?}");
        for c in &mut kept {
            assert_eq!(c.get(&p).await.status(), 200);
        }
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_beyond_the_refusal_task_bound_are_closed_at_once() {
    bounded(async {
        let (handle, store) = node(|o| {
            o.admission = AdmissionConfig {
                max_sessions: 1,
                max_sessions_per_source: 1,
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
        for _ in 0..MAX_REFUSAL_TASKS {
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
            .wait_until(|h| refused_total(h) >= MAX_REFUSAL_TASKS)
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
        assert_eq!(refused_total(&handle), MAX_REFUSAL_TASKS + 1);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_released_when_clients_reset() {
    bounded(async {
        let (handle, store) = node(|o| {
            o.admission = AdmissionConfig {
                max_sessions: 2,
                max_sessions_per_source: 2,
                ..AdmissionConfig::default()
            }
        })
        .await;
        let p = path(10, 0);
        store.insert(p, block_for(&p, 1000));
        let addr = handle.local_addr();
        for _round in 0..2 {
            let mut doomed = Vec::new();
            for _ in 0..2 {
                let mut c = Client::connect(addr).await;
                // Half a request head, then a reset.
                c.send(b"GET /peer/v1/blo").await;
                doomed.push(c);
            }
            sessions_become(&handle, 2).await;
            for c in doomed {
                socket2::SockRef::from(&c.stream)
                    .set_linger(Some(Duration::ZERO))
                    .expect("SO_LINGER 0");
                drop(c); // RST
            }
            sessions_become(&handle, 0).await;
        }
        // Both slots are free again: two new connections are served.
        let mut fresh = admitted(addr, &[Ipv4Addr::LOCALHOST; 2], &p).await;
        for c in &mut fresh {
            assert_eq!(c.get(&p).await.status(), 200);
        }
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    bounded(async {
        let (handle, store) =
            node(|o| with_config(o, |c| c.idle_timeout = Duration::from_millis(200))).await;
        let p = path(11, 0);
        store.insert(p, block_for(&p, 10));
        let mut c = Client::connect(handle.local_addr()).await;
        assert_eq!(c.get(&p).await.status(), 200);
        let started = std::time::Instant::now();
        assert!(c.closed_by_server().await, "closed with a clean FIN");
        let took = started.elapsed();
        println!("idle connection closed {took:?} after its last response (idle_timeout 200 ms)");
        assert!(took >= Duration::from_millis(150), "{took:?}");
        sessions_become(&handle, 0).await;
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_an_inflight_response_then_refuses_connects() {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_connections_still_busy_after_the_grace_period() {
    bounded(async {
        let (handle, store) = node(|_| {}).await;
        let p = path(14, 0);
        store.insert(p, block_for(&p, 8 * 1024 * 1024));
        let metrics = handle.metrics().clone();
        // A reader that never reads an 8 MiB response: it cannot finish within the grace.
        let socket = TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        let mut c =
            Client::from_stream(socket.connect(handle.local_addr()).await.expect("connect"));
        c.send(get(&p).as_bytes()).await;
        store.wait_fetches(1).await;
        let started = std::time::Instant::now();
        handle.shutdown(Duration::from_millis(200)).await;
        let took = started.elapsed();
        println!("shutdown with a 200 ms grace and a stuck reader took {took:?}");
        assert!(took >= Duration::from_millis(150), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        let text = metrics.render();
        assert!(text.contains("peerblock_sessions_open 0"), "{text}");
        assert!(text.contains("peerblock_inflight_bytes 0"), "{text}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roster_request_is_answered_from_the_membership_and_its_caller_is_learned() {
    bounded(async {
        let me = RosterMember {
            id: "srv".into(),
            addr: "srv.test:7070".into(),
            weight: 1.0,
            record: Default::default(),
        };
        let membership: SharedMembership = Arc::new(Mutex::new(
            Membership::new(me, 7, 16).expect("membership"),
        ));
        let table = Arc::clone(&membership);
        let (handle, _store) = node(move |o| o.membership = Some(table)).await;
        let mut c = Client::connect(handle.local_addr()).await;
        let req = format!(
            "GET {ROSTER_PATH} HTTP/1.1\r\nHost: test\r\nX-DART-Node: peer-9\r\nX-DART-Peer-Addr: peer-9.test:7070\r\n\r\n"
        );
        c.send(req.as_bytes()).await;
        let r = c.response().await;
        assert_eq!(r.status(), 200);
        {
            let table = membership.lock().unwrap();
        assert_eq!(table.addr("peer-9"), Some("peer-9.test:7070"), "caller learned");
        assert_eq!(&r.body[..], &table.snapshot().to_json()[..]);
        }
        let text = String::from_utf8(r.body.to_vec()).unwrap();
        assert!(text.contains("peer-9") && text.contains("\"7\""), "{text}");
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_membership_the_roster_is_this_node_alone() {
    bounded(async {
        let (handle, _store) = node(|_| {}).await;
        let mut c = Client::connect(handle.local_addr()).await;
        let req = format!(
            "GET {ROSTER_PATH} HTTP/1.1\r\nHost: test\r\nX-DART-Node: peer-9\r\nX-DART-Peer-Addr: peer-9.test:7070\r\n\r\n"
        );
        c.send(req.as_bytes()).await;
        let r = c.response().await;
        assert_eq!(r.status(), 200);
        let text = String::from_utf8(r.body.to_vec()).expect("JSON text");
        assert_eq!(text.matches("\"id\"").count(), 1, "one member: {text}");
        assert!(text.contains("\"srv\"") && text.contains("srv.test:7070"), "{text}");
        assert!(!text.contains("peer-9"), "nothing learned: {text}");
        handle.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

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
