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

/// Every holder of block 0 crashed before anyone reads (the repro of the absence finding
/// in docs/sim.md): 30 nodes, a 4 MiB file in 1 MiB blocks, 4 readers, 1 s dial timeout.
/// Two rounds with one long-lived client, so in round 1 the dead holders are still inside
/// the 30-minute failure cooldown from round 0.
fn all_holders_of_block_0_dead(client: &str) -> Scenario {
    let mut text = String::from(
        r#"
        [cluster]
        nodes = 30
        [file]
        size_mib = 4
        block_kib = 1024
        [readers]
        count = 4
        rounds = 2
        round_interval_secs = 60.0
        keep_state_between_rounds = true
        [client]
        dial_timeout_ms = 1000
    "#,
    );
    text.push_str(client);
    for rank in 0..7 {
        text.push_str(&format!(
            "\n[[faults]]\nat_secs = 0.0\nkind = \"crash\"\nholder_block = 0\nholder_rank = {rank}\n"
        ));
    }
    Scenario::parse(&text, "inline", "all-holders-dead").unwrap()
}

#[test]
fn peerblock_never_reports_absent_when_every_holder_is_only_unreachable() {
    // Rule (core absence rule + peerblock's discovery): a read is Absent only when the
    // nearest close group of known peers answered NotFound. Discovery returns the dead
    // holders too (they are known, just unreachable), so the NotFounds of the seven peers
    // past them prove nothing: the read ends Unavailable, in both rounds.
    let s = all_holders_of_block_0_dead("discovery_skips_suppressed = false\n");
    for seed in SEEDS {
        let r = run(&s, seed);
        let m = &r.summary.reads;
        assert_eq!(m.false_absent, 0, "seed {seed}");
        assert_eq!(m.false_not_found, 0, "seed {seed}");
        // Each of the 4 readers' read of block 0 in each of the 2 rounds.
        assert_eq!(m.unavailable, 8, "seed {seed}");
        assert_eq!(m.found + m.unavailable, m.started, "seed {seed}");
        assert_eq!(r.summary.downloads.completed, 0, "seed {seed}");
    }
}

#[test]
fn the_reference_client_reports_unreachable_holders_as_not_found() {
    // The reference client: discovery leaves suppressed endpoints out, and a read that
    // failed for any reason returns Ok(None), "record not found". Round 0 learns the
    // holders are dead (Unavailable in the machine, "not found" to the user); in round 1
    // they are suppressed, discovery hides them, the nearest peers it returns are all
    // non-holders, and their NotFounds make the machine itself report Absent.
    let s = all_holders_of_block_0_dead(
        "discovery_skips_suppressed = true\nreports_unavailable_as_not_found = true\n",
    );
    for seed in SEEDS {
        let r = run(&s, seed);
        let m = &r.summary.reads;
        assert_eq!(m.unavailable, 4, "seed {seed}: round 0");
        assert_eq!(
            m.absent, 4,
            "seed {seed}: round 1, holders hidden by discovery"
        );
        assert_eq!(m.false_absent, m.absent, "seed {seed}");
        assert_eq!(
            m.false_not_found, 8,
            "seed {seed}: every failure is \"not found\""
        );
        assert_eq!(m.found + m.false_not_found, m.started, "seed {seed}");
    }
}
