//! `hyper-baseline SIZE ADDR [FILE]`: answers every request with SIZE bytes held in memory
//! (HTTP/1.1, keep-alive, Content-Length), on a multi-threaded tokio runtime. Prints
//! `listening ADDR` once bound. The baseline the node is compared against.
//!
//! The bytes are 0xa5 repeated, or the first SIZE bytes of FILE when it is given (read once
//! at start-up; FILE must hold at least SIZE bytes), so a benchmark can check that every
//! server it compares answers with the very same bytes.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let size: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .expect("usage: hyper-baseline SIZE ADDR [FILE]");
    let addr: SocketAddr = args
        .next()
        .and_then(|s| s.parse().ok())
        .expect("usage: hyper-baseline SIZE ADDR [FILE]");
    let block = match args.next() {
        Some(path) => {
            let mut bytes = std::fs::read(&path)?;
            if bytes.len() < size {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{path} holds {} bytes, fewer than SIZE {size}", bytes.len()),
                ));
            }
            bytes.truncate(size);
            Bytes::from(bytes)
        }
        None => Bytes::from(vec![0xa5u8; size]),
    };
    let listener = TcpListener::bind(addr).await?;
    println!("listening {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let block = block.clone();
        tokio::spawn(async move {
            let service = service_fn(move |_req: Request<hyper::body::Incoming>| {
                let block = block.clone();
                async move { Ok::<_, Infallible>(Response::new(Full::new(block))) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
