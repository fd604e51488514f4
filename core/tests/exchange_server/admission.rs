//! Admission and refusal: each limit refuses explicitly; input after a refusal; the encoding.

use super::*;

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
