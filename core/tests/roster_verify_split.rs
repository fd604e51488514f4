//! Signature checks planned ahead and run by the driver (issue 14's cost goal):
//! `Membership::plan_checks`, `Checks::split` / `verify`, `Membership::merge_verified`.
//! One rule per test. Threads appear only where a driver would use them: the split parts
//! are verified on scoped threads, as the drivers do.

use peerblock_core::roster::{
    Attestation, Checks, Membership, MembershipPolicy, NodeKey, Roster, RosterMember,
    MAX_ROSTER_MEMBERS, MIN_PARALLEL_PART, MIN_VERIFY_BATCH,
};
use peerblock_core::time::Instant;

const T0: Instant = Instant::ZERO;

fn key(n: u32) -> NodeKey {
    let mut seed = [9u8; 32];
    seed[..4].copy_from_slice(&n.to_be_bytes());
    NodeKey::from_seed(&seed)
}

fn addr(i: u32) -> String {
    format!("n{i}.test:7070")
}

/// Member `i`, signed by its own key.
fn signed(i: u32) -> RosterMember {
    let k = key(i);
    RosterMember {
        record: Attestation::Signed(k.sign(&addr(i), 1.0, 1).unwrap()),
        ..RosterMember::new(k.id(), addr(i), 1.0)
    }
}

/// Member `i` whose record's signature is of another address (it does not verify).
fn bad_sig(i: u32) -> RosterMember {
    let k = key(i);
    RosterMember {
        record: Attestation::Signed(k.sign("elsewhere.test:7070", 1.0, 1).unwrap()),
        ..RosterMember::new(k.id(), addr(i), 1.0)
    }
}

/// Member `i` claiming its id with a record signed by another key (an impostor).
fn wrong_key(i: u32) -> RosterMember {
    let k = key(i);
    let other = key(i + 1_000_000);
    RosterMember {
        record: Attestation::Signed(other.sign(&addr(i), 1.0, 1).unwrap()),
        ..RosterMember::new(k.id(), addr(i), 1.0)
    }
}

fn roster(members: Vec<RosterMember>) -> Roster {
    Roster {
        epoch: 0,
        epoch_sig: None,
        members,
    }
}

/// A table whose budgets let one source add and check a whole roster.
fn table() -> Membership {
    let me = key(u32::MAX);
    Membership::new(
        RosterMember::new(me.id(), "me.test:7070", 1.0),
        0,
        MAX_ROSTER_MEMBERS - 1,
    )
    .unwrap()
    .with_policy(MembershipPolicy {
        max_new_per_source: MAX_ROSTER_MEMBERS,
        max_checks_per_source: MAX_ROSTER_MEMBERS,
        ..MembershipPolicy::default()
    })
    .unwrap()
}

/// The roster's checks, planned on `t`, split in `parts` and verified on scoped threads.
fn verify_on_threads(
    t: &mut Membership,
    r: &Roster,
    parts: usize,
) -> Vec<peerblock_core::roster::Verified> {
    let checks = t.plan_checks(T0, "src.test:7070", r);
    std::thread::scope(|s| {
        let handles: Vec<_> = checks
            .split(parts)
            .into_iter()
            .map(|p| s.spawn(move || p.verify()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// What the table holds: (id, addr, seq) of every member, in id order.
fn contents(t: &Membership) -> Vec<(String, String, Option<u64>)> {
    t.snapshot()
        .members
        .iter()
        .map(|m| (m.id.clone(), m.addr.clone(), t.record(&m.id).map(|r| r.seq)))
        .collect()
}

#[test]
fn split_parts_are_near_equal_in_order_and_never_below_the_minimum_part() {
    let n = (MIN_PARALLEL_PART * 3 + 5) as u32;
    let r = roster((0..n).map(signed).collect());
    let mut t = table();
    let checks = t.plan_checks(T0, "src.test:7070", &r);
    assert_eq!(checks.len(), n as usize);
    assert!(!checks.is_empty());
    let parts = checks.clone().split(4);
    // 773 records allow 3 parts of at least 256, not 4.
    let sizes: Vec<usize> = parts.iter().map(Checks::len).collect();
    assert_eq!(sizes, vec![258, 258, 257]);
    assert_eq!(sizes.iter().sum::<usize>(), n as usize);
    // In order: verifying the parts one after another verifies every record once.
    let merged: usize = parts.into_iter().map(|p| p.verify().verified()).sum();
    assert_eq!(merged, n as usize);
    // Few checks or 0 parts asked: one part holding everything.
    assert_eq!(checks.clone().split(0).len(), 1);
    let small = t.plan_checks(T0, "src.test:7070", &roster((0..10).map(signed).collect()));
    let one = small.split(8);
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].len(), 10);
}

#[test]
fn a_split_of_exactly_two_minimum_parts_gives_two() {
    let r = roster((0..(2 * MIN_PARALLEL_PART) as u32).map(signed).collect());
    let parts = table().plan_checks(T0, "src.test:7070", &r).split(2);
    let sizes: Vec<usize> = parts.iter().map(Checks::len).collect();
    assert_eq!(sizes, vec![MIN_PARALLEL_PART, MIN_PARALLEL_PART]);
}

#[test]
fn verification_on_threads_merges_exactly_as_a_merge_on_the_callers_thread() {
    // Good records with bad ones scattered through every part: the same table, the same
    // report and the same counters either way.
    let members: Vec<RosterMember> = (0..1100u32)
        .map(|i| match i % 97 {
            5 => bad_sig(i),
            40 => wrong_key(i),
            _ => signed(i),
        })
        .collect();
    let r = roster(members);
    let mut inline = table();
    let want = inline.merge_from(T0, "src.test:7070", "", &r);
    let mut threaded = table();
    let verified = verify_on_threads(&mut threaded, &r, 4);
    assert_eq!(verified.len(), 4);
    let got = threaded.merge_verified(T0, "src.test:7070", "", &r, verified);
    assert_eq!(got, want);
    assert_eq!(contents(&threaded), contents(&inline));
    assert_eq!(threaded.stats(), inline.stats());
    let bad = (0..1100u32).filter(|i| i % 97 == 5).count() as u64;
    let wrong = (0..1100u32).filter(|i| i % 97 == 40).count() as u64;
    assert_eq!(threaded.stats().bad_signature, bad);
    assert_eq!(threaded.stats().wrong_key, wrong);
    assert_eq!(got.added, 1100 - (bad + wrong) as usize);
}

#[test]
fn each_planned_record_is_checked_and_charged_once_good_or_bad() {
    let members: Vec<RosterMember> = (0..300u32)
        .map(|i| if i == 150 { bad_sig(i) } else { signed(i) })
        .collect();
    let r = roster(members);
    let mut t = table();
    let verified = verify_on_threads(&mut t, &r, 1);
    assert_eq!(verified[0].records(), 300);
    assert_eq!(verified[0].verified(), 299);
    assert_eq!(verified[0].failed(), 1);
    t.merge_verified(T0, "src.test:7070", "", &r, verified);
    // The bad record was found in the plan's batch: rejected in the merge without being
    // checked a second time.
    assert_eq!(t.stats().signature_checks, 300);
    assert_eq!(t.stats().bad_signature, 1);
    assert_eq!(t.len(), 299);
}

#[test]
fn an_all_bad_roster_is_caught_record_by_record() {
    let r = roster((0..64u32).map(bad_sig).collect());
    let mut t = table();
    let v = t.plan_checks(T0, "src.test:7070", &r).verify();
    assert_eq!((v.records(), v.verified(), v.failed()), (64, 0, 64));
    t.merge_verified(T0, "src.test:7070", "", &r, [v]);
    assert_eq!(t.stats().bad_signature, 64);
    assert_eq!(t.stats().signature_checks, 64);
    assert!(t.is_empty());
}

#[test]
fn fewer_records_than_a_batch_are_verified_one_by_one_with_their_reasons() {
    let n = MIN_VERIFY_BATCH as u32 - 1;
    let members: Vec<RosterMember> = (0..n)
        .map(|i| match i {
            0 => wrong_key(i),
            1 => bad_sig(i),
            _ => signed(i),
        })
        .collect();
    let r = roster(members);
    let mut t = table();
    let v = t.plan_checks(T0, "src.test:7070", &r).verify();
    assert_eq!((v.verified(), v.failed()), (n as usize - 2, 2));
    t.merge_verified(T0, "src.test:7070", "", &r, [v]);
    assert_eq!(t.stats().wrong_key, 1);
    assert_eq!(t.stats().bad_signature, 1);
}

#[test]
fn results_of_another_roster_verify_nothing_of_this_one() {
    // Results for roster A handed to a merge of roster B, whose records for the same ids
    // are forged: every forged record is still checked, and rejected.
    let a = roster((0..20u32).map(signed).collect());
    let b = roster((0..20u32).map(bad_sig).collect());
    let mut t = table();
    let va = t.plan_checks(T0, "src.test:7070", &a).verify();
    assert_eq!(va.verified(), 20);
    let rep = t.merge_verified(T0, "src.test:7070", "", &b, [va]);
    assert_eq!(rep.added, 0);
    assert_eq!(t.stats().bad_signature, 20);
    assert!(t.is_empty());
}

#[test]
fn a_steady_state_exchange_plans_no_check() {
    let r = roster((0..300u32).map(signed).collect());
    let mut t = table();
    t.merge_from(T0, "src.test:7070", "", &r);
    let checks = t.stats().signature_checks;
    let plan = t.plan_checks(T0, "src.test:7070", &r);
    assert!(plan.is_empty());
    t.merge_verified(T0, "src.test:7070", "", &r, [plan.verify()]);
    assert_eq!(t.stats().signature_checks, checks);
}

#[test]
fn planned_checks_stay_within_the_sources_budgets() {
    // A default policy: 256 new members and 512 checks per source per interval.
    let policy = MembershipPolicy::default();
    let me = key(u32::MAX);
    let mut t = Membership::new(
        RosterMember::new(me.id(), "me.test:7070", 1.0),
        0,
        MAX_ROSTER_MEMBERS - 1,
    )
    .unwrap()
    .with_policy(policy.clone())
    .unwrap();
    let r = roster((0..1000u32).map(signed).collect());
    let plan = t.plan_checks(T0, "src.test:7070", &r);
    assert_eq!(plan.len(), policy.max_new_per_source);
    let rep = t.merge_verified(T0, "src.test:7070", "", &r, [plan.verify()]);
    assert_eq!(rep.added, policy.max_new_per_source);
    assert_eq!(t.stats().signature_checks, policy.max_new_per_source as u64);
    // Nothing left to plan for new members in this interval.
    assert!(t.plan_checks(T0, "src.test:7070", &r).is_empty());
}

#[test]
fn a_refresh_answer_merges_with_the_drivers_verification_results() {
    use peerblock_core::client::{Ending, RosterAnswer};
    use peerblock_core::roster::{AnswerOutcome, Refresh, RefreshConfig};
    let members: Vec<RosterMember> = (0..600u32)
        .map(|i| if i == 7 { bad_sig(i) } else { signed(i) })
        .collect();
    let responder = members[0].id.clone();
    let r = roster(members);
    let mut t = table();
    let mut refresh = Refresh::new(
        T0,
        RefreshConfig {
            seeds: vec!["src.test:7070".into()],
            ..RefreshConfig::default()
        },
        1,
    )
    .unwrap();
    refresh.handle_timeout(T0, &t);
    while refresh.poll_event().is_some() {}
    let verified = verify_on_threads(&mut t, &r, 2);
    let ending = Ending::Roster(RosterAnswer {
        roster: r,
        responder: Some(responder.clone()),
    });
    let outcome = refresh.handle_verified_answer(T0, "src.test:7070", &ending, &mut t, verified);
    let AnswerOutcome::Merged(report) = outcome else {
        panic!("not merged: {outcome:?}");
    };
    assert_eq!(report.added, 599);
    assert_eq!(t.stats().signature_checks, 600);
    assert_eq!(t.stats().bad_signature, 1);
    assert_eq!(t.heard(&responder), Some(T0));
    // An answer for an address with no fetch in flight is ignored, results and all.
    let again = refresh.handle_verified_answer(T0, "src.test:7070", &ending, &mut t, vec![]);
    assert_eq!(again, AnswerOutcome::Ignored);
}
