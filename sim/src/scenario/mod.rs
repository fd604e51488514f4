//! Scenario files: the TOML schema, its defaults, and validation.
//!
//! A scenario describes one arm of an experiment: the cluster (nodes, NAT share, upload
//! bandwidth), the network (per-link latency distribution), the listener limits and what a
//! full listener does, the hot file, the readers (how many, from how many addresses, when
//! they start, how many rounds), the client policies (spreading, hedge, cooldowns, refusal
//! waits, breaker) and a fault timeline. Every key has a default (see `docs/sim.md`), so a
//! scenario names only what it changes.
//!
//! Parsing is strict: unknown keys and wrong types are rejected by serde with the key and
//! line; impossible values (zero nodes, a NAT share larger than the cluster, ...) are
//! rejected by [`Scenario::validate`] with the key named and its line looked up in the text.

use std::fmt;
use std::path::Path;

use serde::Deserialize;

mod size;
#[cfg(test)]
mod tests;
mod validate;

pub use size::{show, Budget, Estimate, Term, EVENTS_PER_READ};
pub use validate::{
    MAX_BLOCKS, MAX_FLAP_STEPS, MAX_LATENCY_MS, MAX_NODES, MAX_READERS, MAX_SECS, MAX_SWEEP_FAULTS,
    MAX_TIMEOUT_MS,
};

/// Why a scenario could not be loaded. Every variant names the file; value errors name the
/// offending key and, when it appears in the file, its line.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file does not exist or cannot be read (the caller's mistake, not the file's).
    #[error("cannot read scenario file {path}: {source}")]
    Read {
        /// The path given on the command line.
        path: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown key, or a value of the wrong type.
    #[error("{path}: {message}")]
    Parse {
        /// The scenario file.
        path: String,
        /// toml's message: it names the key and shows the line.
        message: String,
    },
    /// A key has a value the simulator cannot run (for example `cluster.nodes = 0`).
    #[error("{path}:{line}: invalid value for `{key}`: {reason}")]
    Invalid {
        /// The scenario file.
        path: String,
        /// 1-based line of the key, or 0 when the key was left at its default.
        line: usize,
        /// Dotted key, e.g. `listener.max_sessions`.
        key: String,
        /// What is wrong with the value.
        reason: String,
    },
}

/// One experiment arm. See the module doc and `docs/sim.md` for every key.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    /// Name printed in reports and the JSON summary; defaults to the file stem.
    pub name: String,
    /// One line saying what the arm is.
    pub description: String,
    /// Default seed when `--seed` is not given.
    pub seed: u64,
    /// Nodes: count, NAT share, upload bandwidth, close-group size.
    pub cluster: Cluster,
    /// Per-link latency.
    pub network: Network,
    /// Listener admission limits and full-listener behaviour.
    pub listener: Listener,
    /// The hot file everybody reads.
    pub file: File,
    /// The simulated origin (used when `file.placement = "origin"`).
    pub origin: Origin,
    /// Relaying at the nodes (used when `file.placement = "origin"`).
    pub relay: Relay,
    /// Who reads, from where, when.
    pub readers: Readers,
    /// Client policies.
    pub client: Client,
    /// Per-reader circuit breaker.
    pub breaker: BreakerCfg,
    /// The fault timeline, applied in order of `at_secs`.
    pub faults: Vec<Fault>,
    /// Random faults drawn per seed in `--seeds` sweeps.
    pub sweep: Sweep,
    /// The reference's figures for this arm, printed beside ours (display only).
    pub reference: Reference,
    /// Other scenario files (paths relative to this one) run with the same seed after this
    /// one, and printed side by side with it: the A/B table.
    pub compare: Vec<String>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            name: String::new(),
            description: String::new(),
            seed: 1,
            cluster: Cluster::default(),
            network: Network::default(),
            listener: Listener::default(),
            file: File::default(),
            origin: Origin::default(),
            relay: Relay::default(),
            readers: Readers::default(),
            client: Client::default(),
            breaker: BreakerCfg::default(),
            faults: Vec::new(),
            sweep: Sweep::default(),
            reference: Reference::default(),
            compare: Vec::new(),
        }
    }
}

/// `[cluster]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Cluster {
    /// Number of storage nodes.
    pub nodes: u32,
    /// How many of them sit behind NAT: readers cannot dial them directly (the dial is
    /// never answered), but they hold data and appear in lookups like any other node.
    pub nat_nodes: u32,
    /// Each node's upload bandwidth in Mbit/s, shared by its concurrent transfers.
    pub upload_mbps: f64,
    /// Holders per block: the block's XOR close group.
    pub close_group: u32,
    /// Seed of the placement (node ids, block keys, which nodes sit behind NAT). Unset:
    /// the run seed, so every seed is another cluster and another file. Set: every seed
    /// replays the same cluster and file, as repeated runs on one testnet do, and only the
    /// timing (latencies, start offsets, reads' choices) varies.
    pub placement_seed: Option<u64>,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            nodes: 60,
            nat_nodes: 0,
            upload_mbps: 100.0,
            close_group: 7,
            placement_seed: None,
        }
    }
}

/// `[network]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Network {
    /// One-way latency of a reader-node link, drawn once per link.
    pub latency: Latency,
    /// A dial a listener ignored is retransmitted after this long, then after twice that,
    /// and so on until the dial timeout (STUN's 500 ms doubling schedule; a TCP SYN's is
    /// 1 s). A slot that frees meanwhile admits the retransmission. 0 = no retransmits.
    pub dial_retransmit_ms: u64,
    /// Most Mbit/s one transfer can reach (the reader connection's ceiling: a browser's
    /// WebRTC data channel, a long fat pipe's window). 0 = no ceiling beyond the node's
    /// upload share.
    pub transfer_mbps: f64,
    /// How requests share connections: `"http1"` (peerblock: one request at a time per
    /// connection, a second concurrent request to the same node dials another) or
    /// `"multiplexed"` (the reference's WebRTC session: one per reader and node, requests
    /// as channels within it).
    pub transport: Transport,
}

/// How a reader's requests to one node share connections.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// One request at a time per connection (HTTP/1.1 without pipelining).
    Http1,
    /// One session per reader and node carrying several requests.
    Multiplexed,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            latency: Latency::default(),
            dial_retransmit_ms: 500,
            transfer_mbps: 0.0,
            transport: Transport::Http1,
        }
    }
}

/// A one-way latency distribution, drawn once per (reader, node) link.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, tag = "dist", rename_all = "kebab-case")]
pub enum Latency {
    /// Every link has the same latency.
    Constant {
        /// Milliseconds.
        ms: f64,
    },
    /// Uniform between `min_ms` and `max_ms`.
    Uniform {
        /// Lower bound, milliseconds.
        min_ms: f64,
        /// Upper bound, milliseconds.
        max_ms: f64,
    },
    /// Log-normal with the given median and shape (heavy right tail, like the internet).
    Lognormal {
        /// Median, milliseconds.
        median_ms: f64,
        /// Standard deviation of the underlying normal.
        sigma: f64,
    },
}

impl Default for Latency {
    fn default() -> Self {
        Latency::Uniform {
            min_ms: 10.0,
            max_ms: 60.0,
        }
    }
}

/// What a listener with no free slot does with a new dial or request.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum WhenFull {
    /// The reference's old transport: a full listener ignores the dial; the client waits
    /// out its dial timeout and suppresses the node for the long failure cooldown.
    Silent,
    /// peerblock: an explicit refusal with Retry-After, one round trip after the dial.
    Refuse,
}

impl fmt::Display for WhenFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WhenFull::Silent => "silent",
            WhenFull::Refuse => "refuse",
        })
    }
}

/// `[listener]`: per-node admission limits.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Listener {
    /// Concurrent sessions (one per reader that talked to the node recently).
    pub max_sessions: u32,
    /// Concurrent sessions from one source address.
    pub max_sessions_per_source: u32,
    /// Concurrent channels: each session holds one, each request in flight one more.
    pub max_channels: u32,
    /// Concurrent requests being served.
    pub max_requests: u32,
    /// Concurrent requests on one session (peerblock's server default: 2).
    pub max_requests_per_session: u32,
    /// Response memory a request reserves against the byte budgets, KiB; 0 reserves the
    /// whole response (peerblock's server), a window models a transport that streams
    /// responses in frames (the reference's WebRTC transport).
    pub reserve_kib: u64,
    /// Budget of response bytes in flight across all sessions, MiB.
    pub max_inflight_mib: u32,
    /// Budget of response bytes in flight per source address, MiB.
    pub max_inflight_per_source_mib: u32,
    /// What a full listener does with a new session.
    pub when_full: WhenFull,
    /// Retry-After carried by an explicit refusal, seconds.
    pub retry_after_secs: u64,
    /// A session nobody used for this long is closed and frees its slot, seconds.
    pub session_idle_secs: u64,
}

impl Default for Listener {
    fn default() -> Self {
        Listener {
            max_sessions: 256,
            max_sessions_per_source: 4,
            max_channels: 512,
            max_requests: 512,
            max_requests_per_session: 2,
            reserve_kib: 0,
            max_inflight_mib: 64,
            max_inflight_per_source_mib: 16,
            when_full: WhenFull::Refuse,
            retry_after_secs: 15,
            session_idle_secs: 30,
        }
    }
}

/// `[file]`: the hot content.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct File {
    /// File size, MiB.
    pub size_mib: u64,
    /// Block size, KiB; the last block holds the remainder.
    pub block_kib: u64,
    /// Where the blocks are when the run starts.
    pub placement: Placement,
}

impl Default for File {
    fn default() -> Self {
        File {
            size_mib: 50,
            block_kib: 4096,
            placement: Placement::CloseGroup,
        }
    }
}

/// `file.placement`: where the file's blocks are when the run starts.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Every block is on its close group from the start (the testnet replays).
    #[default]
    CloseGroup,
    /// Every block is at the simulated origin only (`[origin]`): no node holds any. Readers
    /// name the origin in every GET (`X-DART-Origin`), nodes relay misses through the
    /// block's parent or the origin and cache what they relayed (`[relay]`).
    Origin,
}

/// `[origin]`: the simulated origin server of `file.placement = "origin"`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Origin {
    /// The origin's upload rate limit in Mbit/s, shared by its concurrent responses.
    pub upload_mbps: f64,
    /// One-way latency between the origin and any node or reader, ms.
    pub latency_ms: f64,
    /// Whether a read that peers cannot serve ends by fetching from the origin itself
    /// (core's `ReadConfig::origin`, what `peerblock-node fetch --origin` sets).
    pub reader_fallback: bool,
}

impl Default for Origin {
    fn default() -> Self {
        Origin {
            upload_mbps: 100.0,
            latency_ms: 20.0,
            reader_fallback: true,
        }
    }
}

/// `[relay]`: how nodes relay misses when `file.placement = "origin"`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Relay {
    /// Each node's cache of relayed blocks, MiB (least recently used evicted first).
    pub cache_mib: u64,
    /// Core's relay hop bound (`RelayConfig::max_hop`): a request whose `X-DART-Hop` is at
    /// or past it is declined (404) instead of relayed.
    pub max_hop: u32,
    /// One-way latency between two nodes, ms (node-to-node relay requests).
    pub node_latency_ms: f64,
    /// Relay through the block's parent (`Parent::Placement`, what `peerblock-node serve`
    /// sets). `false`, an ablation: every relaying node asks the origin (`Parent::None`).
    pub through_parent: bool,
    /// Concurrent relayed misses at one node share one upstream fetch (core's
    /// `RelayFlights`). `false`, an ablation: every relayed miss fetches on its own.
    pub single_flight: bool,
}

impl Default for Relay {
    fn default() -> Self {
        Relay {
            cache_mib: 1024,
            max_hop: peerblock_core::server::DEFAULT_MAX_HOP,
            node_latency_ms: 1.0,
            through_parent: true,
            single_flight: true,
        }
    }
}

/// `[readers]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Readers {
    /// Number of readers (browsers, clients).
    pub count: u32,
    /// Distinct source addresses; reader `i` uses address `i % addresses`. 0 = one each.
    pub addresses: u32,
    /// Each reader starts a round at a uniformly drawn offset within this window, seconds.
    pub start_spread_secs: f64,
    /// When round 0 starts, seconds.
    pub first_round_at_secs: f64,
    /// Downloads per reader: round `r` starts at `first_round_at + r * round_interval`.
    pub rounds: u32,
    /// Time between round starts, seconds.
    pub round_interval_secs: f64,
    /// Blocks a reader reads concurrently during one download.
    pub parallel_blocks: u32,
    /// Whether a reader keeps its cooldown table and breaker from one round to the next
    /// (one long-lived page) or starts each round fresh (a reloaded page).
    pub keep_state_between_rounds: bool,
}

impl Default for Readers {
    fn default() -> Self {
        Readers {
            count: 64,
            addresses: 0,
            start_spread_secs: 10.0,
            first_round_at_secs: 0.0,
            rounds: 1,
            round_interval_secs: 240.0,
            parallel_blocks: 4,
            keep_state_between_rounds: true,
        }
    }
}

/// The spreading choice for a read's first GETs.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum SpreadPolicy {
    /// Every reader asks the XOR-nearest holder first (the reference's old client).
    Nearest,
    /// Uniform among the close group, then nearest-first (the reference's new client).
    Uniform,
    /// peerblock: the less loaded of two random holders (core's
    /// `Spread::LeastLoadedOfTwo`): by the per-key counts in the lookup replies with
    /// `lookup_load_hints`, else by the load the holders advertised in their responses,
    /// plus this reader's own GETs in flight.
    LoadAware,
}

impl SpreadPolicy {
    /// All policies, in report order.
    pub const ALL: [SpreadPolicy; 3] = [
        SpreadPolicy::Nearest,
        SpreadPolicy::Uniform,
        SpreadPolicy::LoadAware,
    ];
}

impl fmt::Display for SpreadPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SpreadPolicy::Nearest => "nearest",
            SpreadPolicy::Uniform => "uniform",
            SpreadPolicy::LoadAware => "load-aware",
        })
    }
}

/// `client.absence`: which `NotFound` answers prove absence.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum AbsenceRule {
    /// peerblock's rule (`peerblock_core::read::Absence::NearestCloseGroup`).
    NearestCloseGroup,
    /// The reference client's rule (`peerblock_core::read::Absence::AnyCloseGroup`).
    AnyCloseGroup,
}

/// `client.hedge`: which GETs are hedged after `client.hedge_delay_ms`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum HedgePolicy {
    /// peerblock's rule (`peerblock_core::read::HedgeRule::OnSilence`): only a GET that
    /// showed no progress (no response head yet) within the delay.
    OnSilence,
    /// The reference client's rule (`peerblock_core::read::HedgeRule::AfterDelay`): any
    /// GET still unanswered after the delay, its body flowing or not.
    AfterDelay,
}

/// `[client]`: the reader's policies.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Client {
    /// First-GET choice.
    pub spread: SpreadPolicy,
    /// A second GET is sent if the first has not answered after this long, ms.
    pub hedge_delay_ms: u64,
    /// Which GETs the hedge delay applies to: `"on-silence"` (peerblock: only a GET whose
    /// response has not started arriving) or `"after-delay"` (the reference client: any
    /// GET not finished). See `peerblock_core::read::HedgeRule`.
    pub hedge: HedgePolicy,
    /// Pause before a read retries after a round that found nothing, ms.
    pub retry_delay_ms: u64,
    /// Times a read waits out live refusals before reporting the holders busy.
    pub max_refusal_waits: u32,
    /// Suppression after an explicit refusal without Retry-After, seconds.
    pub refused_cooldown_secs: u64,
    /// Suppression after a failed dial, seconds.
    pub failed_cooldown_secs: u64,
    /// A dial with no answer fails after this long, ms.
    pub dial_timeout_ms: u64,
    /// An accepted request with no response header fails after this long, ms.
    pub response_timeout_ms: u64,
    /// A whole exchange, body included, fails after this long, ms.
    pub request_timeout_ms: u64,
    /// Discovery leaves endpoints this reader's cooldown table suppresses out of its
    /// answers: the reference client's behaviour ("a refused holder is left out of
    /// discovery and reads for 15 s"; a failed dial keeps a node out for 30 min), so a read
    /// that starts while a holder is suppressed never learns of it, and the nearest peers it
    /// does learn of may all be non-holders. `false` (peerblock): discovery returns every
    /// peer it knows and the read machine itself skips the ineligible ones, so they still
    /// count as nearer possible holders against an absence.
    pub discovery_skips_suppressed: bool,
    /// The client reports a read that ended `Unavailable` (holders unreachable: dial
    /// timeouts, closed streams, suppressed endpoints) to its user as "record not found",
    /// as the reference's read does: it returns `Ok(None)` both for an absent record and
    /// for "reads that fail for other reasons (timeouts, unreachable endpoints)". Only what
    /// is *reported* changes (`reads.false_not_found`); the read machine and its outcome
    /// counts are the same. `false` (peerblock): `Unavailable` is reported as a network
    /// error, never as "not found".
    pub reports_unavailable_as_not_found: bool,
    /// Which `NotFound` answers prove a block absent: `"nearest-close-group"` (peerblock:
    /// the nearest close group of known peers all answered) or `"any-close-group"` (the
    /// reference client: any close group's worth of answers, even from the peers past
    /// unreachable holders). See `peerblock_core::read::Absence`.
    pub absence: AbsenceRule,
    /// Discovery round trips per lookup (a lookup costs this many RTTs to the reader's
    /// nearest node to the key).
    pub lookup_rtts: u32,
    /// Peers a lookup returns, nearest first (Kademlia's k).
    pub lookup_peers: u32,
    /// Probability that a lookup misses any one node (drawn per lookup and node): an
    /// iterative lookup over partial routing tables does not find every near node, and
    /// different readers' lookups disagree. 0 = perfect, identical lookups.
    pub lookup_miss: f64,
    /// Retry rounds when a round proved nothing and nobody was refusing.
    pub max_plain_retries: u32,
    /// Lookup replies carry per-key load hints: every holder the reader's lookup reaches
    /// directly reports its decayed count of GETs for the block
    /// (`peerblock_core::load::KeyCounter`), and the read machine's load-aware spreads
    /// compare those (`Read::handle_lookup_peers`). NAT'd, partitioned, crashed and
    /// silent nodes report nothing. `false`: plain lookups.
    pub lookup_load_hints: bool,
    /// What a lookup knows: `"oracle"` (every lookup returns the true nearest nodes to
    /// the key, identical for every reader) or `"kademlia"` (per-reader and per-node
    /// routing tables with at most `bucket_size` nodes per bucket, walked for
    /// `lookup_rtts` rounds; see `model::routing`).
    pub routing: RoutingModel,
    /// Kademlia bucket size for `routing = "kademlia"` (nodes kept per bucket, and the
    /// most nodes a queried node returns).
    pub bucket_size: u32,
}

/// `client.routing`: how lookups learn of nodes.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RoutingModel {
    /// Every lookup returns the true nearest nodes.
    Oracle,
    /// Per-reader and per-node Kademlia routing tables (`model::routing`).
    Kademlia,
}

impl Default for Client {
    fn default() -> Self {
        Client {
            spread: SpreadPolicy::Uniform,
            hedge_delay_ms: 1_000,
            hedge: HedgePolicy::OnSilence,
            retry_delay_ms: 1_000,
            max_refusal_waits: 3,
            refused_cooldown_secs: 15,
            failed_cooldown_secs: 1_800,
            dial_timeout_ms: 10_000,
            response_timeout_ms: 10_000,
            request_timeout_ms: 30_000,
            discovery_skips_suppressed: false,
            reports_unavailable_as_not_found: false,
            absence: AbsenceRule::NearestCloseGroup,
            lookup_rtts: 3,
            lookup_peers: 20,
            lookup_miss: 0.0,
            max_plain_retries: 1,
            lookup_load_hints: false,
            routing: RoutingModel::Oracle,
            bucket_size: 20,
        }
    }
}

/// `[breaker]`: one circuit breaker per reader, keyed by node.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerCfg {
    /// Whether readers run a breaker at all (the reference's browser client had none).
    pub enabled: bool,
    /// Consecutive soft failures that open a circuit.
    pub failure_threshold: u32,
    /// How long an open circuit stays open before a half-open probe, ms.
    pub cooldown_ms: u64,
    /// Probes admitted while half-open.
    pub half_open_probes: u32,
}

impl Default for BreakerCfg {
    fn default() -> Self {
        BreakerCfg {
            enabled: true,
            failure_threshold: 5,
            cooldown_ms: 5_000,
            half_open_probes: 1,
        }
    }
}

/// Which node a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Node by index (0-based, in node-ID order of creation).
    Node(u32),
    /// The `rank`-th nearest holder of block `block` (rank 0 = the XOR-nearest), so a
    /// scenario can hit "the busiest holder" whatever IDs the seed draws.
    Holder {
        /// Block index in the file.
        block: u32,
        /// Position in the block's close group by XOR distance.
        rank: u32,
    },
}

/// What happens to the target.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The node stops: dials and requests get no answer, sessions are lost.
    Crash,
    /// A crashed or silent node comes back with no sessions.
    Restart,
    /// The node accepts dials and requests but never answers them.
    Silent,
    /// The node's upload bandwidth is multiplied by `factor`.
    Slow,
    /// Readers cannot reach the node (dials and responses are lost) until `heal`.
    Partition,
    /// Ends a partition.
    Heal,
    /// The node alternates crash and restart every `period_secs` for `duration_secs`.
    Flap,
    /// The node answers GETs with wrong bytes until restarted; readers must detect it.
    Corrupt,
}

/// One `[[faults]]` entry.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// When, seconds of simulated time.
    pub at_secs: f64,
    /// What happens.
    pub kind: FaultKind,
    /// Target by node index.
    #[serde(default)]
    pub node: Option<u32>,
    /// Target by block (with `holder_rank`).
    #[serde(default)]
    pub holder_block: Option<u32>,
    /// Rank in that block's close group (default 0, the nearest).
    #[serde(default)]
    pub holder_rank: Option<u32>,
    /// Bandwidth multiplier for `slow` (0 < factor).
    #[serde(default)]
    pub factor: Option<f64>,
    /// How long a `flap` lasts, seconds.
    #[serde(default)]
    pub duration_secs: Option<f64>,
    /// Half-period of a `flap` (time down, then time up), seconds.
    #[serde(default)]
    pub period_secs: Option<f64>,
}

impl Fault {
    /// The node this fault hits (validated: exactly one of `node` / `holder_block`).
    pub fn target(&self) -> Target {
        match (self.node, self.holder_block) {
            (Some(n), _) => Target::Node(n),
            (None, Some(b)) => Target::Holder {
                block: b,
                rank: self.holder_rank.unwrap_or(0),
            },
            (None, None) => Target::Node(0),
        }
    }
}

/// `[sweep]`: faults drawn at random per seed when running `--seeds A..B`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Sweep {
    /// Crash-and-restart faults drawn per seed.
    pub crashes: u32,
    /// Silent-node faults drawn per seed.
    pub silent: u32,
    /// Partition-and-heal faults drawn per seed.
    pub partitions: u32,
    /// Slow-node faults drawn per seed.
    pub slow: u32,
    /// Faults start uniformly within this window, seconds.
    pub window_secs: f64,
    /// How long a drawn fault lasts, seconds (upper bound; drawn uniformly from 1 s).
    pub max_duration_secs: f64,
}

impl Default for Sweep {
    fn default() -> Self {
        Sweep {
            crashes: 1,
            silent: 1,
            partitions: 1,
            slow: 1,
            window_secs: 60.0,
            max_duration_secs: 60.0,
        }
    }
}

/// `[reference]`: what the reference measured for this arm, shown beside our figures.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Reference {
    /// Completed downloads in the reference, e.g. "61–66%".
    pub completed: String,
    /// Busiest holder's share of first reads in the reference, e.g. "48%".
    pub busiest_share: String,
    /// Anything else worth printing.
    pub note: String,
    /// The reference's completed downloads as a range, percent `[low, high]`: printed in
    /// the comparison table's "reference" column, and our figure is marked `!` when
    /// outside it. Absent: no figure to check (an arm the reference never ran).
    pub completed_pct: Option<[f64; 2]>,
    /// The reference's busiest-holder share of first reads, percent `[low, high]`, checked
    /// against our per-round share of each read's first two GETs
    /// (`first_read_share.two_gets_round_mean_top`; docs/sim.md says why).
    pub busiest_pct: Option<[f64; 2]>,
}

impl Scenario {
    /// Loads and validates a scenario file. The name defaults to the file stem.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: shown.clone(),
            source,
        })?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Scenario::parse(&text, &shown, &stem)
    }

    /// Parses and validates scenario text; `path` is only used in messages.
    pub fn parse(text: &str, path: &str, default_name: &str) -> Result<Scenario, ScenarioError> {
        let mut s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: path.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        if s.name.is_empty() {
            s.name = default_name.to_string();
        }
        s.validate()
            .map_err(|(key, reason)| ScenarioError::Invalid {
                path: path.to_string(),
                line: key_line(text, &key),
                key,
                reason,
            })?;
        Ok(s)
    }

    /// Number of blocks in the file.
    pub fn blocks(&self) -> u32 {
        let block = self.file.block_kib * 1024;
        let size = self.file.size_mib * 1024 * 1024;
        size.div_ceil(block) as u32
    }

    /// Size of block `i` in bytes (the last block holds the remainder).
    pub fn block_bytes(&self, i: u32) -> u64 {
        let block = self.file.block_kib * 1024;
        let size = self.file.size_mib * 1024 * 1024;
        let start = u64::from(i) * block;
        block.min(size - start)
    }
}

/// Finds the 1-based line where dotted `key` (e.g. `listener.max_sessions` or
/// `faults[2].factor`) is set in `text`, or 0 if it is not in the file (left at default).
/// A key inside an inline table (`network.latency.min_ms`) is found at its table's line.
pub fn key_line(text: &str, key: &str) -> usize {
    let line = key_line_exact(text, key);
    match key.rsplit_once('.') {
        Some((parent, _)) if line == 0 && parent.contains('.') => key_line(text, parent),
        _ => line,
    }
}

fn key_line_exact(text: &str, key: &str) -> usize {
    // Split "faults[2].factor" into table "faults", index 2, leaf "factor".
    let (table, leaf) = match key.rsplit_once('.') {
        Some((t, l)) => (t, l),
        None => ("", key),
    };
    let (table, index) = match table.split_once('[') {
        Some((t, rest)) => (t, rest.trim_end_matches(']').parse::<usize>().ok()),
        None => (table, None),
    };
    let mut current = String::new();
    let mut array_seen: Option<usize> = None;
    let mut table_line = 0;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(h) = line.strip_prefix("[[").and_then(|h| h.split("]]").next()) {
            current = h.trim().to_string();
            if current == table {
                array_seen = Some(array_seen.map_or(0, |i| i + 1));
                if index == array_seen {
                    table_line = n + 1;
                }
            }
            continue;
        }
        if let Some(h) = line.strip_prefix('[').and_then(|h| h.split(']').next()) {
            current = h.trim().to_string();
            if current == table {
                table_line = n + 1;
            }
            continue;
        }
        let in_table = current == table && (index.is_none() || index == array_seen);
        if in_table {
            if let Some((k, _)) = line.split_once('=') {
                if k.trim() == leaf {
                    return n + 1;
                }
            }
        }
        // Top-level dotted or inline form: `listener.max_sessions = 3`.
        if current.is_empty() {
            if let Some((k, _)) = line.split_once('=') {
                if k.trim() == key {
                    return n + 1;
                }
            }
        }
    }
    table_line
}
