//! Content that starts at the origin only (`file.placement = "origin"`): one rule, one
//! test. Each builds a small cluster and reads the trace's `relay` lines
//! (`relay n=N b=B hop=H via=P|origin`: node N's upstream fetch of block B, carrying hop H,
//! asked of parent P or of the origin).

mod common;

use common::{run, run_traced, shipped};
use sim::metrics::RelayMetrics;
use sim::scenario::Scenario;
use sim::world::RunResult;

/// A small origin-only cluster: `extra` is appended (later tables and keys win only where
/// they are not already set, so tests add whole tables or keys of tables not set here).
fn scenario(nodes: u32, group: u32, readers: u32, blocks: u64, extra: &str) -> Scenario {
    let text = format!(
        r#"
name = "origin-test"
[cluster]
nodes = {nodes}
close_group = {group}
upload_mbps = 400.0
[network]
latency = {{ dist = "constant", ms = 1.0 }}
transport = "http1"
[file]
size_mib = {blocks}
block_kib = 1024
placement = "origin"
[readers]
count = {readers}
start_spread_secs = 0.0
parallel_blocks = 4
[client]
dial_timeout_ms = 1000
{extra}
"#
    );
    Scenario::parse(&text, "origin-test.toml", "origin-test").unwrap_or_else(|e| panic!("{e}"))
}

fn relay(r: &RunResult) -> &RelayMetrics {
    r.metrics
        .relay
        .as_ref()
        .expect("origin placement reports relays")
}

/// The trace's `relay` lines as (node, block, hop, via: `None` = the origin).
fn relays(trace: &[u8]) -> Vec<(u32, u32, u32, Option<u32>)> {
    let text = String::from_utf8_lossy(trace);
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind) = (f.next()?, f.next()?);
            if kind != "relay" {
                return None;
            }
            let mut get = |k: &str| {
                let v = f.next()?.strip_prefix(k)?.to_string();
                Some(v)
            };
            let n = get("n=")?.parse().ok()?;
            let b = get("b=")?.parse().ok()?;
            let h = get("hop=")?.parse().ok()?;
            let via = get("via=")?;
            Some((n, b, h, via.parse().ok()))
        })
        .collect()
}

fn all_complete(r: &RunResult) {
    let s = &r.summary;
    assert_eq!(s.downloads.completed, s.downloads.started, "{s:?}");
    assert_eq!(s.reads.wrong_bytes, 0);
}

#[test]
fn origin_only_content_is_held_by_nobody_at_the_start() {
    // One reader, one block, no reader fallback: the block can only come through a
    // node's relay from the origin.
    let s = scenario(8, 7, 1, 1, "[origin]\nreader_fallback = false");
    let (r, trace) = run_traced(&s, 1);
    all_complete(&r);
    let m = relay(&r);
    assert_eq!(
        m.cache_hits, 0,
        "a node served the block before relaying it"
    );
    assert!(m.relays >= 1, "the first GET was not a relayed miss");
    assert_eq!(m.origin_bytes, 1 << 20, "the block left the origin once");
    assert!(!relays(&trace).is_empty());
}

#[test]
fn a_miss_relays_through_the_parent_not_directly_to_the_origin() {
    let s = scenario(8, 7, 16, 8, "[origin]\nreader_fallback = false");
    let (r, trace) = run_traced(&s, 1);
    all_complete(&r);
    let mut through_parent = 0;
    for (n, b, _, via) in relays(&trace) {
        let nearest = r.holders[b as usize][0];
        if n != nearest {
            assert_eq!(
                via,
                Some(nearest),
                "node {n} (not the nearest holder {nearest}) of block {b} asked {via:?}"
            );
            through_parent += 1;
        }
    }
    assert!(through_parent > 0, "no holder but the nearest ever relayed");
    assert_eq!(relay(&r).parent_fallbacks, 0);
}

#[test]
fn only_the_nearest_live_holder_goes_to_the_origin() {
    let s = scenario(8, 7, 16, 8, "[origin]\nreader_fallback = false");
    let (r, trace) = run_traced(&s, 2);
    all_complete(&r);
    let at_origin: Vec<_> = relays(&trace)
        .into_iter()
        .filter(|r| r.3.is_none())
        .collect();
    assert!(!at_origin.is_empty());
    for (n, b, _, _) in at_origin {
        assert_eq!(
            n, r.holders[b as usize][0],
            "node {n} asked the origin for {b}"
        );
    }
    assert_eq!(relay(&r).reader_origin_fetches, 0);
}

#[test]
fn a_dead_parent_sends_the_relay_to_the_origin() {
    // Block 0's nearest holder is dead from the start.
    let s = scenario(
        8,
        7,
        16,
        1,
        "[origin]\nreader_fallback = false\n[[faults]]\nkind = \"crash\"\nholder_block = 0\nholder_rank = 0\nat_secs = 0.0",
    );
    let (r, trace) = run_traced(&s, 1);
    all_complete(&r);
    let dead = r.holders[0][0];
    let lines = relays(&trace);
    // Whoever asked the dead parent fell back to the origin after the dial deadline.
    let asked_dead: Vec<u32> = lines
        .iter()
        .filter(|l| l.3 == Some(dead))
        .map(|l| l.0)
        .collect();
    assert!(
        !asked_dead.is_empty(),
        "nobody asked the dead parent: {lines:?}"
    );
    let text = String::from_utf8_lossy(&trace);
    for n in &asked_dead {
        let fell_back = format!("relay-fallback n={n} b=0 hop=1 parent={dead} why=dial");
        assert!(text.contains(&fell_back), "node {n} did not fall back");
    }
    assert_eq!(relay(&r).parent_fallbacks, asked_dead.len() as u64);
    assert_eq!(relay(&r).origin_requests, asked_dead.len() as u64);
    assert_eq!(r.metrics.node_bytes[dead as usize], 0);
}

#[test]
fn the_hop_bound_stops_relaying() {
    // Bound 0: core declines every relay; with the reader's own fallback, the blocks come
    // from the origin directly.
    let s = scenario(8, 7, 4, 2, "[relay]\nmax_hop = 0");
    let r = run(&s, 1);
    all_complete(&r);
    let m = relay(&r);
    assert_eq!(m.relays, 0, "a relay past the bound");
    assert!(m.reader_origin_fetches > 0);
    // Bound 1: the holders relay their readers' misses (hop 1), but a parent asked with
    // hop 1 declines; the asking node then goes to the origin itself.
    let s = scenario(
        8,
        7,
        16,
        4,
        "[relay]\nmax_hop = 1\n[origin]\nreader_fallback = false",
    );
    let (r, trace) = run_traced(&s, 1);
    all_complete(&r);
    let m = relay(&r);
    assert!(m.hop_declines > 0, "no parent declined at the bound");
    assert_eq!(m.parent_fallbacks, m.hop_declines);
    assert!(
        relays(&trace).iter().all(|l| l.2 == 1),
        "a relay carried hop 2"
    );
}

#[test]
fn concurrent_misses_at_one_node_share_one_upstream_fetch() {
    // One node, one block, 24 readers at once: every GET misses at the same node at
    // about the same time.
    let s = scenario(1, 1, 24, 1, "[origin]\nreader_fallback = false");
    let r = run(&s, 1);
    all_complete(&r);
    let m = relay(&r);
    assert_eq!(m.origin_requests, 1, "{m:?}");
    assert_eq!(m.flights_led, 1);
    assert!(m.flight_joins >= 23, "{m:?}");
    assert_eq!(m.origin_bytes, 1 << 20);
}

#[test]
fn the_cache_bound_evicts() {
    // One node whose cache holds one 1 MiB block, a 4-block file read twice: every new
    // block evicts the last, so the second round fetches everything again.
    let s = scenario(
        1,
        1,
        1,
        4,
        "[origin]\nreader_fallback = false\n[relay]\ncache_mib = 1",
    );
    let mut s = s;
    s.readers.rounds = 2;
    s.readers.round_interval_secs = 60.0;
    s.readers.parallel_blocks = 1;
    let r = run(&s, 1);
    all_complete(&r);
    let m = relay(&r);
    assert!(m.cache_evictions >= 3, "{m:?}");
    assert_eq!(m.origin_bytes_by_round, vec![4 << 20, 4 << 20]);
    // A cache that holds the file: the second round costs the origin nothing.
    s.relay.cache_mib = 4;
    let r = run(&s, 1);
    let m = relay(&r);
    assert_eq!(m.cache_evictions, 0);
    assert_eq!(m.origin_bytes_by_round, vec![4 << 20, 0]);
}

#[test]
fn same_seed_same_report() {
    let s = shipped("hot-file-origin.toml");
    let (a, ta) = run_traced(&s, 3);
    let (b, tb) = run_traced(&s, 3);
    let strip = |mut x: sim::metrics::Summary| {
        x.wall_seconds = 0.0;
        x
    };
    assert_eq!(strip(a.summary.clone()), strip(b.summary.clone()), "seed 3");
    assert_eq!(ta, tb, "seed 3: traces differ");
    assert_eq!(relay(&a), relay(&b));
    assert!(a.summary.origin.is_some());
}

#[test]
fn placement_origin_is_validated_naming_the_key() {
    let err = Scenario::parse(
        "[file]\nplacement = \"origin\"\n[network]\ntransport = \"multiplexed\"\n",
        "x.toml",
        "x",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("file.placement"), "{err}");
    assert!(err.contains("http1"), "{err}");
    let err = Scenario::parse("[file]\nplacement = \"everywhere\"\n", "x.toml", "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("placement") && err.contains("origin"), "{err}");
    let err = Scenario::parse(
        "[file]\nplacement = \"origin\"\n[relay]\ncache_mib = 0\n",
        "x.toml",
        "x",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("relay.cache_mib"), "{err}");
}

#[test]
fn a_refusing_parent_sends_the_relay_to_the_origin() {
    // Two request slots per node, one per source: the nearest holders are full of their
    // readers' requests when the other holders' relays arrive.
    let s = scenario(
        8,
        7,
        16,
        4,
        "[origin]\nreader_fallback = false\n[listener]\nmax_requests = 2\nmax_sessions_per_source = 1\nmax_requests_per_session = 1",
    );
    let (r, trace) = run_traced(&s, 1);
    all_complete(&r);
    let text = String::from_utf8_lossy(&trace);
    let refused: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" relay-fallback ") && l.ends_with("why=refused"))
        .collect();
    assert!(!refused.is_empty(), "no parent refused a relay");
    assert!(text.contains(" relay-refused "));
    // Each refused relay went on to the origin.
    let m = relay(&r);
    assert!(m.origin_requests >= refused.len() as u64, "{m:?}");
    assert_eq!(m.reader_origin_fetches, 0);
}

#[test]
fn a_silent_parent_sends_the_relay_to_the_origin_at_the_header_deadline() {
    // Block 0's nearest holder accepts and never answers.
    let s = scenario(
        8,
        7,
        16,
        1,
        "[origin]\nreader_fallback = false\n[[faults]]\nkind = \"silent\"\nholder_block = 0\nholder_rank = 0\nat_secs = 0.0",
    );
    let (r, trace) = run_traced(&s, 1);
    all_complete(&r);
    let silent = r.holders[0][0];
    let text = String::from_utf8_lossy(&trace);
    let fell_back: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" relay-fallback ") && l.contains(&format!("parent={silent} ")))
        .collect();
    assert!(!fell_back.is_empty(), "nobody asked the silent parent");
    assert!(
        fell_back.iter().all(|l| l.ends_with("why=header")),
        "{fell_back:?}"
    );
    // A dial was answered, so the relay client does not suppress it: no cooldown entry,
    // only the response-header deadline (10 s) each time.
    let first = fell_back[0].split_whitespace().next().unwrap();
    let at: f64 = first.parse().unwrap();
    assert!(
        at >= 10.0,
        "fell back at {at} s, before the header deadline"
    );
    assert_eq!(r.metrics.node_bytes[silent as usize], 0);
}

#[test]
fn a_parent_whose_dial_failed_is_skipped_afterwards() {
    // The nearest holder of block 0 is dead; with 32 blocks it is the nearest holder of
    // several, so the other holders relay through it more than once.
    let s = scenario(
        8,
        7,
        8,
        32,
        "[origin]\nreader_fallback = false\n[[faults]]\nkind = \"crash\"\nholder_block = 0\nholder_rank = 0\nat_secs = 0.0",
    );
    let (r, trace) = run_traced(&s, 1);
    all_complete(&r);
    let dead = r.holders[0][0];
    let text = String::from_utf8_lossy(&trace);
    let mut failed_at: std::collections::BTreeMap<u32, f64> = Default::default();
    let mut skipped = 0;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(t), Some(kind)) = (f.next(), f.next()) else {
            continue;
        };
        let t: f64 = t.parse().unwrap();
        let n: u32 = f.next().unwrap_or("n=0")[2..].parse().unwrap_or(u32::MAX);
        if kind == "relay-fallback" && line.ends_with(&format!("parent={dead} why=dial")) {
            failed_at.entry(n).or_insert(t);
        }
        if kind == "relay" {
            if let Some(&at) = failed_at.get(&n) {
                assert!(
                    !line.ends_with(&format!("via={dead}")),
                    "node {n} asked the dead parent again at {t} s after its dial failed at {at} s"
                );
                skipped += 1;
            }
        }
    }
    assert!(!failed_at.is_empty(), "no dial to the dead parent failed");
    assert!(skipped > 0, "no relay after a failed dial to check");
}
