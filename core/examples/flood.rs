//! What a hearsay flood of invented members costs a node (issue 14): 25 roster bodies of
//! 4,000 invented members each (100,000 in all) are decoded and merged into a table that
//! already holds real members, as they would arrive from one hostile peer and from 25
//! hostile sources. Prints the time, the peak resident memory of the process before and
//! after, the table's size and whether every real member survived.
//!
//! `cargo run --release -p peerblock-core --example flood` (figures: docs/benchmarks.md).

use peerblock_core::roster::{
    Attestation, Membership, MembershipPolicy, NodeKey, Roster, RosterMember, MAX_ROSTER_MEMBERS,
};
use peerblock_core::time::Instant;

/// Peak resident set size of this process (Linux `VmHWM`), in KiB.
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn key(n: u32) -> NodeKey {
    let mut seed = [9u8; 32];
    seed[..4].copy_from_slice(&n.to_be_bytes());
    NodeKey::from_seed(&seed)
}

fn run(label: &str, sources: usize, bodies: &[Vec<u8>], real: &[NodeKey]) {
    let me = key(u32::MAX);
    let mut t = Membership::new(
        RosterMember::new(me.id(), "10.0.0.1:7070", 1.0),
        0,
        MAX_ROSTER_MEMBERS - 1,
    )
    .unwrap()
    .with_policy(MembershipPolicy::default())
    .unwrap();
    for (i, k) in real.iter().enumerate() {
        let addr = format!("10.0.1.{i}:7070");
        let rec = Attestation::Signed(k.sign(&addr, 1.0, 1).unwrap());
        t.learn_caller(Instant::ZERO, &addr, k.id(), &addr, &rec, Some(1.0))
            .unwrap();
    }
    let before = peak_kib();
    let started = std::time::Instant::now();
    for (i, body) in bodies.iter().enumerate() {
        let r = Roster::from_json(body).expect("a roster");
        let source = format!("10.6.6.{}:7070", i % sources);
        t.merge_from(Instant::ZERO, &source, "attacker", &r);
    }
    let took = started.elapsed();
    let survived = real
        .iter()
        .enumerate()
        .all(|(i, k)| t.addr(k.id()) == Some(format!("10.0.1.{i}:7070").as_str()));
    println!(
        "{label}: 100000 invented members in {:.1} ms; peak RSS {} -> {} KiB; table {} peers; \
         rate-limited {}; real members survived: {survived}",
        took.as_secs_f64() * 1e3,
        before,
        peak_kib(),
        t.len(),
        t.stats().rate_limited,
    );
    assert!(survived);
}

fn main() {
    let real: Vec<NodeKey> = (0..64).map(key).collect();
    let bodies: Vec<Vec<u8>> = (0..25)
        .map(|b| {
            Roster {
                epoch: 0,
                epoch_sig: None,
                members: (0..4000)
                    .map(|i| RosterMember::new(format!("fake-{b}-{i}"), "10.6.6.6:1", 1.0))
                    .collect(),
            }
            .to_json()
        })
        .collect();
    run("one source", 1, &bodies, &real);
    run("25 sources", 25, &bodies, &real);
}
