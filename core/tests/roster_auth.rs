//! Authenticated membership (issue 14): each rule of `Membership` against signed records,
//! one test per rule, named for it, on a virtual clock. Every test asserts the attack fails
//! and the counter that records it.

mod roster_support;

use peerblock_core::roster::record::{hex, sign_epoch, RecordSig, RECORD_TAG};
use peerblock_core::roster::{
    Attestation, ClaimRejection, LearnOutcome, Membership, MembershipMode, MembershipPolicy,
    NodeKey, RecordFormatError, Roster, RosterMember, MAX_ROSTER_MEMBERS,
};
use peerblock_core::time::{Duration, Instant};

const T0: Instant = Instant::ZERO;

fn key(n: u16) -> NodeKey {
    roster_support::key_from(7, n)
}

/// A member signed by `k` at `addr` with sequence `seq`.
fn signed(k: &NodeKey, addr: &str, seq: u64) -> RosterMember {
    RosterMember {
        record: Attestation::Signed(k.sign(addr, 1.0, seq).unwrap()),
        ..RosterMember::new(k.id(), addr, 1.0)
    }
}

fn roster(members: Vec<RosterMember>) -> Roster {
    Roster {
        epoch: 0,
        epoch_sig: None,
        members,
    }
}

fn table_with(policy: MembershipPolicy) -> Membership {
    roster_support::table_of(&key(0), policy)
}

fn table() -> Membership {
    table_with(MembershipPolicy::default())
}

/// The header form of a caller's record.
fn header(k: &NodeKey, addr: &str, seq: u64) -> (Attestation, f64) {
    let text = k.sign(addr, 1.0, seq).unwrap().to_header(1.0);
    Attestation::from_header(Some(text.as_bytes()))
}

#[test]
fn a_verified_record_is_learned_first_hand_from_a_caller() {
    let mut t = table();
    let a = key(1);
    let (rec, w) = header(&a, "10.0.0.2:7070", 1);
    assert_eq!(
        t.learn_caller(T0, "10.0.0.2", a.id(), "10.0.0.2:7070", &rec, Some(w)),
        Ok(LearnOutcome::Learned {
            changed: true,
            verified: true
        })
    );
    assert_eq!(t.record(a.id()).map(|r| r.seq), Some(1));
    assert_eq!(t.heard(a.id()), Some(T0));
}

#[test]
fn hijack_an_unsigned_claim_never_moves_a_verified_member() {
    let mut t = table();
    let victim = key(1);
    t.merge(
        T0,
        victim.id(),
        &roster(vec![signed(&victim, "10.0.0.2:7070", 1)]),
    );
    // The impostor claims the victim's id with its own address, as a caller and in a roster.
    let out = t
        .learn_caller(
            T0,
            "10.6.6.6",
            victim.id(),
            "10.6.6.6:7070",
            &Attestation::Unsigned,
            None,
        )
        .unwrap();
    assert_eq!(out, LearnOutcome::Rejected(ClaimRejection::Unverified));
    let rep = t.merge(
        T0,
        victim.id(),
        &roster(vec![RosterMember::new(victim.id(), "10.6.6.6:7070", 1.0)]),
    );
    assert_eq!(rep.rejected, 1);
    assert_eq!(t.addr(victim.id()), Some("10.0.0.2:7070"));
    assert_eq!(t.stats().unverified_refused, 2);
}

#[test]
fn hijack_a_record_signed_by_another_key_is_rejected_as_wrong_key() {
    let mut t = table();
    let (victim, thief) = (key(1), key(2));
    t.merge(T0, "x", &roster(vec![signed(&victim, "10.0.0.2:7070", 1)]));
    // The thief signs a record for the victim's id with its own key.
    let mut forged = signed(&thief, "10.6.6.6:7070", 99);
    forged.id = victim.id().to_owned();
    let rep = t.merge(T0, "x", &roster(vec![forged.clone()]));
    assert_eq!(rep.rejected, 1);
    assert_eq!(t.stats().wrong_key, 1);
    // The same against a table that never heard of the victim: not learned either.
    let mut fresh = table();
    fresh.merge(T0, "x", &roster(vec![forged]));
    assert_eq!(fresh.addr(victim.id()), None);
    assert_eq!(fresh.stats().wrong_key, 1);
    assert_eq!(t.addr(victim.id()), Some("10.0.0.2:7070"));
}

/// The thief's own, valid signature over a record naming the victim's id: an attacker
/// writes its own signer (the message format is in the record module's docs), so it is
/// not limited to what `NodeKey::sign` makes.
fn forged_for(thief: &NodeKey, victim_id: &str, addr: &str, seq: u64) -> RosterMember {
    use ed25519_dalek::Signer;
    let mut msg = RECORD_TAG.to_vec();
    msg.push(u8::try_from(victim_id.len()).unwrap());
    msg.extend(victim_id.as_bytes());
    msg.extend(u16::try_from(addr.len()).unwrap().to_be_bytes());
    msg.extend(addr.as_bytes());
    msg.extend(seq.to_be_bytes());
    msg.extend(1.0f64.to_bits().to_be_bytes());
    msg.extend(thief.public());
    let sig = ed25519_dalek::SigningKey::from_bytes(&thief.seed())
        .sign(&msg)
        .to_bytes();
    RosterMember {
        record: Attestation::Signed(RecordSig {
            seq,
            key: thief.public(),
            sig,
            admission: None,
        }),
        ..RosterMember::new(victim_id, addr, 1.0)
    }
}

#[test]
fn hijack_a_validly_signed_record_for_the_victims_id_is_rejected_in_a_batch() {
    let mut t = table_with(MembershipPolicy {
        max_new_per_source: 100,
        max_checks_per_source: 100,
        ..MembershipPolicy::default()
    });
    let (victim, thief) = (key(1), key(2));
    t.merge(T0, "x", &roster(vec![signed(&victim, "10.0.0.2:7070", 1)]));
    // Among ten honest records, so the checks run as one batch (not one by one).
    let mut members: Vec<RosterMember> = (100..110)
        .map(|n| signed(&key(n), &format!("10.0.1.{n}:7070"), 1))
        .collect();
    members.insert(4, forged_for(&thief, victim.id(), "10.6.6.6:7070", 99));
    let rep = t.merge(T0, "y", &roster(members));
    assert_eq!((rep.added, rep.rejected), (10, 1));
    assert_eq!(t.stats().wrong_key, 1);
    assert_eq!(t.addr(victim.id()), Some("10.0.0.2:7070"));
}

#[test]
fn a_record_carrying_the_victims_key_but_another_signature_is_a_bad_signature() {
    let mut t = table();
    let (victim, thief) = (key(1), key(2));
    let mut forged = signed(&thief, "10.6.6.6:7070", 99);
    forged.id = victim.id().to_owned();
    if let Attestation::Signed(r) = &mut forged.record {
        r.key = victim.public();
    }
    t.merge(T0, "x", &roster(vec![forged]));
    assert_eq!(t.addr(victim.id()), None);
    assert_eq!(t.stats().bad_signature, 1);
}

#[test]
fn replay_an_older_record_never_replaces_a_newer_one() {
    let mut t = table();
    let a = key(1);
    let old = signed(&a, "10.0.0.2:7070", 1);
    t.merge(T0, "x", &roster(vec![signed(&a, "10.0.0.3:7070", 2)]));
    let rep = t.merge(T0, "x", &roster(vec![old]));
    assert_eq!(rep.rejected, 1);
    assert_eq!(t.addr(a.id()), Some("10.0.0.3:7070"));
    assert_eq!(t.stats().replayed, 1);
}

#[test]
fn the_same_sequence_with_other_content_is_a_replay() {
    let mut t = table();
    let a = key(1);
    t.merge(T0, "x", &roster(vec![signed(&a, "10.0.0.2:7070", 5)]));
    // Signed by the real key, same seq, another address: equivocation, not an update.
    t.merge(T0, "x", &roster(vec![signed(&a, "10.0.0.9:7070", 5)]));
    assert_eq!(t.addr(a.id()), Some("10.0.0.2:7070"));
    assert_eq!(t.stats().replayed, 1);
}

#[test]
fn a_higher_sequence_number_replaces_a_verified_record() {
    let mut t = table();
    let a = key(1);
    t.merge(T0, "x", &roster(vec![signed(&a, "10.0.0.2:7070", 1)]));
    let rep = t.merge(T0, "x", &roster(vec![signed(&a, "10.0.0.3:7070", 2)]));
    assert_eq!(rep.updated, 1);
    assert_eq!(t.addr(a.id()), Some("10.0.0.3:7070"));
    assert_eq!(t.record(a.id()).map(|r| r.seq), Some(2));
}

#[test]
fn a_verified_record_replaces_an_unverified_claim() {
    let mut t = table();
    let a = key(1);
    // An impostor got there first, unsigned.
    t.learn(T0, a.id(), "10.6.6.6:7070").unwrap();
    t.merge(T0, "x", &roster(vec![signed(&a, "10.0.0.2:7070", 1)]));
    assert_eq!(t.addr(a.id()), Some("10.0.0.2:7070"));
    assert!(t.record(a.id()).is_some());
}

#[test]
fn garbage_and_truncated_signature_fields_are_rejected_as_malformed() {
    let mut t = table();
    let a = key(1);
    let good = signed(&a, "10.0.0.2:7070", 1);
    let Attestation::Signed(r) = good.record else {
        unreachable!()
    };
    let sig = hex(&r.sig);
    let keyh = hex(&r.key);
    let bodies = [
        // truncated signature
        format!(
            r#"{{"epoch":"0","members":[{{"id":"{}","addr":"10.0.0.2:7070","weight":1,"seq":"1","key":"{keyh}","sig":"{}"}}]}}"#,
            a.id(),
            &sig[..100]
        ),
        // garbage signature
        format!(
            r#"{{"epoch":"0","members":[{{"id":"{}","addr":"10.0.0.2:7070","weight":1,"seq":"1","key":"{keyh}","sig":"{}"}}]}}"#,
            a.id(),
            "zz".repeat(64)
        ),
        // a signature without its key
        format!(
            r#"{{"epoch":"0","members":[{{"id":"{}","addr":"10.0.0.2:7070","weight":1,"seq":"1","sig":"{sig}"}}]}}"#,
            a.id()
        ),
    ];
    for body in &bodies {
        let decoded = Roster::from_json(body.as_bytes()).expect("a bad record is not a bad roster");
        assert!(matches!(
            decoded.members[0].record,
            Attestation::Malformed(_)
        ));
        t.merge(T0, "x", &decoded);
    }
    assert_eq!(t.addr(a.id()), None, "never learned, not even unverified");
    assert_eq!(t.stats().malformed, 3);
    // In a header: a truncated value.
    let text = r.to_header(1.0);
    let (att, _) = Attestation::from_header(Some(&text.as_bytes()[..text.len() - 1]));
    assert_eq!(att, Attestation::Malformed(RecordFormatError::Sig));
    let out = t
        .learn_caller(T0, "10.0.0.2", a.id(), "10.0.0.2:7070", &att, None)
        .unwrap();
    assert_eq!(out, LearnOutcome::Rejected(ClaimRejection::Malformed));
    assert_eq!(t.stats().malformed, 4);
    // A signature that parses but does not verify (one bit flipped).
    let mut flipped = r;
    flipped.sig[0] ^= 1;
    let member = RosterMember {
        record: Attestation::Signed(flipped),
        ..RosterMember::new(a.id(), "10.0.0.2:7070", 1.0)
    };
    t.merge(T0, "x", &roster(vec![member]));
    assert_eq!(t.stats().bad_signature, 1);
    assert_eq!(t.addr(a.id()), None);
}

#[test]
fn verified_only_mode_learns_nothing_unverified() {
    let mut t = table_with(MembershipPolicy {
        mode: MembershipMode::VerifiedOnly,
        ..MembershipPolicy::default()
    });
    let out = t
        .learn_caller(
            T0,
            "10.0.0.9",
            "reference-peer",
            "10.0.0.9:7070",
            &Attestation::Unsigned,
            None,
        )
        .unwrap();
    assert_eq!(out, LearnOutcome::Rejected(ClaimRejection::Unverified));
    let a = key(1);
    let rep = t.merge(
        T0,
        "x",
        &roster(vec![
            RosterMember::new("n1", "10.0.0.5:7070", 1.0),
            signed(&a, "10.0.0.2:7070", 1),
        ]),
    );
    assert_eq!((rep.added, rep.rejected), (1, 1));
    assert_eq!(t.len(), 1);
    assert!(t.addr("n1").is_none() && t.addr("reference-peer").is_none());
    assert_eq!(t.stats().unverified_refused, 2);
}

#[test]
fn open_mode_learns_an_unsigned_reference_peer_as_unverified() {
    let mut t = table();
    let out = t
        .learn_caller(
            T0,
            "10.0.0.9",
            "n1",
            "10.0.0.9:7070",
            &Attestation::Unsigned,
            None,
        )
        .unwrap();
    assert_eq!(
        out,
        LearnOutcome::Learned {
            changed: true,
            verified: false
        }
    );
    assert_eq!(t.addr("n1"), Some("10.0.0.9:7070"));
    assert!(t.record("n1").is_none());
    // Its snapshot entry carries no record fields, so it is served as unverified.
    let json = String::from_utf8(t.snapshot().to_json()).unwrap();
    assert!(
        json.contains(r#"{"id":"n1","addr":"10.0.0.9:7070","weight":1.0}"#),
        "{json}"
    );
}

#[test]
fn epoch_pinning_an_unsigned_max_epoch_is_not_adopted() {
    let mut t = table();
    let pin = Roster {
        epoch: u64::MAX,
        epoch_sig: None,
        members: vec![RosterMember::new("n1", "10.0.0.5:7070", 1.0)],
    };
    let rep = t.merge(T0, "attacker", &pin);
    assert!(!rep.epoch_advanced);
    assert_eq!(t.epoch(), 0);
    assert_eq!(t.stats().epoch_refused, 1);
    // A local change still raises it: honest epochs are not pinned out.
    t.raise_epoch(3);
    assert_eq!(t.epoch(), 3);
}

#[test]
fn epoch_pinning_an_epoch_signed_by_another_key_is_not_adopted() {
    let authority = key(100);
    let mut t = table_with(MembershipPolicy {
        authority: Some(authority.public()),
        ..MembershipPolicy::default()
    });
    let forged = Roster {
        epoch: u64::MAX,
        epoch_sig: Some(sign_epoch(&key(101), u64::MAX)),
        members: vec![],
    };
    assert!(!t.merge(T0, "attacker", &forged).epoch_advanced);
    // A signature over another epoch does not carry over either.
    let moved = Roster {
        epoch: u64::MAX,
        epoch_sig: Some(sign_epoch(&authority, 5)),
        members: vec![],
    };
    assert!(!t.merge(T0, "attacker", &moved).epoch_advanced);
    assert_eq!(t.stats().epoch_refused, 2);
    // The authority's own signature is adopted, and served onward.
    let honest = Roster {
        epoch: 5,
        epoch_sig: Some(sign_epoch(&authority, 5)),
        members: vec![],
    };
    assert!(t.merge(T0, "peer", &honest).epoch_advanced);
    assert_eq!(t.epoch(), 5);
    let back = Roster::from_json(&t.snapshot().to_json()).unwrap();
    assert_eq!(back.epoch_sig, honest.epoch_sig);
}

#[test]
fn hearsay_flood_one_source_adds_at_most_its_budget_per_interval() {
    let mut t = table_with(MembershipPolicy {
        max_new_per_source: 16,
        learn_interval: Duration::from_secs(30),
        ..MembershipPolicy::default()
    });
    let flood = roster(
        (0..1000)
            .map(|i| RosterMember::new(format!("fake{i:04}"), "10.6.6.6:1", 1.0))
            .collect(),
    );
    let rep = t.merge(T0, "10.6.6.6:7070", &flood);
    assert_eq!((rep.added, rep.rate_limited), (16, 984));
    assert_eq!(t.len(), 16);
    // Within the interval: nothing more.
    let rep = t.merge(Instant::from_secs(29), "10.6.6.6:7070", &flood);
    assert_eq!(rep.added, 0);
    // Another source has its own budget; after the interval the first one refills.
    assert_eq!(
        t.merge(Instant::from_secs(29), "10.7.7.7:7070", &flood)
            .added,
        16
    );
    assert_eq!(
        t.merge(Instant::from_secs(30), "10.6.6.6:7070", &flood)
            .added,
        16
    );
    // Members already known are not new and are not charged: 984, then 984 (16 known),
    // 968 (16 + 16 known) and 952.
    assert_eq!(t.stats().rate_limited, 984 + 984 + 968 + 952);
    assert_eq!(t.len(), 48);
}

#[test]
fn hearsay_flood_rate_limited_records_cost_no_signature_check() {
    let mut t = table_with(MembershipPolicy {
        max_new_per_source: 4,
        ..MembershipPolicy::default()
    });
    let keys: Vec<NodeKey> = (1..=20).map(key).collect();
    let flood = roster(keys.iter().map(|k| signed(k, "10.6.6.6:1", 1)).collect());
    let rep = t.merge(T0, "10.6.6.6:7070", &flood);
    assert_eq!((rep.added, rep.rate_limited), (4, 16));
    assert_eq!(t.stats().signature_checks, 4);
}

#[test]
fn hearsay_flood_real_members_survive_a_full_table() {
    // A small table already holding real members (first-hand and verified hearsay).
    let me = key(0);
    let mut t = Membership::new(RosterMember::new(me.id(), "10.0.0.1:7070", 1.0), 0, 8)
        .unwrap()
        .with_policy(MembershipPolicy {
            max_new_per_source: 1_000_000,
            ..MembershipPolicy::default()
        })
        .unwrap();
    let real: Vec<NodeKey> = (1..=4).map(key).collect();
    t.learn(T0, "first-hand", "10.0.0.9:7070").unwrap();
    t.merge(
        T0,
        "peer",
        &roster(real.iter().map(|k| signed(k, "10.0.0.2:7070", 1)).collect()),
    );
    // A flood of unsigned invented members from many sources, far beyond the capacity.
    for s in 0..50 {
        let flood = roster(
            (0..MAX_ROSTER_MEMBERS)
                .map(|i| RosterMember::new(format!("fake-{s}-{i}"), "10.6.6.6:1", 1.0))
                .collect(),
        );
        t.merge(T0, &format!("10.6.{s}.1:7070"), &flood);
    }
    assert_eq!(t.len(), 8);
    assert!(t.addr("first-hand").is_some());
    for k in &real {
        assert_eq!(
            t.addr(k.id()),
            Some("10.0.0.2:7070"),
            "verified hearsay survives"
        );
    }
}

#[test]
fn steady_state_exchange_costs_no_signature_check() {
    let mut t = table();
    let keys: Vec<NodeKey> = (1..=64).map(key).collect();
    let r = roster(keys.iter().map(|k| signed(k, "10.0.0.2:7070", 1)).collect());
    t.merge(T0, "peer", &r);
    let checks = t.stats().signature_checks;
    assert_eq!(checks, 64);
    // The same roster again (and its JSON round trip, as a refresh would receive it).
    let again = Roster::from_json(&r.to_json()).unwrap();
    let rep = t.merge(Instant::from_secs(30), "peer", &again);
    assert_eq!((rep.added, rep.updated, rep.rejected), (0, 0, 0));
    assert_eq!(t.stats().signature_checks, checks, "no new check");
}

#[test]
fn a_record_verified_once_is_not_verified_again() {
    let me = key(0);
    let mut t = Membership::new(RosterMember::new(me.id(), "10.0.0.1:7070", 1.0), 0, 8).unwrap();
    let a = key(1);
    let r = roster(vec![signed(&a, "10.0.0.2:7070", 1)]);
    t.merge(T0, "peer", &r);
    // Forgotten (a local liveness decision), then offered again: the cache knows it.
    assert!(t.remove(a.id()));
    t.merge(T0, "peer", &r);
    assert_eq!(t.stats().signature_checks, 1);
    assert_eq!(t.stats().cache_hits, 1);
    assert!(t.record(a.id()).is_some());
}

#[test]
fn signed_records_survive_the_wire_and_are_ignored_by_a_reference_decoder() {
    let a = key(1);
    let r = roster(vec![signed(&a, "10.0.0.2:7070", 3)]);
    let json = String::from_utf8(r.to_json()).unwrap();
    assert!(json.contains(r#""seq":"3""#), "{json}");
    assert_eq!(Roster::from_json(json.as_bytes()).unwrap(), r);
    // Go's keys, case-folded, are read the same.
    let go = json
        .replace(r#""seq""#, r#""Seq""#)
        .replace(r#""key""#, r#""Key""#)
        .replace(r#""sig""#, r#""Sig""#);
    assert_eq!(Roster::from_json(go.as_bytes()).unwrap(), r);
}

#[test]
fn our_own_record_must_verify() {
    let me = key(0);
    let mut t = Membership::new(RosterMember::new(me.id(), "10.0.0.1:7070", 1.0), 0, 8).unwrap();
    // Signed for another address: our misuse, an Err at the call.
    assert!(t
        .set_record(me.sign("10.9.9.9:7070", 1.0, 1).unwrap())
        .is_err());
    assert!(t
        .set_record(key(5).sign("10.0.0.1:7070", 1.0, 1).unwrap())
        .is_err());
    assert!(t
        .set_record(me.sign("10.0.0.1:7070", 1.0, 1).unwrap())
        .is_ok());
    assert!(matches!(
        t.snapshot().members[0].record,
        Attestation::Signed(_)
    ));
}

#[test]
fn one_bad_signature_in_a_batch_rejects_only_that_member() {
    let mut t = table();
    let keys: Vec<NodeKey> = (1..=32).map(key).collect();
    let mut members: Vec<RosterMember> =
        keys.iter().map(|k| signed(k, "10.0.0.2:7070", 1)).collect();
    if let Attestation::Signed(r) = &mut members[17].record {
        r.sig[5] ^= 0x40;
    }
    let rep = t.merge(T0, "peer", &roster(members));
    assert_eq!((rep.added, rep.rejected), (31, 1));
    assert_eq!(t.addr(keys[17].id()), None);
    assert_eq!(t.stats().bad_signature, 1);
    // The failed batch fell back to one check per record.
    assert_eq!(t.stats().signature_checks, 32);
}

#[test]
fn a_batch_verified_roster_counts_each_record_once() {
    let mut t = table();
    let keys: Vec<NodeKey> = (1..=32).map(key).collect();
    let r = roster(keys.iter().map(|k| signed(k, "10.0.0.2:7070", 1)).collect());
    let rep = t.merge(T0, "peer", &r);
    assert_eq!(rep.added, 32);
    assert_eq!(t.stats().signature_checks, 32);
    for k in &keys {
        assert!(t.record(k.id()).is_some());
    }
}

#[test]
fn garbage_updates_of_known_members_cost_at_most_the_sources_check_budget() {
    let mut t = table_with(MembershipPolicy {
        max_checks_per_source: 10,
        ..MembershipPolicy::default()
    });
    let keys: Vec<NodeKey> = (1..=40).map(key).collect();
    // The real members, learned from their own (honest) sources.
    for (i, k) in keys.iter().enumerate() {
        t.merge(
            T0,
            &format!("honest-{i}"),
            &roster(vec![signed(k, "10.0.0.2:7070", 1)]),
        );
    }
    let before = t.stats().signature_checks;
    // One source relays a "newer" record for every one of them, each with a bad signature.
    let bogus: Vec<RosterMember> = keys
        .iter()
        .map(|k| {
            let mut m = signed(k, "10.6.6.6:7070", 2);
            if let Attestation::Signed(r) = &mut m.record {
                r.sig[9] ^= 1;
            }
            m
        })
        .collect();
    let rep = t.merge(T0, "10.6.6.6:7070", &roster(bogus));
    assert_eq!(
        t.stats().signature_checks - before,
        10,
        "budget of 10 checks"
    );
    assert_eq!((rep.rejected, rep.rate_limited), (10, 30));
    for k in &keys {
        assert_eq!(t.addr(k.id()), Some("10.0.0.2:7070"));
    }
}
