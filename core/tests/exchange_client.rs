//! Client exchange machine, end to end through the in-memory pair: deadlines, length
//! rules, validation sequencing, and one test per row of the outcome classification table.

use bytes::Bytes;
use peerblock_core::client::{
    BlockRequest, BreakerOutcome, BreakerPath, ClientConfig, ClientEvent, ClientTimer,
    ConnectionFate, CooldownEntry, DeadlineError, Ending, Exchange, ExchangeConfigError,
    ExchangeError, ExchangeRequest, LengthError, Link, ProtocolError, RequestTimeout,
};
use peerblock_core::http::ResponseError;
use peerblock_core::refusal::RefusalReason;
use peerblock_core::server::{AdmissionConfig, RelayConfig, ServerConfig, SourceResult};
use peerblock_core::time::{Deadline, Duration, Instant};
use peerblock_core::transmit::Close;
use peerblock_core::wire::{BlockPath, ChunkKey};
use peerblock_testkit::pair::{Dial, Pair};

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

/// Takes the request and acknowledges it as fully written at `now`, as a driver whose
/// socket took every byte would.
fn send(ex: &mut Exchange, now: Instant) {
    let t = ex.poll_transmit(now).expect("the request");
    assert!(!t.head.is_empty());
    ex.handle_transmitted(now);
}

fn deadline(at: Instant, timer: ClientTimer) -> Option<Deadline<ClientTimer>> {
    Some(Deadline { at, timer })
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
    assert_eq!(
        ex.poll_timeout(),
        deadline(secs(1), ClientTimer::Dial),
        "only the dial deadline"
    );
    ex.handle_connected(Instant::ZERO);
    send(&mut ex, Instant::ZERO);
    assert_eq!(
        ex.poll_timeout(),
        deadline(secs(10), ClientTimer::ResponseHeader)
    );
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
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
    assert_eq!(pair.stats.validations, 0);
}

#[test]
fn content_length_below_expected_is_rejected_at_the_head_before_any_body_byte() {
    let mut pair = Pair::new([]);
    // Only the head is ever sent: the rejection cannot wait for the body.
    pair.script(&b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"[..], false);
    let out = pair.exchange(get_validated(1, 10));
    assert_eq!(
        pair.now,
        Instant::ZERO,
        "decided at the head, not by a deadline"
    );
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Length(
            LengthError::ContentLengthBelowExpected {
                expected: 10,
                content_length: 9
            }
        ))
    ));
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
    assert_eq!(pair.stats.validations, 0);
}

#[test]
fn short_body_is_a_soft_length_error_with_no_data_and_no_validation() {
    // A close-delimited body: only its end shows it short.
    let mut pair = Pair::new([]);
    let mut response = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
    response.extend(block(9));
    pair.script(response, true);
    let out = pair.exchange(get_validated(1, 10));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Length(LengthError::Short {
            expected: 10,
            received: 9
        }))
    ));
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
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
    send(&mut ex, Instant::ZERO);
    let head = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
    assert_eq!(ex.handle_input(Instant::ZERO, head), head.len());
    assert!(matches!(
        ex.poll_event(),
        Some(ClientEvent::Head { status: 200 })
    ));
    assert!(ex.poll_event().is_none());
    let flood = vec![b'x'; 10_000];
    let mut taken = 0;
    while !ex.is_finished() {
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
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
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
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
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
    assert_eq!(out.breaker, BreakerOutcome::SoftFailure);
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
fn row_malformed_response_is_a_hard_protocol_failure_keeping_the_typed_error() {
    let mut pair = Pair::new([]);
    pair.script(&b"SMTP ready\r\n\r\n"[..], true);
    let out = pair.exchange(get(1));
    assert!(matches!(
        out.ending,
        Ending::Failed(ExchangeError::Protocol(ProtocolError::Http(
            ResponseError::MalformedStatusLine
        )))
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
fn a_reused_connection_counts_every_exchange_completed_on_it() {
    let config = ClientConfig::default();
    let mut link = Link::Dial;
    for n in 1..=3u8 {
        let mut ex = Exchange::new(Instant::ZERO, &config, get(n), link).unwrap();
        if n == 1 {
            ex.handle_connected(Instant::ZERO);
        }
        send(&mut ex, Instant::ZERO);
        ex.handle_input(
            Instant::ZERO,
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        );
        assert_eq!(done(&mut ex).connection, ConnectionFate::Reuse);
        let conn = ex.take_connection().expect("reusable");
        assert_eq!(conn.exchanges(), u64::from(n));
        link = Link::Pooled(conn);
    }
}

#[test]
fn a_response_head_that_arrives_before_the_write_is_acknowledged_arms_no_header_deadline() {
    let config = ClientConfig::default();
    let mut ex = Exchange::new(Instant::ZERO, &config, get(1), Link::Dial).unwrap();
    ex.handle_connected(Instant::ZERO);
    let _t = ex.poll_transmit(Instant::ZERO).expect("the request");
    // A fast peer: its head (and part of the body) come before the driver reports the
    // request written.
    ex.handle_input(
        Instant::ZERO,
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234",
    );
    ex.handle_transmitted(Instant::ZERO);
    let d = ex.poll_timeout().expect("the request deadline runs");
    assert_ne!(d.timer, ClientTimer::ResponseHeader, "the head is here");
}

#[test]
fn a_pooled_connection_retries_fresh_only_if_not_one_response_byte_came() {
    let config = ClientConfig::default();
    let pooled = || {
        let mut ex = sent(&config, 1);
        ex.handle_input(
            Instant::ZERO,
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        );
        let _ = done(&mut ex);
        ex.take_connection().expect("reusable")
    };
    // An empty read is not a response byte: still a fresh retry.
    let mut ex = Exchange::new(Instant::ZERO, &config, get(2), Link::Pooled(pooled())).unwrap();
    send(&mut ex, Instant::ZERO);
    assert_eq!(ex.handle_input(Instant::ZERO, b""), 0);
    ex.handle_eof(Instant::ZERO);
    assert!(done(&mut ex).retry_fresh);
    // Part of a response came, then the close: the peer answered and broke off, which a
    // retry on a fresh connection would not explain away.
    let mut ex = Exchange::new(Instant::ZERO, &config, get(3), Link::Pooled(pooled())).unwrap();
    send(&mut ex, Instant::ZERO);
    ex.handle_input(Instant::ZERO, b"HTTP/1.1 200 OK\r\nContent-Le");
    ex.handle_eof(Instant::ZERO);
    let out = done(&mut ex);
    assert!(matches!(out.ending, Ending::Failed(_)));
    assert!(!out.retry_fresh);
}

#[test]
fn the_peer_closing_while_the_request_is_being_sent_ends_the_exchange_closed() {
    let config = ClientConfig::default();
    let mut ex = Exchange::new(Instant::ZERO, &config, get(1), Link::Dial).unwrap();
    ex.handle_connected(Instant::ZERO);
    ex.handle_eof(Instant::ZERO);
    let out = done(&mut ex);
    assert!(matches!(out.ending, Ending::Failed(ExchangeError::Closed)));
    assert_eq!(out.connection, ConnectionFate::Close);
}

#[test]
fn a_broken_body_after_a_404_head_is_still_a_miss() {
    let mut ex = sent(&ClientConfig::default(), 1);
    // The status decided the answer; the truncated error body costs only the connection.
    ex.handle_input(
        Instant::ZERO,
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n\r\nabc",
    );
    ex.handle_eof(Instant::ZERO);
    let out = done(&mut ex);
    assert!(matches!(out.ending, Ending::Miss), "{:?}", out.ending);
    assert_eq!(out.connection, ConnectionFate::Close);
}

#[test]
fn a_404_that_says_corrupt_is_a_corrupt_copy_answered_and_any_other_reason_a_miss() {
    for (reason, corrupt) in [
        ("corrupt", true),
        ("CORRUPT", true),
        ("gone", false),
        ("", false),
    ] {
        let mut ex = sent(&ClientConfig::default(), 1);
        let head = format!(
            "HTTP/1.1 404 Not Found\r\nX-Peerblock-Miss: {reason}\r\nContent-Length: 0\r\n\r\n"
        );
        ex.handle_input(Instant::ZERO, head.as_bytes());
        let out = done(&mut ex);
        if corrupt {
            assert!(
                matches!(out.ending, Ending::Corrupt),
                "{reason}: {:?}",
                out.ending
            );
        } else {
            assert!(
                matches!(out.ending, Ending::Miss),
                "{reason}: {:?}",
                out.ending
            );
        }
        assert_eq!(out.breaker, BreakerOutcome::Answered, "{reason}");
        assert_eq!(out.connection, ConnectionFate::Reuse, "{reason}");
    }
}

#[test]
fn the_hop_header_is_sent_only_above_hop_zero() {
    let config = ClientConfig::default();
    let head_for = |hop: u32| {
        let block = BlockRequest {
            hop: peerblock_core::wire::Hop(hop),
            ..BlockRequest::new(path(1))
        };
        let mut ex = Exchange::new(
            Instant::ZERO,
            &config,
            ExchangeRequest::get(HOST, block),
            Link::Dial,
        )
        .unwrap();
        ex.handle_connected(Instant::ZERO);
        let t = ex.poll_transmit(Instant::ZERO).expect("the request");
        String::from_utf8(t.head.to_vec()).unwrap()
    };
    let first = head_for(0);
    assert!(!first.contains("X-DART-Hop"), "{first}");
    for hop in [1, 2] {
        let relayed = head_for(hop);
        assert!(
            relayed.contains(&format!("X-DART-Hop: {hop}\r\n")),
            "{relayed}"
        );
    }
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

/// The outcome, skipping the head event that may precede it.
fn done(ex: &mut Exchange) -> peerblock_core::client::ExchangeOutcome {
    loop {
        match ex.poll_event() {
            Some(ClientEvent::Head { .. }) => continue,
            Some(ClientEvent::Done(out)) => return out,
            other => panic!("expected an outcome, got {other:?}"),
        }
    }
}

/// An exchange for block `n` on a fresh connection, its request written.
fn sent(config: &ClientConfig, n: u8) -> Exchange {
    let mut ex = Exchange::new(Instant::ZERO, config, get(n), Link::Dial).unwrap();
    ex.handle_connected(Instant::ZERO);
    send(&mut ex, Instant::ZERO);
    ex
}

#[test]
fn pooled_connection_closed_before_any_response_byte_asks_for_a_fresh_retry() {
    let config = ClientConfig::default();
    let mut ex = Exchange::new(Instant::ZERO, &config, get(1), Link::Dial).unwrap();
    ex.handle_connected(Instant::ZERO);
    send(&mut ex, Instant::ZERO);
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
    send(&mut ex, Instant::ZERO);
    ex.handle_eof(Instant::ZERO);
    let out = done(&mut ex);
    assert!(matches!(out.ending, Ending::Failed(ExchangeError::Closed)));
    assert!(out.retry_fresh);

    // Control: on a fresh connection the same ending is an ordinary soft failure.
    let mut ex = Exchange::new(Instant::ZERO, &config, get(3), Link::Dial).unwrap();
    ex.handle_connected(Instant::ZERO);
    send(&mut ex, Instant::ZERO);
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
    send(&mut ex, Instant::ZERO);
    ex.handle_input(
        Instant::ZERO,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    assert!(matches!(
        ex.poll_event(),
        Some(ClientEvent::Head { status: 200 })
    ));
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

// ---- the driving contract ----

fn receiving() -> Exchange {
    let mut ex =
        Exchange::new(Instant::ZERO, &ClientConfig::default(), get(1), Link::Dial).unwrap();
    ex.handle_connected(Instant::ZERO);
    ex
}

#[test]
fn the_request_is_one_keep_open_transmit_without_status() {
    let mut ex = receiving();
    let t = ex.poll_transmit(Instant::ZERO).expect("the request");
    assert!(t.head.starts_with(b"GET /peer/v1/"), "{:?}", t.head);
    assert!(t.body.is_empty());
    assert_eq!(t.status, None);
    assert_eq!(t.refusal, None);
    assert_eq!(t.close, Close::KeepOpen);
    assert!(ex.poll_transmit(Instant::ZERO).is_none(), "handed out once");
}

#[test]
fn response_header_deadline_starts_at_the_acknowledgement_not_at_the_take() {
    let mut ex = receiving();
    let _ = ex.poll_transmit(secs(1)).unwrap();
    assert_eq!(
        ex.poll_timeout(),
        deadline(secs(30), ClientTimer::Request),
        "no header deadline while the request is still being written"
    );
    ex.handle_transmitted(secs(4));
    assert_eq!(
        ex.poll_timeout(),
        deadline(secs(14), ClientTimer::ResponseHeader)
    );
    // A repeated acknowledgement changes nothing.
    ex.handle_transmitted(secs(6));
    assert_eq!(
        ex.poll_timeout(),
        deadline(secs(14), ClientTimer::ResponseHeader)
    );
    ex.handle_timeout(Instant::from_nanos(14_000_000_000 - 1));
    assert!(ex.poll_event().is_none());
    ex.handle_timeout(secs(14));
    assert!(matches!(
        done(&mut ex).ending,
        Ending::Failed(ExchangeError::ResponseHeaderTimeout(_))
    ));
}

#[test]
fn an_unacknowledged_request_never_lets_the_connection_be_reused() {
    let mut ex = receiving();
    let _ = ex.poll_transmit(Instant::ZERO).unwrap();
    ex.handle_input(
        Instant::ZERO,
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
    );
    let out = done(&mut ex);
    assert!(matches!(out.ending, Ending::Miss));
    assert_eq!(out.connection, ConnectionFate::Close);
    assert!(ex.take_connection().is_none());
}

#[test]
fn head_event_is_emitted_once_before_the_outcome() {
    let mut ex = receiving();
    send(&mut ex, Instant::ZERO);
    ex.handle_input(Instant::ZERO, b"HTTP/1.1 100 Continue\r\n\r\n");
    assert!(ex.poll_event().is_none(), "an interim head is no progress");
    ex.handle_input(
        Instant::ZERO,
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab",
    );
    assert!(matches!(
        ex.poll_event(),
        Some(ClientEvent::Head { status: 200 })
    ));
    assert!(ex.poll_event().is_none(), "body still incomplete");
    ex.handle_input(Instant::ZERO, b"cd");
    assert!(matches!(ex.poll_event(), Some(ClientEvent::Done(_))));
    assert!(ex.poll_event().is_none());
}

#[test]
fn read_buf_is_never_an_empty_window() {
    let mut ex = Exchange::new(
        Instant::ZERO,
        &ClientConfig::default(),
        get_validated(1, 2),
        Link::Dial,
    )
    .unwrap();
    assert!(ex.read_buf().is_none(), "dialing");
    ex.handle_connected(Instant::ZERO);
    assert!(ex.read_buf().is_none(), "request not handed out");
    send(&mut ex, Instant::ZERO);
    ex.handle_input(
        Instant::ZERO,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    // Validating: stray bytes are buffered (no reuse) until the buffer is full; the
    // window shrinks, and is withheld rather than offered empty.
    let mut windows = 0;
    while let Some(w) = ex.read_buf() {
        assert!(!w.is_empty(), "an empty window reads as end of stream");
        let n = w.len();
        w.fill(b'x');
        assert_eq!(ex.handle_read(Instant::ZERO, n), n);
        windows += 1;
        assert!(windows < 10_000, "the buffer is bounded");
    }
    assert!(windows > 0);
    assert!(
        !ex.is_finished(),
        "withheld because full, not because finished"
    );
    ex.cancel(Instant::ZERO);
    assert!(ex.read_buf().is_none(), "finished");
}

#[test]
fn handle_read_and_handle_input_agree_in_every_state() {
    // The same bytes through both paths return the same counts in every state:
    // dialing, sending, receiving, validating and finished.
    let response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let stray = b"xyz";
    let run = |window: bool| {
        let mut ex = Exchange::new(
            Instant::ZERO,
            &ClientConfig::default(),
            get_validated(1, 2),
            Link::Dial,
        )
        .unwrap();
        let feed = |ex: &mut Exchange, data: &[u8]| -> usize {
            if !window {
                return ex.handle_input(Instant::ZERO, data);
            }
            match ex.read_buf() {
                Some(w) => {
                    let n = w.len().min(data.len());
                    w[..n].copy_from_slice(&data[..n]);
                    ex.handle_read(Instant::ZERO, n)
                }
                // No window offered: report the bytes read elsewhere by count.
                None => ex.handle_read(Instant::ZERO, data.len()),
            }
        };
        let mut counts = vec![feed(&mut ex, response)];
        ex.handle_connected(Instant::ZERO);
        counts.push(feed(&mut ex, response));
        send(&mut ex, Instant::ZERO);
        counts.push(feed(&mut ex, response));
        counts.push(feed(&mut ex, stray)); // validating
        while let Some(e) = ex.poll_event() {
            if let ClientEvent::Validate { .. } = e {
                ex.handle_validated(Instant::ZERO, true);
            }
        }
        assert!(ex.is_finished());
        counts.push(feed(&mut ex, stray));
        counts
    };
    let slice = run(false);
    assert_eq!(slice, vec![0, 0, response.len(), stray.len(), stray.len()]);
    assert_eq!(run(true), slice);
}

#[test]
fn handle_read_after_the_outcome_discards_and_reports_every_byte_taken() {
    let mut ex = receiving();
    ex.cancel(Instant::ZERO);
    assert!(ex.is_finished());
    assert_eq!(ex.handle_read(Instant::ZERO, 7), 7);
    assert_eq!(ex.handle_input(Instant::ZERO, b"1234567"), 7);
}

#[test]
fn cancel_is_idempotent_and_emits_one_outcome() {
    let mut ex = receiving();
    ex.cancel(Instant::ZERO);
    ex.cancel(secs(1));
    assert!(matches!(done(&mut ex).ending, Ending::Cancelled));
    assert!(ex.poll_event().is_none());
    assert!(ex.is_finished());
}

#[test]
fn poll_timeout_names_the_earliest_timer_and_ties_go_to_the_caller() {
    let req = get(1).with_deadline(secs(1));
    let ex = Exchange::new(Instant::ZERO, &ClientConfig::default(), req, Link::Dial).unwrap();
    // Dial (1 s) and the caller's deadline (1 s) tie: the caller's wins, never charged.
    assert_eq!(ex.poll_timeout(), deadline(secs(1), ClientTimer::Caller));
}

#[test]
fn new_rejects_a_zero_deadline_naming_the_field() {
    let mut config = ClientConfig::default();
    config.deadlines.dial = Duration::ZERO;
    let err = Exchange::new(Instant::ZERO, &config, get(1), Link::Dial).unwrap_err();
    assert_eq!(
        err,
        ExchangeConfigError::Deadline(DeadlineError::Zero { field: "dial" })
    );
    assert!(err.to_string().contains("`dial`"), "{err}");
}

#[test]
fn new_rejects_an_unsendable_header_value() {
    let bad = ExchangeRequest::get("host\r\nX-Evil: 1", BlockRequest::new(path(1)));
    let err = Exchange::new(Instant::ZERO, &ClientConfig::default(), bad, Link::Dial).unwrap_err();
    assert!(matches!(err, ExchangeConfigError::Request(_)), "{err:?}");
}

/// Found by the `exchange` fuzz target: a `Connection: close` response leaves the decoder
/// closed while the validator runs; bytes read then are discarded, so the window lent for
/// them must not grow the buffer past its documented bound.
#[test]
fn read_buf_stays_within_the_buffer_bound_while_validating_a_closing_response() {
    use peerblock_core::http::RESPONSE_BUFFER_BYTES;
    let now = Instant::ZERO;
    let request = ExchangeRequest::get_validated(HOST, BlockRequest::new(path(1)), 3, true);
    let mut ex = Exchange::new(now, &ClientConfig::default(), request, Link::Dial).unwrap();
    ex.handle_connected(now);
    assert!(ex.poll_transmit(now).is_some());
    ex.handle_transmitted(now);
    let response = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";
    assert_eq!(ex.handle_input(now, response), response.len());
    assert!(matches!(
        ex.poll_event(),
        Some(ClientEvent::Head { status: 200 })
    ));
    assert!(matches!(
        ex.poll_event(),
        Some(ClientEvent::Validate { .. })
    ));
    let window = ex.read_buf().map_or(0, |w| w.len());
    assert!(
        (1..=RESPONSE_BUFFER_BYTES).contains(&window),
        "read_buf lent {window} bytes while validating"
    );
}
