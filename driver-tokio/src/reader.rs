//! The reader: drives core's `read::Read` for one block over the tokio [`Client`].
//!
//! Core decides whom to ask, when to hedge, when to wait out refusals and what the read's
//! outcome is; the reader runs what it is told:
//!
//! - `ReadEvent::Lookup` → the [`Discovery`] (on a task) → `Read::handle_lookup_peers`;
//! - `ReadEvent::Get { id, peer }` → a task running [`Client::fetch_block`] (validated
//!   when the caller gave an expected length), whose response head is
//!   `Read::handle_get_progress` and whose `GetOutcome` (from `Peers::finish`) is
//!   `Read::handle_get`;
//! - `ReadEvent::Cancel { id }` → a GET that has shown progress (its response head
//!   arrived) is aborted: dropping its request settles its ticket (`Peers::abandon`,
//!   answered: the peer demonstrably responded) and closes its connection. A GET still
//!   silent is left to run, detached from the read, until its head arrives (then dropped
//!   the same way) or the client's own deadline cuts it (dial, response header, request),
//!   so that a holder whose link died is charged with that failure like any other: were it
//!   released as answered, a dead holder that always loses to the hedge would never open
//!   its circuit. Its outcome is recorded by the client and not reported to the read;
//! - `ReadEvent::FetchOrigin` → the optional [`OriginFetch`], or `OriginOutcome::Failed`;
//! - timers from `Read::poll_timeout` → `Read::handle_timeout`;
//! - until `ReadEvent::Done(outcome)`: the read's [`ReadOutcome`] and `Read::stats()`.
//!
//! The read is polled with the client's shared `Peers` as its `PeerView`, locked only for
//! the `poll_event` call.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use peerblock_core::client::BlockRequest;
use peerblock_core::placement::{Key, PeerId};
use peerblock_core::read::{
    GetId, GetOutcome, LookupPeer, OriginOutcome, Read, ReadConfig, ReadConfigError, ReadEvent,
    ReadOutcome, MAX_CANDIDATES, MAX_GETS_IN_FLIGHT,
};
use peerblock_core::rng::{child_seed, indexed_seed};
use peerblock_core::time::Instant;
use peerblock_core::wire::BlockPath;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use crate::client::{Client, GetOptions, Peer, Progress};
use crate::SharedMembership;
pub use peerblock_common::read::{
    placement_candidates, BlockSpec, Candidate, GetObserver, ReadResult,
};

/// Told of every GET a reader's reads start (the peer asked), in order.
pub type GetStartObserver = Arc<dyn Fn(&Peer) + Send + Sync>;

/// The future a [`Discovery`] returns.
pub type DiscoveryFuture = Pin<Box<dyn Future<Output = Vec<Candidate>> + Send + 'static>>;

/// Where a block's candidate holders come from: placement over the roster
/// ([`PlacementDiscovery`]), a DHT lookup, a fixed list ([`FixedDiscovery`]). Object safe:
/// the reader holds an `Arc<dyn Discovery>`.
pub trait Discovery: Send + Sync + 'static {
    /// Candidates for the block `path`, whose placement key is `key`, in any order (or,
    /// when [`ranked`](Self::ranked), in placement order, best first).
    fn lookup(&self, key: &Key, path: &BlockPath) -> DiscoveryFuture;

    /// Whether [`lookup`](Self::lookup) answers in placement order: the reader then hands
    /// the answer to `Read::handle_lookup_ranked`, so the read's close group is the
    /// first `close_group_size` candidates and the rest are its fallbacks. Default: no
    /// (the read orders candidates by XOR distance).
    fn ranked(&self) -> bool {
        false
    }
}

/// The default discovery for roster deployments: the rendezvous owners of the key among
/// the roster's placed members (`client::placement_members` + `placement::owners`), in
/// owner order, the first `close_group_size` of them and as many fallbacks past them
/// ([`placement_candidates`]); ranked.
#[derive(Clone, Debug)]
pub struct PlacementDiscovery {
    membership: SharedMembership,
    close_group_size: usize,
}

impl PlacementDiscovery {
    /// Placement over `membership`, answering `close_group_size` owners (use the read
    /// config's `close_group_size`).
    pub fn new(membership: SharedMembership, close_group_size: usize) -> Self {
        PlacementDiscovery {
            membership,
            close_group_size,
        }
    }

    /// The owners now, synchronously (what [`Discovery::lookup`] answers).
    pub fn owners_now(&self, key: &Key) -> Vec<Candidate> {
        placement_candidates(&self.membership, key, self.close_group_size)
    }
}

impl Discovery for PlacementDiscovery {
    fn lookup(&self, key: &Key, _path: &BlockPath) -> DiscoveryFuture {
        let found = self.owners_now(key);
        Box::pin(std::future::ready(found))
    }

    fn ranked(&self) -> bool {
        true
    }
}

/// A discovery that always answers the same candidates (a `--peer` list, tests).
#[derive(Clone, Debug, Default)]
pub struct FixedDiscovery(pub Vec<Candidate>);

impl Discovery for FixedDiscovery {
    fn lookup(&self, _key: &Key, _path: &BlockPath) -> DiscoveryFuture {
        Box::pin(std::future::ready(self.0.clone()))
    }
}

/// The future an [`OriginFetch`] returns.
pub type OriginFuture = Pin<Box<dyn Future<Output = OriginOutcome> + Send + 'static>>;

/// The optional last resort of a read configured with `origin: true`.
pub trait OriginFetch: Send + Sync + 'static {
    /// The block from the origin, checked as `block` says (its expected length and
    /// validator): a copy that fails is `Failed`, never `Found`.
    fn fetch(&self, block: &BlockSpec) -> OriginFuture;
}

/// An origin that speaks the peer wire form (`http://HOST:PORT`, typically the node that
/// imported the file): the read's last resort is a validated GET of the block from it.
/// Its 404 is `NotFound` (the read ends `absent`, at the origin); anything else that is
/// not the block is `Failed`.
#[derive(Clone)]
pub struct PeerOrigin {
    client: Client,
    peer: Peer,
    observer: Option<GetObserver>,
}

impl PeerOrigin {
    /// The origin at `url` (`http://HOST:PORT`, any path ignored), asked through
    /// `client`; `None` if `url` is not of that form.
    pub fn new(client: Client, url: &str) -> Option<PeerOrigin> {
        let authority = peerblock_common::relay::origin_authority(url)?;
        Some(PeerOrigin {
            client,
            peer: Peer::from_addr(authority),
            observer: None,
        })
    }

    /// The same origin with an observer told of every GET it makes (as
    /// [`Reader::with_observer`] is of the peers').
    pub fn with_observer(mut self, observer: GetObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The origin's `HOST:PORT`.
    pub fn addr(&self) -> &str {
        &self.peer.addr
    }
}

impl OriginFetch for PeerOrigin {
    fn fetch(&self, block: &BlockSpec) -> OriginFuture {
        let (client, peer) = (self.client.clone(), self.peer.clone());
        let observer = self.observer.clone();
        let (path, opts) = (
            block.path,
            GetOptions {
                expected: block.expected,
                validator: block.validator.clone(),
                deadline: None,
                progress: None,
            },
        );
        Box::pin(async move {
            let fetched = client
                .fetch_block(&peer, BlockRequest::new(path), opts)
                .await;
            tracing::debug!(%path, origin = %peer.addr, outcome = fetched.describe(), "origin fetch");
            if let Some(observe) = &observer {
                observe(&peer, &fetched);
            }
            match fetched.get {
                GetOutcome::Found(bytes) => OriginOutcome::Found(bytes),
                GetOutcome::NotFound => OriginOutcome::NotFound,
                _ => OriginOutcome::Failed,
            }
        })
    }
}

/// Messages from a read's tasks to its loop. At most [`MAX_GETS_IN_FLIGHT`] GET tasks,
/// one lookup and one origin fetch run at once, each sending at most two messages.
const READ_CHANNEL_BOUND: usize = 2 * MAX_GETS_IN_FLIGHT + 4;

/// Addresses one read remembers: the read keeps at most [`MAX_CANDIDATES`] candidates,
/// and a few rounds of lookups may name different ones.
const MAX_ADDRESSES: usize = 4 * MAX_CANDIDATES;

enum Msg {
    Lookup(Vec<Candidate>),
    Progress(GetId),
    Get(GetId, GetOutcome),
    Origin(OriginOutcome),
}

/// Reads blocks through core's read machine. Cheap to share (`Arc` it or clone its
/// parts); every read draws its seed from the node seed and a read counter.
pub struct Reader {
    client: Client,
    discovery: Arc<dyn Discovery>,
    origin: Option<Arc<dyn OriginFetch>>,
    observer: Option<GetObserver>,
    start_observer: Option<GetStartObserver>,
    config: ReadConfig,
    seed: u64,
    reads: AtomicU64,
}

impl std::fmt::Debug for PeerOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerOrigin")
            .field("addr", &self.peer.addr)
            .finish()
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("config", &self.config)
            .field("origin", &self.origin.is_some())
            .finish()
    }
}

impl Reader {
    /// A reader over `client` and `discovery` with `config` (validated now), its reads
    /// seeded from `node_seed` (`child_seed(node_seed, "reads")`, then one
    /// `indexed_seed` per read).
    pub fn new(
        client: Client,
        discovery: Arc<dyn Discovery>,
        config: ReadConfig,
        node_seed: u64,
    ) -> Result<Reader, ReadConfigError> {
        config.validate()?;
        Ok(Reader {
            client,
            discovery,
            origin: None,
            observer: None,
            start_observer: None,
            config,
            seed: child_seed(node_seed, "reads"),
            reads: AtomicU64::new(0),
        })
    }

    /// The same reader with an origin fetcher (used when the config says `origin`).
    pub fn with_origin(mut self, origin: Arc<dyn OriginFetch>) -> Self {
        self.origin = Some(origin);
        self
    }

    /// The same reader with an observer told of every GET its reads finish (which peer,
    /// which outcome class, how many bytes): what a caller needs to report per peer.
    pub fn with_observer(mut self, observer: GetObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The same reader with an observer told of every GET its reads start, in the order
    /// they start (which peer), before its request is sent: with [`Reader::with_observer`]
    /// a caller sees the GETs a read cancelled too (started, never finished).
    pub fn with_start_observer(mut self, observer: GetStartObserver) -> Self {
        self.start_observer = Some(observer);
        self
    }

    /// The read configuration.
    pub fn config(&self) -> &ReadConfig {
        &self.config
    }

    /// The client the reader's GETs go through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Reads one block to its outcome. Dropping the future aborts the read's GETs (each
    /// settles its ticket).
    pub async fn read(&self, block: BlockSpec) -> ReadResult {
        let started = std::time::Instant::now();
        let client = &self.client;
        let n = self.reads.fetch_add(1, Ordering::Relaxed);
        let seed = indexed_seed(self.seed, n);
        let mut now = client.now();
        let mut read = Read::new(block.key, self.config.clone(), now, seed)
            .expect("read config validated in Reader::new");
        let (tx, mut rx) = mpsc::channel::<Msg>(READ_CHANNEL_BOUND);
        let mut tasks = Tasks::default();
        let mut addrs: HashMap<PeerId, String> = HashMap::new();
        let mut getting: HashMap<GetId, Peer> = HashMap::new();
        let mut served_by = None;
        loop {
            // Drain the machine, with the shared peers as its view.
            loop {
                let event = client.with_peers(|p| read.poll_event(now, &*p));
                let Some(event) = event else { break };
                match event {
                    ReadEvent::Lookup => {
                        let fut = self.discovery.lookup(&block.key, &block.path);
                        let tx = tx.clone();
                        tasks.lookup = Some(Abort(tokio::spawn(async move {
                            let found = fut.await;
                            let _ = tx.send(Msg::Lookup(found)).await;
                        })));
                    }
                    ReadEvent::Get { id, peer } => {
                        let Some(addr) = addrs.get(&peer) else {
                            // The read asks only for peers a lookup named.
                            read.handle_get(now, id, GetOutcome::Failed);
                            continue;
                        };
                        let target = Peer::new(peer, addr.clone());
                        getting.insert(id, target.clone());
                        tasks
                            .gets
                            .insert(id, self.spawn_get(id, target, &block, &tx));
                    }
                    ReadEvent::Cancel { id } => {
                        tracing::trace!(?id, "read cancels a GET");
                        getting.remove(&id);
                        tasks.gets.remove(&id); // aborted, or detached while silent
                    }
                    ReadEvent::FetchOrigin => match &self.origin {
                        Some(origin) => {
                            let fut = origin.fetch(&block);
                            let tx = tx.clone();
                            tasks.origin = Some(Abort(tokio::spawn(async move {
                                let o = fut.await;
                                let _ = tx.send(Msg::Origin(o)).await;
                            })));
                        }
                        None => read.handle_origin(now, OriginOutcome::Failed),
                    },
                    ReadEvent::Done(outcome) => {
                        drop(tasks);
                        let stats = read.stats();
                        client.options().metrics.read_outcome(outcome.name());
                        if !matches!(outcome, ReadOutcome::Found(_)) {
                            served_by = None;
                        }
                        tracing::debug!(path = %block.path, outcome = outcome.name(), ?stats, "read done");
                        return ReadResult {
                            outcome,
                            stats,
                            served_by,
                            elapsed: started.elapsed(),
                        };
                    }
                }
            }
            // Wait for a task's message or the machine's next deadline.
            let deadline = read.poll_timeout().map(|d| d.at);
            let msg = tokio::select! {
                m = rx.recv() => m,
                _ = sleep_to(client, deadline) => None,
            };
            now = client.now();
            match msg {
                Some(Msg::Lookup(found)) => {
                    let peers: Vec<LookupPeer> = found.iter().map(|c| c.peer).collect();
                    for c in found {
                        if addrs.len() < MAX_ADDRESSES || addrs.contains_key(&c.peer.id) {
                            addrs.insert(c.peer.id, c.addr);
                        }
                    }
                    if self.discovery.ranked() {
                        read.handle_lookup_ranked(now, &peers);
                    } else {
                        read.handle_lookup_peers(now, &peers);
                    }
                }
                Some(Msg::Progress(id)) => read.handle_get_progress(now, id),
                Some(Msg::Get(id, outcome)) => {
                    tasks.gets.remove(&id);
                    if let (GetOutcome::Found(_), Some(p)) = (&outcome, getting.remove(&id)) {
                        served_by = Some(p);
                    } else {
                        getting.remove(&id);
                    }
                    read.handle_get(now, id, outcome);
                }
                Some(Msg::Origin(o)) => read.handle_origin(now, o),
                None => read.handle_timeout(now),
            }
        }
    }

    fn spawn_get(
        &self,
        id: GetId,
        peer: Peer,
        block: &BlockSpec,
        tx: &mpsc::Sender<Msg>,
    ) -> GetTask {
        if let Some(started) = &self.start_observer {
            started(&peer);
        }
        let client = self.client.clone();
        let ptx = tx.clone();
        let state = Arc::new(GetState::default());
        let hook = state.clone();
        // Progress is a hint (repeats are harmless, a lost one only risks a hedge): never
        // wait for room in the channel from inside the exchange.
        let progress: Progress = Arc::new(move |_status| {
            hook.progressed.store(true, Ordering::SeqCst);
            hook.wake.notify_one();
            let _ = ptx.try_send(Msg::Progress(id));
        });
        let opts = GetOptions {
            expected: block.expected,
            validator: block.validator.clone(),
            deadline: None,
            progress: Some(progress),
        };
        let (path, origin) = (block.path, block.origin.clone());
        let tx = tx.clone();
        let observer = self.observer.clone();
        let task_state = state.clone();
        let handle = tokio::spawn(async move {
            let state = task_state;
            let mut request =
                std::pin::pin!(client.fetch_block(&peer, block_request(path, &origin), opts));
            let fetched = loop {
                tokio::select! {
                    fetched = &mut request => break fetched,
                    () = state.wake.notified() => {
                        if state.cancelled.load(Ordering::SeqCst)
                            && state.progressed.load(Ordering::SeqCst)
                        {
                            // Cancelled while silent, and the peer has answered since:
                            // dropping the request abandons its ticket (answered).
                            return;
                        }
                    }
                }
            };
            if state.cancelled.load(Ordering::SeqCst) {
                tracing::debug!(addr = %peer.addr, outcome = %fetched.describe(), "cancelled GET ended on its own deadline");
                return;
            }
            if let Some(observe) = &observer {
                observe(&peer, &fetched);
            }
            let _ = tx.send(Msg::Get(id, fetched.get)).await;
        });
        GetTask { handle, state }
    }
}

/// The request of one of a read's GETs: the block, the read's origin (if any) and hop 0
/// (a reader is where a request starts).
fn block_request(path: BlockPath, origin: &Option<Arc<str>>) -> BlockRequest<'_> {
    BlockRequest {
        path,
        origin: origin.as_deref(),
        hop: peerblock_core::wire::Hop(0),
    }
}

/// What a GET's task and its cancellation share.
#[derive(Default)]
struct GetState {
    /// The response head arrived (the peer demonstrably responded).
    progressed: AtomicBool,
    /// The read no longer wants the GET.
    cancelled: AtomicBool,
    /// Wakes the task when either flag is set.
    wake: Notify,
}

/// One GET's task. Dropped (the read cancelled the GET, or ended): aborted if the GET has
/// shown progress, else detached to end at its head or at the client's own deadline
/// (bounded by the exchange's dial, response-header and request deadlines), so a silent
/// peer is charged with the failure its deadline records. See the module docs.
struct GetTask {
    handle: JoinHandle<()>,
    state: Arc<GetState>,
}

impl Drop for GetTask {
    fn drop(&mut self) {
        if self.state.progressed.load(Ordering::SeqCst) {
            self.handle.abort();
        } else {
            self.state.cancelled.store(true, Ordering::SeqCst);
            self.state.wake.notify_one();
        }
    }
}

/// Aborts its task when dropped.
struct Abort(JoinHandle<()>);

impl Drop for Abort {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A read's tasks: dropping it aborts them all.
#[derive(Default)]
struct Tasks {
    lookup: Option<Abort>,
    origin: Option<Abort>,
    gets: HashMap<GetId, GetTask>,
}

async fn sleep_to(client: &Client, at: Option<Instant>) {
    match at.and_then(|a| client.options().clock.to_std(a)) {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
