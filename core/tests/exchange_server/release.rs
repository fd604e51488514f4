//! Budgets released on every path: abort, error and refusal, idle deadline, `Connection: close`.

use super::*;

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
