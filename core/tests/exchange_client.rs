//! Client exchange machine, end to end through the in-memory pair: deadlines, length
//! rules, validation sequencing, and one test per row of the outcome classification table.

use bytes::Bytes;
use peerblock_core::client::{
    BlockRequest, BreakerOutcome, BreakerPath, ClientConfig, ClientEvent, ConnectionFate,
    CooldownEntry, Ending, Exchange, ExchangeError, ExchangeRequest, LengthError, Link,
    RequestTimeout,
};
use peerblock_core::pair::{Dial, Pair};
use peerblock_core::refusal::RefusalReason;
use peerblock_core::server::{AdmissionConfig, RelayConfig, ServerConfig, SourceResult};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::wire::{BlockPath, ChunkKey};

const HOST: &str = "server:7070";

fn path(n: u8) -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([n; 32]),
        index: u64::from(n),
    }
}

fn block(len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

fn get(n: u8) -> ExchangeRequest<'static> {
    ExchangeRequest::get(HOST, BlockRequest::new(path(n)))
}

fn get_validated(n: u8, expected: u64) -> ExchangeRequest<'static> {
    ExchangeRequest::get_validated(HOST, BlockRequest::new(path(n)), expected, true)
}

fn secs(s: u64) -> Instant {
    Instant::from_secs(s)
}

// ---- deadlines ----

#[test]
fn dial_deadline_fires_at_exactly_one_second_as_a_hard_failure() {
    let mut pair = Pair::new([]);
    pair.dial = Dial::Blackhole;
    pair.start(get(1)).unwrap();
    pair.run_until(Instant::from_nanos(1_000_000_000 - 1));
    assert!(pair.take_outcome().is_none(), "not a nanosecond early");
    let out = pair.run();
    assert_eq!(pair.now, secs(1));
    assert!(
        matches!(out.ending, Ending::Failed(ExchangeError::DialTimeout(d)) if d == Duration::from_secs(1))
    );
    assert_eq!(out.breaker, BreakerOutcome::HardFailure);
    assert_eq!(out.cooldown, Some(CooldownEntry::Failed));
    assert_eq!(out.connection, ConnectionFate::Close);
}

#[test]
fn silent_peer_is_cut_loose_by_the_response_header_deadline_well_before_the_request_deadline() {
    let mut pair = Pair::new([]);
    pair.dial = Dial::Connect(Duration::from_millis(5));
    pair.server_silent = true;
    let out = pair.exchange(get(1));
    // Request written at connect (5 ms); the header deadline is 10 s after that.
    assert_eq!(pair.now, Instant::from_millis(10_005));
    assert!(pair.now < secs(30));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::ResponseHeaderTimeout(_))
    ));
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
    assert_eq!(out.cooldown, None);
}

#[test]
fn request_deadline_fires_at_exactly_thirty_seconds_for_a_slow_body() {
    let mut pair = Pair::new([]);
    // A head promptly, then a body that never completes.
    pair.script(
        &b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly-some"[..],
        false,
    );
    let out = pair.exchange(get(1));
    assert_eq!(pair.now, secs(30));
    assert!(
        matches!(out.ending, Ending::Failed(ExchangeError::RequestTimeout(d)) if d == Duration::from_secs(30))
    );
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
    assert_eq!(out.connection, ConnectionFate::Close);
}

#[test]
fn disabled_request_timeout_defers_to_the_callers_deadline_as_a_cancellation() {
    let mut pair = Pair::new([]);
    pair.client_config.deadlines.request = RequestTimeout::Caller;
    pair.script(
        &b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly-some"[..],
        false,
    );
    let out = pair.exchange(get(1).with_deadline(secs(45)));
    assert_eq!(
        pair.now,
        secs(45),
        "our 30 s bound is off; the caller's 45 s rules"
    );
    assert!(matches!(out.ending, Ending::Cancelled));
    assert_eq!(out.breaker, BreakerOutcome::Answered);
}

#[test]
fn disabled_request_timeout_without_caller_deadline_sets_no_deadline_after_the_head() {
    let config = ClientConfig {
        deadlines: peerblock_core::client::Deadlines {
            request: RequestTimeout::Caller,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut ex = Exchange::new(Instant::ZERO, &config, get(1), Link::Dial).unwrap();
    assert_eq!(ex.poll_timeout(), Some(secs(1)), "only the dial deadline");
    ex.handle_connected(Instant::ZERO);
    let _ = ex.poll_transmit(Instant::ZERO).unwrap();
    assert_eq!(ex.poll_timeout(), Some(secs(10)));
    ex.handle_input(
        Instant::ZERO,
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
    );
    assert_eq!(ex.poll_timeout(), None);
}

#[test]
fn spurious_and_repeated_timeouts_are_harmless_and_no_stale_deadline_remains() {
    let mut ex =
        Exchange::new(Instant::ZERO, &ClientConfig::default(), get(1), Link::Dial).unwrap();
    ex.handle_timeout(Instant::from_millis(500));
    assert!(ex.poll_event().is_none());
    ex.handle_timeout(secs(1));
    assert!(matches!(ex.poll_event(), Some(ClientEvent::Done(_))));
    ex.handle_timeout(secs(1));
    assert!(
        ex.poll_event().is_none(),
        "the outcome is emitted exactly once"
    );
    assert_eq!(ex.poll_timeout(), None);
    // Time going backwards is clamped: nothing fires early or twice.
    ex.handle_timeout(Instant::ZERO);
    assert!(ex.poll_event().is_none());
}

// ---- get / get_validated length rules ----

#[test]
fn content_length_above_expected_is_rejected_before_any_body_byte() {
    let mut pair = Pair::new([]);
    // Only the head is ever sent: the rejection cannot depend on reading the body.
    pair.script(
        &b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"[..],
        false,
    );
    let out = pair.exchange(get_validated(1, 10));
    assert_eq!(
        pair.now,
        Instant::ZERO,
        "decided at the head, not by a deadline"
    );
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Length(
            LengthError::ContentLengthAboveLimit {
                limit: 10,
                content_length: 100
            }
        ))
    ));
    assert_eq!(out.breaker, BreakerOutcome::HardFailure);
    assert_eq!(pair.stats.validations, 0);
}

#[test]
fn short_body_is_a_hard_length_error_with_no_data_and_no_validation() {
    let mut pair = Pair::new([(path(1), block(9))]);
    let out = pair.exchange(get_validated(1, 10));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Length(LengthError::Short {
            expected: 10,
            received: 9
        }))
    ));
    assert_eq!(out.breaker, BreakerOutcome::HardFailure);
    assert_eq!(pair.stats.validations, 0);
}

#[test]
fn oversized_body_of_unknown_length_is_cut_at_expected_plus_one_bytes() {
    // Once the head is known, the machine takes at most expected + 1 body bytes: the
    // extra byte proves the body too long, and nothing past it is ever read.
    let mut ex = Exchange::new(
        Instant::ZERO,
        &ClientConfig::default(),
        get_validated(1, 10),
        Link::Dial,
    )
    .unwrap();
    ex.handle_connected(Instant::ZERO);
    let _ = ex.poll_transmit(Instant::ZERO).unwrap();
    let head = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
    assert_eq!(ex.handle_input(Instant::ZERO, head), head.len());
    assert!(ex.poll_event().is_none());
    let flood = vec![b'x'; 10_000];
    let mut taken = 0;
    while !ex.is_done() {
        let n = ex.handle_input(Instant::ZERO, &flood[taken..]);
        assert!(n > 0, "stalled");
        taken += n;
    }
    assert_eq!(taken, 11, "read expected + 1 body bytes, no more");
    let Some(ClientEvent::Done(out)) = ex.poll_event() else {
        panic!("no outcome")
    };
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Length(LengthError::Long { limit: 10 }))
    ));
    assert_eq!(out.breaker, BreakerOutcome::HardFailure);
}

#[test]
fn oversized_close_delimited_body_never_reaches_the_validator() {
    let mut pair = Pair::new([]);
    let mut response = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
    response.extend(std::iter::repeat_n(b'x', 10_000));
    pair.script(response, true);
    let out = pair.exchange(get_validated(1, 10));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Length(LengthError::Long { limit: 10 }))
    ));
    assert_eq!(pair.stats.validations, 0);
}

#[test]
fn oversized_chunked_body_is_a_length_error() {
    let mut pair = Pair::new([]);
    pair.script(
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n"[..],
        false,
    );
    let out = pair.exchange(get_validated(1, 10));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Length(_)) | Ending::Failed(ExchangeError::Protocol(_))
    ));
    assert_eq!(out.breaker, BreakerOutcome::HardFailure);
    assert_eq!(pair.stats.validations, 0);
}

#[test]
fn exact_chunked_body_from_an_older_peer_is_accepted() {
    let mut pair = Pair::new([]);
    pair.script(
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n"[..],
        false,
    );
    let out = pair.exchange(get_validated(1, 10));
    assert!(matches!(&out.ending, Ending::Block(b) if &b[..] == b"helloworld"));
}

#[test]
fn validator_runs_once_after_the_exact_length_check_and_its_verdict_decides() {
    let data = block(64);
    let mut pair = Pair::new([(path(1), data.clone())]);
    let out = pair.exchange(get_validated(1, 64));
    assert!(matches!(&out.ending, Ending::Block(b) if *b == data));
    assert_eq!(pair.stats.validations, 1);

    pair.validator = Box::new(|_| false);
    let out = pair.exchange(get_validated(1, 64));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Validation)
    ));
    assert_eq!(out.breaker, BreakerOutcome::HardFailure);
    assert_eq!(pair.stats.validations, 2);
}

#[test]
fn validator_sees_the_exact_body() {
    let data = block(33);
    let expect = data.clone();
    let mut pair = Pair::new([(path(1), data)]);
    pair.validator = Box::new(move |body| body == &expect[..]);
    let out = pair.exchange(get_validated(1, 33));
    assert!(matches!(out.ending, Ending::Block(_)));
}

#[test]
fn misses_http_errors_and_interrupted_bodies_never_reach_the_validator() {
    // Miss.
    let mut pair = Pair::new([]);
    assert!(matches!(
        pair.exchange(get_validated(1, 8)).ending,
        Ending::Miss
    ));
    // HTTP error.
    pair.source.fetch_result = Some(SourceResult::Failed);
    assert!(matches!(
        pair.exchange(get_validated(1, 8)).ending,
        Ending::Failed(ExchangeError::Status(500))
    ));
    // Interrupted body.
    let mut cut = Pair::new([]);
    cut.script(
        &b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nabc"[..],
        true,
    );
    let out = cut.exchange(get_validated(1, 8));
    assert!(matches!(out.ending, Ending::Failed(ExchangeError::Closed)));
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
    assert_eq!(pair.stats.validations + cut.stats.validations, 0);
}

#[test]
fn unbounded_get_returns_the_block_without_validation() {
    let data = block(1000);
    let mut pair = Pair::new([(path(2), data.clone())]);
    let out = pair.exchange(get(2));
    assert!(matches!(&out.ending, Ending::Block(b) if *b == data));
    assert_eq!(out.path, BreakerPath::Data);
    assert_eq!(pair.stats.validations, 0);
}

// ---- one test per classification row ----

#[test]
fn row_block_is_answered() {
    let mut pair = Pair::new([(path(1), block(4))]);
    let out = pair.exchange(get(1));
    assert!(matches!(out.ending, Ending::Block(_)));
    assert_eq!(
        (out.breaker, out.cooldown),
        (BreakerOutcome::Answered, None)
    );
}

#[test]
fn row_miss_is_answered_not_a_failure() {
    let mut pair = Pair::new([]);
    for _ in 0..20 {
        let out = pair.exchange(get(1));
        assert!(matches!(out.ending, Ending::Miss));
        assert_eq!(
            (out.breaker, out.cooldown),
            (BreakerOutcome::Answered, None)
        );
    }
}

fn full_server() -> Pair {
    let admission = AdmissionConfig {
        max_sessions: 1,
        max_sessions_per_source: 1,
        max_requests: 4,
        max_requests_per_session: 2,
        retry_after: Duration::from_secs(60),
        ..AdmissionConfig::default()
    };
    let mut pair = Pair::with_source(
        ServerConfig::new("server", HOST),
        admission,
        Default::default(),
    );
    // Another client holds the only session.
    let _held = pair.admission.open_session(Instant::ZERO, 99).unwrap();
    pair
}

#[test]
fn row_refusal_is_refused_answered_with_cooldown_bounded_by_config() {
    let mut pair = full_server();
    let out = pair.exchange(get(1));
    match &out.ending {
        Ending::Refused(r) => {
            assert_eq!(r.reason, Some(RefusalReason::Sessions));
            // The server asked for 60 s; the client bounds it at 15 s.
            assert_eq!(r.retry_after, Some(Duration::from_secs(15)));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        out.breaker,
        BreakerOutcome::Answered,
        "a refusal is not a failure"
    );
    assert_eq!(
        out.cooldown,
        Some(CooldownEntry::Refused {
            retry_after: Some(Duration::from_secs(15))
        })
    );
    assert_eq!(out.connection, ConnectionFate::Close);
    assert_eq!(
        pair.now,
        Instant::ZERO,
        "refused at once, not after a timeout"
    );
}

#[test]
fn row_refusal_within_the_bound_keeps_the_advertised_time() {
    let mut pair = full_server();
    pair.client_config.max_refusal_cooldown = Duration::from_secs(120);
    let out = pair.exchange(get(1));
    assert_eq!(
        out.cooldown,
        Some(CooldownEntry::Refused {
            retry_after: Some(Duration::from_secs(60))
        })
    );
}

#[test]
fn row_plain_503_without_refusal_header_is_a_soft_failure() {
    let mut pair = Pair::new([]);
    pair.script(
        &b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"[..],
        false,
    );
    let out = pair.exchange(get(1));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Status(503))
    ));
    assert_eq!(
        (out.breaker, out.cooldown),
        (BreakerOutcome::SoftFailure, None)
    );
}

fn relay_pair() -> Pair {
    let mut config = ServerConfig::new("relay", HOST);
    config.relay = Some(RelayConfig::default());
    Pair::with_source(config, AdmissionConfig::default(), Default::default())
}

fn via_origin(n: u8) -> ExchangeRequest<'static> {
    ExchangeRequest::get(
        HOST,
        BlockRequest {
            path: path(n),
            origin: Some("https://origin.example/object?sig=expired"),
            hop: peerblock_core::wire::Hop(0),
        },
    )
}

#[test]
fn row_upstream_refusal_is_an_error_recorded_as_answered() {
    let mut pair = relay_pair();
    pair.source.relay_result = Some(SourceResult::UpstreamRefused { status: 403 });
    for _ in 0..5 {
        let out = pair.exchange(via_origin(1));
        assert!(matches!(
            out.ending,
            Ending::UpstreamRefused { status: 403 }
        ));
        assert!(out.ending.is_error());
        assert_eq!(
            (out.breaker, out.cooldown),
            (BreakerOutcome::Answered, None)
        );
    }
}

#[test]
fn row_genuine_relay_failure_still_blames_the_peer() {
    // The control for the upstream-refusal row: a 500 with no upstream header is soft.
    let mut pair = relay_pair();
    pair.source.relay_result = Some(SourceResult::Failed);
    let out = pair.exchange(via_origin(1));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Status(500))
    ));
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
}

#[test]
fn row_502_without_upstream_status_is_a_soft_failure() {
    let mut pair = Pair::new([]);
    pair.script(
        &b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n"[..],
        false,
    );
    let out = pair.exchange(get(1));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Status(502))
    ));
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
}

#[test]
fn row_caller_cancellation_is_answered() {
    let mut pair = Pair::new([(path(1), block(4))]);
    pair.source.delay = Duration::from_secs(2);
    pair.start(get(1)).unwrap();
    pair.run_until(secs(1));
    pair.cancel();
    let out = pair.take_outcome().expect("cancelled at once");
    assert!(matches!(out.ending, Ending::Cancelled));
    assert_eq!(
        (out.breaker, out.cooldown),
        (BreakerOutcome::Answered, None)
    );
    assert_eq!(
        out.connection,
        ConnectionFate::Close,
        "mid-response: the connection is dirty"
    );
}

#[test]
fn row_dial_failure_is_hard_with_failed_cooldown() {
    let mut pair = Pair::new([]);
    pair.dial = Dial::Fail(Duration::from_millis(3));
    let out = pair.exchange(get(1));
    assert_eq!(pair.now, Instant::from_millis(3));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::DialFailed)
    ));
    assert_eq!(
        (out.breaker, out.cooldown),
        (BreakerOutcome::HardFailure, Some(CooldownEntry::Failed))
    );
}

#[test]
fn row_malformed_response_is_a_hard_protocol_failure() {
    let mut pair = Pair::new([]);
    pair.script(&b"SMTP ready\r\n\r\n"[..], true);
    let out = pair.exchange(get(1));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Protocol(_))
    ));
    assert_eq!(out.breaker, BreakerOutcome::HardFailure);
}

#[test]
fn row_connection_closed_before_any_response_is_soft() {
    let mut pair = Pair::new([]);
    pair.script(&b""[..], true);
    let out = pair.exchange(get(1));
    assert!(matches!(out.ending, Ending::Failed(ExchangeError::Closed)));
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
}

// ---- connection reuse ----

#[test]
fn keep_alive_responses_read_to_the_end_reuse_the_connection() {
    let mut pair = Pair::new([(path(1), block(100))]);
    let first = pair.exchange(get(1));
    assert_eq!(first.connection, ConnectionFate::Reuse);
    let miss = pair.exchange(get(2));
    assert!(matches!(miss.ending, Ending::Miss));
    assert_eq!(miss.connection, ConnectionFate::Reuse);
    let again = pair.exchange(get_validated(1, 100));
    assert!(matches!(again.ending, Ending::Block(_)));
    assert_eq!(pair.stats.dials, 1, "three exchanges, one connection");
}

#[test]
fn connection_close_or_failure_means_no_reuse() {
    let mut pair = Pair::new([]);
    pair.script(
        &b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"[..],
        true,
    );
    let out = pair.exchange(get(1));
    assert!(matches!(out.ending, Ending::Miss));
    assert_eq!(out.connection, ConnectionFate::Close);
    assert!(!pair.has_pooled_connection());

    let mut pair = Pair::new([(path(1), block(10))]);
    let out = pair.exchange(get_validated(1, 11));
    assert!(out.ending.is_error());
    assert_eq!(out.connection, ConnectionFate::Close);
}

#[test]
fn roster_fetch_takes_the_roster_breaker_path() {
    let mut pair = Pair::new([]);
    let out = pair.exchange(ExchangeRequest::roster(HOST, None));
    assert_eq!(out.path, BreakerPath::Roster);
    assert!(matches!(out.ending, Ending::Roster(_)));
}

fn done(ex: &mut Exchange) -> peerblock_core::client::ExchangeOutcome {
    match ex.poll_event() {
        Some(ClientEvent::Done(out)) => out,
        other => panic!("expected an outcome, got {other:?}"),
    }
}

#[test]
fn pooled_connection_closed_before_any_response_byte_asks_for_a_fresh_retry() {
    let config = ClientConfig::default();
    let mut ex = Exchange::new(Instant::ZERO, &config, get(1), Link::Dial).unwrap();
    ex.handle_connected(Instant::ZERO);
    let _ = ex.poll_transmit(Instant::ZERO).unwrap();
    ex.handle_input(
        Instant::ZERO,
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
    );
    let out = done(&mut ex);
    assert_eq!(out.connection, ConnectionFate::Reuse);
    assert!(!out.retry_fresh);
    let conn = ex.take_connection().expect("reusable");
    assert_eq!(conn.exchanges(), 1);
    assert!(ex.take_connection().is_none(), "handed out once");

    // The peer retired the idle connection just as we reused it.
    let mut ex = Exchange::new(Instant::ZERO, &config, get(2), Link::Pooled(conn)).unwrap();
    let _ = ex.poll_transmit(Instant::ZERO).unwrap();
    ex.handle_eof(Instant::ZERO);
    let out = done(&mut ex);
    assert!(matches!(out.ending, Ending::Failed(ExchangeError::Closed)));
    assert!(out.retry_fresh);

    // Control: on a fresh connection the same ending is an ordinary soft failure.
    let mut ex = Exchange::new(Instant::ZERO, &config, get(3), Link::Dial).unwrap();
    ex.handle_connected(Instant::ZERO);
    let _ = ex.poll_transmit(Instant::ZERO).unwrap();
    ex.handle_eof(Instant::ZERO);
    let out = done(&mut ex);
    assert!(!out.retry_fresh);
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
}

#[test]
fn caller_deadline_already_past_cancels_at_once() {
    let config = ClientConfig::default();
    let req = get(1).with_deadline(secs(1));
    let mut ex = Exchange::new(secs(2), &config, req, Link::Dial).unwrap();
    let out = done(&mut ex);
    assert!(matches!(out.ending, Ending::Cancelled));
    assert_eq!(ex.poll_timeout(), None);
}

#[test]
fn stray_bytes_after_a_validated_body_prevent_reuse() {
    let config = ClientConfig::default();
    let mut ex = Exchange::new(Instant::ZERO, &config, get_validated(1, 2), Link::Dial).unwrap();
    ex.handle_connected(Instant::ZERO);
    let _ = ex.poll_transmit(Instant::ZERO).unwrap();
    ex.handle_input(
        Instant::ZERO,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    assert!(matches!(
        ex.poll_event(),
        Some(ClientEvent::Validate { .. })
    ));
    ex.handle_input(Instant::ZERO, b"HTTP/1.1 200 OK\r\n");
    ex.handle_validated(Instant::ZERO, true);
    let out = done(&mut ex);
    assert!(matches!(out.ending, Ending::Block(_)));
    assert_eq!(out.connection, ConnectionFate::Close);
}

#[test]
fn input_before_the_request_is_sent_is_not_taken() {
    let config = ClientConfig::default();
    let mut ex = Exchange::new(Instant::ZERO, &config, get(1), Link::Dial).unwrap();
    ex.handle_connected(Instant::ZERO);
    assert_eq!(ex.handle_input(Instant::ZERO, b"HTTP/1.1"), 0);
}
