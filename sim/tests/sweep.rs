//! `--seeds` sweeps: drawn faults are reproducible, invariants hold for peerblock's
//! client, and the checker does catch the reference client's false "not found".

mod common;

use common::shipped;
use sim::scenario::Scenario;
use sim::sweep::{faults_for, violations};
use sim::world::{self, RunOptions};

fn small_peerblock() -> Scenario {
    let mut s = shipped("testnet-ab-peerblock.toml");
    s.readers.count = 16;
    s.readers.rounds = 2;
    s.readers.round_interval_secs = 60.0;
    s.compare.clear();
    s
}

fn sweep_seed(s: &Scenario, seed: u64) -> Vec<String> {
    let r = world::run(
        s,
        RunOptions {
            seed,
            extra_faults: faults_for(s, seed),
            ..RunOptions::default()
        },
    );
    violations(&r.metrics)
}

#[test]
fn drawn_faults_depend_only_on_the_seed() {
    let s = small_peerblock();
    assert_eq!(faults_for(&s, 5), faults_for(&s, 5));
    assert_ne!(faults_for(&s, 5), faults_for(&s, 6));
    let sw = &s.sweep;
    let drawn = (sw.crashes + sw.silent + sw.partitions + sw.slow) as usize;
    assert_eq!(
        faults_for(&s, 5).len(),
        2 * drawn,
        "each fault with its end"
    );
}

#[test]
fn peerblock_keeps_every_invariant_across_seeds() {
    let s = small_peerblock();
    for seed in 0..12 {
        let v = sweep_seed(&s, seed);
        assert!(
            v.is_empty(),
            "seed {seed} broke invariants: {v:?} (replay: --seeds {seed}..={seed})"
        );
    }
}

#[test]
fn the_checker_catches_the_reference_clients_false_not_found() {
    // Seed 1 of the old-limits arm loses half its downloads (docs/sim.md); the checker
    // must flag the reads the reference client told its user "not found" (its absence
    // rule reports them as absent blocks).
    let s = shipped("testnet-ab-old-limits-uniform.toml");
    let v = sweep_seed(&s, 5);
    assert!(
        v.iter()
            .any(|m| m.contains("stored block absent") || m.contains("not found")),
        "{v:?}"
    );
}
