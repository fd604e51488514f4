//! Server connection machine: every status path, hop validation, admission at each limit,
//! explicit refusal, budgets released on every path, pipelining order, relay decisions.

use std::sync::Arc;

use bytes::Bytes;
use peerblock_core::refusal::{self, Refusal, RefusalReason};
use peerblock_core::server::{
    Admission, AdmissionConfig, RateLimit, RelayConfig, RequestId, ServerConfig, ServerConnection,
    ServerEvent, SourceRequest, SourceResult, DEFAULT_IDLE_TIMEOUT,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::transmit::{Close, Transmit};
use peerblock_core::wire::{BlockPath, ChunkKey, Hop};

const T0: Instant = Instant::ZERO;

fn path(n: u8) -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([n; 32]),
        index: u64::from(n),
    }
}

fn get(p: BlockPath, extra: &str) -> Vec<u8> {
    format!("GET {p} HTTP/1.1\r\nHost: s\r\n{extra}\r\n").into_bytes()
}

fn config() -> Arc<ServerConfig> {
    Arc::new(ServerConfig::new("node-a", "10.0.0.1:7070"))
}

fn relay_config(identity_ok: bool) -> Arc<ServerConfig> {
    let mut c = ServerConfig::new("node-a", "10.0.0.1:7070");
    c.relay = Some(RelayConfig {
        max_hop: 3,
        max_block_index: 1000,
    });
    c.identity = Arc::new(move |_: &str, _: &[u8], _: u64| identity_ok);
    Arc::new(c)
}

fn admission(c: AdmissionConfig) -> Admission<u32> {
    Admission::new(c).unwrap()
}

fn accept(
    adm: &mut Admission<u32>,
    source: u32,
    config: Arc<ServerConfig>,
) -> ServerConnection<u32> {
    let c = ServerConnection::accept(T0, adm, source, config).expect("valid config");
    assert_eq!(c.refused(), None, "refused");
    c
}

/// Feeds `data` as a driver does: the bytes, then admission if requests wait for it.
fn input(conn: &mut ServerConnection<u32>, adm: &mut Admission<u32>, data: &[u8]) -> usize {
    input_at(conn, adm, T0, data)
}

fn input_at(
    conn: &mut ServerConnection<u32>,
    adm: &mut Admission<u32>,
    now: Instant,
    data: &[u8],
) -> usize {
    let taken = conn.handle_input(now, data);
    if conn.needs_admission() {
        conn.handle_admission(now, adm);
    }
    taken
}

/// The events that ask the application something (fetch, relay, roster).
fn asks(events: &[ServerEvent]) -> Vec<&ServerEvent> {
    events
        .iter()
        .filter(|e| {
            matches!(
                e,
                ServerEvent::Fetch { .. } | ServerEvent::Relay { .. } | ServerEvent::Roster { .. }
            )
        })
        .collect()
}

fn events(conn: &mut ServerConnection<u32>) -> Vec<ServerEvent> {
    std::iter::from_fn(|| conn.poll_event()).collect()
}

fn fetch_ids(events: &[ServerEvent]) -> Vec<(RequestId, SourceRequest)> {
    events
        .iter()
        .filter_map(|e| match e {
            ServerEvent::Fetch { id, request } => Some((*id, request.clone())),
            _ => None,
        })
        .collect()
}

/// Drains transmits, acknowledging each as written.
fn transmits(conn: &mut ServerConnection<u32>, adm: &mut Admission<u32>) -> Vec<Transmit> {
    let mut out = Vec::new();
    while let Some(t) = conn.poll_transmit(T0) {
        out.push(t);
        conn.handle_transmitted(T0, adm);
    }
    out
}

fn head(t: &Transmit) -> String {
    String::from_utf8(t.head.to_vec()).unwrap()
}

/// One request on a fresh connection; the source answers `result` if asked.
fn serve_one(
    config: Arc<ServerConfig>,
    request: &[u8],
    result: SourceResult,
) -> (Vec<ServerEvent>, Vec<Transmit>, Admission<u32>) {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config);
    assert_eq!(input(&mut conn, &mut adm, request), request.len());
    let evs = events(&mut conn);
    for (id, _) in fetch_ids(&evs) {
        conn.handle_source(T0, &mut adm, id, result.clone())
            .unwrap();
    }
    let ts = transmits(&mut conn, &mut adm);
    conn.close(T0, &mut adm);
    (evs, ts, adm)
}

fn assert_released(adm: &Admission<u32>) {
    assert_eq!(adm.sessions(), 0, "session slot leaked");
    assert_eq!(adm.requests(), 0, "request slot leaked");
    assert_eq!(adm.inflight_bytes(), 0, "byte budget leaked");
}

// ---- status paths ----

#[test]
fn found_block_is_200_with_content_length_node_and_the_same_bytes() {
    let block = Bytes::from_static(b"0123456789");
    let (evs, ts, adm) = serve_one(
        config(),
        &get(path(1), ""),
        SourceResult::Found(block.clone()),
    );
    assert_eq!(fetch_ids(&evs).len(), 1);
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 200 OK\r\n"), "{h}");
    assert!(h.contains("Content-Length: 10\r\n"), "{h}");
    assert!(h.contains("X-DART-Node: node-a\r\n"), "{h}");
    assert_eq!(ts[0].body, block);
    assert_eq!(
        ts[0].body.as_ptr(),
        block.as_ptr(),
        "served without copying"
    );
    assert_released(&adm);
}

#[test]
fn an_external_block_is_framed_like_a_found_one_with_its_bytes_left_to_the_driver() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    let request = get(path(1), "");
    input(&mut conn, &mut adm, &request);
    let evs = events(&mut conn);
    let (id, _) = fetch_ids(&evs)[0].clone();
    conn.handle_source(T0, &mut adm, id, SourceResult::External { len: 10 })
        .unwrap();
    assert_eq!(adm.inflight_bytes(), 10, "reserved like a found block");
    let t = conn.poll_transmit(T0).expect("the response");
    let h = head(&t);
    assert!(h.starts_with("HTTP/1.1 200 OK\r\n"), "{h}");
    assert!(h.contains("Content-Length: 10\r\n"), "{h}");
    assert!(t.body.is_empty(), "the driver sends the bytes itself");
    assert!(t.block);
    assert_eq!(
        t.external,
        Some(peerblock_core::transmit::External {
            request: id,
            len: 10
        })
    );
    conn.handle_transmitted(T0, &mut adm);
    assert_eq!(adm.inflight_bytes(), 0, "released once written");
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn an_external_block_over_the_byte_budget_is_refused_like_a_found_one() {
    let mut adm = admission(AdmissionConfig {
        max_inflight_bytes_per_source: 8,
        max_inflight_bytes: 8,
        ..AdmissionConfig::default()
    });
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let evs = events(&mut conn);
    let (id, _) = fetch_ids(&evs)[0].clone();
    conn.handle_source(T0, &mut adm, id, SourceResult::External { len: 9 })
        .unwrap();
    let t = conn.poll_transmit(T0).expect("the refusal");
    assert_eq!(t.status, Some(503));
    assert_eq!(t.external, None, "a refusal carries no external body");
    conn.close(T0, &mut adm);
}

#[test]
fn only_a_block_response_is_marked_as_a_block() {
    let (_, found, _) = serve_one(
        config(),
        &get(path(1), ""),
        SourceResult::Found(Bytes::from_static(b"block")),
    );
    assert!(found[0].block, "a 200 to a block request carries a block");
    let (_, miss, _) = serve_one(config(), &get(path(1), ""), SourceResult::Miss);
    assert!(!miss[0].block, "a 404's error body is not a block");
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    let roster = b"GET /peer/v1/roster HTTP/1.1\r\nHost: s\r\n\r\n";
    input(&mut conn, &mut adm, roster);
    for e in events(&mut conn) {
        if let ServerEvent::Roster { id, .. } = e {
            let table = peerblock_core::roster::Roster {
                epoch: 0,
                epoch_sig: None,
                members: Vec::new(),
            };
            conn.handle_roster(T0, id, &table).unwrap();
        }
    }
    let ts = transmits(&mut conn, &mut adm);
    assert_eq!(ts[0].status, Some(200));
    assert!(!ts[0].block, "a roster body is not a block");
}

#[test]
fn miss_is_a_clean_404() {
    let (_, ts, _) = serve_one(config(), &get(path(1), ""), SourceResult::Miss);
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 404 "), "{h}");
    assert!(h.contains("X-DART-Node: node-a"));
    assert_eq!(ts[0].close, Close::KeepOpen);
}

#[test]
fn a_corrupt_copy_is_a_404_that_says_corrupt_and_keeps_the_connection() {
    let (_, ts, adm) = serve_one(config(), &get(path(1), ""), SourceResult::Corrupt);
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 404 "), "{h}");
    assert!(h.contains("X-Peerblock-Miss: corrupt\r\n"), "{h}");
    assert!(h.contains("X-DART-Node: node-a"), "{h}");
    assert_eq!(ts[0].close, Close::KeepOpen);
    assert!(!ts[0].block);
    let (_, miss, _) = serve_one(config(), &get(path(1), ""), SourceResult::Miss);
    assert!(
        !head(&miss[0]).contains("X-Peerblock-Miss"),
        "a plain miss carries no reason"
    );
    assert_released(&adm);
}

#[test]
fn source_error_is_500() {
    let (_, ts, _) = serve_one(config(), &get(path(1), ""), SourceResult::Failed);
    assert!(head(&ts[0]).starts_with("HTTP/1.1 500 "));
}

#[test]
fn upstream_refusal_is_502_with_the_upstream_status() {
    let (_, ts, _) = serve_one(
        config(),
        &get(path(1), ""),
        SourceResult::UpstreamRefused { status: 403 },
    );
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 502 "), "{h}");
    assert!(h.contains("X-DART-Upstream-Status: 403\r\n"), "{h}");
}

#[test]
fn an_upstream_status_outside_100_to_999_is_a_500_not_a_502() {
    for status in [0, 99, 1000, u16::MAX] {
        let (_, ts, _) = serve_one(
            config(),
            &get(path(1), ""),
            SourceResult::UpstreamRefused { status },
        );
        let h = head(&ts[0]);
        assert!(h.starts_with("HTTP/1.1 500 "), "status {status}: {h}");
        assert!(
            !h.contains("X-DART-Upstream-Status"),
            "status {status}: {h}"
        );
    }
    for status in [100, 999] {
        let (_, ts, _) = serve_one(
            config(),
            &get(path(1), ""),
            SourceResult::UpstreamRefused { status },
        );
        assert!(head(&ts[0]).starts_with("HTTP/1.1 502 "), "status {status}");
    }
}

#[test]
fn malformed_path_is_400_without_invoking_the_source() {
    let (evs, ts, _) = serve_one(
        config(),
        b"GET /peer/v1/block/zz/1 HTTP/1.1\r\nHost: s\r\n\r\n",
        SourceResult::Miss,
    );
    assert!(asks(&evs).is_empty(), "source invoked: {evs:?}");
    assert!(head(&ts[0]).starts_with("HTTP/1.1 400 "));
}

#[test]
fn invalid_hop_is_400_and_the_source_is_never_invoked() {
    for hop in ["-1", "+1", "-0", "abc", "", "99999999999", "1, 2"] {
        let (evs, ts, adm) = serve_one(
            config(),
            &get(path(1), &format!("X-DART-Hop: {hop}\r\n")),
            SourceResult::Miss,
        );
        assert!(asks(&evs).is_empty(), "hop {hop:?} invoked the source");
        assert!(head(&ts[0]).starts_with("HTTP/1.1 400 "), "hop {hop:?}");
        assert_released(&adm);
    }
    let (evs, _, _) = serve_one(
        config(),
        &get(path(1), "X-DART-Hop: 1\r\nX-DART-Hop: 2\r\n"),
        SourceResult::Miss,
    );
    assert!(asks(&evs).is_empty(), "duplicate hop invoked the source");
}

#[test]
fn any_non_negative_hop_is_accepted_at_the_wire_layer() {
    for hop in ["0", "3", "4", "4294967295"] {
        let (evs, ts, _) = serve_one(
            config(),
            &get(path(1), &format!("X-DART-Hop: {hop}\r\n")),
            SourceResult::Miss,
        );
        assert_eq!(fetch_ids(&evs).len(), 1, "hop {hop}");
        assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
    }
}

#[test]
fn non_get_is_405_and_unknown_path_is_404() {
    let (evs, ts, _) = serve_one(
        config(),
        format!(
            "POST {} HTTP/1.1\r\nHost: s\r\nContent-Length: 0\r\n\r\n",
            path(1)
        )
        .as_bytes(),
        SourceResult::Miss,
    );
    assert!(asks(&evs).is_empty());
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 405 "), "{h}");
    assert!(h.contains("Allow: GET"));
    let (evs, ts, _) = serve_one(
        config(),
        b"GET /metrics HTTP/1.1\r\nHost: s\r\n\r\n",
        SourceResult::Miss,
    );
    assert!(asks(&evs).is_empty());
    assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
}

#[test]
fn oversized_request_head_is_431_and_closes() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    let mut req = get(path(1), &format!("X-Pad: {}\r\n", "a".repeat(9000)));
    req.truncate(req.len()); // complete head, over the 8 KiB bound
    let mut offered = &req[..];
    while !offered.is_empty() {
        let n = input(&mut conn, &mut adm, offered);
        if n == 0 {
            break;
        }
        offered = &offered[n..];
    }
    let ts = transmits(&mut conn, &mut adm);
    assert!(
        head(&ts[0]).starts_with("HTTP/1.1 431 "),
        "{}",
        head(&ts[0])
    );
    assert_eq!(ts[0].close, Close::Linger, "431 ends the connection");
    assert!(!conn.is_finished(), "lingers until the peer closes");
    conn.handle_eof(T0);
    assert!(conn.is_finished());
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn source_result_is_obtained_before_any_success_byte() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    assert!(
        conn.poll_transmit(T0).is_none(),
        "nothing may be sent before the source answers"
    );
    conn.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from_static(b"x")),
    )
    .unwrap();
    assert!(conn.poll_transmit(T0).is_some());
}

#[test]
fn answering_an_unknown_request_is_a_usage_error() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    assert!(
        conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
            .is_err(),
        "answered twice"
    );
}

// ---- pipelining ----

#[test]
fn pipelined_requests_are_answered_in_request_order() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    let mut both = get(path(1), "");
    both.extend(get(path(2), ""));
    input(&mut conn, &mut adm, &both);
    let ids = fetch_ids(&events(&mut conn));
    assert_eq!(ids.len(), 2);
    // The second answers first; it must wait for the first.
    conn.handle_source(
        T0,
        &mut adm,
        ids[1].0,
        SourceResult::Found(Bytes::from_static(b"second")),
    )
    .unwrap();
    assert!(conn.poll_transmit(T0).is_none());
    conn.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from_static(b"first")),
    )
    .unwrap();
    let ts = transmits(&mut conn, &mut adm);
    assert_eq!(ts[0].body, Bytes::from_static(b"first"));
    assert_eq!(ts[1].body, Bytes::from_static(b"second"));
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn pipelining_depth_is_bounded_per_session_by_back_pressure_not_refusal() {
    let mut adm = admission(AdmissionConfig::default()); // 2 per session
    let mut conn = accept(&mut adm, 1, config());
    let mut three = get(path(1), "");
    three.extend(get(path(2), ""));
    three.extend(get(path(3), ""));
    input(&mut conn, &mut adm, &three);
    let first = fetch_ids(&events(&mut conn));
    assert_eq!(first.len(), 2, "the third waits in the buffer");
    assert_eq!(adm.requests(), 2);
    conn.handle_source(T0, &mut adm, first[0].0, SourceResult::Miss)
        .unwrap();
    let _ = conn.poll_transmit(T0).unwrap();
    conn.handle_transmitted(T0, &mut adm);
    let third = fetch_ids(&events(&mut conn));
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].1.path, path(3));
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn a_response_handed_out_and_not_yet_acknowledged_still_counts_toward_the_depth() {
    let mut adm = admission(AdmissionConfig::default()); // 2 per session
    let mut conn = accept(&mut adm, 1, config());
    let mut two = get(path(1), "");
    two.extend(get(path(2), ""));
    input(&mut conn, &mut adm, &two);
    let first = fetch_ids(&events(&mut conn));
    assert_eq!(first.len(), 2);
    conn.handle_source(T0, &mut adm, first[0].0, SourceResult::Miss)
        .unwrap();
    let _written = conn.poll_transmit(T0).expect("the first response");
    // One response on its way (unacknowledged) and one request in progress: the depth is
    // reached, so a third request waits in the buffer.
    input(&mut conn, &mut adm, &get(path(3), ""));
    assert!(fetch_ids(&events(&mut conn)).is_empty(), "the third waits");
    conn.handle_transmitted(T0, &mut adm);
    let third = fetch_ids(&events(&mut conn));
    assert_eq!(third.len(), 1, "acknowledged: the third begins");
    assert_eq!(third[0].1.path, path(3));
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

/// A connection on an admission whose rate bucket (`limits.rate`, one token) its first
/// request has just spent: its next request is refused with `rate`.
fn bucket_spent(limits: AdmissionConfig) -> (Admission<u32>, ServerConnection<u32>) {
    let mut adm = admission(AdmissionConfig {
        rate: Some(RateLimit {
            per_second: 1,
            burst: 1,
        }),
        ..limits
    });
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    let _ = transmits(&mut conn, &mut adm);
    (adm, conn)
}

#[test]
fn requests_decoded_behind_a_refused_one_are_dropped_unanswered() {
    let (mut adm, mut conn) = bucket_spent(AdmissionConfig {
        max_requests_per_session: 3,
        ..AdmissionConfig::default()
    });
    // The bucket is empty: the first of these is refused, and the refusal ends the
    // connection, so the two behind it (a roster request, which the bucket does not
    // limit, and a block) are neither asked of the driver nor answered.
    let mut three = get(path(2), "");
    three.extend(b"GET /peer/v1/roster HTTP/1.1\r\nHost: s\r\n\r\n");
    three.extend(get(path(4), ""));
    input(&mut conn, &mut adm, &three);
    assert_eq!(events(&mut conn), [], "nothing asked");
    let ts = transmits(&mut conn, &mut adm);
    assert_eq!(ts.len(), 1, "one answer, the refusal");
    assert!(head(&ts[0]).starts_with("HTTP/1.1 503 "));
    assert_eq!(ts[0].close, Close::Linger);
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn once_a_refusal_is_queued_requests_already_buffered_are_never_decoded() {
    let (mut adm, mut conn) = bucket_spent(AdmissionConfig::default());
    // Depth 2: the first two of these are decoded, the first refused (the bucket is
    // empty) and the second dropped behind it; the third waits in the decoder's buffer,
    // though the depth would have room for it.
    let mut three = get(path(2), "");
    three.extend(get(path(3), ""));
    three.extend(get(path(4), ""));
    assert_eq!(conn.handle_input(T0, &three), three.len());
    assert!(conn.needs_admission());
    conn.handle_admission(T0, &mut adm);
    assert!(events(&mut conn).is_empty(), "refused");
    // From here on nothing is decoded: no request ever waits for admission again, not
    // even when the peer's end of stream asks for what is buffered to be decoded.
    assert!(!conn.needs_admission());
    conn.handle_eof(T0);
    assert!(
        !conn.needs_admission(),
        "the buffered requests stay undecoded"
    );
    let t = conn.poll_transmit(T0).expect("the 503");
    assert!(head(&t).starts_with("HTTP/1.1 503 "));
    conn.handle_transmitted(T0, &mut adm);
    assert!(!conn.needs_admission());
    assert!(conn.poll_transmit(T0).is_none());
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

/// Rule: the pipelining depth served at once is the admission's configured
/// `max_requests_per_session`, whatever it is (not the default of 2); the rest wait.
#[test]
fn pipelining_depth_follows_the_configured_requests_per_session() {
    for depth in [1usize, 3] {
        let mut adm = admission(AdmissionConfig {
            max_requests_per_session: depth,
            ..AdmissionConfig::default()
        });
        let mut conn = accept(&mut adm, 1, config());
        let mut four = Vec::new();
        for n in 1..=4 {
            four.extend(get(path(n), ""));
        }
        input(&mut conn, &mut adm, &four);
        let first = fetch_ids(&events(&mut conn));
        assert_eq!(
            first.len(),
            depth,
            "depth {depth}: the rest wait in the buffer"
        );
        assert_eq!(adm.requests(), depth);
        conn.handle_source(T0, &mut adm, first[0].0, SourceResult::Miss)
            .unwrap();
        let _ = conn.poll_transmit(T0).unwrap();
        conn.handle_transmitted(T0, &mut adm);
        let next = fetch_ids(&events(&mut conn));
        assert_eq!(
            next.len(),
            1,
            "depth {depth}: one finished, one more begins"
        );
        assert_eq!(next[0].1.path, path(u8::try_from(depth).unwrap() + 1));
        conn.close(T0, &mut adm);
        assert_released(&adm);
    }
}

// ---- admission and refusal ----

fn small_limits() -> AdmissionConfig {
    AdmissionConfig {
        max_sessions: 3,
        max_sessions_per_source: 2,
        max_requests: 5,
        max_requests_per_session: 2,
        max_inflight_bytes: 100,
        max_inflight_bytes_per_source: 60,
        retry_after: Duration::from_millis(1500),
        ..AdmissionConfig::default()
    }
}

/// A connection refused at accept, driven to its 503: the refusal and the response.
fn refused(adm: &mut Admission<u32>, source: u32) -> (Refusal, String) {
    let mut conn = ServerConnection::accept(T0, adm, source, config()).unwrap();
    let refusal = conn.refused().expect("refused");
    assert!(
        conn.poll_transmit(T0).is_none(),
        "a refusal answers a request; it never speaks first"
    );
    input(&mut conn, adm, &get(path(1), ""));
    let t = conn.poll_transmit(T0).expect("the 503");
    assert_eq!(t.status, Some(503));
    assert_eq!(t.refusal, Some(refusal.reason));
    assert_eq!(t.close, Close::Linger);
    conn.close(T0, adm);
    (
        refusal,
        String::from_utf8([&t.head[..], &t.body[..]].concat()).unwrap(),
    )
}

#[test]
fn a_connection_over_the_session_limit_is_refused_at_once_and_consumes_nothing() {
    let mut adm = admission(small_limits());
    let conns: Vec<_> = [1, 2, 3]
        .iter()
        .map(|&s| accept(&mut adm, s, config()))
        .collect();
    let (refusal, response) = refused(&mut adm, 4);
    assert_eq!(refusal.reason, RefusalReason::Sessions);
    assert!(response.starts_with("HTTP/1.1 503 "), "{response}");
    assert!(
        response.contains("X-Peerblock-Refused: sessions\r\n"),
        "{response}"
    );
    assert!(
        response.contains("Retry-After: 2\r\n"),
        "1.5 s rounds up: {response}"
    );
    assert!(response.contains("Connection: close\r\n"), "{response}");
    assert!(response.contains("X-DART-Node: node-a\r\n"), "{response}");
    assert_eq!(adm.sessions(), 3, "the refusal took no slot");
    assert_eq!(adm.source_sessions(&4), 0);
    for mut c in conns {
        c.close(T0, &mut adm);
    }
    assert_released(&adm);
    assert_eq!(adm.tracked_sources(), 0);
}

#[test]
fn per_source_session_quota_refuses_that_source_only() {
    let mut adm = admission(small_limits());
    let a = accept(&mut adm, 7, config());
    let b = accept(&mut adm, 7, config());
    let (refusal, response) = refused(&mut adm, 7);
    assert_eq!(refusal.reason, RefusalReason::SourceSessions);
    assert!(response.contains("X-Peerblock-Refused: source-sessions"));
    let c = accept(&mut adm, 8, config());
    for mut conn in [a, b, c] {
        conn.close(T0, &mut adm);
    }
    assert_released(&adm);
}

#[test]
fn request_slots_exhausted_answer_a_refusal_and_close() {
    let mut adm = admission(small_limits()); // 5 requests
    let mut a = accept(&mut adm, 1, config());
    let mut b = accept(&mut adm, 2, config());
    let mut c = accept(&mut adm, 3, config());
    for conn in [&mut a, &mut b] {
        let mut two = get(path(1), "");
        two.extend(get(path(2), ""));
        input(conn, &mut adm, &two);
        assert_eq!(fetch_ids(&events(conn)).len(), 2);
    }
    let mut two = get(path(1), "");
    two.extend(get(path(2), ""));
    input(&mut c, &mut adm, &two);
    let c_ids = fetch_ids(&events(&mut c));
    assert_eq!(c_ids.len(), 1, "fifth slot taken, sixth refused");
    assert_eq!(adm.requests(), 5);
    // The refusal waits its turn behind the admitted request on that connection.
    assert!(c.poll_transmit(T0).is_none());
    c.handle_source(T0, &mut adm, c_ids[0].0, SourceResult::Miss)
        .unwrap();
    let ts = transmits(&mut c, &mut adm);
    assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
    let h = head(&ts[1]);
    assert!(h.starts_with("HTTP/1.1 503 "), "{h}");
    assert!(h.contains("X-Peerblock-Refused: requests\r\n"), "{h}");
    assert_eq!(ts[1].close, Close::Linger);
    c.handle_eof(T0);
    assert!(c.is_finished());
    for mut conn in [a, b, c] {
        conn.close(T0, &mut adm);
    }
    assert_released(&adm);
}

/// Feeds `total` bytes of garbage in 4 KiB pieces; returns how many the machine took.
fn feed_garbage(conn: &mut ServerConnection<u32>, total: usize) -> usize {
    let piece = [b'x'; 4096];
    (0..total / piece.len())
        .map(|_| conn.handle_input(T0, &piece))
        .sum()
}

#[test]
fn a_connection_with_a_refusal_queued_takes_and_drops_all_further_input() {
    // A keep-alive request refused by the rate bucket: the refusal ends the connection,
    // so nothing more is decoded, though the request did not ask to close.
    let (mut adm, mut conn) = bucket_spent(small_limits());
    input(&mut conn, &mut adm, &get(path(2), ""));
    assert!(
        events(&mut conn).is_empty(),
        "refused, not asked of the source"
    );
    // Far more than the decoder's buffer holds: every byte is taken (and dropped), so the
    // peer is never stalled before the 503 and the close.
    assert_eq!(feed_garbage(&mut conn, 64 * 1024), 64 * 1024);
    assert!(events(&mut conn).is_empty(), "nothing decoded");
    let ts = transmits(&mut conn, &mut adm);
    assert!(head(&ts[0]).starts_with("HTTP/1.1 503 "));
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn a_connection_cut_at_its_send_deadline_takes_and_drops_all_further_input() {
    use peerblock_core::server::DEFAULT_SEND_TIMEOUT;
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    let _stuck = conn.poll_transmit(T0).unwrap();
    conn.handle_timeout(T0 + DEFAULT_SEND_TIMEOUT);
    assert!(conn.is_finished());
    assert_eq!(feed_garbage(&mut conn, 64 * 1024), 64 * 1024);
    assert!(events(&mut conn).is_empty(), "nothing decoded");
    conn.close(T0 + DEFAULT_SEND_TIMEOUT, &mut adm);
    assert_released(&adm);
}

#[test]
fn after_a_last_request_the_machine_lends_its_small_discard_window_not_the_decoders() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    // Before: the decoder's window, its whole buffer.
    let window = conn.read_buf().expect("a window").len();
    assert_eq!(window, peerblock_core::http::REQUEST_BUFFER_BYTES);
    // A request that asks to close, decoded and not yet admitted: nothing more will be
    // decoded, so input is only discarded, through a 4 KiB scratch window.
    let last = get(path(1), "Connection: close\r\n");
    assert_eq!(conn.handle_input(T0, &last), last.len());
    assert!(conn.needs_admission());
    for _ in 0..4 {
        let window = conn.read_buf().expect("a window").len();
        assert_eq!(window, 4 * 1024);
        assert_eq!(conn.handle_read(T0, window), window);
    }
    // And once it is admitted and being answered, still.
    conn.handle_admission(T0, &mut adm);
    let ids = fetch_ids(&events(&mut conn));
    assert_eq!(ids.len(), 1, "only the request before the garbage");
    assert_eq!(conn.read_buf().expect("a window").len(), 4 * 1024);
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    let _ = transmits(&mut conn, &mut adm);
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn rate_bucket_refuses_with_the_buckets_own_wait() {
    let mut limits = small_limits();
    limits.rate = Some(RateLimit {
        per_second: 2,
        burst: 1,
    });
    let mut adm = admission(limits);
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    let _ = transmits(&mut conn, &mut adm);
    input(&mut conn, &mut adm, &get(path(2), ""));
    assert!(
        fetch_ids(&events(&mut conn)).is_empty(),
        "rate-limited: the source is not asked"
    );
    let ts = transmits(&mut conn, &mut adm);
    let h = head(&ts[0]);
    assert!(h.starts_with("HTTP/1.1 503 "), "{h}");
    assert!(h.contains("X-Peerblock-Refused: rate\r\n"), "{h}");
    assert!(
        h.contains("Retry-After: 1\r\n"),
        "500 ms rounds up to 1 s: {h}"
    );
    assert_eq!(ts[0].close, Close::Linger);
    conn.handle_eof(T0);
    assert!(conn.is_finished());
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn byte_budgets_refuse_a_block_that_would_exceed_them() {
    let mut adm = admission(small_limits()); // 60 per source, 100 global
    let mut a = accept(&mut adm, 1, config());
    let mut b = accept(&mut adm, 2, config());
    input(&mut a, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut a));
    a.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from(vec![0u8; 61])),
    )
    .unwrap();
    let ts = transmits(&mut a, &mut adm);
    assert!(
        head(&ts[0]).contains("X-Peerblock-Refused: source-inflight-bytes"),
        "{}",
        head(&ts[0])
    );
    assert!(ts[0].body.is_empty(), "the block is not sent");
    // Global: 60 held (unacknowledged) by source 2, then 50 more from source 3.
    input(&mut b, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut b));
    b.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from(vec![0u8; 60])),
    )
    .unwrap();
    let held = b.poll_transmit(T0).unwrap();
    assert_eq!(held.body.len(), 60);
    assert_eq!(
        adm.inflight_bytes(),
        60,
        "held until the write is acknowledged"
    );
    let mut c = accept(&mut adm, 3, config());
    input(&mut c, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut c));
    c.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from(vec![0u8; 50])),
    )
    .unwrap();
    let ts = transmits(&mut c, &mut adm);
    assert!(head(&ts[0]).contains("X-Peerblock-Refused: inflight-bytes"));
    b.handle_transmitted(T0, &mut adm);
    assert_eq!(adm.inflight_bytes(), 0);
    for mut conn in [a, b, c] {
        conn.close(T0, &mut adm);
    }
    assert_released(&adm);
}

#[test]
fn refusal_encoding_is_explicit_and_small() {
    let mut out = bytes::BytesMut::new();
    refusal::encode(
        &Refusal {
            reason: RefusalReason::Requests,
            retry_after: Duration::from_secs(15),
        },
        Some("n"),
        None,
        &mut out,
    );
    let text = String::from_utf8(out.to_vec()).unwrap();
    assert!(text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
    assert!(text.contains("X-Peerblock-Refused: requests\r\nRetry-After: 15\r\n"));
    assert!(text.contains("Connection: close\r\n"));
    assert!(
        out.len() < 300,
        "refusal costs one small write: {} bytes",
        out.len()
    );
}

// ---- budgets released on every path ----

#[test]
fn abort_with_a_pending_source_fetch_releases_everything() {
    let mut adm = admission(small_limits());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    assert_eq!(adm.requests(), 1);
    conn.close(T0, &mut adm); // peer reset mid-request
    assert_released(&adm);
}

#[test]
fn abort_with_an_unacknowledged_response_releases_its_bytes() {
    let mut adm = admission(small_limits());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from(vec![1u8; 40])),
    )
    .unwrap();
    let _in_flight = conn.poll_transmit(T0).unwrap();
    assert_eq!(adm.inflight_bytes(), 40);
    conn.close(T0, &mut adm); // write failed half-way
    assert_released(&adm);
}

#[test]
fn abort_with_a_ready_but_unsent_response_releases_its_bytes() {
    let mut adm = admission(small_limits());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from(vec![1u8; 40])),
    )
    .unwrap();
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn error_and_refusal_paths_release_everything() {
    let mut adm = admission(small_limits());
    for request in [
        &b"GET /peer/v1/block/zz/1 HTTP/1.1\r\nHost: s\r\n\r\n"[..],
        &b"BREW /peer/v1/roster HTTP/1.1\r\nHost: s\r\n\r\n"[..],
        &b"garbage\r\n\r\n"[..],
    ] {
        let mut conn = accept(&mut adm, 1, config());
        input(&mut conn, &mut adm, request);
        let _ = transmits(&mut conn, &mut adm);
        conn.close(T0, &mut adm);
        assert_released(&adm);
    }
}

#[test]
fn idle_connection_closes_at_its_deadline_and_releases_its_session() {
    let mut adm = admission(small_limits());
    let mut conn = accept(&mut adm, 1, config());
    assert_eq!(
        conn.poll_timeout().map(|d| d.at),
        Some(T0 + DEFAULT_IDLE_TIMEOUT)
    );
    // A dribbled partial head does not extend the deadline.
    input_at(
        &mut conn,
        &mut adm,
        Instant::from_secs(100),
        b"GET /peer/v1/bl",
    );
    assert_eq!(
        conn.poll_timeout().map(|d| d.at),
        Some(T0 + DEFAULT_IDLE_TIMEOUT)
    );
    conn.handle_timeout(Instant::from_secs(119));
    assert!(!conn.is_finished(), "spurious wake-up changes nothing");
    conn.handle_timeout(T0 + DEFAULT_IDLE_TIMEOUT);
    assert!(conn.is_finished());
    assert_eq!(conn.poll_timeout(), None, "no stale deadline");
    conn.close(T0 + DEFAULT_IDLE_TIMEOUT, &mut adm);
    assert_released(&adm);
}

#[test]
fn connection_close_request_is_answered_then_the_connection_finishes() {
    let (_, ts, adm) = serve_one(
        config(),
        &get(path(1), "Connection: close\r\n"),
        SourceResult::Miss,
    );
    assert_eq!(ts[0].close, Close::AfterWrite);
    assert!(head(&ts[0]).contains("Connection: close"));
    assert_released(&adm);
}

// ---- relay decisions ----

fn with_origin(p: BlockPath, hop: u32) -> Vec<u8> {
    get(
        p,
        &format!("X-DART-Origin: https://origin/x\r\nX-DART-Hop: {hop}\r\n"),
    )
}

#[test]
fn miss_with_origin_below_the_hop_bound_relays_with_hop_plus_one() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, relay_config(true));
    input(&mut conn, &mut adm, &with_origin(path(1), 2));
    let ids = fetch_ids(&events(&mut conn));
    assert_eq!(ids[0].1.hop, Hop(2));
    assert_eq!(ids[0].1.origin.as_deref(), Some(&b"https://origin/x"[..]));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    let evs = events(&mut conn);
    let ServerEvent::Relay { id, request } = &evs[0] else {
        panic!("expected a relay, got {evs:?}")
    };
    assert_eq!(request.hop, Hop(3), "the relayed request carries hop + 1");
    conn.handle_source(
        T0,
        &mut adm,
        *id,
        SourceResult::Found(Bytes::from_static(b"relayed")),
    )
    .unwrap();
    let ts = transmits(&mut conn, &mut adm);
    assert!(head(&ts[0]).starts_with("HTTP/1.1 200 "));
    assert_eq!(ts[0].body, Bytes::from_static(b"relayed"));
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn a_corrupt_copy_with_an_origin_is_relayed_and_past_the_hop_bound_says_corrupt() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, relay_config(true));
    input(&mut conn, &mut adm, &with_origin(path(1), 0));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Corrupt)
        .unwrap();
    let evs = events(&mut conn);
    assert!(
        matches!(evs.as_slice(), [ServerEvent::Relay { .. }]),
        "a good copy is fetched on the requester's behalf: {evs:?}"
    );
    conn.close(T0, &mut adm);

    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, relay_config(true));
    input(&mut conn, &mut adm, &with_origin(path(1), 3));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Corrupt)
        .unwrap();
    assert!(events(&mut conn).is_empty(), "hop 3 must not relay");
    let h = head(&transmits(&mut conn, &mut adm)[0]);
    assert!(h.starts_with("HTTP/1.1 404 "), "{h}");
    assert!(h.contains("X-Peerblock-Miss: corrupt\r\n"), "{h}");
}

#[test]
fn miss_at_or_past_the_hop_bound_declines_with_404() {
    for hop in [3, 4, u32::MAX] {
        let mut adm = admission(AdmissionConfig::default());
        let mut conn = accept(&mut adm, 1, relay_config(true));
        input(&mut conn, &mut adm, &with_origin(path(1), hop));
        let ids = fetch_ids(&events(&mut conn));
        conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
            .unwrap();
        assert!(events(&mut conn).is_empty(), "hop {hop} must not relay");
        assert!(head(&transmits(&mut conn, &mut adm)[0]).starts_with("HTTP/1.1 404 "));
    }
}

#[test]
fn relay_miss_is_final() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, relay_config(true));
    input(&mut conn, &mut adm, &with_origin(path(1), 0));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    assert_eq!(events(&mut conn).len(), 1);
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    assert!(events(&mut conn).is_empty(), "relays once");
    assert!(head(&transmits(&mut conn, &mut adm)[0]).starts_with("HTTP/1.1 404 "));
}

#[test]
fn block_index_above_the_maximum_is_declined_before_any_access() {
    let big = BlockPath {
        key: ChunkKey::from_array([1; 32]),
        index: 1001,
    };
    let (evs, ts, adm) = serve_one(relay_config(true), &with_origin(big, 0), SourceResult::Miss);
    assert!(
        asks(&evs).is_empty(),
        "no cache or upstream access: {evs:?}"
    );
    assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
    assert_released(&adm);
}

#[test]
fn chunk_key_disagreeing_with_origin_identity_is_declined_before_any_access() {
    let (evs, ts, _) = serve_one(
        relay_config(false),
        &with_origin(path(1), 0),
        SourceResult::Miss,
    );
    assert!(
        asks(&evs).is_empty(),
        "no cache or upstream access: {evs:?}"
    );
    assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
}

#[test]
fn cache_only_requests_and_transport_only_nodes_never_relay() {
    // No origin on a relay-capable node.
    let (evs, ts, _) = serve_one(relay_config(true), &get(path(1), ""), SourceResult::Miss);
    assert_eq!(evs.len(), 1);
    assert!(head(&ts[0]).starts_with("HTTP/1.1 404 "));
    // Origin on a transport-only node: no screening, no relay.
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &with_origin(path(1), 0));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(T0, &mut adm, ids[0].0, SourceResult::Miss)
        .unwrap();
    assert!(events(&mut conn).is_empty());
}

// ---- EOF never drops a complete buffered request (GET;GET;GET;FIN) ----

fn three_gets() -> Vec<u8> {
    let mut three = get(path(1), "");
    three.extend(get(path(2), ""));
    three.extend(get(path(3), ""));
    three
}

/// Answers every fetch `Miss`, drains and acknowledges transmits, begins waiting requests,
/// until nothing moves; returns the statuses written in order.
fn drain_all(conn: &mut ServerConnection<u32>, adm: &mut Admission<u32>) -> Vec<u16> {
    let mut statuses = Vec::new();
    loop {
        if conn.needs_admission() {
            conn.handle_admission(T0, adm);
        }
        let ids = fetch_ids(&events(conn));
        for (id, _) in &ids {
            conn.handle_source(T0, adm, *id, SourceResult::Miss)
                .unwrap();
        }
        let ts = transmits(conn, adm);
        if ids.is_empty() && ts.is_empty() && !conn.needs_admission() {
            return statuses;
        }
        statuses.extend(ts.iter().map(|t| t.status.unwrap()));
    }
}

/// Reads `data` through `read_buf`/`handle_read`, in windows as the machine offers them.
fn read_via_buf(conn: &mut ServerConnection<u32>, data: &[u8]) -> usize {
    let mut off = 0;
    while off < data.len() {
        let Some(window) = conn.read_buf() else {
            break;
        };
        assert!(!window.is_empty(), "a window is never empty");
        let n = window.len().min(data.len() - off);
        window[..n].copy_from_slice(&data[off..off + n]);
        let taken = conn.handle_read(T0, n);
        assert_eq!(taken, n);
        off += taken;
    }
    off
}

#[test]
fn eof_keeps_every_complete_buffered_request_through_handle_input() {
    let mut adm = admission(AdmissionConfig::default()); // depth 2: the third stays buffered
    let mut conn = accept(&mut adm, 1, config());
    let data = three_gets();
    assert_eq!(conn.handle_input(T0, &data), data.len());
    conn.handle_eof(T0); // all bytes, then EOF, before any drain
    assert_eq!(drain_all(&mut conn, &mut adm), [404, 404, 404]);
    assert!(conn.is_finished());
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn eof_keeps_every_complete_buffered_request_through_read_buf() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    let data = three_gets();
    assert_eq!(read_via_buf(&mut conn, &data), data.len());
    conn.handle_eof(T0);
    assert_eq!(drain_all(&mut conn, &mut adm), [404, 404, 404]);
    assert!(conn.is_finished());
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn eof_keeps_every_complete_buffered_request_when_reads_and_drains_interleave() {
    let data = three_gets();
    let one = get(path(1), "").len();
    for split in [1, one - 1, one, one + 3, 2 * one, data.len() - 1] {
        let mut adm = admission(AdmissionConfig::default());
        let mut conn = accept(&mut adm, 1, config());
        let (a, b) = data.split_at(split);
        assert_eq!(input(&mut conn, &mut adm, a), a.len());
        let mut statuses = drain_all(&mut conn, &mut adm);
        assert_eq!(read_via_buf(&mut conn, b), b.len(), "split {split}");
        conn.handle_eof(T0);
        statuses.extend(drain_all(&mut conn, &mut adm));
        assert_eq!(statuses, [404, 404, 404], "split {split}");
        assert!(conn.is_finished(), "split {split}");
        conn.close(T0, &mut adm);
        assert_released(&adm);
    }
}

#[test]
fn eof_with_an_incomplete_request_finishes_once_the_complete_ones_are_answered() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    let mut data = get(path(1), "");
    data.extend_from_slice(b"GET /peer/v1/bl");
    input(&mut conn, &mut adm, &data);
    conn.handle_eof(T0);
    assert!(
        !conn.is_finished(),
        "the complete request is still answered"
    );
    assert_eq!(drain_all(&mut conn, &mut adm), [404]);
    assert!(conn.is_finished());
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

// ---- bytes in ----

#[test]
fn read_buf_is_none_when_the_pipeline_is_full_never_an_empty_window() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    // Two requests fill the depth; padding fills the receive buffer behind them.
    let mut data = three_gets();
    while data.len() < 64 * 1024 {
        data.extend(get(path(4), ""));
    }
    let taken = read_via_buf(&mut conn, &data);
    assert!(taken < data.len(), "back-pressure: the buffer filled");
    assert!(conn.read_buf().is_none(), "take nothing now");
    assert_eq!(conn.handle_read(T0, 10), 0, "no window lent, nothing taken");
    assert_eq!(conn.handle_input(T0, &data[taken..]), 0, "both paths agree");
    conn.close(T0, &mut adm);
}

#[test]
fn byte_reads_never_touch_the_admission() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    conn.handle_input(T0, &get(path(1), ""));
    assert_eq!(adm.requests(), 0, "a byte read begins nothing");
    assert!(conn.needs_admission());
    assert!(
        events(&mut conn).is_empty(),
        "nothing asked before admission"
    );
    conn.handle_admission(T0, &mut adm);
    assert!(!conn.needs_admission());
    assert_eq!(adm.requests(), 1, "the request began at admission");
    assert_eq!(fetch_ids(&events(&mut conn)).len(), 1);
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

// ---- peer errors as events ----

#[test]
fn every_rejected_request_is_reported_with_its_typed_error_before_its_response() {
    use peerblock_core::http::{Rejection, RequestError};
    use peerblock_core::server::RequestRejection;
    let cases: [(&[u8], u16); 5] = [
        (b"GET /peer/v1/block/zz/1 HTTP/1.1\r\nHost: s\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: s\r\n\r\n", 404),
        (b"BREW /peer/v1/roster HTTP/1.1\r\nHost: s\r\n\r\n", 405),
        (b"GET / HTTP/1.1\r\nHost: s\r\nBad Name: x\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: s\r\n\r\n", 505),
    ];
    for (request, status) in cases {
        let mut adm = admission(AdmissionConfig::default());
        let mut conn = accept(&mut adm, 1, config());
        input(&mut conn, &mut adm, request);
        let evs = events(&mut conn);
        let [ServerEvent::Rejected {
            status: s, error, ..
        }] = evs.as_slice()
        else {
            panic!("{status}: expected one Rejected event, got {evs:?}");
        };
        assert_eq!(*s, status);
        assert_eq!(error.status().code(), status);
        let ts = transmits(&mut conn, &mut adm);
        assert_eq!(ts[0].status, Some(status));
        conn.close(T0, &mut adm);
    }
    // The typed errors themselves.
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(
        &mut conn,
        &mut adm,
        b"GET /metrics HTTP/1.1\r\nHost: s\r\n\r\n",
    );
    assert!(matches!(
        events(&mut conn)[..],
        [ServerEvent::Rejected {
            error: RequestRejection::Route(Rejection::UnknownPath),
            ..
        }]
    ));
    conn.close(T0, &mut adm);
    let mut conn = accept(&mut adm, 1, config());
    let big = get(path(1), &format!("X-Pad: {}\r\n", "a".repeat(9000)));
    let mut off = 0;
    while off < big.len() {
        let n = input(&mut conn, &mut adm, &big[off..]);
        if n == 0 {
            break;
        }
        off += n;
    }
    assert!(matches!(
        events(&mut conn)[..],
        [ServerEvent::Rejected {
            status: 431,
            error: RequestRejection::Malformed(RequestError::HeadTooLarge { .. }),
            ..
        }]
    ));
    conn.close(T0, &mut adm);
}

#[test]
fn a_declined_relay_is_reported_as_a_rejected_request() {
    use peerblock_core::server::{Decline, RequestRejection};
    let (evs, ts, _) = serve_one(
        relay_config(false),
        &with_origin(path(1), 0),
        SourceResult::Miss,
    );
    assert!(matches!(
        evs[..],
        [ServerEvent::Rejected {
            status: 404,
            error: RequestRejection::Relay(Decline::IdentityMismatch),
            ..
        }]
    ));
    assert_eq!(ts[0].status, Some(404));
}

// ---- closing: linger after errors ----

fn malformed_then_linger(adm: &mut Admission<u32>) -> ServerConnection<u32> {
    let mut conn = accept(adm, 1, config());
    input(&mut conn, adm, b"garbage\r\n\r\n");
    assert!(matches!(
        events(&mut conn)[..],
        [ServerEvent::Rejected { .. }]
    ));
    let ts = transmits(&mut conn, adm);
    assert_eq!(ts[0].status, Some(400));
    assert_eq!(ts[0].close, Close::Linger);
    assert!(!conn.is_finished());
    conn
}

#[test]
fn after_an_error_response_input_is_discarded_until_eof() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = malformed_then_linger(&mut adm);
    let more = three_gets();
    assert_eq!(conn.handle_input(T0, &more), more.len(), "discarded");
    assert_eq!(read_via_buf(&mut conn, &more), more.len(), "both paths");
    assert!(!conn.needs_admission() && events(&mut conn).is_empty());
    assert!(conn.poll_transmit(T0).is_none());
    conn.handle_eof(T0);
    assert!(conn.is_finished());
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn lingering_ends_at_the_linger_deadline() {
    use peerblock_core::server::{ServerTimer, DEFAULT_LINGER};
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = malformed_then_linger(&mut adm);
    let d = conn.poll_timeout().unwrap();
    assert_eq!((d.at, d.timer), (T0 + DEFAULT_LINGER, ServerTimer::Linger));
    conn.handle_timeout(T0 + DEFAULT_LINGER - Duration::from_millis(1));
    assert!(!conn.is_finished(), "spurious wake-up");
    conn.handle_timeout(T0 + DEFAULT_LINGER);
    assert!(conn.is_finished());
    assert_eq!(conn.poll_timeout(), None);
    conn.close(T0 + DEFAULT_LINGER, &mut adm);
    assert_released(&adm);
}

#[test]
fn a_successful_response_to_a_close_request_closes_after_write_without_lingering() {
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), "Connection: close\r\n"));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from_static(b"x")),
    )
    .unwrap();
    let ts = transmits(&mut conn, &mut adm);
    assert_eq!((ts[0].status, ts[0].close), (Some(200), Close::AfterWrite));
    assert!(conn.is_finished(), "no linger after a success");
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

// ---- refusal answers the first request ----

/// The admission with its one session slot held, and a connection refused at accept.
fn refused_conn() -> (Admission<u32>, ServerConnection<u32>) {
    let mut adm = admission(AdmissionConfig {
        max_sessions: 1,
        max_sessions_per_source: 1,
        ..AdmissionConfig::default()
    });
    let mut held = accept(&mut adm, 1, config());
    let conn = ServerConnection::accept(T0, &mut adm, 2, config()).unwrap();
    assert!(conn.refused().is_some());
    assert_eq!(adm.sessions(), 1, "the refused connection holds no session");
    held.close(T0, &mut adm);
    (adm, conn)
}

#[test]
fn a_refused_connection_answers_the_first_request_head_and_never_speaks_first() {
    let (mut adm, mut conn) = refused_conn();
    assert!(
        conn.poll_transmit(T0).is_none(),
        "nothing before the request"
    );
    let req = get(path(1), "");
    let (a, b) = req.split_at(req.len() - 2); // the head's blank line split across reads
    assert_eq!(conn.handle_input(T0, a), a.len());
    assert!(
        conn.poll_transmit(T0).is_none(),
        "the head is not complete yet"
    );
    assert_eq!(read_via_buf(&mut conn, b), b.len());
    assert!(
        !conn.needs_admission(),
        "a refused connection begins nothing"
    );
    let t = conn.poll_transmit(T0).expect("503 after the head");
    let text = String::from_utf8([&t.head[..], &t.body[..]].concat()).unwrap();
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    assert!(text.contains("Connection: close\r\n"), "{text}");
    assert_eq!(t.status, Some(503));
    assert_eq!(t.refusal, Some(RefusalReason::Sessions));
    assert_eq!(t.close, Close::Linger);
    conn.handle_transmitted(T0, &mut adm);
    assert!(!conn.is_finished(), "lingers");
    conn.handle_eof(T0);
    assert!(conn.is_finished());
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn a_refused_connection_that_sends_nothing_ends_without_a_byte_at_its_deadline() {
    use peerblock_core::server::{ServerTimer, DEFAULT_REFUSAL_HEAD_TIMEOUT};
    let (mut adm, mut conn) = refused_conn();
    let d = conn.poll_timeout().unwrap();
    assert_eq!(
        (d.at, d.timer),
        (T0 + DEFAULT_REFUSAL_HEAD_TIMEOUT, ServerTimer::RefusalHead)
    );
    conn.handle_timeout(T0 + DEFAULT_REFUSAL_HEAD_TIMEOUT);
    assert!(conn.is_finished());
    assert!(
        conn.poll_transmit(T0 + DEFAULT_REFUSAL_HEAD_TIMEOUT)
            .is_none(),
        "no bytes"
    );
    conn.close(T0, &mut adm);
}

#[test]
fn a_refused_connection_closed_by_the_peer_before_any_byte_writes_nothing() {
    let (mut adm, mut conn) = refused_conn();
    conn.handle_eof(T0);
    assert!(conn.is_finished());
    assert!(conn.poll_transmit(T0).is_none());
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn a_refused_connection_answers_a_partial_head_at_its_deadline() {
    use peerblock_core::server::DEFAULT_REFUSAL_HEAD_TIMEOUT;
    let (mut adm, mut conn) = refused_conn();
    conn.handle_input(T0, b"GET /peer/v1/bl");
    conn.handle_timeout(T0 + DEFAULT_REFUSAL_HEAD_TIMEOUT);
    let t = conn
        .poll_transmit(T0 + DEFAULT_REFUSAL_HEAD_TIMEOUT)
        .expect("answered");
    assert_eq!(t.status, Some(503));
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn a_refused_connection_reads_at_most_the_head_bound_before_answering() {
    use peerblock_core::server::MAX_REFUSAL_HEAD_BYTES;
    let (mut adm, mut conn) = refused_conn();
    let endless = vec![b'a'; MAX_REFUSAL_HEAD_BYTES - 1];
    conn.handle_input(T0, &endless);
    assert!(conn.poll_transmit(T0).is_none(), "within the bound");
    conn.handle_input(T0, b"a");
    let t = conn.poll_transmit(T0).expect("answered at the bound");
    assert_eq!(t.status, Some(503));
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

// ---- liveness timers ----

#[test]
fn an_unanswered_source_is_answered_500_at_its_deadline() {
    use peerblock_core::server::{ServerTimer, DEFAULT_SOURCE_TIMEOUT};
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    let d = conn.poll_timeout().unwrap();
    assert_eq!(
        (d.at, d.timer),
        (T0 + DEFAULT_SOURCE_TIMEOUT, ServerTimer::Source)
    );
    let late = T0 + DEFAULT_SOURCE_TIMEOUT;
    conn.handle_timeout(late);
    assert_eq!(
        events(&mut conn),
        [ServerEvent::SourceTimedOut { id: ids[0].0 }]
    );
    let t = conn.poll_transmit(late).unwrap();
    assert_eq!((t.status, t.close), (Some(500), Close::KeepOpen));
    conn.handle_transmitted(late, &mut adm);
    assert!(
        conn.handle_source(late, &mut adm, ids[0].0, SourceResult::Miss)
            .is_err(),
        "a late answer names no waiting request"
    );
    assert!(!conn.is_finished(), "the connection stays usable");
    conn.close(late, &mut adm);
    assert_released(&adm);
}

#[test]
fn an_unacknowledged_transmit_ends_the_connection_at_its_send_deadline() {
    use peerblock_core::server::{ServerTimer, DEFAULT_SEND_TIMEOUT};
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from(vec![0u8; 40])),
    )
    .unwrap();
    let _stuck = conn.poll_transmit(T0).unwrap();
    assert_eq!(adm.inflight_bytes(), 40);
    let d = conn.poll_timeout().unwrap();
    assert_eq!(
        (d.at, d.timer),
        (T0 + DEFAULT_SEND_TIMEOUT, ServerTimer::SendProgress)
    );
    conn.handle_timeout(T0 + DEFAULT_SEND_TIMEOUT);
    assert!(
        conn.is_finished(),
        "a reader that stopped reading is cut off"
    );
    conn.close(T0 + DEFAULT_SEND_TIMEOUT, &mut adm);
    assert_released(&adm);
}

#[test]
fn each_acknowledgement_restarts_the_send_deadline() {
    use peerblock_core::server::{ServerTimer, DEFAULT_SEND_TIMEOUT};
    let mut adm = admission(AdmissionConfig::default());
    let mut conn = accept(&mut adm, 1, config());
    let mut two = get(path(1), "");
    two.extend(get(path(2), ""));
    input(&mut conn, &mut adm, &two);
    for (id, _) in fetch_ids(&events(&mut conn)) {
        conn.handle_source(T0, &mut adm, id, SourceResult::Miss)
            .unwrap();
    }
    let _a = conn.poll_transmit(T0).unwrap();
    let _b = conn.poll_transmit(T0).unwrap();
    let t1 = T0 + DEFAULT_SEND_TIMEOUT - Duration::from_secs(1);
    conn.handle_transmitted(t1, &mut adm);
    let d = conn.poll_timeout().unwrap();
    assert_eq!(
        (d.at, d.timer),
        (t1 + DEFAULT_SEND_TIMEOUT, ServerTimer::SendProgress)
    );
    conn.handle_timeout(T0 + DEFAULT_SEND_TIMEOUT);
    assert!(!conn.is_finished(), "progress was made");
    conn.close(t1, &mut adm);
    assert_released(&adm);
}

// ---- construction and end of life ----

#[test]
fn accept_rejects_an_invalid_config_and_reserves_nothing() {
    use peerblock_core::server::ServerConfigError;
    let mut adm = admission(AdmissionConfig::default());
    let mut bad = ServerConfig::new("node-a", "10.0.0.1:7070");
    bad.send_timeout = Duration::ZERO;
    let err = ServerConnection::accept(T0, &mut adm, 1, Arc::new(bad)).unwrap_err();
    assert_eq!(
        err,
        ServerConfigError::ZeroTimeout {
            field: "send_timeout"
        }
    );
    assert_released(&adm);
}

#[test]
fn close_is_idempotent_and_releases_each_ticket_exactly_once() {
    let mut adm = admission(small_limits());
    let mut other = accept(&mut adm, 2, config());
    input(&mut other, &mut adm, &get(path(1), ""));
    let mut conn = accept(&mut adm, 1, config());
    let mut two = get(path(1), "");
    two.extend(get(path(2), ""));
    input(&mut conn, &mut adm, &two);
    let ids = fetch_ids(&events(&mut conn));
    conn.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from(vec![0u8; 10])),
    )
    .unwrap();
    let _in_flight = conn.poll_transmit(T0).unwrap();
    assert_eq!((adm.sessions(), adm.requests()), (2, 3));
    conn.close(T0, &mut adm);
    assert_eq!(
        (adm.sessions(), adm.requests(), adm.inflight_bytes()),
        (1, 1, 0)
    );
    conn.close(T0, &mut adm);
    assert_eq!(
        (adm.sessions(), adm.requests()),
        (1, 1),
        "released once only"
    );
    assert!(conn.is_finished());
    assert!(conn.poll_transmit(T0).is_none());
    other.close(T0, &mut adm);
    assert_released(&adm);
}

#[test]
fn read_buf_and_handle_input_take_the_same_bytes_in_every_state() {
    type Setup = fn(&mut Admission<u32>) -> ServerConnection<u32>;
    let states: [(&str, Setup); 6] = [
        ("serving", |adm| accept(adm, 1, config())),
        ("close request decoded, not yet begun", |adm| {
            let mut c = accept(adm, 1, config());
            c.handle_input(T0, &get(path(1), "Connection: close\r\n"));
            c
        }),
        ("pipeline full", |adm| {
            let mut c = accept(adm, 1, config());
            let mut data = three_gets();
            while data.len() < 64 * 1024 {
                data.extend(get(path(4), ""));
            }
            let mut off = 0;
            while off < data.len() {
                let n = c.handle_input(T0, &data[off..]);
                if n == 0 {
                    break;
                }
                off += n;
            }
            c
        }),
        ("lingering", |adm| malformed_then_linger(adm)),
        ("refusing", |adm| {
            // Sessions full: the first connection is never closed (the test's admission
            // is thrown away).
            let _holds_the_only_session = accept(adm, 1, config());
            let mut c = ServerConnection::accept(T0, adm, 2, config()).unwrap();
            assert!(c.refused().is_some());
            c.handle_input(T0, b"x");
            c
        }),
        ("finished", |adm| {
            let mut c = accept(adm, 1, config());
            c.handle_timeout(T0 + DEFAULT_IDLE_TIMEOUT);
            assert!(c.is_finished());
            c
        }),
    ];
    let data = get(path(9), "");
    let one_session = || {
        admission(AdmissionConfig {
            max_sessions: 1,
            max_sessions_per_source: 1,
            ..AdmissionConfig::default()
        })
    };
    for (name, setup) in states {
        let mut adm = one_session();
        let mut a = setup(&mut adm);
        let by_slice = a.handle_input(T0, &data);
        a.close(T0, &mut adm);
        let mut adm = one_session();
        let mut b = setup(&mut adm);
        let by_window = match b.read_buf() {
            None => 0,
            Some(window) => {
                let n = window.len().min(data.len());
                window[..n].copy_from_slice(&data[..n]);
                b.handle_read(T0, n)
            }
        };
        b.close(T0, &mut adm);
        assert_eq!(by_slice, by_window, "{name}");
    }
}

#[test]
fn a_refused_connection_answers_exactly_when_the_head_ends_however_it_is_split() {
    let crlf = get(path(1), "");
    let bare_lf = b"GET / HTTP/1.1\nHost: s\n\n".to_vec();
    for head in [crlf, bare_lf] {
        for split in 1..head.len() {
            let (mut adm, mut conn) = refused_conn();
            let (a, b) = head.split_at(split);
            conn.handle_input(T0, a);
            assert!(conn.poll_transmit(T0).is_none(), "early at {split}");
            // The last byte alone completes the head.
            let (b, last) = b.split_at(b.len() - 1);
            conn.handle_input(T0, b);
            assert!(conn.poll_transmit(T0).is_none(), "early at {split}");
            conn.handle_input(T0, last);
            let t = conn.poll_transmit(T0).expect("answered at the blank line");
            assert_eq!(t.status, Some(503));
            conn.close(T0, &mut adm);
        }
    }
}

/// Found by the `server_connection` fuzz target: two pipelined requests begin; the first
/// is found but its bytes are refused, so its response is a 503 that ends the connection
/// (`Close::Linger`). The second request's answer must never be handed out after it, and
/// its slot is given back once the 503 is written.
#[test]
fn nothing_is_transmitted_after_a_response_that_ends_the_connection() {
    let mut adm = admission(AdmissionConfig {
        max_inflight_bytes: 3000,
        max_inflight_bytes_per_source: 2000,
        ..AdmissionConfig::default()
    });
    let mut conn = accept(&mut adm, 1, config());
    let mut pipelined = get(path(1), "");
    pipelined.extend_from_slice(&get(path(2), ""));
    input(&mut conn, &mut adm, &pipelined);
    let ids = fetch_ids(&events(&mut conn));
    assert_eq!(ids.len(), 2, "both pipelined requests begin");
    conn.handle_source(
        T0,
        &mut adm,
        ids[0].0,
        SourceResult::Found(Bytes::from(vec![0; 2400])),
    )
    .unwrap();
    conn.handle_source(T0, &mut adm, ids[1].0, SourceResult::Miss)
        .unwrap();
    let first = conn.poll_transmit(T0).expect("the refusal");
    assert_eq!(first.status, Some(503));
    assert_eq!(first.refusal, Some(RefusalReason::SourceInflightBytes));
    assert_eq!(first.close, Close::Linger);
    assert_eq!(
        conn.poll_transmit(T0),
        None,
        "nothing after the 503 that ended it"
    );
    conn.handle_transmitted(T0, &mut adm);
    assert_eq!(
        adm.requests(),
        0,
        "the unanswered request's slot is given back"
    );
    assert_eq!(conn.poll_transmit(T0), None);
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

/// Asks for the requests dropped behind a response that ended the connection are
/// withdrawn if not yet polled, and a late answer to one is local misuse.
#[test]
fn asks_for_requests_dropped_behind_an_ending_response_are_withdrawn() {
    let mut adm = admission(AdmissionConfig {
        max_inflight_bytes: 3000,
        max_inflight_bytes_per_source: 2000,
        ..AdmissionConfig::default()
    });
    let mut conn = accept(&mut adm, 1, config());
    input(&mut conn, &mut adm, &get(path(1), ""));
    let first = fetch_ids(&events(&mut conn));
    // The second request is begun (its ask queued) but its ask is not polled.
    input(&mut conn, &mut adm, &get(path(2), ""));
    conn.handle_source(
        T0,
        &mut adm,
        first[0].0,
        SourceResult::Found(Bytes::from(vec![0; 2400])),
    )
    .unwrap();
    let t = conn.poll_transmit(T0).expect("the refusal");
    assert_eq!(t.close, Close::Linger);
    conn.handle_transmitted(T0, &mut adm);
    assert!(
        events(&mut conn)
            .iter()
            .all(|e| !matches!(e, ServerEvent::Fetch { .. })),
        "the dropped request's ask is withdrawn"
    );
    assert_eq!(adm.requests(), 0);
    conn.close(T0, &mut adm);
    assert_released(&adm);
}

// ---- the refusal bound (AdmissionConfig::max_refusals) ----

/// A node with one session slot, taken, and `max_refusals` refusal slots.
fn full_node(max_refusals: usize) -> (Admission<u32>, ServerConnection<u32>) {
    let mut adm = admission(AdmissionConfig {
        max_sessions: 1,
        max_sessions_per_source: 1,
        max_refusals,
        ..AdmissionConfig::default()
    });
    let held = accept(&mut adm, 1, config());
    (adm, held)
}

#[test]
fn refusals_within_max_refusals_are_answered_and_hold_a_slot_until_closed() {
    let (mut adm, _held) = full_node(2);
    let mut first = ServerConnection::accept(T0, &mut adm, 2, config()).unwrap();
    let second = ServerConnection::accept(T0, &mut adm, 3, config()).unwrap();
    for c in [&first, &second] {
        assert!(c.refused().is_some());
        assert!(!c.dropped_at_accept(), "within the bound: answered");
        assert!(!c.is_finished());
    }
    assert_eq!(adm.refusals(), 2);
    input(&mut first, &mut adm, &get(path(1), ""));
    assert_eq!(first.poll_transmit(T0).expect("the 503").status, Some(503));
    first.close(T0, &mut adm);
    first.close(T0, &mut adm); // idempotent: one slot back, not two
    assert_eq!(adm.refusals(), 1);
}

#[test]
fn a_refusal_over_max_refusals_is_dropped_at_accept_reading_and_writing_nothing() {
    let (mut adm, _held) = full_node(1);
    let _answered = ServerConnection::accept(T0, &mut adm, 2, config()).unwrap();
    let mut over = ServerConnection::accept(T0, &mut adm, 3, config()).unwrap();
    assert!(over.refused().is_some(), "it still says why it was refused");
    assert!(over.dropped_at_accept());
    assert!(
        over.is_finished(),
        "finished at accept: the driver closes the socket"
    );
    assert_eq!(over.poll_timeout(), None);
    over.handle_input(T0, &get(path(1), ""));
    assert!(over.poll_transmit(T0).is_none(), "never answered");
    assert_eq!(adm.refusals(), 1, "a dropped refusal takes no slot");
    over.close(T0, &mut adm);
    assert_eq!(adm.refusals(), 1, "and closing it gives none back");
}

#[test]
fn a_freed_refusal_slot_answers_the_next_refused_connection() {
    let (mut adm, _held) = full_node(1);
    let mut answered = ServerConnection::accept(T0, &mut adm, 2, config()).unwrap();
    assert!(ServerConnection::accept(T0, &mut adm, 3, config())
        .unwrap()
        .dropped_at_accept());
    answered.close(T0, &mut adm);
    let next = ServerConnection::accept(T0, &mut adm, 4, config()).unwrap();
    assert!(next.refused().is_some() && !next.dropped_at_accept());
}

#[test]
fn max_refusals_of_zero_is_a_config_error_naming_it() {
    let e = Admission::<u32>::new(AdmissionConfig {
        max_refusals: 0,
        ..AdmissionConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("max_refusals"), "{e}");
    assert_eq!(
        AdmissionConfig::default().max_refusals,
        peerblock_core::server::DEFAULT_MAX_REFUSALS
    );
    assert_eq!(peerblock_core::server::DEFAULT_MAX_REFUSALS, 256);
}
