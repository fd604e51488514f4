//! How evenly first reads of one hot record land on its close group, per spreading choice.
//!
//! Model (deterministic, fixed seeds): one client starts 7,000 reads of the same record,
//! one every 2 ms, against a 7-peer close group that all hold it. A GET to a holder takes
//! 20 ms plus 10 ms for every GET of this client already in flight there (a loaded holder
//! answers more slowly), so several reads overlap and load-aware choice has something to
//! see. The view reports this client's in-flight GETs per peer.
//!
//! `cargo test -p peerblock-core --release --test read_spread_share -- --ignored --nocapture`
//! prints the figures recorded in docs/benchmarks.md.

use std::collections::BTreeMap;

use bytes::Bytes;
use peerblock_core::placement::{Key, PeerId};
use peerblock_core::read::{Action, GetId, GetOutcome, Read, ReadConfig, Spread, StaticView};
use peerblock_core::rng::indexed_seed;
use peerblock_core::time::{Duration, Instant};

const TRIALS: u64 = 7_000;

#[derive(Debug)]
struct Share {
    /// First reads served by the busiest holder, as a fraction of all reads.
    busiest_share: f64,
    /// Highest number of this client's GETs in flight at one holder at any arrival.
    peak_in_flight: u32,
    /// Mean GET latency in the model, ms.
    mean_latency_ms: f64,
}

fn measure(spread: Spread) -> Share {
    let key = Key::from_u64(0);
    let group: Vec<PeerId> = (1..=7u64).map(PeerId::from_u64).collect();
    let cfg = ReadConfig {
        spread,
        ..ReadConfig::default()
    };
    let mut view = StaticView::new();
    let mut reads: Vec<Read> = Vec::new();
    let mut pending: BTreeMap<(Instant, u64), (usize, GetId, PeerId)> = BTreeMap::new();
    let mut firsts: BTreeMap<PeerId, u32> = BTreeMap::new();
    let mut peak = 0u32;
    let mut latency_total = 0u64;
    for i in 0..TRIALS {
        let now = Instant::from_millis(2 * i);
        // Complete every GET due by now.
        while let Some(entry) = pending.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (at, _) = *entry.key();
            let (r, id, peer) = entry.remove();
            *view.load.get_mut(&peer).unwrap() -= 1;
            reads[r].handle_get(at, id, GetOutcome::Found(Bytes::from_static(b"b")));
            while let Some(a) = reads[r].poll_action(at, &view) {
                assert!(matches!(a, Action::Done(_)));
            }
        }
        let r = reads.len();
        reads.push(Read::new(key, cfg.clone(), now, indexed_seed(42, i)).unwrap());
        while let Some(a) = reads[r].poll_action(now, &view) {
            match a {
                Action::Lookup => reads[r].handle_lookup(now, &group),
                Action::Get { id, peer } => {
                    let load = view.load.entry(peer).or_default();
                    let latency = 20 + 10 * u64::from(*load);
                    *load += 1;
                    peak = peak.max(*load);
                    latency_total += latency;
                    *firsts.entry(peer).or_default() += 1;
                    pending.insert((now + Duration::from_millis(latency), i), (r, id, peer));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let busiest = firsts.values().copied().max().unwrap_or(0);
    Share {
        busiest_share: f64::from(busiest) / TRIALS as f64,
        peak_in_flight: peak,
        mean_latency_ms: latency_total as f64 / TRIALS as f64,
    }
}

/// The load-aware choice beats uniform on the busiest holder's share and on the peak load
/// one holder sees, in the fixed-seed model above.
#[test]
fn least_loaded_of_two_beats_uniform_on_the_busiest_holder() {
    let uniform = measure(Spread::Uniform);
    let two = measure(Spread::LeastLoadedOfTwo);
    assert!(
        two.busiest_share < uniform.busiest_share,
        "{two:?} vs {uniform:?}"
    );
    assert!(
        two.peak_in_flight <= uniform.peak_in_flight,
        "{two:?} vs {uniform:?}"
    );
    assert!(uniform.busiest_share < 0.16, "uniform spreads: {uniform:?}");
}

#[test]
#[ignore = "prints the figures for docs/benchmarks.md"]
fn print_busiest_holder_share() {
    for (name, spread) in [
        ("nearest", Spread::Nearest),
        ("uniform", Spread::Uniform),
        ("least-loaded-of-two", Spread::LeastLoadedOfTwo),
    ] {
        let s = measure(spread);
        println!(
            "{name:>20}: busiest holder {:.2}% of {TRIALS} first reads, peak {} in flight at one holder, mean GET latency {:.1} ms",
            100.0 * s.busiest_share,
            s.peak_in_flight,
            s.mean_latency_ms
        );
    }
}
