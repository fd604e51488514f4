//! Membership verification benchmarks (issue 14): one signed record, and a full roster of
//! 4096 signed members decoded and merged (every record verified) into a fresh table, the
//! same with the checks run on the machine's cores as the drivers run them, the same under
//! the default learning budget, and the steady state (the same roster again:
//! no signature check). Figures and commands: docs/benchmarks.md, "Membership".

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use peerblock_core::roster::{
    Attestation, Membership, MembershipPolicy, NodeKey, Roster, RosterMember, MAX_ROSTER_MEMBERS,
};
use peerblock_core::time::Instant;

fn key(n: u32) -> NodeKey {
    let mut seed = [3u8; 32];
    seed[..4].copy_from_slice(&n.to_be_bytes());
    NodeKey::from_seed(&seed)
}

fn signed_roster(n: usize) -> Roster {
    let members = (0..n as u32)
        .map(|i| {
            let k = key(i);
            let addr = format!("10.{}.{}.{}:7070", i >> 16, (i >> 8) & 255, i & 255);
            RosterMember {
                record: Attestation::Signed(k.sign(&addr, 1.0, 1).unwrap()),
                ..RosterMember::new(k.id(), addr, 1.0)
            }
        })
        .collect();
    Roster {
        epoch: 0,
        epoch_sig: None,
        members,
    }
}

fn table(policy: MembershipPolicy) -> Membership {
    let me = key(u32::MAX);
    Membership::new(
        RosterMember::new(me.id(), "10.255.255.255:7070", 1.0),
        0,
        MAX_ROSTER_MEMBERS - 1,
    )
    .unwrap()
    .with_policy(policy)
    .unwrap()
}

fn record(c: &mut Criterion) {
    let k = key(1);
    let r = k.sign("10.0.0.1:7070", 1.0, 7).unwrap();
    let id = k.id().to_owned();
    let mut g = c.benchmark_group("record");
    g.bench_function("verify", |b| {
        b.iter(|| black_box(r.verify(black_box(&id), "10.0.0.1:7070", 1.0)).unwrap())
    });
    g.bench_function("sign", |b| {
        b.iter(|| black_box(k.sign(black_box("10.0.0.1:7070"), 1.0, 7)).unwrap())
    });
    g.bench_function("digest", |b| {
        b.iter(|| black_box(r.digest(black_box(&id), "10.0.0.1:7070", 1.0)))
    });
    g.finish();
}

fn roster_4096(c: &mut Criterion) {
    // The responder is one of the members; the other 4095 are hearsay.
    let roster = signed_roster(MAX_ROSTER_MEMBERS);
    let json = roster.to_json();
    let responder = roster.members[0].id.clone();
    let all = MembershipPolicy {
        max_new_per_source: MAX_ROSTER_MEMBERS,
        max_checks_per_source: MAX_ROSTER_MEMBERS,
        ..MembershipPolicy::default()
    };
    let mut g = c.benchmark_group("roster_4096");
    g.sample_size(10);
    g.bench_function("decode", |b| {
        b.iter(|| black_box(Roster::from_json(black_box(&json)).unwrap()))
    });
    g.bench_function("decode_verify_all", |b| {
        b.iter_batched(
            || table(all.clone()),
            |mut t| {
                let r = Roster::from_json(&json).unwrap();
                let rep = t.merge_from(Instant::ZERO, "10.0.0.0:7070", &responder, &r);
                assert_eq!(rep.added + rep.dropped, MAX_ROSTER_MEMBERS);
                black_box(t)
            },
            BatchSize::LargeInput,
        )
    });
    // What both drivers do with a fetched roster: decode, plan the checks, verify the
    // parts on the machine's cores (scoped threads, as `peerblock_common::roster::
    // verify_on_threads`), merge the results.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    g.bench_function("decode_verify_all_threads", |b| {
        b.iter_batched(
            || table(all.clone()),
            |mut t| {
                let r = Roster::from_json(&json).unwrap();
                let checks = t.plan_checks(Instant::ZERO, "10.0.0.0:7070", &r);
                let mut parts = checks.split(threads).into_iter();
                let first = parts.next().unwrap_or_default();
                let verified: Vec<_> = std::thread::scope(|s| {
                    let others: Vec<_> = parts.map(|p| s.spawn(move || p.verify())).collect();
                    let mut out = vec![first.verify()];
                    out.extend(others.into_iter().map(|h| h.join().unwrap()));
                    out
                });
                let rep =
                    t.merge_verified(Instant::ZERO, "10.0.0.0:7070", &responder, &r, verified);
                assert_eq!(rep.added + rep.dropped, MAX_ROSTER_MEMBERS);
                black_box(t)
            },
            BatchSize::LargeInput,
        )
    });
    for k in [1usize, 2] {
        g.bench_function(format!("verify_only_{k}_parts_sequential"), |b| {
            let r = Roster::from_json(&json).unwrap();
            b.iter_batched(
                || {
                    table(all.clone())
                        .plan_checks(Instant::ZERO, "10.0.0.0:7070", &r)
                        .split(k)
                },
                |parts| {
                    for p in parts {
                        black_box(p.verify());
                    }
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.bench_function("decode_verify_default_budget", |b| {
        b.iter_batched(
            || table(MembershipPolicy::default()),
            |mut t| {
                let r = Roster::from_json(&json).unwrap();
                black_box(t.merge_from(Instant::ZERO, "10.0.0.0:7070", &responder, &r));
                black_box(t)
            },
            BatchSize::LargeInput,
        )
    });
    let mut steady = table(all.clone());
    steady.merge_from(Instant::ZERO, "10.0.0.0:7070", &responder, &roster);
    let checks = steady.stats().signature_checks;
    g.bench_function("decode_steady_state", |b| {
        b.iter(|| {
            let r = Roster::from_json(&json).unwrap();
            let rep = steady.merge_from(Instant::ZERO, "10.0.0.0:7070", &responder, &r);
            black_box(rep)
        })
    });
    assert_eq!(
        steady.stats().signature_checks,
        checks,
        "steady state ran a signature check"
    );
    g.finish();
}

criterion_group!(benches, record, roster_4096);
criterion_main!(benches);
