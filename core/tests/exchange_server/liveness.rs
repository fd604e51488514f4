//! Liveness timers: the source deadline and the send deadline.

use super::*;

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
