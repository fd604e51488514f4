//! The read machine on the driving contract: timers as data (`poll_timeout` gives the
//! earliest deadline and its `ReadTimer`), `cancel`, `is_finished`, the progress input and
//! the hedge rules, and the refusal cooldown and cap taken from `ReadConfig`. One rule per
//! test, with injected time.

mod read_support;

use bytes::Bytes;
use peerblock_core::read::{
    GetOutcome, HedgeRule, Read, ReadConfig, ReadConfigError, ReadEvent, ReadOutcome, ReadTimer,
    MAX_REFUSAL_COOLDOWN,
};
use peerblock_core::refusal::{DEFAULT_MAX_RETRY_AFTER, DEFAULT_REFUSED_COOLDOWN};
use peerblock_core::time::{Deadline, Duration, Instant};
use peerblock_testkit::StaticView;
use read_support::{drain, gets, key_and_peers, millis, secs};

fn found() -> GetOutcome {
    GetOutcome::Found(Bytes::from_static(b"block"))
}

fn deadline(at: Instant, timer: ReadTimer) -> Option<Deadline<ReadTimer>> {
    Some(Deadline { at, timer })
}

fn hedge(rule: HedgeRule) -> ReadConfig {
    ReadConfig {
        hedge: rule,
        ..ReadConfig::default()
    }
}

/// A read of `n` peers with its lookup answered at 0 s and its first GET out; returns the
/// read and that GET's id.
fn one_get_out(cfg: ReadConfig, n: u64) -> (Read, peerblock_core::read::GetId) {
    let (key, peers) = key_and_peers(n);
    let view = StaticView::new();
    let mut read = Read::new(key, cfg, secs(0), 3).unwrap();
    assert_eq!(drain(&mut read, secs(0), &view), vec![ReadEvent::Lookup]);
    read.handle_lookup(secs(0), &peers);
    let g = gets(&drain(&mut read, secs(0), &view));
    assert_eq!(g.len(), 1);
    (read, g[0].0)
}

/// Contract: `poll_timeout` names its reason: the lookup's deadline while a lookup runs.
#[test]
fn poll_timeout_names_the_lookup_deadline() {
    let (key, _) = key_and_peers(7);
    let view = StaticView::new();
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 1).unwrap();
    assert_eq!(drain(&mut read, secs(0), &view), vec![ReadEvent::Lookup]);
    assert_eq!(read.poll_timeout(), deadline(secs(10), ReadTimer::Lookup));
}

/// Contract: GET deadlines live in the timer table: once the hedge is out, the earliest
/// deadline is the first GET's, named by its id; then the hedge's, named by its id.
#[test]
fn get_deadlines_are_timers_named_by_their_get() {
    let (mut read, first) = one_get_out(ReadConfig::default(), 10);
    let view = StaticView::new();
    assert_eq!(read.poll_timeout(), deadline(secs(1), ReadTimer::Hedge));
    read.handle_timeout(secs(1));
    let second = gets(&drain(&mut read, secs(1), &view))[0].0;
    assert_eq!(
        read.poll_timeout(),
        deadline(secs(10), ReadTimer::Get(first))
    );
    read.handle_get(secs(2), first, GetOutcome::NotFound);
    // The survivor is older than the hedge delay: a GET goes out at once, in the freed slot.
    let third = gets(&drain(&mut read, secs(2), &view))[0].0;
    assert_eq!(
        read.poll_timeout(),
        deadline(secs(11), ReadTimer::Get(second))
    );
    read.handle_timeout(secs(11));
    assert_eq!(
        drain(&mut read, secs(11), &view)[0],
        ReadEvent::Cancel { id: second }
    );
    // `third` (silent since 2 s) is hedged at once in the slot `second` freed; the earliest
    // deadline is now `third`'s, in the slot `first` freed.
    assert_eq!(
        read.poll_timeout(),
        deadline(secs(12), ReadTimer::Get(third))
    );
}

/// Contract: `cancel` cancels every GET in flight, then ends the read with `Cancelled`.
#[test]
fn cancel_cancels_the_gets_in_flight_then_done_cancelled() {
    let (mut read, first) = one_get_out(ReadConfig::default(), 10);
    let view = StaticView::new();
    read.handle_timeout(secs(1));
    let second = gets(&drain(&mut read, secs(1), &view))[0].0;
    read.cancel(millis(1_500));
    assert!(!read.is_finished(), "finished only once Done is drained");
    assert_eq!(
        drain(&mut read, millis(1_500), &view),
        vec![
            ReadEvent::Cancel { id: first },
            ReadEvent::Cancel { id: second },
            ReadEvent::Done(ReadOutcome::Cancelled),
        ]
    );
    assert!(read.is_finished());
    assert_eq!(read.poll_timeout(), None);
    assert_eq!(read.gets_in_flight(), 0);
}

/// Contract: `cancel` is idempotent, and inputs after it are ignored.
#[test]
fn cancel_is_idempotent_and_later_inputs_are_ignored() {
    let (mut read, first) = one_get_out(ReadConfig::default(), 10);
    let view = StaticView::new();
    read.cancel(millis(100));
    read.cancel(millis(200));
    assert_eq!(
        drain(&mut read, millis(200), &view),
        vec![
            ReadEvent::Cancel { id: first },
            ReadEvent::Done(ReadOutcome::Cancelled)
        ]
    );
    read.cancel(millis(300));
    read.handle_get(millis(300), first, found());
    read.handle_timeout(secs(30));
    assert!(drain(&mut read, secs(30), &view).is_empty());
    assert!(read.is_finished());
}

/// Contract: a read that already has its outcome keeps it: `cancel` before the pending
/// `Done(Found)` is drained changes nothing.
#[test]
fn cancel_after_the_outcome_keeps_the_outcome() {
    let (mut read, first) = one_get_out(ReadConfig::default(), 10);
    let view = StaticView::new();
    read.handle_get(millis(100), first, found());
    read.cancel(millis(100));
    assert!(matches!(
        drain(&mut read, millis(100), &view).as_slice(),
        [ReadEvent::Done(ReadOutcome::Found(_))]
    ));
}

/// Contract: `cancel` during a refusal wait (nothing in flight) ends the read at once.
/// Answers every GET `first` holds, and those that follow, NotFound at `at`, until the
/// read sends no more; returns the last events. Bounded: a read that never concludes its
/// round fails here instead of hanging the test.
fn all_not_found(
    read: &mut Read,
    view: &StaticView,
    first: Vec<ReadEvent>,
    at: Instant,
) -> Vec<ReadEvent> {
    let mut a = first;
    for _ in 0..100 {
        if gets(&a).is_empty() {
            return a;
        }
        for (id, _) in gets(&a) {
            read.handle_get(at, id, GetOutcome::NotFound);
        }
        a = drain(read, at, view);
    }
    panic!("still sending GETs after 100 batches");
}

#[test]
fn cancel_while_waiting_ends_the_read_without_cancels() {
    let (key, peers) = key_and_peers(8);
    let mut view = StaticView::new();
    view.refuse_until(peers[0], secs(15));
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 5).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers[1..]);
    let first = drain(&mut read, secs(0), &view);
    let _ = all_not_found(&mut read, &view, first, secs(0));
    assert_eq!(read.poll_timeout(), deadline(secs(15), ReadTimer::Wait));
    read.cancel(secs(2));
    assert_eq!(
        drain(&mut read, secs(2), &view),
        vec![ReadEvent::Done(ReadOutcome::Cancelled)]
    );
}

/// Rule: a read given its candidates up front (no lookup action) still takes the view's
/// refusals at the start of its round, so a peer the candidates lack, nearer than those
/// that answered NotFound and refused when the round began, keeps the read from
/// concluding Absent even once its refusal has ended.
#[test]
fn candidates_given_up_front_still_count_a_peer_refused_at_the_rounds_start() {
    let (key, peers) = key_and_peers(8);
    let mut view = StaticView::new();
    // Refused at the round's start, no longer when the answers come.
    view.refuse_until(peers[0], millis(500));
    let mut read = Read::new(key, ReadConfig::default(), secs(0), 5).unwrap();
    read.handle_lookup(secs(0), &peers[1..]);
    let first = drain(&mut read, secs(0), &view);
    let a = all_not_found(&mut read, &view, first, secs(1));
    assert!(
        !a.iter()
            .any(|e| matches!(e, ReadEvent::Done(ReadOutcome::Absent))),
        "absent though a possible holder was refused during the round: {a:?}"
    );
}

/// Rule (on silence, the default): a GET that reported progress before the hedge delay is
/// not hedged, however long it takes.
#[test]
fn on_silence_a_get_with_progress_is_not_hedged() {
    assert_eq!(ReadConfig::default().hedge, HedgeRule::OnSilence);
    let (mut read, first) = one_get_out(ReadConfig::default(), 10);
    let view = StaticView::new();
    read.handle_get_progress(millis(200), first);
    assert_eq!(
        read.poll_timeout(),
        deadline(secs(10), ReadTimer::Get(first))
    );
    for ms in (1_000..10_000).step_by(250) {
        read.handle_timeout(millis(ms));
        assert!(drain(&mut read, millis(ms), &view).is_empty(), "at {ms} ms");
    }
    assert_eq!(read.stats().hedges, 0);
    assert_eq!(read.stats().progressed, 1);
}

/// Rule (on silence): a GET silent for the hedge delay is hedged at exactly the delay;
/// progress arriving later does not take the hedge back.
#[test]
fn on_silence_a_silent_get_is_hedged_at_the_delay() {
    let (mut read, first) = one_get_out(hedge(HedgeRule::OnSilence), 10);
    let view = StaticView::new();
    read.handle_timeout(millis(999));
    assert!(drain(&mut read, millis(999), &view).is_empty());
    read.handle_timeout(secs(1));
    assert_eq!(gets(&drain(&mut read, secs(1), &view)).len(), 1);
    read.handle_get_progress(millis(1_100), first);
    assert_eq!(read.gets_in_flight(), 2);
    assert_eq!(read.stats().hedges, 1);
}

/// Rule (after delay, the reference's): a GET unanswered after the delay is hedged even
/// though its bytes are flowing.
#[test]
fn after_delay_hedges_a_get_whose_bytes_are_flowing() {
    let (mut read, first) = one_get_out(hedge(HedgeRule::AfterDelay), 10);
    let view = StaticView::new();
    read.handle_get_progress(millis(200), first);
    assert_eq!(read.poll_timeout(), deadline(secs(1), ReadTimer::Hedge));
    read.handle_timeout(secs(1));
    assert_eq!(gets(&drain(&mut read, secs(1), &view)).len(), 1);
    assert_eq!(read.stats().hedges, 1);
}

/// Rule (on silence): a hedge that came due while no candidate could take it is dropped
/// when the GET shows progress before a candidate appears.
#[test]
fn on_silence_progress_drops_a_pending_hedge() {
    for (rule, hedges) in [(HedgeRule::OnSilence, 0), (HedgeRule::AfterDelay, 1)] {
        let (key, peers) = key_and_peers(10);
        let view = StaticView::new();
        let mut read = Read::new(key, hedge(rule), secs(0), 3).unwrap();
        let _ = drain(&mut read, secs(0), &view);
        read.handle_lookup_progress(secs(0), &peers[..1]);
        let first = gets(&drain(&mut read, secs(0), &view))[0].0;
        read.handle_timeout(secs(1)); // the hedge is due; nobody else is known yet
        assert!(drain(&mut read, secs(1), &view).is_empty());
        read.handle_get_progress(millis(1_500), first);
        read.handle_lookup(secs(2), &peers);
        assert_eq!(
            gets(&drain(&mut read, secs(2), &view)).len(),
            hedges,
            "{rule:?}"
        );
    }
}

/// Rule (on silence): when one of two GETs ends without the record, a survivor that showed
/// progress is not hedged again (under the reference's rule it is, at once).
#[test]
fn on_silence_a_surviving_get_with_progress_is_not_hedged() {
    for (rule, next) in [(HedgeRule::OnSilence, 0), (HedgeRule::AfterDelay, 1)] {
        let (mut read, first) = one_get_out(hedge(rule), 10);
        let view = StaticView::new();
        read.handle_timeout(secs(1));
        let second = gets(&drain(&mut read, secs(1), &view))[0].0;
        read.handle_get_progress(millis(1_200), first);
        read.handle_get(millis(1_500), second, GetOutcome::NotFound);
        assert_eq!(
            gets(&drain(&mut read, millis(1_500), &view)).len(),
            next,
            "{rule:?}"
        );
    }
}

/// Contract: progress for an unknown, answered or repeated GET is ignored.
#[test]
fn progress_for_unknown_or_repeated_gets_is_ignored() {
    let (mut read, first) = one_get_out(ReadConfig::default(), 10);
    read.handle_get_progress(millis(10), peerblock_core::read::GetId(99));
    assert_eq!(read.stats().progressed, 0);
    read.handle_get_progress(millis(20), first);
    read.handle_get_progress(millis(30), first);
    assert_eq!(read.stats().progressed, 1);
}

/// Rule: a refusal without `Retry-After` keeps the peer skipped for the configured
/// `refused_cooldown` (defaults to the refusal module's 15 s).
#[test]
fn refused_cooldown_comes_from_config() {
    assert_eq!(
        ReadConfig::default().refused_cooldown,
        DEFAULT_REFUSED_COOLDOWN
    );
    for (cooldown, wait_ends) in [(None, secs(15)), (Some(Duration::from_secs(5)), secs(5))] {
        let mut cfg = ReadConfig::default();
        if let Some(c) = cooldown {
            cfg.refused_cooldown = c;
        }
        let end = refusal_wait_end(cfg, None);
        assert_eq!(end, deadline(wait_ends, ReadTimer::Wait), "{cooldown:?}");
    }
}

/// Rule: a peer's `Retry-After` is capped by the configured `max_retry_after` (defaults to
/// the one 15 s cap).
#[test]
fn retry_after_is_capped_by_config() {
    assert_eq!(
        ReadConfig::default().max_retry_after,
        DEFAULT_MAX_RETRY_AFTER
    );
    assert_eq!(DEFAULT_MAX_RETRY_AFTER, Duration::from_secs(15));
    let asked = Some(Duration::from_secs(60));
    let end = refusal_wait_end(ReadConfig::default(), asked);
    assert_eq!(end, deadline(secs(15), ReadTimer::Wait));
    let cfg = ReadConfig {
        max_retry_after: Duration::from_secs(20),
        ..ReadConfig::default()
    };
    assert_eq!(
        refusal_wait_end(cfg, asked),
        deadline(secs(20), ReadTimer::Wait)
    );
}

/// The nearest of 8 peers answers `Refused { retry_after }` at 0 s and the rest
/// `NotFound` (the view knows nothing of the refusal): the read's own cooldown decides
/// when its refusal wait ends.
fn refusal_wait_end(cfg: ReadConfig, retry_after: Option<Duration>) -> Option<Deadline<ReadTimer>> {
    let (key, peers) = key_and_peers(8);
    let view = StaticView::new();
    let mut read = Read::new(key, cfg, secs(0), 5).unwrap();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let mut a = drain(&mut read, secs(0), &view);
    // Bounded: a read that never concludes its round fails here instead of hanging.
    for _ in 0..100 {
        if gets(&a).is_empty() {
            break;
        }
        for (id, peer) in gets(&a) {
            let outcome = if peer == peers[0] {
                GetOutcome::Refused { retry_after }
            } else {
                GetOutcome::NotFound
            };
            read.handle_get(secs(0), id, outcome);
        }
        a = drain(&mut read, secs(0), &view);
    }
    assert!(gets(&a).is_empty(), "still sending GETs after 100 batches");
    read.poll_timeout()
}

/// Config: the refusal cooldown and cap must be positive and at most
/// `MAX_REFUSAL_COOLDOWN`; the error names the field.
#[test]
fn refusal_durations_are_validated() {
    let zero = ReadConfig {
        refused_cooldown: Duration::ZERO,
        ..ReadConfig::default()
    };
    assert_eq!(
        zero.validate(),
        Err(ReadConfigError::ZeroDuration("refused_cooldown"))
    );
    let long = ReadConfig {
        max_retry_after: MAX_REFUSAL_COOLDOWN + Duration::from_secs(1),
        ..ReadConfig::default()
    };
    assert_eq!(
        long.validate(),
        Err(ReadConfigError::RefusalCooldownTooLong {
            field: "max_retry_after",
            value: MAX_REFUSAL_COOLDOWN + Duration::from_secs(1),
        })
    );
    let at_bound = ReadConfig {
        refused_cooldown: MAX_REFUSAL_COOLDOWN,
        max_retry_after: MAX_REFUSAL_COOLDOWN,
        ..ReadConfig::default()
    };
    assert!(Read::new(key_and_peers(1).0, at_bound, secs(0), 0).is_ok());
}

/// Config: each count is accepted at exactly its documented bound (a close group of 1 to
/// 16, at most 16 refusal waits, at most 16 plain retries) and refused one above; the
/// error names the value.
#[test]
fn count_bounds_are_accepted_at_exactly_their_documented_value_and_refused_one_above() {
    let with = |f: &dyn Fn(&mut ReadConfig)| {
        let mut c = ReadConfig::default();
        f(&mut c);
        c.validate()
    };
    assert_eq!(
        with(&|c| c.close_group_size = 0),
        Err(ReadConfigError::CloseGroupSize(0))
    );
    assert_eq!(with(&|c| c.close_group_size = 1), Ok(()));
    assert_eq!(with(&|c| c.close_group_size = 16), Ok(()));
    assert_eq!(
        with(&|c| c.close_group_size = 17),
        Err(ReadConfigError::CloseGroupSize(17))
    );
    assert_eq!(with(&|c| c.max_refusal_waits = 16), Ok(()));
    assert_eq!(
        with(&|c| c.max_refusal_waits = 17),
        Err(ReadConfigError::TooManyRefusalWaits(17))
    );
    assert_eq!(with(&|c| c.max_plain_retries = 16), Ok(()));
    assert_eq!(
        with(&|c| c.max_plain_retries = 17),
        Err(ReadConfigError::TooManyRetries(17))
    );
}
