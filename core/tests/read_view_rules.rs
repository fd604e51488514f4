//! `read::PeerView`: its defaults, the cooldown table's and load table's views, and the
//! view through a reference, one rule per test (the survivors of `read/view.rs`'s
//! mutation run, docs/testing.md).

use peerblock_core::cooldown::{CooldownConfig, CooldownTable, DialOutcome};
use peerblock_core::placement::PeerId;
use peerblock_core::read::PeerView;
use peerblock_core::time::{Duration, Instant};

/// A view that answers only the two required questions: every peer eligible, none refused.
struct Minimal;

impl PeerView for Minimal {
    fn eligible(&self, _now: Instant, _peer: &PeerId) -> bool {
        true
    }
    fn refused_for(&self, _now: Instant, _peer: &PeerId) -> Option<Duration> {
        None
    }
}

fn peer(n: u64) -> PeerId {
    PeerId::from_u64(n)
}

fn refused_table() -> CooldownTable<PeerId> {
    let mut t = CooldownTable::new(CooldownConfig::default()).unwrap();
    t.record(
        Instant::ZERO,
        peer(1),
        DialOutcome::Refused {
            retry_after: Some(Duration::from_secs(2)),
        },
    );
    t
}

#[test]
fn by_default_a_view_knows_no_load_and_nothing_in_flight() {
    assert_eq!(Minimal.in_flight(&peer(1)), 0);
    assert_eq!(Minimal.load(Instant::ZERO, &peer(1)), None);
    let mut called = false;
    Minimal.for_each_refused(Instant::ZERO, &mut |_, _| called = true);
    assert!(!called);
}

#[test]
fn a_cooldown_table_view_makes_a_refusing_peer_ineligible_and_lists_it() {
    let t = refused_table();
    let now = Instant::ZERO;
    assert!(!PeerView::eligible(&t, now, &peer(1)));
    assert!(PeerView::eligible(&t, now, &peer(2)));
    assert_eq!(
        PeerView::refused_for(&t, now, &peer(1)),
        Some(Duration::from_secs(2))
    );
    let mut listed = Vec::new();
    PeerView::for_each_refused(&t, now, &mut |p, left| listed.push((p, left)));
    assert_eq!(listed, vec![(peer(1), Duration::from_secs(2))]);
    // Once the wait is over the peer is eligible again and no longer listed.
    let later = now + Duration::from_secs(2);
    assert!(PeerView::eligible(&t, later, &peer(1)));
}

#[test]
fn a_view_through_a_reference_answers_as_the_view_itself() {
    let t = refused_table();
    let r = &t;
    let now = Instant::ZERO;
    assert!(!PeerView::eligible(&r, now, &peer(1)));
    assert!(PeerView::eligible(&r, now, &peer(2)));
    assert_eq!(
        PeerView::refused_for(&r, now, &peer(1)),
        Some(Duration::from_secs(2))
    );
    let mut n = 0;
    PeerView::for_each_refused(&r, now, &mut |_, _| n += 1);
    assert_eq!(n, 1);
}

/// A view with something in flight and a load hint for every peer.
struct Busy;

impl PeerView for Busy {
    fn eligible(&self, _now: Instant, _peer: &PeerId) -> bool {
        true
    }
    fn refused_for(&self, _now: Instant, _peer: &PeerId) -> Option<Duration> {
        None
    }
    fn in_flight(&self, _peer: &PeerId) -> u32 {
        7
    }
    fn load(&self, _now: Instant, _peer: &PeerId) -> Option<u32> {
        Some(9)
    }
}

#[test]
fn a_reference_passes_on_in_flight_counts_and_load_hints() {
    let r = &Busy;
    assert_eq!(PeerView::in_flight(&r, &peer(1)), 7);
    assert_eq!(PeerView::load(&r, Instant::ZERO, &peer(1)), Some(9));
    assert_eq!(PeerView::refused_for(&r, Instant::ZERO, &peer(1)), None);
}
