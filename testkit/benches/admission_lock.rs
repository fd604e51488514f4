//! What one request's admission round costs a threaded driver that keeps the node's
//! `Admission` behind a `std::sync::Mutex` (the tokio driver's model: the lock is taken
//! when a session or request begins or ends, never on a byte read).
//!
//! One round is what a driver does around one request: lock, `begin_request`, unlock; lock,
//! `finish_request`, unlock. Measured three ways:
//! - `bare`: the same two calls on an `Admission` owned by the thread (no lock), the
//!   reference;
//! - `mutex_uncontended`: through the mutex, one thread;
//! - `mutex_2_threads`: two threads doing rounds on the same mutex at once, each on its own
//!   session; the figure is the wall time per round *of each thread* (two rounds finish in
//!   that time, one per thread).
//!
//! The node holds 200 sessions over 100 sources, as in core's `exchange` bench.
//!
//! Run: `cargo bench -p peerblock-testkit --bench admission_lock -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::{Barrier, Mutex};
use std::time::Instant as StdInstant;

use criterion::{criterion_group, criterion_main, Criterion};
use peerblock_core::server::{Admission, AdmissionConfig, SessionTicket};
use peerblock_core::time::Instant;

/// Threads contending in `mutex_2_threads`: the machine's core count, and the smallest
/// contention there is.
const THREADS: usize = 2;

/// A busy node's admission state: 200 sessions over 100 sources, plus one free session per
/// bench thread (sources 1000.., so no per-source limit is near).
fn busy_node() -> (
    Admission<u32>,
    Vec<SessionTicket<u32>>,
    Vec<SessionTicket<u32>>,
) {
    let mut adm = Admission::<u32>::new(AdmissionConfig::default()).expect("default config");
    let held = (0..200u32)
        .map(|i| adm.open_session(Instant::ZERO, i % 100).expect("room"))
        .collect();
    let mine = (0..THREADS as u32)
        .map(|i| adm.open_session(Instant::ZERO, 1000 + i).expect("room"))
        .collect();
    (adm, held, mine)
}

/// One round through the mutex: lock, begin, unlock; lock, finish, unlock.
fn round(adm: &Mutex<Admission<u32>>, session: &mut SessionTicket<u32>) {
    let ticket = adm
        .lock()
        .expect("not poisoned")
        .begin_request(Instant::ZERO, session)
        .expect("a request slot is free");
    black_box(&ticket);
    adm.lock()
        .expect("not poisoned")
        .finish_request(Instant::ZERO, Some(session), ticket);
}

fn admission_lock(c: &mut Criterion) {
    let mut g = c.benchmark_group("admission_lock");

    let (mut adm, _held, mut mine) = busy_node();
    g.bench_function("bare", |b| {
        let s = &mut mine[0];
        b.iter(|| {
            let ticket = adm
                .begin_request(Instant::ZERO, s)
                .expect("a request slot is free");
            black_box(&ticket);
            adm.finish_request(Instant::ZERO, Some(s), ticket);
        })
    });

    let (adm, _held, mut mine) = busy_node();
    let adm = Mutex::new(adm);
    g.bench_function("mutex_uncontended", |b| {
        let s = &mut mine[0];
        b.iter(|| round(&adm, s))
    });

    g.bench_function("mutex_2_threads", |b| {
        b.iter_custom(|iters| {
            let start = Barrier::new(THREADS + 1);
            let mut began = None;
            std::thread::scope(|scope| {
                for s in mine.iter_mut() {
                    let (adm, start) = (&adm, &start);
                    scope.spawn(move || {
                        start.wait();
                        for _ in 0..iters {
                            round(adm, s);
                        }
                    });
                }
                start.wait();
                began = Some(StdInstant::now());
            });
            began.expect("the barrier was passed").elapsed()
        })
    });
    g.finish();

    let adm = adm.into_inner().expect("not poisoned");
    assert_eq!(adm.requests(), 0, "every round finished its request");
}

criterion_group!(benches, admission_lock);
criterion_main!(benches);
