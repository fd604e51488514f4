//! Same scenario + seed: byte-identical trace and identical JSON (except `wall_seconds`,
//! the one key that measures the machine rather than the simulation).

mod common;

use common::{run, run_traced, shipped};

fn json_without_wall(r: &sim::world::RunResult) -> String {
    let mut s = r.summary.clone();
    s.wall_seconds = 0.0;
    s.to_json()
}

fn check_twice(name: &str, seed: u64) {
    let s = shipped(name);
    let (a, ta) = run_traced(&s, seed);
    let (b, tb) = run_traced(&s, seed);
    assert!(!ta.is_empty(), "{name}: empty trace");
    assert!(
        ta == tb,
        "{name}: traces differ between two runs with seed {seed} (replay: sim scenarios/{name} --seed {seed} --trace t)"
    );
    assert_eq!(
        json_without_wall(&a),
        json_without_wall(&b),
        "{name}: JSON differs between two runs with seed {seed}"
    );
    assert_eq!(
        a.summary.trace_digest, b.summary.trace_digest,
        "seed {seed}"
    );
}

#[test]
fn the_peerblock_replay_is_deterministic() {
    check_twice("testnet-ab-peerblock.toml", 1);
}

#[test]
fn a_silent_listener_replay_is_deterministic() {
    check_twice("testnet-ab-old-limits-nearest.toml", 7);
}

#[test]
fn fault_scenarios_are_deterministic() {
    for name in [
        "fault-dead-holder.toml",
        "fault-silent-holder.toml",
        "fault-flapping-holder.toml",
        "fault-partition-heals.toml",
    ] {
        check_twice(name, 3);
    }
}

#[test]
fn different_seeds_give_different_runs() {
    let s = shipped("fault-dead-holder.toml");
    let (a, _) = run_traced(&s, 1);
    let (b, _) = run_traced(&s, 2);
    assert_ne!(a.summary.trace_digest, b.summary.trace_digest);
}

#[test]
fn a_placement_seed_fixes_the_cluster_and_file_across_run_seeds() {
    let mut s = shipped("testnet-ab-old-limits-nearest.toml");
    s.readers.count = 4;
    s.readers.rounds = 1;
    let (a, b) = (run(&s, 1), run(&s, 2));
    assert_ne!(
        a.holders, b.holders,
        "by default each seed is another placement"
    );
    s.cluster.placement_seed = Some(7);
    let (a, b) = (run(&s, 1), run(&s, 2));
    assert_eq!(a.holders, b.holders, "one placement for every run seed");
    assert_eq!(
        sim::world::nat_nodes(&s, 1),
        sim::world::nat_nodes(&s, 2),
        "and the same NAT'd nodes"
    );
    assert_ne!(
        a.summary.trace_digest, b.summary.trace_digest,
        "the timing still varies with the run seed"
    );
}
