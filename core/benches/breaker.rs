//! Breaker benchmarks (figures and commands in docs/benchmarks.md, `## Breaker`).
//!
//! * `breaker/admit_record_4096`: one admit + record pair against a breaker tracking 4,096
//!   peers keyed by `SocketAddr` (goal: median under 100 ns).
//! * `breaker/baseline_btreemap_get_4096`: one bare `BTreeMap` lookup over the same keys,
//!   so the pair can be reported as a ratio that survives machine noise.
//! * `breaker/churn_1m_*`: one million distinct-address admissions through a full
//!   4,096-entry map, each one creating an entry and so sweeping or evicting another
//!   (goal: under 1 s per million). `clean`: every churned address answers (the sweep
//!   path); `dirty`: every churned address records a soft failure, so nothing is ever
//!   clean and every insertion evicts the least-recently-active entry.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use peerblock_core::breaker::{Breaker, BreakerConfig, Outcome};
use peerblock_core::time::{Duration, Instant};
use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

fn addr(i: u32) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(i), 7070))
}

fn full_breaker(dirty: bool) -> Breaker<SocketAddr> {
    let mut b = Breaker::new(BreakerConfig::default()).unwrap();
    for i in 0..4096 {
        let p = b.admit(Instant::ZERO, &addr(i)).unwrap();
        let outcome = if dirty {
            Outcome::SoftFailure
        } else {
            Outcome::Answered
        };
        b.record(Instant::ZERO, p, outcome);
    }
    b
}

fn admit_record(c: &mut Criterion) {
    let mut b = full_breaker(false);
    let peers: Vec<SocketAddr> = (0..4096).map(addr).collect();
    let mut i = 0usize;
    let mut now = Instant::ZERO;
    c.bench_function("breaker/admit_record_4096", |bench| {
        bench.iter(|| {
            i = (i + 1) & 4095;
            now += Duration::from_nanos(1);
            let peer = &peers[i];
            if let Ok(permit) = b.admit(now, black_box(peer)) {
                black_box(b.record(now, permit, Outcome::Answered));
            }
        })
    });
}

/// Baseline for ratios on a noisy machine: one bare `BTreeMap` lookup over the same keys
/// (the breaker's admit does one such lookup; record does none).
fn btreemap_baseline(c: &mut Criterion) {
    let map: std::collections::BTreeMap<SocketAddr, u32> =
        (0..4096).map(|i| (addr(i), i)).collect();
    let peers: Vec<SocketAddr> = (0..4096).map(addr).collect();
    let mut i = 0usize;
    c.bench_function("breaker/baseline_btreemap_get_4096", |bench| {
        bench.iter(|| {
            i = (i + 1) & 4095;
            black_box(map.get(black_box(&peers[i])));
        })
    });
}

fn churn(c: &mut Criterion, name: &str, dirty: bool) {
    let mut group = c.benchmark_group("breaker");
    group.sample_size(10);
    group.bench_function(name, |bench| {
        bench.iter_batched(
            || full_breaker(dirty),
            |mut b| {
                let now = Instant::from_secs(1);
                for i in 0..1_000_000u32 {
                    let peer = addr(0x1000_0000 + i);
                    if let Ok(permit) = b.admit(now, &peer) {
                        let outcome = if dirty {
                            Outcome::SoftFailure
                        } else {
                            Outcome::Answered
                        };
                        b.record(now, permit, outcome);
                    }
                }
                assert_eq!(b.len(), 4096);
                b
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn churn_clean(c: &mut Criterion) {
    churn(c, "churn_1m_clean", false);
}

fn churn_dirty(c: &mut Criterion) {
    churn(c, "churn_1m_dirty", true);
}

criterion_group!(
    benches,
    admit_record,
    btreemap_baseline,
    churn_clean,
    churn_dirty
);
criterion_main!(benches);
