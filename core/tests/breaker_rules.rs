//! One test per breaker rule of `reference/peer-transport.md` §3.5–§3.7 (and its test
//! list). Each test's name states the rule; each fails if the rule is removed.

use peerblock_core::breaker::{
    Backoff, Breaker, BreakerConfig, ConfigError, Outcome, PermitKind, Recorded, Rejected, State,
};
use peerblock_core::time::{Duration, Instant};

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn breaker() -> Breaker<&'static str> {
    Breaker::new(BreakerConfig::default()).unwrap()
}

fn with(f: impl FnOnce(&mut BreakerConfig)) -> Breaker<&'static str> {
    let mut c = BreakerConfig::default();
    f(&mut c);
    Breaker::new(c).unwrap()
}

/// Records `n` soft failures through fresh data permits.
fn soft_failures(b: &mut Breaker<&'static str>, now: Instant, peer: &'static str, n: u32) {
    for _ in 0..n {
        let p = b.admit(now, &peer).expect("admitted");
        assert_eq!(b.record(now, p, Outcome::SoftFailure), Recorded::Applied);
    }
}

/// Opens `peer` with one hard failure at `now`.
fn open(b: &mut Breaker<&'static str>, now: Instant, peer: &'static str) {
    let p = b.admit(now, &peer).expect("admitted");
    b.record(now, p, Outcome::HardFailure);
    assert_eq!(b.state(now, &peer), State::Open);
}

#[test]
fn opens_only_at_the_consecutive_failure_threshold() {
    let mut b = breaker();
    soft_failures(&mut b, ms(0), "a", 4);
    assert_eq!(b.state(ms(0), &"a"), State::Closed);
    assert!(b.healthy(ms(0), &"a"));
    soft_failures(&mut b, ms(0), "a", 1);
    assert_eq!(b.state(ms(0), &"a"), State::Open);
    let err = b.admit(ms(1), &"a").unwrap_err();
    assert_eq!(
        err,
        Rejected {
            state: State::Open,
            retry_after: Some(Duration::from_millis(4_999))
        }
    );
    assert_eq!(b.open_count(), 1);
}

#[test]
fn a_success_resets_the_failure_count_so_intermittent_failures_never_open() {
    let mut b = breaker();
    for round in 0..10 {
        soft_failures(&mut b, ms(round), "a", 4);
        let p = b.admit(ms(round), &"a").unwrap();
        b.record(ms(round), p, Outcome::Answered);
    }
    assert_eq!(b.state(ms(10), &"a"), State::Closed);
}

#[test]
fn half_open_after_cooldown_admits_one_probe_and_its_success_closes() {
    let mut b = breaker();
    open(&mut b, ms(0), "a");
    assert!(b.admit(ms(4_999), &"a").is_err(), "still cooling down");
    assert_eq!(b.state(ms(5_000), &"a"), State::HalfOpen);
    assert!(b.healthy(ms(5_000), &"a"), "a probe slot is free");
    let probe = b.admit(ms(5_000), &"a").unwrap();
    assert_eq!(probe.kind(), PermitKind::Probe);
    let busy = b.admit(ms(5_001), &"a").unwrap_err();
    assert_eq!(busy.state, State::HalfOpen);
    assert_eq!(busy.retry_after, None);
    assert!(!b.healthy(ms(5_001), &"a"), "the only probe slot is taken");
    assert_eq!(
        b.record(ms(5_010), probe, Outcome::Answered),
        Recorded::Applied
    );
    assert_eq!(b.state(ms(5_010), &"a"), State::Closed);
    assert_eq!(b.open_count(), 0);
    assert_eq!(b.admit(ms(5_011), &"a").unwrap().kind(), PermitKind::Data);
}

#[test]
fn a_failed_probe_reopens_and_restarts_the_cooldown() {
    let mut b = breaker();
    open(&mut b, ms(0), "a");
    let probe = b.admit(ms(6_000), &"a").unwrap();
    b.record(ms(7_000), probe, Outcome::SoftFailure);
    assert_eq!(b.state(ms(7_000), &"a"), State::Open);
    // Cooldown restarts at the probe failure (7 s), not at the original open (0 s).
    assert_eq!(b.state(ms(11_999), &"a"), State::Open);
    assert_eq!(b.state(ms(12_000), &"a"), State::HalfOpen);
}

#[test]
fn a_late_failure_while_open_does_not_extend_the_cooldown() {
    let mut b = breaker();
    let roster = b.admit_roster(ms(0), &"a");
    open(&mut b, ms(1_000), "a");
    // Current-generation failures arriving while open: unscoped and roster.
    let roster_now = b.admit_roster(ms(2_000), &"a");
    b.record_failure(ms(3_000), &"a");
    b.record_hard_failure(ms(4_000), &"a");
    b.record(ms(5_000), roster_now, Outcome::HardFailure);
    b.record(ms(5_500), roster, Outcome::HardFailure);
    assert_eq!(b.state(ms(5_999), &"a"), State::Open);
    assert_eq!(
        b.state(ms(6_000), &"a"),
        State::HalfOpen,
        "the cooldown runs from the open at 1 s"
    );
}

#[test]
fn clean_entries_are_swept_past_the_cap_and_dirty_ones_kept() {
    let mut b = with(|c| c.max_peers = 8);
    let dirty = ["d0", "d1", "d2"];
    for d in dirty {
        soft_failures(&mut b, ms(0), d, 1);
    }
    let clean: Vec<&'static str> = (0..100)
        .map(|i| &*Box::leak(format!("c{i}").into_boxed_str()))
        .collect();
    for c in &clean {
        let p = b.admit(ms(1), c).unwrap();
        b.record(ms(1), p, Outcome::Answered);
        assert!(b.len() <= 8);
    }
    for d in dirty {
        assert!(
            b.is_tracked(&d),
            "{d} carries failure state and must be kept"
        );
    }
    assert_eq!(b.len(), 8);
}

#[test]
fn the_cap_is_hard_under_failed_address_churn_and_hot_peers_keep_their_circuit() {
    let mut b: Breaker<u32> = Breaker::new(BreakerConfig {
        max_peers: 16,
        ..BreakerConfig::default()
    })
    .unwrap();
    let hot = u32::MAX;
    b.record_hard_failure(ms(0), &hot);
    for i in 0..10_000u32 {
        let now = ms(u64::from(i));
        // Every churned address carries failure state: below threshold, open, or half-open.
        match i % 3 {
            0 => b.record_failure(now, &i),
            1 => b.record_hard_failure(now, &i),
            _ => {
                b.record_hard_failure(now, &i);
                let _probe = b.admit(now + Duration::from_secs(5), &i);
            }
        }
        assert!(b.len() <= 16, "cap exceeded at {i}");
        // The hot sick peer is routed to (and refused) continuously: it stays open.
        if i % 4 == 0 {
            let _ = b.admit(now, &hot);
        }
    }
    assert!(b.is_tracked(&hot));
    assert_ne!(b.state(ms(10_000), &hot), State::Closed);
    assert!(b.open_count() <= 16);
}

#[test]
fn eviction_drops_the_least_recently_active_entry_and_observers_do_not_stamp() {
    let mut b = with(|c| c.max_peers = 3);
    open(&mut b, ms(0), "a");
    open(&mut b, ms(1), "b");
    open(&mut b, ms(2), "c");
    // "a" is routed to (and refused): activity. "b" is only observed: no activity.
    assert!(b.admit(ms(3), &"a").is_err());
    let _ = (b.state(ms(4), &"b"), b.healthy(ms(4), &"b"), b.open_count());
    assert_eq!(b.eviction_order(), vec!["b", "c", "a"]);
    b.record_hard_failure(ms(5), &"d");
    assert!(!b.is_tracked(&"b"), "stalest entry evicted");
    assert_eq!(
        b.state(ms(5), &"a"),
        State::Open,
        "active sick peer keeps its circuit"
    );
    assert_eq!(b.len(), 3);
    assert_eq!(b.open_count(), 3);
}

#[test]
fn a_caller_cancelled_request_is_recorded_answered_not_charged_to_the_peer() {
    let mut b = breaker();
    soft_failures(&mut b, ms(0), "a", 4);
    let p = b.admit(ms(0), &"a").unwrap();
    b.release(ms(0), p);
    soft_failures(&mut b, ms(0), "a", 4);
    assert_eq!(
        b.state(ms(0), &"a"),
        State::Closed,
        "cancel reset the count"
    );
    // A released half-open probe frees its slot (answered: the circuit closes).
    soft_failures(&mut b, ms(0), "a", 1);
    let probe = b.admit(ms(5_000), &"a").unwrap();
    assert_eq!(b.release(ms(5_000), probe), Recorded::Applied);
    assert_eq!(b.state(ms(5_000), &"a"), State::Closed);
}

#[test]
fn one_sick_peer_does_not_affect_others() {
    let mut b = breaker();
    open(&mut b, ms(0), "sick");
    soft_failures(&mut b, ms(0), "ok", 4);
    assert_eq!(b.state(ms(0), &"ok"), State::Closed);
    assert!(b.admit(ms(0), &"ok").is_ok());
    assert!(b.healthy(ms(0), &"fresh"));
    assert_eq!(b.open_count(), 1);
}

#[test]
fn defaults_are_reference_values_and_states_print_their_names() {
    let b = breaker();
    let c = b.config();
    assert_eq!(
        (
            c.failure_threshold,
            c.cooldown,
            c.half_open_probes,
            c.max_peers
        ),
        (5, Duration::from_secs(5), 1, 4096)
    );
    assert_eq!(State::Closed.to_string(), "closed");
    assert_eq!(State::Open.to_string(), "open");
    assert_eq!(State::HalfOpen.to_string(), "half-open");
    let bad = Breaker::<u8>::new(BreakerConfig {
        failure_threshold: 0,
        ..BreakerConfig::default()
    });
    assert_eq!(
        bad.unwrap_err(),
        ConfigError::Zero {
            field: "failure_threshold"
        }
    );
    let bad = Breaker::<u8>::new(BreakerConfig {
        half_open_probes: 0,
        ..BreakerConfig::default()
    });
    assert!(bad.unwrap_err().to_string().contains("half_open_probes"));
}

#[test]
fn a_404_is_an_answer_and_twenty_in_a_row_leave_the_circuit_closed() {
    let mut b = breaker();
    for i in 0..20 {
        let p = b.admit(ms(i), &"a").unwrap();
        b.record(ms(i), p, Outcome::Answered); // "I do not hold that block"
    }
    assert_eq!(b.state(ms(20), &"a"), State::Closed);
    assert!(b.healthy(ms(20), &"a"));
}

#[test]
fn one_hard_failure_opens_at_once() {
    let mut b = breaker();
    let p = b.admit(ms(0), &"a").unwrap();
    b.record(ms(0), p, Outcome::HardFailure);
    assert_eq!(b.state(ms(0), &"a"), State::Open);
    assert!(
        b.admit(ms(1), &"a").is_err(),
        "routed around after one attempt"
    );
}

#[test]
fn opening_on_a_hard_failure_is_reversible_by_cooldown_and_probe() {
    let mut b = breaker();
    open(&mut b, ms(0), "a");
    let probe = b.admit(ms(5_000), &"a").unwrap();
    b.record(ms(5_001), probe, Outcome::Answered);
    assert_eq!(b.state(ms(5_001), &"a"), State::Closed);
}

#[test]
fn one_soft_failure_does_not_eject_a_reachable_peer() {
    let mut b = breaker();
    soft_failures(&mut b, ms(0), "a", 1);
    assert_eq!(b.state(ms(0), &"a"), State::Closed);
    assert!(b.admit(ms(0), &"a").is_ok());
}

#[test]
fn a_late_success_cannot_clear_quarantine_or_take_a_newer_probe_slot() {
    let mut b = breaker();
    let old_data = b.admit(ms(0), &"a").unwrap();
    let old_roster = b.admit_roster(ms(0), &"a");
    let old_probe_candidate = b.admit(ms(0), &"a").unwrap();
    open(&mut b, ms(1), "a"); // a sibling's protocol violation
    assert_eq!(
        b.record(ms(2), old_data, Outcome::Answered),
        Recorded::Stale
    );
    assert_eq!(
        b.record(ms(2), old_roster, Outcome::Answered),
        Recorded::Stale
    );
    assert_eq!(b.state(ms(2), &"a"), State::Open, "quarantine holds");
    // Half-open: the probe holds the slot; an old success cannot settle it.
    let probe = b.admit(ms(5_001), &"a").unwrap();
    assert_eq!(
        b.record(ms(5_002), old_probe_candidate, Outcome::Answered),
        Recorded::Stale
    );
    assert_eq!(b.state(ms(5_002), &"a"), State::HalfOpen);
    assert!(
        b.admit(ms(5_002), &"a").is_err(),
        "slot still held by the probe"
    );
    b.record(ms(5_003), probe, Outcome::HardFailure);
    assert_eq!(b.state(ms(5_003), &"a"), State::Open);
}

#[test]
fn a_late_failure_cannot_undo_a_recovery() {
    let mut b = breaker();
    let old = b.admit(ms(0), &"a").unwrap();
    open(&mut b, ms(1), "a");
    let probe = b.admit(ms(5_001), &"a").unwrap();
    b.record(ms(5_002), probe, Outcome::Answered);
    assert_eq!(b.state(ms(5_002), &"a"), State::Closed);
    assert_eq!(
        b.record(ms(5_003), old, Outcome::HardFailure),
        Recorded::Stale
    );
    assert_eq!(b.state(ms(5_003), &"a"), State::Closed);
}

#[test]
fn after_the_first_probe_success_admission_pauses_until_siblings_finish_and_all_must_succeed() {
    let mut b = with(|c| c.half_open_probes = 2);
    open(&mut b, ms(0), "a");
    let p1 = b.admit(ms(5_000), &"a").unwrap();
    let p2 = b.admit(ms(5_000), &"a").unwrap();
    assert!(b.admit(ms(5_000), &"a").is_err(), "two probes at most");
    b.record(ms(5_001), p1, Outcome::Answered);
    assert_eq!(b.state(ms(5_001), &"a"), State::HalfOpen, "waits for p2");
    assert!(b.admit(ms(5_001), &"a").is_err(), "admission paused");
    b.record(ms(5_002), p2, Outcome::SoftFailure);
    assert_eq!(b.state(ms(5_002), &"a"), State::Open, "all must succeed");

    let p1 = b.admit(ms(10_002), &"a").unwrap();
    let p2 = b.admit(ms(10_002), &"a").unwrap();
    b.record(ms(10_003), p1, Outcome::Answered);
    b.record(ms(10_004), p2, Outcome::Answered);
    assert_eq!(b.state(ms(10_004), &"a"), State::Closed);
}

#[test]
fn a_roster_success_cannot_consume_or_override_a_data_probe() {
    let mut b = breaker();
    open(&mut b, ms(0), "a");
    // A roster request in half-open takes no slot: the data probe is still admitted.
    let roster = b.admit_roster(ms(5_000), &"a");
    let probe = b.admit(ms(5_000), &"a").unwrap();
    assert_eq!(probe.kind(), PermitKind::Probe);
    assert_eq!(
        b.record(ms(5_001), roster, Outcome::Answered),
        Recorded::Applied
    );
    assert_eq!(
        b.state(ms(5_001), &"a"),
        State::HalfOpen,
        "the probe's pending outcome decides"
    );
    b.record(ms(5_002), probe, Outcome::SoftFailure);
    assert_eq!(
        b.state(ms(5_002), &"a"),
        State::Open,
        "probe failure not hidden"
    );
}

#[test]
fn a_roster_fetch_ignores_an_open_circuit_and_closes_it_on_success() {
    let mut b = breaker();
    open(&mut b, ms(0), "a");
    assert!(b.admit(ms(1), &"a").is_err());
    let roster = b.admit_roster(ms(1), &"a");
    assert_eq!(roster.kind(), PermitKind::Roster);
    b.record(ms(2), roster, Outcome::Answered);
    assert_eq!(b.state(ms(2), &"a"), State::Closed);
    assert_eq!(b.open_count(), 0);
    // Also from half-open when no data probe is outstanding.
    open(&mut b, ms(3), "a");
    let roster = b.admit_roster(ms(5_003), &"a");
    b.record(ms(5_004), roster, Outcome::Answered);
    assert_eq!(b.state(ms(5_004), &"a"), State::Closed);
}

#[test]
fn a_failed_roster_dial_still_opens_the_circuit_for_the_data_path() {
    let mut b = breaker();
    let roster = b.admit_roster(ms(0), &"a");
    b.record(ms(0), roster, Outcome::HardFailure);
    assert_eq!(b.state(ms(0), &"a"), State::Open);
    assert!(b.admit(ms(1), &"a").is_err());
}

#[test]
fn an_evicted_entry_is_not_recreated_by_its_old_completions() {
    let mut b = with(|c| c.max_peers = 1);
    let old = b.admit(ms(0), &"a").unwrap();
    let _b = b.admit(ms(1), &"b").unwrap(); // evicts "a"
    assert!(!b.is_tracked(&"a"));
    assert_eq!(b.record(ms(2), old, Outcome::HardFailure), Recorded::Stale);
    assert!(!b.is_tracked(&"a"));
    assert!(b.is_tracked(&"b"));
    // Re-created "a" is a new entry: the old permit still cannot touch it.
    let old = b.admit(ms(3), &"a").unwrap();
    let _ = b.admit(ms(4), &"b"); // evicts "a" again
    let _fresh = b.admit(ms(5), &"a").unwrap();
    assert_eq!(b.record(ms(6), old, Outcome::HardFailure), Recorded::Stale);
    assert_eq!(b.state(ms(6), &"a"), State::Closed);
}

#[test]
fn a_dropped_probe_permit_holds_its_slot_only_until_the_probe_lease_expires() {
    let mut b = with(|c| c.probe_lease = Duration::from_secs(60));
    open(&mut b, ms(0), "a");
    let leaked = b.admit(ms(5_000), &"a").unwrap();
    drop(leaked);
    assert!(
        b.admit(ms(64_999), &"a").is_err(),
        "slot held during the lease"
    );
    // At 65 s the round counts as failed, reopened as of the lease end.
    assert_eq!(b.state(ms(65_000), &"a"), State::Open);
    assert_eq!(b.state(ms(69_999), &"a"), State::Open);
    assert_eq!(b.state(ms(70_000), &"a"), State::HalfOpen);
    let probe = b.admit(ms(70_000), &"a").unwrap();
    b.record(ms(70_001), probe, Outcome::Answered);
    assert_eq!(b.state(ms(70_001), &"a"), State::Closed);
}

#[test]
fn unscoped_api_counts_against_the_current_circuit() {
    let mut b = breaker();
    for _ in 0..4 {
        b.record_failure(ms(0), &"a");
    }
    assert!(b.allow(ms(0), &"a"));
    b.record_failure(ms(0), &"a");
    assert!(!b.allow(ms(1), &"a"));
    assert!(b.allow(ms(5_000), &"a"), "probe reserved");
    assert!(!b.allow(ms(5_000), &"a"), "only one probe");
    b.record_success(ms(5_001), &"a");
    assert_eq!(b.state(ms(5_001), &"a"), State::Closed);
    b.record_success(ms(0), &"untracked");
    assert!(!b.is_tracked(&"untracked"), "a success creates no entry");
    b.record_hard_failure(ms(6_000), &"a");
    assert!(b.allow(ms(11_000), &"a"));
    b.record_hard_failure(ms(11_001), &"a");
    assert_eq!(
        b.state(ms(16_000), &"a"),
        State::Open,
        "failed probe restamped"
    );
}

#[test]
fn max_open_share_holds_circuits_closed_past_the_share_but_always_allows_one() {
    let mut b: Breaker<u32> = Breaker::new(BreakerConfig {
        max_open_share: Some(30),
        ..BreakerConfig::default()
    })
    .unwrap();
    // A lone tracked peer may always open.
    b.record_hard_failure(ms(0), &0);
    assert_eq!(b.state(ms(0), &0), State::Open);
    for k in 1..7 {
        let p = b.admit(ms(0), &k).unwrap();
        b.record(ms(0), p, Outcome::Answered);
    }
    // 7 tracked: (1+1)*100 <= 30*7 allows a 2nd open, a 3rd would exceed 30%.
    b.record_hard_failure(ms(1), &1);
    b.record_hard_failure(ms(1), &2);
    assert_eq!(b.state(ms(1), &1), State::Open);
    assert_eq!(
        b.state(ms(1), &2),
        State::Closed,
        "held closed by the share cap"
    );
    assert_eq!(b.open_count(), 2);
    // Budget stays spent: once the share allows it, the next failure opens.
    let p = b.admit(ms(1), &0).unwrap_err();
    assert_eq!(p.state, State::Open);
    b.record_success(ms(2), &0); // peer 0 recovers (unscoped success while open)
    b.record_failure(ms(2), &2);
    assert_eq!(b.state(ms(2), &2), State::Open);
}

#[test]
fn backoff_grows_the_cooldown_for_a_peer_that_keeps_failing_probes_and_is_capped() {
    let run = |backoff: Option<Backoff>| {
        let mut b = with(|c| c.backoff = backoff);
        let mut now = ms(0);
        b.record_hard_failure(now, &"a");
        let mut cooldowns = Vec::new();
        let mut opened = now;
        for _ in 0..8 {
            // Find when it turns half-open (1 ms resolution), then fail the probe.
            while b.state(now, &"a") == State::Open {
                now += Duration::from_millis(1);
            }
            cooldowns.push(now - opened);
            let probe = b.admit(now, &"a").unwrap();
            b.record(now, probe, Outcome::SoftFailure);
            opened = now;
        }
        cooldowns
    };
    let plain = run(None);
    assert!(
        plain.iter().all(|d| *d == Duration::from_secs(5)),
        "{plain:?}"
    );
    let backoff = Some(Backoff {
        max_cooldown: Duration::from_secs(60),
        seed: 7,
    });
    let grown = run(backoff.clone());
    assert_eq!(grown[0], Duration::from_secs(5), "first open uses the base");
    assert!(grown[1] >= Duration::from_secs(5) && grown[1] <= Duration::from_secs(10));
    assert!(grown[3] >= Duration::from_secs(20), "{grown:?}");
    assert!(
        grown.iter().all(|d| *d <= Duration::from_secs(60)),
        "{grown:?}"
    );
    assert_eq!(grown, run(backoff), "same seed, same cooldowns");
}

#[test]
fn time_going_backwards_is_clamped_never_firing_early_or_stamping_the_past() {
    let mut b = breaker();
    open(&mut b, ms(10_000), "a");
    // A stale clock reading: treated as 10 s, so the cooldown still ends at 15 s.
    let err = b.admit(ms(1_000), &"a").unwrap_err();
    assert_eq!(err.retry_after, Some(Duration::from_secs(5)));
    assert_eq!(b.state(ms(14_000), &"a"), State::Open);
    // Opening "b" with an earlier reading stamps the latest time, not the past.
    b.record_hard_failure(ms(2_000), &"b");
    assert_eq!(b.state(ms(14_999), &"b"), State::Open);
    assert_eq!(b.state(ms(15_000), &"b"), State::HalfOpen);
}

/// A breaker keeps the configuration it was made with.
#[test]
fn a_breaker_keeps_the_configuration_it_was_made_with() {
    let b = with(|c| {
        c.failure_threshold = 7;
        c.max_peers = 9;
    });
    assert_eq!(b.config().failure_threshold, 7);
    assert_eq!(b.config().max_peers, 9);
}

/// `is_empty` says whether any peer is tracked.
#[test]
fn a_breaker_is_empty_until_it_tracks_a_peer() {
    let mut b = breaker();
    assert!(b.is_empty());
    soft_failures(&mut b, ms(0), "a", 1);
    assert!(!b.is_empty());
    assert_eq!(b.len(), 1);
}

/// Config: up to 2^24 peers are tracked and one more is refused; a backoff may cap the
/// cooldown at exactly the base cooldown but not below it.
#[test]
fn max_peers_and_the_backoff_cap_are_accepted_at_exactly_their_bound() {
    let check = |f: &dyn Fn(&mut BreakerConfig)| {
        let mut c = BreakerConfig::default();
        f(&mut c);
        c.validate()
    };
    assert_eq!(check(&|c| c.max_peers = 1 << 24), Ok(()));
    assert_eq!(
        check(&|c| c.max_peers = (1 << 24) + 1),
        Err(ConfigError::TooManyPeers {
            got: (1 << 24) + 1,
            limit: 1 << 24
        })
    );
    let backoff = |max_cooldown| {
        move |c: &mut BreakerConfig| {
            c.cooldown = Duration::from_secs(5);
            c.backoff = Some(Backoff {
                max_cooldown,
                seed: 1,
            });
        }
    };
    assert_eq!(check(&backoff(Duration::from_secs(5))), Ok(()));
    assert_eq!(
        check(&backoff(Duration::from_millis(4_999))),
        Err(ConfigError::BackoffBelowCooldown {
            max: Duration::from_millis(4_999),
            base: Duration::from_secs(5)
        })
    );
}
