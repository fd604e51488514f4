//! The rules of the relay single-flight table (`server::RelayFlights`), one test each.

use bytes::Bytes;
use peerblock_core::server::{
    FlightAnswer, FlightConfig, FlightConfigError, FlightEvent, FlightId, FlightKey, FlightTimer,
    FlightsFull, RelayFlights, SourceRequest, SourceResult, Want, DEFAULT_MAX_BLOCK_BYTES,
    DEFAULT_MAX_FLIGHTS, DEFAULT_MAX_FLIGHT_BYTES, DEFAULT_MAX_REQUESTS, DEFAULT_MAX_WAITERS,
    DEFAULT_MAX_WAITERS_PER_FLIGHT,
};
use peerblock_core::time::{Deadline, Instant};
use peerblock_core::wire::{BlockPath, ChunkKey, Hop};

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn path(n: u8) -> BlockPath {
    BlockPath {
        key: ChunkKey::from_bytes(&[n; 32]).unwrap(),
        index: u64::from(n),
    }
}

/// A relayed request for block `n` (hop 1, one origin).
fn req(n: u8) -> SourceRequest {
    SourceRequest {
        path: path(n),
        origin: Some(Bytes::from_static(b"http://127.0.0.1:0")),
        hop: Hop(1),
    }
}

fn table() -> RelayFlights<u32> {
    RelayFlights::new(FlightConfig::default(), t(0)).unwrap()
}

fn drain(f: &mut RelayFlights<u32>) -> Vec<FlightEvent<u32>> {
    std::iter::from_fn(|| f.poll_event()).collect()
}

/// (waiter, answer) of every `Answer` in `events`, in order.
fn answers(events: &[FlightEvent<u32>]) -> Vec<(u32, FlightAnswer)> {
    events
        .iter()
        .filter_map(|e| match e {
            FlightEvent::Answer { waiter, answer, .. } => Some((*waiter, answer.clone())),
            _ => None,
        })
        .collect()
}

fn fetches(events: &[FlightEvent<u32>]) -> Vec<(FlightId, SourceRequest)> {
    events
        .iter()
        .filter_map(|e| match e {
            FlightEvent::Fetch { id, request } => Some((*id, request.clone())),
            _ => None,
        })
        .collect()
}

fn abandons(events: &[FlightEvent<u32>]) -> Vec<FlightId> {
    events
        .iter()
        .filter_map(|e| match e {
            FlightEvent::Abandon { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

fn lead_id(w: Want) -> FlightId {
    match w {
        Want::Lead(id) => id,
        other => panic!("expected a lead, got {other:?}"),
    }
}

#[test]
fn sixty_four_waiters_for_one_block_share_one_fetch_and_the_same_bytes() {
    let mut f = table();
    let first = lead_id(f.handle_want(t(0), &req(1), 0, t(10_000)).unwrap());
    for w in 1..64 {
        assert_eq!(
            f.handle_want(t(1), &req(1), w, t(10_000)),
            Ok(Want::Joined(first))
        );
    }
    assert_eq!((f.flights(), f.waiters()), (1, 64));
    let events = drain(&mut f);
    let fetched = fetches(&events);
    assert_eq!(fetched, vec![(first, req(1))], "exactly one upstream fetch");
    assert_eq!(events.len(), 1);

    let block = Bytes::from(vec![7u8; 4096]);
    f.handle_result(t(50), first, SourceResult::Found(block.clone()));
    let events = drain(&mut f);
    let got = answers(&events);
    assert_eq!(got.len(), 64);
    assert_eq!(
        got.iter().map(|(w, _)| *w).collect::<Vec<_>>(),
        (0..64).collect::<Vec<_>>(),
        "answered in arrival order"
    );
    for (_, answer) in got {
        let FlightAnswer::Fetched(SourceResult::Found(bytes)) = answer else {
            panic!("expected the block, got {answer:?}");
        };
        assert_eq!(bytes, block);
        assert_eq!(bytes.as_ptr(), block.as_ptr(), "shared, not copied");
    }
    assert_eq!((f.flights(), f.waiters()), (0, 0));
    assert_eq!(f.poll_timeout(), None);
}

#[test]
fn a_failed_fetch_fans_out_the_same_typed_outcome_to_every_waiter() {
    for outcome in [
        SourceResult::Miss,
        SourceResult::Corrupt,
        SourceResult::Failed,
        SourceResult::UpstreamRefused { status: 403 },
    ] {
        let mut f = table();
        let id = lead_id(f.handle_want(t(0), &req(1), 0, t(10_000)).unwrap());
        for w in 1..5 {
            f.handle_want(t(0), &req(1), w, t(10_000)).unwrap();
        }
        drain(&mut f);
        f.handle_result(t(5), id, outcome.clone());
        let got = answers(&drain(&mut f));
        assert_eq!(
            got,
            (0..5)
                .map(|w| (w, FlightAnswer::Fetched(outcome.clone())))
                .collect::<Vec<_>>()
        );
        assert_eq!(f.waiters(), 0);
    }
}

#[test]
fn a_waiters_deadline_answers_it_alone_with_a_timeout_while_the_others_get_the_result() {
    let mut f = table();
    let id = lead_id(f.handle_want(t(0), &req(1), 0, t(10_000)).unwrap());
    f.handle_want(t(0), &req(1), 1, t(100)).unwrap();
    f.handle_want(t(0), &req(1), 2, t(10_000)).unwrap();
    drain(&mut f);
    assert_eq!(
        f.poll_timeout(),
        Some(Deadline {
            at: t(100),
            timer: FlightTimer::Waiter(1)
        })
    );
    f.handle_timeout(t(100));
    let events = drain(&mut f);
    assert_eq!(answers(&events), vec![(1, FlightAnswer::TimedOut)]);
    assert!(abandons(&events).is_empty(), "the others still wait");
    assert_eq!(f.waiters(), 2);
    assert_eq!(f.poll_timeout().map(|d| d.at), Some(t(10_000)));

    f.handle_result(t(200), id, SourceResult::Miss);
    assert_eq!(
        answers(&drain(&mut f)),
        vec![
            (0, FlightAnswer::Fetched(SourceResult::Miss)),
            (2, FlightAnswer::Fetched(SourceResult::Miss))
        ]
    );
}

#[test]
fn a_result_at_a_waiters_deadline_answers_that_waiter_with_the_timeout() {
    // The driver had not yet called handle_timeout: the result must still not reach a
    // waiter whose deadline has passed (its server has answered it 500 by then).
    let mut f = table();
    let id = lead_id(f.handle_want(t(0), &req(1), 0, t(100)).unwrap());
    f.handle_want(t(0), &req(1), 1, t(101)).unwrap();
    drain(&mut f);
    f.handle_result(t(100), id, SourceResult::Miss);
    assert_eq!(
        answers(&drain(&mut f)),
        vec![
            (0, FlightAnswer::TimedOut),
            (1, FlightAnswer::Fetched(SourceResult::Miss))
        ]
    );
}

#[test]
fn a_result_after_every_waiter_expired_is_ignored_and_a_new_want_leads_a_new_fetch() {
    let mut f = table();
    let old = lead_id(f.handle_want(t(0), &req(1), 0, t(100)).unwrap());
    f.handle_want(t(0), &req(1), 1, t(100)).unwrap();
    drain(&mut f);
    f.handle_timeout(t(100));
    let events = drain(&mut f);
    assert_eq!(
        answers(&events),
        vec![(0, FlightAnswer::TimedOut), (1, FlightAnswer::TimedOut)]
    );
    assert_eq!(abandons(&events), vec![old], "the flight is abandoned");
    assert_eq!(f.flights(), 0);
    assert_eq!(f.flight_of(&FlightKey::of(&req(1))), None);

    let new = lead_id(f.handle_want(t(150), &req(1), 2, t(1_000)).unwrap());
    assert_ne!(new, old);
    assert_eq!(fetches(&drain(&mut f)), vec![(new, req(1))]);
    // The old fetch's late failure answers nobody, and does not end the new flight.
    f.handle_result(t(160), old, SourceResult::Failed);
    assert!(drain(&mut f).is_empty());
    assert_eq!(f.flight_of(&FlightKey::of(&req(1))), Some(new));
    f.handle_result(t(170), new, SourceResult::Miss);
    assert_eq!(
        answers(&drain(&mut f)),
        vec![(2, FlightAnswer::Fetched(SourceResult::Miss))]
    );
}

#[test]
fn a_second_result_for_a_finished_flight_is_ignored() {
    let mut f = table();
    let id = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    drain(&mut f);
    f.handle_result(t(1), id, SourceResult::Miss);
    assert_eq!(answers(&drain(&mut f)).len(), 1);
    f.handle_result(t(2), id, SourceResult::Failed);
    assert!(drain(&mut f).is_empty());
}

#[test]
fn a_want_whose_deadline_has_passed_is_answered_at_once_and_nothing_flies() {
    let mut f = table();
    f.handle_timeout(t(500));
    assert_eq!(f.handle_want(t(500), &req(1), 9, t(500)), Ok(Want::Expired));
    assert_eq!(
        drain(&mut f),
        vec![FlightEvent::Answer {
            waiter: 9,
            flight: None,
            answer: FlightAnswer::TimedOut
        }]
    );
    assert_eq!((f.flights(), f.waiters()), (0, 0));
    // One nanosecond later than now is still in time.
    assert!(matches!(
        f.handle_want(
            t(500),
            &req(1),
            9,
            t(500) + core::time::Duration::from_nanos(1)
        ),
        Ok(Want::Lead(_))
    ));
}

#[test]
fn cancel_of_one_waiter_leaves_the_others_waiting_and_the_last_abandons_the_flight() {
    let mut f = table();
    let id = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    f.handle_want(t(0), &req(1), 1, t(1_000)).unwrap();
    f.handle_want(t(0), &req(1), 2, t(500)).unwrap();
    drain(&mut f);

    f.handle_cancel(t(10), 2);
    assert!(drain(&mut f).is_empty(), "a cancel answers nobody");
    assert_eq!(f.waiters(), 2);
    assert_eq!(
        f.poll_timeout().map(|d| d.at),
        Some(t(1_000)),
        "its deadline left with it"
    );
    f.handle_cancel(t(10), 77);
    assert!(drain(&mut f).is_empty(), "an unknown waiter is ignored");
    assert_eq!(f.waiters(), 2);

    f.handle_cancel(t(20), 0);
    assert!(drain(&mut f).is_empty());
    assert_eq!(f.flight_of(&FlightKey::of(&req(1))), Some(id));
    f.handle_cancel(t(30), 1);
    assert_eq!(
        drain(&mut f),
        vec![FlightEvent::Abandon { id, path: path(1) }]
    );
    assert_eq!((f.flights(), f.waiters()), (0, 0));
    f.handle_result(t(40), id, SourceResult::Found(Bytes::from_static(b"x")));
    assert!(
        drain(&mut f).is_empty(),
        "the abandoned fetch's result is ignored"
    );
}

#[test]
fn a_cancelled_waiter_is_never_answered_when_the_result_comes() {
    let mut f = table();
    let id = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    f.handle_want(t(0), &req(1), 1, t(1_000)).unwrap();
    f.handle_want(t(0), &req(1), 2, t(1_000)).unwrap();
    drain(&mut f);
    f.handle_cancel(t(1), 1);
    f.handle_result(t(2), id, SourceResult::Miss);
    let got: Vec<u32> = answers(&drain(&mut f))
        .into_iter()
        .map(|(w, _)| w)
        .collect();
    assert_eq!(got, vec![0, 2]);
}

#[test]
fn different_blocks_fly_independently() {
    let mut f = table();
    let a = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    let b = lead_id(f.handle_want(t(0), &req(2), 1, t(1_000)).unwrap());
    assert_eq!(
        f.handle_want(t(0), &req(1), 2, t(1_000)),
        Ok(Want::Joined(a))
    );
    assert_eq!(
        f.handle_want(t(0), &req(2), 3, t(1_000)),
        Ok(Want::Joined(b))
    );
    assert_eq!(fetches(&drain(&mut f)), vec![(a, req(1)), (b, req(2))]);

    f.handle_result(t(5), b, SourceResult::Failed);
    assert_eq!(
        answers(&drain(&mut f)),
        vec![
            (1, FlightAnswer::Fetched(SourceResult::Failed)),
            (3, FlightAnswer::Fetched(SourceResult::Failed))
        ]
    );
    assert_eq!((f.flights(), f.waiters()), (1, 2), "block 1 still flies");
    f.handle_result(t(6), a, SourceResult::Miss);
    assert_eq!(
        answers(&drain(&mut f)),
        vec![
            (0, FlightAnswer::Fetched(SourceResult::Miss)),
            (2, FlightAnswer::Fetched(SourceResult::Miss))
        ]
    );
}

#[test]
fn a_different_hop_or_origin_leads_its_own_flight() {
    // A request back around a relay loop carries a higher hop: waiting on the flight it
    // is itself part of would deadlock until its deadline.
    let mut f = table();
    let a = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    let mut looped = req(1);
    looped.hop = Hop(3);
    let b = lead_id(f.handle_want(t(0), &looped, 1, t(1_000)).unwrap());
    // Another credential (origin URL) gets its own upstream answer.
    let mut other = req(1);
    other.origin = Some(Bytes::from_static(b"http://127.0.0.1:0/?sig=2"));
    let c = lead_id(f.handle_want(t(0), &other, 2, t(1_000)).unwrap());
    let mut none = req(1);
    none.origin = None;
    let d = lead_id(f.handle_want(t(0), &none, 3, t(1_000)).unwrap());
    assert_eq!(
        fetches(&drain(&mut f)),
        vec![(a, req(1)), (b, looped), (c, other), (d, none)]
    );
    f.handle_result(t(1), c, SourceResult::UpstreamRefused { status: 403 });
    assert_eq!(
        answers(&drain(&mut f)),
        vec![(
            2,
            FlightAnswer::Fetched(SourceResult::UpstreamRefused { status: 403 })
        )],
        "the refusal of one credential reaches only its own requester"
    );
    assert_eq!(f.waiters(), 3);
}

#[test]
fn shared_across_hops_a_request_of_another_hop_joins_and_the_fetch_carries_the_leads_hop() {
    // Parents by placement cannot loop: a reader's request (relayed at hop 1) and a relay's
    // (relayed at hop 2) for one block at its parent share one fetch.
    let mut f = RelayFlights::new(
        FlightConfig {
            share_across_hops: true,
            ..FlightConfig::default()
        },
        t(0),
    )
    .unwrap();
    let a = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    let mut deeper = req(1);
    deeper.hop = Hop(2);
    assert_eq!(
        f.handle_want(t(0), &deeper, 1, t(1_000)),
        Ok(Want::Joined(a))
    );
    assert_eq!(f.flight_of(&f.key_of(&deeper)), Some(a));
    assert_eq!(
        fetches(&drain(&mut f)),
        vec![(a, req(1))],
        "one fetch, the lead's hop"
    );
    // The other way round: the fetch carries the first request's hop.
    let mut g = RelayFlights::new(
        FlightConfig {
            share_across_hops: true,
            ..FlightConfig::default()
        },
        t(0),
    )
    .unwrap();
    let b = lead_id(g.handle_want(t(0), &deeper, 0, t(1_000)).unwrap());
    assert_eq!(
        g.handle_want(t(0), &req(1), 1, t(1_000)),
        Ok(Want::Joined(b))
    );
    assert_eq!(fetches(&drain(&mut g)), vec![(b, deeper)]);
    // The origin still separates flights.
    let mut other = req(1);
    other.origin = Some(Bytes::from_static(b"http://127.0.0.1:0/?sig=2"));
    assert!(matches!(
        g.handle_want(t(0), &other, 2, t(1_000)),
        Ok(Want::Lead(_))
    ));
}

fn config(
    max_flights: usize,
    max_waiters: usize,
    per_flight: usize,
    block: u64,
    bytes: u64,
) -> FlightConfig {
    FlightConfig {
        max_flights,
        max_waiters,
        max_waiters_per_flight: per_flight,
        max_block_bytes: block,
        max_flight_bytes: bytes,
        share_across_hops: false,
    }
}

#[test]
fn the_flight_bound_accepts_at_the_bound_and_refuses_one_more() {
    let mut f = RelayFlights::new(config(3, 100, 100, 1, 100), t(0)).unwrap();
    for n in 0..3 {
        assert!(matches!(
            f.handle_want(t(0), &req(n), u32::from(n), t(1_000)),
            Ok(Want::Lead(_))
        ));
    }
    assert_eq!(
        f.handle_want(t(0), &req(9), 9, t(1_000)),
        Err(FlightsFull::Flights { max: 3 })
    );
    assert_eq!((f.flights(), f.waiters()), (3, 3), "nothing recorded");
    assert_eq!(fetches(&drain(&mut f)).len(), 3);
    // Joining is still possible at the flight bound.
    assert!(matches!(
        f.handle_want(t(0), &req(0), 10, t(1_000)),
        Ok(Want::Joined(_))
    ));
}

#[test]
fn the_waiters_per_flight_bound_accepts_at_the_bound_and_refuses_one_more() {
    let mut f = RelayFlights::new(config(100, 100, 4, 1, 100), t(0)).unwrap();
    for w in 0..4 {
        f.handle_want(t(0), &req(1), w, t(1_000)).unwrap();
    }
    assert_eq!(
        f.handle_want(t(0), &req(1), 4, t(1_000)),
        Err(FlightsFull::WaitersPerFlight { max: 4 })
    );
    assert_eq!(f.waiters(), 4);
    // Another block still flies.
    assert!(matches!(
        f.handle_want(t(0), &req(2), 5, t(1_000)),
        Ok(Want::Lead(_))
    ));
}

#[test]
fn the_total_waiters_bound_accepts_at_the_bound_and_refuses_one_more() {
    let mut f = RelayFlights::new(config(100, 5, 3, 1, 100), t(0)).unwrap();
    for w in 0..3 {
        f.handle_want(t(0), &req(1), w, t(1_000)).unwrap();
    }
    for w in 3..5 {
        f.handle_want(t(0), &req(2), w, t(1_000)).unwrap();
    }
    assert_eq!(f.waiters(), 5);
    assert_eq!(
        f.handle_want(t(0), &req(2), 5, t(1_000)),
        Err(FlightsFull::Waiters { max: 5 }),
        "a join past the total"
    );
    assert_eq!(
        f.handle_want(t(0), &req(3), 6, t(1_000)),
        Err(FlightsFull::Waiters { max: 5 }),
        "a lead past the total"
    );
    assert_eq!((f.flights(), f.waiters()), (2, 5));
    // A waiter leaving makes room for exactly one.
    f.handle_cancel(t(1), 0);
    assert!(f.handle_want(t(1), &req(3), 6, t(1_000)).is_ok());
    assert!(f.handle_want(t(1), &req(3), 7, t(1_000)).is_err());
}

#[test]
fn the_byte_bound_accepts_at_the_bound_and_refuses_one_more() {
    // 3 flights of at most 10 bytes fit 30 bytes (and 35); a fourth does not.
    for bytes in [30, 35, 39] {
        let mut f = RelayFlights::new(config(100, 100, 100, 10, bytes), t(0)).unwrap();
        for n in 0..3 {
            assert!(f.handle_want(t(0), &req(n), u32::from(n), t(1_000)).is_ok());
        }
        assert_eq!(f.pinned_bytes(), 30);
        assert_eq!(
            f.config(),
            &config(100, 100, 100, 10, bytes),
            "the config in force"
        );
        assert_eq!(
            f.handle_want(t(0), &req(9), 9, t(1_000)),
            Err(FlightsFull::Bytes { max: bytes })
        );
        assert_eq!(f.flights(), 3);
        assert!(
            f.handle_want(t(0), &req(0), 10, t(1_000)).is_ok(),
            "a join pins no more bytes"
        );
    }
    let mut f = RelayFlights::new(config(100, 100, 100, 10, 40), t(0)).unwrap();
    for n in 0..4 {
        assert!(f.handle_want(t(0), &req(n), u32::from(n), t(1_000)).is_ok());
    }
    assert_eq!(f.pinned_bytes(), 40);
}

#[test]
fn a_finished_flight_frees_its_bytes_and_its_flight_slot() {
    let mut f = RelayFlights::new(config(1, 100, 100, 10, 10), t(0)).unwrap();
    let id = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    assert!(f.handle_want(t(0), &req(2), 1, t(1_000)).is_err());
    f.handle_result(t(1), id, SourceResult::Miss);
    assert_eq!(f.pinned_bytes(), 0);
    assert!(f.handle_want(t(1), &req(2), 1, t(1_000)).is_ok());
}

#[test]
fn a_block_longer_than_max_block_bytes_or_an_external_result_is_answered_failed() {
    let mut f = RelayFlights::new(config(10, 10, 10, 4, 40), t(0)).unwrap();
    let a = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    let b = lead_id(f.handle_want(t(0), &req(2), 1, t(1_000)).unwrap());
    let c = lead_id(f.handle_want(t(0), &req(3), 2, t(1_000)).unwrap());
    drain(&mut f);
    f.handle_result(t(1), a, SourceResult::Found(Bytes::from_static(b"12345")));
    f.handle_result(t(1), b, SourceResult::Found(Bytes::from_static(b"1234")));
    f.handle_result(t(1), c, SourceResult::External { len: 4 });
    assert_eq!(
        answers(&drain(&mut f)),
        vec![
            (0, FlightAnswer::Fetched(SourceResult::Failed)),
            (
                1,
                FlightAnswer::Fetched(SourceResult::Found(Bytes::from_static(b"1234")))
            ),
            (2, FlightAnswer::Fetched(SourceResult::Failed)),
        ]
    );
}

#[test]
fn a_spurious_handle_timeout_changes_nothing() {
    let mut f = table();
    let id = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    f.handle_want(t(0), &req(1), 1, t(2_000)).unwrap();
    drain(&mut f);
    let before = f.poll_timeout();
    for at in [0, 1, 500, 999] {
        f.handle_timeout(t(at));
        assert!(drain(&mut f).is_empty());
        assert_eq!(f.poll_timeout(), before);
        assert_eq!((f.flights(), f.waiters()), (1, 2));
    }
    f.handle_result(t(999), id, SourceResult::Miss);
    assert_eq!(answers(&drain(&mut f)).len(), 2);
    // Nothing in the table: a timeout is harmless too.
    f.handle_timeout(t(5_000));
    assert!(drain(&mut f).is_empty());
    assert_eq!(f.poll_timeout(), None);
}

#[test]
fn time_going_backwards_is_clamped_to_the_latest_instant_seen() {
    let mut f = table();
    let id = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    f.handle_want(t(0), &req(1), 1, t(3_000)).unwrap();
    drain(&mut f);
    f.handle_timeout(t(2_000));
    assert_eq!(answers(&drain(&mut f)), vec![(0, FlightAnswer::TimedOut)]);
    // A want at an earlier instant is taken at 2 s: a deadline of 1.5 s has passed.
    assert_eq!(
        f.handle_want(t(500), &req(1), 2, t(1_500)),
        Ok(Want::Expired)
    );
    // A timeout earlier than the latest instant is one at the latest instant.
    f.handle_timeout(t(100));
    let events = drain(&mut f);
    assert_eq!(answers(&events), vec![(2, FlightAnswer::TimedOut)]);
    f.handle_result(t(100), id, SourceResult::Miss);
    assert_eq!(
        answers(&drain(&mut f)),
        vec![(1, FlightAnswer::Fetched(SourceResult::Miss))]
    );
}

#[test]
fn poll_timeout_names_the_earliest_waiter_deadline() {
    let mut f = table();
    f.handle_want(t(0), &req(1), 0, t(900)).unwrap();
    f.handle_want(t(0), &req(1), 1, t(300)).unwrap();
    f.handle_want(t(0), &req(2), 2, t(300)).unwrap();
    f.handle_want(t(0), &req(2), 3, t(200)).unwrap();
    assert_eq!(
        f.poll_timeout(),
        Some(Deadline {
            at: t(200),
            timer: FlightTimer::Waiter(3)
        })
    );
    f.handle_timeout(t(200));
    // Ties go to the earlier flight, then the earlier waiter.
    assert_eq!(
        f.poll_timeout(),
        Some(Deadline {
            at: t(300),
            timer: FlightTimer::Waiter(1)
        })
    );
    f.handle_timeout(t(300));
    let events = drain(&mut f);
    assert_eq!(
        answers(&events),
        vec![
            (3, FlightAnswer::TimedOut),
            (1, FlightAnswer::TimedOut),
            (2, FlightAnswer::TimedOut)
        ]
    );
    assert_eq!(
        abandons(&events).len(),
        1,
        "block 2's flight has no waiter left"
    );
    assert_eq!(f.poll_timeout().map(|d| d.at), Some(t(900)));
}

#[test]
fn a_timeout_answer_maps_to_a_failed_source_result() {
    assert_eq!(
        FlightAnswer::TimedOut.into_source_result(),
        SourceResult::Failed
    );
    assert_eq!(
        FlightAnswer::Fetched(SourceResult::Miss).into_source_result(),
        SourceResult::Miss
    );
}

#[test]
fn the_key_of_a_request_is_its_block_hop_and_origin_and_builds_the_same_request() {
    let r = req(4);
    let k = FlightKey::of(&r);
    assert_eq!(
        (k.path, k.hop, k.origin.clone()),
        (r.path, r.hop, r.origin.clone())
    );
    assert_eq!(k.request(), r);
}

#[test]
fn flight_ids_are_numbered_in_lead_order_and_never_reused() {
    let mut f = table();
    let a = lead_id(f.handle_want(t(0), &req(1), 0, t(1_000)).unwrap());
    f.handle_result(t(1), a, SourceResult::Miss);
    let b = lead_id(f.handle_want(t(1), &req(1), 1, t(1_000)).unwrap());
    assert_eq!((a.get(), b.get()), (0, 1));
}

#[test]
fn the_defaults_are_the_documented_values_and_follow_admission() {
    let c = FlightConfig::default();
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(DEFAULT_MAX_FLIGHTS, 512);
    assert_eq!(DEFAULT_MAX_FLIGHTS, DEFAULT_MAX_REQUESTS);
    assert_eq!(DEFAULT_MAX_WAITERS, 512);
    assert_eq!(DEFAULT_MAX_WAITERS_PER_FLIGHT, 256);
    assert_eq!(DEFAULT_MAX_BLOCK_BYTES, 64 << 20);
    assert_eq!(DEFAULT_MAX_FLIGHT_BYTES, 4 << 30);
    assert_eq!(
        (
            c.max_flights,
            c.max_waiters,
            c.max_waiters_per_flight,
            c.max_block_bytes,
            c.max_flight_bytes
        ),
        (512, 512, 256, 64 << 20, 4 << 30)
    );
    let f = RelayFlights::<u32>::new(c, t(0)).unwrap();
    assert_eq!(f.config(), &c);
}

#[test]
fn a_config_that_cannot_work_is_refused_naming_the_field() {
    let ok = config(1, 1, 1, 1, 1);
    assert_eq!(ok.validate(), Ok(()));
    for (field, c) in [
        (
            "max_flights",
            FlightConfig {
                max_flights: 0,
                ..ok
            },
        ),
        (
            "max_waiters",
            FlightConfig {
                max_waiters: 0,
                ..ok
            },
        ),
        (
            "max_waiters_per_flight",
            FlightConfig {
                max_waiters_per_flight: 0,
                ..ok
            },
        ),
        (
            "max_block_bytes",
            FlightConfig {
                max_block_bytes: 0,
                ..ok
            },
        ),
        (
            "max_flight_bytes",
            FlightConfig {
                max_flight_bytes: 0,
                ..ok
            },
        ),
    ] {
        let err = c.validate().unwrap_err();
        assert_eq!(err, FlightConfigError::Zero { field });
        assert!(err.to_string().contains(field), "{err} names {field}");
        assert!(RelayFlights::<u32>::new(c, t(0)).is_err());
    }
    let c = config(1, 1, 1, 11, 10);
    assert_eq!(
        c.validate(),
        Err(FlightConfigError::BlockAboveFlightBytes {
            max_block_bytes: 11,
            max_flight_bytes: 10
        })
    );
    assert!(c
        .validate()
        .unwrap_err()
        .to_string()
        .contains("max_block_bytes"));
    assert_eq!(config(1, 1, 1, 10, 10).validate(), Ok(()));
}

#[test]
fn refusals_say_the_bound_is_local() {
    for e in [
        FlightsFull::Flights { max: 1 },
        FlightsFull::Waiters { max: 1 },
        FlightsFull::WaitersPerFlight { max: 1 },
        FlightsFull::Bytes { max: 1 },
    ] {
        assert!(e.to_string().contains("local bound"), "{e}");
    }
}
