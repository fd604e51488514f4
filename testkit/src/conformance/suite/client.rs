//! Client rules: the driver's client against the misbehaving peers of
//! [`canned`](crate::conformance::canned): exact bodies, validators, pooling, deadlines, size bounds
//! and refusal cooldowns.

use std::sync::Arc;
use std::time::{Duration, Instant};

use peerblock_common::client::{GetOptions, OutcomeClass, Peer};
use peerblock_core::bytes::Bytes;
use peerblock_core::client::{Ending, ExchangeError, LengthError};
use peerblock_core::read::GetOutcome;

use crate::conformance::canned::{self, Reply};
use crate::conformance::{ClientSpec, Driver};

use super::*;

/// A GET gives the exact body, and the request head is the wire form's.
pub fn client_round_trip_gives_the_exact_bytes(d: &dyn Driver) {
    let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let b = body.clone();
    let server = canned::serve(move |_, _, _| Reply::Bytes(canned::ok(&b)));
    let c = d.client(ClientSpec::new());
    let got = c.get(
        &Peer::from_addr(&server.addr),
        block(),
        GetOptions::default(),
    );
    assert_eq!(got.class, OutcomeClass::Ok, "{}", got.describe());
    assert_eq!(got.bytes().unwrap().as_ref(), &body[..]);
    let heads = server.stats.heads();
    let path = canned::block_path(0xab, 3).to_string();
    assert!(
        heads[0].starts_with(&format!("GET {path} HTTP/1.1\r\n")),
        "{}",
        heads[0]
    );
}

/// A 404 is a miss: class absent, `NotFound` for the read.
pub fn a_404_is_a_miss_of_class_absent(d: &dyn Driver) {
    let server = canned::serve(|_, _, _| Reply::Bytes(canned::not_found()));
    let got = d.client(ClientSpec::new()).get(
        &Peer::from_addr(&server.addr),
        block(),
        GetOptions::default(),
    );
    assert_eq!(got.class, OutcomeClass::Absent);
    assert_eq!(got.class.name(), "absent");
    assert_eq!(got.get, GetOutcome::NotFound);
    assert!(matches!(got.ending, Some(Ending::Miss)));
}

/// A chunked body is decoded to the exact bytes.
pub fn a_chunked_body_is_read_correctly(d: &dyn Driver) {
    let body: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    let b = body.clone();
    let server = canned::serve(move |_, _, _| Reply::Bytes(canned::chunked(&b, 4000)));
    let got = d.client(ClientSpec::new()).get(
        &Peer::from_addr(&server.addr),
        block(),
        validated(body.len() as u64, |_| true),
    );
    assert_eq!(got.class, OutcomeClass::Ok, "{}", got.describe());
    assert_eq!(got.bytes().unwrap().as_ref(), &body[..]);
}

/// A validator without an expected length (a manifest checked against its key) sees the
/// whole body, whatever its length, and its verdict decides.
pub fn a_validator_without_a_length_checks_a_body_of_any_length(d: &dyn Driver) {
    let server = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"a manifest")));
    let client = d.client(ClientSpec::new());
    let peer = Peer::from_addr(&server.addr);
    for (verdict, class) in [(true, OutcomeClass::Ok), (false, OutcomeClass::Invalid)] {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        let options = GetOptions {
            validator: Some(Arc::new(move |b: &Bytes| {
                s.lock().unwrap().push(b.clone());
                verdict
            })),
            ..GetOptions::default()
        };
        let got = client.get(&peer, block(), options);
        assert_eq!(got.class, class, "verdict {verdict}");
        assert_eq!(
            seen.lock().unwrap().as_slice(),
            &[Bytes::from_static(b"a manifest")],
            "the validator saw the whole body once"
        );
        if verdict {
            assert_eq!(got.bytes().map(|b| b.as_ref()), Some(&b"a manifest"[..]));
        } else {
            assert_eq!(got.get, GetOutcome::Invalid);
        }
    }
}

/// A holder's 404 saying its copy is corrupt is an invalid copy for the read (class
/// `invalid`), answered: never a miss, never a breaker failure.
pub fn a_404_that_says_corrupt_is_an_invalid_copy_not_a_miss(d: &dyn Driver) {
    let server = canned::serve(|_, _, _| {
        Reply::Bytes(
            b"HTTP/1.1 404 Not Found\r\nX-Peerblock-Miss: corrupt\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        )
    });
    let client = d.client(ClientSpec::new());
    let peer = Peer::from_addr(&server.addr);
    for _ in 0..8 {
        let got = client.get(&peer, block(), GetOptions::default());
        assert_eq!(got.class, OutcomeClass::Invalid);
        assert_eq!(got.get, GetOutcome::Invalid);
        assert!(
            matches!(got.ending, Some(Ending::Corrupt)),
            "{:?}",
            got.ending
        );
    }
}

/// A validator that says no makes the GET invalid; it saw the whole body.
pub fn a_failing_validator_gives_an_invalid_outcome(d: &dyn Driver) {
    let server = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"corrupt!")));
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let s = Arc::clone(&seen);
    let got = d.client(ClientSpec::new()).get(
        &Peer::from_addr(&server.addr),
        block(),
        validated(8, move |b| {
            s.fetch_add(b.len(), std::sync::atomic::Ordering::SeqCst);
            false
        }),
    );
    assert_eq!(
        seen.load(std::sync::atomic::Ordering::SeqCst),
        8,
        "the validator saw the whole body"
    );
    assert_eq!(got.class, OutcomeClass::Invalid);
    assert_eq!(got.get, GetOutcome::Invalid);
    assert!(matches!(
        got.ending,
        Some(Ending::Failed(ExchangeError::Validation))
    ));
}

/// Two GETs in a row to one peer share one pooled connection.
pub fn two_sequential_gets_reuse_one_connection(d: &dyn Driver) {
    let server = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"block")));
    let c = d.client(ClientSpec::new());
    let peer = Peer::from_addr(&server.addr);
    let first = c.get(&peer, block(), GetOptions::default());
    let second = c.get(&peer, block(), GetOptions::default());
    assert_eq!(
        (first.class, second.class),
        (OutcomeClass::Ok, OutcomeClass::Ok)
    );
    assert!(!first.pooled && second.pooled);
    assert_eq!(
        server.stats.accepts(),
        1,
        "one connection carried both GETs"
    );
    assert_eq!(c.idle_connections(), 1);
}

/// Twelve concurrent GETs to one peer open at most `max_conns_per_peer` (4)
/// connections; the server answers nothing until four are open at once.
pub fn open_connections_per_peer_never_exceed_the_cap(d: &dyn Driver) {
    let server = canned::serve(|_, _, _| Reply::AfterOpen(4, canned::ok(b"block")));
    let spec = ClientSpec::new();
    assert_eq!(spec.options.max_conns_per_peer, 4);
    let c = d.client(spec);
    let peer = Peer::from_addr(&server.addr);
    std::thread::scope(|scope| {
        let gets: Vec<_> = (0..12)
            .map(|_| scope.spawn(|| c.get(&peer, block(), GetOptions::default()).class))
            .collect();
        for g in gets {
            assert_eq!(g.join().expect("GET thread"), OutcomeClass::Ok);
        }
    });
    println!(
        "{}: 12 concurrent GETs: {} accepts, at most {} open at once",
        d.name(),
        server.stats.accepts(),
        server.stats.max_open()
    );
    assert_eq!(server.stats.max_open(), 4);
}

/// After one failed dial to a closed port the peer is routed around: not eligible, and
/// further GETs are rejected without a dial, fast.
pub fn a_closed_port_is_routed_around_after_one_attempt(d: &dyn Driver) {
    let addr = canned::closed_port();
    let c = d.client(ClientSpec::new());
    let peer = Peer::from_addr(&addr);
    let first = c.get(&peer, block(), GetOptions::default());
    assert!(
        matches!(
            first.ending,
            Some(Ending::Failed(ExchangeError::DialFailed))
        ),
        "{}",
        first.describe()
    );
    assert!(
        !c.peer_state(&peer.id).eligible,
        "breaker/cooldown route around it"
    );
    let t = Instant::now();
    for _ in 0..200 {
        let got = c.get(&peer, block(), GetOptions::default());
        assert_eq!(
            got.local,
            Some(peerblock_common::client::Local::BreakerRejected),
            "{}",
            got.describe()
        );
    }
    let took = t.elapsed();
    println!(
        "{}: 200 GETs to a closed port after one failed attempt: {took:?}",
        d.name()
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
}

/// A peer that never answers a SYN is cut at the dial deadline (300 ms), not by the
/// kernel's SYN retries (the first retransmission alone is 1 s on Linux).
pub fn a_blackholed_peer_is_cut_at_the_dial_deadline(d: &dyn Driver) {
    let hole = canned::blackhole();
    let c = client_with(d, |s| s.options.exchange = deadlines(300, 10_000, 30_000));
    let t = Instant::now();
    let got = c.get(&Peer::from_addr(&hole.addr), block(), GetOptions::default());
    let took = t.elapsed();
    println!(
        "{}: blackholed dial ended after {took:?}: {}",
        d.name(),
        got.describe()
    );
    assert!(
        matches!(
            got.ending,
            Some(Ending::Failed(ExchangeError::DialTimeout(_)))
        ),
        "{}",
        got.describe()
    );
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(900),
        "{took:?}"
    );
}

/// A peer that accepts and reads the request but never answers is cut at the
/// response-header deadline (300 ms).
pub fn a_silent_peer_is_cut_at_the_response_header_deadline(d: &dyn Driver) {
    let server = canned::serve(|_, _, _| Reply::BytesThenHold(Vec::new()));
    let c = client_with(d, |s| s.options.exchange = deadlines(1000, 300, 30_000));
    let t = Instant::now();
    let got = c.get(
        &Peer::from_addr(&server.addr),
        block(),
        GetOptions::default(),
    );
    let took = t.elapsed();
    assert!(
        matches!(
            got.ending,
            Some(Ending::Failed(ExchangeError::ResponseHeaderTimeout(_)))
        ),
        "{}",
        got.describe()
    );
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

/// A body that stops midway (400 of 1000 bytes) is cut at the request deadline
/// (700 ms).
pub fn a_body_stalled_midway_is_cut_at_the_request_deadline(d: &dyn Driver) {
    let half = canned::stalled_body(1000, 400);
    let server = canned::serve(move |_, _, _| Reply::BytesThenHold(half.clone()));
    let c = client_with(d, |s| s.options.exchange = deadlines(1000, 300, 700));
    let t = Instant::now();
    let got = c.get(
        &Peer::from_addr(&server.addr),
        block(),
        GetOptions::default(),
    );
    let took = t.elapsed();
    assert!(
        matches!(
            got.ending,
            Some(Ending::Failed(ExchangeError::RequestTimeout(_)))
        ),
        "{}",
        got.describe()
    );
    assert!(
        took >= Duration::from_millis(690) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

/// A body longer than expected is refused without reading past expected + 1 bytes: a
/// `Content-Length` above it at the head, a chunked body at the extra byte; both
/// servers then stall, so a client that waited for more would hit its 10 s deadline.
pub fn an_oversized_body_is_refused_before_expected_plus_one_bytes_are_read(d: &dyn Driver) {
    let server = canned::serve(|_, _, _| Reply::BytesThenHold(canned::oversized_length(5000, 100)));
    let c = client_with(d, |s| s.options.exchange = deadlines(1000, 10_000, 10_000));
    let got = c.get(
        &Peer::from_addr(&server.addr),
        block(),
        validated(100, |_| true),
    );
    assert!(
        matches!(got.ending, Some(Ending::Failed(ExchangeError::Length(_)))),
        "{}",
        got.describe()
    );
    assert!(got.elapsed < Duration::from_secs(5), "{:?}", got.elapsed);
    let server = canned::serve(|_, _, _| Reply::BytesThenHold(canned::oversized_chunked(101)));
    let got = c.get(
        &Peer::from_addr(&server.addr),
        block(),
        validated(100, |_| true),
    );
    assert!(
        matches!(
            got.ending,
            Some(Ending::Failed(ExchangeError::Length(
                LengthError::Long { .. }
            )))
        ),
        "{}",
        got.describe()
    );
    assert!(got.elapsed < Duration::from_secs(5), "{:?}", got.elapsed);
}

/// A 503 refusal is Busy with its `Retry-After`; the peer is skipped for that long and
/// reached again once it has passed.
pub fn a_refusal_cools_the_peer_down_and_it_is_reached_again_after(d: &dyn Driver) {
    let server = canned::serve(|_, r, _| match r {
        0 => Reply::BytesThenClose(canned::refusal(1)),
        _ => Reply::Bytes(canned::ok(b"block")),
    });
    let c = d.client(ClientSpec::new());
    let peer = Peer::from_addr(&server.addr);
    let first = c.get(&peer, block(), GetOptions::default());
    assert_eq!(first.class, OutcomeClass::Busy, "{}", first.describe());
    assert_eq!(
        first.get,
        GetOutcome::Refused {
            retry_after: Some(Duration::from_secs(1))
        }
    );
    let state = c.peer_state(&peer.id);
    assert!(!state.eligible, "{state:?}");
    let left = state.refused_for.expect("in cooldown");
    assert!(left <= Duration::from_secs(1), "{left:?}");
    // The behaviour is time passing: wait the cooldown out.
    std::thread::sleep(left);
    let state = c.peer_state(&peer.id);
    assert!(state.eligible, "the cooldown is over: {state:?}");
    let second = c.get(&peer, block(), GetOptions::default());
    assert_eq!(second.class, OutcomeClass::Ok, "{}", second.describe());
    assert_eq!(server.stats.accepts(), 2);
}
