//! What a run measures, and the JSON summary built from it.
//!
//! The summary's keys are stable (scripts and tests read them); `docs/sim.md` documents
//! each. Everything in it is a pure function of the scenario and seed except
//! `wall_seconds`.

use serde::Serialize;

/// How a GET ended, from the client's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GetResult {
    /// 200 with the block.
    Found,
    /// 404: the node does not hold it.
    NotFound,
    /// An explicit refusal (session or request limit) with Retry-After.
    Refused,
    /// The dial got no answer within the dial timeout (dead, NAT, partitioned, or a full
    /// silent listener).
    DialFailed,
    /// Accepted, then no response header or no complete body in time.
    TimedOut,
    /// The node closed the stream at once (a full channel or request table on a silent
    /// listener).
    Closed,
    /// The read no longer wanted it (hedge loser, read finished).
    Cancelled,
    /// A body that failed verification against the key (a corrupt node).
    Corrupt,
}

impl GetResult {
    /// Name used in traces and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            GetResult::Found => "found",
            GetResult::NotFound => "not-found",
            GetResult::Refused => "refused",
            GetResult::DialFailed => "dial-failed",
            GetResult::TimedOut => "timed-out",
            GetResult::Closed => "closed",
            GetResult::Cancelled => "cancelled",
            GetResult::Corrupt => "corrupt",
        }
    }

    /// Every kind, in report order.
    pub const ALL: [GetResult; 8] = [
        GetResult::Found,
        GetResult::NotFound,
        GetResult::Refused,
        GetResult::DialFailed,
        GetResult::TimedOut,
        GetResult::Closed,
        GetResult::Cancelled,
        GetResult::Corrupt,
    ];
}

/// Counters and samples of one run.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    /// Block reads started.
    pub reads_started: u64,
    /// Reads that returned the block.
    pub reads_found: u64,
    /// Reads that reported the block absent.
    pub reads_absent: u64,
    /// Absent reports for blocks the cluster does hold.
    pub reads_false_absent: u64,
    /// Reads the client reported to its user as "not found" for blocks the cluster does
    /// hold: every false absent, plus `Unavailable` reads when the scenario's client
    /// folds them into "not found" (`client.reports_unavailable_as_not_found`).
    pub reads_false_not_found: u64,
    /// Reads that reported the holders busy.
    pub reads_busy: u64,
    /// Reads that could reach no holder.
    pub reads_unavailable: u64,
    /// Reads that received only invalid copies (every copy failed validation): the
    /// block is stored but corrupt where it was read (`ReadOutcome::Invalid`).
    pub reads_invalid: u64,
    /// Found reads whose bytes were not the block's (must stay 0).
    pub wrong_bytes: u64,
    /// Downloads started.
    pub downloads_started: u64,
    /// Downloads that got every block.
    pub downloads_completed: u64,
    /// Per round: (started, completed).
    pub rounds: Vec<(u64, u64)>,
    /// Read durations, ns.
    pub read_ns: Vec<u64>,
    /// Completed download durations, ns.
    pub download_ns: Vec<u64>,
    /// `first_gets[block][node]`: how many reads sent their first GET there.
    pub first_gets: Vec<Vec<u32>>,
    /// `first_gets_by_round[round][block][node]`: the same, per round of downloads (the
    /// reference's testnet figures are of one round of 64 browsers at a time).
    pub first_gets_by_round: Vec<Vec<Vec<u32>>>,
    /// `opening_gets_by_round[round][block][node]`: each read's first two GETs (its first
    /// and its first hedge, the reference's at-most-two-GETs), per round.
    pub opening_gets_by_round: Vec<Vec<Vec<u32>>>,
    /// GETs sent.
    pub gets_total: u64,
    /// GETs sent while another GET of the same read was in flight.
    pub gets_hedged: u64,
    /// GET endings by kind.
    pub get_results: [u64; 8],
    /// Explicit refusals received by readers.
    pub refusals: u64,
    /// Closed→open transitions across all readers' breakers.
    pub breaker_opens: u64,
    /// Bytes each node served (completed responses).
    pub node_bytes: Vec<u64>,
    /// Samples of cumulative bytes per node: (time, bytes per node).
    pub node_bytes_series: Vec<(f64, Vec<u64>)>,
    /// Refusals or silences per listener limit name.
    pub limit_hits: std::collections::BTreeMap<&'static str, u64>,
    /// Events processed.
    pub events: u64,
    /// Reads still running when the run ended (an invariant: always 0).
    pub reads_unfinished: u64,
    /// Downloads still running when the run ended (an invariant: always 0).
    pub downloads_unfinished: u64,
    /// The origin and the relays (`file.placement = "origin"`; `None` otherwise).
    pub relay: Option<RelayMetrics>,
}

/// What the origin served and what the nodes' relays did (`file.placement = "origin"`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RelayMetrics {
    /// The file's size in bytes (origin egress is reported against it).
    pub file_bytes: u64,
    /// Bytes the origin sent (completed responses).
    pub origin_bytes: u64,
    /// Requests the origin received (from relays and from readers' own fallback).
    pub origin_requests: u64,
    /// Origin bytes by the round whose time window they left in: round `r`'s window runs
    /// from its start to the next round's start (the last to the end of the run).
    pub origin_bytes_by_round: Vec<u64>,
    /// Per round: from the round's start to the end of its last download, ns (the time
    /// for all of the wave's readers).
    pub round_span_ns: Vec<u64>,
    /// Origin requests made by readers themselves (the read's origin fallback).
    pub reader_origin_fetches: u64,
    /// Relayed misses: requests naming the origin that a node missed and core decided to
    /// relay (`ServerEvent::Relay`), from readers and from other nodes' relays.
    pub relays: u64,
    /// Relayed misses that led an upstream fetch (core's `RelayFlights`: `Want::Lead`).
    pub flights_led: u64,
    /// Relayed misses that joined the upstream fetch in flight (`Want::Joined`).
    pub flight_joins: u64,
    /// Relayed misses refused at the single-flight table's bounds (answered 500).
    pub flights_full: u64,
    /// Upstream fetches sent to the block's parent first.
    pub parent_fetches: u64,
    /// Upstream fetches whose parent's answer was not final (a miss, a failure, the
    /// parent dead or silent), which then went to the origin.
    pub parent_fallbacks: u64,
    /// Relay requests declined at the hop bound (404).
    pub hop_declines: u64,
    /// Requests for a block answered from a node's relay cache.
    pub cache_hits: u64,
    /// Blocks evicted from relay caches at their bound.
    pub cache_evictions: u64,
}

impl RelayMetrics {
    /// Origin egress as a multiple of the file's size.
    pub fn origin_per_file(&self) -> f64 {
        if self.file_bytes == 0 {
            0.0
        } else {
            self.origin_bytes as f64 / self.file_bytes as f64
        }
    }
}

impl Metrics {
    /// Empty metrics for `nodes` nodes and `blocks` blocks.
    pub fn new(nodes: usize, blocks: usize, rounds: usize) -> Self {
        Metrics {
            first_gets: vec![vec![0; nodes]; blocks],
            first_gets_by_round: vec![vec![vec![0; nodes]; blocks]; rounds],
            opening_gets_by_round: vec![vec![vec![0; nodes]; blocks]; rounds],
            node_bytes: vec![0; nodes],
            rounds: vec![(0, 0); rounds],
            ..Metrics::default()
        }
    }

    /// Counts a refusal or silence at a node's listener limit.
    pub fn limit_hit(&mut self, limit: crate::listener::Limit) {
        *self.limit_hits.entry(limit.as_str()).or_insert(0) += 1;
    }

    /// Counts a GET ending.
    pub fn get_result(&mut self, r: GetResult) {
        self.get_results[r as usize] += 1;
    }

    /// Count of GET endings of kind `r`.
    pub fn get_count(&self, r: GetResult) -> u64 {
        self.get_results[r as usize]
    }

    /// Counts a read's first GET, for `block` in `round`, going to `node`.
    pub fn first_get(&mut self, round: usize, block: usize, node: usize) {
        self.first_gets[block][node] += 1;
        self.first_gets_by_round[round][block][node] += 1;
    }

    /// Counts one of a read's first two GETs, for `block` in `round`, going to `node`.
    pub fn opening_get(&mut self, round: usize, block: usize, node: usize) {
        self.opening_gets_by_round[round][block][node] += 1;
    }

    /// Per (round, block): the busiest holder's share of the reads' first two GETs.
    pub fn round_opening_top_shares(&self) -> Vec<f64> {
        self.opening_gets_by_round
            .iter()
            .flatten()
            .filter_map(|row| top_share(row))
            .collect()
    }

    /// Per block: the busiest holder's share of first GETs (blocks nobody read are left
    /// out).
    pub fn top_shares(&self) -> Vec<f64> {
        self.first_gets
            .iter()
            .filter_map(|row| top_share(row))
            .collect()
    }

    /// Per (round, block): the busiest holder's share of that round's first GETs. With
    /// fewer reads per cell, multinomial noise alone lifts the busiest share above 1/7:
    /// about 20 % for 64 uniform reads over 7 holders, against about 16.5 % for 384.
    pub fn round_top_shares(&self) -> Vec<f64> {
        self.first_gets_by_round
            .iter()
            .flatten()
            .filter_map(|row| top_share(row))
            .collect()
    }
}

/// The largest count's share of the row's total (`None` for an empty row).
fn top_share(row: &[u32]) -> Option<f64> {
    let total: u64 = row.iter().map(|&c| u64::from(c)).sum();
    let top = row.iter().copied().max().unwrap_or(0);
    (total > 0).then(|| f64::from(top) / total as f64)
}

/// The busiest node's bytes over the mean node's (0 when nothing was served).
pub fn busiest_per_mean(node_bytes: &[u64]) -> f64 {
    let total: u64 = node_bytes.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let max = node_bytes.iter().copied().max().unwrap_or(0);
    max as f64 * node_bytes.len() as f64 / total as f64
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

impl Metrics {}

/// `p50/p95/p99/max` in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of nanosecond samples, in ms rounded to 0.001.
    pub fn of(samples: &[u64]) -> Self {
        if samples.is_empty() {
            return Percentiles::default();
        }
        let mut v = samples.to_vec();
        v.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
            round3(v[rank - 1] as f64 / 1e6)
        };
        Percentiles {
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
            max: round3(v[v.len() - 1] as f64 / 1e6),
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// `reads.*`
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Reads {
    /// Block reads started.
    pub started: u64,
    /// Returned the block.
    pub found: u64,
    /// Reported absent.
    pub absent: u64,
    /// Reported absent although the cluster holds the block.
    pub false_absent: u64,
    /// Reported to the user as "not found" although the cluster holds the block (false
    /// absent, plus unavailable reads for a client that folds them into "not found").
    pub false_not_found: u64,
    /// Reported the holders busy.
    pub busy: u64,
    /// Reached no holder.
    pub unavailable: u64,
    /// Received only invalid copies (corrupt holders, `ReadOutcome::Invalid`).
    pub invalid: u64,
    /// Found with the wrong bytes (an invariant: always 0).
    pub wrong_bytes: u64,
    /// Still running when the run ended (an invariant: always 0).
    pub unfinished: u64,
}

/// `downloads.*`
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Downloads {
    /// Downloads started (readers × rounds).
    pub started: u64,
    /// Downloads that got every block.
    pub completed: u64,
    /// Per round: completed downloads.
    pub completed_per_round: Vec<u64>,
}

/// `first_read_share.*`
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FirstReadShare {
    /// Mean over blocks of the busiest holder's share of first GETs.
    pub mean_top: f64,
    /// Largest such share over blocks.
    pub max_top: f64,
    /// Mean over (round, block) of the busiest holder's share of that round's first GETs:
    /// the statistic as a per-round testnet measurement sees it.
    pub round_mean_top: f64,
    /// Mean over (round, block) of the busiest holder's share of the reads' first *two*
    /// GETs (the first and the first hedge, which the reference's hedge rule sends on
    /// nearly every 4 MiB read): the statistic whose figures match the reference's "share
    /// of a chunk's first reads" for both nearest-first and uniform (docs/sim.md).
    pub two_gets_round_mean_top: f64,
}

/// `gets.*`
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Gets {
    /// GETs sent.
    pub total: u64,
    /// Sent while another GET of the same read was in flight.
    pub hedged: u64,
    /// Answered 200.
    pub found: u64,
    /// Answered 404.
    pub not_found: u64,
    /// Refused explicitly.
    pub refused: u64,
    /// Dial never answered.
    pub dial_failed: u64,
    /// Accepted, then timed out.
    pub timed_out: u64,
    /// Stream closed by a full listener.
    pub closed: u64,
    /// Cancelled by the read (hedge losers).
    pub cancelled: u64,
    /// Bodies that failed verification.
    pub corrupt: u64,
}

/// `node_bytes.*`
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NodeBytes {
    /// Most bytes any node served.
    pub max: u64,
    /// Mean bytes served per node.
    pub mean: u64,
}

/// The JSON summary (`--json`). Key names are stable; see docs/sim.md.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Scenario name.
    pub scenario: String,
    /// Seed of this run.
    pub seed: u64,
    /// Block reads.
    pub reads: Reads,
    /// Whole-file downloads.
    pub downloads: Downloads,
    /// First-read concentration.
    pub first_read_share: FirstReadShare,
    /// Read durations, ms.
    pub read_ms: Percentiles,
    /// Completed download durations, ms.
    pub download_ms: Percentiles,
    /// GETs.
    pub gets: Gets,
    /// Explicit refusals received by readers.
    pub refusals: u64,
    /// Circuit-breaker openings across all readers.
    pub breaker_opens: u64,
    /// Bytes served per node.
    pub node_bytes: NodeBytes,
    /// Dials or requests turned away, by listener limit.
    pub limit_hits: std::collections::BTreeMap<&'static str, u64>,
    /// Events processed.
    pub events: u64,
    /// Simulated time at the end of the run, seconds.
    pub sim_seconds: f64,
    /// Wall-clock time of the run, seconds (the only non-deterministic key).
    pub wall_seconds: f64,
    /// FNV-1a 64 digest of the trace.
    pub trace_digest: String,
    /// The origin and the relays (only for `file.placement = "origin"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<OriginSummary>,
}

/// `origin.*` (`file.placement = "origin"`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OriginSummary {
    /// Bytes the origin sent.
    pub egress_bytes: u64,
    /// Requests the origin received.
    pub requests: u64,
    /// Origin egress / the file's size.
    pub egress_per_file: f64,
    /// Origin bytes per round's time window.
    pub egress_bytes_per_round: Vec<u64>,
    /// Per round: from the round's start to its last download's end, ms (the time for all
    /// of the wave's readers).
    pub all_readers_ms_per_round: Vec<f64>,
    /// Origin requests made by readers themselves (their read's origin fallback).
    pub reader_fetches: u64,
    /// Relayed misses at nodes (`ServerEvent::Relay`).
    pub relays: u64,
    /// Relayed misses that led an upstream fetch.
    pub flights_led: u64,
    /// Relayed misses that joined an upstream fetch in flight (single-flight joins).
    pub single_flight_joins: u64,
    /// Relayed misses refused at the single-flight table's bounds.
    pub flights_full: u64,
    /// Upstream fetches asked of the block's parent.
    pub parent_fetches: u64,
    /// Parent fetches that ended at the origin (the parent's answer not final).
    pub parent_fallbacks: u64,
    /// Relays declined at the hop bound.
    pub hop_declines: u64,
    /// Requests served from a relay cache.
    pub cache_hits: u64,
    /// Blocks evicted from relay caches.
    pub cache_evictions: u64,
    /// The busiest node's served bytes / the mean node's.
    pub busiest_per_mean: f64,
}

impl Summary {
    /// Builds the summary of a finished run.
    pub fn build(
        scenario: &str,
        seed: u64,
        m: &Metrics,
        sim_seconds: f64,
        wall_seconds: f64,
        trace_digest: String,
    ) -> Summary {
        let shares = m.top_shares();
        let mean_top = mean(&shares);
        let round_mean_top = mean(&m.round_top_shares());
        let two_gets_round_mean_top = mean(&m.round_opening_top_shares());
        let max_top = shares.iter().copied().fold(0.0, f64::max);
        let nb_max = m.node_bytes.iter().copied().max().unwrap_or(0);
        let nb_mean = if m.node_bytes.is_empty() {
            0
        } else {
            m.node_bytes.iter().sum::<u64>() / m.node_bytes.len() as u64
        };
        Summary {
            scenario: scenario.to_string(),
            seed,
            reads: Reads {
                started: m.reads_started,
                found: m.reads_found,
                absent: m.reads_absent,
                false_absent: m.reads_false_absent,
                false_not_found: m.reads_false_not_found,
                busy: m.reads_busy,
                unavailable: m.reads_unavailable,
                invalid: m.reads_invalid,
                wrong_bytes: m.wrong_bytes,
                unfinished: m.reads_unfinished,
            },
            downloads: Downloads {
                started: m.downloads_started,
                completed: m.downloads_completed,
                completed_per_round: m.rounds.iter().map(|r| r.1).collect(),
            },
            first_read_share: FirstReadShare {
                mean_top: round4(mean_top),
                max_top: round4(max_top),
                round_mean_top: round4(round_mean_top),
                two_gets_round_mean_top: round4(two_gets_round_mean_top),
            },
            read_ms: Percentiles::of(&m.read_ns),
            download_ms: Percentiles::of(&m.download_ns),
            gets: Gets {
                total: m.gets_total,
                hedged: m.gets_hedged,
                found: m.get_count(GetResult::Found),
                not_found: m.get_count(GetResult::NotFound),
                refused: m.get_count(GetResult::Refused),
                dial_failed: m.get_count(GetResult::DialFailed),
                timed_out: m.get_count(GetResult::TimedOut),
                closed: m.get_count(GetResult::Closed),
                cancelled: m.get_count(GetResult::Cancelled),
                corrupt: m.get_count(GetResult::Corrupt),
            },
            refusals: m.refusals,
            breaker_opens: m.breaker_opens,
            node_bytes: NodeBytes {
                max: nb_max,
                mean: nb_mean,
            },
            limit_hits: m.limit_hits.clone(),
            events: m.events,
            sim_seconds: round3(sim_seconds),
            wall_seconds: round3(wall_seconds),
            trace_digest,
            origin: m.relay.as_ref().map(|r| OriginSummary {
                egress_bytes: r.origin_bytes,
                requests: r.origin_requests,
                egress_per_file: round4(r.origin_per_file()),
                egress_bytes_per_round: r.origin_bytes_by_round.clone(),
                all_readers_ms_per_round: r
                    .round_span_ns
                    .iter()
                    .map(|&ns| round3(ns as f64 / 1e6))
                    .collect(),
                reader_fetches: r.reader_origin_fetches,
                relays: r.relays,
                flights_led: r.flights_led,
                single_flight_joins: r.flight_joins,
                flights_full: r.flights_full,
                parent_fetches: r.parent_fetches,
                parent_fallbacks: r.parent_fallbacks,
                hop_declines: r.hop_declines,
                cache_hits: r.cache_hits,
                cache_evictions: r.cache_evictions,
                busiest_per_mean: round4(busiest_per_mean(&m.node_bytes)),
            }),
        }
    }

    /// The summary as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("summary serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let ns: Vec<u64> = (1..=100).map(|i| i * 1_000_000).collect();
        let p = Percentiles::of(&ns);
        assert_eq!((p.p50, p.p95, p.p99, p.max), (50.0, 95.0, 99.0, 100.0));
        assert_eq!(Percentiles::of(&[]), Percentiles::default());
    }

    #[test]
    fn top_share_is_per_block_busiest_over_total() {
        let mut m = Metrics::new(3, 2, 1);
        m.first_gets[0] = vec![2, 1, 1];
        m.first_gets[1] = vec![0, 0, 0];
        assert_eq!(m.top_shares(), vec![0.5]);
    }

    #[test]
    fn round_top_share_is_per_round_and_block() {
        let mut m = Metrics::new(3, 1, 2);
        for (round, node) in [(0, 0), (0, 0), (0, 1), (1, 1), (1, 2)] {
            m.first_get(round, 0, node);
        }
        assert_eq!(m.first_gets[0], vec![2, 2, 1]);
        assert_eq!(m.top_shares(), vec![0.4]);
        let per_round = m.round_top_shares();
        assert_eq!(per_round.len(), 2);
        assert!((per_round[0] - 2.0 / 3.0).abs() < 1e-12 && per_round[1] == 0.5);
    }

    #[test]
    fn summary_has_the_stable_keys() {
        let m = Metrics::new(1, 1, 1);
        let s = Summary::build("x", 3, &m, 1.0, 0.5, "00".into());
        let v: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        for key in [
            "scenario",
            "seed",
            "reads.started",
            "reads.found",
            "reads.absent",
            "reads.false_absent",
            "reads.false_not_found",
            "reads.busy",
            "reads.unavailable",
            "reads.invalid",
            "downloads.started",
            "downloads.completed",
            "first_read_share.mean_top",
            "first_read_share.max_top",
            "first_read_share.round_mean_top",
            "first_read_share.two_gets_round_mean_top",
            "read_ms.p50",
            "read_ms.p95",
            "read_ms.p99",
            "read_ms.max",
            "download_ms.p50",
            "download_ms.p95",
            "download_ms.p99",
            "download_ms.max",
            "gets.total",
            "gets.hedged",
            "refusals",
            "breaker_opens",
            "node_bytes.max",
            "node_bytes.mean",
            "events",
            "sim_seconds",
            "wall_seconds",
            "trace_digest",
        ] {
            let mut cur = &v;
            for part in key.split('.') {
                cur = cur.get(part).unwrap_or_else(|| panic!("missing {key}"));
            }
        }
    }
}
