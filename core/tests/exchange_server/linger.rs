//! Closing: linger after errors, and close after write (no linger) for a close request.

use super::*;

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
