//! Property test: the relay single-flight table (`server::RelayFlights`) driven through
//! random wants, results, cancels, timeouts and clock steps (backwards too) keeps its
//! invariants.
//!
//! - every waiter is answered at most once, and exactly once unless it was cancelled or
//!   refused (refused wants are never answered);
//! - no waiter is answered a result at or after its deadline, nor a timeout before it;
//! - a cancelled waiter is never answered after its cancel;
//! - at most one fetch is in flight per key, and every waiter of a flight gets the same
//!   outcome (a block as the same bytes);
//! - the bounds (flights, waiters in all, waiters per flight, pinned bytes) are never
//!   exceeded, and the table's counters agree with the model;
//! - `poll_timeout` never stays at or before `now` after `handle_timeout(now)`;
//! - same inputs, same events.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use peerblock_core::server::{
    FlightAnswer, FlightConfig, FlightEvent, FlightId, FlightKey, FlightsFull, RelayFlights,
    SourceRequest, SourceResult, Want,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::wire::{BlockPath, ChunkKey, Hop};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// A want for block `block` with hop `hop`, due `deadline_ms` after now.
    Want {
        block: u8,
        hop: u8,
        deadline_ms: u64,
    },
    /// After `ms`, the result of the `nth` fetch emitted so far (modulo), kind 0..6.
    Result { nth: usize, kind: u8, ms: u64 },
    /// After `ms`, cancel the `nth` waiter issued so far (modulo).
    Cancel { nth: usize, ms: u64 },
    /// Move the clock by `ms` (backwards when `back`), then `handle_timeout`.
    Timeout { ms: u64, back: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..4, 0u8..2, 0u64..300).prop_map(|(block, hop, deadline_ms)| Op::Want {
            block,
            hop,
            deadline_ms
        }),
        3 => (any::<usize>(), 0u8..6, 0u64..60)
            .prop_map(|(nth, kind, ms)| Op::Result { nth, kind, ms }),
        1 => (any::<usize>(), 0u64..60).prop_map(|(nth, ms)| Op::Cancel { nth, ms }),
        2 => (0u64..200, prop::bool::weighted(0.15))
            .prop_map(|(ms, back)| Op::Timeout { ms, back }),
    ]
}

fn config() -> impl Strategy<Value = FlightConfig> {
    (1usize..5, 1usize..9, 1usize..5, 1u64..4, 0u64..8).prop_map(
        |(max_flights, max_waiters, max_waiters_per_flight, block, extra)| FlightConfig {
            max_flights,
            max_waiters,
            max_waiters_per_flight,
            max_block_bytes: block * 10,
            max_flight_bytes: block * 10 + extra * 5,
            share_across_hops: false,
        },
    )
}

fn request(block: u8, hop: u8) -> SourceRequest {
    SourceRequest {
        path: BlockPath {
            key: ChunkKey::from_bytes(&[block + 1; 16]).unwrap(),
            index: u64::from(block),
        },
        origin: Some(Bytes::from_static(b"http://127.0.0.1:1")),
        hop: Hop(u32::from(hop) + 1),
    }
}

/// One of the six outcomes; blocks of 1..=40 bytes (some above a small `max_block_bytes`).
fn outcome(kind: u8, nth: usize) -> SourceResult {
    match kind {
        0 => SourceResult::Found(Bytes::from(vec![kind; 1 + nth % 40])),
        1 => SourceResult::Miss,
        2 => SourceResult::Corrupt,
        3 => SourceResult::Failed,
        4 => SourceResult::UpstreamRefused { status: 403 },
        _ => SourceResult::External { len: 3 },
    }
}

#[derive(Default)]
struct Model {
    /// Waiter → (its deadline, its flight if it joined or led one).
    accepted: BTreeMap<u32, (Instant, Option<FlightId>)>,
    answered: BTreeSet<u32>,
    cancelled: BTreeSet<u32>,
    /// Flights whose fetch was emitted and that have neither ended nor been abandoned.
    open: BTreeMap<FlightId, FlightKey>,
    /// Every fetch ever emitted, in order (results may name any of them, late ones too).
    fetched: Vec<FlightId>,
    /// The result being handed in (its flight and the outcome its waiters must get).
    resulting: Option<(FlightId, SourceResult)>,
    /// The outcome each ended flight handed out (all its waiters must get the same).
    outcome_of: BTreeMap<FlightId, SourceResult>,
    members: BTreeMap<FlightId, usize>,
}

fn run(config: FlightConfig, ops: &[Op]) -> Result<Vec<String>, TestCaseError> {
    let mut f: RelayFlights<u32> = RelayFlights::new(config, Instant::ZERO).unwrap();
    let mut m = Model::default();
    let mut now = Instant::ZERO;
    let mut latest = Instant::ZERO;
    let mut next_waiter = 0u32;
    let mut trace = Vec::new();

    let step = |f: &mut RelayFlights<u32>,
                m: &mut Model,
                latest: Instant,
                trace: &mut Vec<String>|
     -> Result<(), TestCaseError> {
        while let Some(event) = f.poll_event() {
            trace.push(format!("{event:?}"));
            match event {
                FlightEvent::Fetch { id, request } => {
                    let key = FlightKey::of(&request);
                    prop_assert!(
                        !m.open.values().any(|k| *k == key),
                        "a second fetch in flight for one key"
                    );
                    m.open.insert(id, key);
                    m.fetched.push(id);
                }
                FlightEvent::Abandon { id, .. } => {
                    prop_assert!(m.open.remove(&id).is_some(), "abandon of a closed flight");
                    prop_assert_eq!(m.members.get(&id).copied().unwrap_or(0), 0);
                }
                FlightEvent::Answer {
                    waiter,
                    flight,
                    answer,
                } => {
                    prop_assert!(
                        m.answered.insert(waiter),
                        "waiter {} answered twice",
                        waiter
                    );
                    prop_assert!(!m.cancelled.contains(&waiter), "answered after cancel");
                    let (deadline, joined) = m.accepted[&waiter];
                    prop_assert_eq!(flight, joined);
                    if let Some(id) = joined {
                        *m.members.get_mut(&id).unwrap() -= 1;
                    }
                    match answer {
                        FlightAnswer::TimedOut => {
                            prop_assert!(deadline <= latest, "timed out before its deadline")
                        }
                        FlightAnswer::Fetched(result) => {
                            prop_assert!(deadline > latest, "a result at or after the deadline");
                            let id = joined.unwrap();
                            let Some((resulting, expected)) = &m.resulting else {
                                return Err(TestCaseError::fail("a result nobody gave"));
                            };
                            prop_assert_eq!(id, *resulting, "the result of another flight");
                            prop_assert!(m.open.contains_key(&id), "a result for a closed flight");
                            prop_assert_eq!(&result, expected);
                            let first = m.outcome_of.entry(id).or_insert_with(|| result.clone());
                            prop_assert_eq!(&result, &*first);
                            if let (SourceResult::Found(a), SourceResult::Found(b)) =
                                (&result, &*first)
                            {
                                prop_assert_eq!(a.as_ptr(), b.as_ptr(), "bytes copied");
                            }
                            prop_assert!(
                                !matches!(result, SourceResult::External { .. }),
                                "an External answered"
                            );
                            if let SourceResult::Found(b) = &result {
                                prop_assert!(b.len() as u64 <= config.max_block_bytes);
                            }
                        }
                    }
                }
            }
        }
        // Bounds and counters.
        let live: usize = m.members.values().sum();
        prop_assert_eq!(f.waiters(), live);
        prop_assert!(f.flights() <= config.max_flights);
        prop_assert!(f.waiters() <= config.max_waiters);
        prop_assert!(f.pinned_bytes() <= config.max_flight_bytes);
        for n in m.members.values() {
            prop_assert!(*n <= config.max_waiters_per_flight);
        }
        Ok(())
    };

    for op in ops {
        match op {
            Op::Want {
                block,
                hop,
                deadline_ms,
            } => {
                let w = next_waiter;
                next_waiter += 1;
                let deadline = latest + Duration::from_millis(*deadline_ms);
                let r = request(*block, *hop);
                match f.handle_want(now, &r, w, deadline) {
                    Ok(Want::Lead(id)) => {
                        m.accepted.insert(w, (deadline, Some(id)));
                        m.members.insert(id, 1);
                    }
                    Ok(Want::Joined(id)) => {
                        m.accepted.insert(w, (deadline, Some(id)));
                        *m.members.get_mut(&id).unwrap() += 1;
                    }
                    Ok(Want::Expired) => {
                        prop_assert!(deadline <= latest);
                        m.accepted.insert(w, (deadline, None));
                    }
                    Err(full) => {
                        // Refused only at a bound that is really reached.
                        let key = FlightKey::of(&r);
                        let flight = f.flight_of(&key);
                        match full {
                            FlightsFull::Waiters { .. } => {
                                prop_assert_eq!(f.waiters(), config.max_waiters)
                            }
                            FlightsFull::WaitersPerFlight { .. } => prop_assert_eq!(
                                m.members[&flight.unwrap()],
                                config.max_waiters_per_flight
                            ),
                            FlightsFull::Flights { .. } => {
                                prop_assert!(flight.is_none());
                                prop_assert_eq!(f.flights(), config.max_flights)
                            }
                            FlightsFull::Bytes { .. } => {
                                prop_assert!(flight.is_none());
                                prop_assert!(
                                    f.pinned_bytes() + config.max_block_bytes
                                        > config.max_flight_bytes
                                )
                            }
                        }
                    }
                }
            }
            Op::Result { nth, kind, ms } => {
                now += Duration::from_millis(*ms);
                if !m.fetched.is_empty() {
                    let id = m.fetched[nth % m.fetched.len()];
                    let result = outcome(*kind, *nth);
                    let expected = match &result {
                        SourceResult::Found(b) if b.len() as u64 > config.max_block_bytes => {
                            SourceResult::Failed
                        }
                        SourceResult::External { .. } => SourceResult::Failed,
                        other => other.clone(),
                    };
                    m.resulting = Some((id, expected));
                    f.handle_result(now, id, result);
                }
            }
            Op::Cancel { nth, ms } => {
                now += Duration::from_millis(*ms);
                if next_waiter > 0 {
                    let w = (*nth % next_waiter as usize) as u32;
                    // A waiter already due is answered (timed out) by the same call,
                    // before the cancel: the cancel finds nothing then.
                    let at = latest.max(now);
                    if let Some((deadline, Some(id))) = m.accepted.get(&w) {
                        if !m.answered.contains(&w) && *deadline > at && m.cancelled.insert(w) {
                            *m.members.get_mut(id).unwrap() -= 1;
                        }
                    }
                    f.handle_cancel(now, w);
                }
            }
            Op::Timeout { ms, back } => {
                let d = Duration::from_millis(*ms);
                now = if *back { now - d } else { now + d };
                f.handle_timeout(now);
            }
        }
        latest = latest.max(now);
        step(&mut f, &mut m, latest, &mut trace)?;
        // A result ends its flight, unless its waiters all timed out first (abandoned
        // then) or it was late: either way the flight is not open any more.
        if let Some((id, _)) = m.resulting.take() {
            m.open.remove(&id);
            prop_assert_eq!(m.members.get(&id).copied().unwrap_or(0), 0);
        }
        prop_assert_eq!(f.flights(), m.open.len());
        if matches!(op, Op::Timeout { .. }) {
            if let Some(d) = f.poll_timeout() {
                prop_assert!(d.at > latest, "a deadline left in the past");
            }
        }
    }

    // The end of time: every waiter not cancelled has had its answer.
    now = Instant::MAX;
    f.handle_timeout(now);
    step(&mut f, &mut m, Instant::MAX, &mut trace)?;
    for w in m.accepted.keys() {
        prop_assert_eq!(
            m.answered.contains(w),
            !m.cancelled.contains(w),
            "waiter {} answered exactly once unless cancelled",
            w
        );
    }
    prop_assert_eq!(f.flights(), 0);
    prop_assert_eq!(f.waiters(), 0);
    prop_assert!(f.poll_timeout().is_none());
    Ok(trace)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_wants_results_cancels_and_timeouts_keep_the_invariants(
        config in config(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let first = run(config, &ops)?;
        let second = run(config, &ops)?;
        prop_assert_eq!(first, second, "same inputs, same events");
    }
}
