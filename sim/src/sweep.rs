//! `--seeds A..B`: many seeds, random faults per seed, invariants checked on each.
//!
//! The faults a seed draws come from the scenario's `[sweep]` table and a sub-seed of the
//! run seed, and are printed before the seed runs, so a failure can be replayed exactly
//! with `--seeds N..=N`.

use peerblock_core::rng::child_seed;

use crate::cli::{self, Args, Outputs};
use crate::faults;
use crate::metrics::Metrics;
use crate::progress::Steps;
use crate::scenario::{Fault, Scenario};
use crate::world::{self, RunOptions};

/// The invariants every run must keep, whatever the faults. Returns what was broken.
pub fn violations(m: &Metrics) -> Vec<String> {
    let mut v = Vec::new();
    if m.wrong_bytes > 0 {
        v.push(format!("{} reads returned wrong bytes", m.wrong_bytes));
    }
    if m.reads_false_absent > 0 {
        v.push(format!(
            "{} reads reported a stored block absent",
            m.reads_false_absent
        ));
    }
    let folded = m.reads_false_not_found - m.reads_false_absent;
    if folded > 0 {
        v.push(format!(
            "{folded} unavailable reads reported to the user as \"not found\""
        ));
    }
    if m.reads_unfinished > 0 {
        v.push(format!("{} reads never terminated", m.reads_unfinished));
    }
    if m.downloads_unfinished > 0 {
        v.push(format!("{} downloads never ended", m.downloads_unfinished));
    }
    let ended = m.reads_found
        + m.reads_absent
        + m.reads_busy
        + m.reads_unavailable
        + m.reads_invalid
        + m.wrong_bytes;
    if ended + m.reads_unfinished != m.reads_started {
        v.push(format!(
            "{} reads started but {ended} ended",
            m.reads_started
        ));
    }
    v
}

/// The faults seed `seed` draws in a sweep of `s`.
pub fn faults_for(s: &Scenario, seed: u64) -> Vec<Fault> {
    faults::draw(s, child_seed(seed, "sweep-faults"))
}

/// One-line description of a drawn fault.
pub fn describe(f: &Fault) -> String {
    let mut d = format!(
        "{:?} node {} at {:.1}s",
        f.kind,
        f.node.unwrap_or(0),
        f.at_secs
    )
    .to_lowercase();
    if let Some(x) = f.factor {
        d.push_str(&format!(" factor {x:.2}"));
    }
    d
}

/// Runs the sweep; returns the exit status (1 if any seed broke an invariant).
pub fn main(s: &Scenario, args: &Args, a: u64, b: u64, outputs: Outputs) -> i32 {
    let single = b - a == 1;
    let mut outputs = Some(outputs);
    let mut failed = Vec::new();
    let mut warned = 0u64;
    println!("sweep {} seeds {a}..{b}", s.name);
    let mut steps = Steps::new("seed", b - a, args.quiet || single);
    for seed in a..b {
        let extra = faults_for(s, seed);
        let listed: Vec<String> = extra.iter().map(describe).collect();
        println!("seed {seed}: faults [{}]", listed.join(", "));
        steps.begin(&format!("seed {seed}"));
        let result = if single {
            let outputs = outputs.take().unwrap_or_default();
            match cli::run_once(s, &[], args, seed, extra, outputs) {
                Ok(r) => r,
                Err(code) => return code,
            }
        } else {
            world::run(
                s,
                RunOptions {
                    seed,
                    extra_faults: extra,
                    ..RunOptions::default()
                },
            )
        };
        // A redrawn progress line is cleared before the seed's result is printed.
        steps.finish();
        let m = &result.metrics;
        let bad = violations(m);
        let sum = &result.summary;
        let unreachable = world::unreachable_blocks(s, seed, &result.holders);
        let incomplete = sum.downloads.completed < sum.downloads.started;
        let status = if !bad.is_empty() {
            "FAIL"
        } else if !unreachable.is_empty() && incomplete {
            "warn"
        } else {
            "ok  "
        };
        println!(
            "seed {seed}: {status} downloads {}/{} reads {} found {} absent {} busy {} unavailable {} digest {}",
            sum.downloads.completed,
            sum.downloads.started,
            sum.reads.started,
            sum.reads.found,
            sum.reads.absent,
            sum.reads.busy,
            sum.reads.unavailable,
            sum.trace_digest
        );
        for v in &bad {
            println!("    broken: {v}");
        }
        if !unreachable.is_empty() && incomplete {
            warned += 1;
            println!(
                "    warning: {} block(s) ({}) have every holder behind NAT: no reader can \
                 fetch them, so their downloads cannot complete (the model, not a bug)",
                unreachable.len(),
                unreachable
                    .iter()
                    .map(|b| format!("block {b}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if !bad.is_empty() {
            failed.push(seed);
        }
        steps.end();
    }
    steps.finish();
    println!("{} seeds, {} failed", b - a, failed.len());
    if warned > 0 {
        println!(
            "warning: {warned} seed(s) with downloads that cannot complete for a modelled \
             reason (every holder of a block behind NAT)"
        );
    }
    for seed in &failed {
        println!(
            "replay: cargo run --release -p sim -- {} --seeds {seed}..={seed} --trace seed-{seed}.trace",
            args.scenario.display()
        );
    }
    i32::from(!failed.is_empty())
}
