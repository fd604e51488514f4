//! `hyper-baseline SIZE ADDR`: answers every request with SIZE bytes held in memory
//! (HTTP/1.1, keep-alive, Content-Length), on a multi-threaded tokio runtime. Prints
//! `listening ADDR` once bound. The baseline the node is compared against.

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
        .expect("usage: hyper-baseline SIZE ADDR");
    let addr: SocketAddr = args
        .next()
        .and_then(|s| s.parse().ok())
        .expect("usage: hyper-baseline SIZE ADDR");
    let block = Bytes::from(vec![0xa5u8; size]);
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
