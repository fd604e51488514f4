//! Bytes in: `read_buf` windows, and byte reads that never touch the admission.

use super::*;

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
