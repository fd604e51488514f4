//! The tokio driver's object-origin client (`origin::ObjectClient`) against canned
//! loopback origins: idle connections reused, a retired one retried on a fresh dial, the
//! identity probe of an empty object. Every wait bounded by the exchange's deadlines.

use peerblock_common::object::ObjectUrl;
use peerblock_core::client::{ClientConfig, Ending, ObjectRange, RangeAnswer};
use peerblock_core::time::Clock;
use peerblock_tokio::origin::{probe, ObjectClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Reads one request head from `s`; `None` at end of stream.
async fn head(s: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => buf.push(byte[0]),
        }
    }
    Some(String::from_utf8_lossy(&buf).into_owned())
}

fn partial(first: u64, body: &[u8], total: u64) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {first}-{}/{total}\r\nETag: \"v\"\r\nContent-Length: {}\r\n\r\n",
        first + body.len() as u64 - 1,
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

fn client() -> ObjectClient {
    ObjectClient::new(
        ClientConfig::default(),
        Clock::new(std::time::Instant::now()),
        None,
    )
}

fn range(start: u64, len: u64) -> ObjectRange<'static> {
    ObjectRange {
        target: "/o",
        start,
        len,
        total: Some(8),
        validator: Some("\"v\""),
    }
}

/// Rule: an idle origin connection is reused for the next range, and one the origin
/// retired meanwhile (closed after its answer, as a keep-alive timeout does) is retried
/// once on a fresh dial instead of failing the range.
#[tokio::test]
async fn a_retired_idle_origin_connection_is_retried_on_a_fresh_dial() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        // Connection 0: two ranges, then it is retired (closed) after the second.
        let (mut s, _) = listener.accept().await.unwrap();
        let h = head(&mut s).await.unwrap();
        assert!(h.contains("Range: bytes=0-1\r\n"), "{h}");
        s.write_all(&partial(0, b"ab", 8)).await.unwrap();
        let h = head(&mut s).await.unwrap();
        assert!(h.contains("Range: bytes=2-3\r\n"), "{h}");
        s.write_all(&partial(2, b"cd", 8)).await.unwrap();
        drop(s);
        // Connection 1: the retried range.
        let (mut s, _) = listener.accept().await.unwrap();
        let h = head(&mut s).await.unwrap();
        assert!(h.contains("Range: bytes=4-7\r\n"), "{h}");
        s.write_all(&partial(4, b"efgh", 8)).await.unwrap();
        let _ = head(&mut s).await;
    });
    let c = client();
    let url = ObjectUrl::parse(&format!("http://{addr}/o")).unwrap();
    for (start, len, want) in [(0, 2, &b"ab"[..]), (2, 2, b"cd"), (4, 4, b"efgh")] {
        let got = c.range(&url, range(start, len)).await;
        match got.ending {
            Ok(Ending::Range(RangeAnswer::Part { body, total, .. })) => {
                assert_eq!((&body[..], total), (want, 8));
            }
            other => panic!("range {start}+{len}: {other:?}"),
        }
    }
    assert_eq!(c.bytes(), 8);
    drop(c);
    server.abort();
}

/// Rule: the identity probe of an empty object (`416` with `bytes */0`) is size 0 with
/// the object's validator; of a non-empty one, the `Content-Range` total and the ETag.
#[tokio::test]
async fn the_probe_gives_size_and_validator_and_an_empty_object_is_size_zero() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let h = head(&mut s).await.unwrap();
        assert!(h.starts_with("GET /empty?sig=1 HTTP/1.1\r\n"), "{h}");
        assert!(
            h.contains("Range: bytes=0-0\r\n") && !h.contains("If-"),
            "{h}"
        );
        s.write_all(
            b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */0\r\nETag: \"e\"\r\nContent-Length: 0\r\n\r\n",
        )
        .await
        .unwrap();
        // Every answer but a good 206 closes its connection: the next probe dials anew.
        let (mut s, _) = listener.accept().await.unwrap();
        let _ = head(&mut s).await.unwrap();
        s.write_all(&partial(0, b"x", 9)).await.unwrap();
        let _ = head(&mut s).await;
    });
    let c = client();
    let empty = ObjectUrl::parse(&format!("http://{addr}/empty?sig=1#frag")).unwrap();
    assert_eq!(probe(&c, &empty).await, Ok((0, "\"e\"".to_owned())));
    let full = ObjectUrl::parse(&format!("http://{addr}/full")).unwrap();
    assert_eq!(probe(&c, &full).await, Ok((9, "\"v\"".to_owned())));
    server.abort();
}
