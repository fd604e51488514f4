//! Misbehaving peers for the client tests, on plain `std::net` sockets and threads so that
//! every driver meets the same ones (no async runtime here).
//!
//! - [`serve`]: a canned server on `127.0.0.1:0` that reads request heads and answers
//!   each as its handler says ([`Reply`]: fixed bytes kept alive, then closed, then held
//!   silent, after enough connections are open, or a close without a byte). It counts
//!   accepts, open connections and the most open at once, and records every head
//!   ([`Stats`]).
//! - [`closed_port`]: an address nothing listens on; [`blackhole`]: one that never
//!   answers a SYN.
//! - Responses as bytes: [`ok`], [`not_found`], [`forbidden`], [`chunked`], [`refusal()`]
//!   (core's own encoders where core has one), [`stalled_body`], [`oversized_length`],
//!   [`oversized_chunked`].
//!
//! Loopback only, port 0 always. Every thread ends by itself: a canned server's threads
//! when its [`Canned`] guard drops (within [`POLL`]) or at the latest after [`LIFETIME`].

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use peerblock_core::bytes::BytesMut;
use peerblock_core::http::{OutgoingResponse, ResponseKind};
use peerblock_core::refusal::{self, Refusal, RefusalReason};
use peerblock_core::wire::{BlockPath, ChunkKey};

/// How often a canned connection that waits (for the peer, for other connections) looks
/// at its guard: its threads end at most this long after the guard drops.
pub const POLL: Duration = Duration::from_millis(50);

/// The longest any canned thread lives, guard or not: twice the conformance test bound,
/// so a leaked guard cannot keep a thread past its test.
pub const LIFETIME: Duration = Duration::from_secs(2 * super::TEST_BOUND.as_secs());

/// Largest request head a canned server reads before giving up on the connection.
const MAX_HEAD: usize = 64 * 1024;

/// What the canned server does with one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Write these bytes and keep the connection for the next request.
    Bytes(Vec<u8>),
    /// Write these bytes, then close the connection.
    BytesThenClose(Vec<u8>),
    /// Write these bytes, then never write again (keep reading until the peer closes).
    BytesThenHold(Vec<u8>),
    /// Wait until at least `n` connections have been open at once, then write the bytes
    /// and keep the connection.
    AfterOpen(usize, Vec<u8>),
    /// Close the connection without a byte.
    Close,
}

/// Counters and logs of a canned server.
#[derive(Debug, Default)]
pub struct Stats {
    accepts: AtomicUsize,
    open: AtomicUsize,
    max_open: AtomicUsize,
    heads: Mutex<Vec<String>>,
    /// Guards nothing; [`Stats::changed`] is notified under it on every accept, close and
    /// head.
    lock: Mutex<()>,
    changed: Condvar,
}

impl Stats {
    /// Connections accepted.
    pub fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Most connections open at once.
    pub fn max_open(&self) -> usize {
        self.max_open.load(Ordering::SeqCst)
    }

    /// Every request head read, in order.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Blocks until `condition` holds (checked now and on every accept, close and head);
    /// `false` if `timeout` passed first.
    pub fn wait_until(&self, mut condition: impl FnMut(&Stats) -> bool, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if condition(self) {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            guard = self
                .changed
                .wait_timeout(guard, left.min(POLL))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn notify(&self) {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.changed.notify_all();
    }
}

/// A running canned server; dropping it stops its threads.
pub struct Canned {
    /// Its `127.0.0.1:port`.
    pub addr: String,
    /// Its counters.
    pub stats: Arc<Stats>,
    socket: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Drop for Canned {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the acceptor sees the flag.
        let _ = TcpStream::connect_timeout(&self.socket, Duration::from_millis(200));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        self.stats.notify();
    }
}

type Handler = dyn Fn(usize, usize, &str) -> Reply + Send + Sync;

struct Shared {
    stats: Arc<Stats>,
    handler: Box<Handler>,
    requests: AtomicUsize,
    stop: Arc<AtomicBool>,
    born: Instant,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.born.elapsed() > LIFETIME
    }
}

/// Starts a server on `127.0.0.1:0` answering request `r` (0-based, counted over the
/// whole server) on connection `c` (0-based accept order) with `handler(c, r, head)`.
pub fn serve(handler: impl Fn(usize, usize, &str) -> Reply + Send + Sync + 'static) -> Canned {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind canned server");
    let socket = listener.local_addr().expect("canned server address");
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Shared {
        stats: Arc::clone(&stats),
        handler: Box::new(handler),
        requests: AtomicUsize::new(0),
        stop: Arc::clone(&stop),
        born: Instant::now(),
    });
    let acceptor = std::thread::Builder::new()
        .name("canned-accept".into())
        .spawn(move || accept_loop(listener, shared))
        .expect("spawn canned acceptor");
    Canned {
        addr: socket.to_string(),
        stats,
        socket,
        stop,
        acceptor: Some(acceptor),
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let accepted = listener.accept();
        if shared.stopping() {
            return;
        }
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let s = &shared.stats;
        let c = s.accepts.fetch_add(1, Ordering::SeqCst);
        let open = s.open.fetch_add(1, Ordering::SeqCst) + 1;
        s.max_open.fetch_max(open, Ordering::SeqCst);
        s.notify();
        let shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("canned-conn".into())
            .spawn(move || {
                connection(stream, c, &shared);
                shared.stats.open.fetch_sub(1, Ordering::SeqCst);
                shared.stats.notify();
            });
        if spawned.is_err() {
            return;
        }
    }
}

/// Reads into `chunk`, waking every [`POLL`] to look at the guard: `None` when the peer
/// closed, the read failed or the server is stopping.
fn read_some(stream: &mut TcpStream, chunk: &mut [u8], shared: &Shared) -> Option<usize> {
    loop {
        if shared.stopping() {
            return None;
        }
        match stream.read(chunk) {
            Ok(0) => return None,
            Ok(n) => return Some(n),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

fn connection(mut stream: TcpStream, c: usize, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(POLL));
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > MAX_HEAD {
                return;
            }
            let Some(n) = read_some(&mut stream, &mut chunk, shared) else {
                return;
            };
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        shared
            .stats
            .heads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(head.clone());
        shared.stats.notify();
        let r = shared.requests.fetch_add(1, Ordering::SeqCst);
        match (shared.handler)(c, r, &head) {
            Reply::Bytes(b) => {
                if stream.write_all(&b).is_err() {
                    return;
                }
            }
            Reply::BytesThenClose(b) => {
                let _ = stream.write_all(&b);
                let _ = stream.shutdown(Shutdown::Write);
                return;
            }
            Reply::BytesThenHold(b) => {
                let _ = stream.write_all(&b);
                while read_some(&mut stream, &mut chunk, shared).is_some() {}
                return;
            }
            Reply::AfterOpen(n, b) => {
                let stats = &shared.stats;
                let mut reached = false;
                while !reached && !shared.stopping() {
                    reached = stats.wait_until(|s| s.max_open() >= n, POLL);
                }
                if !reached || stream.write_all(&b).is_err() {
                    return;
                }
            }
            Reply::Close => return,
        }
    }
}

/// A `200` with `body`, its head as core's server encodes a block response.
pub fn ok(body: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    OutgoingResponse::new(
        ResponseKind::Block {
            content_length: body.len() as u64,
        },
        None,
    )
    .encode(&mut out)
    .expect("a block head encodes");
    let mut v = out.to_vec();
    v.extend_from_slice(body);
    v
}

/// A `404` as core's server encodes it.
pub fn not_found() -> Vec<u8> {
    let mut out = BytesMut::new();
    let response = OutgoingResponse::new(ResponseKind::NotFound, None);
    response.encode(&mut out).expect("a 404 encodes");
    out.extend_from_slice(response.kind.error_body());
    out.to_vec()
}

/// A `403 Forbidden` with an empty body (an origin refusing a credential; core's server
/// never sends one, so it is written here).
pub fn forbidden() -> Vec<u8> {
    b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n".to_vec()
}

/// A `503` refusal for `sessions` with `Retry-After: secs`, exactly as core encodes it
/// (`refusal::encode`: the refusal header, `Retry-After`, `Connection: close`).
pub fn refusal(secs: u64) -> Vec<u8> {
    let mut out = BytesMut::new();
    refusal::encode(
        &Refusal {
            reason: RefusalReason::Sessions,
            retry_after: Duration::from_secs(secs),
        },
        None,
        None,
        &mut out,
    );
    out.to_vec()
}

/// A `200` whose body is sent chunked, in chunks of at most `size` bytes.
pub fn chunked(body: &[u8], size: usize) -> Vec<u8> {
    let mut v = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for c in body.chunks(size) {
        v.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        v.extend_from_slice(c);
        v.extend_from_slice(b"\r\n");
    }
    v.extend_from_slice(b"0\r\n\r\n");
    v
}

/// The start of a `200` declaring `declared` body bytes of which only `sent` follow
/// (serve it with [`Reply::BytesThenHold`]: the body stalls midway).
pub fn stalled_body(declared: usize, sent: usize) -> Vec<u8> {
    let mut v = format!("HTTP/1.1 200 OK\r\nContent-Length: {declared}\r\n\r\n").into_bytes();
    v.extend(std::iter::repeat_n(7u8, sent));
    v
}

/// The start of a `200` whose `Content-Length` (`declared`) is above what the client
/// expects, with `sent` body bytes (serve it with [`Reply::BytesThenHold`]).
pub fn oversized_length(declared: usize, sent: usize) -> Vec<u8> {
    let mut v = format!("HTTP/1.1 200 OK\r\nContent-Length: {declared}\r\n\r\n").into_bytes();
    v.extend(std::iter::repeat_n(1u8, sent));
    v
}

/// The start of a chunked `200` whose first chunk is `n` bytes long, all of them sent
/// and nothing after (serve it with [`Reply::BytesThenHold`]): for a client expecting
/// `n - 1` bytes, exactly expected + 1 bytes then a stall.
pub fn oversized_chunked(n: usize) -> Vec<u8> {
    let mut v =
        format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{n:x}\r\n").into_bytes();
    v.extend(std::iter::repeat_n(1u8, n));
    v
}

/// A loopback port nothing listens on: bound, then the listener dropped.
pub fn closed_port() -> String {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let addr = l.local_addr().expect("address").to_string();
    drop(l);
    addr
}

/// A blackholed loopback address: a listener with backlog 0 that never accepts, its
/// accept queue filled first, so the kernel drops further SYNs. Keep it alive while it
/// is used.
pub struct Blackhole {
    /// Its `127.0.0.1:port`.
    pub addr: String,
    _listener: socket2::Socket,
    _queued: Vec<TcpStream>,
}

/// A [`Blackhole`].
pub fn blackhole() -> Blackhole {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let local: SocketAddr = (Ipv4Addr::LOCALHOST, 0).into();
    socket.bind(&local.into()).expect("bind");
    socket.listen(0).expect("listen");
    let addr = socket
        .local_addr()
        .expect("address")
        .as_socket()
        .expect("an inet address");
    let mut queued = Vec::new();
    // Fill the accept queue: connects complete until it is full, then one times out.
    for _ in 0..8 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(s) => queued.push(s),
            Err(_) => break,
        }
    }
    Blackhole {
        addr: addr.to_string(),
        _listener: socket,
        _queued: queued,
    }
}

/// A block path `/peer/v1/block/<64 hex>/<index>` whose key is `key_byte` repeated.
pub fn block_path(key_byte: u8, index: u64) -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([key_byte; 32]),
        index,
    }
}

/// A canned roster answer for roster-service tests: `n` members each signed by its own key
/// (seeds derived from `seed_byte` and the member's index, so every run signs the same),
/// every 100th signing another address than it claims (its signature does not verify),
/// as the full `200` response with the first good member as `X-DART-Node`. Also returns
/// the ids of the good members.
pub fn signed_roster_answer(n: u32, seed_byte: u8) -> (Vec<u8>, Vec<String>) {
    use peerblock_core::roster::{Attestation, NodeKey, Roster, RosterMember};
    let mut good = Vec::new();
    let members = (0..n)
        .map(|i| {
            let mut seed = [seed_byte; 32];
            seed[..4].copy_from_slice(&i.to_be_bytes());
            let k = NodeKey::from_seed(&seed);
            let addr = format!("m{i}.test:7070");
            let signed = if i % 100 == 99 {
                "elsewhere.test:7070".to_string()
            } else {
                good.push(k.id().to_owned());
                addr.clone()
            };
            RosterMember {
                record: Attestation::Signed(k.sign(&signed, 1.0, 1).expect("a valid weight")),
                ..RosterMember::new(k.id(), addr, 1.0)
            }
        })
        .collect();
    let body = Roster {
        epoch: 0,
        epoch_sig: None,
        members,
    }
    .to_json();
    let responder = good.first().cloned().unwrap_or_default();
    let mut reply = format!(
        "HTTP/1.1 200 OK\r\nX-DART-Node: {responder}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    reply.extend_from_slice(&body);
    (reply, good)
}
