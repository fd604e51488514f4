//! `Membership`'s policy, epoch and check-planning rules (roster/table/), one rule per
//! test: the rules mutation testing found no test for (docs/testing.md, roster/table/).

use peerblock_core::roster::record::sign_epoch;
use peerblock_core::roster::{
    Attestation, ClaimRejection, Membership, MembershipMode, MembershipPolicy, NodeKey,
    PolicyError, Roster, RosterMember, MAX_LEARN_INTERVAL, MAX_LEARN_SOURCES, MAX_ROSTER_MEMBERS,
};
use peerblock_core::time::{Duration, Instant};

const T0: Instant = Instant::ZERO;
const SRC: &str = "src.test:7070";

fn key(n: u32) -> NodeKey {
    let mut seed = [5u8; 32];
    seed[..4].copy_from_slice(&n.to_be_bytes());
    NodeKey::from_seed(&seed)
}

fn addr(i: u32) -> String {
    format!("n{i}.test:7070")
}

fn signed_seq(i: u32, seq: u64) -> RosterMember {
    let k = key(i);
    RosterMember {
        record: Attestation::Signed(k.sign(&addr(i), 1.0, seq).unwrap()),
        ..RosterMember::new(k.id(), addr(i), 1.0)
    }
}

fn signed(i: u32) -> RosterMember {
    signed_seq(i, 1)
}

fn roster(members: Vec<RosterMember>) -> Roster {
    Roster {
        epoch: 0,
        epoch_sig: None,
        members,
    }
}

fn me() -> NodeKey {
    key(u32::MAX)
}

fn table_with(policy: MembershipPolicy) -> Membership {
    Membership::new(
        RosterMember::new(me().id(), "me.test:7070", 1.0),
        0,
        MAX_ROSTER_MEMBERS - 1,
    )
    .unwrap()
    .with_policy(policy)
    .unwrap()
}

fn generous() -> MembershipPolicy {
    MembershipPolicy {
        max_new_per_source: 1000,
        max_checks_per_source: 1000,
        ..MembershipPolicy::default()
    }
}

fn authority() -> NodeKey {
    key(4242)
}

fn with_authority() -> MembershipPolicy {
    MembershipPolicy {
        authority: Some(authority().public()),
        ..MembershipPolicy::default()
    }
}

// ---- the policy's bounds --------------------------------------------------------------

#[test]
fn max_learn_interval_is_one_day() {
    assert_eq!(MAX_LEARN_INTERVAL, Duration::from_secs(86_400));
}

#[test]
fn a_learn_interval_of_exactly_the_maximum_is_accepted_and_one_more_refused() {
    let at = MembershipPolicy {
        learn_interval: MAX_LEARN_INTERVAL,
        ..MembershipPolicy::default()
    };
    assert_eq!(at.validate(), Ok(()));
    let above = MembershipPolicy {
        learn_interval: MAX_LEARN_INTERVAL + Duration::from_millis(1),
        ..MembershipPolicy::default()
    };
    let e = above.validate().unwrap_err();
    assert!(matches!(e, PolicyError::IntervalTooLong { .. }), "{e:?}");
    assert_eq!(e.field(), "learn_interval");
}

#[test]
fn every_zero_bound_is_refused_naming_its_field() {
    let cases = [
        (
            MembershipPolicy {
                max_new_per_source: 0,
                ..MembershipPolicy::default()
            },
            "max_new_per_source",
        ),
        (
            MembershipPolicy {
                max_checks_per_source: 0,
                ..MembershipPolicy::default()
            },
            "max_checks_per_source",
        ),
        (
            MembershipPolicy {
                learn_interval: Duration::ZERO,
                ..MembershipPolicy::default()
            },
            "learn_interval",
        ),
        (
            MembershipPolicy {
                max_placed_per_host: 0,
                ..MembershipPolicy::default()
            },
            "max_placed_per_host",
        ),
        (
            MembershipPolicy {
                max_placed_per_prefix: 0,
                ..MembershipPolicy::default()
            },
            "max_placed_per_prefix",
        ),
    ];
    for (policy, field) in cases {
        let e = policy.validate().unwrap_err();
        assert_eq!(e, PolicyError::Zero { field });
        assert_eq!(e.field(), field);
        // A table refuses the policy too, and keeps none of it.
        let t = Membership::new(RosterMember::new("a", "a.test:1", 1.0), 0, 4).unwrap();
        assert!(t.with_policy(policy).is_err());
    }
}

#[test]
fn a_weak_authority_key_is_refused() {
    // The identity point's encoding: a valid curve point of small order (weak).
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let p = MembershipPolicy {
        authority: Some(identity),
        ..MembershipPolicy::default()
    };
    assert_eq!(p.validate(), Err(PolicyError::BadAuthority));
    assert_eq!(PolicyError::BadAuthority.field(), "authority");
    assert_eq!(with_authority().validate(), Ok(()));
}

#[test]
fn the_policy_in_force_is_the_one_given() {
    let p = MembershipPolicy {
        max_new_per_source: 7,
        max_checks_per_source: 9,
        learn_interval: Duration::from_secs(11),
        mode: MembershipMode::VerifiedOnly,
        authority: Some(authority().public()),
        max_placed_per_host: 2,
        max_placed_per_prefix: 3,
        allow: vec!["10.0.0.9:7070".into()],
    };
    assert_eq!(table_with(p.clone()).policy(), &p);
}

#[test]
fn claim_rejections_have_their_documented_metric_labels() {
    let names: Vec<&str> = [
        ClaimRejection::Replayed,
        ClaimRejection::WrongKey,
        ClaimRejection::BadSignature,
        ClaimRejection::Malformed,
        ClaimRejection::Unverified,
        ClaimRejection::RateLimited,
    ]
    .iter()
    .map(|r| r.name())
    .collect();
    assert_eq!(
        names,
        [
            "replayed",
            "wrong-key",
            "bad-signature",
            "malformed",
            "unverified",
            "rate-limited"
        ]
    );
}

// ---- the operator's epoch -------------------------------------------------------------

#[test]
fn set_signed_epoch_takes_an_authority_signed_epoch_not_below_the_tables() {
    let mut t = table_with(with_authority());
    let sig = sign_epoch(&authority(), 5);
    assert_eq!(t.set_signed_epoch(5, sig), Ok(()));
    assert_eq!(t.epoch(), 5);
    assert_eq!(t.snapshot().epoch_sig, Some(sig));
    // The same epoch again is fine (a restart with the same configuration).
    assert_eq!(t.set_signed_epoch(5, sig), Ok(()));
    // A lower one is refused, even signed.
    assert_eq!(t.set_signed_epoch(4, sign_epoch(&authority(), 4)), Err(()));
    assert_eq!(t.epoch(), 5);
}

#[test]
fn set_signed_epoch_refuses_another_keys_signature_and_a_table_without_authority() {
    let mut t = table_with(with_authority());
    assert_eq!(t.set_signed_epoch(5, sign_epoch(&key(1), 5)), Err(()));
    assert_eq!(t.epoch(), 0);
    assert_eq!(t.snapshot().epoch_sig, None);
    let mut open = table_with(MembershipPolicy::default());
    assert_eq!(
        open.set_signed_epoch(5, sign_epoch(&authority(), 5)),
        Err(())
    );
    assert_eq!(open.epoch(), 0);
}

#[test]
fn raising_the_epoch_to_its_current_value_keeps_the_authority_signature() {
    let mut t = table_with(with_authority());
    let sig = sign_epoch(&authority(), 5);
    t.set_signed_epoch(5, sig).unwrap();
    t.raise_epoch(5);
    assert_eq!(t.snapshot().epoch_sig, Some(sig));
    t.raise_epoch(6);
    assert_eq!(t.epoch(), 6);
    assert_eq!(t.snapshot().epoch_sig, None, "a raised epoch is unsigned");
}

#[test]
fn a_roster_at_the_tables_epoch_costs_no_epoch_check_and_advances_nothing() {
    let mut t = table_with(with_authority());
    let sig = sign_epoch(&authority(), 5);
    t.set_signed_epoch(5, sig).unwrap();
    let r = Roster {
        epoch: 5,
        epoch_sig: Some(sig),
        members: vec![],
    };
    let rep = t.merge_from(T0, SRC, "", &r);
    assert!(!rep.epoch_advanced);
    assert_eq!(t.stats().signature_checks, 0);
}

#[test]
fn a_higher_signed_epoch_costs_exactly_one_check() {
    let mut t = table_with(with_authority());
    let r = Roster {
        epoch: 9,
        epoch_sig: Some(sign_epoch(&authority(), 9)),
        members: vec![],
    };
    assert!(t.merge_from(T0, SRC, "", &r).epoch_advanced);
    assert_eq!(t.stats().signature_checks, 1);
    assert_eq!(t.epoch(), 9);
}

// ---- which records a merge plans to check ---------------------------------------------

#[test]
fn the_plan_holds_every_new_signed_member_in_order() {
    let r = roster((0..20).map(signed).collect());
    let mut t = table_with(generous());
    assert_eq!(t.plan_checks(T0, SRC, &r).len(), 20);
}

#[test]
fn the_plan_skips_unsigned_members_our_own_id_and_malformed_members() {
    let mut members: Vec<RosterMember> = (0..10).map(signed).collect();
    members.push(RosterMember::new(key(50).id(), addr(50), 1.0)); // unsigned
    let mine = me();
    members.push(RosterMember {
        record: Attestation::Signed(mine.sign("me.test:7070", 1.0, 1).unwrap()),
        ..RosterMember::new(mine.id(), "me.test:7070", 1.0)
    });
    let mut bad = signed(60);
    bad.addr = String::new(); // fails the member check
    members.push(bad);
    let mut t = table_with(generous());
    assert_eq!(t.plan_checks(T0, SRC, &roster(members)).len(), 10);
}

#[test]
fn the_plan_skips_records_not_newer_than_the_one_held_and_keeps_newer_ones() {
    let mut t = table_with(generous());
    t.merge_from(
        T0,
        SRC,
        "",
        &roster((0..4).map(|i| signed_seq(i, 5)).collect()),
    );
    let r = roster(vec![
        signed_seq(0, 4), // older
        signed_seq(1, 5), // the one held
        signed_seq(2, 6), // newer
        signed_seq(3, 7), // newer
    ]);
    assert_eq!(t.plan_checks(T0, SRC, &r).len(), 2);
}

#[test]
fn the_plan_skips_records_verified_before() {
    let mut t = table_with(generous());
    let r = roster((0..10).map(signed).collect());
    t.merge_from(T0, SRC, "", &r);
    // Forgotten members whose records are still cached are not checked again.
    for i in 0..5 {
        t.remove(key(i).id());
    }
    assert!(t.plan_checks(T0, SRC, &r).is_empty());
}

#[test]
fn the_plan_holds_new_members_only_within_the_sources_remaining_budget() {
    let mut t = table_with(MembershipPolicy {
        max_new_per_source: 12,
        max_checks_per_source: 1000,
        ..MembershipPolicy::default()
    });
    let first = roster((0..5).map(signed).collect());
    t.merge_from(T0, SRC, "", &first);
    // 7 new members left in this interval; known members' newer records still count.
    let mut members: Vec<RosterMember> = (100..120).map(signed).collect();
    members.push(signed_seq(0, 9));
    assert_eq!(t.plan_checks(T0, SRC, &roster(members.clone())).len(), 8);
    // Another source has a budget of its own.
    assert_eq!(
        t.plan_checks(T0, "other.test:7070", &roster(members)).len(),
        13
    );
}

#[test]
fn the_plan_holds_at_most_the_sources_remaining_checks() {
    let mut t = table_with(MembershipPolicy {
        max_new_per_source: 1000,
        max_checks_per_source: 9,
        ..MembershipPolicy::default()
    });
    t.merge_from(T0, SRC, "", &roster((0..4).map(signed).collect()));
    assert_eq!(t.stats().signature_checks, 4);
    let r = roster((100..120).map(signed).collect());
    assert_eq!(t.plan_checks(T0, SRC, &r).len(), 5);
    // A new interval renews both budgets.
    let later = T0 + t.policy().learn_interval;
    assert_eq!(t.plan_checks(later, SRC, &r).len(), 9);
}

#[test]
fn a_sources_spent_budget_is_remembered_until_max_learn_sources_are_tracked() {
    let mut t = table_with(MembershipPolicy {
        max_new_per_source: 1,
        ..MembershipPolicy::default()
    });
    let unsigned = |i: usize| RosterMember::new(format!("u{i}"), format!("u{i}.test:7070"), 1.0);
    let at = |ms: usize| T0 + Duration::from_millis(ms as u64);
    // SRC spends its budget of one new member; its window is the oldest.
    assert_eq!(
        t.merge_from(T0, SRC, "", &roster(vec![unsigned(0)])).added,
        1
    );
    // Other sources come, up to the bound in all: SRC's window is kept, its budget spent.
    for s in 1..MAX_LEARN_SOURCES {
        let source = format!("s{s}.test:7070");
        assert_eq!(
            t.merge_from(at(s), &source, "", &roster(vec![unsigned(s)]))
                .added,
            1
        );
    }
    let again = t.merge_from(at(5000), SRC, "", &roster(vec![unsigned(100_000)]));
    assert_eq!((again.added, again.rate_limited), (0, 1));
    // One source more than the bound: the oldest window (SRC's) is forgotten, so SRC
    // starts a fresh one within the same interval.
    let last = t.merge_from(
        at(6000),
        "last.test:7070",
        "",
        &roster(vec![unsigned(200_000)]),
    );
    assert_eq!(last.added, 1);
    let fresh = t.merge_from(at(7000), SRC, "", &roster(vec![unsigned(100_001)]));
    assert_eq!(fresh.added, 1);
}

#[test]
fn a_source_without_budget_left_plans_nothing() {
    let mut t = table_with(MembershipPolicy {
        max_new_per_source: 3,
        max_checks_per_source: 1000,
        ..MembershipPolicy::default()
    });
    t.merge_from(T0, SRC, "", &roster((0..3).map(signed).collect()));
    assert!(t
        .plan_checks(T0, SRC, &roster((10..20).map(signed).collect()))
        .is_empty());
}
