//! Shared helpers for the membership integration tests (`core/tests/roster_*.rs`).
#![allow(dead_code)]

use peerblock_core::roster::{
    Membership, MembershipPolicy, NodeKey, RosterMember, MAX_ROSTER_MEMBERS,
};

/// A key drawn from a seed whose first two bytes are `n` and the rest `fill` (each test
/// file uses its own `fill`, so its ids are its own).
pub fn key_from(fill: u8, n: u16) -> NodeKey {
    let mut seed = [fill; 32];
    seed[..2].copy_from_slice(&n.to_be_bytes());
    NodeKey::from_seed(&seed)
}

/// A membership table of the node `me` (signed at `10.0.0.1:7070`, weight 1, sequence 1)
/// with `policy`.
pub fn table_of(me: &NodeKey, policy: MembershipPolicy) -> Membership {
    let mut t = Membership::new(
        RosterMember::new(me.id(), "10.0.0.1:7070", 1.0),
        0,
        MAX_ROSTER_MEMBERS - 1,
    )
    .unwrap()
    .with_policy(policy)
    .unwrap();
    t.set_record(me.sign("10.0.0.1:7070", 1.0, 1).unwrap())
        .unwrap();
    t
}
