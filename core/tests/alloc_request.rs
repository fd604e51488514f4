//! Proves the per-request hot path allocates nothing once warmed up: a counting global
//! allocator counts this thread's heap allocations while requests are decoded.

mod alloc_support;

use alloc_support::allocations;
use peerblock_core::http::{
    BodyLimit, OutgoingResponse, RequestDecoder, ResponseDecoder, ResponseEvent, ResponseKind,
    Route,
};

/// The typical request of the benchmark: ~200 bytes, 5 header fields.
pub const TYPICAL_REQUEST: &[u8] = b"GET /peer/v1/block/9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08/1234 HTTP/1.1\r\n\
Host: 10.0.3.17:7000\r\n\
X-DART-Hop: 1\r\n\
X-DART-Origin: https://origin.example/o/abc\r\n\
X-DART-Node: node-7\r\n\
User-Agent: peerblock\r\n\r\n";

#[test]
fn decoding_a_request_allocates_nothing_after_warm_up() {
    // The counter sees this thread's allocations (or the zeros below would prove nothing).
    let before = allocations();
    let v = std::hint::black_box(Vec::<u8>::with_capacity(16));
    assert_eq!(allocations() - before, 1);
    drop(v);

    let mut d = RequestDecoder::new();
    let decode_one = |d: &mut RequestDecoder| {
        assert_eq!(d.feed(TYPICAL_REQUEST), TYPICAL_REQUEST.len());
        let req = d.decode().unwrap().unwrap();
        let Ok(Route::Block { path, hop }) = req.route() else {
            panic!("typical request routes to a block")
        };
        assert_eq!((path.index, hop.0), (1234, 1));
        assert!(req.origin().is_some() && req.node().is_some());
        // The server drops the request head once it has answered.
    };
    for _ in 0..4 {
        decode_one(&mut d);
    }
    let before = allocations();
    for _ in 0..1000 {
        decode_one(&mut d);
    }
    let per_1000 = allocations() - before;
    println!("allocations per 1000 decoded requests after warm-up: {per_1000}");
    assert_eq!(per_1000, 0, "heap allocations on the request hot path");

    // Pipelined: several requests per feed, still nothing.
    let mut burst = Vec::new();
    for _ in 0..8 {
        burst.extend_from_slice(TYPICAL_REQUEST);
    }
    let before = allocations();
    for _ in 0..100 {
        assert_eq!(d.feed(&burst), burst.len());
        for _ in 0..8 {
            assert!(d.decode().unwrap().is_some());
        }
    }
    assert_eq!(allocations() - before, 0, "pipelined requests allocate");

    // Zero-copy: requests decoded straight from the caller's bytes, whole and pipelined.
    let mut d = RequestDecoder::new();
    let before = allocations();
    for _ in 0..1000 {
        let req = d.decode_slice(TYPICAL_REQUEST).unwrap().unwrap();
        assert_eq!(req.head_len(), TYPICAL_REQUEST.len());
        let Ok(Route::Block { path, hop }) = req.route() else {
            panic!("typical request routes to a block")
        };
        assert_eq!((path.index, hop.0), (1234, 1));
    }
    for _ in 0..100 {
        let mut rest = &burst[..];
        while let Some(req) = d.decode_slice(rest).unwrap() {
            rest = &rest[req.head_len()..];
        }
        assert!(rest.is_empty());
    }
    let zero_copy = allocations() - before;
    println!("allocations per 1000 requests decoded with decode_slice: {zero_copy}");
    assert_eq!(zero_copy, 0, "zero-copy decoding allocates");
}

#[test]
fn encoding_and_decoding_a_response_head_allocates_nothing_after_warm_up() {
    let mut head = bytes::BytesMut::with_capacity(512);
    let mut wire = Vec::with_capacity(4096);
    let mut d = ResponseDecoder::new();
    let mut round = |d: &mut ResponseDecoder| {
        head.clear();
        OutgoingResponse::new(ResponseKind::Block { content_length: 4 }, Some("node-7"))
            .encode(&mut head)
            .unwrap();
        wire.clear();
        wire.extend_from_slice(&head);
        wire.extend_from_slice(b"data");
        d.expect(BodyLimit::Exact(4)).unwrap();
        assert_eq!(d.feed(&wire), wire.len());
        let Ok(Some(ResponseEvent::Head(h))) = d.poll() else {
            panic!("head")
        };
        assert_eq!(h.status(), 200);
        drop(h);
        let Ok(Some(ResponseEvent::Body(b))) = d.poll() else {
            panic!("body")
        };
        assert_eq!(&b[..], b"data");
    };
    for _ in 0..4 {
        round(&mut d);
    }
    let before = allocations();
    for _ in 0..1000 {
        round(&mut d);
    }
    let per_1000 = allocations() - before;
    println!("allocations per 1000 encoded+decoded responses after warm-up: {per_1000}");
    assert_eq!(per_1000, 0);

    // The same, read straight into the decoder's buffer instead of fed.
    let read_into = |d: &mut ResponseDecoder| {
        d.expect(BodyLimit::Exact(4)).unwrap();
        let mut rest = &wire[..];
        while !rest.is_empty() {
            let window = d.read_buf();
            let n = window.len().min(rest.len());
            window[..n].copy_from_slice(&rest[..n]);
            assert_eq!(d.advance(n), n);
            rest = &rest[n..];
        }
        let Ok(Some(ResponseEvent::Head(h))) = d.poll() else {
            panic!("head")
        };
        drop(h);
        let Ok(Some(ResponseEvent::Body(b))) = d.poll() else {
            panic!("body")
        };
        assert_eq!(&b[..], b"data");
    };
    for _ in 0..4 {
        read_into(&mut d);
    }
    let before = allocations();
    for _ in 0..1000 {
        read_into(&mut d);
    }
    let per_1000 = allocations() - before;
    println!("allocations per 1000 responses read with read_buf after warm-up: {per_1000}");
    assert_eq!(per_1000, 0);
}
