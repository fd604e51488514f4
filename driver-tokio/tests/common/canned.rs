//! Small canned loopback servers for the client, reader and roster tests: a
//! `tokio::net::TcpListener` on 127.0.0.1:0 that reads request heads and answers each with
//! fixed bytes, or misbehaves on purpose. It counts accepts, open connections and the
//! most connections open at once, and keeps every request head it read.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the canned server does with one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Write these bytes and keep the connection for the next request.
    Bytes(Vec<u8>),
    /// Write these bytes, then close the connection.
    BytesThenClose(Vec<u8>),
    /// Write these bytes, then never write again (keep reading until the peer closes).
    BytesThenHold(Vec<u8>),
    /// Wait until at least `n` connections have been open at once, then write the bytes.
    AfterOpen(usize, Vec<u8>),
    /// Close the connection without a byte.
    Close,
}

/// Counters and logs of a canned server.
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections accepted.
    pub accepts: AtomicUsize,
    /// Connections open now.
    pub open: AtomicUsize,
    /// Most connections open at once.
    pub max_open: AtomicUsize,
    /// Every request head read, in order.
    pub heads: Mutex<Vec<String>>,
}

impl Stats {
    pub fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }
    pub fn max_open(&self) -> usize {
        self.max_open.load(Ordering::SeqCst)
    }
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// A running canned server.
pub struct Canned {
    /// Its `127.0.0.1:port`.
    pub addr: String,
    /// Its counters.
    pub stats: Arc<Stats>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Canned {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Handler = dyn Fn(usize, usize, &str) -> Reply + Send + Sync;

/// Starts a server answering request `r` (0-based, counted over the whole server) on
/// connection `c` (0-based accept order) with `handler(c, r, head)`.
pub async fn serve(
    handler: impl Fn(usize, usize, &str) -> Reply + Send + Sync + 'static,
) -> Canned {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stats = Arc::new(Stats::default());
    let handler: Arc<Handler> = Arc::new(handler);
    let requests = Arc::new(AtomicUsize::new(0));
    let (open_tx, _) = watch::channel(0usize);
    let open_tx = Arc::new(open_tx);
    let s = Arc::clone(&stats);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let c = s.accepts.fetch_add(1, Ordering::SeqCst);
            let open = s.open.fetch_add(1, Ordering::SeqCst) + 1;
            s.max_open.fetch_max(open, Ordering::SeqCst);
            open_tx.send_modify(|m| *m = (*m).max(open));
            let (s, h, r, o) = (
                Arc::clone(&s),
                Arc::clone(&handler),
                Arc::clone(&requests),
                Arc::clone(&open_tx),
            );
            tokio::spawn(async move {
                connection(stream, c, &s, &*h, &r, &o).await;
                s.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Canned { addr, stats, task }
}

async fn connection(
    mut stream: TcpStream,
    c: usize,
    stats: &Stats,
    handler: &Handler,
    requests: &AtomicUsize,
    open: &watch::Sender<usize>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        stats.heads.lock().unwrap().push(head.clone());
        let r = requests.fetch_add(1, Ordering::SeqCst);
        match handler(c, r, &head) {
            Reply::Bytes(b) => {
                if stream.write_all(&b).await.is_err() {
                    return;
                }
            }
            Reply::BytesThenClose(b) => {
                let _ = stream.write_all(&b).await;
                return;
            }
            Reply::BytesThenHold(b) => {
                let _ = stream.write_all(&b).await;
                while let Ok(n) = stream.read(&mut chunk).await {
                    if n == 0 {
                        return;
                    }
                }
                return;
            }
            Reply::AfterOpen(n, b) => {
                let mut rx = open.subscribe();
                let _ = rx.wait_for(|m| *m >= n).await;
                if stream.write_all(&b).await.is_err() {
                    return;
                }
            }
            Reply::Close => return,
        }
    }
}

/// A `200` with `body` and its `Content-Length`.
pub fn ok(body: &[u8]) -> Vec<u8> {
    let mut v = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    v.extend_from_slice(body);
    v
}

/// A `404` with an empty body.
pub fn not_found() -> Vec<u8> {
    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec()
}

/// A `503` refusal (`X-Peerblock-Refused: sessions`) with `Retry-After: secs`.
pub fn refusal(secs: u64) -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nX-Peerblock-Refused: sessions\r\nRetry-After: {secs}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
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

/// A loopback port nothing listens on: bound, then the listener dropped.
pub async fn closed_port() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    addr
}

/// A blackholed loopback address: a listener with backlog 0 that never accepts, its
/// accept queue filled first, so the kernel drops further SYNs. The returned guard keeps
/// the listener and the queued connections alive.
pub fn blackhole() -> (String, Vec<std::net::TcpStream>, tokio::net::TcpListener) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    // Fill the accept queue: connects complete until it is full, then one times out.
    for _ in 0..8 {
        match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)) {
            Ok(s) => queued.push(s),
            Err(_) => break,
        }
    }
    (addr.to_string(), queued, listener)
}

/// A block path `/peer/v1/block/<64 hex>/<index>` for tests.
pub fn block_path(key_byte: u8, index: u64) -> peerblock_core::wire::BlockPath {
    peerblock_core::wire::BlockPath {
        key: peerblock_core::wire::ChunkKey::from_array([key_byte; 32]),
        index,
    }
}
