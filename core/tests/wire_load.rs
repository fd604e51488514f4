//! `X-Peerblock-Load`: every block response a peerblock server writes (`200`, `404`, the
//! `503` refusal, at accept or at request time) advertises the node's requests in
//! progress; the client decodes it and the exchange surfaces it for the driver's
//! `LoadTable`. Each test names its rule and fails without it.

use std::sync::Arc;

use bytes::Bytes;
use peerblock_core::client::{BlockRequest, Ending, ExchangeRequest};
use peerblock_core::http::{BodyLimit, ResponseDecoder, ResponseEvent, ResponseHead};
use peerblock_core::server::{
    Admission, AdmissionConfig, RequestId, ServerConfig, ServerConnection, ServerEvent,
    SourceResult,
};
use peerblock_core::time::Instant;
use peerblock_core::transmit::Transmit;
use peerblock_core::wire::{header, BlockPath, ChunkKey};
use peerblock_testkit::pair::Pair;

const T0: Instant = Instant::ZERO;

fn path(n: u8) -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([n; 32]),
        index: u64::from(n),
    }
}

fn get(p: BlockPath) -> Vec<u8> {
    format!("GET {p} HTTP/1.1\r\nHost: s\r\n\r\n").into_bytes()
}

fn config() -> Arc<ServerConfig> {
    Arc::new(ServerConfig::new("node-a", "10.0.0.1:7070"))
}

fn accept(adm: &mut Admission<u32>, source: u32) -> ServerConnection<u32> {
    let c = ServerConnection::accept(T0, adm, source, config()).unwrap();
    assert_eq!(c.refused(), None, "refused");
    c
}

/// Sends one GET for `p` and returns its fetch id.
fn request(conn: &mut ServerConnection<u32>, adm: &mut Admission<u32>, p: BlockPath) -> RequestId {
    conn.handle_input(T0, &get(p));
    conn.handle_admission(T0, adm);
    let mut id = None;
    while let Some(e) = conn.poll_event() {
        if let ServerEvent::Fetch { id: i, .. } = e {
            id = Some(i);
        }
    }
    id.expect("a fetch")
}

fn decode(head: &[u8]) -> ResponseHead {
    let mut d = ResponseDecoder::new();
    d.expect(BodyLimit::AtMost(1 << 20)).unwrap();
    d.feed(head);
    match d.poll() {
        Ok(Some(ResponseEvent::Head(h))) => h,
        other => panic!("{other:?}"),
    }
}

fn load_of(t: &Transmit) -> Option<u32> {
    decode(&t.head).load()
}

/// Rule: a `200` and a `404` advertise the node's requests in progress (each counting
/// itself), whoever the other requests belong to.
#[test]
fn block_and_miss_responses_advertise_requests_in_progress() {
    let mut adm = Admission::new(AdmissionConfig::default()).unwrap();
    let mut busy = accept(&mut adm, 1);
    let _ = request(&mut busy, &mut adm, path(1));
    let _ = request(&mut busy, &mut adm, path(2));
    let mut conn = accept(&mut adm, 2);
    let id = request(&mut conn, &mut adm, path(3));
    assert_eq!(adm.requests(), 3);
    conn.handle_source(
        T0,
        &mut adm,
        id,
        SourceResult::Found(Bytes::from_static(b"block")),
    )
    .unwrap();
    let ok = conn.poll_transmit(T0).unwrap();
    assert!(ok.head.starts_with(b"HTTP/1.1 200 "));
    let text = String::from_utf8(ok.head.to_vec()).unwrap();
    assert!(text.contains("X-Peerblock-Load: 3\r\n"), "{text}");
    assert_eq!(load_of(&ok), Some(3));
    conn.handle_transmitted(T0, &mut adm);
    // A miss after the 200 finished: two in progress (the other client's) plus itself.
    let miss = request(&mut conn, &mut adm, path(4));
    conn.handle_source(T0, &mut adm, miss, SourceResult::Miss)
        .unwrap();
    let nf = conn.poll_transmit(T0).unwrap();
    assert!(nf.head.starts_with(b"HTTP/1.1 404 "));
    assert_eq!(load_of(&nf), Some(3));
}

/// Rule: refusals advertise the load too, at accept (sessions full) and at request time
/// (request slots full): a refusing node is the one most worth steering around.
#[test]
fn refusals_advertise_the_load() {
    let limits = AdmissionConfig {
        max_sessions: 2,
        max_sessions_per_source: 1,
        max_requests: 3,
        max_requests_per_session: 2,
        ..AdmissionConfig::default()
    };
    let mut adm = Admission::new(limits).unwrap();
    let mut a = accept(&mut adm, 1);
    let _ = request(&mut a, &mut adm, path(1));
    let _ = request(&mut a, &mut adm, path(4));
    let mut b = accept(&mut adm, 2);
    let first = request(&mut b, &mut adm, path(2));
    let mut refused = ServerConnection::accept(T0, &mut adm, 3, config()).unwrap();
    assert!(
        refused.refused().is_some(),
        "admitted over the session limit"
    );
    refused.handle_input(T0, &get(path(5)));
    let response = refused
        .poll_transmit(T0)
        .expect("the 503 answers the request");
    let h = decode(&response.head);
    assert!(h.is_refusal());
    assert_eq!(h.load(), Some(3), "the load when it was refused, at accept");
    // Request slots full: b's second request is refused, behind its first in order.
    b.handle_input(T0, &get(path(3)));
    b.handle_admission(T0, &mut adm);
    while b.poll_event().is_some() {}
    b.handle_source(T0, &mut adm, first, SourceResult::Miss)
        .unwrap();
    let nf = b.poll_transmit(T0).unwrap();
    assert!(nf.head.starts_with(b"HTTP/1.1 404 "));
    b.handle_transmitted(T0, &mut adm);
    let refusal = b.poll_transmit(T0).unwrap();
    let h = decode(&refusal.head);
    assert!(h.is_refusal(), "{:?}", refusal.head);
    assert_eq!(
        h.load(),
        Some(3),
        "every slot in progress when it was refused"
    );
}

/// Rule: the client reads the header and the exchange hands it to the driver, for every
/// ending (here a `200` through the in-memory pair: the server's only request, itself).
#[test]
fn the_exchange_surfaces_the_advertised_load() {
    let block = Bytes::from_static(b"hot block");
    let mut pair = Pair::new([(path(9), block.clone())]);
    let out = pair.exchange(ExchangeRequest::get("s:1", BlockRequest::new(path(9))));
    assert!(matches!(out.ending, Ending::Block(ref b) if *b == block));
    assert_eq!(out.load, Some(1));
    let miss = pair.exchange(ExchangeRequest::get("s:1", BlockRequest::new(path(8))));
    assert!(matches!(miss.ending, Ending::Miss));
    assert_eq!(miss.load, Some(1));
}

/// Rule: the header is the peer's input: absent, malformed or oversized, it is no hint.
#[test]
fn a_malformed_load_is_no_hint() {
    let head = |v: &str| {
        decode(
            format!(
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n{}: {v}\r\n\r\n",
                header::LOAD
            )
            .as_bytes(),
        )
        .load()
    };
    assert_eq!(head("17"), Some(17));
    assert_eq!(head("4294967295"), Some(u32::MAX));
    assert_eq!(head("4294967296"), None);
    assert_eq!(head("-1"), None);
    assert_eq!(head("1.5"), None);
    assert_eq!(head(""), None);
    assert_eq!(
        decode(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").load(),
        None
    );
    // Case-insensitive name, as every field.
    assert_eq!(
        decode(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nx-peerblock-load: 4\r\n\r\n").load(),
        Some(4)
    );
}
