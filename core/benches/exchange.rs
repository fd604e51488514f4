//! Exchange hot paths: the admission decision, encoding a refusal, a refused connection
//! (accept, the peer's request head in, the 503 out), and one full exchange of a 256 KiB
//! block through both machines (directly, and through the in-memory pair), and the
//! server's whole per-request work for a small block on a kept-alive connection.
//!
//! Run: `cargo bench -p peerblock-core --bench exchange -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use peerblock_core::client::{
    BlockRequest, ClientConfig, ClientEvent, Connection, Ending, Exchange, ExchangeRequest, Link,
};
use peerblock_core::refusal::{self, Refusal, RefusalReason};
use peerblock_core::server::{
    Admission, AdmissionConfig, ServerConfig, ServerConnection, ServerEvent, SourceResult,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::wire::{BlockPath, ChunkKey};
use peerblock_testkit::pair::Pair;

const BLOCK: usize = 256 * 1024;

fn path() -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([7; 32]),
        index: 3,
    }
}

fn admission(c: &mut Criterion) {
    let mut adm = Admission::<u32>::new(AdmissionConfig::default()).unwrap();
    // A realistically busy node: 200 sessions over 100 sources.
    let mut held: Vec<_> = (0..200u32)
        .map(|i| adm.open_session(Instant::ZERO, i % 100).unwrap())
        .collect();
    let mut g = c.benchmark_group("admission");
    g.bench_function("open_and_close_session", |b| {
        b.iter(|| {
            let t = adm.open_session(Instant::ZERO, black_box(42)).unwrap();
            adm.close_session(Instant::ZERO, t);
        })
    });
    let mut s = held.pop().unwrap();
    g.bench_function("begin_reserve_finish_request", |b| {
        b.iter(|| {
            let mut r = adm.begin_request(Instant::ZERO, &mut s).unwrap();
            adm.reserve_bytes(&mut r, black_box(BLOCK as u64)).unwrap();
            adm.finish_request(Instant::ZERO, Some(&mut s), r);
        })
    });
    let mut full = Admission::<u32>::new(AdmissionConfig {
        max_sessions: 4,
        max_sessions_per_source: 1,
        max_requests: 8,
        max_tracked_sources: 4,
        ..AdmissionConfig::default()
    })
    .unwrap();
    let _keep: Vec<_> = (0..4u32)
        .map(|i| full.open_session(Instant::ZERO, i).unwrap())
        .collect();
    g.bench_function("refuse_session", |b| {
        b.iter(|| full.open_session(Instant::ZERO, black_box(9)).unwrap_err())
    });
    g.finish();
}

fn refusal(c: &mut Criterion) {
    let refusal = Refusal {
        reason: RefusalReason::Sessions,
        retry_after: Duration::from_secs(15),
    };
    let mut out = BytesMut::with_capacity(512);
    c.bench_function("refusal_encode", |b| {
        b.iter(|| {
            out.clear();
            refusal::encode(
                black_box(&refusal),
                Some("node-0123456789abcdef"),
                None,
                &mut out,
            );
            black_box(out.len())
        })
    });
    let mut adm = Admission::<u32>::new(AdmissionConfig {
        max_sessions: 1,
        max_sessions_per_source: 1,
        max_requests: 4,
        max_tracked_sources: 1,
        ..AdmissionConfig::default()
    })
    .unwrap();
    let _keep = adm.open_session(Instant::ZERO, 0).unwrap();
    let config = Arc::new(ServerConfig::new("node-0123456789abcdef", "10.0.0.1:7070"));
    // What a Go net/http client sends for a block GET.
    let head = format!(
        "GET {} HTTP/1.1\r\nHost: 10.0.0.1:7070\r\nUser-Agent: Go-http-client/1.1\r\n\
         X-Dart-Hop: 0\r\nAccept-Encoding: gzip\r\n\r\n",
        path()
    );
    // A refused connection from accept to its 503: the request head in, the refusal out,
    // acknowledged, the peer's close, and the close (what a full node pays per dial).
    c.bench_function("refused_connection", |b| {
        b.iter(|| {
            let mut conn =
                ServerConnection::accept(Instant::ZERO, &mut adm, 1, Arc::clone(&config)).unwrap();
            debug_assert!(conn.refused().is_some());
            conn.handle_input(Instant::ZERO, black_box(head.as_bytes()));
            let t = conn.poll_transmit(Instant::ZERO).unwrap();
            let len = t.head.len() + t.body.len();
            conn.handle_transmitted(Instant::ZERO, &mut adm);
            conn.handle_eof(Instant::ZERO);
            conn.close(Instant::ZERO, &mut adm);
            black_box(len)
        })
    });
}

/// One exchange through both machines, driven directly (no harness queues): the request
/// goes server-ward as a slice, the response head and body client-ward as slices.
///
/// How the client side takes the response:
/// - `Rx::Feed`: `handle_input` straight from the server's transmit (no socket read at
///   all: the decoder's copy is the only one);
/// - `Rx::DriverBuffer`: as a socket driver does with `handle_input`: a read (a copy)
///   into the driver's reused 64 KiB buffer, then `handle_input` copies it again;
/// - `Rx::ReadInto`: `Exchange::read_buf` + `handle_read`: the read (the copy) lands in
///   the decoder's own memory, and the body handed out must be that very memory (core
///   copies no body byte; it zeroes memory it has not handed out before).
fn machines_once(
    adm: &mut Admission<u32>,
    server: &mut ServerConnection<u32>,
    block: &Bytes,
    link: Link,
    rx: Rx,
    scratch: &mut [u8],
) -> (Bytes, Option<Connection>) {
    let config = ClientConfig::default();
    let req = ExchangeRequest::get_validated("s:1", BlockRequest::new(path()), BLOCK as u64, false);
    let mut ex = Exchange::new(Instant::ZERO, &config, req, link).unwrap();
    ex.handle_connected(Instant::ZERO);
    let request = ex.poll_transmit(Instant::ZERO).unwrap();
    ex.handle_transmitted(Instant::ZERO);
    server.handle_input(Instant::ZERO, &request.head);
    server.handle_admission(Instant::ZERO, adm);
    let Some(ServerEvent::Fetch { id, .. }) = server.poll_event() else {
        unreachable!()
    };
    server
        .handle_source(Instant::ZERO, adm, id, SourceResult::Found(block.clone()))
        .unwrap();
    let t = server.poll_transmit(Instant::ZERO).unwrap();
    assert_eq!(t.body.as_ptr(), block.as_ptr(), "server copied the body");
    let mut body_landed_at = None;
    if rx == Rx::DriverBuffer {
        for mut part in [&t.head[..], &t.body[..]] {
            while !part.is_empty() {
                let n = scratch.len().min(part.len());
                scratch[..n].copy_from_slice(&part[..n]);
                let mut read = &scratch[..n];
                while !read.is_empty() {
                    let taken = ex.handle_input(Instant::ZERO, read);
                    read = &read[taken..];
                }
                part = &part[n..];
            }
        }
    } else if rx == Rx::ReadInto {
        let mut wire = [&t.head[..], &t.body[..]];
        let mut at = 0;
        for part in &mut wire {
            while !part.is_empty() {
                let window = ex.read_buf().expect("room for the response");
                let n = window.len().min(part.len());
                window[..n].copy_from_slice(&part[..n]);
                if at == t.head.len() {
                    body_landed_at.get_or_insert(window.as_ptr());
                }
                assert_eq!(ex.handle_read(Instant::ZERO, n), n);
                *part = &part[n..];
                at += n;
            }
        }
    } else {
        let taken = ex.handle_input(Instant::ZERO, &t.head);
        assert_eq!(taken, t.head.len());
        let mut body = &t.body[..];
        while !body.is_empty() {
            let taken = ex.handle_input(Instant::ZERO, body);
            body = &body[taken..];
        }
    }
    server.handle_transmitted(Instant::ZERO, adm);
    // The head event, then the outcome.
    let Some(ClientEvent::Head { status: 200 }) = ex.poll_event() else {
        unreachable!()
    };
    let Some(ClientEvent::Done(out)) = ex.poll_event() else {
        unreachable!()
    };
    let Ending::Block(got) = out.ending else {
        unreachable!()
    };
    if let Some(landed) = body_landed_at {
        assert_eq!(got.as_ptr(), landed, "client core copied the body");
    }
    (got, ex.take_connection())
}

/// How the client side takes the response in [`machines_once`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rx {
    Feed,
    DriverBuffer,
    ReadInto,
}

fn full_exchange(c: &mut Criterion) {
    let mut scratch = vec![0u8; 64 * 1024];
    let block = Bytes::from((0..BLOCK).map(|i| i as u8).collect::<Vec<u8>>());
    let mut g = c.benchmark_group("exchange_256k");
    g.throughput(Throughput::Bytes(BLOCK as u64));

    // Baseline: one plain copy of the block into a reused buffer (what the client's receive
    // path costs at least, since the codec buffers what it is fed).
    let mut sink = BytesMut::with_capacity(BLOCK);
    g.bench_function("baseline_one_copy", |b| {
        b.iter(|| {
            sink.clear();
            sink.extend_from_slice(black_box(&block[..]));
            black_box(sink.len())
        })
    });

    let mut adm = Admission::<u32>::new(AdmissionConfig::default()).unwrap();
    let config = Arc::new(ServerConfig::new("node", "10.0.0.1:7070"));
    let mut server = ServerConnection::accept(Instant::ZERO, &mut adm, 1, config).unwrap();
    let (_, mut pooled) = machines_once(
        &mut adm,
        &mut server,
        &block,
        Link::Dial,
        Rx::Feed,
        &mut scratch,
    );
    g.bench_function("machines_pooled", |b| {
        b.iter(|| {
            let link = Link::Pooled(pooled.take().unwrap());
            let (got, conn) =
                machines_once(&mut adm, &mut server, &block, link, Rx::Feed, &mut scratch);
            pooled = conn;
            black_box(got.len())
        })
    });
    for (name, rx) in [
        ("machines_pooled_driver_buffer", Rx::DriverBuffer),
        ("machines_pooled_read_buf", Rx::ReadInto),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let link = Link::Pooled(pooled.take().unwrap());
                let (got, conn) =
                    machines_once(&mut adm, &mut server, &block, link, rx, &mut scratch);
                pooled = conn;
                black_box(got.len())
            })
        });
    }

    let mut pair = Pair::new([(path(), block.clone())]);
    g.bench_function("pair_pooled", |b| {
        b.iter(|| {
            let req = ExchangeRequest::get_validated(
                "s:1",
                BlockRequest::new(path()),
                BLOCK as u64,
                true,
            );
            let out = pair.exchange(req);
            black_box(matches!(out.ending, Ending::Block(_)))
        })
    });
    g.finish();
}

/// The server's work for one 4 KiB block GET on a kept-alive connection, as a socket
/// driver does it (what `bench/serve-compare` loads with wrk): the request read straight
/// into the machine's window, admission, the fetch event, the found block, the response
/// handed out and acknowledged, the next timer asked for.
fn served_request(c: &mut Criterion) {
    let mut adm = Admission::<u32>::new(AdmissionConfig::default()).unwrap();
    let config = Arc::new(ServerConfig::new(
        "fc115e98b55d49fdd37bb5530c0591ea194776706efa19ea4e25c96210016847",
        "127.0.0.1:7070",
    ));
    let mut conn = ServerConnection::accept(Instant::ZERO, &mut adm, 1, config).unwrap();
    // What wrk sends.
    let head = format!("GET {} HTTP/1.1\r\nHost: 127.0.0.1:7070\r\n\r\n", path());
    let block = Bytes::from(vec![7u8; 4096]);
    c.bench_function("served_request_4k", |b| {
        b.iter(|| {
            let window = conn.read_buf().expect("room for a request");
            window[..head.len()].copy_from_slice(head.as_bytes());
            conn.handle_read(Instant::ZERO, head.len());
            if conn.needs_admission() {
                conn.handle_admission(Instant::ZERO, &mut adm);
            }
            let Some(ServerEvent::Fetch { id, request }) = conn.poll_event() else {
                unreachable!()
            };
            black_box(&request);
            conn.handle_source(
                Instant::ZERO,
                &mut adm,
                id,
                SourceResult::Found(block.clone()),
            )
            .unwrap();
            let t = conn.poll_transmit(Instant::ZERO).unwrap();
            let len = t.head.len() + t.body.len();
            drop(t);
            conn.handle_transmitted(Instant::ZERO, &mut adm);
            black_box(conn.poll_timeout());
            black_box(len)
        })
    });
}

criterion_group!(benches, admission, refusal, full_exchange, served_request);
criterion_main!(benches);
