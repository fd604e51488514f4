//! The refusal bound (`AdmissionConfig::max_refusals`).

use super::*;

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
