//! EOF never drops a complete buffered request (GET;GET;GET;FIN).

use super::*;

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
