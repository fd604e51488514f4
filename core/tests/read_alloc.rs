//! Rule (performance): the common read (lookup, one GET, found) allocates nothing once the
//! driver's own buffers exist — the candidate list of a close group fits inline — and a
//! lookup far larger than a close group allocates only for the candidate list.
//!
//! A counting global allocator; this file holds a single test so no other test thread
//! allocates concurrently.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use peerblock_core::placement::{Key, PeerId};
use peerblock_core::read::{Action, GetOutcome, Read, ReadConfig, ReadOutcome, StaticView};
use peerblock_core::time::Instant;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: forwarding the caller's layout to the system allocator unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn one_read(peers: &[PeerId], view: &StaticView) -> ReadOutcome {
    let now = Instant::from_secs(1);
    let mut read = Read::new(Key::from_u64(0), ReadConfig::default(), now, 7).unwrap();
    let mut outcome = None;
    while let Some(action) = read.poll_action(now, view) {
        match action {
            Action::Lookup => read.handle_lookup(now, peers),
            Action::Get { id, .. } => {
                read.handle_get(now, id, GetOutcome::Found(Bytes::from_static(b"b")))
            }
            Action::Done(o) => outcome = Some(o),
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

    let before = ALLOCS.load(Ordering::SeqCst);
    assert!(matches!(one_read(&group, &view), ReadOutcome::Found(_)));
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst) - before,
        0,
        "common read allocated"
    );

    let before = ALLOCS.load(Ordering::SeqCst);
    assert!(matches!(one_read(&many, &view), ReadOutcome::Found(_)));
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst) - before,
        1,
        "only the candidate list spills"
    );
}
