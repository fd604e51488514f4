//! The simulation: modelled nodes and readers driving the real core machines over virtual
//! time.
//!
//! Each block read is a [`peerblock_core::read::Read`]; each reader owns one
//! [`peerblock_core::client::Peers`] (breaker, cooldown table, load table, GETs in flight)
//! shared by all its reads, which answers the read machine's `PeerView` questions.
//! The simulator plays the driver: it answers `Lookup` from the placement it knows and
//! carries each `Get` to a node. On peerblock's HTTP/1.1 arms that is a real client
//! `Exchange` talking real bytes to a real `ServerConnection` at the node: module `http1`
//! drives the machines (through `peerblock_testkit::pump`) over the simulated byte-stream
//! network of module `stream`, and module `node_app` is what a node answers;
//! on the reference's multiplexed arms it is the node model (dial → session admission →
//! request admission → upload queue → response), whose ending is classified the way a
//! client would.
//!
//! Everything is single-threaded and ordered by the [`EventQueue`]; randomness comes from
//! per-subsystem sub-seeds of the run seed, so a run is a pure function of scenario + seed.

use std::io::Write;

use peerblock_core::client::{Ending, ExchangeError};
use peerblock_core::read::{Absence, GetId, HedgeRule, Read, ReadConfig, Spread};
use peerblock_core::refusal::PeerRefusal;
use peerblock_core::rng::{child_seed, seeded, Rng};
use peerblock_core::time::{Duration, Instant};

use crate::faults::{self, Act, Step};
use crate::listener::{Admission, Limit};
use crate::metrics::{GetResult, Metrics, Summary};
use crate::model::content::Content;
use crate::model::node::{Health, Node};
use crate::model::reader::Reader;
use crate::net::LatencyModel;
use crate::queue::EventQueue;
use crate::scenario::{
    AbsenceRule, Fault, HedgePolicy, Placement, Scenario, SpreadPolicy, Transport,
};
use crate::slab::{Handle, Slab};
use crate::trace;
use crate::trace::Trace;

mod get;
mod http1;
mod node_app;
mod read;
mod relay;
mod stream;

/// A progress callback: (downloads finished, downloads total, simulated seconds).
pub type Progress = Box<dyn FnMut(u64, u64, f64)>;

/// How a run is invoked (everything but the scenario itself).
#[derive(Default)]
pub struct RunOptions {
    /// The seed; every sub-seed derives from it.
    pub seed: u64,
    /// Where to write the trace, if anywhere (the digest is computed regardless).
    pub trace: Option<Box<dyn Write>>,
    /// Faults added to the scenario's (a sweep's drawn faults).
    pub extra_faults: Vec<Fault>,
    /// Called now and then with (downloads finished, downloads total, simulated seconds).
    pub progress: Option<Progress>,
}

/// What a run produced.
#[derive(Debug)]
pub struct RunResult {
    /// The JSON summary.
    pub summary: Summary,
    /// Raw metrics (for reports).
    pub metrics: Metrics,
    /// The fault timeline as resolved to nodes.
    pub timeline: Vec<Step>,
    /// Holders of each block, nearest first (node indices).
    pub holders: Vec<Vec<u32>>,
}

/// Maps the scenario's client policy onto the core read machine's configuration.
pub fn read_config(s: &Scenario) -> ReadConfig {
    let c = &s.client;
    ReadConfig {
        close_group_size: s.cluster.close_group as usize,
        hedge_delay: Duration::from_millis(c.hedge_delay_ms),
        hedge: match c.hedge {
            HedgePolicy::OnSilence => HedgeRule::OnSilence,
            HedgePolicy::AfterDelay => HedgeRule::AfterDelay,
        },
        retry_delay: Duration::from_millis(c.retry_delay_ms),
        max_refusal_waits: c.max_refusal_waits,
        max_plain_retries: c.max_plain_retries,
        // The read skips a peer that refused it as long as the reader's cooldown table
        // does; the cap on a peer's Retry-After stays core's one 15 s default.
        refused_cooldown: Duration::from_secs(c.refused_cooldown_secs),
        spread: match c.spread {
            SpreadPolicy::Nearest => Spread::Nearest,
            SpreadPolicy::Uniform => Spread::Uniform,
            SpreadPolicy::LoadAware => Spread::LeastLoadedOfTwo,
        },
        // The simulated client classifies every GET (dial, header and request timeouts)
        // before the read's own backstop would abandon it.
        get_timeout: Duration::from_millis(c.dial_timeout_ms + c.request_timeout_ms + 1_000),
        absence: match c.absence {
            AbsenceRule::NearestCloseGroup => Absence::NearestCloseGroup,
            AbsenceRule::AnyCloseGroup => Absence::AnyCloseGroup,
        },
        // With content at the origin, a read that peers cannot serve ends at the origin
        // itself, as `peerblock-node fetch --origin` configures it.
        origin: s.file.placement == Placement::Origin && s.origin.reader_fallback,
        ..ReadConfig::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The dial is on its way or waiting for an answer.
    Dialing,
    /// The session is up (or was already); the request is on its way or queued.
    Requested,
    /// The node is sending the response.
    Transferring,
}

/// One GET in flight: what both paths share (its read, its peer, the reader's admission of
/// it) and the path-specific state ([`GetPath`]).
#[derive(Debug)]
struct Get {
    read: Handle,
    id: GetId,
    reader: u32,
    node: u32,
    block: u32,
    /// The reader's admission of this GET (breaker permit, in-flight count), settled
    /// when the GET ends or is cancelled.
    admitted: peerblock_core::client::GetTicket,
    /// Dial transmissions so far (the first plus retransmits): a full silent node drops
    /// dials on either path.
    dials: u32,
    /// How the GET travels.
    path: GetPath,
}

/// The two ways a GET reaches a node.
#[derive(Debug)]
enum GetPath {
    /// The reference's multiplexed arms: the node model (dial, session, request
    /// admission, upload queue, response).
    Modelled(Modelled),
    /// peerblock's HTTP/1.1 arms (`network.transport = "http1"`): a real client
    /// `Exchange` talking to a real `ServerConnection` (module `http1`).
    Http1(Box<http1::HttpGet>),
}

/// The node model's state of a GET on the modelled (multiplexed) path.
#[derive(Debug)]
struct Modelled {
    phase: Phase,
    /// The connection (session) it uses at the node.
    conn: u32,
    /// Node epoch when the request was admitted (a crash since then lost it).
    epoch: u32,
    /// Bytes to reserve against the node's budgets.
    reserved: u64,
    /// The node's request ticket while it is sending the response.
    ticket: Option<peerblock_core::server::RequestTicket<u32>>,
    /// Response size.
    bytes: u64,
    /// The load header of the response on its way back: the node's transfers in progress
    /// when it wrote the head. Heard by the reader when the head arrives.
    advertised: Option<u32>,
}

impl Get {
    /// The node model's state, if this GET is on the modelled path.
    fn modelled(&self) -> Option<&Modelled> {
        match &self.path {
            GetPath::Modelled(m) => Some(m),
            GetPath::Http1(_) => None,
        }
    }

    /// The node model's state, mutably, if this GET is on the modelled path.
    fn modelled_mut(&mut self) -> Option<&mut Modelled> {
        match &mut self.path {
            GetPath::Modelled(m) => Some(m),
            GetPath::Http1(_) => None,
        }
    }
}

#[derive(Debug)]
struct ReadState {
    machine: Read,
    reader: u32,
    download: u32,
    block: u32,
    started: Instant,
    gets: Vec<(GetId, Handle)>,
    first_sent: bool,
    /// GETs this read has sent (counted up to two, for the opening-GET share).
    opening_sent: u8,
    armed: Option<Instant>,
    /// Seeds this read's lookup misses; bumped per lookup.
    lookup_salt: u64,
}

#[derive(Debug)]
struct Download {
    reader: u32,
    round: u32,
    started: Instant,
    next_block: u32,
    active: u32,
    found: u32,
    failed: bool,
}

/// What a node sends back.
#[derive(Debug, Clone, Copy)]
enum Reply {
    Found,
    NotFound,
    Refused(Limit),
    Closed,
    Corrupt,
}

#[derive(Debug)]
enum Ev {
    RoundStart {
        reader: u32,
        round: u32,
    },
    LookupDone {
        read: Handle,
    },
    ReadTimer {
        read: Handle,
    },
    DialArrive {
        get: Handle,
    },
    DialTimeout {
        get: Handle,
    },
    RequestArrive {
        get: Handle,
    },
    FirstByte {
        get: Handle,
    },
    ResponseTimeout {
        get: Handle,
    },
    RequestTimeout {
        get: Handle,
    },
    Deliver {
        get: Handle,
        reply: Reply,
    },
    Uplink {
        node: u32,
        gen: u64,
    },
    Fault {
        step: u32,
    },
    Sample,
    /// Boxed: the HTTP path's events carry bytes, and the event heap moves entries on
    /// every push and pop.
    Http(Box<http1::HttpEv>),
    /// The relays and the origin (`file.placement = "origin"`); boxed like `Http`.
    Relay(Box<relay::RelayEv>),
}

fn tid(h: Handle) -> u64 {
    (u64::from(h.index) << 32) | u64::from(h.gen)
}

fn handle_of(t: u64) -> Handle {
    Handle {
        index: (t >> 32) as u32,
        gen: t as u32,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// One simulation run.
pub struct World<'s> {
    s: &'s Scenario,
    now: Instant,
    queue: EventQueue<Ev>,
    content: Content,
    latency: LatencyModel,
    nodes: Vec<Node>,
    readers: Vec<Reader>,
    reads: Slab<ReadState>,
    gets: Slab<Get>,
    downloads: Vec<Download>,
    active_downloads: Vec<u32>,
    read_config: ReadConfig,
    reads_seed: u64,
    lookup_seed: u64,
    /// Per-reader and per-node routing tables (`client.routing = "kademlia"`).
    routing: Option<crate::model::routing::Routing>,
    read_count: u64,
    timeline: Vec<Step>,
    downloads_total: u64,
    downloads_done: u64,
    sample_every: Duration,
    idle: Duration,
    /// The HTTP path's machines (`Some` for `transport = "http1"`).
    http: Option<http1::Http>,
    /// The origin and the nodes' relays (`Some` for `file.placement = "origin"`).
    relay: Option<relay::Relays>,
    metrics: Metrics,
    trace: Trace,
}

impl<'s> World<'s> {
    /// Builds the cluster, readers and timeline for `s` under `opts.seed`.
    pub fn new(s: &'s Scenario, seed: u64, trace: Trace, extra_faults: &[Fault]) -> Self {
        let nodes_n = s.cluster.nodes;
        let blocks = s.blocks();
        let placement = s.cluster.placement_seed.unwrap_or(seed);
        let content = Content::new(
            nodes_n,
            blocks,
            s.cluster.close_group as usize,
            child_seed(placement, "node-ids"),
            child_seed(placement, "block-keys"),
        );
        let nat = nat_nodes(s, seed);
        let rate = s.cluster.upload_mbps * 1e6 / 8.0;
        let cap = match s.network.transfer_mbps {
            x if x > 0.0 => x * 1e6 / 8.0,
            _ => f64::INFINITY,
        };
        let multiplexed = s.network.transport == Transport::Multiplexed;
        let nodes = nat
            .iter()
            .map(|&n| {
                let mut node = Node::new(n, rate, cap, &s.listener);
                if !multiplexed {
                    node.admission = Admission::scaled(&s.listener, node_app::BODY_SCALE);
                }
                node
            })
            .collect();
        let addresses = if s.readers.addresses == 0 {
            s.readers.count
        } else {
            s.readers.addresses
        };
        let readers = (0..s.readers.count)
            .map(|r| Reader::new(r % addresses, s))
            .collect();
        let mut all_faults = s.faults.clone();
        all_faults.extend_from_slice(extra_faults);
        let timeline = faults::timeline(&all_faults, &content);
        let r = &s.readers;
        let span = r.first_round_at_secs
            + f64::from(r.rounds) * r.round_interval_secs.max(60.0)
            + r.start_spread_secs;
        let sample_every = Duration::from_nanos(((span / 100.0).max(1.0) * 1e9) as u64);
        let mut w = World {
            s,
            now: Instant::ZERO,
            queue: EventQueue::default(),
            latency: LatencyModel::new(s.network.latency.clone(), child_seed(seed, "latency")),
            nodes,
            readers,
            reads: Slab::default(),
            gets: Slab::default(),
            downloads: Vec::new(),
            active_downloads: vec![0; s.readers.count as usize],
            read_config: read_config(s),
            reads_seed: child_seed(seed, "reads"),
            lookup_seed: child_seed(seed, "lookups"),
            routing: (s.client.routing == crate::scenario::RoutingModel::Kademlia).then(|| {
                let mut rng = seeded(child_seed(seed, "reader-ids"));
                let reader_ids: Vec<[u8; 32]> = (0..s.readers.count)
                    .map(|_| {
                        let mut b = [0u8; 32];
                        rng.fill_bytes(&mut b);
                        b
                    })
                    .collect();
                let b = s.client.bucket_size as usize;
                crate::model::routing::Routing::new(
                    &reader_ids,
                    &content.ids,
                    b,
                    b,
                    child_seed(seed, "routing"),
                )
            }),
            read_count: 0,
            timeline,
            downloads_total: u64::from(r.count) * u64::from(r.rounds),
            downloads_done: 0,
            sample_every,
            idle: Duration::from_secs(s.listener.session_idle_secs),
            http: (!multiplexed).then(|| http1::Http::new(s, &content)),
            relay: (s.file.placement == Placement::Origin).then(|| {
                // Waiters wait as long as the server waits for its source.
                let wait = peerblock_core::server::ServerConfig::new("n", "n:7070").source_timeout;
                relay::Relays::new(s, wait)
            }),
            metrics: Metrics::new(nodes_n as usize, blocks as usize, r.rounds as usize),
            trace,
            content,
        };
        // Round starts: each reader draws its offset within the start window per round.
        let mut rng = seeded(child_seed(seed, "starts"));
        for round in 0..r.rounds {
            for reader in 0..r.count {
                let jitter = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                let at = r.first_round_at_secs
                    + f64::from(round) * r.round_interval_secs
                    + jitter * r.start_spread_secs;
                w.queue.push(
                    Instant::from_nanos((at * 1e9) as u64),
                    Ev::RoundStart { reader, round },
                );
            }
        }
        for (i, step) in w.timeline.iter().enumerate() {
            w.queue.push(step.at, Ev::Fault { step: i as u32 });
        }
        w.queue.push(Instant::ZERO, Ev::Sample);
        w
    }

    /// The resolved fault timeline (for logging).
    pub fn timeline(&self) -> &[Step] {
        &self.timeline
    }

    /// Placement (for reports and tests).
    pub fn content(&self) -> &Content {
        &self.content
    }

    /// Runs until every download has ended (or nothing is left to happen).
    pub fn run(mut self, mut progress: Option<Progress>) -> (Metrics, Trace, Instant) {
        while self.downloads_done < self.downloads_total {
            let Some((at, ev)) = self.queue.pop() else {
                break;
            };
            debug_assert!(at >= self.now, "time went backwards");
            self.now = at;
            self.metrics.events += 1;
            self.dispatch(ev);
            if self.metrics.events % 8192 == 0 {
                if let Some(p) = progress.as_mut() {
                    p(
                        self.downloads_done,
                        self.downloads_total,
                        self.now.as_nanos() as f64 / 1e9,
                    );
                }
            }
        }
        self.sample();
        self.metrics.node_bytes = self.nodes.iter().map(|n| n.bytes_served).collect();
        self.metrics.reads_unfinished = self.reads.len() as u64;
        self.metrics.downloads_unfinished = self.downloads_total - self.downloads_done;
        self.metrics.relay = self.relay.take().map(|r| r.metrics);
        (self.metrics, self.trace, self.now)
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::RoundStart { reader, round } => self.start_download(reader, round),
            Ev::LookupDone { read } => self.lookup_done(read),
            Ev::ReadTimer { read } => self.read_timer(read),
            Ev::DialArrive { get } => self.dial_arrive(get),
            Ev::DialTimeout { get } => {
                if self
                    .gets
                    .get(get)
                    .and_then(Get::modelled)
                    .is_some_and(|m| m.phase == Phase::Dialing)
                {
                    let d = Duration::from_millis(self.s.client.dial_timeout_ms);
                    let ending = Ending::Failed(ExchangeError::DialTimeout(d));
                    self.end_get(get, GetResult::DialFailed, ending);
                }
            }
            Ev::RequestArrive { get } => self.request_arrive(get),
            Ev::FirstByte { get } => {
                self.hear_load(get);
                self.get_progress(get);
                if let Some(m) = self.gets.get_mut(get).and_then(Get::modelled_mut) {
                    if m.phase == Phase::Requested {
                        m.phase = Phase::Transferring;
                    }
                }
            }
            Ev::ResponseTimeout { get } => {
                if self
                    .gets
                    .get(get)
                    .and_then(Get::modelled)
                    .is_some_and(|m| m.phase == Phase::Requested)
                {
                    let d = Duration::from_millis(self.s.client.response_timeout_ms);
                    let ending = Ending::Failed(ExchangeError::ResponseHeaderTimeout(d));
                    self.end_get(get, GetResult::TimedOut, ending);
                }
            }
            Ev::RequestTimeout { get } => {
                if self.gets.get(get).is_some() {
                    let d = Duration::from_millis(self.s.client.request_timeout_ms);
                    let ending = Ending::Failed(ExchangeError::RequestTimeout(d));
                    self.end_get(get, GetResult::TimedOut, ending);
                }
            }
            Ev::Deliver { get, reply } => {
                self.hear_load(get);
                let Some(g) = self.gets.get(get) else {
                    return;
                };
                let retry_after = Some(Duration::from_secs(self.s.listener.retry_after_secs));
                let (result, ending) = match reply {
                    Reply::Found => (GetResult::Found, Ending::Block(self.content.token(g.block))),
                    Reply::NotFound => (GetResult::NotFound, Ending::Miss),
                    Reply::Refused(limit) => (
                        GetResult::Refused,
                        Ending::Refused(PeerRefusal {
                            reason: limit.reason(),
                            retry_after,
                        }),
                    ),
                    Reply::Closed => (GetResult::Closed, Ending::Failed(ExchangeError::Closed)),
                    // The driver verifies every body against the key: a wrong body is a
                    // failed validation (an invalid copy for the read), never `Found`.
                    Reply::Corrupt => (
                        GetResult::Corrupt,
                        Ending::Failed(ExchangeError::Validation),
                    ),
                };
                self.end_get(get, result, ending);
            }
            Ev::Uplink { node, gen } => self.uplink_done(node, gen),
            Ev::Fault { step } => self.fault(step),
            Ev::Http(ev) => self.http_event(*ev),
            Ev::Relay(ev) => self.relay_event(*ev),
            Ev::Sample => {
                self.sample();
                let next = self.now + self.sample_every;
                self.queue.push(next, Ev::Sample);
            }
        }
    }

    fn sample(&mut self) {
        let t = self.now.as_nanos() as f64 / 1e9;
        if self
            .metrics
            .node_bytes_series
            .last()
            .is_some_and(|(last, _)| *last == t)
        {
            return;
        }
        let bytes = self.nodes.iter().map(|n| n.bytes_served).collect();
        self.metrics.node_bytes_series.push((t, bytes));
    }

    // ---- faults -------------------------------------------------------------------------

    fn fault(&mut self, step: u32) {
        let Step { node: n, act, .. } = self.timeline[step as usize];
        let now = self.now;
        trace!(self.trace, now, "fault", "n={n} act={}", act.name());
        let node = &mut self.nodes[n as usize];
        match act {
            Act::Crash => {
                node.crash(now);
                self.http_crash(n);
                self.relay_crash(n);
            }
            Act::Restart => {
                if node.health == Health::Down {
                    node.epoch = node.epoch.wrapping_add(1);
                }
                node.health = Health::Up;
                node.corrupt = false;
                let base = node.base_rate;
                node.uplink.set_rate(now, base);
            }
            Act::Silent => {
                if node.health == Health::Up {
                    node.health = Health::Silent;
                }
            }
            Act::Slow(f) => {
                let rate = node.base_rate * f;
                node.uplink.set_rate(now, rate);
            }
            Act::Partition => node.partitioned = true,
            Act::Heal => node.partitioned = false,
            Act::Corrupt => node.corrupt = true,
        }
        self.reschedule_uplink(n);
    }
}

/// Which nodes sit behind NAT in a run with `seed`: a partial Fisher-Yates pick of
/// `cluster.nat_nodes` of them, seeded by the placement seed (`cluster.placement_seed`,
/// else the run seed).
pub fn nat_nodes(s: &Scenario, seed: u64) -> Vec<bool> {
    let seed = s.cluster.placement_seed.unwrap_or(seed);
    let nodes_n = s.cluster.nodes;
    let mut nat = vec![false; nodes_n as usize];
    let mut idx: Vec<u32> = (0..nodes_n).collect();
    let mut rng = seeded(child_seed(seed, "nat"));
    for i in 0..s.cluster.nat_nodes as usize {
        let j = i + (rng.next_u64() % (idx.len() - i) as u64) as usize;
        idx.swap(i, j);
        nat[idx[i] as usize] = true;
    }
    nat
}

/// Blocks every one of whose holders is behind NAT under `seed`: no reader can fetch them,
/// so the downloads that need them cannot complete, by the model and not by a bug.
pub fn unreachable_blocks(s: &Scenario, seed: u64, holders: &[Vec<u32>]) -> Vec<u32> {
    let nat = nat_nodes(s, seed);
    holders
        .iter()
        .enumerate()
        .filter(|(_, h)| !h.is_empty() && h.iter().all(|&n| nat[n as usize]))
        .map(|(b, _)| b as u32)
        .collect()
}

/// Runs `s` once with `opts`; the summary's `wall_seconds` is measured here.
pub fn run(s: &Scenario, opts: RunOptions) -> RunResult {
    let wall = std::time::Instant::now();
    let trace = Trace::new(opts.trace);
    let world = World::new(s, opts.seed, trace, &opts.extra_faults);
    let timeline = world.timeline().to_vec();
    let holders = (0..s.blocks())
        .map(|b| world.content().holders(b).to_vec())
        .collect();
    let (metrics, mut trace, end) = world.run(opts.progress);
    let _ = trace.finish();
    let summary = Summary::build(
        &s.name,
        opts.seed,
        &metrics,
        end.as_nanos() as f64 / 1e9,
        wall.elapsed().as_secs_f64(),
        trace.digest(),
    );
    RunResult {
        summary,
        metrics,
        timeline,
        holders,
    }
}
