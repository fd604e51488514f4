//! Rule (performance): the common read (lookup, one GET, found) allocates nothing once the
//! driver's own buffers exist — the candidate list of a close group fits inline — and a
//! lookup far larger than a close group allocates only for the candidate list.
//!
//! Counted by the shared counting global allocator (this thread's allocations only).

mod alloc_support;

use alloc_support::allocations;
use bytes::Bytes;
use peerblock_core::placement::{Key, PeerId};
use peerblock_core::read::{GetOutcome, Read, ReadConfig, ReadEvent, ReadOutcome};
use peerblock_core::time::Instant;
use peerblock_testkit::StaticView;

fn one_read(peers: &[PeerId], view: &StaticView) -> ReadOutcome {
    let now = Instant::from_secs(1);
    let mut read = Read::new(Key::from_u64(0), ReadConfig::default(), now, 7).unwrap();
    let mut outcome = None;
    let mut steps = 0;
    while let Some(action) = read.poll_event(now, view) {
        // Bounded: a read that never ends fails here instead of hanging the test.
        steps += 1;
        assert!(steps < 1_000, "the read never ended");
        match action {
            ReadEvent::Lookup => read.handle_lookup(now, peers),
            ReadEvent::Get { id, .. } => {
                read.handle_get(now, id, GetOutcome::Found(Bytes::from_static(b"b")))
            }
            ReadEvent::Done(o) => outcome = Some(o),
            _ => {}
        }
    }
    outcome.unwrap()
}

#[test]
fn common_read_allocates_only_for_a_large_candidate_list() {
    let view = StaticView::new();
    let group: Vec<PeerId> = (1..=10u64).map(PeerId::from_u64).collect();
    let many: Vec<PeerId> = (1..=30u64).map(PeerId::from_u64).collect();
    let _ = one_read(&group, &view); // warm up any lazy statics

    let before = allocations();
    assert!(matches!(one_read(&group, &view), ReadOutcome::Found(_)));
    assert_eq!(allocations() - before, 0, "common read allocated");

    let before = allocations();
    assert!(matches!(one_read(&many, &view), ReadOutcome::Found(_)));
    assert_eq!(allocations() - before, 1, "only the candidate list spills");
}
