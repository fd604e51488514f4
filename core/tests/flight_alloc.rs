//! Once warmed up, the relay single-flight table allocates nothing per request: not for a
//! join, not for a lead, not for a result's fan-out, a cancel or a timeout (the shared
//! counting global allocator, which counts only the measuring thread).

mod alloc_support;

use alloc_support::allocations;
use bytes::Bytes;
use peerblock_core::server::{
    FlightConfig, FlightEvent, RelayFlights, SourceRequest, SourceResult, Want,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::wire::{BlockPath, ChunkKey, Hop};

fn request(n: u8) -> SourceRequest {
    SourceRequest {
        path: BlockPath {
            key: ChunkKey::from_bytes(&[n; 32]).unwrap(),
            index: u64::from(n),
        },
        // A shared (static) origin: cloning it is a reference, never an allocation.
        origin: Some(Bytes::from_static(b"http://127.0.0.1:0")),
        hop: Hop(1),
    }
}

/// One round: 16 blocks, 40 waiters each (past the 8 inline: spilled), one waiter of each
/// cancelled, one timed out, then every result (blocks shared, failures) fanned out.
fn round(f: &mut RelayFlights<u32>, requests: &[SourceRequest], now: &mut Instant) -> usize {
    let mut ids = [None; 16];
    for (b, r) in requests.iter().enumerate() {
        for w in 0..40u32 {
            let deadline = if w == 39 {
                *now + Duration::from_millis(1)
            } else {
                *now + Duration::from_secs(10)
            };
            match f
                .handle_want(*now, r, b as u32 * 100 + w, deadline)
                .unwrap()
            {
                Want::Lead(id) => ids[b] = Some(id),
                Want::Joined(_) => {}
                Want::Expired => unreachable!(),
            }
        }
        f.handle_cancel(*now, b as u32 * 100 + 1);
    }
    *now += Duration::from_millis(1);
    f.handle_timeout(*now);
    let block = Bytes::from_static(&[7u8; 1024]);
    for (b, id) in ids.iter().enumerate() {
        let result = if b % 2 == 0 {
            SourceResult::Found(block.clone())
        } else {
            SourceResult::UpstreamRefused { status: 403 }
        };
        f.handle_result(*now, id.unwrap(), result);
    }
    let mut answers = 0;
    while let Some(event) = f.poll_event() {
        answers += usize::from(matches!(event, FlightEvent::Answer { .. }));
    }
    answers
}

#[test]
fn a_warmed_up_table_allocates_nothing_per_want_result_cancel_or_timeout() {
    let mut f: RelayFlights<u32> = RelayFlights::new(
        FlightConfig {
            max_waiters: 1024,
            ..FlightConfig::default()
        },
        Instant::ZERO,
    )
    .unwrap();
    let requests: Vec<SourceRequest> = (0..16).map(request).collect();
    let mut now = Instant::ZERO;
    for _ in 0..3 {
        assert_eq!(round(&mut f, &requests, &mut now), 16 * 39);
    }

    let before = allocations();
    drop(std::hint::black_box(Vec::<u8>::with_capacity(1)));
    assert_eq!(allocations() - before, 1, "counting allocator is live");

    let before = allocations();
    for _ in 0..20 {
        assert_eq!(round(&mut f, &requests, &mut now), 16 * 39);
    }
    assert_eq!(allocations() - before, 0, "allocations in steady state");
    assert_eq!((f.flights(), f.waiters()), (0, 0));
}
