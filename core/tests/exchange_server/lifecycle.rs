//! Construction and end of life: config checks, close, both read paths, nothing after the end.

use super::*;

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
