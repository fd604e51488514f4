//! The simulation: modelled nodes and readers driving the real core machines over virtual
//! time.
//!
//! Each block read is a [`peerblock_core::read::Read`]; each reader owns one
//! [`peerblock_core::cooldown::CooldownTable`] and one [`peerblock_core::breaker::Breaker`]
//! shared by all its reads and answers the read machine's [`PeerView`] questions from them.
//! The simulator plays the driver: it answers `Lookup` from the placement it knows, carries
//! each `Get` through the node model (dial → session admission → request admission →
//! upload queue → response) and classifies the ending the way a client would.
//!
//! Everything is single-threaded and ordered by the [`EventQueue`]; randomness comes from
//! per-subsystem sub-seeds of the run seed, so a run is a pure function of scenario + seed.

use std::io::Write;

use peerblock_core::breaker::Outcome as BreakerOutcome;
use peerblock_core::client::{
    BreakerOutcome as ClientBreakerOutcome, CooldownEntry, Ending, ExchangeError, PeerRefusal,
};
use peerblock_core::cooldown::DialOutcome;
use peerblock_core::read::{
    Action, GetId, GetOutcome, OriginOutcome, Read, ReadConfig, ReadOutcome, Spread,
};
use peerblock_core::rng::{child_seed, indexed_seed, seeded, Rng};
use peerblock_core::time::{Duration, Instant};

use crate::faults::{self, Act, Step};
use crate::listener::Limit;
use crate::metrics::{GetResult, Metrics, Summary};
use crate::model::content::{node_of, Content};
use crate::model::node::{Health, Node};
use crate::model::reader::Reader;
use crate::net::{mix, LatencyModel};
use crate::queue::EventQueue;
use crate::scenario::{Fault, Scenario, SpreadPolicy, Transport, WhenFull};
use crate::slab::{Handle, Slab};
use crate::trace;
use crate::trace::Trace;

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
        retry_delay: Duration::from_millis(c.retry_delay_ms),
        max_refusal_waits: c.max_refusal_waits,
        max_plain_retries: c.max_plain_retries,
        spread: match c.spread {
            SpreadPolicy::Nearest => Spread::Nearest,
            SpreadPolicy::Uniform => Spread::Uniform,
            SpreadPolicy::LoadAware => Spread::LeastLoadedOfTwo,
        },
        // The simulated client classifies every GET (dial, header and request timeouts)
        // before the read's own backstop would abandon it.
        get_timeout: Duration::from_millis(c.dial_timeout_ms + c.request_timeout_ms + 1_000),
        origin: false,
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

#[derive(Debug)]
struct Get {
    read: Handle,
    id: GetId,
    reader: u32,
    node: u32,
    block: u32,
    phase: Phase,
    permit: Option<peerblock_core::breaker::Permit>,
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
    /// Dial transmissions so far (the first plus retransmits).
    dials: u32,
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
    RoundStart { reader: u32, round: u32 },
    LookupDone { read: Handle },
    ReadTimer { read: Handle },
    DialArrive { get: Handle },
    DialTimeout { get: Handle },
    RequestArrive { get: Handle },
    FirstByte { get: Handle },
    ResponseTimeout { get: Handle },
    RequestTimeout { get: Handle },
    Deliver { get: Handle, reply: Reply },
    Uplink { node: u32, gen: u64 },
    Fault { step: u32 },
    Sample,
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
    read_count: u64,
    timeline: Vec<Step>,
    downloads_total: u64,
    downloads_done: u64,
    sample_every: Duration,
    idle: Duration,
    /// Whether readers multiplex requests over one session per node.
    multiplexed: bool,
    metrics: Metrics,
    trace: Trace,
}

impl<'s> World<'s> {
    /// Builds the cluster, readers and timeline for `s` under `opts.seed`.
    pub fn new(s: &'s Scenario, seed: u64, trace: Trace, extra_faults: &[Fault]) -> Self {
        let nodes_n = s.cluster.nodes;
        let blocks = s.blocks();
        let content = Content::new(
            nodes_n,
            blocks,
            s.cluster.close_group as usize,
            child_seed(seed, "node-ids"),
            child_seed(seed, "block-keys"),
        );
        // NAT nodes: a seeded partial Fisher-Yates pick.
        let mut nat = vec![false; nodes_n as usize];
        let mut idx: Vec<u32> = (0..nodes_n).collect();
        let mut rng = seeded(child_seed(seed, "nat"));
        for i in 0..s.cluster.nat_nodes as usize {
            let j = i + (rng.next_u64() % (idx.len() - i) as u64) as usize;
            idx.swap(i, j);
            nat[idx[i] as usize] = true;
        }
        let rate = s.cluster.upload_mbps * 1e6 / 8.0;
        let cap = match s.network.transfer_mbps {
            x if x > 0.0 => x * 1e6 / 8.0,
            _ => f64::INFINITY,
        };
        let nodes = nat
            .iter()
            .map(|&n| Node::new(n, rate, cap, &s.listener))
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
            read_count: 0,
            timeline,
            downloads_total: u64::from(r.count) * u64::from(r.rounds),
            downloads_done: 0,
            sample_every,
            idle: Duration::from_secs(s.listener.session_idle_secs),
            multiplexed: s.network.transport == Transport::Multiplexed,
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
                    .is_some_and(|g| g.phase == Phase::Dialing)
                {
                    let d = Duration::from_millis(self.s.client.dial_timeout_ms);
                    let ending = Ending::Failed(ExchangeError::DialTimeout(d));
                    self.end_get(get, GetResult::DialFailed, ending);
                }
            }
            Ev::RequestArrive { get } => self.request_arrive(get),
            Ev::FirstByte { get } => {
                if let Some(g) = self.gets.get_mut(get) {
                    if g.phase == Phase::Requested {
                        g.phase = Phase::Transferring;
                    }
                }
            }
            Ev::ResponseTimeout { get } => {
                if self
                    .gets
                    .get(get)
                    .is_some_and(|g| g.phase == Phase::Requested)
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
                    // validated protocol violation, never `Found`.
                    Reply::Corrupt => (
                        GetResult::Corrupt,
                        Ending::Failed(ExchangeError::Validation),
                    ),
                };
                self.end_get(get, result, ending);
            }
            Ev::Uplink { node, gen } => self.uplink_done(node, gen),
            Ev::Fault { step } => self.fault(step),
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

    // ---- downloads and reads ------------------------------------------------------------

    fn start_download(&mut self, reader: u32, round: u32) {
        if !self.s.readers.keep_state_between_rounds && round > 0 {
            self.readers[reader as usize].reset(self.s);
        }
        let d = self.downloads.len() as u32;
        self.downloads.push(Download {
            reader,
            round,
            started: self.now,
            next_block: 0,
            active: 0,
            found: 0,
            failed: false,
        });
        self.metrics.downloads_started += 1;
        self.active_downloads[reader as usize] += 1;
        self.metrics.rounds[round as usize].0 += 1;
        trace!(self.trace, self.now, "download", "r={reader} round={round}");
        let first = self.s.readers.parallel_blocks.min(self.s.blocks());
        for _ in 0..first {
            self.next_read(d);
        }
    }

    fn next_read(&mut self, d: u32) {
        let dl = &mut self.downloads[d as usize];
        let block = dl.next_block;
        dl.next_block += 1;
        dl.active += 1;
        let reader = dl.reader;
        let seed = indexed_seed(self.reads_seed, self.read_count);
        self.read_count += 1;
        let machine = Read::new(
            self.content.keys[block as usize],
            self.read_config.clone(),
            self.now,
            seed,
        )
        .expect("read config validated with the scenario");
        let h = self.reads.insert(ReadState {
            machine,
            reader,
            download: d,
            block,
            started: self.now,
            gets: Vec::new(),
            first_sent: false,
            armed: None,
            lookup_salt: indexed_seed(self.lookup_seed, self.read_count),
        });
        self.metrics.reads_started += 1;
        trace!(self.trace, self.now, "read", "r={reader} b={block}");
        self.drive(h);
    }

    /// Drains the read machine's actions and arms its timer.
    fn drive(&mut self, h: Handle) {
        loop {
            let action = {
                let Some(rs) = self.reads.get_mut(h) else {
                    return;
                };
                rs.machine
                    .poll_action(self.now, &self.readers[rs.reader as usize])
            };
            match action {
                None => break,
                Some(Action::Lookup) => self.start_lookup(h),
                Some(Action::Get { id, peer }) => self.start_get(h, id, node_of(&peer)),
                Some(Action::Cancel { id }) => self.cancel_get(h, id),
                Some(Action::FetchOrigin) => {
                    // Scenarios configure no origin; answer honestly if one is ever asked.
                    if let Some(rs) = self.reads.get_mut(h) {
                        rs.machine.handle_origin(self.now, OriginOutcome::Failed);
                    }
                }
                Some(Action::Done(outcome)) => {
                    self.finish_read(h, outcome);
                    return;
                }
            }
        }
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        if let Some(t) = rs.machine.poll_timeout() {
            let t = t.max(self.now);
            if rs.armed.is_none_or(|a| t < a || a < self.now) {
                rs.armed = Some(t);
                self.queue.push(t, Ev::ReadTimer { read: h });
            }
        }
    }

    fn read_timer(&mut self, h: Handle) {
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        if rs.armed == Some(self.now) {
            rs.armed = None;
        }
        rs.machine.handle_timeout(self.now);
        self.drive(h);
    }

    fn start_lookup(&mut self, h: Handle) {
        let Some(rs) = self.reads.get(h) else {
            return;
        };
        let nearest = self.content.order[rs.block as usize][0];
        let rtt = self.latency.one_way(rs.reader, nearest) * 2;
        let at = self.now + rtt * self.s.client.lookup_rtts;
        self.queue.push(at, Ev::LookupDone { read: h });
    }

    fn lookup_done(&mut self, h: Handle) {
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        let salt = rs.lookup_salt;
        rs.lookup_salt = mix(salt);
        let reader = &self.readers[rs.reader as usize];
        let want = self.s.client.lookup_peers as usize;
        let skip = self.s.client.discovery_skips_suppressed;
        // A miss is a pure function of (this lookup, node): no shared stream to perturb.
        let miss = (self.s.client.lookup_miss * (1u64 << 53) as f64) as u64;
        let peers: Vec<_> = self.content.order[rs.block as usize]
            .iter()
            .filter(|&&n| miss == 0 || mix(salt ^ u64::from(n)) >> 11 >= miss)
            .map(|&n| self.content.ids[n as usize])
            .filter(|id| !skip || !reader.cooldown.is_suppressed(self.now, id))
            .take(want)
            .collect();
        let (r, b) = (rs.reader, rs.block);
        trace!(
            self.trace,
            self.now,
            "lookup",
            "r={r} b={b} peers={}",
            peers.len()
        );
        if let Some(rs) = self.reads.get_mut(h) {
            rs.machine.handle_lookup(self.now, &peers);
        }
        self.drive(h);
    }

    fn finish_read(&mut self, h: Handle, outcome: ReadOutcome) {
        let Some(rs) = self.reads.remove(h) else {
            return;
        };
        let m = &mut self.metrics;
        m.read_ns.push((self.now - rs.started).as_nanos() as u64);
        let ok = match &outcome {
            ReadOutcome::Found(bytes) | ReadOutcome::FoundAtOrigin(bytes) => {
                if *bytes == self.content.token(rs.block) {
                    m.reads_found += 1;
                    true
                } else {
                    m.wrong_bytes += 1;
                    false
                }
            }
            ReadOutcome::Absent => {
                m.reads_absent += 1;
                // Every block of the file is stored on its close group, so any absence
                // report is false.
                m.reads_false_absent += 1;
                false
            }
            ReadOutcome::Busy => {
                m.reads_busy += 1;
                false
            }
            ReadOutcome::Unavailable => {
                m.reads_unavailable += 1;
                false
            }
        };
        let name = match outcome {
            ReadOutcome::Found(_) => "found",
            ReadOutcome::FoundAtOrigin(_) => "origin",
            ReadOutcome::Absent => "absent",
            ReadOutcome::Busy => "busy",
            ReadOutcome::Unavailable => "unavailable",
        };
        trace!(
            self.trace,
            self.now,
            "done",
            "r={} b={} out={name} ms={:.3}",
            rs.reader,
            rs.block,
            ms(self.now - rs.started)
        );
        let d = rs.download;
        let blocks = self.s.blocks();
        let dl = &mut self.downloads[d as usize];
        dl.active -= 1;
        if ok {
            dl.found += 1;
        } else {
            dl.failed = true;
        }
        if !dl.failed && dl.next_block < blocks {
            self.next_read(d);
        } else if dl.active == 0 {
            let dl = &self.downloads[d as usize];
            let complete = !dl.failed && dl.found == blocks;
            let took = self.now - dl.started;
            let (reader, round) = (dl.reader, dl.round);
            if complete {
                self.metrics.downloads_completed += 1;
                self.metrics.rounds[round as usize].1 += 1;
                self.metrics.download_ns.push(took.as_nanos() as u64);
            }
            self.downloads_done += 1;
            self.active_downloads[reader as usize] -= 1;
            if !self.s.readers.keep_state_between_rounds
                && self.active_downloads[reader as usize] == 0
            {
                // The page is closed: its sessions go with it.
                let now = self.now;
                for node in &mut self.nodes {
                    node.close_sessions(reader, now);
                }
            }
            trace!(
                self.trace,
                self.now,
                "download-end",
                "r={reader} round={round} complete={complete} ms={:.3}",
                ms(took)
            );
        }
    }

    // ---- GETs ---------------------------------------------------------------------------

    fn start_get(&mut self, h: Handle, id: GetId, node: u32) {
        let now = self.now;
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        let (r, block) = (rs.reader, rs.block);
        let hedged = !rs.gets.is_empty();
        if !rs.first_sent {
            rs.first_sent = true;
            self.metrics.first_gets[block as usize][node as usize] += 1;
        }
        let reader = &mut self.readers[r as usize];
        let Ok(permit) = reader.admit(now, node) else {
            // The view said eligible a moment ago; a half-open circuit whose probe slot
            // was just taken can still say no. The GET fails without a dial.
            trace!(self.trace, now, "get-rejected", "r={r} b={block} n={node}");
            if let Some(rs) = self.reads.get_mut(h) {
                rs.machine.handle_get(now, id, GetOutcome::Failed);
            }
            return;
        };
        reader.get_started(node);
        self.metrics.gets_total += 1;
        if hedged {
            self.metrics.gets_hedged += 1;
        }
        let multiplexed = self.multiplexed;
        let node_ref = &mut self.nodes[node as usize];
        let existing = node_ref.usable_connection(r, now, self.idle, multiplexed);
        let session = existing.is_some();
        let conn = match existing {
            Some(c) => {
                node_ref.claim(r, c);
                c
            }
            None => node_ref.new_connection(multiplexed),
        };
        let epoch = node_ref.epoch;
        let bytes = self.s.block_bytes(block);
        let reserve = match self.s.listener.reserve_kib {
            0 => bytes,
            k => bytes.min(k * 1024),
        };
        let g = self.gets.insert(Get {
            read: h,
            id,
            reader: r,
            node,
            block,
            phase: if session {
                Phase::Requested
            } else {
                Phase::Dialing
            },
            permit,
            conn,
            epoch,
            reserved: reserve,
            bytes,
            ticket: None,
            dials: 1,
        });
        if let Some(rs) = self.reads.get_mut(h) {
            rs.gets.push((id, g));
        }
        trace!(
            self.trace,
            now,
            "get",
            "r={r} b={block} n={node} hedge={} dial={}",
            u8::from(hedged),
            u8::from(!session)
        );
        let ow = self.latency.one_way(r, node);
        let c = &self.s.client;
        if session {
            self.queue.push(now + ow, Ev::RequestArrive { get: g });
            self.arm_request_timeouts(g, now);
        } else {
            self.queue.push(now + ow, Ev::DialArrive { get: g });
            self.queue.push(
                now + Duration::from_millis(c.dial_timeout_ms),
                Ev::DialTimeout { get: g },
            );
        }
    }

    fn arm_request_timeouts(&mut self, g: Handle, sent: Instant) {
        let c = &self.s.client;
        self.queue.push(
            sent + Duration::from_millis(c.response_timeout_ms),
            Ev::ResponseTimeout { get: g },
        );
        self.queue.push(
            sent + Duration::from_millis(c.request_timeout_ms),
            Ev::RequestTimeout { get: g },
        );
    }

    fn limit_hit(&mut self, limit: Limit) {
        *self.metrics.limit_hits.entry(limit.as_str()).or_insert(0) += 1;
    }

    fn dial_arrive(&mut self, g: Handle) {
        let now = self.now;
        let Some(get) = self.gets.get(g) else {
            return;
        };
        let (r, n, conn) = (get.reader, get.node, get.conn);
        let node = &mut self.nodes[n as usize];
        if !node.reachable() {
            return; // never answered: the dial timeout decides
        }
        let source = self.readers[r as usize].source;
        match node.open_session(r, conn, source, now, self.idle) {
            Ok(()) => {
                node.claim(r, conn);
                let epoch = node.epoch;
                let ow = self.latency.one_way(r, n);
                if let Some(get) = self.gets.get_mut(g) {
                    get.phase = Phase::Requested;
                    get.epoch = epoch;
                }
                // Handshake back to the reader, then the request out.
                self.queue.push(now + ow * 2, Ev::RequestArrive { get: g });
                self.arm_request_timeouts(g, now + ow);
            }
            Err(limit) => {
                self.limit_hit(limit);
                match self.s.listener.when_full {
                    WhenFull::Silent => {
                        trace!(
                            self.trace,
                            now,
                            "silent",
                            "n={n} r={r} limit={}",
                            limit.as_str()
                        );
                        // The reader retransmits the dial on a doubling schedule until its
                        // dial timeout; a slot freed meanwhile admits a retransmission.
                        let first = self.s.network.dial_retransmit_ms;
                        if first > 0 {
                            let Some(get) = self.gets.get_mut(g) else {
                                return;
                            };
                            let wait = Duration::from_millis(first << (get.dials - 1).min(20));
                            get.dials += 1;
                            self.queue.push(now + wait, Ev::DialArrive { get: g });
                        }
                    }
                    WhenFull::Refuse => {
                        trace!(
                            self.trace,
                            now,
                            "refuse",
                            "n={n} r={r} limit={}",
                            limit.as_str()
                        );
                        let ow = self.latency.one_way(r, n);
                        self.queue.push(
                            now + ow,
                            Ev::Deliver {
                                get: g,
                                reply: Reply::Refused(limit),
                            },
                        );
                    }
                }
            }
        }
    }

    fn request_arrive(&mut self, g: Handle) {
        let now = self.now;
        let Some(get) = self.gets.get(g) else {
            return;
        };
        let (r, n, block, bytes, reserved, epoch, conn) = (
            get.reader,
            get.node,
            get.block,
            get.bytes,
            get.reserved,
            get.epoch,
            get.conn,
        );
        let holds = self.content.holds(n, block);
        let ow = self.latency.one_way(r, n);
        let node = &mut self.nodes[n as usize];
        if !node.reachable() || node.epoch != epoch || node.health == Health::Silent {
            return; // lost, or accepted and never answered: the client's timeouts decide
        }
        if !holds {
            node.touch(r, conn, now, self.idle);
            self.queue.push(
                now + ow,
                Ev::Deliver {
                    get: g,
                    reply: Reply::NotFound,
                },
            );
            return;
        }
        match node.begin_request(r, conn, now, reserved) {
            Ok(ticket) => {
                node.uplink.start(now, tid(g), bytes);
                if let Some(get) = self.gets.get_mut(g) {
                    get.ticket = Some(ticket);
                }
                self.reschedule_uplink(n);
                self.queue.push(now + ow, Ev::FirstByte { get: g });
            }
            Err(limit) => {
                self.limit_hit(limit);
                let reply = match self.s.listener.when_full {
                    WhenFull::Silent => Reply::Closed,
                    WhenFull::Refuse => Reply::Refused(limit),
                };
                trace!(
                    self.trace,
                    now,
                    "turned-away",
                    "n={n} r={r} limit={}",
                    limit.as_str()
                );
                self.queue.push(now + ow, Ev::Deliver { get: g, reply });
            }
        }
    }

    fn reschedule_uplink(&mut self, n: u32) {
        if let Some((at, gen)) = self.nodes[n as usize].uplink.reschedule() {
            self.queue
                .push(at.max(self.now), Ev::Uplink { node: n, gen });
        }
    }

    fn uplink_done(&mut self, n: u32, gen: u64) {
        let now = self.now;
        if self.nodes[n as usize].uplink.generation() != gen {
            return;
        }
        let done = self.nodes[n as usize].uplink.finished(now);
        for t in done {
            let g = handle_of(t);
            let Some(get) = self.gets.get_mut(g) else {
                continue;
            };
            let (r, bytes, conn) = (get.reader, get.bytes, get.conn);
            let ticket = get.ticket.take();
            let node = &mut self.nodes[n as usize];
            if let Some(ticket) = ticket {
                node.finish_request(r, conn, now, ticket, self.idle);
            }
            node.bytes_served += bytes;
            let reply = if node.corrupt {
                Reply::Corrupt
            } else {
                Reply::Found
            };
            if node.reachable() {
                let ow = self.latency.one_way(r, n);
                self.queue.push(now + ow, Ev::Deliver { get: g, reply });
            }
            // Unreachable now (partitioned): the response is lost, the client times out.
        }
        self.reschedule_uplink(n);
    }

    /// Releases whatever the node still holds for a GET that is ending early: its share
    /// of the upload link and its request slot (unless a crash already wiped both).
    fn release_at_node(&mut self, g: Handle, get: &mut Get) {
        let node = &mut self.nodes[get.node as usize];
        if get.epoch != node.epoch {
            return; // the crash already wiped the node's books; the ticket dies with them
        }
        if get.phase != Phase::Dialing {
            // It had a connection assigned (reused, or its dial was accepted).
            node.unclaim(get.reader, get.conn, self.now, self.idle);
        }
        let Some(ticket) = get.ticket.take() else {
            return;
        };
        node.uplink.cancel(self.now, tid(g));
        node.finish_request(get.reader, get.conn, self.now, ticket, self.idle);
        self.reschedule_uplink(get.node);
    }

    /// Ends a GET with `result`: releases the node side, tells the breaker and cooldown
    /// table, and hands the outcome to the read machine.
    fn end_get(&mut self, g: Handle, result: GetResult, ending: Ending) {
        let now = self.now;
        let Some(mut get) = self.gets.remove(g) else {
            return;
        };
        self.release_at_node(g, &mut get);
        let (r, n) = (get.reader, get.node);
        let peer = self.content.ids[n as usize];
        let reader = &mut self.readers[r as usize];
        reader.get_ended(n);
        // The core client's classification decides what the breaker and the cooldown
        // table learn from this ending.
        let class = ending.classify();
        let breaker = match class.breaker {
            ClientBreakerOutcome::Answered => BreakerOutcome::Answered,
            ClientBreakerOutcome::SoftFailure => BreakerOutcome::SoftFailure,
            ClientBreakerOutcome::HardFailure => BreakerOutcome::HardFailure,
        };
        match class.cooldown {
            Some(CooldownEntry::Refused { retry_after }) => {
                reader.suppress(now, peer, DialOutcome::Refused { retry_after });
                self.metrics.refusals += 1;
            }
            Some(CooldownEntry::Failed) => reader.suppress(now, peer, DialOutcome::Failed),
            None => {}
        }
        let outcome = match ending {
            Ending::Block(bytes) => GetOutcome::Found(bytes),
            Ending::Miss => GetOutcome::NotFound,
            Ending::Refused(refusal) => GetOutcome::Refused {
                retry_after: refusal.retry_after,
            },
            _ => GetOutcome::Failed,
        };
        if reader.record(now, n, get.permit, breaker) {
            self.metrics.breaker_opens += 1;
            trace!(self.trace, now, "breaker-open", "r={r} n={n}");
        }
        self.metrics.get_result(result);
        trace!(
            self.trace,
            now,
            "get-end",
            "r={r} b={} n={n} res={}",
            get.block,
            result.as_str()
        );
        if let Some(rs) = self.reads.get_mut(get.read) {
            rs.gets.retain(|(id, _)| *id != get.id);
            rs.machine.handle_get(now, get.id, outcome);
        }
        self.drive(get.read);
    }

    fn cancel_get(&mut self, h: Handle, id: GetId) {
        let Some(rs) = self.reads.get_mut(h) else {
            return;
        };
        let Some(pos) = rs.gets.iter().position(|(i, _)| *i == id) else {
            return;
        };
        let (_, g) = rs.gets.remove(pos);
        let Some(mut get) = self.gets.remove(g) else {
            return;
        };
        self.release_at_node(g, &mut get);
        let reader = &mut self.readers[get.reader as usize];
        reader.get_ended(get.node);
        reader.release(self.now, get.permit);
        self.metrics.get_result(GetResult::Cancelled);
        trace!(
            self.trace,
            self.now,
            "cancel",
            "r={} b={} n={}",
            get.reader,
            get.block,
            get.node
        );
    }

    // ---- faults -------------------------------------------------------------------------

    fn fault(&mut self, step: u32) {
        let Step { node: n, act, .. } = self.timeline[step as usize];
        let now = self.now;
        trace!(self.trace, now, "fault", "n={n} act={}", act.name());
        let node = &mut self.nodes[n as usize];
        match act {
            Act::Crash => node.crash(now),
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
