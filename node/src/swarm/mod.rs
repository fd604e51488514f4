//! `peerblock-node swarm SCENARIO.toml`: a simulator scenario (docs/sim.md) run for real on
//! this machine, printing the simulator's report and JSON summary for it.
//!
//! What the scenario models, and what stands for it here:
//!
//! | scenario | for real |
//! |---|---|
//! | `cluster.nodes` | one `peerblock-node serve` **process** per node, its own store (the blocks it holds by the simulator's placement) and its own loopback address `127.1.H.L` |
//! | `cluster.upload_mbps`, `network.transfer_mbps` | `[listener] upload_bytes_per_second` (the node's shared token bucket) and `connection_upload_bytes_per_second` (each connection's), scaled |
//! | `cluster.nat_nodes` | the node's advertised address is a **blackhole** on its own IP: a backlog-0 listener whose accept queue the swarm filled, so dials get no answer (not a refusal); the node process runs on another port nobody is told of, and can dial out |
//! | `listener.*` | the node's `[listener]` admission limits; byte budgets scaled with the blocks |
//! | `readers` | in-process readers (this process), one driver [`Client`] per reader (per download with `keep_state_between_rounds = false`) dialing from its own address `127.2.H.L`, running core's read machine through the driver's [`Reader`](peerblock_tokio::reader::Reader), `parallel_blocks` at a time, in block order |
//! | `client.*` | the client's deadlines, breaker and cooldowns, the read configuration (`sim::world::read_config`), the reference client's discovery that skips suppressed peers and its "not found" for unavailable reads |
//! | a lookup | the scenario's `lookup_peers` nearest nodes (the simulator's placement), after `lookup_rtts` round trips of the modelled latency; with `lookup_load_hints`, each reachable node's decayed count of the GETs the readers sent it for the block (counted by the swarm, core's `load::KeyCounter`) |
//! | `faults`: `crash` / `restart` / `silent` / `flap` | SIGKILL of the node process / a new process on the same address (or SIGCONT after `silent`) / SIGSTOP (the kernel still completes dials, nothing answers) |
//!
//! Processes rather than in-process servers: a crash is a real process dying (its sockets
//! reset by the kernel, its in-flight work lost), a restart a real start-up from the
//! store, a stall a stopped process; and `--driver` is the node binary's own flag. 60 idle
//! node processes cost a few MB each.
//!
//! **Scale.** `--scale F` multiplies every block's size, the file's, the byte budgets and
//! both upload rates by `F`, so every transfer takes the time it takes in the scenario
//! with `F` times fewer bytes; it multiplies `readers.rounds` too (rounded, at least 1).
//! Times (start spread, round interval, timeouts) are the scenario's.
//!
//! Every child process is killed when the swarm ends (also on error and on Ctrl-C /
//! SIGTERM: `kill_on_drop`), and the work directory (stores, configs, node logs) is
//! removed unless `--keep`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use peerblock_core::bytes::Bytes;
use peerblock_core::load::KeyCounter;
use peerblock_core::time::Clock;
use peerblock_core::wire::ChunkKey;
use sim::metrics::Metrics as SimMetrics;
use sim::model::content::Content;
use sim::net::LatencyModel;
use sim::scenario::Scenario;
use tokio::process::Child;

use crate::client::Client;
use crate::metrics::Metrics;
use crate::node::DriverKind;
use crate::swarm_origin;

mod cluster;
mod plan;
mod reads;
mod run;
#[cfg(test)]
mod tests;

pub use plan::{node_config_text, node_ip, plan, reader_ip, scale_scenario};
pub use run::swarm;

/// Most nodes a swarm starts: each is a process with its store and threads.
pub const MAX_SWARM_NODES: u32 = 500;

/// Most readers a swarm runs (each download holds up to `parallel_blocks` reads).
pub const MAX_SWARM_READERS: u32 = 4096;

pub use crate::node::{DEFAULT_MAX_DOWNLOADS, DEFAULT_SCALE};

/// How long a node process may take to print `listening ADDR`.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one connect filling a blackhole's accept queue may take: the first that takes
/// longer means the queue is full. Generous, so a link with emulated latency (a network
/// namespace with `netem`) is not mistaken for a full queue.
const BLACKHOLE_FILL_TIMEOUT: Duration = Duration::from_secs(1);

/// How often progress goes to stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Largest block the swarm's stores accept (the node's own bound).
const MAX_BLOCK: u64 = crate::source::DEFAULT_MAX_BLOCK_SIZE;

/// Everything `swarm` needs, validated.
#[derive(Clone, Debug)]
pub struct SwarmPlan {
    /// The scenario file.
    pub path: PathBuf,
    /// The scenario, loaded and validated by the simulator.
    pub scenario: Scenario,
    /// The run seed.
    pub seed: u64,
    /// `--scale`.
    pub scale: f64,
    /// `--json` (`-` = stdout instead of the report).
    pub json: Option<PathBuf>,
    /// The nodes' driver.
    pub driver: DriverKind,
    /// Downloads at once.
    pub max_downloads: usize,
    /// No progress on stderr.
    pub quiet: bool,
    /// Keep the work directory.
    pub keep: bool,
    /// Where stores, configs and logs go.
    pub work_dir: PathBuf,
    /// The `peerblock-node` binary the nodes run.
    pub exe: PathBuf,
    /// The scaled quantities.
    pub scaled: Scaled,
    /// Each node's `--config` text (validated).
    pub node_config: String,
    /// nginx, the origin of a `file.placement = "origin"` scenario (`None` otherwise).
    pub nginx: Option<PathBuf>,
}

/// The scenario's sizes and rates at `--scale`.
#[derive(Clone, Debug, PartialEq)]
pub struct Scaled {
    /// Rounds run.
    pub rounds: u32,
    /// Each block's length, bytes.
    pub block_len: Vec<u64>,
    /// A node's upload budget, bytes per second.
    pub upload_bytes_per_second: u64,
    /// A connection's ceiling, bytes per second (0 = none).
    pub connection_bytes_per_second: u64,
    /// `listener.max_inflight_mib`, bytes.
    pub max_inflight_bytes: u64,
    /// `listener.max_inflight_per_source_mib`, bytes.
    pub max_inflight_bytes_per_source: u64,
    /// `relay.cache_mib`, bytes (each node's `[store] cache_bytes`).
    pub cache_bytes: u64,
    /// `origin.upload_mbps`, bytes per second.
    pub origin_bytes_per_second: u64,
}

/// Node health as the swarm made it (for load hints: only a reachable node reports).
const UP: u8 = 0;
const DOWN: u8 = 1;
const STALLED: u8 = 2;

/// The work directory; removed on drop unless kept.
struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// One node: its files, its process, its addresses.
struct NodeProc {
    index: u32,
    id_hex: String,
    store: PathBuf,
    config: PathBuf,
    log: PathBuf,
    /// Where the process listens (kernel-picked port, kept across restarts).
    listen: SocketAddr,
    child: Option<Child>,
    /// `--seed` (with `file.placement = "origin"`: node 0's address, for every other node).
    seed: Option<SocketAddr>,
    /// Serve `/metrics` on the node's own address (`--metrics IP:0`), scraped at the end.
    metrics: bool,
    /// Where the process serves `/metrics`, once started with `metrics`.
    metrics_addr: Option<SocketAddr>,
    /// The members the node last said it knows (its `members N` lines).
    members: Arc<AtomicU64>,
}

/// A blackholed address: a backlog-0 listener that never accepts, its accept queue
/// filled by the swarm's own connections, so the kernel drops further SYNs (the dialer
/// sees no answer, as behind NAT).
struct Blackhole {
    addr: SocketAddr,
    _listener: std::net::TcpListener,
    _queued: Vec<std::net::TcpStream>,
}

/// The running cluster: every node process, the NAT blackholes, the health the faults
/// set.
struct Cluster {
    exe: PathBuf,
    driver: DriverKind,
    nodes: Vec<NodeProc>,
    _blackholes: Vec<Blackhole>,
    health: Arc<Vec<AtomicU8>>,
}

/// Per-node decayed GET counts per block, as the lookup hints report them.
struct Hints {
    counters: Mutex<Vec<KeyCounter<u32>>>,
}

/// What every reader shares.
struct World {
    s: Scenario,
    seed: u64,
    scale: f64,
    content: Content,
    nat: Vec<bool>,
    health: Arc<Vec<AtomicU8>>,
    addrs: Vec<String>,
    node_of_addr: std::collections::HashMap<String, u32>,
    chunk: ChunkKey,
    blocks: Vec<Bytes>,
    latency: LatencyModel,
    hints: Option<Hints>,
    clock: Clock,
    metrics: Metrics,
    sim: Mutex<SimMetrics>,
    reads: AtomicU64,
    downloads_done: AtomicU64,
    downloads_completed: AtomicU64,
    /// Per round: when its last download ended so far.
    round_ends: Mutex<Vec<Option<Instant>>>,
    /// The origin of a `file.placement = "origin"` run.
    origin: Option<ObjectRun>,
}

/// nginx as the scenario's origin, and what the readers need to name it.
struct ObjectRun {
    server: swarm_origin::OriginServer,
    identity: Arc<peerblock_common::object::ObjectIdentity>,
    /// Every GET's `X-DART-Origin`.
    header: Arc<str>,
    /// The readers' own origin fetch (counts the blocks they took from it).
    fetch: crate::origin::ObjectOrigin,
}

/// The swarm's discovery for one reader: the simulator's lookup (the `lookup_peers`
/// nearest nodes, after `lookup_rtts` round trips), with the reference client's
/// suppression filter and the per-key hints when the scenario asks.
#[derive(Clone)]
struct SwarmDiscovery {
    world: Arc<World>,
    reader: u32,
    client: Client,
}
