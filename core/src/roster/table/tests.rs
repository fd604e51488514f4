//! Tests of the membership table: host comparison, snapshots, epochs, bounds and eviction.

use super::placement::{host_of, prefix_of, same_host};
use super::*;

#[test]
fn hosts_compare_by_address_whatever_their_spelling() {
    assert_eq!(host_of("10.0.0.1:7070"), "10.0.0.1");
    assert_eq!(host_of("[::1]:7070"), "::1");
    assert_eq!(host_of("::1"), "::1");
    assert_eq!(host_of("10.0.0.1"), "10.0.0.1");
    assert!(
        same_host("::ffff:10.0.0.1", "10.0.0.1:7070"),
        "a mapped caller"
    );
    assert!(same_host("[0:0::1]:9", "[::1]:7070"));
    assert!(same_host("Node.Example:1", "node.example:2"));
    assert!(!same_host("10.0.0.1", "10.0.0.2:7070"));
    assert_eq!(prefix_of("10.1.2.3"), "10.1.2.0/24");
    assert_eq!(prefix_of("2001:db8:1:2::5"), "2001:db8:1::/48");
    assert_eq!(prefix_of("node.example"), "node.example");
}

fn m(id: &str, addr: &str, weight: f64) -> RosterMember {
    RosterMember {
        id: id.into(),
        addr: addr.into(),
        weight,
        record: Default::default(),
    }
}

fn table(cap: usize) -> Membership {
    Membership::new(m("me", "10.0.0.1:7070", 1.0), 5, cap).unwrap()
}

const T1: Instant = Instant::from_secs(1);
const T2: Instant = Instant::from_secs(2);

#[test]
fn snapshot_always_includes_self_first() {
    let mut t = table(8);
    t.learn(T1, "b", "h:2").unwrap();
    let r = t.snapshot();
    assert_eq!(r.members[0].id, "me");
    assert_eq!(r.epoch, 5);
    assert!(r.contains("b"));
}

#[test]
fn learn_takes_the_advertised_address_and_ignores_self_claims() {
    let mut t = table(8);
    assert_eq!(t.learn(T1, "b", "10.0.0.2:7070"), Ok(true));
    assert_eq!(t.addr("b"), Some("10.0.0.2:7070"));
    assert_eq!(t.heard("b"), Some(T1));
    // A caller's self-report overrides what we heard about it.
    assert_eq!(t.learn(T2, "b", "10.0.0.3:7070"), Ok(true));
    assert_eq!(t.addr("b"), Some("10.0.0.3:7070"));
    assert_eq!(t.learn(T2, "me", "evil:1"), Ok(false));
    assert_eq!(t.addr("me"), Some("10.0.0.1:7070"));
    assert_eq!(t.learn(T2, "", "h:1"), Err(MemberProblem::EmptyId));
}

#[test]
fn lower_or_equal_epoch_only_adds_unknown_members() {
    let mut t = table(8);
    t.learn(T1, "b", "b:1").unwrap();
    let r = Roster {
        epoch: 5,
        members: vec![
            m("resp", "r:1", 2.0),
            m("b", "stale:1", 9.0),
            m("c", "c:1", 1.0),
        ],
        epoch_sig: None,
    };
    let rep = t.merge(T2, "resp", &r);
    assert_eq!(rep.added, 2);
    assert_eq!(rep.updated, 0);
    assert!(!rep.epoch_advanced);
    assert_eq!(
        t.addr("b"),
        Some("b:1"),
        "hearsay at an old epoch never overwrites"
    );
    assert_eq!(
        t.heard("resp"),
        Some(T2),
        "liveness credited to the responder id"
    );
    assert_eq!(t.heard("c"), None, "third parties are hearsay");
    assert_eq!(t.epoch(), 5);
}

#[test]
fn higher_authority_signed_epoch_overwrites_and_is_adopted_but_never_self() {
    let authority = crate::roster::NodeKey::from_seed(&[9; 32]);
    let mut t = table(8)
        .with_policy(MembershipPolicy {
            authority: Some(authority.public()),
            ..MembershipPolicy::default()
        })
        .unwrap();
    t.learn(T1, "b", "b:1").unwrap();
    let r = Roster {
        epoch: 9,
        members: vec![m("b", "b:2", 3.0), m("me", "elsewhere:1", 0.0)],
        epoch_sig: Some(crate::roster::record::sign_epoch(&authority, 9)),
    };
    let rep = t.merge(T2, "x", &r);
    assert_eq!(rep.updated, 1);
    assert!(rep.epoch_advanced);
    assert_eq!(t.epoch(), 9);
    assert_eq!(t.snapshot().epoch_sig, r.epoch_sig, "served onward");
    assert_eq!(t.addr("b"), Some("b:2"));
    assert_eq!(t.addr("me"), Some("10.0.0.1:7070"));
    // Epochs never go down.
    t.merge(
        T2,
        "x",
        &Roster {
            epoch: 1,
            members: vec![],
            epoch_sig: None,
        },
    );
    t.raise_epoch(3);
    assert_eq!(t.epoch(), 9);
}

#[test]
fn an_unsigned_higher_epoch_is_refused_and_only_adds() {
    let mut t = table(8);
    t.learn(T1, "b", "b:1").unwrap();
    let r = Roster {
        epoch: 9,
        members: vec![m("b", "b:2", 3.0), m("c", "c:1", 1.0)],
        epoch_sig: None,
    };
    let rep = t.merge(T2, "x", &r);
    assert!(!rep.epoch_advanced);
    assert_eq!((rep.added, rep.updated), (1, 0));
    assert_eq!(t.epoch(), 5);
    assert_eq!(t.addr("b"), Some("b:1"));
    assert_eq!(t.stats().epoch_refused, 1);
}

#[test]
fn table_is_bounded_and_first_hand_beats_hearsay() {
    let mut t = table(3);
    t.learn(T1, "a", "a:1").unwrap();
    t.learn(T2, "b", "b:1").unwrap();
    let r = Roster {
        epoch: 1,
        epoch_sig: None,
        members: (0..10).map(|i| m(&format!("h{i}"), "h:1", 1.0)).collect(),
    };
    let rep = t.merge(T2, "nobody", &r);
    assert_eq!(t.len(), 3);
    assert_eq!(rep.added, 10, "hearsay displaces hearsay");
    assert_eq!(t.heard("a"), Some(T1));
    assert_eq!(t.heard("b"), Some(T2));
    // A first-hand newcomer takes the hearsay slot.
    t.learn(T2, "c", "c:1").unwrap();
    assert_eq!(t.len(), 3);
    assert!(t.addr("a").is_some() && t.addr("b").is_some() && t.addr("c").is_some());
    // Now all first-hand: hearsay is dropped, a first-hand newcomer evicts the oldest.
    let rep = t.merge(T2, "nobody", &r);
    assert_eq!(rep.dropped, 10);
    t.learn(Instant::from_secs(3), "d", "d:1").unwrap();
    assert_eq!(t.addr("a"), None, "a was heard from longest ago");
    assert_eq!(t.len(), 3);
}
