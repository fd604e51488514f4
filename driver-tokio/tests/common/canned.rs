//! A canned loopback server on the test's own tokio runtime: a `tokio::net::TcpListener`
//! on 127.0.0.1:0 that reads request heads and answers each with fixed bytes, keeping the
//! connection. What `auth.rs`'s outbound roster attacks answer from; every other driver
//! test uses the `std::net` canned peers of `peerblock_testkit::conformance::canned`
//! (closed, blackholed, silent, stalling, refusing, with counters and recorded heads).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the canned server does with one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Write these bytes and keep the connection for the next request.
    Bytes(Vec<u8>),
}

/// A running canned server; dropping it stops it.
pub struct Canned {
    /// Its `127.0.0.1:port`.
    pub addr: String,
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
    let handler: Arc<Handler> = Arc::new(handler);
    let requests = Arc::new(AtomicUsize::new(0));
    let task = tokio::spawn(async move {
        let mut accepts = 0;
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let c = accepts;
            accepts += 1;
            let (h, r) = (Arc::clone(&handler), Arc::clone(&requests));
            tokio::spawn(async move { connection(stream, c, &*h, &r).await });
        }
    });
    Canned { addr, task }
}

async fn connection(mut stream: TcpStream, c: usize, handler: &Handler, requests: &AtomicUsize) {
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
        let r = requests.fetch_add(1, Ordering::SeqCst);
        let Reply::Bytes(b) = handler(c, r, &head);
        if stream.write_all(&b).await.is_err() {
            return;
        }
    }
}
