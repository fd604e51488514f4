//! How evenly first reads of one hot record land on its close group, per spreading choice.
//!
//! Model (deterministic, fixed seeds): one client starts 7,000 reads of the same record,
//! one every 2 ms, against a 7-peer close group that all hold it. A GET to a holder takes
//! 20 ms plus 10 ms for every GET of this client already in flight there (a loaded holder
//! answers more slowly), so several reads overlap and load-aware choice has something to
//! see. The view reports this client's in-flight GETs per peer.
//!
//! A second model spreads the same 7,000 reads over 70 clients (read `i` by client
//! `i % 70`), so each client has at most one or two reads running and its own in-flight
//! count says nothing; the holders' responses carry their load
//! (`X-Peerblock-Load`, [`peerblock_core::wire::header::LOAD`]), which each client keeps in its own
//! [`LoadTable`] — the signal the load-aware choice needs when many clients share a hot
//! record. A third variant of it also answers each lookup with every holder's decayed
//! count of GETs for the record ([`KeyCounter`], [`LookupPeer`]).
//!
//! `cargo test -p peerblock-core --release --test read_spread_share -- --ignored --nocapture`
//! prints the figures recorded in docs/benchmarks.md.

use std::collections::BTreeMap;

use bytes::Bytes;
use peerblock_core::load::{KeyCounter, KeyCounterConfig, LoadConfig, LoadTable};
use peerblock_core::placement::{Key, PeerId};
use peerblock_core::read::{
    GetId, GetOutcome, LookupPeer, PeerView, Read, ReadConfig, ReadEvent, Spread,
};
use peerblock_core::rng::indexed_seed;
use peerblock_core::time::{Duration, Instant};
use peerblock_testkit::StaticView;

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
            while let Some(a) = reads[r].poll_event(at, &view) {
                assert!(matches!(a, ReadEvent::Done(_)));
            }
        }
        let r = reads.len();
        reads.push(Read::new(key, cfg.clone(), now, indexed_seed(42, i)).unwrap());
        while let Some(a) = reads[r].poll_event(now, &view) {
            match a {
                ReadEvent::Lookup => reads[r].handle_lookup(now, &group),
                ReadEvent::Get { id, peer } => {
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

/// Clients sharing the hot record in the many-client model.
const CLIENTS: usize = 70;
/// The clients' hint horizon in this model: a GET here takes 20–80 ms, so 250 ms is a few
/// service times, the same ratio as the 10 s default against a 1–2 s block transfer.
const HORIZON_MS: u64 = 250;

/// The per-key counters' half-life in this model: the same ratio to a GET's 20–80 ms as
/// the 30 s default to a block transfer of one to a few seconds.
const KEY_HALF_LIFE_MS: u64 = 1_000;

/// What the many-client model's clients learn about the holders' load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hints {
    /// Nothing: each client sees only its own GETs in flight.
    Ignored,
    /// The load header of each response (node-level load).
    Advertised,
    /// The load header, and with each lookup every holder's decayed count of GETs for the
    /// record ([`KeyCounter`], via [`Read::handle_lookup_peers`]).
    PerKey,
}

/// One client of the many-client model: its load table and its own GETs in flight.
struct Client {
    hints: LoadTable<PeerId>,
    in_flight: BTreeMap<PeerId, u32>,
    /// Whether its view reports the hints (false: the signal ignored).
    use_hints: bool,
}

impl PeerView for Client {
    fn eligible(&self, _now: Instant, _peer: &PeerId) -> bool {
        true
    }
    fn refused_for(&self, _now: Instant, _peer: &PeerId) -> Option<Duration> {
        None
    }
    fn in_flight(&self, peer: &PeerId) -> u32 {
        self.in_flight.get(peer).copied().unwrap_or(0)
    }
    fn load(&self, now: Instant, peer: &PeerId) -> Option<u32> {
        if self.use_hints {
            self.hints.load(now, peer)
        } else {
            None
        }
    }
}

/// The many-client model: same arrivals and latency rule as [`measure`] (20 ms + 10 ms
/// per GET already in progress at the holder, from any client); each response tells its
/// client the holder's requests in progress when it was admitted (itself included).
fn measure_many(spread: Spread, hints: Hints) -> Share {
    let use_hints = hints != Hints::Ignored;
    let mut counters: BTreeMap<PeerId, KeyCounter<u8>> = BTreeMap::new();
    let key = Key::from_u64(0);
    let group: Vec<PeerId> = (1..=7u64).map(PeerId::from_u64).collect();
    let cfg = ReadConfig {
        spread,
        ..ReadConfig::default()
    };
    let mut clients: Vec<Client> = (0..CLIENTS)
        .map(|_| Client {
            hints: LoadTable::new(LoadConfig {
                horizon: Duration::from_millis(HORIZON_MS),
                ..LoadConfig::default()
            })
            .unwrap(),
            in_flight: BTreeMap::new(),
            use_hints,
        })
        .collect();
    let mut at_holder: BTreeMap<PeerId, u32> = BTreeMap::new();
    let mut reads: Vec<Read> = Vec::new();
    // (due, seq) -> (read, get, peer, advertised load)
    let mut pending: BTreeMap<(Instant, u64), (usize, GetId, PeerId, u32)> = BTreeMap::new();
    let mut firsts: BTreeMap<PeerId, u32> = BTreeMap::new();
    let mut peak = 0u32;
    let mut latency_total = 0u64;
    for i in 0..TRIALS {
        let now = Instant::from_millis(2 * i);
        while let Some(entry) = pending.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (at, _) = *entry.key();
            let (r, id, peer, advertised) = entry.remove();
            let c = &mut clients[r % CLIENTS];
            *at_holder.get_mut(&peer).unwrap() -= 1;
            *c.in_flight.get_mut(&peer).unwrap() -= 1;
            c.hints.record(at, peer, advertised);
            reads[r].handle_get(at, id, GetOutcome::Found(Bytes::from_static(b"b")));
            while let Some(a) = reads[r].poll_event(at, &*c) {
                assert!(matches!(a, ReadEvent::Done(_)));
            }
        }
        let r = reads.len();
        let c = &mut clients[r % CLIENTS];
        reads.push(Read::new(key, cfg.clone(), now, indexed_seed(42, i)).unwrap());
        while let Some(a) = reads[r].poll_event(now, &*c) {
            match a {
                ReadEvent::Lookup if hints == Hints::PerKey => {
                    let peers: Vec<LookupPeer> = group
                        .iter()
                        .map(|&p| {
                            let count = counters.get(&p).map_or(0, |c| c.count(now, &0));
                            LookupPeer::with_key_load(p, count)
                        })
                        .collect();
                    reads[r].handle_lookup_peers(now, &peers)
                }
                ReadEvent::Lookup => reads[r].handle_lookup(now, &group),
                ReadEvent::Get { id, peer } => {
                    counters
                        .entry(peer)
                        .or_insert_with(|| {
                            KeyCounter::new(KeyCounterConfig {
                                half_life: Duration::from_millis(KEY_HALF_LIFE_MS),
                                ..KeyCounterConfig::default()
                            })
                            .unwrap()
                        })
                        .bump(now, 0);
                    let load = at_holder.entry(peer).or_default();
                    let latency = 20 + 10 * u64::from(*load);
                    *load += 1;
                    let advertised = *load;
                    peak = peak.max(*load);
                    *c.in_flight.entry(peer).or_default() += 1;
                    latency_total += latency;
                    *firsts.entry(peer).or_default() += 1;
                    pending.insert(
                        (now + Duration::from_millis(latency), i),
                        (r, id, peer, advertised),
                    );
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

/// Rule: with many clients, the load-aware choice evens out a hot record's holders only
/// through the load the holders advertise. With the hints it beats uniform on the busiest
/// holder's share and on the peak queue; with the hints ignored (each client sees only
/// its own, nearly always zero, requests in flight) it does not.
#[test]
fn advertised_load_makes_two_choices_beat_uniform_across_many_clients() {
    let uniform = measure_many(Spread::Uniform, Hints::Advertised);
    let hinted = measure_many(Spread::LeastLoadedOfTwo, Hints::Advertised);
    let blind = measure_many(Spread::LeastLoadedOfTwo, Hints::Ignored);
    assert!(
        hinted.busiest_share < uniform.busiest_share,
        "{hinted:?} vs uniform {uniform:?}"
    );
    assert!(
        hinted.busiest_share < blind.busiest_share,
        "{hinted:?} vs hints ignored {blind:?}"
    );
    assert!(
        hinted.peak_in_flight <= uniform.peak_in_flight,
        "{hinted:?} vs uniform {uniform:?}"
    );
}

/// Rule: per-key hints with the lookup let every client compare the holders by the
/// record's recent GETs before asking any of them; across many clients that flattens the
/// busiest holder's share below both uniform and the node-level advertised load.
#[test]
fn per_key_hints_make_two_choices_flatten_the_share_across_many_clients() {
    let uniform = measure_many(Spread::Uniform, Hints::Advertised);
    let advertised = measure_many(Spread::LeastLoadedOfTwo, Hints::Advertised);
    let keyed = measure_many(Spread::LeastLoadedOfTwo, Hints::PerKey);
    assert!(
        keyed.busiest_share < advertised.busiest_share,
        "{keyed:?} vs advertised load {advertised:?}"
    );
    assert!(
        keyed.busiest_share < uniform.busiest_share,
        "{keyed:?} vs uniform {uniform:?}"
    );
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
            "one client  {name:>20}: busiest holder {:.2}% of {TRIALS} first reads, peak {} in flight at one holder, mean GET latency {:.1} ms",
            100.0 * s.busiest_share,
            s.peak_in_flight,
            s.mean_latency_ms
        );
    }
    for (name, spread, hints) in [
        ("uniform", Spread::Uniform, Hints::Advertised),
        (
            "two, hints ignored",
            Spread::LeastLoadedOfTwo,
            Hints::Ignored,
        ),
        (
            "two, advertised load",
            Spread::LeastLoadedOfTwo,
            Hints::Advertised,
        ),
        (
            "two, per-key hints",
            Spread::LeastLoadedOfTwo,
            Hints::PerKey,
        ),
    ] {
        let s = measure_many(spread, hints);
        println!(
            "{CLIENTS} clients {name:>20}: busiest holder {:.2}% of {TRIALS} first reads, peak {} in progress at one holder, mean GET latency {:.1} ms",
            100.0 * s.busiest_share,
            s.peak_in_flight,
            s.mean_latency_ms
        );
    }
}
