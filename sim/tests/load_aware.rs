//! Load-aware first reads in peerblock's replay arm: the readers learn each node's load
//! from the load header of its responses and the two-choices rule uses it. Compared with
//! the same scenario with only the spreading policy changed to uniform, over seeds 1–10
//! (docs/sim.md, "Load-aware first reads").

mod common;

use common::{run, shipped};
use sim::scenario::SpreadPolicy;

const SEEDS: std::ops::RangeInclusive<u64> = 1..=10;

/// Rule: advertised load spreads the bytes. The busiest node serves less under the
/// load-aware choice than under uniform, averaged over seeds 1–10, with every download
/// complete and no false absent in both. (The per-block busiest share of first reads is
/// not improved — node load is confounded by how many hot blocks a holder holds — and the
/// test only checks it stays at uniform's level; see docs/sim.md.)
#[test]
fn load_aware_first_reads_beat_uniform_on_the_busiest_node() {
    let aware = shipped("testnet-ab-peerblock.toml");
    assert_eq!(aware.client.spread, SpreadPolicy::LoadAware);
    let mut uniform = aware.clone();
    uniform.client.spread = SpreadPolicy::Uniform;
    let (mut aware_max, mut uniform_max) = (0u64, 0u64);
    let (mut aware_share, mut uniform_share) = (0.0, 0.0);
    for seed in SEEDS {
        let a = run(&aware, seed).summary;
        let u = run(&uniform, seed).summary;
        for (name, s) in [("load-aware", &a), ("uniform", &u)] {
            assert_eq!(
                s.downloads.completed, s.downloads.started,
                "{name} seed {seed}"
            );
            assert_eq!(s.reads.false_absent, 0, "{name} seed {seed}");
        }
        aware_max += a.node_bytes.max;
        uniform_max += u.node_bytes.max;
        aware_share += a.first_read_share.mean_top;
        uniform_share += u.first_read_share.mean_top;
    }
    let n = SEEDS.count() as f64;
    let (aware_max, uniform_max) = (aware_max as f64 / n, uniform_max as f64 / n);
    let (aware_share, uniform_share) = (aware_share / n, uniform_share / n);
    assert!(
        aware_max < 0.95 * uniform_max,
        "busiest node's bytes: load-aware {aware_max} vs uniform {uniform_max}"
    );
    assert!(
        aware_share < uniform_share + 0.01,
        "per-block busiest share: load-aware {aware_share} vs uniform {uniform_share}"
    );
}
