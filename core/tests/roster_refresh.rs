//! The roster refresh machine (`roster::Refresh`): one rule per test, each named for it.
//! Every test drives a real `Membership`; answers are real `RosterAnswer`s (one test runs a
//! real roster `Exchange` against a real `ServerConnection` through the testkit pair).

use std::collections::BTreeSet;

use peerblock_core::client::{Caller, Ending, ExchangeError, ExchangeRequest, RosterAnswer};
use peerblock_core::roster::{
    AnswerOutcome, Membership, Refresh, RefreshConfig, RefreshConfigError, RefreshEvent,
    RefreshTimer, Roster, RosterMember, DEFAULT_MAX_REFRESH_IN_FLIGHT, DEFAULT_REFRESH_FANOUT,
    DEFAULT_REFRESH_FETCH_TIMEOUT, DEFAULT_REFRESH_INTERVAL, DEFAULT_REFRESH_JITTER, MAX_ADDR_LEN,
    MAX_REFRESH_FANOUT, MAX_REFRESH_INTERVAL, MAX_REFRESH_IN_FLIGHT, MAX_REFRESH_SEEDS,
    MAX_ROSTER_MEMBERS,
};
use peerblock_core::time::{Deadline, Duration, Instant};
use peerblock_testkit::pair::Pair;

const ME: &str = "me";
const MY_ADDR: &str = "me:7070";
const T0: Instant = Instant::ZERO;

fn member(id: &str, addr: &str) -> RosterMember {
    RosterMember {
        id: id.into(),
        addr: addr.into(),
        weight: 1.0,
        record: Default::default(),
    }
}

fn table() -> Membership {
    Membership::new(member(ME, MY_ADDR), 1, MAX_ROSTER_MEMBERS - 1).unwrap()
}

/// A table that knows `n` peers `p00`.. at `p00:7070`.. (learned first-hand at T0).
fn table_with(n: usize) -> Membership {
    let mut t = table();
    for i in 0..n {
        t.learn(T0, &format!("p{i:02}"), &format!("p{i:02}:7070"))
            .unwrap();
    }
    t
}

fn seeds(addrs: &[&str]) -> RefreshConfig {
    RefreshConfig {
        seeds: addrs.iter().map(|s| s.to_string()).collect(),
        ..RefreshConfig::default()
    }
}

fn roster_answer(responder: &str, members: &[(&str, &str)]) -> Ending {
    Ending::Roster(RosterAnswer {
        roster: Roster {
            epoch: 1,
            members: members.iter().map(|(id, addr)| member(id, addr)).collect(),
            epoch_sig: None,
        },
        responder: Some(responder.into()),
    })
}

fn drain(r: &mut Refresh) -> Vec<RefreshEvent> {
    std::iter::from_fn(|| r.poll_event()).collect()
}

/// The addresses of the `Fetch` events in `events`, in order.
fn fetched(events: &[RefreshEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            RefreshEvent::Fetch { addr, .. } => Some(addr.clone()),
            RefreshEvent::Cancel { .. } => None,
        })
        .collect()
}

/// Runs the round due next (at its deadline) and returns its instant and fetched addresses.
fn next_round(r: &mut Refresh, t: &Membership) -> (Instant, Vec<String>) {
    let d = r.poll_timeout().expect("a round is scheduled");
    assert_eq!(d.timer, RefreshTimer::Round);
    r.handle_timeout(d.at, t);
    (d.at, fetched(&drain(r)))
}

/// Answers every fetch in `addrs` as failed (clearing the in-flight marks).
fn fail_all(r: &mut Refresh, now: Instant, addrs: &[String], t: &mut Membership) {
    for a in addrs {
        let ending = Ending::Failed(ExchangeError::DialFailed);
        assert_eq!(r.handle_answer(now, a, &ending, t), AnswerOutcome::Failed);
    }
}

#[test]
fn first_round_is_due_at_construction_and_asks_the_seeds() {
    let seed_list = ["s1:7070", "s2:7070", "s3:7070"];
    // Even a table that already lists a member asks the seeds first.
    let t = table_with(1);
    let mut r = Refresh::new(T0, seeds(&seed_list), 1).unwrap();
    assert_eq!(
        r.poll_timeout(),
        Some(Deadline {
            at: T0,
            timer: RefreshTimer::Round
        })
    );
    r.handle_timeout(T0, &t);
    let events = drain(&mut r);
    assert_eq!(events.len(), DEFAULT_REFRESH_FANOUT);
    // The counters and the configuration in force say so too.
    assert_eq!((r.stats().rounds, r.stats().fetches), (1, 2));
    assert_eq!(r.config().seeds.len(), seed_list.len());
    for e in &events {
        match e {
            RefreshEvent::Fetch { addr, member } => {
                assert!(seed_list.contains(&addr.as_str()), "{addr} is not a seed");
                assert_eq!(*member, None, "a seed is known by its address only");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn a_table_with_members_asks_members_not_seeds() {
    let mut t = table_with(4);
    let mut r = Refresh::new(T0, seeds(&["s1:7070", "s2:7070"]), 1).unwrap();
    let (now, first) = next_round(&mut r, &t);
    fail_all(&mut r, now, &first, &mut t);
    for _ in 0..10 {
        let d = r.poll_timeout().unwrap();
        r.handle_timeout(d.at, &t);
        let events = drain(&mut r);
        assert_eq!(events.len(), DEFAULT_REFRESH_FANOUT);
        for e in &events {
            let RefreshEvent::Fetch { addr, member } = e else {
                panic!("unexpected {e:?}");
            };
            let id = member.as_deref().expect("a member is asked under its id");
            assert_eq!(t.addr(id), Some(addr.as_str()));
        }
        fail_all(&mut r, d.at, &fetched(&events), &mut t);
    }
}

#[test]
fn a_table_with_no_member_but_us_keeps_asking_the_seeds() {
    let seed_list = ["s1:7070", "s2:7070", "s3:7070"];
    let mut t = table();
    let mut r = Refresh::new(T0, seeds(&seed_list), 1).unwrap();
    for _ in 0..5 {
        let (now, asked) = next_round(&mut r, &t);
        assert_eq!(asked.len(), DEFAULT_REFRESH_FANOUT);
        assert!(asked.iter().all(|a| seed_list.contains(&a.as_str())));
        fail_all(&mut r, now, &asked, &mut t);
    }
}

#[test]
fn a_first_round_whose_only_seed_is_ourselves_asks_members() {
    let t = table_with(3);
    let mut r = Refresh::new(T0, seeds(&[MY_ADDR]), 1).unwrap();
    let (_, asked) = next_round(&mut r, &t);
    assert_eq!(asked.len(), DEFAULT_REFRESH_FANOUT);
    assert!(asked
        .iter()
        .all(|a| t.snapshot().members.iter().any(|m| m.addr == *a)));
}

#[test]
fn never_asks_itself() {
    // The cluster's shared seed list names us, and a stale entry lists another id at our
    // address (hearsay from a roster).
    let mut t = table_with(2);
    t.merge(
        T0,
        "p00",
        &Roster {
            epoch: 1,
            members: vec![member("ghost", MY_ADDR)],
            epoch_sig: None,
        },
    );
    assert_eq!(t.addr("ghost"), Some(MY_ADDR));
    let config = RefreshConfig {
        fanout: MAX_REFRESH_FANOUT,
        max_in_flight: MAX_REFRESH_FANOUT,
        ..seeds(&[MY_ADDR, "s1:7070"])
    };
    let mut r = Refresh::new(T0, config, 1).unwrap();
    let (now, first) = next_round(&mut r, &t);
    assert_eq!(first, ["s1:7070"], "our own seed entry is skipped");
    fail_all(&mut r, now, &first, &mut t);
    for _ in 0..20 {
        let (now, asked) = next_round(&mut r, &t);
        assert_eq!(
            asked.len(),
            2,
            "p00 and p01, never the entry at our address"
        );
        assert!(!asked.iter().any(|a| a == MY_ADDR));
        fail_all(&mut r, now, &asked, &mut t);
    }
}

#[test]
fn never_asks_an_address_already_in_flight() {
    let t = table_with(3);
    let config = RefreshConfig {
        fetch_timeout: Duration::from_secs(3600),
        ..RefreshConfig::default()
    };
    let mut r = Refresh::new(T0, config, 1).unwrap();
    let (_, first) = next_round(&mut r, &t);
    assert_eq!(first.len(), 2);
    // Nothing answered: the next round may only ask the one member not in flight.
    let (_, second) = next_round(&mut r, &t);
    assert_eq!(second.len(), 1);
    assert!(!first.contains(&second[0]));
    let (_, third) = next_round(&mut r, &t);
    assert!(third.is_empty(), "every member is in flight");
    assert_eq!(r.fetches_in_flight(), 3);
}

#[test]
fn a_round_asks_at_most_fanout_distinct_peers() {
    let mut t = table_with(10);
    let config = RefreshConfig {
        fanout: 3,
        ..RefreshConfig::default()
    };
    let mut r = Refresh::new(T0, config, 1).unwrap();
    for _ in 0..10 {
        let (now, asked) = next_round(&mut r, &t);
        assert_eq!(asked.len(), 3);
        assert_eq!(asked.iter().collect::<BTreeSet<_>>().len(), 3);
        fail_all(&mut r, now, &asked, &mut t);
    }
}

#[test]
fn outstanding_fetches_never_exceed_max_in_flight() {
    let t = table_with(10);
    let config = RefreshConfig {
        fanout: 2,
        max_in_flight: 3,
        fetch_timeout: Duration::from_secs(3600),
        ..RefreshConfig::default()
    };
    let mut r = Refresh::new(T0, config, 1).unwrap();
    let rounds: Vec<usize> = (0..4).map(|_| next_round(&mut r, &t).1.len()).collect();
    assert_eq!(rounds, [2, 1, 0, 0]);
    assert_eq!(r.fetches_in_flight(), 3);
}

#[test]
fn the_next_round_is_due_within_interval_plus_or_minus_jitter() {
    let t = table();
    let mut r = Refresh::new(T0, RefreshConfig::default(), 7).unwrap();
    let lo = DEFAULT_REFRESH_INTERVAL - DEFAULT_REFRESH_JITTER;
    let hi = DEFAULT_REFRESH_INTERVAL + DEFAULT_REFRESH_JITTER;
    let mut gaps = Vec::new();
    let mut now = T0;
    for _ in 0..200 {
        r.handle_timeout(now, &t);
        let next = r.poll_timeout().unwrap();
        assert_eq!(next.timer, RefreshTimer::Round);
        let gap = next.at - now;
        assert!(
            lo <= gap && gap <= hi,
            "gap {gap:?} outside {lo:?}..={hi:?}"
        );
        gaps.push(gap);
        now = next.at;
    }
    // Uniform over the whole window, not a fixed offset: nodes booted together drift apart.
    let one = Duration::from_secs(1);
    assert!(gaps.iter().any(|g| *g < DEFAULT_REFRESH_INTERVAL - one));
    assert!(gaps.iter().any(|g| *g > DEFAULT_REFRESH_INTERVAL + one));
}

/// Ten rounds of (instant, targets) over a 20-member table, every fetch answered as failed.
fn trace(seed: u64) -> Vec<(Instant, Vec<String>)> {
    let mut t = table_with(20);
    let config = RefreshConfig {
        fanout: 3,
        ..RefreshConfig::default()
    };
    let mut r = Refresh::new(T0, config, seed).unwrap();
    (0..10)
        .map(|_| {
            let (now, asked) = next_round(&mut r, &t);
            fail_all(&mut r, now, &asked, &mut t);
            (now, asked)
        })
        .collect()
}

#[test]
fn the_same_seed_asks_the_same_targets_at_the_same_times() {
    assert_eq!(trace(11), trace(11));
}

#[test]
fn a_different_seed_asks_in_a_different_order() {
    let targets = |seed| trace(seed).into_iter().map(|(_, a)| a).collect::<Vec<_>>();
    assert_ne!(targets(11), targets(12));
}

#[test]
fn an_answer_merges_and_the_members_it_teaches_are_asked_later() {
    // A real server ("server" at "server:7070") that knows a third node.
    let mut pair = Pair::new([]);
    pair.membership.learn(T0, "third", "third:7070").unwrap();
    let mut ours = table();
    let mut r = Refresh::new(T0, seeds(&["server:7070"]), 1).unwrap();
    let (_, first) = next_round(&mut r, &ours);
    assert_eq!(first, ["server:7070"]);

    let me = ours.me().clone();
    let caller = Caller {
        id: &me.id,
        addr: &me.addr,
        record: None,
    };
    let outcome = pair.exchange(ExchangeRequest::roster("server:7070", Some(caller)));
    let now = pair.now;
    let merged = r.handle_answer(now, "server:7070", &outcome.ending, &mut ours);
    let AnswerOutcome::Merged(report) = merged else {
        panic!("expected a merge, got {merged:?} from {:?}", outcome.ending);
    };
    assert_eq!(report.added, 2, "the responder and the third node");
    assert_eq!(
        ours.heard("server"),
        Some(now),
        "the responder is first-hand"
    );
    assert_eq!(ours.heard("third"), None, "a third party is hearsay");
    assert_eq!(
        pair.membership.addr(ME),
        Some(MY_ADDR),
        "the server learned us"
    );
    assert!(!r.is_in_flight("server:7070"));

    // The table now has members: the next round asks them, the third node included.
    let d = r.poll_timeout().unwrap();
    r.handle_timeout(d.at, &ours);
    let events = drain(&mut r);
    assert!(events.contains(&RefreshEvent::Fetch {
        addr: "third:7070".into(),
        member: Some("third".into()),
    }));
}

#[test]
fn any_ending_clears_the_in_flight_mark() {
    let mut t = table_with(1);
    let config = RefreshConfig {
        fanout: 1,
        ..RefreshConfig::default()
    };
    let mut r = Refresh::new(T0, config, 1).unwrap();
    let endings = [
        Ending::Failed(ExchangeError::DialFailed),
        Ending::Failed(ExchangeError::Closed),
        Ending::Cancelled,
        Ending::Miss,
        roster_answer("p00", &[("p00", "p00:7070")]),
    ];
    for ending in &endings {
        let (now, asked) = next_round(&mut r, &t);
        assert_eq!(asked, ["p00:7070"], "asked again once its last fetch ended");
        assert!(r.is_in_flight("p00:7070"));
        assert_ne!(
            r.handle_answer(now, "p00:7070", ending, &mut t),
            AnswerOutcome::Ignored
        );
        assert!(!r.is_in_flight("p00:7070"), "{ending:?} left the mark");
    }
    // Four endings failed, one roster was merged, each fetch counted once.
    let stats = r.stats();
    assert_eq!(
        (stats.rounds, stats.fetches, stats.failed, stats.merged),
        (5, 5, 4, 1)
    );
}

#[test]
fn an_answer_for_an_address_not_in_flight_is_ignored() {
    let mut t = table();
    let mut r = Refresh::new(T0, seeds(&["s1:7070"]), 1).unwrap();
    let (now, asked) = next_round(&mut r, &t);
    let answer = roster_answer("s1", &[("s1", "s1:7070"), ("x", "x:7070")]);
    assert_eq!(
        r.handle_answer(now, "stranger:7070", &answer, &mut t),
        AnswerOutcome::Ignored
    );
    assert!(t.is_empty(), "an unsolicited roster teaches nothing");
    // The real one merges once; a repeat is ignored.
    assert!(matches!(
        r.handle_answer(now, &asked[0], &answer, &mut t),
        AnswerOutcome::Merged(_)
    ));
    t.remove("x");
    assert_eq!(
        r.handle_answer(now, &asked[0], &answer, &mut t),
        AnswerOutcome::Ignored
    );
    assert_eq!(t.addr("x"), None);
}

#[test]
fn a_spurious_timeout_is_harmless() {
    let t = table_with(5);
    let mut r = Refresh::new(T0, RefreshConfig::default(), 1).unwrap();
    let (now, _) = next_round(&mut r, &t);
    let due = r.poll_timeout().unwrap();
    let stats = r.stats();
    for s in [0, 1, 20] {
        r.handle_timeout(now + Duration::from_secs(s), &t);
        assert_eq!(r.poll_event(), None);
        assert_eq!(r.poll_timeout(), Some(due));
        assert_eq!(r.stats(), stats);
    }
}

#[test]
fn time_going_backwards_is_clamped_to_the_latest_seen() {
    let mut t = table();
    let late = Instant::from_secs(100);
    let mut r = Refresh::new(T0, seeds(&["s1:7070"]), 1).unwrap();
    r.handle_timeout(late, &t);
    assert_eq!(fetched(&drain(&mut r)), ["s1:7070"]);
    // An answer stamped earlier is merged at the latest instant seen.
    let answer = roster_answer("s1", &[("s1", "s1:7070")]);
    let earlier = Instant::from_secs(50);
    assert!(matches!(
        r.handle_answer(earlier, "s1:7070", &answer, &mut t),
        AnswerOutcome::Merged(_)
    ));
    assert_eq!(t.heard("s1"), Some(late));
    // The next round counts from the latest instant, and an earlier timeout changes nothing.
    let next = r.poll_timeout().unwrap();
    assert!(next.at >= late + (DEFAULT_REFRESH_INTERVAL - DEFAULT_REFRESH_JITTER));
    r.handle_timeout(T0, &t);
    assert_eq!(r.poll_event(), None);
    assert_eq!(r.poll_timeout(), Some(next));
}

#[test]
fn a_fetch_unanswered_past_its_timeout_is_abandoned() {
    let mut t = table();
    let config = RefreshConfig {
        fetch_timeout: Duration::from_secs(5),
        ..seeds(&["s1:7070"])
    };
    let mut r = Refresh::new(T0, config, 1).unwrap();
    next_round(&mut r, &t);
    let d = r.poll_timeout().unwrap();
    assert_eq!(
        d,
        Deadline {
            at: Instant::from_secs(5),
            timer: RefreshTimer::Fetch
        }
    );
    r.handle_timeout(d.at, &t);
    assert_eq!(
        drain(&mut r),
        [RefreshEvent::Cancel {
            addr: "s1:7070".into()
        }]
    );
    assert!(!r.is_in_flight("s1:7070"));
    assert_eq!(r.poll_timeout().unwrap().timer, RefreshTimer::Round);
    let late = roster_answer("s1", &[("s1", "s1:7070")]);
    assert_eq!(
        r.handle_answer(d.at, "s1:7070", &late, &mut t),
        AnswerOutcome::Ignored
    );
    assert!(t.is_empty());
}

#[test]
fn cancel_ends_the_refresh() {
    let mut t = table_with(4);
    let mut r = Refresh::new(T0, RefreshConfig::default(), 1).unwrap();
    let (now, asked) = next_round(&mut r, &t);
    r.cancel(now);
    let cancels: BTreeSet<String> = drain(&mut r)
        .into_iter()
        .map(|e| match e {
            RefreshEvent::Cancel { addr } => addr,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(cancels, asked.iter().cloned().collect());
    assert_eq!(r.stats().abandoned, asked.len() as u64);
    assert!(r.is_finished());
    assert_eq!(r.poll_timeout(), None);
    // Idempotent, and every later input is ignored.
    r.cancel(now);
    r.handle_timeout(now + Duration::from_secs(3600), &t);
    assert_eq!(r.poll_event(), None);
    let answer = roster_answer("p00", &[("p00", "p00:7070"), ("new", "new:7070")]);
    assert_eq!(
        r.handle_answer(now, &asked[0], &answer, &mut t),
        AnswerOutcome::Ignored
    );
    assert_eq!(t.addr("new"), None);
    assert!(r.is_finished());
}

#[test]
fn a_fetch_abandoned_before_the_driver_polled_it_is_withdrawn() {
    let t = table_with(4);
    let mut r = Refresh::new(T0, RefreshConfig::default(), 1).unwrap();
    r.handle_timeout(T0, &t);
    assert_eq!(r.fetches_in_flight(), 2);
    r.cancel(T0);
    assert_eq!(r.poll_event(), None, "no Fetch to run, no Cancel to send");
    assert!(r.is_finished());
}

#[test]
fn the_defaults_are_valid_and_as_documented() {
    let c = RefreshConfig::default();
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(c.interval, Duration::from_secs(30));
    assert_eq!(c.jitter, c.interval / 10, "±10 %");
    assert_eq!(c.fanout, 2);
    assert_eq!(c.max_in_flight, DEFAULT_MAX_REFRESH_IN_FLIGHT);
    assert_eq!(c.fetch_timeout, DEFAULT_REFRESH_FETCH_TIMEOUT);
    assert!(c.seeds.is_empty());
}

#[test]
fn an_interval_of_exactly_one_day_is_accepted_and_one_second_more_refused() {
    assert_eq!(MAX_REFRESH_INTERVAL, Duration::from_secs(86_400), "one day");
    let at = |interval| RefreshConfig {
        interval,
        jitter: Duration::from_secs(1),
        ..RefreshConfig::default()
    };
    assert_eq!(at(Duration::from_secs(86_400)).validate(), Ok(()));
    assert!(at(Duration::from_secs(86_401)).validate().is_err());
}

#[test]
fn every_count_bound_is_accepted_at_exactly_its_documented_value() {
    assert_eq!(
        (MAX_REFRESH_FANOUT, MAX_REFRESH_IN_FLIGHT, MAX_REFRESH_SEEDS),
        (16, 64, 256)
    );
    // One seed of exactly the longest address.
    let longest = "a".repeat(peerblock_core::roster::MAX_ADDR_LEN);
    let at_bounds = RefreshConfig {
        fanout: 16,
        max_in_flight: 64,
        seeds: (0..255)
            .map(|i| format!("seed{i}.test:7070"))
            .chain([longest])
            .collect(),
        ..RefreshConfig::default()
    };
    assert_eq!(at_bounds.validate(), Ok(()));
    // A fanout equal to the fetches in flight is allowed (a round may fill them).
    let even = RefreshConfig {
        fanout: 5,
        max_in_flight: 5,
        ..RefreshConfig::default()
    };
    assert_eq!(even.validate(), Ok(()));
    let mut one_seed_more = at_bounds;
    one_seed_more.seeds.push("seed256.test:7070".into());
    assert!(one_seed_more.validate().is_err());
}

#[test]
fn config_errors_name_the_field() {
    let base = RefreshConfig::default;
    let cases: Vec<(RefreshConfig, &str)> = vec![
        (
            RefreshConfig {
                interval: Duration::ZERO,
                jitter: Duration::ZERO,
                ..base()
            },
            "interval",
        ),
        (
            RefreshConfig {
                interval: MAX_REFRESH_INTERVAL + Duration::from_secs(1),
                ..base()
            },
            "interval",
        ),
        (
            RefreshConfig {
                jitter: DEFAULT_REFRESH_INTERVAL,
                ..base()
            },
            "jitter",
        ),
        (
            RefreshConfig {
                fanout: 0,
                ..base()
            },
            "fanout",
        ),
        (
            RefreshConfig {
                fanout: MAX_REFRESH_FANOUT + 1,
                max_in_flight: MAX_REFRESH_IN_FLIGHT,
                ..base()
            },
            "fanout",
        ),
        (
            RefreshConfig {
                fanout: 4,
                max_in_flight: 3,
                ..base()
            },
            "fanout",
        ),
        (
            RefreshConfig {
                fanout: 1,
                max_in_flight: 0,
                ..base()
            },
            "max_in_flight",
        ),
        (
            RefreshConfig {
                max_in_flight: MAX_REFRESH_IN_FLIGHT + 1,
                ..base()
            },
            "max_in_flight",
        ),
        (
            RefreshConfig {
                fetch_timeout: Duration::ZERO,
                ..base()
            },
            "fetch_timeout",
        ),
        (
            RefreshConfig {
                seeds: vec!["s:1".into(); MAX_REFRESH_SEEDS + 1],
                ..base()
            },
            "seeds",
        ),
        (seeds(&["s:1", ""]), "seeds"),
        (seeds(&[&"h".repeat(MAX_ADDR_LEN + 1)]), "seeds"),
    ];
    for (config, field) in cases {
        let err: RefreshConfigError = Refresh::new(T0, config.clone(), 1).unwrap_err();
        assert_eq!(err.field(), field, "{config:?}");
        assert!(
            err.to_string().contains(&format!("`{field}")),
            "message {err} does not name {field}"
        );
        assert_eq!(config.validate(), Err(err));
    }
}

/// One step of an arbitrary driver.
#[derive(Clone, Debug)]
enum Step {
    /// Advance the clock by this many seconds, then `handle_timeout` (often early).
    Wait(u64),
    /// End the `n`-th outstanding fetch (modulo their count): with a roster teaching
    /// `teach` new members if `ok`, else as failed.
    Answer { n: usize, ok: bool, teach: u8 },
    /// An answer from an address never asked.
    Stranger,
    /// `cancel(now)`.
    Cancel,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0u64..50).prop_map(Step::Wait),
        6 => (any::<usize>(), any::<bool>(), 0u8..4)
            .prop_map(|(n, ok, teach)| Step::Answer { n, ok, teach }),
        1 => Just(Step::Stranger),
        1 => Just(Step::Cancel),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]

    /// Under any driver that follows the contract (drains after every input), the events
    /// describe a consistent set of outstanding fetches: a `Fetch` never names our address
    /// or one already outstanding, a `Cancel` only names an outstanding one, the set never
    /// exceeds `max_in_flight`, and the deadline after `handle_timeout(now)` is past `now`.
    #[test]
    fn events_keep_outstanding_fetches_distinct_bounded_and_never_ourselves(
        seed in proptest::prelude::any::<u64>(),
        fanout in 1usize..4,
        max_in_flight in 3usize..6,
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let mut t = table_with(3);
        let config = RefreshConfig {
            fanout,
            max_in_flight,
            fetch_timeout: Duration::from_secs(45),
            ..seeds(&[MY_ADDR, "s1:7070", "s2:7070"])
        };
        let mut r = Refresh::new(T0, config, seed).unwrap();
        let mut now = T0;
        let mut outstanding: Vec<String> = Vec::new();
        let mut learned = 0u32;
        for s in steps {
            let waited = matches!(s, Step::Wait(_));
            match s {
                Step::Wait(secs) => {
                    now += Duration::from_secs(secs);
                    r.handle_timeout(now, &t);
                }
                Step::Answer { n, ok, teach } if !outstanding.is_empty() => {
                    let addr = outstanding.remove(n % outstanding.len());
                    let ending = if ok {
                        let mut members = vec![(format!("id-{addr}"), addr.clone())];
                        for _ in 0..teach {
                            learned += 1;
                            members.push((format!("n{learned}"), format!("n{learned}:7070")));
                        }
                        Ending::Roster(RosterAnswer {
                            roster: Roster {
                                epoch: 1,
                                members: members.iter().map(|(i, a)| member(i, a)).collect(),
                                epoch_sig: None,
                            },
                            responder: Some(format!("id-{addr}")),
                        })
                    } else {
                        Ending::Failed(ExchangeError::RequestTimeout(Duration::from_secs(30)))
                    };
                    let got = r.handle_answer(now, &addr, &ending, &mut t);
                    proptest::prop_assert_ne!(got, AnswerOutcome::Ignored);
                }
                Step::Answer { .. } => {}
                Step::Stranger => {
                    let got = r.handle_answer(now, "stranger:1", &Ending::Miss, &mut t);
                    proptest::prop_assert_eq!(got, AnswerOutcome::Ignored);
                }
                Step::Cancel => r.cancel(now),
            }
            while let Some(e) = r.poll_event() {
                match e {
                    RefreshEvent::Fetch { addr, .. } => {
                        proptest::prop_assert_ne!(&addr, MY_ADDR);
                        proptest::prop_assert!(!outstanding.contains(&addr), "{} twice", addr);
                        outstanding.push(addr);
                    }
                    RefreshEvent::Cancel { addr } => {
                        let pos = outstanding.iter().position(|a| *a == addr);
                        proptest::prop_assert!(pos.is_some(), "cancel of {} not outstanding", addr);
                        outstanding.remove(pos.unwrap());
                    }
                }
            }
            proptest::prop_assert!(outstanding.len() <= max_in_flight);
            proptest::prop_assert_eq!(outstanding.len(), r.fetches_in_flight());
            if let (true, Some(d)) = (waited, r.poll_timeout()) {
                proptest::prop_assert!(d.at > now, "{:?} not past {:?}", d, now);
            }
            if r.is_finished() {
                proptest::prop_assert!(outstanding.is_empty());
                proptest::prop_assert_eq!(r.poll_timeout(), None);
            }
        }
    }
}
