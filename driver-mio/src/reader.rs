//! The reader on readiness loops: core's `read::Read` for one block, owned by one worker
//! (reads are spread over the workers in turn), its GETs run by the [`Client`] on their
//! peers' workers and their answers posted back.
//!
//! Core decides whom to ask, when to hedge, when to wait out refusals and what the read's
//! outcome is; the read's entry runs what it is told:
//!
//! - `ReadEvent::Lookup` → the [`Discovery`] (synchronous: placement over the roster, a
//!   fixed list) → `Read::handle_lookup_peers`;
//! - `ReadEvent::Get { id, peer }` → [`Client::submit`] of the block (validated when the
//!   caller gave an expected length); the response head posts back
//!   `Read::handle_get_progress`, the outcome (`Peers::finish`'s `GetOutcome`)
//!   `Read::handle_get`;
//! - `ReadEvent::Cancel { id }` → a GET whose response head has arrived is cancelled
//!   ([`Client::cancel`]: its ticket abandoned as answered, its connection closed); a GET
//!   still silent is left to run, detached from the read, until its head arrives (then
//!   cancelled the same way) or the client's own deadline cuts it, so that a holder whose
//!   link died is charged with that failure: released as answered, a dead holder that
//!   always loses to the hedge would never open its circuit (the tokio reader does the
//!   same). Its outcome is recorded by the client and not reported to the read;
//! - `ReadEvent::FetchOrigin` → `OriginOutcome::Failed` (this driver has no origin
//!   fetcher yet: a read configured with `origin` ends as it would with a failing one);
//! - the read's deadline → `Read::handle_timeout(now)`;
//! - `ReadEvent::Done(outcome)` → the caller's callback with a [`ReadResult`].
//!
//! The read is polled with the client's shared `Peers` as its `PeerView`, locked only for
//! the `poll_event` call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use peerblock_common::client::{GetOptions, Peer, Progress};
use peerblock_common::read::{placement_candidates, BlockSpec, Candidate, GetObserver, ReadResult};
use peerblock_common::SharedMembership;
use peerblock_core::client::BlockRequest;
use peerblock_core::placement::{Key as PlacementKey, PeerId};
use peerblock_core::read::{
    GetId, GetOutcome, LookupPeer, OriginOutcome, Read, ReadConfig, ReadConfigError, ReadEvent,
    ReadOutcome, MAX_CANDIDATES,
};
use peerblock_core::rng::{child_seed, indexed_seed};
use peerblock_core::time::Instant;
use peerblock_core::wire::BlockPath;

use crate::client::{Client, RequestHandle};
use crate::worker::{After, Driven, Entry, Key, Ready, Runtime, Worker};

/// Addresses one read remembers: the read keeps at most [`MAX_CANDIDATES`] candidates,
/// and a few rounds of lookups may name different ones.
const MAX_ADDRESSES: usize = 4 * MAX_CANDIDATES;

/// Where a block's candidate holders come from. Called on a worker thread: answer from
/// memory (a roster, a list), never block on the network.
pub trait Discovery: Send + Sync + 'static {
    /// Candidates for the block `path`, whose placement key is `key`, in any order (or,
    /// when [`ranked`](Self::ranked), in placement order, best first).
    fn lookup(&self, key: &PlacementKey, path: &BlockPath) -> Vec<Candidate>;

    /// Whether [`lookup`](Self::lookup) answers in placement order (the read then takes it
    /// with `Read::handle_lookup_ranked`: the first `close_group_size` are the close
    /// group, the rest its fallbacks). Default: no.
    fn ranked(&self) -> bool {
        false
    }
}

/// The rendezvous owners of the key among the roster's placed members, in owner order:
/// the first `close_group_size` of them and as many fallbacks past them; ranked.
#[derive(Clone, Debug)]
pub struct PlacementDiscovery {
    membership: SharedMembership,
    close_group_size: usize,
}

impl PlacementDiscovery {
    /// Placement over `membership`, answering `close_group_size` owners.
    pub fn new(membership: SharedMembership, close_group_size: usize) -> Self {
        PlacementDiscovery {
            membership,
            close_group_size,
        }
    }
}

impl Discovery for PlacementDiscovery {
    fn lookup(&self, key: &PlacementKey, _path: &BlockPath) -> Vec<Candidate> {
        placement_candidates(&self.membership, key, self.close_group_size)
    }

    fn ranked(&self) -> bool {
        true
    }
}

/// A discovery that always answers the same candidates.
#[derive(Clone, Debug, Default)]
pub struct FixedDiscovery(pub Vec<Candidate>);

impl Discovery for FixedDiscovery {
    fn lookup(&self, _key: &PlacementKey, _path: &BlockPath) -> Vec<Candidate> {
        self.0.clone()
    }
}

/// The callback a read ends with (on its worker thread).
pub type ReadDone = Box<dyn FnOnce(ReadResult) + Send>;

/// Reads blocks through core's read machine on a [`Runtime`]'s workers. Every read draws
/// its seed from the node seed and a read counter.
pub struct Reader {
    inner: Arc<ReaderInner>,
    runtime: Runtime,
}

struct ReaderInner {
    client: Client,
    discovery: Arc<dyn Discovery>,
    observer: Option<GetObserver>,
    config: ReadConfig,
    seed: u64,
    reads: AtomicU64,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Reader {
    /// A reader over `client` and `discovery` with `config` (validated now), its reads
    /// seeded from `node_seed` (`child_seed(node_seed, "reads")`, then one `indexed_seed`
    /// per read), as the tokio reader does.
    pub fn new(
        runtime: &Runtime,
        client: Client,
        discovery: Arc<dyn Discovery>,
        config: ReadConfig,
        node_seed: u64,
    ) -> Result<Reader, ReadConfigError> {
        config.validate()?;
        Ok(Reader {
            inner: Arc::new(ReaderInner {
                client,
                discovery,
                observer: None,
                config,
                seed: child_seed(node_seed, "reads"),
                reads: AtomicU64::new(0),
            }),
            runtime: runtime.clone(),
        })
    }

    /// The same reader with an observer told of every GET its reads finish.
    pub fn with_observer(self, observer: GetObserver) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| ReaderInner {
            client: shared.client.clone(),
            discovery: Arc::clone(&shared.discovery),
            observer: shared.observer.clone(),
            config: shared.config.clone(),
            seed: shared.seed,
            reads: AtomicU64::new(shared.reads.load(Ordering::Relaxed)),
        });
        Reader {
            inner: Arc::new(ReaderInner {
                observer: Some(observer),
                ..inner
            }),
            runtime: self.runtime,
        }
    }

    /// The read configuration.
    pub fn config(&self) -> &ReadConfig {
        &self.inner.config
    }

    /// The client the reader's GETs go through.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// Reads one block to its outcome, blocking the calling thread (never call it from
    /// a worker thread).
    pub fn read(&self, block: BlockSpec) -> ReadResult {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.submit(block, Box::new(move |r| drop(tx.send(r))));
        rx.recv().unwrap_or_else(|_| ReadResult {
            outcome: ReadOutcome::Cancelled,
            stats: Default::default(),
            served_by: None,
            elapsed: std::time::Duration::ZERO,
        })
    }

    /// Starts a read; `done` is called with its outcome on the read's worker thread.
    pub fn submit(&self, block: BlockSpec, done: ReadDone) {
        let n = self.inner.reads.fetch_add(1, Ordering::Relaxed);
        let seed = indexed_seed(self.inner.seed, n);
        let inner = Arc::clone(&self.inner);
        let worker = (n % self.runtime.threads() as u64) as usize;
        self.runtime.remote(worker).run(move |w| {
            let now = w.now();
            let read = Read::new(block.key, inner.config.clone(), now, seed)
                .expect("read config validated in Reader::new");
            let task = ReadTask {
                inner,
                read,
                block,
                addrs: HashMap::new(),
                gets: HashMap::new(),
                served_by: None,
                done: Some(done),
                started: std::time::Instant::now(),
            };
            let key = w.insert(Entry::new(Box::new(task)));
            w.drive(key, Ready::default());
        });
    }
}

/// What a GET's callbacks and its cancellation share.
#[derive(Default)]
pub(crate) struct GetState {
    /// The response head arrived (the peer demonstrably responded).
    progressed: AtomicBool,
    /// The read no longer wants the GET.
    cancelled: AtomicBool,
    /// The client request, to cancel it.
    handle: OnceLock<RequestHandle>,
}

impl GetState {
    /// The read gives the GET up: cancelled at once if the peer has answered, else left
    /// to run to its head (then cancelled) or to the client's own deadline (charged).
    fn cancel(&self, w: &mut Worker, client: &Client) {
        self.cancelled.store(true, Ordering::SeqCst);
        if self.progressed.load(Ordering::SeqCst) {
            if let Some(handle) = self.handle.get() {
                client.cancel_from(w, *handle);
            }
        }
    }
}

/// One read in progress on its worker.
pub(crate) struct ReadTask {
    inner: Arc<ReaderInner>,
    read: Read,
    block: BlockSpec,
    addrs: HashMap<PeerId, String>,
    gets: HashMap<GetId, (Peer, Arc<GetState>)>,
    served_by: Option<Peer>,
    done: Option<ReadDone>,
    started: std::time::Instant,
}

impl ReadTask {
    /// Drains the machine: runs every event it has.
    pub(crate) fn drive(&mut self, w: &mut Worker, key: Key) -> After {
        let now = w.now();
        loop {
            let event = self
                .inner
                .client
                .with_peers(|p| self.read.poll_event(now, &*p));
            let Some(event) = event else {
                return After::Keep(self.read.poll_timeout().map(|d| d.at));
            };
            match event {
                ReadEvent::Lookup => {
                    let found = self
                        .inner
                        .discovery
                        .lookup(&self.block.key, &self.block.path);
                    let peers: Vec<LookupPeer> = found.iter().map(|c| c.peer).collect();
                    for c in found {
                        if self.addrs.len() < MAX_ADDRESSES || self.addrs.contains_key(&c.peer.id) {
                            self.addrs.insert(c.peer.id, c.addr);
                        }
                    }
                    if self.inner.discovery.ranked() {
                        self.read.handle_lookup_ranked(now, &peers);
                    } else {
                        self.read.handle_lookup_peers(now, &peers);
                    }
                }
                ReadEvent::Get { id, peer } => {
                    let Some(addr) = self.addrs.get(&peer) else {
                        // The read asks only for peers a lookup named.
                        self.read.handle_get(now, id, GetOutcome::Failed);
                        continue;
                    };
                    let target = Peer::new(peer, addr.clone());
                    let state = self.start_get(w, key, id, &target);
                    self.gets.insert(id, (target, state));
                }
                ReadEvent::Cancel { id } => {
                    tracing::trace!(?id, "read cancels a GET");
                    if let Some((_, state)) = self.gets.remove(&id) {
                        state.cancel(w, &self.inner.client);
                    }
                }
                ReadEvent::FetchOrigin => self.read.handle_origin(now, OriginOutcome::Failed),
                ReadEvent::Done(outcome) => {
                    for (_, (_, state)) in self.gets.drain() {
                        state.cancel(w, &self.inner.client);
                    }
                    let stats = self.read.stats();
                    self.inner
                        .client
                        .options()
                        .metrics
                        .read_outcome(outcome.name());
                    let served_by = match outcome {
                        ReadOutcome::Found(_) => self.served_by.take(),
                        _ => None,
                    };
                    tracing::debug!(path = %self.block.path, outcome = outcome.name(), ?stats, "read done");
                    if let Some(done) = self.done.take() {
                        done(ReadResult {
                            outcome,
                            stats,
                            served_by,
                            elapsed: self.started.elapsed(),
                        });
                    }
                    return After::Done;
                }
            }
        }
    }

    /// The read's deadline.
    pub(crate) fn timeout(&mut self, w: &mut Worker, key: Key) -> After {
        let now = w.now();
        self.read.handle_timeout(now);
        self.drive(w, key)
    }

    fn start_get(&self, w: &mut Worker, key: Key, id: GetId, peer: &Peer) -> Arc<GetState> {
        let me = w.me();
        let progress_to = me.clone();
        let state = Arc::new(GetState::default());
        let hook = Arc::clone(&state);
        let client = self.inner.client.clone();
        // Progress is a hint: repeats are harmless.
        let progress: Progress = Arc::new(move |_status| {
            hook.progressed.store(true, Ordering::SeqCst);
            if hook.cancelled.load(Ordering::SeqCst) {
                // Cancelled while silent, and the peer has answered since: abandon it
                // now (as answered).
                if let Some(handle) = hook.handle.get() {
                    client.cancel(*handle);
                }
                return;
            }
            progress_to.run(move |w| {
                w.with_entry(key, |w, key, entry| match entry.get::<ReadTask>() {
                    Some(r) => {
                        let now = w.now();
                        r.read.handle_get_progress(now, id);
                        r.drive(w, key)
                    }
                    None => After::Unchanged,
                })
            })
        });
        let opts = GetOptions {
            expected: self.block.expected,
            validator: self.block.validator.clone(),
            deadline: None,
            progress: Some(progress),
        };
        let observer = self.inner.observer.clone();
        let target = peer.clone();
        let done_state = Arc::clone(&state);
        let handle = self.inner.client.submit_from(
            w,
            peer,
            BlockRequest {
                path: self.block.path,
                origin: self.block.origin.as_deref(),
                hop: peerblock_core::wire::Hop(0),
            },
            opts,
            Box::new(move |fetched| {
                if done_state.cancelled.load(Ordering::SeqCst) {
                    tracing::debug!(addr = %target.addr, outcome = %fetched.describe(), "cancelled GET ended on its own deadline");
                    return;
                }
                if let Some(observe) = &observer {
                    observe(&target, &fetched);
                }
                let outcome = fetched.get;
                me.run(move |w| {
                    w.with_entry(key, |w, key, entry| match entry.get::<ReadTask>() {
                        Some(r) => r.on_get(w, key, id, outcome),
                        None => After::Unchanged,
                    })
                });
            }),
        );
        let _ = state.handle.set(handle);
        state
    }

    fn on_get(&mut self, w: &mut Worker, key: Key, id: GetId, outcome: GetOutcome) -> After {
        let now: Instant = w.now();
        if let (GetOutcome::Found(_), Some((peer, _))) = (&outcome, self.gets.remove(&id)) {
            self.served_by = Some(peer);
        }
        self.read.handle_get(now, id, outcome);
        self.drive(w, key)
    }
}

impl Driven for ReadTask {
    fn on_ready(&mut self, w: &mut Worker, key: Key, _ready: Ready) -> After {
        self.drive(w, key)
    }

    fn on_timer(&mut self, w: &mut Worker, key: Key) -> After {
        self.timeout(w, key)
    }
}
