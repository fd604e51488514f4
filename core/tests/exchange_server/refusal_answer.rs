//! Refusal answers the first request: never speaks first, answers at the head or its deadline.

use super::*;

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
