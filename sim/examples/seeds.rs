//! Per-seed figures of one or more scenarios, for fidelity studies (docs/sim.md,
//! "Fidelity against the reference"): for each scenario and each seed of `SEEDS` (default
//! `1..=10`), the downloads completed and the busiest holder's share of first GETs (mean
//! over blocks, per round, and per round over each read's first two GETs), one line each,
//! then the range over the seeds.
//!
//! Environment overrides, applied to every scenario: `PLACEMENT=N` sets
//! `cluster.placement_seed` (one cluster and file for every seed), `ROUTING=kademlia` with
//! `BUCKET=K` sets `client.routing` and `client.bucket_size`, `RTTS=R` sets
//! `client.lookup_rtts`.
//!
//! ```sh
//! cargo run --release -p sim --example seeds -- scenarios/testnet-ab-old-limits-nearest.toml
//! ```

use sim::scenario::{RoutingModel, Scenario};
use sim::world::{self, RunOptions};

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn main() {
    let (a, b): (u64, u64) = std::env::var("SEEDS")
        .ok()
        .and_then(|v| sim::cli::parse_seeds(&v).ok())
        .unwrap_or((1, 11));
    for path in std::env::args().skip(1) {
        let mut s = match Scenario::load(std::path::Path::new(&path)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("seeds: {e}");
                std::process::exit(2);
            }
        };
        if let Some(p) = env("PLACEMENT") {
            s.cluster.placement_seed = Some(p);
        }
        if std::env::var("ROUTING").as_deref() == Ok("kademlia") {
            s.client.routing = RoutingModel::Kademlia;
        }
        if let Some(k) = env("BUCKET") {
            s.client.bucket_size = k;
        }
        if let Some(r) = env("RTTS") {
            s.client.lookup_rtts = r;
        }
        let (mut done, mut busiest, mut round, mut two) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut completed, mut started) = (0, 0);
        for seed in a..b {
            let r = world::run(
                &s,
                RunOptions {
                    seed,
                    ..RunOptions::default()
                },
            );
            let sum = &r.summary;
            let d = 100.0 * sum.downloads.completed as f64 / sum.downloads.started.max(1) as f64;
            println!(
                "{} seed {seed}: done {}/{} ({d:.1}%) busiest {:.1}% /round {:.1}% 2 GETs {:.1}%",
                s.name,
                sum.downloads.completed,
                sum.downloads.started,
                100.0 * sum.first_read_share.mean_top,
                100.0 * sum.first_read_share.round_mean_top,
                100.0 * sum.first_read_share.two_gets_round_mean_top
            );
            completed += sum.downloads.completed;
            started += sum.downloads.started;
            done.push(d);
            busiest.push(100.0 * sum.first_read_share.mean_top);
            round.push(100.0 * sum.first_read_share.round_mean_top);
            two.push(100.0 * sum.first_read_share.two_gets_round_mean_top);
        }
        let range = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{lo:.1}–{hi:.1}%")
        };
        println!(
            "{} seeds {a}..{b}: done {completed}/{started} ({:.1}%; per seed {}), busiest {}, /round {}, 2 GETs {}",
            s.name,
            100.0 * completed as f64 / started.max(1) as f64,
            range(&done),
            range(&busiest),
            range(&round),
            range(&two)
        );
    }
}
