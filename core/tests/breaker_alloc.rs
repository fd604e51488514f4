//! Steady-state admit + record on a breaker tracking 4,096 peers performs no heap
//! allocation (the shared counting global allocator, which counts only the measuring thread).

mod alloc_support;

use alloc_support::allocations;
use peerblock_core::breaker::{Breaker, BreakerConfig, Outcome};
use peerblock_core::time::{Duration, Instant};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

fn addr(i: u32) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(0x0a00_0000 | i), 7070))
}

#[test]
fn steady_state_admit_and_record_do_not_allocate() {
    let mut b: Breaker<SocketAddr> = Breaker::new(BreakerConfig::default()).unwrap();
    let peers: Vec<SocketAddr> = (0..4096).map(addr).collect();
    let mut now = Instant::ZERO;
    // Warm up: every peer tracked, a few of them sick.
    for (i, p) in peers.iter().enumerate() {
        let permit = b.admit(now, p).unwrap();
        let outcome = if i % 64 == 0 {
            Outcome::HardFailure
        } else {
            Outcome::Answered
        };
        b.record(now, permit, outcome);
    }
    assert_eq!(b.len(), 4096);

    // The counter itself works: one allocation is seen.
    let before = allocations();
    drop(std::hint::black_box(Vec::<u8>::with_capacity(1)));
    assert_eq!(allocations() - before, 1, "counting allocator is live");
    let before = allocations();
    for round in 0..50u32 {
        now += Duration::from_millis(250);
        for (i, p) in peers.iter().enumerate() {
            let outcome = match (i as u32 + round) % 97 {
                0 => Outcome::HardFailure,
                1..=3 => Outcome::SoftFailure,
                _ => Outcome::Answered,
            };
            if let Ok(permit) = b.admit(now, p) {
                b.record(now, permit, outcome);
            }
            let _ = b.healthy(now, p);
        }
    }
    let allocated = allocations() - before;
    assert_eq!(b.len(), 4096);
    assert!(b.open_count() > 0, "the workload exercises open circuits");
    assert_eq!(allocated, 0, "steady state allocated");
}
