//! Property tests for the codecs: encode→decode round trips, split invariance, no panic
//! on arbitrary bytes, bounded buffers, and byte accounting (consumed + buffered == fed).

use bytes::BytesMut;
use peerblock_core::http::{
    BodyLimit, ChunkedDecoder, OutgoingRequest, OutgoingResponse, RequestDecoder, RequestError,
    RequestTarget, ResponseDecoder, ResponseError, ResponseEvent, ResponseKind, Route,
    REQUEST_BUFFER_BYTES, RESPONSE_BUFFER_BYTES,
};
use peerblock_core::wire::{BlockPath, ChunkKey, Hop};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 128,
        ..ProptestConfig::default()
    }
}

fn key() -> impl Strategy<Value = ChunkKey> {
    prop::collection::vec(any::<u8>(), 1..=64).prop_map(|b| ChunkKey::from_bytes(&b).unwrap())
}

/// A header value that survives the wire unchanged: visible ASCII inside, no
/// surrounding whitespace.
fn value() -> impl Strategy<Value = String> {
    "[!-~]([ -~]{0,40}[!-~])?"
}

prop_compose! {
    fn request()(key in key(), index in any::<u64>(), hop in proptest::option::of(any::<u32>()),
                 origin in proptest::option::of(value()), node in proptest::option::of(value()),
                 peer in proptest::option::of(value()), epoch in proptest::option::of(any::<u64>()),
                 roster in any::<bool>(), close in any::<bool>())
        -> (RequestTarget, Option<u32>, Option<String>, Option<String>, Option<String>, Option<u64>, bool) {
        let target = if roster { RequestTarget::Roster } else { RequestTarget::Block(BlockPath { key, index }) };
        (target, hop, origin, node, peer, epoch, close)
    }
}

type Req = (
    RequestTarget,
    Option<u32>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<u64>,
    bool,
);

fn encode_request(r: &Req, out: &mut BytesMut) {
    let req = OutgoingRequest {
        target: r.0,
        host: "peer.example:7000",
        hop: r.1.map(Hop),
        origin: r.2.as_deref(),
        node: r.3.as_deref(),
        peer_addr: r.4.as_deref(),
        record: None,
        epoch: r.5,
        close: r.6,
    };
    req.encode(out).unwrap();
}

#[derive(Debug, PartialEq)]
enum Ev {
    Req(
        Vec<u8>,
        Result<Route, peerblock_core::http::Rejection>,
        bool,
    ),
    Err(RequestError),
}

fn run_requests(pieces: &[&[u8]]) -> (Vec<Ev>, usize) {
    let mut d = RequestDecoder::new();
    let mut out = Vec::new();
    let mut heads = 0;
    let mut fed = 0;
    for piece in pieces {
        let mut rest = *piece;
        loop {
            let n = d.feed(rest);
            fed += n;
            rest = &rest[n..];
            assert!(d.buffered() <= REQUEST_BUFFER_BYTES);
            loop {
                match d.decode() {
                    Ok(Some(r)) => {
                        heads += r.head().len();
                        out.push(Ev::Req(r.head().to_vec(), r.route(), r.keep_alive()));
                    }
                    Ok(None) => break,
                    Err(e) => {
                        out.push(Ev::Err(e));
                        return (out, heads);
                    }
                }
            }
            if rest.is_empty() {
                break;
            }
        }
        if d.is_closed() {
            break;
        }
    }
    if !d.is_closed() {
        assert_eq!(heads + d.buffered(), fed, "consumed + buffered == fed");
    }
    (out, heads)
}

fn cut(data: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
    cuts.iter_mut().for_each(|c| *c %= data.len() + 1);
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut prev = 0;
    for c in cuts {
        pieces.push(&data[prev..c]);
        prev = c;
    }
    pieces.push(&data[prev..]);
    pieces
}

proptest! {
    #![proptest_config(config())]

    /// Every encodable request decodes to the same target, hop and wire headers.
    #[test]
    fn request_round_trip(r in request()) {
        let mut out = BytesMut::new();
        encode_request(&r, &mut out);
        let mut d = RequestDecoder::new();
        prop_assert_eq!(d.feed(&out), out.len());
        let req = d.decode().unwrap().unwrap();
        match r.0 {
            RequestTarget::Roster => prop_assert_eq!(req.route(), Ok(Route::Roster)),
            RequestTarget::Block(path) => prop_assert_eq!(
                req.route(),
                Ok(Route::Block { path, hop: Hop(r.1.unwrap_or(0)) })
            ),
        }
        prop_assert_eq!(req.origin(), r.2.as_deref().map(str::as_bytes));
        prop_assert_eq!(req.node(), r.3.as_deref().map(str::as_bytes));
        prop_assert_eq!(req.peer_addr(), r.4.as_deref().map(str::as_bytes));
        let epoch = r.5.map(|e| e.to_string());
        prop_assert_eq!(req.epoch(), epoch.as_deref().map(str::as_bytes));
        prop_assert_eq!(req.keep_alive(), !r.6);
        prop_assert_eq!(d.buffered(), 0);
    }

    /// A pipelined stream decodes to the same requests however it is fragmented.
    #[test]
    fn request_split_invariance(reqs in prop::collection::vec(request(), 1..5),
                                cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let mut stream = BytesMut::new();
        for r in &reqs {
            encode_request(r, &mut stream);
        }
        let whole = run_requests(&[&stream]);
        let split = run_requests(&cut(&stream, cuts));
        prop_assert_eq!(&whole, &split);
        // Requests after the first `Connection: close` are never decoded.
        let until_close = reqs.iter().position(|r| r.6).map_or(reqs.len(), |i| i + 1);
        prop_assert_eq!(whole.0.len(), until_close);
    }

    /// Arbitrary bytes never panic, never overgrow the buffer, and are all accounted for.
    #[test]
    fn request_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..2048),
                               cuts in prop::collection::vec(any::<usize>(), 0..4)) {
        let whole = run_requests(&[&data]);
        let split = run_requests(&cut(&data, cuts));
        prop_assert_eq!(whole, split);
    }

    /// Encoded responses of every kind decode to their status, headers and body.
    #[test]
    fn response_round_trip(body in prop::collection::vec(any::<u8>(), 0..2048),
                           node in value(), status in 100u16..1000, secs in any::<u64>(),
                           which in 0usize..4, cuts in prop::collection::vec(any::<usize>(), 0..4)) {
        let kind = match which {
            0 => ResponseKind::Block { content_length: body.len() as u64 },
            1 => ResponseKind::UpstreamRefused { upstream_status: status },
            2 => ResponseKind::Refused { reason: "sessions", retry_after_secs: secs },
            _ => ResponseKind::NotFound,
        };
        let resp = OutgoingResponse::new(kind, Some(&node));
        let mut wire = BytesMut::new();
        resp.encode(&mut wire).unwrap();
        let sent_body: Vec<u8> = if which == 0 { body.clone() } else { kind.error_body().to_vec() };
        wire.extend_from_slice(&sent_body);
        let events = run_responses(&cut(&wire, cuts), BodyLimit::Exact(body.len() as u64), false);
        prop_assert_eq!(events.len(), 2);
        let Rev::Head(st, head_node, upstream, retry, refused) = &events[0] else { panic!() };
        prop_assert_eq!(*st, kind.status().code());
        prop_assert_eq!(head_node.as_deref(), Some(node.as_bytes()));
        prop_assert_eq!(*upstream, if which == 1 { Some(status) } else { None });
        prop_assert_eq!(*retry, if which == 2 { Some(secs) } else { None });
        prop_assert_eq!(*refused, which == 2);
        prop_assert_eq!(&events[1], &Rev::Body(sent_body));
    }

    /// A chunked body with arbitrary chunking decodes identically at any split.
    #[test]
    fn chunked_split_invariance(body in prop::collection::vec(any::<u8>(), 0..4096),
                                sizes in prop::collection::vec(1usize..300, 1..20),
                                cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let mut wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let mut rest = &body[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].min(rest.len());
            wire.extend_from_slice(format!("{n:X};i={i}\r\n").as_bytes());
            wire.extend_from_slice(&rest[..n]);
            wire.extend_from_slice(b"\r\n");
            rest = &rest[n..];
            i += 1;
        }
        wire.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
        let limit = BodyLimit::Exact(body.len() as u64);
        let whole = run_responses(&[&wire], limit, false);
        let split = run_responses(&cut(&wire, cuts), limit, false);
        prop_assert_eq!(&whole, &split);
        prop_assert_eq!(&whole[1], &Rev::Body(body));
    }

    /// Arbitrary bytes with arbitrary limits never panic, overgrow or lose bytes.
    #[test]
    fn response_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..2048),
                                limit in any::<u64>(), exact in any::<bool>(), eof in any::<bool>(),
                                cuts in prop::collection::vec(any::<usize>(), 0..4)) {
        let limit = if exact { BodyLimit::Exact(limit % 600) } else { BodyLimit::AtMost(limit) };
        let whole = run_responses(&[&data], limit, eof);
        let split = run_responses(&cut(&data, cuts), limit, eof);
        prop_assert_eq!(whole, split);
    }

    /// The chunked decoder alone: arbitrary bytes, consumed never exceeds the input and
    /// the output never exceeds the limit.
    #[test]
    fn chunked_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..1024), limit in 0u64..2000) {
        let mut d = ChunkedDecoder::new(limit);
        let mut out = BytesMut::new();
        if let Ok(p) = d.decode(&data, &mut out) {
            prop_assert!(p.consumed <= data.len());
            prop_assert!(p.done || p.consumed == data.len());
        }
        prop_assert!(out.len() as u64 <= limit);
    }
}

#[derive(Debug, PartialEq)]
enum Rev {
    Head(u16, Option<Vec<u8>>, Option<u16>, Option<u64>, bool),
    Body(Vec<u8>),
    Err(ResponseError),
}

fn run_responses(pieces: &[&[u8]], limit: BodyLimit, eof: bool) -> Vec<Rev> {
    let bound = RESPONSE_BUFFER_BYTES
        .max(usize::try_from(limit.max().saturating_add(1)).unwrap_or(usize::MAX));
    let mut d = ResponseDecoder::new();
    d.expect(limit).unwrap();
    let mut out = Vec::new();
    let mut fed = 0usize;
    let mut discarded = 0usize;
    let drain = |d: &mut ResponseDecoder, out: &mut Vec<Rev>| loop {
        if matches!(out.last(), Some(Rev::Err(_))) {
            return;
        }
        match d.poll() {
            Ok(Some(ResponseEvent::Head(h))) => out.push(Rev::Head(
                h.status(),
                h.node().map(<[u8]>::to_vec),
                h.upstream_status(),
                h.retry_after().map(|d| d.as_secs()),
                h.is_refusal(),
            )),
            Ok(Some(ResponseEvent::Body(b))) => {
                out.push(Rev::Body(b.to_vec()));
                let _ = d.expect(limit);
            }
            Ok(None) => return,
            Err(e) => out.push(Rev::Err(e)),
        }
    };
    for piece in pieces {
        let mut rest = *piece;
        loop {
            let closed = d.is_closed();
            let n = d.feed(rest);
            if closed {
                discarded += n;
            } else {
                fed += n;
            }
            rest = &rest[n..];
            assert!(d.buffered() <= bound, "buffer over bound");
            drain(&mut d, &mut out);
            if rest.is_empty() {
                break;
            }
        }
    }
    if eof {
        d.handle_eof();
        drain(&mut d, &mut out);
    }
    assert_eq!(
        d.consumed() as usize + d.buffered(),
        fed,
        "consumed + buffered == fed (plus {discarded} discarded after close)"
    );
    out
}
