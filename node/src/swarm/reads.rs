//! The in-process readers: their clients and discovery, one read of one block, one
//! download, and every download of every round on the simulator's schedule.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use peerblock_core::bytes::Bytes;
use peerblock_core::client::{ClientConfig, Deadlines, Ending, ExchangeError, RequestTimeout};
use peerblock_core::placement::Key;
use peerblock_core::read::{LookupPeer, ReadOutcome};
use peerblock_core::rng::{child_seed, indexed_seed, seeded, Rng};
use peerblock_core::wire::BlockPath;
use sim::metrics::{GetResult, Metrics as SimMetrics};
use sim::model::content::node_of;
use sim::scenario::Scenario;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::{Client, ClientOptions, Fetched, LinkDelay, Local, Peer};
use crate::node::NodeError;
use crate::reader::{BlockSpec, Candidate, Discovery, DiscoveryFuture, Reader};

use super::*;

impl World {
    pub(super) fn sim(&self) -> std::sync::MutexGuard<'_, SimMetrics> {
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
pub(super) fn exchange_config(s: &Scenario) -> ClientConfig {
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

/// Every download of every round at its start time (the simulator's schedule: round `r`
/// at `first_round_at + r × round_interval`, each reader at a uniform offset within
/// `start_spread`), at most `max_downloads` at once.
pub(super) async fn run_downloads(
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
