//! A relay-capable block source: serves what the local store holds and, when core decides
//! that a missed request may be relayed (`ServerEvent::Relay`: the request carried
//! `X-DART-Origin`, the hop is under the bound, the index in range), fetches the block on
//! the requester's behalf from this node's parent, else from the origin, and keeps it in
//! the store's relay cache.
//!
//! Core has already decided *whether* to relay and with which hop; this source only says
//! where to fetch from and maps the upstream's answer onto core's [`SourceResult`]:
//!
//! | upstream answer | `SourceResult` | the requester sees |
//! |---|---|---|
//! | 200 with a block that validates (below) | `Found` (and the block is kept in the relay cache) | 200 |
//! | 200 with block `i` of a chunk whose manifest this node cannot get | `Found` (served unchecked, cached nowhere) | 200 |
//! | 200 with a block that fails validation | `Failed` | 500 |
//! | 404 | `Miss` (a relayed miss is final) | 404 |
//! | 404 + `X-Peerblock-Miss: corrupt` (the upstream quarantined its copy) | `Corrupt` | 404 + `X-Peerblock-Miss: corrupt` |
//! | 502 + `X-DART-Upstream-Status: S` (a relay further up) | `UpstreamRefused { status: S }` | 502 + S |
//! | 401 or 403 (the origin refused the requester's credential) | `UpstreamRefused { status }` | 502 + the status |
//! | anything else (refusal, timeout, dial failure, bad response) | `Failed` | 500 |
//!
//! # The relay's client
//!
//! Give the relay a client of its own whose `PeersConfig::breaker` is `None`: an origin's
//! answers depend on each requester's credential (a `403` for one expired link says
//! nothing about the next request), so a circuit opened by other requesters' refusals
//! would turn the next requester's fetch into a `500` instead of its own answer.
//! `peerblock-node serve` does this.
//!
//! # The block's parent
//!
//! With [`Parent::Placement`] (what `peerblock-node serve` sets) the fetch goes first to
//! the block's parent, the nearest live holder of the block nearer to its key than this
//! node, and to the origin only when this node is the nearest live holder or the parent's
//! answer is not final ([`parent_answer_is_final`]): every request for a block converges
//! on one holder, which alone asks the origin.
//!
//! # Single-flight
//!
//! Concurrent relayed misses for the same block (same hop and origin) at this node share
//! one upstream fetch: core's [`RelayFlights`] table decides who leads and who joins, bounds
//! the flights, waiters and pinned bytes (a want past a bound is answered `Failed`, a 500,
//! and charges nobody), and fans the one result out, a failure as much as a block. Each
//! waiter waits at most the server's source timeout ([`RelaySource::with_flights`]); a
//! request that goes away (its connection closed, its source timeout) leaves the table,
//! and a flight whose waiters all left is abandoned (its fetch task aborted). The table is
//! the source's own, shared by its clones. (The mio server keeps one such table for all
//! its workers.)
//!
//! # The origin
//!
//! peerblock's convention for `X-DART-Origin` is the URL of an HTTP server that serves the
//! chunk in the peer wire form (`http://HOST:PORT`, any path ignored): typically the node
//! that imported the file. The relayed request keeps the origin header and carries the hop
//! core incremented, so a chain of relays ends at the hop bound.
//!
//! # Validation and the relay cache
//!
//! A relay never caches a block it could not validate
//! ([`FileStore::check_relayed`](peerblock_common::store::FileStore::check_relayed)):
//! block 0 (the manifest) only if its BLAKE3 hash is the chunk key, block `i` only if it
//! verifies against the chunk's manifest. When the relay has no manifest for the chunk
//! (neither imported nor relay-cached), it first fetches block 0 itself, through the same
//! single-flight table (so one fetch per chunk, however many of its blocks are relayed
//! at once), and checks again. A block 0 that fails its key, or a block `i` that fails
//! the manifest, is answered `Failed` (never served). A block whose manifest cannot be had
//! is served unchecked (the reader validates it end to end) and cached nowhere, so a wrong
//! block is never served twice.
//!
//! Validated blocks go to the store's relay cache
//! ([`peerblock_common::relay_cache`]: `<store>/.relay-cache`, bounded by
//! `[store] cache_bytes`, least recently used first out) and the hot-block cache, never
//! among the node's imported content, which is never evicted. The store then serves them
//! as held: a later request for the block is answered without a relay.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use peerblock_core::bytes::Bytes;
use peerblock_core::client::BlockRequest;
use peerblock_core::server::{
    FlightAnswer, FlightConfig, FlightConfigError, FlightEvent, FlightId, RelayFlights,
};
use peerblock_core::server::{SourceRequest, SourceResult};
use peerblock_core::time::Instant;
use peerblock_core::wire::BlockPath;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::client::{Client, Peer};
use crate::origin::{ObjectClient, OriginProblem};
use crate::source::{BlockFuture, BlockSource, FileStore};
use peerblock_common::metrics::RelayCounters;
use peerblock_common::object::ObjectIdentity;
pub use peerblock_common::relay::{
    object_origin, origin_authority, parent_answer_is_final, relayed_result, upstream_of, Parent,
};
use peerblock_common::store::RelayVerdict;
use peerblock_core::read::PeerView;

/// The source `peerblock-node serve` uses when relaying is on.
#[derive(Clone, Debug)]
pub struct RelaySource {
    store: FileStore,
    client: Client,
    parent: Parent,
    flights: Arc<Flights>,
    counters: RelayCounters,
    objects: ObjectClient,
}

impl RelaySource {
    /// Serves `store`; relays through `client` (breakerless: see the module docs) to
    /// `parent` (if given: [`Parent::Fixed`]) before the origin.
    pub fn new(store: FileStore, client: Client, parent: Option<String>) -> Self {
        let flights = Arc::new(Flights::new(client.now(), FlightConfig::default()));
        let objects = ObjectClient::new(client.options().exchange, client.options().clock, None);
        RelaySource {
            store,
            client,
            parent: parent.map_or(Parent::None, Parent::Fixed),
            flights,
            counters: RelayCounters::default(),
            objects,
        }
    }

    /// The same source counting its work in `counters` (the node's
    /// [`Metrics::relay`](peerblock_common::metrics::Metrics::relay)).
    pub fn with_counters(mut self, counters: RelayCounters) -> Self {
        self.counters = counters;
        self
    }

    /// The source's counters.
    pub fn counters(&self) -> &RelayCounters {
        &self.counters
    }

    /// The same source reading object origins (`X-DART-Origin` with an object identity)
    /// through `objects` (give it a TLS configuration for `https://` objects: without
    /// one an https object relay fails, answered 500).
    pub fn with_object_client(mut self, objects: ObjectClient) -> Self {
        self.objects = objects;
        self
    }

    /// The same source with single-flight bounds `config` and waiters that give up after
    /// `wait` (use the server's `source_timeout`: core answers a relay still unanswered
    /// then with a 500 anyway). Fails if `config` is out of range.
    pub fn with_flights(
        mut self,
        config: FlightConfig,
        wait: std::time::Duration,
    ) -> Result<Self, FlightConfigError> {
        config.validate()?;
        let mut flights = Flights::new(self.client.now(), config);
        flights.wait = wait;
        self.flights = Arc::new(flights);
        Ok(self)
    }

    /// Relayed fetches in flight and requests waiting for them now (for tests and
    /// metrics).
    pub fn flights_in_flight(&self) -> (usize, usize) {
        let state = self.flights.lock();
        (state.table.flights(), state.table.waiters())
    }

    /// The same source asking `parent` before the origin ([`Parent::Placement`]: the
    /// block's nearest live holder nearer to its key than this node).
    pub fn with_parent(mut self, parent: Parent) -> Self {
        self.parent = parent;
        self
    }
}

impl BlockSource for RelaySource {
    fn fetch(&self, request: &SourceRequest) -> BlockFuture {
        self.store.fetch(request)
    }

    /// A relayed miss joins the single-flight table: the first request for a block leads
    /// one upstream fetch (through the block's parent, else the origin), concurrent
    /// requests for the same block (same hop and origin) wait for its answer. See the
    /// module docs, "Single-flight".
    fn relay(&self, request: &SourceRequest) -> BlockFuture {
        let source = self.clone();
        let request = request.clone();
        Box::pin(async move { source.flights.clone().relay(source, request).await })
    }
}

/// One upstream fetch of a block of an object origin: through the block's parent (its
/// answer kept only with the block's exact length), else the Range GET to the origin; the
/// block's length checked (an object has no manifest: the length is all a relay can
/// check), then kept in the relay cache and the hot-block cache (never as imported
/// content).
/// Core's screen has already declined a chunk key or index that disagrees with the URL's
/// identity (404).
fn object_upstream(
    source: &RelaySource,
    request: &SourceRequest,
    object: ObjectIdentity,
) -> BlockFuture {
    let (store, client, objects, counters) = (
        source.store.clone(),
        source.client.clone(),
        source.objects.clone(),
        source.counters.clone(),
    );
    let (path, hop) = (request.path, request.hop);
    let origin = request
        .origin
        .as_ref()
        .and_then(|o| std::str::from_utf8(o).ok())
        .map(str::to_owned);
    let now = client.now();
    let parent = client.with_peers(|peers| {
        source
            .parent
            .of(&path, &|id| PeerView::eligible(&*peers, now, id))
    });
    Box::pin(async move {
        let Some((_, len)) = object.block_range(path.index) else {
            return SourceResult::Miss; // the screen declines these first
        };
        if let Some((id, addr)) = parent {
            let peer = match id {
                Some(id) => Peer::new(id, addr),
                None => Peer::from_addr(addr),
            };
            let block = BlockRequest {
                path,
                origin: origin.as_deref(),
                hop,
            };
            counters.parent_fetches.inc();
            let fetched = client.get(&peer, block).await;
            let result = relayed_result(fetched.ending.as_ref());
            tracing::debug!(%path, parent = %peer.addr, outcome = fetched.describe(), "object block relayed through the block's parent");
            match &result {
                SourceResult::Found(bytes) if bytes.len() as u64 == len => {
                    keep(&store, path, bytes.clone()).await;
                    return result;
                }
                SourceResult::Found(bytes) => {
                    tracing::warn!(%path, parent = %peer.addr, got = bytes.len(), expected = len, "relay: the parent's object block has the wrong length");
                }
                r if parent_answer_is_final(r) => return result,
                _ => {}
            }
        }
        counters.origin_fetches.inc();
        let result = match crate::origin::fetch_block(&objects, &object, path.index).await {
            Ok(bytes) => {
                counters.origin_bytes.inc_by(bytes.len() as u64);
                keep(&store, path, bytes.clone()).await;
                SourceResult::Found(bytes)
            }
            Err(problem) => {
                tracing::debug!(%path, origin = %object.url.authority(), %problem, "relay: object origin");
                match problem {
                    OriginProblem::Absent => SourceResult::Miss,
                    OriginProblem::Refused(status) => SourceResult::UpstreamRefused { status },
                    _ => SourceResult::Failed,
                }
            }
        };
        result
    })
}

/// One upstream fetch of a relayed block: through the block's parent, else from the
/// origin; a found block validated before it is served and stored (module docs).
fn upstream(source: &RelaySource, request: &SourceRequest) -> BlockFuture {
    if let Some(object) = object_origin(request) {
        return object_upstream(source, request, object);
    }
    let (origin, at_origin) = upstream_of(request, None);
    let (store, client) = (source.store.clone(), source.client.clone());
    let (path, hop) = (request.path, request.hop);
    let now = client.now();
    let parent = client.with_peers(|peers| {
        source
            .parent
            .of(&path, &|id| PeerView::eligible(&*peers, now, id))
    });
    let (source, request) = (source.clone(), request.clone());
    let flights = source.flights.clone();
    {
        Box::pin(async move {
            let block = BlockRequest {
                path,
                origin: origin.as_deref(),
                hop,
            };
            let mut answer = None;
            if let Some((id, addr)) = parent {
                let peer = match id {
                    Some(id) => Peer::new(id, addr),
                    None => Peer::from_addr(addr),
                };
                source.counters.parent_fetches.inc();
                let fetched = client.get(&peer, block).await;
                let result = relayed_result(fetched.ending.as_ref());
                tracing::debug!(%path, parent = %peer.addr, outcome = fetched.describe(), "relayed through the block's parent");
                if parent_answer_is_final(&result) {
                    answer = Some((result, peer.addr));
                }
            }
            let (result, upstream) = match answer {
                Some(answer) => answer,
                None => {
                    let Some(upstream) = at_origin else {
                        tracing::warn!(?origin, "relay: the origin is not an http://HOST:PORT URL");
                        return SourceResult::Miss;
                    };
                    source.counters.origin_fetches.inc();
                    let fetched = client.get(&Peer::from_addr(upstream.clone()), block).await;
                    tracing::debug!(%path, %upstream, outcome = fetched.describe(), "relayed from the origin");
                    let result = relayed_result(fetched.ending.as_ref());
                    if let SourceResult::Found(bytes) = &result {
                        source.counters.origin_bytes.inc_by(bytes.len() as u64);
                    }
                    (result, upstream)
                }
            };
            let SourceResult::Found(bytes) = &result else {
                return result;
            };
            let mut verdict = check(&store, path, bytes.clone()).await;
            if verdict == Some(RelayVerdict::ServeOnly) && path.index > 0 {
                // No manifest here to check block `i` against: fetch the chunk's manifest
                // (block 0, validated against the key; one fetch per chunk, shared by
                // every block of it through the flight table), then check again.
                let manifest = SourceRequest {
                    path: BlockPath {
                        key: path.key,
                        index: 0,
                    },
                    ..request
                };
                let fetched = flights.relay(source, manifest).await;
                if matches!(fetched, SourceResult::Found(_)) {
                    verdict = check(&store, path, bytes.clone()).await;
                }
            }
            match verdict {
                Some(RelayVerdict::Store) => keep(&store, path, bytes.clone()).await,
                Some(RelayVerdict::ServeOnly) => {
                    tracing::debug!(%path, "relay: no manifest for the chunk: block served unchecked, not cached");
                }
                Some(RelayVerdict::Reject) => {
                    tracing::warn!(%path, %upstream, "relay: the upstream's block fails validation: not served, not cached");
                    return SourceResult::Failed;
                }
                None => return SourceResult::Failed,
            }
            result
        })
    }
}

/// [`FileStore::check_relayed`] on `spawn_blocking`; `None` if the task failed.
async fn check(store: &FileStore, path: BlockPath, bytes: Bytes) -> Option<RelayVerdict> {
    let checker = store.clone();
    match tokio::task::spawn_blocking(move || checker.check_relayed(&path, &bytes)).await {
        Ok(verdict) => Some(verdict),
        Err(e) => {
            tracing::warn!(%path, error = %e, "relay: validating the block failed");
            None
        }
    }
}

/// Keeps a validated relayed block in the relay cache (on `spawn_blocking`) and in the
/// hot-block cache.
async fn keep(store: &FileStore, path: BlockPath, bytes: Bytes) {
    let keeper = store.clone();
    let block = bytes.clone();
    match tokio::task::spawn_blocking(move || keeper.keep_relayed(&path, &block)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(%path, error = %e, "relay: could not cache the block"),
        Err(e) => tracing::warn!(%path, error = %e, "relay: caching the block failed"),
    }
    store.cache_insert(path, &bytes);
}

/// How long a waiter waits for its flight by default: core's default source timeout
/// (10 s), after which the server answers the request 500 itself.
const DEFAULT_FLIGHT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The source's single-flight table ([`RelayFlights`], core's) and what drives it: the
/// waiting requests' answer channels and the upstream fetches' tasks. Shared by the
/// source's clones; locked briefly, never across an `.await`.
struct Flights {
    state: Mutex<FlightState>,
    wait: std::time::Duration,
}

struct FlightState {
    table: RelayFlights<u64>,
    next_waiter: u64,
    waiting: HashMap<u64, oneshot::Sender<FlightAnswer>>,
    fetches: HashMap<FlightId, JoinHandle<()>>,
}

impl std::fmt::Debug for Flights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Flights")
            .field("flights", &state.table.flights())
            .field("waiters", &state.table.waiters())
            .finish()
    }
}

/// Takes a waiter out of the table if its request goes away before its answer (the
/// server dropped the relay future: source timeout, connection closed).
struct Waiting {
    flights: Arc<Flights>,
    source: RelaySource,
    waiter: u64,
    answered: bool,
    now: Instant,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.answered {
            let mut state = self.flights.lock();
            state.table.handle_cancel(self.now, self.waiter);
            state.waiting.remove(&self.waiter);
            drop(state);
            self.flights.drain(&self.source);
        }
    }
}

impl Flights {
    fn new(now: Instant, config: FlightConfig) -> Flights {
        Flights {
            state: Mutex::new(FlightState {
                table: RelayFlights::new(config, now).expect("validated flight config"),
                next_waiter: 0,
                waiting: HashMap::new(),
                fetches: HashMap::new(),
            }),
            wait: DEFAULT_FLIGHT_WAIT,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FlightState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One relayed request: want, then the answer (or the wait's end).
    async fn relay(self: Arc<Self>, source: RelaySource, request: SourceRequest) -> SourceResult {
        let now = source.client.now();
        let deadline = now + self.wait;
        let (tx, rx) = oneshot::channel();
        let waiter = {
            let mut state = self.lock();
            let waiter = state.next_waiter;
            state.next_waiter += 1;
            match state.table.handle_want(now, &request, waiter, deadline) {
                Ok(want) => {
                    tracing::trace!(path = %request.path, ?want, "relay flight");
                    source.counters.misses.inc();
                    if matches!(want, peerblock_core::server::Want::Joined(_)) {
                        source.counters.flight_joins.inc();
                    }
                    state.waiting.insert(waiter, tx);
                }
                Err(full) => {
                    tracing::warn!(path = %request.path, error = %full, "relay refused: single-flight table full");
                    return SourceResult::Failed;
                }
            }
            waiter
        };
        let mut waiting = Waiting {
            flights: self.clone(),
            source: source.clone(),
            waiter,
            answered: false,
            now,
        };
        self.drain(&source);
        let wait = deadline.saturating_duration_since(source.client.now());
        let answer = match tokio::time::timeout(wait, rx).await {
            Ok(Ok(answer)) => answer,
            // Timed out (or the table dropped us): the deadline's own answer.
            _ => {
                let now = source.client.now();
                self.lock().table.handle_timeout(now);
                self.drain(&source);
                FlightAnswer::TimedOut
            }
        };
        waiting.answered = true;
        answer.into_source_result()
    }

    /// Carries out what the table asks: upstream fetches (on tasks of their own, through
    /// `source`), answers to waiters, abandoned fetches aborted.
    fn drain(self: &Arc<Self>, source: &RelaySource) {
        let mut state = self.lock();
        while let Some(event) = state.table.poll_event() {
            match event {
                FlightEvent::Fetch { id, request } => {
                    let (flights, source) = (self.clone(), source.clone());
                    let task = tokio::spawn(async move {
                        let result = upstream(&source, &request).await;
                        let now = source.client.now();
                        {
                            let mut state = flights.lock();
                            state.fetches.remove(&id);
                            state.table.handle_result(now, id, result);
                        }
                        flights.drain(&source);
                    });
                    state.fetches.insert(id, task);
                }
                FlightEvent::Answer { waiter, answer, .. } => {
                    if let Some(tx) = state.waiting.remove(&waiter) {
                        let _ = tx.send(answer);
                    }
                }
                FlightEvent::Abandon { id, .. } => {
                    if let Some(task) = state.fetches.remove(&id) {
                        task.abort();
                    }
                }
            }
        }
    }
}
