//! Property test: the read machine driven through random lookups, GET outcomes and
//! timings keeps its invariants.
//!
//! - never more than two GETs in flight;
//! - never `Absent` while a possible holder is refused (it did not answer NotFound itself
//!   and fewer than a close group of nearer peers did), and `Absent` only after a close
//!   group's worth of NotFound answers;
//! - every read finishes, within `1 + max_refusal_waits + max_plain_retries` rounds;
//! - no GET goes to a suppressed (refusing) or circuit-open (blocked) peer;
//! - `poll_timeout` never stays in the past after `handle_timeout` (no busy loop);
//! - under the default `HedgeRule::OnSilence`, no hedge goes out while the single GET in
//!   flight has reported progress (responses report it halfway through their latency; some
//!   silent peers report it and then stall);
//! - same seed, same inputs: the same action sequence.

mod read_support;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use peerblock_core::placement::{Key, PeerId};
use peerblock_core::read::{
    GetId, GetOutcome, PeerView, Read, ReadConfig, ReadEvent, ReadOutcome, Spread,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_testkit::StaticView;
use proptest::prelude::*;
use read_support::drain;

/// How one peer behaves for the whole scenario.
#[derive(Clone, Debug)]
struct PeerScript {
    holds: bool,
    /// Answer kinds, cycled per GET: 0 answer (Found/NotFound), 1 refuse, 2 fail, 3 silent.
    answers: Vec<u8>,
    latency_ms: u64,
    blocked: bool,
    refused_until_ms: Option<u64>,
    /// Whether lookups return this peer.
    discovered: bool,
    /// A silent answer (kind 3) sends its response head, then stalls: progress, no answer.
    stalls_after_head: bool,
}

#[derive(Clone, Debug)]
struct Scenario {
    key: u64,
    peers: Vec<(u64, PeerScript)>,
    lookup_latency_ms: Vec<u64>,
    spread: u8,
    seed: u64,
}

fn peer_script() -> impl Strategy<Value = PeerScript> {
    (
        prop::bool::weighted(0.06),
        prop::collection::vec(
            prop_oneof![4 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
            1..4,
        ),
        0u64..2_500,
        prop::bool::weighted(0.15),
        prop::option::weighted(0.3, 0u64..40_000),
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.5),
    )
        .prop_map(
            |(holds, answers, latency_ms, blocked, refused_until_ms, discovered, stalls)| {
                PeerScript {
                    holds,
                    answers,
                    latency_ms,
                    blocked,
                    refused_until_ms,
                    discovered,
                    stalls_after_head: stalls,
                }
            },
        )
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        any::<u64>(),
        prop::collection::vec((any::<u64>(), peer_script()), 0..24),
        prop::collection::vec(0u64..12_000, 1..4),
        0u8..3,
        any::<u64>(),
    )
        .prop_map(|(key, peers, lookup_latency_ms, spread, seed)| Scenario {
            key,
            peers,
            lookup_latency_ms,
            spread,
            seed,
        })
}

fn pid(n: u64) -> PeerId {
    // Spread ids over the whole space so XOR order is not just numeric order.
    let mut b = [0u8; 32];
    for (i, chunk) in b.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&(n.rotate_left(i as u32 * 16) ^ (i as u64)).to_be_bytes());
    }
    PeerId(b)
}

enum Event {
    Lookup,
    Progress(GetId),
    Answer(GetId, GetOutcome),
}

/// Runs one scenario to completion, checking invariants; returns the action trace.
fn run(s: &Scenario) -> (Vec<ReadEvent>, ReadOutcome) {
    let key = Key(pid(s.key).0);
    let cfg = ReadConfig {
        spread: match s.spread {
            0 => Spread::Uniform,
            1 => Spread::Nearest,
            _ => Spread::LeastLoadedOfTwo,
        },
        ..ReadConfig::default()
    };
    let group = cfg.close_group_size;
    let max_rounds = 1 + cfg.max_refusal_waits + cfg.max_plain_retries;
    let mut scripts: BTreeMap<PeerId, PeerScript> = BTreeMap::new();
    let mut view = StaticView::new();
    for (n, script) in &s.peers {
        let p = pid(*n);
        if script.blocked {
            view.block(p);
        }
        if let Some(ms) = script.refused_until_ms {
            view.refuse_until(p, Instant::from_millis(ms));
        }
        scripts.insert(p, script.clone());
    }
    let mut asked: BTreeMap<PeerId, usize> = BTreeMap::new();
    let mut not_found: BTreeSet<PeerId> = BTreeSet::new();
    // Peers whose latest answer to this read was a refusal.
    let mut refused_in_read: BTreeSet<PeerId> = BTreeSet::new();
    let mut queue: BTreeMap<(Instant, u64), Event> = BTreeMap::new();
    let mut seq = 0u64;
    let mut get_peer: BTreeMap<GetId, PeerId> = BTreeMap::new();
    let mut cancelled: BTreeSet<GetId> = BTreeSet::new();
    // GETs in flight as the driver sees them, and those that reported progress.
    let mut in_flight: BTreeSet<GetId> = BTreeSet::new();
    let mut progressed: BTreeSet<GetId> = BTreeSet::new();
    let mut lookups = 0usize;
    let mut read = Read::new(key, cfg, Instant::ZERO, s.seed).unwrap();
    let mut now = Instant::ZERO;
    let mut trace = Vec::new();
    for _step in 0..100_000 {
        let actions = drain(&mut read, now, &view);
        if let Some(deadline) = read.poll_timeout().map(|d| d.at) {
            assert!(deadline > now, "poll_timeout stays in the past: busy loop");
        }
        for action in actions {
            assert!(read.gets_in_flight() <= 2, "more than two GETs in flight");
            match &action {
                ReadEvent::Lookup => {
                    let lat = s.lookup_latency_ms[lookups % s.lookup_latency_ms.len()];
                    lookups += 1;
                    seq += 1;
                    queue.insert((now + Duration::from_millis(lat), seq), Event::Lookup);
                }
                ReadEvent::Get { id, peer } => {
                    assert!(view.eligible(now, peer), "GET to ineligible {peer}");
                    assert!(
                        view.refused_for(now, peer).is_none(),
                        "GET to refusing {peer}"
                    );
                    if let [only] = in_flight.iter().collect::<Vec<_>>()[..] {
                        assert!(
                            !progressed.contains(only),
                            "hedged GET {only:?} although it showed progress"
                        );
                    }
                    in_flight.insert(*id);
                    get_peer.insert(*id, *peer);
                    refused_in_read.remove(peer); // asked again: its old refusal is over
                    let script = &scripts[peer];
                    let n = asked.entry(*peer).or_default();
                    let kind = script.answers[*n % script.answers.len()];
                    *n += 1;
                    let outcome = match kind {
                        0 if script.holds => Some(GetOutcome::Found(Bytes::from_static(b"x"))),
                        0 => Some(GetOutcome::NotFound),
                        1 => Some(GetOutcome::Refused { retry_after: None }),
                        2 => Some(GetOutcome::Failed),
                        _ => None,
                    };
                    let head = matches!(kind, 0 | 1) || (kind == 3 && script.stalls_after_head);
                    if head {
                        seq += 1;
                        let at = now + Duration::from_millis(script.latency_ms / 2);
                        queue.insert((at, seq), Event::Progress(*id));
                    }
                    if let Some(o) = outcome {
                        seq += 1;
                        let at = now + Duration::from_millis(script.latency_ms);
                        queue.insert((at, seq), Event::Answer(*id, o));
                    }
                }
                ReadEvent::Cancel { id } => {
                    in_flight.remove(id);
                    cancelled.insert(*id);
                }
                ReadEvent::FetchOrigin => unreachable!("no origin configured"),
                ReadEvent::Done(outcome) => {
                    let outcome = outcome.clone();
                    trace.push(action);
                    assert!(read.stats().rounds <= max_rounds, "{:?}", read.stats());
                    if outcome == ReadOutcome::Absent {
                        assert!(
                            not_found.len() >= group,
                            "Absent without a group of NotFounds"
                        );
                        let mut possible = refused_in_read.clone();
                        view.for_each_refused(now, &mut |p, _| {
                            possible.insert(p);
                        });
                        for p in possible {
                            let d = key.distance(&p);
                            let nearer = not_found.iter().filter(|q| key.distance(q) < d).count();
                            assert!(
                                not_found.contains(&p) || nearer >= group,
                                "Absent while possible holder {p} refuses"
                            );
                        }
                    }
                    if let ReadOutcome::Found(_) = outcome {
                        assert!(scripts.values().any(|s| s.holds));
                    }
                    return (trace, outcome);
                }
            }
            trace.push(action);
        }
        let next_event = queue.keys().next().map(|(t, _)| *t);
        let next = match (next_event, read.poll_timeout().map(|d| d.at)) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a
                .or(b)
                .expect("a read that is not done always has something pending"),
        };
        assert!(next >= now);
        now = next;
        while let Some(entry) = queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            match entry.remove() {
                Event::Lookup => {
                    let found: Vec<PeerId> = scripts
                        .iter()
                        .filter(|(p, s)| s.discovered && view.refused_for(now, p).is_none())
                        .map(|(p, _)| *p)
                        .collect();
                    read.handle_lookup(now, &found);
                }
                Event::Progress(id) => {
                    if in_flight.contains(&id) {
                        progressed.insert(id);
                    }
                    read.handle_get_progress(now, id);
                }
                Event::Answer(id, outcome) => {
                    in_flight.remove(&id);
                    // The driver mirrors answers the read still wants into its own state:
                    // a refusal goes into its cooldown view for 15 s.
                    if !cancelled.contains(&id) {
                        let peer = get_peer[&id];
                        refused_in_read.remove(&peer);
                        match &outcome {
                            GetOutcome::NotFound => {
                                not_found.insert(peer);
                            }
                            GetOutcome::Refused { .. } => {
                                refused_in_read.insert(peer);
                                view.refuse_until(peer, now + Duration::from_secs(15));
                            }
                            _ => {}
                        }
                    }
                    read.handle_get(now, id, outcome);
                }
            }
        }
        read.handle_timeout(now);
    }
    panic!("read did not finish");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn read_invariants_hold_under_random_events(s in scenario()) {
        let (trace, outcome) = run(&s);
        if std::env::var_os("READ_PROPS_SHOW").is_some() {
            eprintln!("{outcome:?} {}", trace.len());
        }
        let (again, outcome2) = run(&s);
        prop_assert_eq!(&trace, &again, "same seed, same actions");
        prop_assert_eq!(outcome, outcome2);
    }
}
