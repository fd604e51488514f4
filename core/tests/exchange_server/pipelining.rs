//! Pipelining: answers in request order, depth bounded by back-pressure, drops behind a refusal.

use super::*;

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
