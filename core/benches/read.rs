//! CPU cost of one read through the read machine, driven in-process.
//!
//! - `read/common`: lookup, one GET, found (the hot path every read takes).
//! - `read/worst_refusals`: a possible holder refuses throughout: four rounds (three
//!   refusal waits, 45 s of virtual time) then Busy.
//!
//! Run: `cargo bench -p peerblock-core --bench read -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use peerblock_core::placement::{Key, PeerId};
use peerblock_core::read::{GetOutcome, PeerView, Read, ReadConfig, ReadEvent, ReadOutcome};
use peerblock_core::time::{Duration, Instant};

/// Everyone eligible, nobody refusing.
struct Open;

impl PeerView for Open {
    fn eligible(&self, _: Instant, _: &PeerId) -> bool {
        true
    }
    fn refused_for(&self, _: Instant, _: &PeerId) -> Option<Duration> {
        None
    }
}

/// One holder that is always 15 s into a fresh refusal.
struct AlwaysRefusing(PeerId);

impl PeerView for AlwaysRefusing {
    fn eligible(&self, _: Instant, p: &PeerId) -> bool {
        *p != self.0
    }
    fn refused_for(&self, _: Instant, p: &PeerId) -> Option<Duration> {
        (*p == self.0).then_some(Duration::from_secs(15))
    }
    fn for_each_refused(&self, _: Instant, f: &mut dyn FnMut(PeerId, Duration)) {
        f(self.0, Duration::from_secs(15));
    }
}

fn peers() -> Vec<PeerId> {
    (1..=8u64).map(PeerId::from_u64).collect()
}

fn common(key: Key, peers: &[PeerId], seed: u64) -> ReadOutcome {
    let view = Open;
    let now = Instant::from_secs(1);
    let mut read = Read::new(key, ReadConfig::default(), now, seed).unwrap();
    let mut outcome = None;
    while let Some(action) = read.poll_event(now, &view) {
        match action {
            ReadEvent::Lookup => read.handle_lookup(now, &peers[..7]),
            ReadEvent::Get { id, .. } => {
                read.handle_get(now, id, GetOutcome::Found(Bytes::from_static(b"block")))
            }
            ReadEvent::Done(o) => outcome = Some(o),
            _ => {}
        }
    }
    outcome.unwrap()
}

fn worst(key: Key, peers: &[PeerId], seed: u64) -> ReadOutcome {
    let view = AlwaysRefusing(peers[0]);
    let mut now = Instant::from_secs(1);
    let mut read = Read::new(key, ReadConfig::default(), now, seed).unwrap();
    loop {
        while let Some(action) = read.poll_event(now, &view) {
            match action {
                ReadEvent::Lookup => read.handle_lookup(now, peers),
                ReadEvent::Get { id, .. } => read.handle_get(now, id, GetOutcome::NotFound),
                ReadEvent::Done(o) => return o,
                _ => {}
            }
        }
        now = read.poll_timeout().unwrap().at;
        read.handle_timeout(now);
    }
}

fn bench(c: &mut Criterion) {
    let key = Key::from_u64(0);
    let peers = peers();
    assert!(matches!(common(key, &peers, 1), ReadOutcome::Found(_)));
    assert_eq!(worst(key, &peers, 1), ReadOutcome::Busy);
    let mut seed = 0u64;
    c.bench_function("read/common", |b| {
        b.iter(|| {
            seed = seed.wrapping_add(1);
            black_box(common(black_box(key), &peers, seed))
        })
    });
    c.bench_function("read/worst_refusals", |b| {
        b.iter(|| {
            seed = seed.wrapping_add(1);
            black_box(worst(black_box(key), &peers, seed))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
