//! Placement that hearsay cannot capture (issue 25): which members `Membership::placed`
//! (and so `client::placement_members`) hands to placement. One rule per test, named for
//! it, on a virtual clock.

mod roster_support;

use peerblock_core::client::placement_members;
use peerblock_core::placement::{owners, Key, PeerId};
use peerblock_core::roster::record::sign_admission;
use peerblock_core::roster::{
    Attestation, Membership, MembershipMode, MembershipPolicy, NodeKey, PolicyError, Roster,
    RosterMember, DEFAULT_MAX_PLACED_PER_HOST, MAX_PLACED_WEIGHT,
};
use peerblock_core::time::Instant;

const T0: Instant = Instant::ZERO;

fn key(n: u16) -> NodeKey {
    roster_support::key_from(9, n)
}

fn signed(k: &NodeKey, addr: &str, weight: f64) -> RosterMember {
    RosterMember {
        record: Attestation::Signed(k.sign(addr, weight, 1).unwrap()),
        ..RosterMember::new(k.id(), addr, weight)
    }
}

fn roster(members: Vec<RosterMember>) -> Roster {
    Roster::of(members)
}

fn table_with(policy: MembershipPolicy) -> Membership {
    roster_support::table_of(&key(0), policy)
}

fn table() -> Membership {
    table_with(MembershipPolicy {
        max_new_per_source: 4000,
        max_checks_per_source: 4000,
        ..MembershipPolicy::default()
    })
}

fn placed_ids(t: &Membership) -> Vec<String> {
    t.placed().into_iter().map(|m| m.id).collect()
}

/// A 64-hex id an outsider chose (nothing certifies an unsigned id).
fn ground_id(n: u64) -> String {
    PeerId::from_u64(0xdead_0000 + n).to_hex()
}

#[test]
fn unverified_hearsay_is_never_placed() {
    // The outsider's roster: itself (answering from its own address) and 28 invented
    // members at one tarpit address. Only the outsider spoke for itself.
    let mut t = table();
    let outsider = ground_id(1000);
    let mut members = vec![RosterMember::new(&outsider, "10.9.0.1:7070", 1.0)];
    members.extend((0..28).map(|i| RosterMember::new(ground_id(i), "10.9.0.2:9", 1.0)));
    let report = t.merge_from(T0, "10.9.0.1:7070", &outsider, &roster(members));
    assert_eq!(report.added, 29, "learned (they may be asked for rosters)");
    let placed = placed_ids(&t);
    assert!(placed.contains(&outsider), "the responder spoke for itself");
    assert_eq!(placed.len(), 2, "me and the outsider only: {placed:?}");
    for i in 0..28 {
        assert!(!t.placeable(&ground_id(i)), "invented member {i} placed");
    }
    // And so no key's close group holds one of them.
    let members = placement_members(&t);
    for k in 0..64u64 {
        for m in owners(&Key::from_u64(k), &members) {
            assert!(m.id.to_hex() != ground_id(0) && members.len() == 2);
        }
    }
}

#[test]
fn a_responder_naming_another_address_than_the_one_asked_is_not_placed() {
    let mut t = table();
    let id = ground_id(1);
    t.merge_from(
        T0,
        "10.9.0.1:7070",
        &id,
        &roster(vec![RosterMember::new(&id, "10.9.0.77:7070", 1.0)]),
    );
    assert!(t.addr(&id).is_some());
    assert!(!t.placeable(&id), "it did not speak from 10.9.0.77");
}

#[test]
fn an_unverified_caller_is_placed_only_when_it_called_from_its_addresses_host() {
    let mut t = table();
    let (here, there) = (ground_id(1), ground_id(2));
    t.learn_caller(
        T0,
        "10.9.0.5",
        &here,
        "10.9.0.5:7070",
        &Attestation::Unsigned,
        None,
    )
    .unwrap();
    t.learn_caller(
        T0,
        "10.9.0.5",
        &there,
        "10.9.0.6:7070",
        &Attestation::Unsigned,
        None,
    )
    .unwrap();
    assert!(t.placeable(&here));
    assert!(
        !t.placeable(&there),
        "it named an address it did not call from"
    );
    assert!(t.heard(&there).is_some(), "still learned, first-hand");
}

#[test]
fn a_verified_member_is_placed_from_hearsay() {
    let mut t = table();
    let a = key(1);
    t.merge_from(
        T0,
        "10.0.0.9:7070",
        "someone-else",
        &roster(vec![signed(&a, "10.0.0.2:7070", 1.0)]),
    );
    assert!(t.heard(a.id()).is_none(), "hearsay");
    assert!(t.placeable(a.id()), "its record verified");
}

#[test]
fn an_address_changed_on_someone_elses_word_is_no_longer_placed() {
    let authority = key(4242);
    let mut t = table_with(MembershipPolicy {
        authority: Some(authority.public()),
        ..MembershipPolicy::default()
    });
    let id = ground_id(3);
    t.learn(T0, &id, "10.9.0.5:7070").unwrap();
    assert!(t.placeable(&id));
    // An authority-signed higher epoch lets hearsay move an unverified entry.
    let mut r = roster(vec![RosterMember::new(&id, "10.9.0.66:7070", 1.0)]);
    r.epoch = 5;
    r.epoch_sig = Some(peerblock_core::roster::record::sign_epoch(&authority, 5));
    let report = t.merge_from(T0, "10.0.0.8:7070", "other", &r);
    assert_eq!(report.updated, 1);
    assert!(
        !t.placeable(&id),
        "moved by hearsay: it has not spoken from there"
    );
}

#[test]
fn one_host_places_at_most_its_budget_and_established_members_keep_their_place() {
    let mut t = table();
    // Two honest nodes on one host, first.
    let (a, b) = (key(1), key(2));
    for (k, port) in [(&a, 7000), (&b, 7001)] {
        t.merge_from(
            T0,
            "10.0.0.9:7070",
            "x",
            &roster(vec![signed(k, &format!("10.7.0.1:{port}"), 1.0)]),
        );
    }
    // Then 28 signed newcomers (fresh keys) at the same host.
    let later = Instant::from_secs(5);
    let crafted: Vec<RosterMember> = (100..128)
        .map(|n| signed(&key(n), &format!("10.7.0.1:{}", 8000 + n), 1.0))
        .collect();
    t.merge_from(later, "10.0.0.9:7070", "x", &roster(crafted));
    let on_host: Vec<String> = t
        .placed()
        .into_iter()
        .filter(|m| m.addr.starts_with("10.7.0.1:"))
        .map(|m| m.id)
        .collect();
    assert_eq!(on_host.len(), DEFAULT_MAX_PLACED_PER_HOST);
    assert!(on_host.iter().any(|id| id == a.id()) && on_host.iter().any(|id| id == b.id()));
}

#[test]
fn one_address_places_one_member_the_longest_known() {
    let mut t = table();
    let first = key(1);
    t.merge_from(
        T0,
        "10.0.0.9:7070",
        "x",
        &roster(vec![signed(&first, "10.7.0.3:7000", 1.0)]),
    );
    let later: Vec<RosterMember> = (200..210)
        .map(|n| signed(&key(n), "10.7.0.3:7000", 1.0))
        .collect();
    t.merge_from(Instant::from_secs(1), "10.0.0.9:7070", "x", &roster(later));
    let at: Vec<String> = t
        .placed()
        .into_iter()
        .filter(|m| m.addr == "10.7.0.3:7000")
        .map(|m| m.id)
        .collect();
    assert_eq!(at, vec![first.id().to_owned()]);
}

#[test]
fn one_prefix_places_at_most_its_budget() {
    let mut t = table_with(MembershipPolicy {
        max_new_per_source: 4000,
        max_checks_per_source: 4000,
        max_placed_per_host: 2,
        max_placed_per_prefix: 5,
        ..MembershipPolicy::default()
    });
    for n in 0..20u64 {
        let id = ground_id(n);
        t.learn(T0, &id, &format!("10.7.1.{}:7070", n + 1)).unwrap();
    }
    // Another /24 is not charged for it.
    t.learn(T0, &ground_id(99), "10.7.2.1:7070").unwrap();
    let placed = t.placed();
    let in_prefix = placed
        .iter()
        .filter(|m| m.addr.starts_with("10.7.1."))
        .count();
    assert_eq!(in_prefix, 5);
    assert!(placed.iter().any(|m| m.id == ground_id(99)));
}

#[test]
fn the_node_itself_is_placed_first_and_counts_against_its_hosts_budget() {
    let mut t = table_with(MembershipPolicy {
        max_placed_per_host: 1,
        ..MembershipPolicy::default()
    });
    t.learn(T0, &ground_id(1), "10.0.0.1:7071").unwrap();
    let placed = placed_ids(&t);
    assert_eq!(
        placed,
        vec![key(0).id().to_owned()],
        "my host's one place is mine"
    );
}

#[test]
fn a_claimed_weight_is_placed_at_most_at_the_cap() {
    let mut t = table();
    let heavy = key(1);
    t.merge_from(
        T0,
        "10.0.0.2:7070",
        heavy.id(),
        &roster(vec![signed(&heavy, "10.0.0.2:7070", 1e300)]),
    );
    let m = t.placed().into_iter().find(|m| m.id == heavy.id()).unwrap();
    assert_eq!(m.weight, MAX_PLACED_WEIGHT);
    assert_eq!(
        t.snapshot()
            .members
            .iter()
            .find(|m| m.id == heavy.id())
            .unwrap()
            .weight,
        1e300,
        "served as signed: only placement caps it"
    );
}

// ---- admitted membership -----------------------------------------------------------------

fn authority() -> NodeKey {
    key(4242)
}

fn admitted_table(allow: &[&str]) -> Membership {
    table_with(MembershipPolicy {
        mode: MembershipMode::Admitted,
        authority: Some(authority().public()),
        allow: allow.iter().map(|a| a.to_string()).collect(),
        ..MembershipPolicy::default()
    })
}

/// A member signed by `k` at `addr`, carrying `cert` as its admission.
fn with_cert(k: &NodeKey, addr: &str, cert: Option<[u8; 64]>) -> RosterMember {
    let mut r = k.sign(addr, 1.0, 1).unwrap();
    r.admission = cert;
    RosterMember {
        record: Attestation::Signed(r),
        ..RosterMember::new(k.id(), addr, 1.0)
    }
}

#[test]
fn admitted_mode_needs_an_authority() {
    let p = MembershipPolicy {
        mode: MembershipMode::Admitted,
        ..MembershipPolicy::default()
    };
    assert_eq!(p.validate(), Err(PolicyError::AdmittedWithoutAuthority));
    assert_eq!(PolicyError::AdmittedWithoutAuthority.field(), "authority");
}

#[test]
fn in_admitted_mode_only_a_member_the_authority_admitted_is_placed() {
    let mut t = admitted_table(&[]);
    let (good, bare, forged) = (key(1), key(2), key(3));
    let cert = sign_admission(&authority(), &good.public());
    // A certificate for another key, and one signed by another authority.
    let stolen = sign_admission(&authority(), &good.public());
    let rogue = sign_admission(&key(77), &forged.public());
    let members = vec![
        with_cert(&good, "10.0.0.2:7070", Some(cert)),
        with_cert(&bare, "10.0.0.3:7070", None),
        with_cert(&forged, "10.0.0.4:7070", Some(stolen)),
        with_cert(&key(4), "10.0.0.5:7070", Some(rogue)),
    ];
    // Every one first-hand from its address would not help: fetched from each.
    for m in &members {
        t.merge_from(T0, &m.addr, &m.id, &roster(vec![m.clone()]));
    }
    assert_eq!(t.len(), 4, "all learned (signed, verified records)");
    assert!(t.placeable(good.id()));
    for k in [&bare, &forged, &key(4)] {
        assert!(
            !t.placeable(k.id()),
            "{} placed without a valid certificate",
            k.id()
        );
    }
    // The admitted member's certificate is served onward with its record.
    let json = String::from_utf8(t.snapshot().to_json()).unwrap();
    assert!(json.contains(&format!(
        "\"adm\":\"{}\"",
        peerblock_core::roster::record::hex(&cert)
    )));
}

#[test]
fn in_admitted_mode_unsigned_members_are_placed_only_at_allowed_addresses_they_spoke_from() {
    let mut t = admitted_table(&["10.0.0.7:7070"]);
    let (go, other) = (ground_id(1), ground_id(2));
    t.learn(T0, &go, "10.0.0.7:7070").unwrap();
    t.learn(T0, &other, "10.0.0.8:7070").unwrap();
    assert!(t.placeable(&go), "allowed and spoke from there");
    assert!(!t.placeable(&other), "not allowed");
    // Hearsay naming the allowed address is not placed either.
    let mut h = admitted_table(&["10.0.0.7:7070"]);
    h.merge_from(
        T0,
        "10.0.0.9:7070",
        "someone",
        &roster(vec![RosterMember::new(ground_id(3), "10.0.0.7:7070", 1.0)]),
    );
    assert!(!h.placeable(&ground_id(3)));
}

#[test]
fn a_certificate_arriving_with_the_record_already_held_admits_the_member() {
    let mut t = admitted_table(&[]);
    let a = key(1);
    t.merge_from(
        T0,
        "10.0.0.2:7070",
        a.id(),
        &roster(vec![with_cert(&a, "10.0.0.2:7070", None)]),
    );
    assert!(!t.placeable(a.id()));
    let cert = sign_admission(&authority(), &a.public());
    let rep = t.merge_from(
        T0,
        "10.0.0.2:7070",
        a.id(),
        &roster(vec![with_cert(&a, "10.0.0.2:7070", Some(cert))]),
    );
    assert_eq!(rep.updated, 1);
    assert!(t.placeable(a.id()));
    // A bad certificate for the same record later does not un-admit it.
    let rogue = sign_admission(&key(77), &a.public());
    t.merge_from(
        T0,
        "10.0.0.9:7070",
        "x",
        &roster(vec![with_cert(&a, "10.0.0.2:7070", Some(rogue))]),
    );
    assert!(t.placeable(a.id()));
}

#[test]
fn a_record_header_carries_the_admission_certificate() {
    let a = key(1);
    let mut r = a.sign("10.0.0.2:7070", 1.0, 3).unwrap();
    r.admission = Some(sign_admission(&authority(), &a.public()));
    let (got, w) = Attestation::from_header(Some(r.to_header(1.0).as_bytes()));
    assert_eq!(got, Attestation::Signed(r));
    assert_eq!(w, 1.0);
    let mut t = admitted_table(&[]);
    t.learn_caller(T0, "10.0.0.2", a.id(), "10.0.0.2:7070", &got, Some(w))
        .unwrap();
    assert!(t.placeable(a.id()));
}
