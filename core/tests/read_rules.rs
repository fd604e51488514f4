//! The read machine's rules, one scenario each, with injected time. Each test names its
//! rule and would fail if the rule were removed.

mod read_support;

use bytes::Bytes;
use peerblock_core::cooldown::{CooldownConfig, CooldownTable, DialOutcome};
use peerblock_core::placement::PeerId;
use peerblock_core::read::{
    Absence, GetOutcome, OriginOutcome, Read, ReadConfig, ReadEvent, ReadOutcome, Spread,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_testkit::StaticView;
use read_support::{drain, gets, key_and_peers, millis, secs};

fn found() -> GetOutcome {
    GetOutcome::Found(Bytes::from_static(b"block"))
}

fn config(spread: Spread) -> ReadConfig {
    ReadConfig {
        spread,
        ..ReadConfig::default()
    }
}

/// Answers every GET in `actions` (and the GETs that follow) with `answer(peer)` at `now`,
/// until the read asks for nothing more at this instant. Returns every action seen.
fn answer_all(
    read: &mut Read,
    now: Instant,
    view: &StaticView,
    mut actions: Vec<ReadEvent>,
    answer: &mut dyn FnMut(PeerId) -> GetOutcome,
) -> Vec<ReadEvent> {
    let mut seen = Vec::new();
    while !actions.is_empty() {
        for a in &actions {
            if let ReadEvent::Get { id, peer } = a {
                read.handle_get(now, *id, answer(*peer));
            }
        }
        seen.append(&mut actions);
        actions = drain(read, now, view);
    }
    seen
}

fn done(actions: &[ReadEvent]) -> Option<ReadOutcome> {
    actions.iter().find_map(|a| match a {
        ReadEvent::Done(o) => Some(o.clone()),
        _ => None,
    })
}

#[test]
fn common_read_looks_up_gets_once_and_finds() {
    let (key, peers) = key_and_peers(7);
    let view = StaticView::new();
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 1).unwrap();
    assert_eq!(drain(&mut read, secs(0), &view), vec![ReadEvent::Lookup]);
    read.handle_lookup(millis(20), &peers);
    let a = drain(&mut read, millis(20), &view);
    let g = gets(&a);
    assert_eq!(g.len(), 1);
    read.handle_get(millis(50), g[0].0, found());
    assert_eq!(
        drain(&mut read, millis(50), &view),
        vec![ReadEvent::Done(ReadOutcome::Found(Bytes::from_static(
            b"block"
        )))]
    );
    assert!(read.is_finished());
    assert_eq!(read.poll_timeout().map(|d| d.at), None);
}

/// Rule: first reads spread uniformly over the close group (each of 7 holders about 1/7 of
/// 7,000 first reads, ±300), and past the close group candidates go nearest-first.
#[test]
fn first_reads_spread_over_the_close_group_then_nearest_first() {
    let (key, peers) = key_and_peers(10);
    let view = StaticView::new();
    let mut first = [0u32; 10];
    for seed in 0..7_000u64 {
        let mut read = Read::new(key, ReadConfig::default(), secs(0), seed).unwrap();
        let _ = drain(&mut read, secs(0), &view);
        read.handle_lookup(secs(0), &peers);
        let a = drain(&mut read, secs(0), &view);
        let order: Vec<PeerId> = gets(&answer_all(&mut read, secs(0), &view, a, &mut |_| {
            GetOutcome::NotFound
        }))
        .into_iter()
        .map(|(_, p)| p)
        .collect();
        assert_eq!(order.len(), 10);
        first[(order[0].0[31] - 1) as usize] += 1;
        let mut group: Vec<PeerId> = order[..7].to_vec();
        group.sort();
        assert_eq!(group, peers[..7], "the close group is asked first");
        assert_eq!(order[7..], peers[7..], "then nearest-first");
    }
    for (i, n) in first.iter().enumerate().take(7) {
        assert!(
            (700..=1_300).contains(n),
            "holder {i}: {n} of 7,000 ({first:?})"
        );
    }
    assert_eq!(&first[7..], &[0, 0, 0]);
}

/// Rule: with `Nearest`, the pinned pre-spreading order (for tests and A/B replays).
#[test]
fn nearest_spread_is_pinned_nearest_first() {
    let (key, peers) = key_and_peers(9);
    let view = StaticView::new();
    let mut read = Read::new(key, config(Spread::Nearest), secs(0), 3).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let a = drain(&mut read, secs(0), &view);
    let order: Vec<PeerId> = gets(&answer_all(&mut read, secs(0), &view, a, &mut |_| {
        GetOutcome::NotFound
    }))
    .into_iter()
    .map(|(_, p)| p)
    .collect();
    assert_eq!(order, peers);
}

/// Rule: early reads (before the lookup finishes) choose within the close group known so
/// far, then go nearest-first; later lookup results reshape the group.
#[test]
fn early_reads_choose_within_the_known_close_group_then_nearest_first() {
    let key = peerblock_core::placement::Key::from_u64(0);
    let known: Vec<PeerId> = [3u64, 5, 9, 10, 11, 12, 13, 14, 20]
        .into_iter()
        .map(PeerId::from_u64)
        .collect();
    let view = StaticView::new();
    let mut firsts = std::collections::BTreeSet::new();
    for seed in 0..500 {
        let mut read = Read::new(key, ReadConfig::default(), secs(0), seed).unwrap();
        assert_eq!(drain(&mut read, secs(0), &view), vec![ReadEvent::Lookup]);
        read.handle_lookup_progress(millis(10), &known);
        let a = drain(&mut read, millis(10), &view);
        let g = gets(&a);
        assert_eq!(g.len(), 1, "an early read goes out before the lookup ends");
        firsts.insert(g[0].1);
        // Everything known answers NotFound while the lookup is still running.
        let seen = answer_all(&mut read, millis(10), &view, a, &mut |_| {
            GetOutcome::NotFound
        });
        let order: Vec<PeerId> = gets(&seen).into_iter().map(|(_, p)| p).collect();
        assert_eq!(order.len(), known.len());
        assert_eq!(
            order[7..],
            known[7..],
            "past the known group: nearest-first"
        );
        assert_eq!(done(&seen), None, "the round waits for the lookup");
        // The lookup finishes with two nearer peers: they are the new group's untried.
        read.handle_lookup(millis(20), &[PeerId::from_u64(1), PeerId::from_u64(2)]);
        let g = gets(&drain(&mut read, millis(20), &view));
        assert_eq!(g.len(), 1);
        assert!(g[0].1 == PeerId::from_u64(1) || g[0].1 == PeerId::from_u64(2));
    }
    let group: std::collections::BTreeSet<PeerId> = known[..7].iter().copied().collect();
    assert_eq!(
        firsts, group,
        "every known-group member served some first reads"
    );
}

/// Rule: an out-of-range choice stays inside the close group.
#[test]
fn out_of_range_choice_stays_inside_the_close_group() {
    let (key, peers) = key_and_peers(10);
    let view = StaticView::new();
    let mut read = Read::new(key, config(Spread::Custom(|_, _| usize::MAX)), secs(0), 0).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let g = gets(&drain(&mut read, secs(0), &view));
    assert_eq!(g[0].1, PeerId::from_u64(7));
}

/// Rule: an ineligible candidate (suppressed, circuit open) is never chosen over an
/// eligible one, and never chosen at all.
#[test]
fn ineligible_candidate_is_never_chosen_over_an_eligible_one() {
    let (key, peers) = key_and_peers(10);
    let mut view = StaticView::new();
    for p in &peers[..6] {
        view.block(*p);
    }
    for seed in 0..200 {
        let mut read = Read::new(key, ReadConfig::default(), secs(0), seed).unwrap();
        let _ = drain(&mut read, secs(0), &view);
        read.handle_lookup(secs(0), &peers);
        let a = drain(&mut read, secs(0), &view);
        assert_eq!(gets(&a)[0].1, peers[6], "the only eligible group member");
        let seen = answer_all(&mut read, secs(0), &view, a, &mut |_| GetOutcome::NotFound);
        for (_, p) in gets(&seen) {
            assert!(!view.blocked.contains(&p), "GET to blocked {p}");
        }
    }
    view.block(peers[6]);
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 9).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    assert_eq!(gets(&drain(&mut read, secs(0), &view))[0].1, peers[7]);
}

/// Rule: a holder discovery skipped for a 15 s refusal is read after exactly 15 s, although
/// the seven peers discovery found instead all answered NotFound.
#[test]
fn holder_skipped_for_a_refusal_is_read_after_exactly_15_s() {
    let (key, peers) = key_and_peers(8);
    let holder = peers[0];
    let mut view = StaticView::new();
    view.refuse_until(holder, secs(15));
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 5).unwrap();
    assert_eq!(drain(&mut read, secs(0), &view), vec![ReadEvent::Lookup]);
    read.handle_lookup(secs(0), &peers[1..]); // discovery skips the refusing holder
    let a = drain(&mut read, secs(0), &view);
    let seen = answer_all(&mut read, secs(0), &view, a, &mut |_| GetOutcome::NotFound);
    assert_eq!(gets(&seen).len(), 7);
    assert_eq!(
        done(&seen),
        None,
        "seven NotFounds prove nothing while the holder refuses"
    );
    assert_eq!(read.poll_timeout().map(|d| d.at), Some(secs(15)));
    read.handle_timeout(secs(15));
    assert_eq!(drain(&mut read, secs(15), &view), vec![ReadEvent::Lookup]);
    read.handle_lookup(secs(15), &peers);
    let g = gets(&drain(&mut read, secs(15), &view));
    assert_eq!(g, vec![(g[0].0, holder)], "read at exactly 15 s");
    read.handle_get(secs(15), g[0].0, found());
    assert!(matches!(
        drain(&mut read, secs(15), &view).as_slice(),
        [ReadEvent::Done(ReadOutcome::Found(_))]
    ));
}

/// Rule: a peer whose refusal ends during a round counts as ready: after a 2 s round it is
/// retried after the usual 1 s instead of the round proving absence.
#[test]
fn refusal_ending_during_a_2_s_round_is_retried_after_the_usual_1_s() {
    let (key, peers) = key_and_peers(8);
    let holder = peers[0];
    let mut view = StaticView::new();
    view.refuse_until(holder, millis(1_500));
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 6).unwrap();
    assert_eq!(drain(&mut read, secs(0), &view), vec![ReadEvent::Lookup]);
    read.handle_lookup(secs(2), &peers[1..]); // the lookup took 2 s and skipped the holder
    let a = drain(&mut read, secs(2), &view);
    let seen = answer_all(&mut read, secs(2), &view, a, &mut |_| GetOutcome::NotFound);
    assert_eq!(done(&seen), None);
    assert_eq!(read.poll_timeout().map(|d| d.at), Some(secs(3)));
    read.handle_timeout(secs(3));
    assert_eq!(drain(&mut read, secs(3), &view), vec![ReadEvent::Lookup]);
    read.handle_lookup(secs(3), &peers);
    let g = gets(&drain(&mut read, secs(3), &view));
    assert_eq!(g[0].1, holder);
}

/// Rule: a holder refused on every attempt gives Busy after 3 waits (45 s), never Absent.
#[test]
fn always_refused_holder_gives_busy_after_three_waits_never_absent() {
    let (key, peers) = key_and_peers(8);
    let holder = peers[0];
    let mut table = CooldownTable::new(CooldownConfig::default()).unwrap();
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 8).unwrap();
    let mut now = secs(0);
    let mut steps = 0;
    let outcome = loop {
        // Bounded: a read that waits forever fails here instead of hanging the test.
        steps += 1;
        assert!(steps < 100, "no outcome after 100 deadlines (now {now:?})");
        let mut actions = drain(&mut read, now, &table);
        let mut fin = None;
        while !actions.is_empty() {
            for a in &actions {
                match a {
                    ReadEvent::Lookup => read.handle_lookup(now, &peers),
                    ReadEvent::Get { id, peer } if *peer == holder => {
                        table.record(now, *peer, DialOutcome::Refused { retry_after: None });
                        read.handle_get(now, *id, GetOutcome::Refused { retry_after: None });
                    }
                    ReadEvent::Get { id, .. } => read.handle_get(now, *id, GetOutcome::NotFound),
                    ReadEvent::Done(o) => fin = Some(o.clone()),
                    _ => {}
                }
            }
            actions = drain(&mut read, now, &table);
        }
        if let Some(o) = fin {
            break o;
        }
        now = read
            .poll_timeout()
            .map(|d| d.at)
            .expect("a pending read has a deadline");
        read.handle_timeout(now);
    };
    assert_eq!(outcome, ReadOutcome::Busy);
    assert_eq!(now, secs(45));
    assert_eq!(read.stats().refusal_waits, 3);
    assert_eq!(read.stats().rounds, 4);
}

/// Rule: a refused peer beyond the close group does not delay an authoritative absence
/// (and one inside it does).
#[test]
fn refused_peer_beyond_the_close_group_does_not_delay_absence() {
    let (key, peers) = key_and_peers(8);
    let mut view = StaticView::new();
    view.refuse_until(peers[7], secs(15));
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 2).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let a = drain(&mut read, secs(0), &view);
    let seen = answer_all(&mut read, secs(0), &view, a, &mut |_| GetOutcome::NotFound);
    assert_eq!(done(&seen), Some(ReadOutcome::Absent));

    // Contrast: one of the seven nearer peers fails instead, so the refused one may hold it.
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 2).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let a = drain(&mut read, secs(0), &view);
    let seen = answer_all(&mut read, secs(0), &view, a, &mut |p| {
        if p == peers[2] {
            GetOutcome::Failed
        } else {
            GetOutcome::NotFound
        }
    });
    assert_eq!(done(&seen), None);
    assert_eq!(read.poll_timeout().map(|d| d.at), Some(secs(15)));
}

/// Rule: the hedge fires at exactly the hedge delay, and never more than two GETs are in
/// flight.
#[test]
fn hedge_fires_at_exactly_the_delay_and_never_more_than_two_in_flight() {
    let (key, peers) = key_and_peers(10);
    let view = StaticView::new();
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 4).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    assert_eq!(gets(&drain(&mut read, secs(0), &view)).len(), 1);
    assert_eq!(read.poll_timeout().map(|d| d.at), Some(secs(1)));
    read.handle_timeout(millis(999));
    assert!(drain(&mut read, millis(999), &view).is_empty());
    read.handle_timeout(secs(1));
    let g = gets(&drain(&mut read, secs(1), &view));
    assert_eq!(g.len(), 1, "the hedge goes out at exactly 1 s");
    assert_eq!(read.gets_in_flight(), 2);
    assert_eq!((read.stats().gets, read.stats().hedges), (2, 1));
    for ms in (1_000..9_000).step_by(250) {
        read.handle_timeout(millis(ms));
        assert!(gets(&drain(&mut read, millis(ms), &view)).is_empty());
        assert_eq!(read.gets_in_flight(), 2);
    }
    // The first GET's timeout frees a slot: one more GET, still two in flight.
    read.handle_timeout(secs(10));
    let a = drain(&mut read, secs(10), &view);
    assert!(matches!(a[0], ReadEvent::Cancel { .. }));
    assert_eq!(gets(&a).len(), 1);
    assert_eq!(read.gets_in_flight(), 2);
    // A GET sent while another is in flight counts as a hedge, whatever freed its slot.
    assert_eq!((read.stats().gets, read.stats().hedges), (3, 2));
}

/// Rule: the first Found ends the read and cancels the other GET in flight.
#[test]
fn found_cancels_the_other_get() {
    let (key, peers) = key_and_peers(7);
    let view = StaticView::new();
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 4).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let first = gets(&drain(&mut read, secs(0), &view))[0].0;
    read.handle_timeout(secs(1));
    let hedge = gets(&drain(&mut read, secs(1), &view))[0].0;
    read.handle_get(millis(1_100), hedge, found());
    let a = drain(&mut read, millis(1_100), &view);
    assert_eq!(a[0], ReadEvent::Cancel { id: first });
    assert!(matches!(a[1], ReadEvent::Done(ReadOutcome::Found(_))));
    read.handle_get(millis(1_200), first, GetOutcome::NotFound); // late: ignored
    assert!(drain(&mut read, millis(1_200), &view).is_empty());
}

/// Rule: with no refusals, one 1 s retry, then finish; failures give Unavailable, not Absent.
#[test]
fn unreachable_holders_give_one_retry_then_unavailable() {
    let (key, peers) = key_and_peers(7);
    let view = StaticView::new();
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 4).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let a = drain(&mut read, secs(0), &view);
    let seen = answer_all(&mut read, secs(0), &view, a, &mut |_| GetOutcome::Failed);
    assert_eq!(done(&seen), None);
    assert_eq!(read.poll_timeout().map(|d| d.at), Some(secs(1)));
    read.handle_timeout(secs(1));
    // The retry round looks up again; the peers already known get an early read at once.
    let mut a = drain(&mut read, secs(1), &view);
    assert_eq!(a[0], ReadEvent::Lookup);
    assert_eq!(gets(&a).len(), 1);
    read.handle_lookup(secs(1), &peers);
    a.extend(drain(&mut read, secs(1), &view));
    let seen = answer_all(&mut read, secs(1), &view, a, &mut |_| GetOutcome::Failed);
    assert_eq!(
        gets(&seen).len(),
        7,
        "failed peers are asked again in the retry"
    );
    assert_eq!(done(&seen), Some(ReadOutcome::Unavailable));
}

/// Rule: with an origin configured, a read peers cannot serve ends with an origin fetch;
/// an origin failure reports the peers' outcome.
#[test]
fn origin_is_the_last_resort() {
    let (key, peers) = key_and_peers(7);
    let view = StaticView::new();
    let cfg = ReadConfig {
        origin: true,
        max_plain_retries: 0,
        ..ReadConfig::default()
    };
    let mut read = Read::new(key, cfg.clone(), secs(0), 4).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let a = drain(&mut read, secs(0), &view);
    let seen = answer_all(&mut read, secs(0), &view, a, &mut |_| GetOutcome::Failed);
    assert_eq!(seen.last(), Some(&ReadEvent::FetchOrigin));
    read.handle_origin(secs(1), OriginOutcome::Found(Bytes::from_static(b"up")));
    assert_eq!(
        drain(&mut read, secs(1), &view),
        vec![ReadEvent::Done(ReadOutcome::FoundAtOrigin(
            Bytes::from_static(b"up")
        ))]
    );

    let mut read = Read::new(key, cfg, secs(0), 4).unwrap();
    read.handle_lookup(secs(0), &peers); // candidates up front: no Lookup action
    let a = drain(&mut read, secs(0), &view);
    assert!(!a.contains(&ReadEvent::Lookup));
    let seen = answer_all(&mut read, secs(0), &view, a, &mut |_| GetOutcome::Failed);
    assert_eq!(seen.last(), Some(&ReadEvent::FetchOrigin));
    assert_eq!(read.poll_timeout().map(|d| d.at), Some(secs(10)));
    read.handle_timeout(secs(10));
    assert_eq!(
        drain(&mut read, secs(10), &view),
        vec![ReadEvent::Done(ReadOutcome::Unavailable)]
    );
}

/// Rule: with an origin configured, peers' 404s prove nothing (the content lives at the
/// origin; its holders may not have fetched it yet): a read whose peers all said "not
/// found" and whose origin fetch then fails, or times out, ends `Unavailable`, never
/// `Absent`; only the origin's own "not found" ends it `Absent`.
#[test]
fn with_an_origin_peers_404s_then_an_origin_failure_end_unavailable_not_absent() {
    let (key, peers) = key_and_peers(7);
    let view = StaticView::new();
    let cfg = ReadConfig {
        origin: true,
        max_plain_retries: 0,
        ..ReadConfig::default()
    };
    let all_absent = |read: &mut Read| {
        read.handle_lookup(secs(0), &peers);
        let a = drain(read, secs(0), &view);
        let seen = answer_all(read, secs(0), &view, a, &mut |_| GetOutcome::NotFound);
        assert_eq!(seen.last(), Some(&ReadEvent::FetchOrigin));
    };
    // The origin fails.
    let mut read = Read::new(key, cfg.clone(), secs(0), 4).unwrap();
    all_absent(&mut read);
    read.handle_origin(secs(1), OriginOutcome::Failed);
    assert_eq!(
        drain(&mut read, secs(1), &view),
        vec![ReadEvent::Done(ReadOutcome::Unavailable)]
    );
    // The origin never answers.
    let mut read = Read::new(key, cfg.clone(), secs(0), 4).unwrap();
    all_absent(&mut read);
    let at = read.poll_timeout().expect("the origin's deadline").at;
    read.handle_timeout(at);
    assert_eq!(
        drain(&mut read, at, &view),
        vec![ReadEvent::Done(ReadOutcome::Unavailable)]
    );
    // The origin says not found: absent.
    let mut read = Read::new(key, cfg, secs(0), 4).unwrap();
    all_absent(&mut read);
    read.handle_origin(secs(1), OriginOutcome::NotFound);
    assert_eq!(
        drain(&mut read, secs(1), &view),
        vec![ReadEvent::Done(ReadOutcome::Absent)]
    );
}

/// Contract: time going backwards is clamped, not a panic, and a spurious timeout is
/// harmless.
#[test]
fn time_going_backwards_is_clamped() {
    let (key, peers) = key_and_peers(7);
    let view = StaticView::new();
    let mut read = Read::new(key, ReadConfig::default(), secs(5), 4).unwrap();
    read.handle_timeout(secs(1));
    let _ = drain(&mut read, secs(1), &view);
    read.handle_lookup(secs(0), &peers);
    let _ = drain(&mut read, secs(0), &view);
    assert_eq!(
        read.poll_timeout().map(|d| d.at),
        Some(secs(6)),
        "hedge from the latest instant seen"
    );
    let _ = Duration::ZERO;
}

/// Rule (bound): a lookup that never answers is given up after `lookup_timeout`, and the
/// read goes on with the peers it knows; a GET never answered is cancelled after
/// `get_timeout`.
#[test]
fn silent_lookup_and_silent_get_are_bounded_by_their_timeouts() {
    let (key, peers) = key_and_peers(7);
    let view = StaticView::new();
    let cfg = ReadConfig {
        max_plain_retries: 0,
        ..ReadConfig::default()
    };
    let mut read = Read::new(key, cfg, secs(0), 4).unwrap();
    assert_eq!(drain(&mut read, secs(0), &view), vec![ReadEvent::Lookup]);
    assert_eq!(read.poll_timeout().map(|d| d.at), Some(secs(10)));
    read.handle_timeout(secs(10));
    assert_eq!(
        drain(&mut read, secs(10), &view),
        vec![ReadEvent::Done(ReadOutcome::Unavailable)],
        "no lookup answer and no known peers: nothing to ask"
    );

    let mut read = Read::new(key, ReadConfig::default(), secs(0), 4).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup_progress(secs(0), &peers[..1]);
    let g = gets(&drain(&mut read, secs(0), &view));
    assert_eq!(g.len(), 1);
    read.handle_timeout(secs(10)); // lookup and GET both time out
    let a = drain(&mut read, secs(10), &view);
    assert_eq!(a, vec![ReadEvent::Cancel { id: g[0].0 }]);
    assert_eq!(
        read.poll_timeout().map(|d| d.at),
        Some(secs(11)),
        "then the 1 s retry"
    );
}

/// Rule: absence is proved only by the nearest close group answering NotFound. When every
/// one of the seven nearest peers (the holders) is unreachable, the seven next-nearest
/// answer NotFound honestly; that proves nothing about the record, so the read ends
/// Unavailable, never Absent.
#[test]
fn not_found_from_peers_past_dead_holders_is_not_absence() {
    let (key, peers) = key_and_peers(14);
    let view = StaticView::new();
    let cfg = ReadConfig {
        max_plain_retries: 0,
        ..ReadConfig::default()
    };
    let mut read = Read::new(key, cfg, secs(0), 6).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let a = drain(&mut read, secs(0), &view);
    let holders = &peers[..7];
    let seen = answer_all(&mut read, secs(0), &view, a, &mut |p| {
        if holders.contains(&p) {
            GetOutcome::Failed
        } else {
            GetOutcome::NotFound
        }
    });
    let asked: Vec<PeerId> = gets(&seen).iter().map(|g| g.1).collect();
    assert!(
        peers[7..].iter().all(|p| asked.contains(p)),
        "the read goes on past the dead holders and hears seven NotFounds"
    );
    assert_eq!(done(&seen), Some(ReadOutcome::Unavailable));

    // The reference client's rule, kept for replays, counts those seven NotFounds.
    let cfg = ReadConfig {
        max_plain_retries: 0,
        absence: Absence::AnyCloseGroup,
        ..ReadConfig::default()
    };
    let mut read = Read::new(key, cfg, secs(0), 6).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let a = drain(&mut read, secs(0), &view);
    let seen = answer_all(&mut read, secs(0), &view, a, &mut |p| {
        if holders.contains(&p) {
            GetOutcome::Failed
        } else {
            GetOutcome::NotFound
        }
    });
    assert_eq!(done(&seen), Some(ReadOutcome::Absent));
}

#[test]
fn a_read_keeps_the_key_and_the_configuration_it_was_made_with() {
    let key = peerblock_core::placement::Key::from_u64(0xb10c);
    let mut config = config(Spread::Nearest);
    config.max_refusal_waits = 7;
    let read = Read::new(key, config, secs(0), 1).unwrap();
    assert_eq!(read.key(), &key);
    assert_ne!(key, Default::default());
    // The configuration given, not the default one.
    assert_eq!(read.config().max_refusal_waits, 7);
    assert_ne!(ReadConfig::default().max_refusal_waits, 7);
    assert!(matches!(read.config().spread, Spread::Nearest));
    assert!(!matches!(ReadConfig::default().spread, Spread::Nearest));
}

#[test]
fn every_read_outcome_has_its_documented_name() {
    use peerblock_core::bytes::Bytes;
    use peerblock_core::read::ReadOutcome;
    let named = [
        (ReadOutcome::Found(Bytes::new()), "found"),
        (ReadOutcome::FoundAtOrigin(Bytes::new()), "origin"),
        (ReadOutcome::Absent, "absent"),
        (ReadOutcome::Busy, "busy"),
        (ReadOutcome::Unavailable, "unavailable"),
        (ReadOutcome::Cancelled, "cancelled"),
    ];
    for (outcome, name) in named {
        assert_eq!(outcome.name(), name, "{outcome:?}");
    }
}
