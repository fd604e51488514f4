//! Codec benchmarks: our full request decode against bare `httparse` on the same bytes
//! (same group, so the ratio comes from one run), response head and 256 KiB body
//! decoding, and both head encoders. Figures and commands: docs/benchmarks.md, "Codecs".

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use peerblock_core::http::{
    BodyLimit, OutgoingRequest, OutgoingResponse, RequestDecoder, ResponseDecoder, ResponseEvent,
    ResponseKind, Route, MAX_REQUEST_HEADERS, MAX_RESPONSE_HEADERS,
};
use peerblock_core::wire::{BlockPath, ChunkKey, Hop};

/// A typical block request: 226 bytes, 5 header fields.
const REQUEST: &[u8] = b"GET /peer/v1/block/9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08/1234 HTTP/1.1\r\n\
Host: 10.0.3.17:7000\r\n\
X-DART-Hop: 1\r\n\
X-DART-Origin: https://origin.example/o/abc\r\n\
X-DART-Node: node-7\r\n\
User-Agent: peerblock\r\n\r\n";

/// A typical block response head.
const RESPONSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\
Content-Type: application/octet-stream\r\nX-DART-Node: node-7\r\n\r\n";

fn request_decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("request_decode");
    g.throughput(Throughput::Bytes(REQUEST.len() as u64));
    g.bench_function("httparse_parse", |b| {
        b.iter(|| {
            let mut headers = [httparse::EMPTY_HEADER; MAX_REQUEST_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            black_box(req.parse(black_box(REQUEST)).unwrap());
        })
    });
    let mut d = RequestDecoder::new();
    g.bench_function("peerblock_decode", |b| {
        b.iter(|| {
            d.feed(black_box(REQUEST));
            let req = d.decode().unwrap().unwrap();
            let Ok(Route::Block { path, hop }) = req.route() else {
                unreachable!()
            };
            black_box((path.index, hop, req.origin().is_some()));
        })
    });
    let mut d = RequestDecoder::new();
    g.bench_function("peerblock_decode_slice", |b| {
        b.iter(|| {
            let input = black_box(REQUEST);
            let req = d.decode_slice(input).unwrap().unwrap();
            let Ok(Route::Block { path, hop }) = req.route() else {
                unreachable!()
            };
            black_box((path.index, hop, req.origin().is_some(), req.head_len()));
        })
    });
    g.finish();
}

fn response_decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("response_head_decode");
    g.throughput(Throughput::Bytes(RESPONSE_HEAD.len() as u64));
    g.bench_function("httparse_parse", |b| {
        b.iter(|| {
            let mut headers = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
            let mut res = httparse::Response::new(&mut headers);
            black_box(res.parse(black_box(RESPONSE_HEAD)).unwrap());
        })
    });
    let mut d = ResponseDecoder::new();
    g.bench_function("peerblock_decode", |b| {
        b.iter(|| {
            d.expect(BodyLimit::AtMost(0)).unwrap();
            d.feed(black_box(RESPONSE_HEAD));
            let Ok(Some(ResponseEvent::Head(h))) = d.poll() else {
                unreachable!()
            };
            black_box((h.status(), h.node().is_some(), h.keep_alive()));
            drop(h);
            let Ok(Some(ResponseEvent::Body(b))) = d.poll() else {
                unreachable!()
            };
            black_box(b);
        })
    });
    g.finish();

    let body_len = 256 * 1024;
    let mut wire =
        format!("HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\nX-DART-Node: node-7\r\n\r\n")
            .into_bytes();
    wire.extend(std::iter::repeat_n(0xa5u8, body_len));
    let mut g = c.benchmark_group("response_body_decode");
    g.throughput(Throughput::Bytes(body_len as u64));
    let mut d = ResponseDecoder::new();
    g.bench_function("content_length_256KiB_in_64KiB_reads", |b| {
        b.iter(|| {
            d.expect(BodyLimit::Exact(body_len as u64)).unwrap();
            let mut body = None;
            for read in wire.chunks(64 * 1024) {
                let mut rest = read;
                while !rest.is_empty() {
                    let n = d.feed(rest);
                    rest = &rest[n..];
                    while let Ok(Some(ev)) = d.poll() {
                        if let ResponseEvent::Body(b) = ev {
                            body = Some(b);
                        }
                    }
                }
            }
            assert_eq!(body.unwrap().len(), body_len);
        })
    });
    g.finish();
}

fn encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("head_encode");
    let path = BlockPath {
        key: ChunkKey::from_array([0x9f; 32]),
        index: 1234,
    };
    let mut out = BytesMut::with_capacity(1024);
    g.bench_function("request_head", |b| {
        b.iter(|| {
            out.clear();
            let mut req = OutgoingRequest::block("10.0.3.17:7000", black_box(path));
            req.hop = Some(Hop(1));
            req.origin = Some("https://origin.example/o/abc");
            req.node = Some("node-7");
            req.encode(&mut out).unwrap();
            black_box(&out);
        })
    });
    g.bench_function("response_head", |b| {
        b.iter(|| {
            out.clear();
            OutgoingResponse::new(
                ResponseKind::Block {
                    content_length: black_box(262_144),
                },
                Some("node-7"),
            )
            .encode(&mut out)
            .unwrap();
            black_box(&out);
        })
    });
    g.finish();
}

criterion_group!(benches, request_decode, response_decode, encode);
criterion_main!(benches);
