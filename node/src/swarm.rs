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
//! | `readers` | in-process readers (this process), one driver [`Client`] per reader (per download with `keep_state_between_rounds = false`) dialing from its own address `127.2.H.L`, running core's read machine through the driver's [`Reader`], `parallel_blocks` at a time, in block order |
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

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use peerblock_core::bytes::Bytes;
use peerblock_core::client::{ClientConfig, Deadlines, Ending, ExchangeError, RequestTimeout};
use peerblock_core::load::{KeyCounter, KeyCounterConfig};
use peerblock_core::pace::MIN_RATE;
use peerblock_core::placement::Key;
use peerblock_core::read::{LookupPeer, ReadOutcome};
use peerblock_core::rng::{child_seed, indexed_seed, seeded, Rng};
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};
use sim::faults::{Act, Step};
use sim::metrics::{GetResult, Metrics as SimMetrics, Summary};
use sim::model::content::{node_of, Content};
use sim::net::LatencyModel;
use sim::scenario::{FaultKind, Placement, Scenario, Transport, WhenFull};
use sim::world::RunResult;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::{Client, ClientOptions, Fetched, LinkDelay, Local, Peer};
use crate::config::NodeConfig;
use crate::metrics::Metrics;
use crate::node::{DriverKind, NodeError};
use crate::reader::{BlockSpec, Candidate, Discovery, DiscoveryFuture, Reader};
use crate::source::FileStore;
use crate::swarm_origin;

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

fn usage(flag: &'static str, rule: impl Into<String>) -> NodeError {
    NodeError::Usage {
        flag,
        rule: rule.into(),
    }
}

/// The scenario at `scale`; an error names the scenario key that cannot be scaled.
pub fn scale_scenario(s: &Scenario, scale: f64) -> Result<Scaled, NodeError> {
    if !(scale.is_finite() && scale > 0.0 && scale <= 1.0) {
        return Err(usage(
            "--scale",
            format!("{scale} is out of range: more than 0, at most 1"),
        ));
    }
    let bytes = |x: f64| (x * scale).round() as u64;
    let block_len: Vec<u64> = (0..s.blocks())
        .map(|i| bytes(s.block_bytes(i) as f64).max(1))
        .collect();
    if let Some(b) = block_len.iter().find(|b| **b > MAX_BLOCK) {
        return Err(usage(
            "--scale",
            format!("a block of {b} bytes at this scale is above the node's {MAX_BLOCK}-byte bound (file.block_kib): lower --scale"),
        ));
    }
    let upload = bytes(s.cluster.upload_mbps * 1e6 / 8.0);
    if upload < MIN_RATE {
        return Err(usage(
            "--scale",
            format!("cluster.upload_mbps × scale is {upload} bytes/s, below the pacing minimum of {MIN_RATE}: raise --scale"),
        ));
    }
    let conn = if s.network.transfer_mbps > 0.0 {
        let c = bytes(s.network.transfer_mbps * 1e6 / 8.0);
        if c < MIN_RATE {
            return Err(usage(
                "--scale",
                format!("network.transfer_mbps × scale is {c} bytes/s, below the pacing minimum of {MIN_RATE}: raise --scale"),
            ));
        }
        c
    } else {
        0
    };
    // The reference transport reserves a send window per response (`reserve_kib`), the
    // real server the whole response: the budgets grow by block / window so they admit
    // the same number of concurrent responses as the scenario's.
    let window = match s.network.transport {
        Transport::Multiplexed if s.listener.reserve_kib > 0 => {
            (s.file.block_kib as f64 / s.listener.reserve_kib as f64).max(1.0)
        }
        _ => 1.0,
    };
    let mib = |m: u32| bytes(f64::from(m) * 1024.0 * 1024.0 * window);
    Ok(Scaled {
        rounds: ((f64::from(s.readers.rounds) * scale).round() as u32).max(1),
        block_len,
        upload_bytes_per_second: upload,
        connection_bytes_per_second: conn,
        max_inflight_bytes: mib(s.listener.max_inflight_mib),
        max_inflight_bytes_per_source: mib(s.listener.max_inflight_per_source_mib),
        cache_bytes: bytes(s.relay.cache_mib as f64 * 1024.0 * 1024.0),
        origin_bytes_per_second: bytes(s.origin.upload_mbps * 1e6 / 8.0).max(MIN_RATE),
    })
}

/// The `--config` every node of the swarm runs with: the scenario's listener at scale;
/// with `file.placement = "origin"` also the relay, its cache and fast roster rounds.
pub fn node_config_text(s: &Scenario, sc: &Scaled) -> String {
    let l = &s.listener;
    let origin = s.file.placement == Placement::Origin;
    let mut text = format!(
        "# written by peerblock-node swarm for scenario {name:?}\n\
         [listener]\n\
         max_sessions = {}\n\
         max_sessions_per_source = {}\n\
         max_requests = {}\n\
         max_requests_per_session = {}\n\
         max_inflight_bytes = {}\n\
         max_inflight_bytes_per_source = {}\n\
         retry_after = \"{}s\"\n\
         idle_timeout = \"{}s\"\n\
         relay = {origin}\n\
         upload_bytes_per_second = {}\n\
         connection_upload_bytes_per_second = {}\n\
         when_full = \"{}\"\n\
         max_channels = {}\n",
        l.max_sessions,
        l.max_sessions_per_source,
        l.max_requests,
        l.max_requests_per_session,
        sc.max_inflight_bytes,
        sc.max_inflight_bytes_per_source,
        l.retry_after_secs,
        l.session_idle_secs,
        sc.upload_bytes_per_second,
        sc.connection_bytes_per_second,
        match l.when_full {
            WhenFull::Refuse => "refuse",
            WhenFull::Silent => "silent",
        },
        // The reference transport's channel table, as a silent listener counts it.
        match (s.network.transport, l.when_full) {
            (Transport::Multiplexed, WhenFull::Silent) => l.max_channels as usize,
            _ => 0,
        },
        name = s.name,
    );
    if origin {
        text.push_str(&format!(
            "max_hop = {}\n\
             [store]\n\
             cache_bytes = {}\n\
             [read]\n\
             close_group_size = {}\n\
             # Rosters converge within seconds: every node is seeded with node 0.\n\
             [roster]\n\
             interval = \"1s\"\n\
             jitter = \"100ms\"\n",
            s.relay.max_hop, sc.cache_bytes, s.cluster.close_group
        ));
    }
    text
}

/// Validates a swarm run: the scenario (through the simulator's own parser and
/// validation), the scale, the bounds of a real run and what of the scenario cannot run
/// for real. Starts nothing.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    path: &Path,
    seed: Option<u64>,
    scale: f64,
    json: Option<PathBuf>,
    driver: DriverKind,
    max_downloads: usize,
    quiet: bool,
    keep: bool,
    work_dir: Option<PathBuf>,
) -> Result<SwarmPlan, NodeError> {
    let scenario = Scenario::load(path).map_err(|e| usage("SCENARIO", e.to_string()))?;
    let s = &scenario;
    if s.cluster.nodes > MAX_SWARM_NODES {
        return Err(usage(
            "SCENARIO",
            format!(
                "cluster.nodes is {}: a swarm starts one process per node, at most {MAX_SWARM_NODES}",
                s.cluster.nodes
            ),
        ));
    }
    if s.readers.count > MAX_SWARM_READERS {
        return Err(usage(
            "SCENARIO",
            format!(
                "readers.count is {}: a swarm runs at most {MAX_SWARM_READERS} readers",
                s.readers.count
            ),
        ));
    }
    for (i, f) in s.faults.iter().enumerate() {
        match f.kind {
            FaultKind::Crash | FaultKind::Restart | FaultKind::Silent | FaultKind::Flap => {}
            other => {
                return Err(usage(
                    "SCENARIO",
                    format!("faults[{i}].kind = {other:?} is not run for real (a swarm runs crash, restart, silent and flap)"),
                ))
            }
        }
    }
    if driver == DriverKind::Mio {
        return Err(usage(
            "--driver",
            "mio: the mio server has no upload pacing yet, and every scenario's cluster.upload_mbps needs it; use --driver tokio",
        ));
    }
    if max_downloads == 0 {
        return Err(usage(
            "--max-downloads",
            "0: at least one download must run",
        ));
    }
    let nginx = if s.file.placement == Placement::Origin {
        if !s.relay.through_parent || !s.relay.single_flight {
            return Err(usage(
                "SCENARIO",
                "relay.through_parent = false and relay.single_flight = false are ablations of the simulator: peerblock-node serve always relays through the parent and shares flights",
            ));
        }
        Some(crate::swarm_origin::find_nginx().ok_or_else(|| {
            usage(
                "SCENARIO",
                "file.placement = \"origin\" runs nginx as the origin, and nginx is not installed (apt-get install nginx-light)",
            )
        })?)
    } else {
        None
    };
    let scaled = scale_scenario(s, scale)?;
    let node_config = node_config_text(s, &scaled);
    NodeConfig::from_toml_str(&node_config).map_err(|e| {
        usage(
            "SCENARIO",
            format!("the scenario's listener at this scale is no valid node configuration: {e}"),
        )
    })?;
    let exe = std::env::current_exe().map_err(|e| {
        usage(
            "swarm",
            format!("cannot find the peerblock-node binary: {e}"),
        )
    })?;
    let work_dir = work_dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("peerblock-swarm-{}", std::process::id()))
    });
    Ok(SwarmPlan {
        path: path.to_owned(),
        seed: seed.unwrap_or(s.seed),
        scenario,
        scale,
        json,
        driver,
        max_downloads,
        quiet,
        keep,
        work_dir,
        exe,
        scaled,
        node_config,
        nginx,
    })
}

/// The loopback address of node `i`: `127.1.H.L`.
pub fn node_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// The loopback address of reader source `a`: `127.2.H.L`.
pub fn reader_ip(a: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 2, (a / 250 % 256) as u8, (a % 250 + 1) as u8)
}

/// The bytes of a block: BLAKE3's output stream keyed by its placement key.
fn block_bytes(key: &Key, len: u64) -> Bytes {
    let mut v = vec![0u8; len as usize];
    blake3::Hasher::new()
        .update(b"peerblock-swarm-block\0")
        .update(&key.0)
        .finalize_xof()
        .fill(&mut v);
    Bytes::from(v)
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

/// Starts `peerblock-node serve` for `node` on `listen`; returns the child, the bound
/// address it printed and, with `node.metrics`, its metrics address.
async fn spawn_node(
    exe: &Path,
    driver: DriverKind,
    node: &NodeProc,
    listen: SocketAddr,
) -> Result<(Child, SocketAddr, Option<SocketAddr>), NodeError> {
    let failed = |what: String| NodeError::Failed(format!("node {}: {what}", node.index));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)
        .map_err(|e| failed(format!("cannot create its log {}: {e}", node.log.display())))?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg("--listen")
        .arg(listen.to_string())
        .arg("--id")
        .arg(&node.id_hex)
        .arg("--store")
        .arg(&node.store)
        .arg("--config")
        .arg(&node.config)
        .arg("--driver")
        .arg(match driver {
            DriverKind::Tokio => "tokio",
            DriverKind::Mio => "mio",
        });
    if let Some(seed) = node.seed {
        cmd.arg("--seed").arg(seed.to_string());
    }
    if node.metrics {
        cmd.arg("--metrics")
            .arg(SocketAddr::new(listen.ip(), 0).to_string());
    }
    cmd.env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| failed(format!("cannot start {}: {e}", exe.display())))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut lines = BufReader::new(stdout).lines();
    let want_metrics = node.metrics;
    let bound = tokio::time::timeout(NODE_START_TIMEOUT, async {
        let mut listening = None;
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(addr) = line.strip_prefix("listening ") {
                listening = addr.trim().parse::<SocketAddr>().ok();
                if !want_metrics {
                    return listening.map(|l| (l, None));
                }
            } else if let Some(addr) = line.strip_prefix("metrics ") {
                let m = addr.trim().parse::<SocketAddr>().ok();
                return listening.map(|l| (l, m));
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    let Some((bound, metrics_addr)) = bound else {
        let tail = std::fs::read_to_string(&node.log).unwrap_or_default();
        let tail: Vec<&str> = tail.lines().rev().take(5).collect();
        return Err(failed(format!(
            "did not start listening within {NODE_START_TIMEOUT:?} (log: {})",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )));
    };
    // Keep the pipe drained, noting the `members N` lines.
    let members = node.members.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(n) = line.strip_prefix("members ") {
                if let Ok(n) = n.trim().parse::<u64>() {
                    members.store(n, Ordering::Relaxed);
                }
            }
        }
    });
    Ok((child, bound, metrics_addr))
}

/// A blackholed address: a backlog-0 listener that never accepts, its accept queue
/// filled by the swarm's own connections, so the kernel drops further SYNs (the dialer
/// sees no answer, as behind NAT).
struct Blackhole {
    addr: SocketAddr,
    _listener: std::net::TcpListener,
    _queued: Vec<std::net::TcpStream>,
}

fn blackhole(ip: Ipv4Addr) -> Result<Blackhole, NodeError> {
    let failed = |e: std::io::Error| NodeError::Failed(format!("blackhole on {ip}: {e}"));
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).map_err(failed)?;
    socket
        .bind(&SocketAddr::new(IpAddr::V4(ip), 0).into())
        .map_err(failed)?;
    socket.listen(0).map_err(failed)?;
    let listener: std::net::TcpListener = socket.into();
    let addr = listener.local_addr().map_err(failed)?;
    let mut queued = Vec::new();
    for _ in 0..8 {
        match std::net::TcpStream::connect_timeout(&addr, BLACKHOLE_FILL_TIMEOUT) {
            Ok(s) => queued.push(s),
            Err(_) => break,
        }
    }
    Ok(Blackhole {
        addr,
        _listener: listener,
        _queued: queued,
    })
}

fn signal(child: &Child, sig: rustix::process::Signal) -> Result<(), NodeError> {
    let pid = child
        .id()
        .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        .ok_or_else(|| NodeError::Failed("node process already gone".into()))?;
    rustix::process::kill_process(pid, sig)
        .map_err(|e| NodeError::Failed(format!("signalling node process {pid:?}: {e}")))
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

impl Cluster {
    async fn apply(&mut self, step: &Step) -> Result<(), NodeError> {
        let i = step.node as usize;
        let node = &mut self.nodes[i];
        match step.act {
            Act::Crash => {
                if let Some(mut child) = node.child.take() {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
                self.health[i].store(DOWN, Ordering::Relaxed);
            }
            Act::Restart => match self.health[i].load(Ordering::Relaxed) {
                DOWN => {
                    let (child, _, metrics) =
                        spawn_node(&self.exe, self.driver, node, node.listen).await?;
                    node.child = Some(child);
                    node.metrics_addr = metrics.or(node.metrics_addr);
                    self.health[i].store(UP, Ordering::Relaxed);
                }
                STALLED => {
                    if let Some(child) = &node.child {
                        signal(child, rustix::process::Signal::CONT)?;
                    }
                    self.health[i].store(UP, Ordering::Relaxed);
                }
                _ => {}
            },
            Act::Silent => {
                if let Some(child) = &node.child {
                    signal(child, rustix::process::Signal::STOP)?;
                    self.health[i].store(STALLED, Ordering::Relaxed);
                }
            }
            // Refused by `plan`.
            other => {
                return Err(NodeError::Failed(format!(
                    "fault {} is not run for real",
                    other.name()
                )))
            }
        }
        Ok(())
    }

    /// Kills every process (a stalled one is continued first, so it dies at once).
    async fn stop(&mut self) {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if let Some(mut child) = node.child.take() {
                if self.health[i].load(Ordering::Relaxed) == STALLED {
                    let _ = signal(&child, rustix::process::Signal::CONT);
                }
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }
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

impl World {
    fn sim(&self) -> std::sync::MutexGuard<'_, SimMetrics> {
        self.sim.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn reachable(&self, node: u32) -> bool {
        !self.nat[node as usize] && self.health[node as usize].load(Ordering::Relaxed) == UP
    }

    fn client(self: &Arc<Self>, reader: u32, source: u32) -> Result<Client, NodeError> {
        let mut o = ClientOptions::new(self.clock, self.metrics.clone());
        o.exchange = exchange_config(&self.s);
        o.peers = sim::model::reader::peers_config(&self.s);
        o.local_ip = Some(IpAddr::V4(reader_ip(source)));
        // The model's link latency, reader to node, on every exchange.
        let w = self.clone();
        o.link_delay = Some(LinkDelay(Arc::new(move |addr: &str| {
            w.node_of_addr
                .get(addr)
                .map_or(Duration::ZERO, |&n| w.latency.one_way(reader, n))
        })));
        Client::new(o).map_err(|e| NodeError::Failed(format!("reader client: {e}")))
    }
}

/// The readers' exchange deadlines: the scenario's `[client]`.
fn exchange_config(s: &Scenario) -> ClientConfig {
    let c = &s.client;
    ClientConfig {
        deadlines: Deadlines {
            dial: Duration::from_millis(c.dial_timeout_ms),
            response_header: Duration::from_millis(c.response_timeout_ms),
            request: RequestTimeout::After(Duration::from_millis(c.request_timeout_ms)),
        },
        ..ClientConfig::default()
    }
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

impl Discovery for SwarmDiscovery {
    fn lookup(&self, _key: &Key, path: &BlockPath) -> DiscoveryFuture {
        let this = self.clone();
        // A chunk's blocks are numbered from 1, an object's from 0.
        let first = if self.world.origin.is_some() { 0 } else { 1 };
        let block = path.index.saturating_sub(first) as u32;
        Box::pin(async move {
            let w = &this.world;
            let c = &w.s.client;
            let order = &w.content.order[block as usize];
            let rtt = w.latency.one_way(this.reader, order[0]) * 2;
            tokio::time::sleep(rtt * c.lookup_rtts).await;
            let now = this.client.now();
            let skip = c.discovery_skips_suppressed;
            let hints = w
                .hints
                .as_ref()
                .map(|h| h.counters.lock().unwrap_or_else(PoisonError::into_inner));
            let mut out = Vec::new();
            for &n in order {
                if out.len() >= c.lookup_peers as usize {
                    break;
                }
                let id = w.content.ids[n as usize];
                if skip
                    && this
                        .client
                        .with_peers(|p| p.cooldowns().is_suppressed(now, &id))
                {
                    continue;
                }
                let peer = match &hints {
                    Some(h) if w.reachable(n) => {
                        LookupPeer::with_key_load(id, h[n as usize].count(now, &block))
                    }
                    _ => LookupPeer::new(id),
                };
                out.push(Candidate {
                    peer,
                    addr: w.addrs[n as usize].clone(),
                });
            }
            out
        })
    }
}

/// How a GET ended, in the simulator's terms.
fn get_result(f: &Fetched) -> GetResult {
    match &f.ending {
        Some(Ending::Block(_)) => GetResult::Found,
        Some(Ending::Miss) => GetResult::NotFound,
        Some(Ending::Refused(_)) => GetResult::Refused,
        Some(Ending::Cancelled) => GetResult::Cancelled,
        Some(Ending::Failed(e)) => match e {
            ExchangeError::DialFailed | ExchangeError::DialTimeout(_) => GetResult::DialFailed,
            ExchangeError::ResponseHeaderTimeout(_) | ExchangeError::RequestTimeout(_) => {
                GetResult::TimedOut
            }
            ExchangeError::Validation | ExchangeError::Length(_) => GetResult::Corrupt,
            _ => GetResult::Closed,
        },
        Some(_) => GetResult::Closed,
        None => match f.local {
            Some(Local::NoConnectionSlot) => GetResult::TimedOut,
            _ => GetResult::Closed,
        },
    }
}

/// What one read's GETs did.
#[derive(Default)]
struct ReadLog {
    started: Vec<u32>,
    ended: Vec<(u32, GetResult, Option<&'static str>, u64)>,
}

/// One block read of a download; whether it found the block.
async fn read_block(w: Arc<World>, client: Client, reader: u32, round: u32, block: u32) -> bool {
    let n = w.reads.fetch_add(1, Ordering::Relaxed);
    let seed = indexed_seed(child_seed(w.seed, "swarm-reads"), n);
    let log: Arc<Mutex<ReadLog>> = Arc::default();
    let discovery = Arc::new(SwarmDiscovery {
        world: w.clone(),
        reader,
        client: client.clone(),
    });
    let (start_log, end_log, hw) = (log.clone(), log.clone(), w.clone());
    let mut reader_engine = Reader::new(client, discovery, sim::world::read_config(&w.s), seed)
        .expect("read configuration validated with the scenario")
        .with_start_observer(Arc::new(move |peer: &Peer| {
            let node = node_of(&peer.id);
            start_log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .started
                .push(node);
            if let Some(h) = &hw.hints {
                if hw.reachable(node) {
                    let now = hw.clock.to_core(Instant::now());
                    h.counters.lock().unwrap_or_else(PoisonError::into_inner)[node as usize]
                        .bump(now, block);
                }
            }
        }))
        .with_observer(Arc::new(move |peer: &Peer, f: &Fetched| {
            let reason = match &f.ending {
                Some(Ending::Refused(r)) => r.reason.map(|r| r.as_token()),
                _ => None,
            };
            let bytes = f.bytes().map_or(0, |b| b.len() as u64);
            end_log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .ended
                .push((node_of(&peer.id), get_result(f), reason, bytes));
        }));
    let expected = w.blocks[block as usize].clone();
    let (path, origin) = match &w.origin {
        // An object's blocks are numbered from 0, and every GET names the origin.
        Some(o) => {
            reader_engine = reader_engine.with_origin(Arc::new(o.fetch.clone()));
            (o.identity.path(u64::from(block)), Some(o.header.clone()))
        }
        None => (
            BlockPath {
                key: w.chunk,
                index: u64::from(block) + 1,
            },
            None,
        ),
    };
    let spec = BlockSpec {
        key: w.content.keys[block as usize],
        path,
        expected: Some(expected.len() as u64),
        validator: Some(Arc::new(move |b: &Bytes| *b == expected)),
        origin,
    };
    let r = reader_engine.read(spec).await;
    let log = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    let mut m = w.sim();
    m.reads_started += 1;
    m.read_ns.push(r.elapsed.as_nanos() as u64);
    let found = match &r.outcome {
        ReadOutcome::Found(b) | ReadOutcome::FoundAtOrigin(b) => {
            if *b != w.blocks[block as usize] {
                m.wrong_bytes += 1;
            }
            m.reads_found += 1;
            true
        }
        ReadOutcome::Absent => {
            // Every block of the file is stored: every absent is false.
            m.reads_absent += 1;
            m.reads_false_absent += 1;
            m.reads_false_not_found += 1;
            false
        }
        ReadOutcome::Busy => {
            m.reads_busy += 1;
            false
        }
        _ => {
            m.reads_unavailable += 1;
            if w.s.client.reports_unavailable_as_not_found {
                m.reads_false_not_found += 1;
            }
            false
        }
    };
    m.gets_total += u64::from(r.stats.gets);
    m.gets_hedged += u64::from(r.stats.hedges);
    let (round, b) = (round as usize, block as usize);
    if let Some(&first) = log.started.first() {
        m.first_get(round, b, first as usize);
    }
    for &node in log.started.iter().take(2) {
        m.opening_get(round, b, node as usize);
    }
    for &(node, result, reason, bytes) in &log.ended {
        m.get_result(result);
        if result == GetResult::Refused {
            m.refusals += 1;
            if let Some(reason) = reason {
                *m.limit_hits.entry(reason).or_insert(0) += 1;
            }
        }
        if result == GetResult::Found {
            // Nominal bytes, as the simulator counts them.
            m.node_bytes[node as usize] += (bytes as f64 / w.scale).round() as u64;
        }
    }
    // GETs the read started and cancelled never report an ending.
    let unended = u64::from(r.stats.gets).saturating_sub(log.ended.len() as u64);
    for _ in 0..unended {
        m.get_result(GetResult::Cancelled);
    }
    found
}

/// One download: every block, `parallel_blocks` at a time, in block order; the first
/// failed read stops new ones (running ones finish). Returns whether it completed.
async fn download(w: Arc<World>, client: Client, reader: u32, round: u32) {
    let started = Instant::now();
    let blocks = w.s.blocks();
    let parallel = w.s.readers.parallel_blocks as usize;
    let mut running = JoinSet::new();
    let (mut next, mut failed) = (0u32, false);
    loop {
        while !failed && running.len() < parallel && next < blocks {
            running.spawn(read_block(w.clone(), client.clone(), reader, round, next));
            next += 1;
        }
        match running.join_next().await {
            None => break,
            Some(Ok(true)) => {}
            Some(_) => failed = true,
        }
    }
    let completed = !failed;
    {
        let mut ends = w.round_ends.lock().unwrap_or_else(PoisonError::into_inner);
        let end = &mut ends[round as usize];
        let now = Instant::now();
        *end = Some(end.map_or(now, |e| e.max(now)));
    }
    let mut m = w.sim();
    m.downloads_started += 1;
    m.rounds[round as usize].0 += 1;
    if completed {
        m.downloads_completed += 1;
        m.rounds[round as usize].1 += 1;
        m.download_ns.push(started.elapsed().as_nanos() as u64);
        w.downloads_completed.fetch_add(1, Ordering::Relaxed);
    }
    w.downloads_done.fetch_add(1, Ordering::Relaxed);
}

fn note(quiet: bool, line: &str) {
    if !quiet {
        eprintln!("swarm: {line}");
    }
}

/// `swarm`: runs the plan; prints the report (and writes the JSON summary).
pub async fn swarm(plan: SwarmPlan) -> Result<(), NodeError> {
    let wall = Instant::now();
    let s = &plan.scenario;
    let quiet = plan.quiet;
    let origin_run = plan.nginx.is_some();
    if origin_run && !swarm_origin::in_namespace() {
        if swarm_origin::can_shape() {
            note(quiet, "file.placement = \"origin\": running again in a network namespace of its own (unshare -n, loopback only), where tc shapes nginx's upload to origin.upload_mbps");
            let code = swarm_origin::rerun_in_namespace().await?;
            std::process::exit(code);
        }
        note(quiet, "origin.upload_mbps is not applied: shaping nginx's upload needs root, unshare, ip and tc; nginx runs unshaped");
    }
    // Outputs first: a bad path costs no run.
    let mut json_out: Option<std::fs::File> = match &plan.json {
        Some(p) if p.as_os_str() != "-" => {
            Some(std::fs::File::create(p).map_err(|e| NodeError::Io {
                what: "cannot create --json",
                path: p.display().to_string(),
                source: e,
            })?)
        }
        _ => None,
    };
    let json_stdout = plan.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if s.network.transport == Transport::Multiplexed {
        note(quiet, "transport = \"multiplexed\" runs on peerblock's HTTP/1.1 (one request per connection at a time); max_channels and reserve_kib do not apply");
    }
    if s.listener.when_full == WhenFull::Silent {
        note(quiet, "when_full = \"silent\": the nodes stop accepting while every session is taken (accept queue of 4, then dials go unanswered) and close a request they would refuse, without an answer");
    }
    let seed = plan.seed;
    let placement = s.cluster.placement_seed.unwrap_or(seed);
    let content = Content::new(
        s.cluster.nodes,
        s.blocks(),
        s.cluster.close_group as usize,
        child_seed(placement, "node-ids"),
        child_seed(placement, "block-keys"),
    );
    let nat = sim::world::nat_nodes(s, seed);
    let steps = sim::faults::timeline(&s.faults, &content);
    let holders: Vec<Vec<u32>> = (0..s.blocks())
        .map(|b| content.holders(b).to_vec())
        .collect();
    let blocks: Vec<Bytes> = plan
        .scaled
        .block_len
        .iter()
        .zip(&content.keys)
        .map(|(len, key)| block_bytes(key, *len))
        .collect();
    let mut chunk = [0u8; 32];
    chunk.copy_from_slice(
        blake3::Hasher::new()
            .update(s.name.as_bytes())
            .update(&seed.to_le_bytes())
            .finalize()
            .as_bytes(),
    );
    let mut chunk = ChunkKey::from_array(chunk);
    let mut content = content;
    let mut holders = holders;
    let clock = Clock::new(Instant::now());

    // The origin: nginx serving the blocks as one object, the placement by its keys.
    let mut origin = None;
    if let Some(nginx) = &plan.nginx {
        let port = swarm_origin::origin_port()?;
        if swarm_origin::in_namespace() {
            swarm_origin::shape_origin(port, plan.scaled.origin_bytes_per_second)?;
        }
        std::fs::create_dir_all(&plan.work_dir).map_err(|e| {
            NodeError::Failed(format!("cannot create {}: {e}", plan.work_dir.display()))
        })?;
        let file: Vec<u8> = blocks.iter().flat_map(|b| b.iter().copied()).collect();
        let server =
            swarm_origin::OriginServer::start(nginx, &plan.work_dir.join("origin"), port, &file)
                .await?;
        drop(file);
        let url = peerblock_common::object::ObjectUrl::parse(&server.url)
            .map_err(|e| NodeError::Failed(format!("origin URL {}: {e}", server.url)))?;
        let client = crate::origin::ObjectClient::new(exchange_config(s), clock, None);
        let (size, validator) = crate::origin::probe(&client, &url)
            .await
            .map_err(|p| NodeError::Failed(format!("origin {}: {p}", server.url)))?;
        let identity = peerblock_common::object::ObjectIdentity::new(
            url,
            size,
            validator,
            plan.scaled.block_len[0],
        )
        .map_err(|e| NodeError::Failed(format!("origin {}: {e}", server.url)))?;
        if let Some(b) = (0..blocks.len()).find(|&b| {
            identity.block_range(b as u64).map(|r| r.1) != Some(plan.scaled.block_len[b])
        }) {
            return Err(NodeError::Failed(format!(
                "origin: block {b} of {} bytes is not the object's block {b} (blocks of {} bytes): the scenario's blocks are not of one size",
                plan.scaled.block_len[b], plan.scaled.block_len[0]
            )));
        }
        content = swarm_origin::object_content(&content, &identity);
        holders = (0..s.blocks())
            .map(|b| content.holders(b).to_vec())
            .collect();
        chunk = identity.key();
        let identity = Arc::new(identity);
        note(
            quiet,
            &format!(
                "origin nginx at {} ({size} bytes, ETag {}), {} bytes/s{}",
                server.url,
                identity.validator,
                plan.scaled.origin_bytes_per_second,
                if swarm_origin::in_namespace() {
                    ""
                } else {
                    " not applied"
                }
            ),
        );
        origin = Some(ObjectRun {
            header: Arc::from(identity.origin_header()),
            fetch: crate::origin::ObjectOrigin::new(client, identity.clone()),
            identity,
            server,
        });
    }

    // Stores and configs.
    let io = |what: &'static str, p: &Path, e: std::io::Error| NodeError::Io {
        what,
        path: p.display().to_string(),
        source: e,
    };
    let work = WorkDir {
        path: plan.work_dir.clone(),
        keep: plan.keep,
    };
    std::fs::create_dir_all(&work.path).map_err(|e| io("cannot create", &work.path, e))?;
    let config_path = work.path.join("node.toml");
    std::fs::write(&config_path, &plan.node_config)
        .map_err(|e| io("cannot write", &config_path, e))?;
    let mut nodes = Vec::with_capacity(s.cluster.nodes as usize);
    for i in 0..s.cluster.nodes {
        let store = work.path.join(format!("node-{i}"));
        let fs = FileStore::new(&store, MAX_BLOCK);
        std::fs::create_dir_all(&store).map_err(|e| io("cannot create", &store, e))?;
        for (b, h) in holders.iter().enumerate() {
            // At the origin only: no node holds a block at the start.
            if h.contains(&i) && !origin_run {
                let path = BlockPath {
                    key: chunk,
                    index: b as u64 + 1,
                };
                fs.put_blocking(&path, &blocks[b])
                    .map_err(|e| NodeError::Failed(format!("node {i} store: {e}")))?;
            }
        }
        nodes.push(NodeProc {
            index: i,
            id_hex: content.ids[i as usize].to_hex(),
            store,
            config: config_path.clone(),
            log: work.path.join(format!("node-{i}.log")),
            listen: SocketAddr::new(IpAddr::V4(node_ip(i)), 0),
            child: None,
            seed: None,
            metrics: origin_run,
            metrics_addr: None,
            members: Arc::default(),
        });
    }

    // Node processes, all at once.
    note(
        quiet,
        &format!(
            "starting {} node processes ({} behind NAT) on 127.1.0.0/16, work dir {}",
            nodes.len(),
            s.cluster.nat_nodes,
            work.path.display()
        ),
    );
    let health: Arc<Vec<AtomicU8>> =
        Arc::new((0..nodes.len()).map(|_| AtomicU8::new(UP)).collect());
    let mut cluster = Cluster {
        exe: plan.exe.clone(),
        driver: plan.driver,
        nodes: Vec::new(),
        _blackholes: Vec::new(),
        health: health.clone(),
    };
    let interrupted = crate::cmd::stop_signal();
    let started = async {
        if !origin_run || nodes.is_empty() {
            return start_nodes(&plan, nodes, &mut cluster).await;
        }
        // Node 0 first, then every other seeded with it; the run starts when every node
        // knows every member (parents are by each node's own roster).
        let mut rest = nodes;
        let first = rest.remove(0);
        start_nodes(&plan, vec![first], &mut cluster).await?;
        let seed = cluster.nodes[0].listen;
        for n in &mut rest {
            n.seed = Some(seed);
        }
        start_nodes(&plan, rest, &mut cluster).await?;
        wait_members(&cluster).await
    };
    tokio::pin!(interrupted);
    tokio::select! {
        r = started => r?,
        () = &mut interrupted => {
            cluster.stop().await;
            return Err(NodeError::Failed("interrupted while starting the nodes".into()));
        }
    }
    let mut addrs: Vec<String> = cluster.nodes.iter().map(|n| n.listen.to_string()).collect();
    let nat_ips: Vec<(usize, Ipv4Addr)> = (0..addrs.len())
        .filter(|&i| nat[i])
        .map(|i| (i, node_ip(i as u32)))
        .collect();
    let holes = tokio::task::spawn_blocking(move || {
        std::thread::scope(|scope| {
            let handles: Vec<_> = nat_ips
                .iter()
                .map(|&(i, ip)| scope.spawn(move || blackhole(ip).map(|b| (i, b))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("blackhole thread"))
                .collect::<Result<Vec<_>, _>>()
        })
    })
    .await
    .map_err(|e| NodeError::Failed(format!("blackholes: {e}")))??;
    for (i, hole) in holes {
        addrs[i] = hole.addr.to_string();
        cluster._blackholes.push(hole);
    }
    note(
        quiet,
        &format!(
            "{} nodes up in {:.1} s; scale {} (blocks of {} bytes, {} bytes/s per node, {} per connection), {} round(s) of {} readers",
            cluster.nodes.len(),
            wall.elapsed().as_secs_f64(),
            plan.scale,
            plan.scaled.block_len[0],
            plan.scaled.upload_bytes_per_second,
            plan.scaled.connection_bytes_per_second,
            plan.scaled.rounds,
            s.readers.count
        ),
    );

    let hints = s.client.lookup_load_hints.then(|| Hints {
        counters: Mutex::new(
            (0..s.cluster.nodes)
                .map(|_| KeyCounter::new(KeyCounterConfig::default()).expect("default config"))
                .collect(),
        ),
    });
    let rounds = plan.scaled.rounds;
    let world = Arc::new(World {
        s: s.clone(),
        seed,
        scale: plan.scale,
        latency: LatencyModel::new(s.network.latency.clone(), child_seed(seed, "latency")),
        content,
        nat,
        health,
        node_of_addr: addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (a.clone(), i as u32))
            .collect(),
        addrs,
        chunk,
        blocks,
        hints,
        clock,
        metrics: Metrics::new(),
        sim: Mutex::new(SimMetrics::new(
            s.cluster.nodes as usize,
            s.blocks() as usize,
            rounds as usize,
        )),
        reads: AtomicU64::new(0),
        downloads_done: AtomicU64::new(0),
        downloads_completed: AtomicU64::new(0),
        round_ends: Mutex::new(vec![None; rounds as usize]),
        origin,
    });

    // Faults on their own task; it hands the cluster back when told to stop.
    let t0 = tokio::time::Instant::now();
    let t0_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let (stop_faults, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let faults = tokio::spawn(async move {
        for step in &steps {
            let at = t0 + Duration::from_nanos(step.at.as_nanos());
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                _ = &mut stopped => return (cluster, Ok(())),
            }
            if let Err(e) = cluster.apply(step).await {
                return (cluster, Err(e));
            }
        }
        let _ = stopped.await;
        (cluster, Ok(()))
    });

    // The downloads.
    let total = u64::from(s.readers.count) * u64::from(rounds);
    let runs = run_downloads(&world, &plan, t0, rounds);
    let progress = async {
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        tick.tick().await;
        loop {
            tick.tick().await;
            note(
                quiet,
                &format!(
                    "{:.0} s: downloads {}/{total} ended, {} completed",
                    t0.elapsed().as_secs_f64(),
                    world.downloads_done.load(Ordering::Relaxed),
                    world.downloads_completed.load(Ordering::Relaxed)
                ),
            );
        }
    };
    let outcome = tokio::select! {
        r = runs => r,
        () = progress => Ok(()),
        () = &mut interrupted => Err(NodeError::Failed("interrupted".into())),
    };
    let run_seconds = t0.elapsed().as_secs_f64();
    let _ = stop_faults.send(());
    let (mut cluster, fault_result) = faults
        .await
        .map_err(|e| NodeError::Failed(format!("fault task: {e}")))?;
    // The relays' counters, before the nodes stop.
    let mut relay = None;
    if let Some(o) = &world.origin {
        let mut sums: BTreeMap<String, f64> = BTreeMap::new();
        for n in &cluster.nodes {
            if let (Some(addr), true) = (n.metrics_addr, n.child.is_some()) {
                match swarm_origin::scrape(addr).await {
                    Ok(m) => {
                        for (k, v) in m {
                            *sums.entry(k).or_insert(0.0) += v;
                        }
                    }
                    Err(e) => note(quiet, &format!("node {}: {e}", n.index)),
                }
            }
        }
        let r = &s.readers;
        let starts: Vec<f64> = (0..rounds)
            .map(|k| t0_unix + r.first_round_at_secs + f64::from(k) * r.round_interval_secs)
            .collect();
        let spans: Vec<u64> = world
            .round_ends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .enumerate()
            .map(|(k, end)| {
                let start = t0.into_std()
                    + Duration::from_secs_f64(
                        r.first_round_at_secs + k as f64 * r.round_interval_secs,
                    );
                end.map_or(0, |e| e.saturating_duration_since(start).as_nanos() as u64)
            })
            .collect();
        let file: u64 = (0..s.blocks()).map(|b| s.block_bytes(b)).sum();
        relay = Some(
            swarm_origin::RealRelay {
                file_bytes: file,
                scale: plan.scale,
                served: &o.server.served()?,
                round_starts: &starts,
                round_span_ns: spans,
                reader_fetches: o.fetch.blocks(),
                nodes: &sums,
            }
            .metrics(),
        );
    }
    cluster.stop().await;
    outcome?;
    fault_result?;

    // The simulator's report and summary.
    let mut metrics = world.sim().clone();
    metrics.relay = relay;
    let summary = Summary::build(
        &s.name,
        seed,
        &metrics,
        run_seconds,
        wall.elapsed().as_secs_f64(),
        "real".to_owned(),
    );
    let mut shown = s.clone();
    shown.readers.rounds = rounds;
    let result = RunResult {
        summary,
        metrics,
        timeline: sim::faults::timeline(&s.faults, &world.content),
        holders,
    };
    let json = result.summary.to_json();
    if let Some(f) = json_out.as_mut() {
        writeln!(f, "{json}").map_err(|e| NodeError::Io {
            what: "cannot write --json",
            path: plan
                .json
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            source: e,
        })?;
    }
    let mut out = std::io::stdout().lock();
    let written = if json_stdout {
        writeln!(out, "{json}")
    } else {
        writeln!(
            out,
            "peerblock-node swarm: {} for real: {} `serve` processes (driver {:?}), {} in-process readers, scale {} (blocks, budgets and rates × {}; rounds {} → {})\n{}",
            plan.path.display(),
            s.cluster.nodes,
            plan.driver,
            s.readers.count,
            plan.scale,
            plan.scale,
            s.readers.rounds,
            rounds,
            sim::report::text(&shown, &result)
        )
    };
    written
        .and_then(|()| out.flush())
        .map_err(|e| NodeError::Io {
            what: "cannot write",
            path: "stdout".into(),
            source: e,
        })?;
    drop(work);
    Ok(())
}

/// How long every node may take to know every member (seeded with node 0, 1 s rounds).
const MEMBERS_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until every node says it knows every member; an error names the node furthest
/// from it.
async fn wait_members(cluster: &Cluster) -> Result<(), NodeError> {
    let want = cluster.nodes.len() as u64;
    let started = tokio::time::Instant::now();
    loop {
        let least = cluster
            .nodes
            .iter()
            .map(|n| (n.members.load(Ordering::Relaxed), n.index))
            .min();
        match least {
            None => return Ok(()),
            Some((have, _)) if have >= want => return Ok(()),
            Some((have, index)) if started.elapsed() > MEMBERS_TIMEOUT => {
                return Err(NodeError::Failed(format!(
                    "node {index} knew {have} of {want} members after {MEMBERS_TIMEOUT:?} (its log: node-{index}.log in the work directory, kept with --keep)"
                )))
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Starts every node process concurrently into `cluster`.
async fn start_nodes(
    plan: &SwarmPlan,
    nodes: Vec<NodeProc>,
    cluster: &mut Cluster,
) -> Result<(), NodeError> {
    let mut starting = JoinSet::new();
    for mut node in nodes {
        let (exe, driver) = (plan.exe.clone(), plan.driver);
        starting.spawn(async move {
            let r = spawn_node(&exe, driver, &node, node.listen).await;
            r.map(|(child, bound, metrics)| {
                node.child = Some(child);
                node.listen = bound;
                node.metrics_addr = metrics;
                node
            })
        });
    }
    let mut up = Vec::new();
    let mut first_error = None;
    while let Some(joined) = starting.join_next().await {
        match joined {
            Ok(Ok(node)) => up.push(node),
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(NodeError::Failed(format!("starting a node: {e}")));
            }
        }
    }
    cluster.nodes.extend(up);
    cluster.nodes.sort_by_key(|n| n.index);
    match first_error {
        Some(e) => {
            cluster.stop().await;
            Err(e)
        }
        None => Ok(()),
    }
}

/// Every download of every round at its start time (the simulator's schedule: round `r`
/// at `first_round_at + r × round_interval`, each reader at a uniform offset within
/// `start_spread`), at most `max_downloads` at once.
async fn run_downloads(
    world: &Arc<World>,
    plan: &SwarmPlan,
    t0: tokio::time::Instant,
    rounds: u32,
) -> Result<(), NodeError> {
    let s = &world.s;
    let r = &s.readers;
    let addresses = if r.addresses == 0 {
        r.count
    } else {
        r.addresses
    };
    let mut starts = seeded(child_seed(plan.seed, "starts"));
    let bound = Arc::new(Semaphore::new(plan.max_downloads));
    let mut kept: BTreeMap<u32, Client> = BTreeMap::new();
    let mut tasks = JoinSet::new();
    for round in 0..rounds {
        for reader in 0..r.count {
            let offset = starts.next_u64() as f64 / u64::MAX as f64 * r.start_spread_secs;
            let at = r.first_round_at_secs + f64::from(round) * r.round_interval_secs + offset;
            let source = reader % addresses;
            let client = if r.keep_state_between_rounds {
                match kept.get(&reader) {
                    Some(c) => c.clone(),
                    None => {
                        let c = world.client(reader, source)?;
                        kept.insert(reader, c.clone());
                        c
                    }
                }
            } else {
                world.client(reader, source)?
            };
            let (w, bound) = (world.clone(), bound.clone());
            tasks.spawn(async move {
                tokio::time::sleep_until(t0 + Duration::from_secs_f64(at)).await;
                let _permit = bound.acquire_owned().await;
                download(w, client, reader, round).await;
            });
        }
    }
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(|e| NodeError::Failed(format!("a download task failed: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(text: &str) -> Scenario {
        Scenario::parse(text, "t.toml", "t").unwrap()
    }

    #[test]
    fn scale_multiplies_sizes_rates_budgets_and_rounds() {
        let s = scenario(
            "[cluster]\nupload_mbps = 1000.0\n[network]\ntransfer_mbps = 32.0\n\
             [file]\nsize_mib = 50\nblock_kib = 4096\n[readers]\nrounds = 6\n",
        );
        let sc = scale_scenario(&s, 0.125).unwrap();
        assert_eq!(sc.rounds, 1);
        assert_eq!(sc.block_len.len(), 13);
        assert_eq!(sc.block_len[0], 512 * 1024);
        assert_eq!(sc.block_len[12], (2 * 1024 * 1024) / 8);
        assert_eq!(sc.upload_bytes_per_second, 15_625_000);
        assert_eq!(sc.connection_bytes_per_second, 500_000);
        assert_eq!(sc.max_inflight_bytes, 8 * 1024 * 1024);
        assert_eq!(sc.max_inflight_bytes_per_source, 2 * 1024 * 1024);
        assert_eq!(scale_scenario(&s, 1.0).unwrap().rounds, 6);
        // A multiplexed scenario's per-response window: budgets × block / window.
        let m = scenario(
            "[network]\ntransport = \"multiplexed\"\n[listener]\nreserve_kib = 256\n\
             [file]\nsize_mib = 50\nblock_kib = 4096\n",
        );
        let windowed = scale_scenario(&m, 0.125).unwrap();
        assert_eq!(windowed.max_inflight_bytes, 16 * 8 * 1024 * 1024);
        assert_eq!(windowed.max_inflight_bytes_per_source, 16 * 2 * 1024 * 1024);
        assert_eq!(scale_scenario(&s, 0.25).unwrap().rounds, 2);
        let text = node_config_text(&s, &sc);
        let config = NodeConfig::from_toml_str(&text).unwrap();
        assert_eq!(config.listener.upload_bytes_per_second, 15_625_000);
        assert_eq!(config.listener.idle_timeout, Duration::from_secs(30));
        assert!(!config.listener.relay);
    }

    #[test]
    fn a_scale_out_of_range_or_below_the_pacing_minimum_is_refused() {
        let s = scenario("[cluster]\nupload_mbps = 0.01\n");
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            let e = scale_scenario(&s, bad).unwrap_err().to_string();
            assert!(e.contains("--scale"), "{e}");
        }
        let e = scale_scenario(&s, 0.5).unwrap_err().to_string();
        assert!(e.contains("cluster.upload_mbps"), "{e}");
    }

    #[test]
    fn addresses_are_distinct_loopback_addresses() {
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..MAX_SWARM_NODES {
            let ip = node_ip(i);
            assert!(ip.is_loopback() && ip.octets()[3] != 0);
            assert!(seen.insert(ip));
        }
        for a in 0..MAX_SWARM_READERS {
            let ip = reader_ip(a);
            assert!(ip.is_loopback() && ip.octets()[3] != 0);
            assert!(seen.insert(ip));
        }
    }
}
