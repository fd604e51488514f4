//! Fault scenarios: each shipped fault file with its expected outcome.

mod common;

use common::{run, shipped};
use sim::faults::Act;
use sim::scenario::Scenario;

const SEEDS: [u64; 3] = [1, 2, 3];

#[test]
fn a_dead_holder_is_routed_around_after_one_failed_dial() {
    for seed in SEEDS {
        let r = run(&shipped("fault-dead-holder.toml"), seed);
        let s = &r.summary;
        assert_eq!(s.downloads.completed, s.downloads.started, "seed {seed}");
        assert_eq!(s.reads.false_absent, 0, "seed {seed}");
        assert!(
            s.gets.dial_failed > 0,
            "seed {seed}: nobody tried the dead holders?"
        );
        assert!(
            s.breaker_opens > 0,
            "seed {seed}: a failed dial opens the circuit at once"
        );
        // One 1 s dial timeout at most per read, never the 10 s of a silent listener.
        assert!(
            s.read_ms.max < 5_000.0,
            "seed {seed}: slowest read {} ms",
            s.read_ms.max
        );
        // The dead nodes served nothing.
        for step in &r.timeline {
            assert_eq!(r.metrics.node_bytes[step.node as usize], 0, "seed {seed}");
        }
    }
}

#[test]
fn a_silent_holder_costs_a_hedge_not_a_timeout() {
    for seed in SEEDS {
        let r = run(&shipped("fault-silent-holder.toml"), seed);
        let s = &r.summary;
        assert_eq!(s.downloads.completed, s.downloads.started, "seed {seed}");
        assert_eq!(s.reads.false_absent, 0, "seed {seed}");
        // Reads that asked the silent node first got their block through the 1 s hedge,
        // well before the 10 s response timeout.
        assert!(
            s.gets.hedged > 0,
            "seed {seed}: nobody asked the silent holder first?"
        );
        assert!(
            s.read_ms.max < 5_000.0,
            "seed {seed}: slowest read {} ms",
            s.read_ms.max
        );
        let silent = r.timeline[0].node as usize;
        assert_eq!(r.metrics.node_bytes[silent], 0, "seed {seed}");
    }
}

#[test]
fn a_flapping_holder_never_turns_into_absence() {
    for seed in SEEDS {
        let r = run(&shipped("fault-flapping-holder.toml"), seed);
        let s = &r.summary;
        assert!(r.timeline.iter().filter(|st| st.act == Act::Crash).count() > 10);
        assert_eq!(s.downloads.completed, s.downloads.started, "seed {seed}");
        assert_eq!(s.reads.false_absent, 0, "seed {seed}");
        assert_eq!(s.reads.unfinished, 0, "seed {seed}");
    }
}

#[test]
fn a_partition_heals_and_the_cut_off_holders_serve_again() {
    for seed in SEEDS {
        let r = run(&shipped("fault-partition-heals.toml"), seed);
        let s = &r.summary;
        assert_eq!(s.downloads.completed, s.downloads.started, "seed {seed}");
        assert_eq!(s.reads.false_absent, 0, "seed {seed}");
        assert!(
            s.gets.dial_failed > 0,
            "seed {seed}: round 0 must hit the partition"
        );
        let cut: Vec<usize> = r
            .timeline
            .iter()
            .filter(|st| st.act == Act::Partition)
            .map(|st| st.node as usize)
            .collect();
        assert_eq!(cut.len(), 3);
        let series = &r.metrics.node_bytes_series;
        let before_heal = series.iter().rev().find(|(t, _)| *t <= 30.0).unwrap();
        let end = series.last().unwrap();
        for &n in &cut {
            assert_eq!(
                before_heal.1[n], 0,
                "seed {seed}: node {n} served while cut off"
            );
        }
        assert!(
            cut.iter().any(|&n| end.1[n] > 0),
            "seed {seed}: after the heal the holders must serve again"
        );
    }
}

#[test]
fn a_corrupt_holder_never_yields_wrong_bytes() {
    // The driver verifies every body against the key: a node serving wrong bytes is a
    // protocol violation (breaker hard failure), never a found block.
    let text = r#"
        [cluster]
        nodes = 20
        [file]
        size_mib = 4
        block_kib = 1024
        [readers]
        count = 8
        [[faults]]
        at_secs = 0.0
        kind = "corrupt"
        holder_block = 0
        holder_rank = 0
        [[faults]]
        at_secs = 0.0
        kind = "corrupt"
        holder_block = 1
        holder_rank = 0
    "#;
    let s = Scenario::parse(text, "inline", "corrupt").unwrap();
    for seed in SEEDS {
        let r = run(&s, seed);
        assert!(r.summary.gets.corrupt > 0, "seed {seed}");
        assert_eq!(r.summary.reads.wrong_bytes, 0, "seed {seed}");
        assert_eq!(r.summary.downloads.completed, 8, "seed {seed}");
    }
}
