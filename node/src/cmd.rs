//! The bodies of `peerblock-node serve`, `fetch` and `get`: each wires the driver's parts
//! (server, stores, client, reader, roster service, metrics endpoint) for one command.
//! The plans they run are validated in [`crate::node`].

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use peerblock_core::client::{placement_members, BlockRequest, Ending};
use peerblock_core::read::ReadOutcome;
use peerblock_core::roster::{Membership, RosterMember, MAX_ROSTER_MEMBERS, NO_EPOCH};
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client::{Client, ClientOptions, Fetched, GetOptions, OutcomeClass, Peer, PoolConfig};
use crate::config::{BodyPathKey, NodeConfig, WhenFullKey};
use crate::manifest::{self, Manifest};
use crate::metrics::{serve_admin, Metrics};
use crate::node::{DriverKind, FetchPlan, GetPlan, NodeError, ServePlan};
use crate::pace::UploadPacing;
use crate::progress::Progress;
use crate::reader::{BlockSpec, PeerOrigin, PlacementDiscovery, Reader};
use crate::relay::RelaySource;
use crate::roster::RosterService;
use crate::server::{Server, ServerHandle, ServerOptions};
use crate::source::{BlockSource, FileStore, DEFAULT_MAX_BLOCK_SIZE};
use crate::SharedMembership;

pub use crate::node::SHUTDOWN_GRACE;

/// How often `serve` looks at its roster table to print `members N` when the count
/// changed (a log line for operators and tests, not a protocol timer).
const MEMBERS_CHECK: Duration = Duration::from_millis(100);

/// Rosters `fetch` asks besides its seeds, to learn the cluster beyond what the seeds
/// know (one round, bounded).
const MAX_EXTRA_ROSTERS: usize = 32;

/// How long `fetch` waits for the rosters beyond its seeds (issue 25): a member that
/// accepts and never answers costs the fetch at most this, not the response-header
/// deadline (10 s) per connection. Loopback and LAN rosters answer in milliseconds; a
/// roster not in by then is simply not learned (the seeds' rosters already were).
const EXTRA_ROSTERS_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

/// The `--id` a fetch uses in its own roster table: not a placement id (not 64 hex
/// digits), so it is never a candidate holder of anything.
const FETCH_SELF_ID: &str = "peerblock-fetch";

fn io_err(what: &'static str, path: impl ToString, source: std::io::Error) -> NodeError {
    NodeError::Io {
        what,
        path: path.to_string(),
        source,
    }
}

/// The client options of a node or a command, from its configuration.
fn client_options(
    config: &NodeConfig,
    clock: Clock,
    metrics: Metrics,
    local_ip: Option<std::net::IpAddr>,
) -> ClientOptions {
    let pool = config.pool();
    let mut options = ClientOptions::new(clock, metrics);
    options.exchange = config.client_config();
    options.pool = PoolConfig {
        idle_per_peer: pool.idle_per_peer,
        idle_global: pool.idle_total,
        idle_timeout: pool.idle_timeout,
    };
    options.max_conns_per_peer = pool.max_connections_per_peer;
    options.peers.cooldown.failed = config.client.failed_dial_cooldown;
    options.local_ip = local_ip;
    options
}

/// The client of a node or a command, from its configuration.
pub(crate) fn client(
    config: &NodeConfig,
    clock: Clock,
    metrics: Metrics,
    local_ip: Option<std::net::IpAddr>,
) -> Result<Client, NodeError> {
    Client::new(client_options(config, clock, metrics, local_ip))
        .map_err(|e| NodeError::Failed(format!("client configuration: {e}")))
}

/// A seed for a command's randomness: different per run (reads spread differently each
/// time), derived from the process id and the wall clock, never a global RNG.
pub(crate) fn run_seed(tag: &[u8]) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut h = blake3::Hasher::new();
    h.update(tag);
    h.update(&std::process::id().to_le_bytes());
    h.update(&nanos.to_le_bytes());
    u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().expect("8 bytes"))
}

pub(crate) fn lock(m: &SharedMembership) -> std::sync::MutexGuard<'_, Membership> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// SIGINT and SIGTERM, caught from the moment this is created (so a signal that arrives
/// right after `listening` is printed still stops the node gracefully).
struct Stop {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    int: std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send>>,
}

impl Stop {
    fn install() -> Stop {
        let mut int = Box::pin(tokio::signal::ctrl_c());
        // Poll once so the SIGINT handler is registered now, not at the first await.
        let waker = std::task::Waker::noop();
        let _ = int
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker));
        Stop {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
            int,
        }
    }

    async fn wait(mut self) {
        #[cfg(unix)]
        if let Some(term) = self.term.as_mut() {
            tokio::select! {
                _ = &mut self.int => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = self.int.await;
    }
}

/// A future that resolves on SIGINT or SIGTERM, the handlers installed now.
pub(crate) fn stop_signal() -> impl Future<Output = ()> {
    let stop = Stop::install();
    stop.wait()
}

/// `serve`: binds, prints `listening ADDR` (then `metrics ADDR` with `--metrics`) on
/// stdout, dials peers from the `--listen` address (unless it is unspecified), serves the
/// store (relaying when `[listener] relay` is on), runs the roster service and the
/// metrics endpoint, prints `members N` whenever the roster table's size changes, and
/// shuts down gracefully on SIGINT/SIGTERM.
pub async fn serve(plan: ServePlan) -> Result<(), NodeError> {
    let clock = Clock::new(std::time::Instant::now());
    let metrics = Metrics::new();
    prime_series(&metrics);
    let listener = bind(plan.listen, plan.config.listener.when_full)
        .map_err(|e| io_err("cannot bind --listen", plan.listen, e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| io_err("cannot read the bound address of", plan.listen, e))?;
    // With port 0 the advertised address is the one the kernel chose (unless
    // `--advertise` named it).
    let advertised = if plan.listen.port() == 0 && !plan.advertise_given {
        bound.to_string()
    } else {
        plan.advertised_addr.clone()
    };
    let me = RosterMember {
        id: plan.node_id.clone(),
        addr: advertised.clone(),
        weight: 1.0,
        record: Default::default(),
    };
    let membership: SharedMembership =
        Arc::new(Mutex::new(serve_membership(&plan, me, &advertised)?));
    let ip = plan.listen.ip();
    let local_ip = (!ip.is_unspecified()).then_some(ip);
    let store = FileStore::with_cache(
        &plan.store,
        DEFAULT_MAX_BLOCK_SIZE,
        plan.config.listener.block_cache_bytes,
    )
    .with_corrupt_counter(metrics.store_corrupt.clone());
    let store = if plan.config.listener.relay && plan.config.store.cache_bytes > 0 {
        let (root, bound, counters) = (
            plan.store.clone(),
            plan.config.store.cache_bytes,
            metrics.relay_cache.clone(),
        );
        let cache = tokio::task::spawn_blocking(move || {
            peerblock_common::relay_cache::RelayCache::open(&root, bound, counters)
        })
        .await
        .map_err(|e| NodeError::Failed(format!("opening the relay cache: {e}")))?
        .map_err(|source| NodeError::Io {
            what: "relay cache",
            path: plan
                .store
                .join(peerblock_common::relay_cache::RELAY_CACHE_DIR)
                .display()
                .to_string(),
            source,
        })?;
        store.with_relay_cache(cache)
    } else {
        store
    };
    // Temporary files of imports and writes killed mid-way (their process is gone).
    let root = plan.store.clone();
    match tokio::task::spawn_blocking(move || peerblock_common::store::remove_stale_temps(&root))
        .await
    {
        Ok(Ok(removed)) if !removed.is_empty() => {
            tracing::info!(
                count = removed.len(),
                "removed stale temporary files from the store"
            )
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "scanning the store for stale temporary files failed")
        }
        Err(e) => tracing::warn!(error = %e, "the stale temporary file scan did not complete"),
    }
    // The store's file system, sampled now (the first scrape has it) and then every
    // STORE_FS_SAMPLE while the node runs.
    sample_store_fs(&plan.store, &metrics);
    let fs_sampler = tokio::spawn(sample_store_fs_every(plan.store.clone(), metrics.clone()));
    let server_config = Arc::new(
        plan.config
            .server_config(plan.node_id.clone(), advertised.clone()),
    );
    let parts = NodeParts {
        plan: &plan,
        clock,
        metrics: metrics.clone(),
        membership: membership.clone(),
        local_ip,
        store,
        server_config,
    };
    let node = match plan.driver {
        DriverKind::Tokio => RunningNode::tokio(parts, listener)?,
        DriverKind::Mio => RunningNode::mio(parts, listener)?,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    // Set once the node serves (`listening` printed), cleared when it starts to stop:
    // `/readyz` answers 503 from the first signal on, so an orchestrator stops sending
    // new readers while in-flight responses finish.
    let serving = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut metrics_at = None;
    let metrics_task = match plan.metrics {
        Some(addr) => {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|e| io_err("cannot bind --metrics", addr, e))?;
            let at = l.local_addr().map_err(|e| io_err("--metrics", addr, e))?;
            tracing::info!("metrics at http://{at}/metrics");
            metrics_at = Some(at);
            let mut stop = stop_rx.clone();
            let m = metrics.clone();
            let ready = readiness(&plan, &advertised, membership.clone(), serving.clone());
            Some(tokio::spawn(async move {
                serve_admin(l, m, Some(ready), async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
            }))
        }
        None => None,
    };
    let stop = Stop::install();
    serving.store(true, std::sync::atomic::Ordering::SeqCst);
    say(&format!("listening {bound}"));
    if let Some(at) = metrics_at {
        say(&format!("metrics {at}"));
    }
    tracing::info!(id = %plan.node_id, %advertised, store = %plan.store.display(), driver = ?plan.driver, "serving");
    let refresh = plan.config.refresh_config(plan.seeds.clone());
    let node = node.start_roster(membership.clone(), refresh)?;
    let watch_members = tokio::spawn(print_members(membership.clone()));
    stop.wait().await;
    serving.store(false, std::sync::atomic::Ordering::SeqCst);
    tracing::info!("shutting down: no new connections, in-flight responses finish");
    watch_members.abort();
    fs_sampler.abort();
    node.shutdown().await;
    let _ = stop_tx.send(true);
    if let Some(task) = metrics_task {
        let _ = task.await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Creates, at 0, the labelled series the alert rules and the dashboard divide by or
/// watch (deploy/prometheus): responses `200`, `404`, `503` and a refusal count per
/// reason. A labelled counter that first appears at a high value (a node whose first
/// refusals came between two scrapes) has no rate in Prometheus until it moves again; one
/// scraped at 0 from the start does.
fn prime_series(metrics: &Metrics) {
    use crate::metrics::{ReasonLabel, StatusLabel};
    for status in [200, 404, 503] {
        let _created = metrics.requests.get_or_create(&StatusLabel { status });
    }
    for reason in peerblock_core::refusal::RefusalReason::ALL {
        let _created = metrics.connections_refused.get_or_create(&ReasonLabel {
            reason: reason.as_token().to_owned(),
        });
    }
}

/// How often `serve` samples the file system holding its store for
/// `peerblock_store_filesystem_avail_bytes` and `_size_bytes`: a disk fills over minutes,
/// and Prometheus scrapes every 15 to 60 s.
pub(crate) const STORE_FS_SAMPLE: std::time::Duration = std::time::Duration::from_secs(15);

/// Sets the store file system gauges from one `statvfs` of `store` (left as they were,
/// with a debug line, when it fails: a store that is gone fails `/readyz` instead).
fn sample_store_fs(store: &std::path::Path, metrics: &Metrics) {
    match rustix::fs::statvfs(store) {
        Ok(st) => {
            let unit = st.f_frsize.max(1);
            let clamp =
                |blocks: u64| i64::try_from(blocks.saturating_mul(unit)).unwrap_or(i64::MAX);
            metrics.store_fs_avail_bytes.set(clamp(st.f_bavail));
            metrics.store_fs_size_bytes.set(clamp(st.f_blocks));
        }
        Err(e) => {
            tracing::debug!(store = %store.display(), error = %e, "statvfs of the store failed")
        }
    }
}

/// [`sample_store_fs`] every [`STORE_FS_SAMPLE`], off the runtime's threads.
async fn sample_store_fs_every(store: std::path::PathBuf, metrics: Metrics) {
    let mut tick = tokio::time::interval(STORE_FS_SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (s, m) = (store.clone(), metrics.clone());
        let _ = tokio::task::spawn_blocking(move || sample_store_fs(&s, &m)).await;
    }
}

/// `serve`'s readiness (`GET /readyz` on the admin address): the node serves (its
/// listener bound, no stop signal yet), its store directory can be read, and, when its
/// seeds name anyone but itself, its roster table knows at least one member (learned from
/// a seed's roster, or from a peer that called). A node whose seeds all resolve to its own
/// address (the first pod of a DaemonSet) has nobody to learn from and is ready alone.
fn readiness(
    plan: &ServePlan,
    advertised: &str,
    membership: SharedMembership,
    serving: Arc<std::sync::atomic::AtomicBool>,
) -> crate::metrics::ReadinessCheck {
    let store = plan.store.clone();
    let needs_peers = !plan.seeds.is_empty()
        && (plan.seeds_unresolved || plan.seed_addrs.iter().any(|a| a != advertised));
    let seeds = plan.seeds.join(", ");
    Arc::new(move || {
        let mut not = Vec::new();
        if !serving.load(std::sync::atomic::Ordering::SeqCst) {
            not.push("the peer listener is not serving (starting or stopping)".to_owned());
        }
        match std::fs::read_dir(&store) {
            Ok(mut entries) => {
                if let Some(Err(e)) = entries.next() {
                    not.push(format!("store {}: cannot be read: {e}", store.display()));
                }
            }
            Err(e) => not.push(format!("store {}: cannot be read: {e}", store.display())),
        }
        if needs_peers && lock(&membership).is_empty() {
            not.push(format!(
                "no member learned yet: no seed has answered with a roster ({seeds})"
            ));
        }
        if not.is_empty() {
            Ok(())
        } else {
            Err(not.join("; "))
        }
    })
}

/// The table `serve` keeps: this node (its record signed when its id is its key's), the
/// `[roster]` membership policy and the configured (possibly authority-signed) epoch.
fn serve_membership(
    plan: &ServePlan,
    me: RosterMember,
    advertised: &str,
) -> Result<Membership, NodeError> {
    let weight = me.weight;
    let mut table = Membership::new(me, NO_EPOCH, plan.config.roster.capacity)
        .map_err(|e| NodeError::usage("--listen", format!("advertised address: {e}")))?
        .with_policy(plan.config.membership_policy()?)
        .map_err(|e| NodeError::Failed(format!("membership policy: {e}")))?;
    match plan.config.signed_epoch()? {
        (epoch, Some(sig)) => table
            .set_signed_epoch(epoch, sig)
            .map_err(|()| NodeError::Failed("roster.epoch_signature does not verify".into()))?,
        (epoch, None) => table.raise_epoch(epoch),
    }
    if plan.signed {
        let seq = crate::identity::next_seq(&plan.key_file)?;
        let mut record = plan
            .key
            .sign(advertised, weight, seq)
            .map_err(|e| NodeError::usage("--listen", format!("advertised address: {e}")))?;
        // Served with the record: admitted clusters place only admitted members.
        record.admission = plan.config.node_admission(&plan.key.public())?;
        table
            .set_record(record)
            .map_err(|e| NodeError::Failed(format!("own record: {e}")))?;
        tracing::info!(id = %plan.key.id(), seq, "signed member record");
    }
    Ok(table)
}

/// The accept queue of a silent listener (`[listener] when_full = "silent"`): while every
/// session is taken the server accepts nothing, the kernel completes at most this many
/// more dials (they wait to be accepted), and SYNs beyond it go unanswered, as the
/// reference's full listener left dials unanswered. Small, so the silence begins almost
/// where the session limit is; not zero, so a burst of dials to a listener with free
/// sessions is not dropped while the accept loop catches up.
const SILENT_BACKLOG: i32 = 4;

/// The peer listener: std's (backlog 128) when refusing, a short accept queue when silent.
fn bind(
    addr: std::net::SocketAddr,
    when_full: WhenFullKey,
) -> std::io::Result<std::net::TcpListener> {
    if when_full == WhenFullKey::Refuse {
        return std::net::TcpListener::bind(addr);
    }
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(SILENT_BACKLOG)?;
    Ok(socket.into())
}

/// What both drivers' `serve` start from.
struct NodeParts<'a> {
    plan: &'a ServePlan,
    clock: Clock,
    metrics: Metrics,
    membership: SharedMembership,
    local_ip: Option<std::net::IpAddr>,
    store: FileStore,
    server_config: Arc<peerblock_core::server::ServerConfig>,
}

/// Connections the relay's client opens to one peer: one fewer than the node's client
/// may (at least 1). Both dial from the node's address, so a peer counts them against one
/// per-source session quota (`[listener] max_sessions_per_source`, 4 by default, the same
/// as `max_connections_per_peer`): with the node's roster connection open, a relay using
/// all four would be refused `source-sessions`, and a refused parent sends every relay
/// to the origin for the refusal's 15 s (the block's parent never gets the block).
fn relay_conns_per_peer(node: usize) -> usize {
    node.saturating_sub(1).max(1)
}

/// Where the node's relay asks before the origin: the block's parent by placement over
/// the node's roster (`peerblock_common::relay::Parent`), within `[read]
/// close_group_size`. A node whose id is not a placement id (it cannot be placed) has no
/// parent: it asks the origin.
fn placement_parent(parts: &NodeParts<'_>) -> crate::relay::Parent {
    match parts
        .plan
        .node_id
        .parse::<peerblock_core::placement::PeerId>()
    {
        Ok(me) => crate::relay::Parent::Placement {
            membership: parts.membership.clone(),
            me,
            close_group: parts.plan.config.read.close_group_size,
        },
        Err(_) => crate::relay::Parent::None,
    }
}

/// A serving node on one of the two drivers: its server, its client and (once started)
/// its roster service.
enum RunningNode {
    Tokio {
        handle: ServerHandle,
        client: Client,
        roster: Option<RosterService>,
    },
    Mio {
        runtime: peerblock_mio::Runtime,
        handle: peerblock_mio::ServerHandle,
        client: peerblock_mio::Client,
        roster: Option<peerblock_mio::RosterService>,
    },
}

impl RunningNode {
    /// The tokio server on `listener`, relaying through a breakerless client when
    /// `[listener] relay` is on.
    fn tokio(parts: NodeParts<'_>, listener: std::net::TcpListener) -> Result<Self, NodeError> {
        let config = &parts.plan.config;
        let client = client(config, parts.clock, parts.metrics.clone(), parts.local_ip)?;
        let source: Arc<dyn BlockSource> = if config.listener.relay {
            let mut upstream =
                client_options(config, parts.clock, parts.metrics.clone(), parts.local_ip);
            upstream.peers.breaker = None;
            upstream.max_conns_per_peer = relay_conns_per_peer(upstream.max_conns_per_peer);
            let upstream = Client::new(upstream)
                .map_err(|e| NodeError::Failed(format!("relay client configuration: {e}")))?;
            let parent = placement_parent(&parts);
            // Object origins (`fetch URL`): plain http, and https through rustls with the
            // system's roots plus `[listener] relay_origin_ca`.
            let tls = crate::origin::tls_config(config.listener.relay_origin_ca.as_deref())
                .map_err(|e| NodeError::Failed(format!("[listener] relay_origin_ca: {e}")))?;
            let objects =
                crate::origin::ObjectClient::new(config.client_config(), parts.clock, Some(tls))
                    .with_local_ip(parts.local_ip);
            let relay = RelaySource::new(parts.store, upstream, None)
                .with_object_client(objects)
                .with_parent(parent)
                .with_flights(
                    peerblock_core::server::FlightConfig {
                        // Parents by placement cannot loop (core's docs): a reader's
                        // request and a relay's for one block share one fetch.
                        share_across_hops: true,
                        ..peerblock_core::server::FlightConfig::default()
                    },
                    config.listener.source_timeout,
                )
                .map_err(|e| NodeError::Failed(format!("relay single-flight: {e}")))?
                .with_counters(parts.metrics.relay.clone());
            Arc::new(relay)
        } else {
            Arc::new(parts.store)
        };
        let mut options = ServerOptions::new(parts.server_config, source, parts.clock);
        options.admission = config.admission();
        options.membership = Some(parts.membership);
        options.metrics = parts.metrics;
        let (node_pace, conn_pace) = config.upload_pacing();
        options.silent_when_full = config.listener.when_full == WhenFullKey::Silent;
        options.silent_channels =
            (config.listener.max_channels != 0).then_some(config.listener.max_channels);
        options.pacing = UploadPacing::new(
            node_pace,
            conn_pace,
            parts.clock.to_core(std::time::Instant::now()),
        )
        .map_err(|e| NodeError::Failed(format!("upload pacing: {e}")))?;
        let listener = listener
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(listener))
            .map_err(|e| io_err("cannot use --listen", parts.plan.listen, e))?;
        let server = Server::from_listener(listener, options)
            .map_err(|e| NodeError::Failed(format!("server: {e}")))?;
        Ok(RunningNode::Tokio {
            handle: server.spawn(),
            client,
            roster: None,
        })
    }

    /// The mio server on `listener` (`plan.threads` workers), relaying through a
    /// breakerless mio client when `[listener] relay` is on.
    fn mio(parts: NodeParts<'_>, listener: std::net::TcpListener) -> Result<Self, NodeError> {
        let config = &parts.plan.config;
        let runtime = peerblock_mio::Runtime::new(parts.plan.threads, parts.clock)
            .map_err(|e| NodeError::Failed(format!("starting the mio workers: {e}")))?;
        let mio_client = |options: ClientOptions| {
            peerblock_mio::Client::new(&runtime, options)
                .map_err(|e| NodeError::Failed(format!("client configuration: {e}")))
        };
        let client = mio_client(client_options(
            config,
            parts.clock,
            parts.metrics.clone(),
            parts.local_ip,
        ))?;
        let parent = placement_parent(&parts);
        let mut options = peerblock_mio::ServerOptions::new(parts.server_config, parts.store);
        options.admission = config.admission();
        options.membership = Some(parts.membership.clone());
        options.metrics = parts.metrics.clone();
        options.body = match config.listener.body_path {
            BodyPathKey::Buffered => peerblock_mio::BodyPath::Buffered,
            BodyPathKey::Sendfile => peerblock_mio::BodyPath::Sendfile,
        };
        if config.listener.relay {
            let mut upstream =
                client_options(config, parts.clock, parts.metrics.clone(), parts.local_ip);
            upstream.peers.breaker = None;
            upstream.max_conns_per_peer = relay_conns_per_peer(upstream.max_conns_per_peer);
            options.relay = Some(peerblock_mio::RelayOptions {
                client: mio_client(upstream)?,
                parent,
                counters: parts.metrics.relay.clone(),
            });
        }
        let server = peerblock_mio::Server::from_listener(listener, options)
            .map_err(|e| NodeError::Failed(format!("server: {e}")))?;
        let handle = server.start(&runtime);
        Ok(RunningNode::Mio {
            runtime,
            handle,
            client,
            roster: None,
        })
    }

    /// Starts the roster service on the node's driver.
    fn start_roster(
        self,
        membership: SharedMembership,
        refresh: peerblock_core::roster::RefreshConfig,
    ) -> Result<Self, NodeError> {
        let failed = |e: peerblock_core::roster::RefreshConfigError| {
            NodeError::Failed(format!("roster service: {e}"))
        };
        Ok(match self {
            RunningNode::Tokio { handle, client, .. } => {
                let roster =
                    RosterService::start(client.clone(), membership, refresh, run_seed(b"roster"))
                        .map_err(failed)?;
                RunningNode::Tokio {
                    handle,
                    client,
                    roster: Some(roster),
                }
            }
            RunningNode::Mio {
                runtime,
                handle,
                client,
                ..
            } => {
                let roster = peerblock_mio::RosterService::start(
                    &runtime,
                    client.clone(),
                    membership,
                    refresh,
                    run_seed(b"roster"),
                )
                .map_err(failed)?;
                RunningNode::Mio {
                    runtime,
                    handle,
                    client,
                    roster: Some(roster),
                }
            }
        })
    }

    /// Stops the roster service, then shuts the server down with [`SHUTDOWN_GRACE`].
    async fn shutdown(self) {
        match self {
            RunningNode::Tokio { handle, roster, .. } => {
                if let Some(roster) = roster {
                    roster.shutdown().await;
                }
                handle.shutdown(SHUTDOWN_GRACE).await;
            }
            RunningNode::Mio {
                runtime,
                handle,
                roster,
                client,
            } => {
                // The mio handles block: wait for them off the tokio reactor.
                let stopped = tokio::task::spawn_blocking(move || {
                    if let Some(roster) = roster {
                        roster.shutdown();
                    }
                    handle.shutdown(SHUTDOWN_GRACE);
                    drop(client);
                    drop(runtime);
                })
                .await;
                if let Err(e) = stopped {
                    tracing::warn!(error = %e, "stopping the mio driver failed");
                }
            }
        }
    }
}

/// Prints a line on stdout and flushes it (stdout is a pipe under tests and scripts).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Prints `members N` (the node itself included) at start and whenever N changes.
async fn print_members(membership: SharedMembership) {
    let mut last = None;
    let mut tick = tokio::time::interval(MEMBERS_CHECK);
    loop {
        tick.tick().await;
        let n = lock(&membership).len() + 1;
        if last != Some(n) {
            last = Some(n);
            say(&format!("members {n}"));
        }
    }
}

/// What one peer gave a `fetch`, for its report.
#[derive(Default)]
struct PeerTally {
    bytes: u64,
    ok: u64,
    invalid: u64,
    refused: u64,
    absent: u64,
    failed: u64,
}

/// The roster table of a one-shot command (`fetch`, `check --repair`) that learns the
/// cluster from its seeds: itself as `id` (not a placement id, so never a holder of
/// anything) at the unroutable `addr`, the configured membership policy (verified-only,
/// authority), but per-source budgets of the table's capacity, since it learns the whole
/// cluster from the seeds its operator named in one pass (memory stays bounded by it).
pub(crate) fn command_membership(
    config: &NodeConfig,
    id: &str,
    addr: &str,
) -> Result<SharedMembership, NodeError> {
    let me = RosterMember {
        id: id.to_owned(),
        addr: addr.to_owned(),
        weight: 0.0,
        record: Default::default(),
    };
    let mut policy = config.membership_policy()?;
    policy.max_new_per_source = MAX_ROSTER_MEMBERS;
    policy.max_checks_per_source = MAX_ROSTER_MEMBERS;
    Ok(Arc::new(Mutex::new(
        Membership::new(me, NO_EPOCH, config.roster.capacity)
            .map_err(|e| NodeError::Failed(format!("roster table: {e}")))?
            .with_policy(policy)
            .map_err(|e| NodeError::Failed(format!("membership policy: {e}")))?,
    )))
}

/// Rounds of roster requests `fetch` makes to seeds that refused (503 with a refusal
/// header) before giving up: each waits out the shortest `Retry-After` the seeds gave
/// (bounded by the read configuration's `max_retry_after`, 15 s by default), as a read
/// waits out refusing holders. Three waits, as `max_refusal_waits`.
const MAX_SEED_WAITS: u32 = 3;

/// Learns the cluster for a fetch: the seeds' rosters (waiting out seeds that refused
/// for lack of capacity, at most [`MAX_SEED_WAITS`] times), then (one round) the rosters
/// of the members they named. Errs when no seed answered with a roster: `busy` (exit 1,
/// with the seeds' reason and retry time) when they refused, `unavailable` otherwise.
pub(crate) async fn learn_cluster(
    client: &Client,
    seeds: &[String],
    membership: &SharedMembership,
    max_wait: std::time::Duration,
) -> Result<(), NodeError> {
    let ask = |addr: String| {
        let client = client.clone();
        async move {
            let f = client.fetch_roster(&addr, None, None).await;
            (addr, f)
        }
    };
    let merge = |addr: &str, f: &Fetched| -> bool {
        if let Some(answer) = f.roster() {
            let responder = answer.responder.as_deref().unwrap_or(addr);
            // Merged with the address asked as the source: the responder's own entry is
            // first-hand from that address (placeable), what it relays is hearsay.
            let report = lock(membership).merge_from(client.now(), addr, responder, &answer.roster);
            tracing::debug!(%addr, ?report, "roster merged");
            true
        } else {
            tracing::warn!(%addr, outcome = f.describe(), "roster fetch failed");
            false
        }
    };
    let mut waits = 0;
    loop {
        let mut first = JoinSet::new();
        for seed in seeds {
            first.spawn(ask(seed.clone()));
        }
        let mut answered = false;
        // The shortest wait a refusing seed asked for, and its reason.
        let mut busy: Option<(std::time::Duration, String)> = None;
        let mut failures = Vec::new();
        while let Some(Ok((addr, f))) = first.join_next().await {
            if merge(&addr, &f) {
                answered = true;
            } else if let Some(Ending::Refused(r)) = &f.ending {
                let wait = r.retry_after.map_or(max_wait, |d| d.min(max_wait));
                let reason = r
                    .reason
                    .map_or_else(|| "full".to_owned(), |r| r.to_string());
                if busy.as_ref().is_none_or(|(w, _)| wait < *w) {
                    busy = Some((wait, reason));
                }
            } else {
                failures.push(format!("{addr}: {}", f.describe()));
            }
        }
        if answered {
            break;
        }
        match busy {
            Some((wait, reason)) if waits < MAX_SEED_WAITS => {
                waits += 1;
                eprintln!(
                    "seeds busy ({reason}), retry after {} s (wait {waits} of {MAX_SEED_WAITS})",
                    wait.as_secs().max(1)
                );
                tokio::time::sleep(wait.max(std::time::Duration::from_millis(100))).await;
            }
            Some((wait, reason)) => {
                return Err(NodeError::Failed(format!(
                    "busy: every seed refused ({reason}) after {MAX_SEED_WAITS} waits, retry after {} s ({})",
                    wait.as_secs().max(1),
                    seeds.join(", ")
                )))
            }
            None => {
                return Err(NodeError::Failed(format!(
                    "unavailable: no seed answered with a roster ({})",
                    failures.join("; ")
                )))
            }
        }
    }
    let (snapshot, me) = {
        let m = lock(membership);
        (m.snapshot(), m.me().addr.clone())
    };
    // Each address once (invented members may share one), at most MAX_EXTRA_ROSTERS.
    let mut seen = std::collections::BTreeSet::new();
    let more: Vec<String> = snapshot
        .members
        .into_iter()
        .map(|m| m.addr)
        .filter(|a| !seeds.contains(a) && *a != me && seen.insert(a.clone()))
        .take(MAX_EXTRA_ROSTERS)
        .collect();
    let mut second = JoinSet::new();
    for addr in more {
        second.spawn(ask(addr));
    }
    // Bounded: a member that accepts and never answers (a tarpit named in a seed's
    // roster) costs the fetch at most EXTRA_ROSTERS_BOUND; the rest are dropped.
    let _ = tokio::time::timeout(EXTRA_ROSTERS_BOUND, async {
        while let Some(Ok((addr, f))) = second.join_next().await {
            merge(&addr, &f);
        }
    })
    .await;
    second.abort_all();
    Ok(())
}

/// `fetch`: reads the manifest and every block through the read engine, validated, and
/// writes the file through a temporary file of its own (see [`PartFile`]). Prints one line
/// per peer on stdout (`ADDR N bytes K blocks I invalid R refused A absent F failed`);
/// each failed block's outcome class goes to stderr. SIGINT or SIGTERM stops it at once,
/// removing the temporary file ([`NodeError::Interrupted`]).
pub async fn fetch(plan: FetchPlan) -> Result<(), NodeError> {
    let stop = Stop::install();
    tokio::select! {
        r = fetch_file(plan) => r,
        () = stop.wait() => Err(NodeError::Interrupted(
            "the temporary file was removed, the output left as it was".to_owned(),
        )),
    }
}

async fn fetch_file(plan: FetchPlan) -> Result<(), NodeError> {
    let clock = Clock::new(std::time::Instant::now());
    let metrics = Metrics::new();
    let client = client(&plan.config, clock, metrics, plan.bind)?;
    let membership = command_membership(&plan.config, FETCH_SELF_ID, "fetch.invalid:0")?;
    let mut read_config = plan.config.read_config();
    learn_cluster(
        &client,
        &plan.seeds,
        &membership,
        read_config.max_retry_after,
    )
    .await?;
    let known = lock(&membership).len();
    if known == 0 {
        return Err(NodeError::Failed(format!(
            "unavailable: the seeds' rosters named no member ({})",
            plan.seeds.join(", ")
        )));
    }
    tracing::info!(members = known, "cluster learned");
    // A cluster smaller than the configured close group has every placeable member in
    // it: a block's close group is the whole cluster, so the read can conclude Absent
    // once they all said 404 (it never can with a close group larger than the cluster).
    let placeable = placement_members(&lock(&membership)).len();
    read_config.close_group_size = read_config.close_group_size.min(placeable.max(1));
    let discovery = Arc::new(PlacementDiscovery::new(
        membership.clone(),
        read_config.close_group_size,
    ));
    let tally: Arc<Mutex<BTreeMap<String, PeerTally>>> = Arc::default();
    let observer_tally = tally.clone();
    // The status of the last `502 + X-DART-Upstream-Status` a relay answered: the origin
    // refused the URL's credential (the relay is not to blame).
    let upstream_refused: Arc<Mutex<Option<u16>>> = Arc::default();
    let observer_refused = upstream_refused.clone();
    let observer: crate::reader::GetObserver = Arc::new(move |peer: &Peer, f: &Fetched| {
        if let Some(Ending::UpstreamRefused { status }) = &f.ending {
            *observer_refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(*status);
        }
        let mut t = observer_tally.lock().unwrap_or_else(|e| e.into_inner());
        let e = t.entry(peer.addr.clone()).or_default();
        match f.class {
            OutcomeClass::Ok => {
                e.ok += 1;
                e.bytes += f.bytes().map_or(0, |b| b.len() as u64);
            }
            OutcomeClass::Invalid => e.invalid += 1,
            OutcomeClass::Busy => e.refused += 1,
            OutcomeClass::Absent => e.absent += 1,
            OutcomeClass::Unavailable => e.failed += 1,
            OutcomeClass::Cancelled => {}
        }
    });
    if let Some(object) = &plan.object {
        let parts = ObjectFetch {
            client,
            discovery,
            read_config,
            tally,
            observer,
            upstream_refused,
            clock,
        };
        return fetch_object(&plan, object, parts).await;
    }
    // With an origin the read's last resort is a validated GET from it (its bytes are
    // reported on its own line), and every GET names it so holders relay for us.
    let origin = match &plan.origin {
        Some(url) => {
            read_config.origin = true;
            let origin = PeerOrigin::new(client.clone(), url)
                .ok_or_else(|| {
                    NodeError::usage("--origin", format!("{url:?} is not http://HOST:PORT"))
                })?
                .with_observer(observer.clone());
            Some(origin)
        }
        None => None,
    };
    let mut reader = Reader::new(client, discovery, read_config, run_seed(b"fetch"))
        .map_err(|e| NodeError::Failed(format!("read configuration: {e}")))?
        .with_observer(observer);
    if let Some(origin) = origin {
        reader = reader.with_origin(Arc::new(origin));
    }
    let reader = Arc::new(reader);
    let origin_url: Option<Arc<str>> = plan.origin.as_deref().map(Arc::from);
    let manifest = match read_manifest(&reader, &plan.chunk, origin_url.clone()).await {
        Ok(m) => Arc::new(m),
        Err(e) => {
            print_tally(&tally);
            return Err(e);
        }
    };
    let result = read_blocks(&reader, &plan, manifest.clone(), origin_url).await;
    print_tally(&tally);
    result
}

/// Reads the manifest (block 0) through the read engine like any block: each copy is
/// checked against the chunk key as it arrives, so a holder whose copy is bad is never
/// asked again and the read goes on to the next holder.
async fn read_manifest(
    reader: &Reader,
    chunk: &ChunkKey,
    origin: Option<Arc<str>>,
) -> Result<Manifest, NodeError> {
    let key = *chunk;
    let spec = BlockSpec {
        key: manifest::block_key(chunk, 0),
        path: BlockPath {
            key: *chunk,
            index: 0,
        },
        expected: None,
        validator: Some(Arc::new(move |b| manifest::verify_manifest(&key, b))),
        origin,
    };
    let r = reader.read(spec).await;
    let bytes = match &r.outcome {
        ReadOutcome::Found(b) | ReadOutcome::FoundAtOrigin(b) => b.clone(),
        ReadOutcome::Invalid => {
            return Err(NodeError::Failed(format!(
                "manifest of {chunk}: invalid ({} copies failed validation against the key, no holder had a valid one)",
                r.stats.invalid
            )))
        }
        other => {
            return Err(NodeError::Failed(format!(
                "manifest of {chunk}: {}",
                other.name()
            )))
        }
    };
    Manifest::parse(&bytes).map_err(|e| NodeError::Failed(format!("manifest of {chunk}: {e}")))
}

/// The temporary file one fetch writes: `.NAME.<pid>.<n>.part` beside the output, created
/// exclusively (never shared with another fetch, never an existing file), removed when
/// dropped unless [`persist`](Self::persist)ed: an error, SIGINT or SIGTERM leaves no
/// partial file behind.
struct PartFile {
    path: std::path::PathBuf,
    file: Arc<std::fs::File>,
    kept: bool,
}

impl PartFile {
    /// The prefix of every temporary name for `output` (`.NAME.`).
    fn prefix(output: &Path) -> std::ffi::OsString {
        let mut prefix = std::ffi::OsString::from(".");
        prefix.push(output.file_name().unwrap_or_default());
        prefix.push(".");
        prefix
    }

    /// Creates a new temporary file for `output`, `size` bytes long.
    fn create(output: &Path, size: u64) -> Result<PartFile, NodeError> {
        let pid = std::process::id();
        let mut n = run_seed(b"part") as u32;
        for _ in 0..64 {
            let mut name = Self::prefix(output);
            name.push(format!("{pid}.{n}.part"));
            let path = output.with_file_name(name);
            match std::fs::OpenOptions::new()
                .write(true)
                .read(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => {
                    let part = PartFile {
                        path,
                        file: Arc::new(file),
                        kept: false,
                    };
                    part.file
                        .set_len(size)
                        .map_err(|e| io_err("cannot size", part.path.display(), e))?;
                    return Ok(part);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n = n.wrapping_add(1),
                Err(e) => return Err(io_err("cannot create", path.display(), e)),
            }
        }
        Err(NodeError::Failed(format!(
            "cannot find a free temporary name beside {}",
            output.display()
        )))
    }

    /// Removes temporary files of `output` left by fetches that are no longer running
    /// (killed with SIGKILL, or a crash): `.NAME.<pid>.<n>.part` whose pid is not a live
    /// process. Returns how many were removed.
    fn remove_stale(output: &Path) -> usize {
        let dir = match output.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => p.to_owned(),
            None => std::path::PathBuf::from("."),
        };
        let prefix = Self::prefix(output);
        let prefix = prefix.to_string_lossy();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Some(rest) = name
                .strip_prefix(prefix.as_ref())
                .and_then(|r| r.strip_suffix(".part"))
            else {
                continue;
            };
            let Some((pid, n)) = rest.split_once('.') else {
                continue;
            };
            let (Ok(pid), Ok(_)) = (pid.parse::<u32>(), n.parse::<u32>()) else {
                continue;
            };
            if peerblock_common::store::pid_alive(pid) {
                continue;
            }
            if std::fs::remove_file(entry.path()).is_ok() {
                tracing::info!(file = %entry.path().display(), "removed a stale temporary file of an ended fetch");
                removed += 1;
            }
        }
        removed
    }

    /// Reads the whole file back and checks every block against `manifest`: what is on
    /// disk is what was validated (a write that went wrong, a file truncated under us).
    fn verify(&self, manifest: &Manifest) -> Result<(), String> {
        use std::os::unix::fs::FileExt;
        let len = self.file.metadata().map_err(|e| e.to_string())?.len();
        if len != manifest.size {
            return Err(format!("{len} bytes on disk, {} expected", manifest.size));
        }
        let mut buf = vec![0u8; manifest.block_size.min(manifest.size.max(1)) as usize];
        for index in 1..=manifest.blocks() {
            let want = manifest.block_len(index).expect("index in range") as usize;
            let block = &mut buf[..want];
            self.file
                .read_exact_at(block, (index - 1) * manifest.block_size)
                .map_err(|e| format!("reading block {index} back: {e}"))?;
            if !manifest.verify_block(index, block) {
                return Err(format!("block {index} on disk does not match its hash"));
            }
        }
        Ok(())
    }

    /// Reads the whole file back: its length must be `size` and, with `hash`, its
    /// SHA-256 or BLAKE3 must be `hash`'s.
    fn verify_hash(&self, size: u64, hash: Option<&crate::node::FileHash>) -> Result<(), String> {
        use crate::node::FileHash;
        use sha2::Digest;
        use std::os::unix::fs::FileExt;
        let len = self.file.metadata().map_err(|e| e.to_string())?.len();
        if len != size {
            return Err(format!("{len} bytes on disk, {size} expected"));
        }
        let Some(hash) = hash else {
            return Ok(());
        };
        let mut sha = sha2::Sha256::new();
        let mut b3 = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut offset = 0u64;
        while offset < size {
            let n = (size - offset).min(buf.len() as u64) as usize;
            self.file
                .read_exact_at(&mut buf[..n], offset)
                .map_err(|e| format!("reading the file back: {e}"))?;
            match hash {
                FileHash::Sha256(_) => sha.update(&buf[..n]),
                FileHash::Blake3(_) => {
                    b3.update(&buf[..n]);
                }
            }
            offset += n as u64;
        }
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let (name, got, want) = match hash {
            FileHash::Sha256(want) => ("SHA-256", sha.finalize().to_vec(), want),
            FileHash::Blake3(want) => ("BLAKE3", b3.finalize().as_bytes().to_vec(), want),
        };
        if got != want {
            return Err(format!(
                "the file's {name} is {}, {} was expected",
                hex(&got),
                hex(want)
            ));
        }
        Ok(())
    }

    /// Makes the file the output: checks that the output is still a regular file or
    /// missing, `fsync`s the file, renames it over the output and `fsync`s the directory.
    fn persist(mut self, output: &Path) -> Result<(), NodeError> {
        crate::node::check_output(output)?;
        self.file
            .sync_all()
            .map_err(|e| io_err("cannot sync", self.path.display(), e))?;
        std::fs::rename(&self.path, output)
            .map_err(|e| io_err("cannot rename into place", output.display(), e))?;
        self.kept = true;
        let _ = peerblock_common::store::sync_parent(output);
        Ok(())
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

async fn read_blocks(
    reader: &Arc<Reader>,
    plan: &FetchPlan,
    manifest: Arc<Manifest>,
    origin: Option<Arc<str>>,
) -> Result<(), NodeError> {
    let stale = PartFile::remove_stale(&plan.output);
    if stale > 0 {
        eprintln!(
            "removed {stale} temporary file(s) of earlier fetches of {} that did not finish",
            plan.output.display()
        );
    }
    let part = PartFile::create(&plan.output, manifest.size)?;
    let file = part.file.clone();
    let mut progress = Progress::new(format!("fetch {}", plan.chunk), manifest.size);
    let mut failed: Vec<(u64, &'static str)> = Vec::new();
    let mut tasks = JoinSet::new();
    let mut next = 1u64;
    let blocks = manifest.blocks();
    let mut write_error = None;
    loop {
        while tasks.len() < plan.parallel && next <= blocks {
            let index = next;
            next += 1;
            let (reader, manifest, file) = (reader.clone(), manifest.clone(), file.clone());
            let (chunk, origin) = (plan.chunk, origin.clone());
            tasks.spawn(async move {
                let expected = manifest.block_len(index);
                let check = manifest.clone();
                let spec = BlockSpec {
                    key: manifest::block_key(&chunk, index),
                    path: BlockPath { key: chunk, index },
                    expected,
                    validator: Some(Arc::new(move |b| check.verify_block(index, b))),
                    origin,
                };
                let r = reader.read(spec).await;
                let written =
                    write_found(&r.outcome, &file, (index - 1) * manifest.block_size).await;
                (index, r.outcome.name(), written)
            });
        }
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        let (index, outcome, written) =
            joined.map_err(|e| NodeError::Failed(format!("a block read task failed: {e}")))?;
        match written {
            Some(Ok(n)) => progress.inc(n),
            Some(Err(e)) => {
                write_error.get_or_insert(e);
            }
            None => failed.push((index, outcome)),
        }
    }
    progress.finish();
    if let Some(e) = write_error {
        return Err(io_err("cannot write", part.path.display(), e));
    }
    if !failed.is_empty() {
        return Err(NodeError::Failed(format!(
            "{} of {blocks} blocks not read: {}",
            failed.len(),
            failed_summary(&mut failed)
        )));
    }
    // Reading the file back and the fsync and rename are blocking file work: off the
    // runtime's threads (a current-thread runtime too). Dropped mid-way (SIGINT), the
    // task's `PartFile` is dropped with its result, removing the temporary file.
    let check = manifest.clone();
    let (part, verified) = tokio::task::spawn_blocking(move || {
        let verified = part.verify(&check);
        (part, verified)
    })
    .await
    .map_err(|e| NodeError::Failed(format!("verifying the written file failed: {e}")))?;
    if let Err(e) = verified {
        return Err(NodeError::Failed(format!(
            "{}: the written file failed verification ({e}); the output was not touched",
            part.path.display()
        )));
    }
    let output = plan.output.clone();
    tokio::task::spawn_blocking(move || part.persist(&output))
        .await
        .map_err(|e| NodeError::Failed(format!("moving the file into place failed: {e}")))??;
    eprintln!(
        "fetched {} bytes in {blocks} blocks to {} (every block verified on disk)",
        manifest.size,
        plan.output.display()
    );
    Ok(())
}

/// What `fetch URL` starts from once the cluster is known.
struct ObjectFetch {
    client: Client,
    discovery: Arc<PlacementDiscovery>,
    read_config: peerblock_core::read::ReadConfig,
    tally: Arc<Mutex<BTreeMap<String, PeerTally>>>,
    observer: crate::reader::GetObserver,
    upstream_refused: Arc<Mutex<Option<u16>>>,
    clock: Clock,
}

/// Writes a found block at `offset` of `file` off the runtime's threads: `Some` with the
/// bytes written or the error, `None` when the read found nothing.
async fn write_found(
    outcome: &ReadOutcome,
    file: &Arc<std::fs::File>,
    offset: u64,
) -> Option<std::io::Result<u64>> {
    let (ReadOutcome::Found(b) | ReadOutcome::FoundAtOrigin(b)) = outcome else {
        return None;
    };
    let (b, file) = (b.clone(), file.clone());
    let w = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        file.write_all_at(&b, offset).map(|()| b.len() as u64)
    })
    .await;
    Some(w.unwrap_or_else(|e| Err(std::io::Error::other(e))))
}

/// Prints each failed block (`block I: OUTCOME`, in index order) and returns the failures
/// counted by outcome (`"2 unavailable, 1 absent"`).
fn failed_summary(failed: &mut [(u64, &'static str)]) -> String {
    failed.sort_unstable();
    for (index, outcome) in failed.iter() {
        eprintln!("block {index}: {outcome}");
    }
    let mut classes: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, o) in failed.iter() {
        *classes.entry(o).or_default() += 1;
    }
    let summary: Vec<String> = classes.iter().map(|(o, n)| format!("{n} {o}")).collect();
    summary.join(", ")
}

/// `fetch URL`: probes the object's identity (size and validator) with `Range:
/// bytes=0-0`, derives its chunk key, reads every block through the cluster (each GET
/// names the URL with its identity fragment, so a holder that misses relays for us), the
/// origin itself as each read's last resort, checks every block's length and, with
/// `--sha256`/`--blake3`, the whole file before it is moved into place. Prints the
/// per-peer lines and the origin's (`origin HOST:PORT N bytes K blocks`).
async fn fetch_object(
    plan: &FetchPlan,
    object: &crate::node::ObjectPlan,
    parts: ObjectFetch,
) -> Result<(), NodeError> {
    use crate::origin::{ObjectClient, ObjectOrigin, OriginProblem};
    use peerblock_common::object::{ObjectIdentity, Scheme};
    let ObjectFetch {
        client,
        discovery,
        mut read_config,
        tally,
        observer,
        upstream_refused,
        clock,
    } = parts;
    let url = &object.url;
    let tls = match (url.scheme, &object.origin_ca) {
        (Scheme::Http, None) => None,
        (_, ca) => Some(
            crate::origin::tls_config(ca.as_deref())
                .map_err(|e| NodeError::usage("--origin-ca", e))?,
        ),
    };
    let origin_client =
        ObjectClient::new(plan.config.client_config(), clock, tls).with_local_ip(plan.bind);
    let shown = url.authority();
    let (size, validator) = crate::origin::probe(&origin_client, url)
        .await
        .map_err(|p| object_error(&shown, &p))?;
    let identity = ObjectIdentity::new(url.clone(), size, validator, object.block_size)
        .map_err(|e| NodeError::Failed(format!("{shown}: {e}")))?;
    let key = identity.key();
    let blocks = identity.blocks();
    let header: Arc<str> = Arc::from(identity.origin_header());
    eprintln!(
        "object {} bytes, validator {}, {blocks} blocks of {} bytes, key {key}",
        size,
        if identity.validator.is_empty() {
            "none (only the size shows a change)"
        } else {
            identity.validator.as_str()
        },
        identity.block_size
    );
    let identity = Arc::new(identity);
    let origin = ObjectOrigin::new(origin_client, identity.clone());
    read_config.origin = true;
    let reader = Reader::new(client, discovery, read_config, run_seed(b"fetch"))
        .map_err(|e| NodeError::Failed(format!("read configuration: {e}")))?
        .with_observer(observer)
        .with_origin(Arc::new(origin.clone()));
    let reader = Arc::new(reader);
    let result = read_object(&reader, plan, object, &identity, header, &origin).await;
    print_tally(&tally);
    say(&format!(
        "origin {shown} {} bytes {} blocks",
        origin.bytes(),
        origin.blocks()
    ));
    result.map_err(|e| {
        // A refusal a relay passed on names the origin's status (the relay is not blamed).
        let refused = *upstream_refused.lock().unwrap_or_else(|e| e.into_inner());
        match (e, refused, origin.problem()) {
            (NodeError::Failed(msg), Some(status), p)
                if !p.as_ref().is_some_and(OriginProblem::is_fatal) =>
            {
                NodeError::Failed(format!("{shown}: origin refused ({status}); {msg}"))
            }
            (e, _, _) => e,
        }
    })
}

/// The command's error for an origin problem at `shown`: `unavailable: ...` when the
/// origin could not be reached, otherwise the problem by name.
fn object_error(shown: &str, problem: &crate::origin::OriginProblem) -> NodeError {
    use crate::origin::OriginProblem;
    match problem {
        OriginProblem::Unavailable(_) => {
            NodeError::Failed(format!("unavailable: {shown}: {problem}"))
        }
        _ => NodeError::Failed(format!("{shown}: {problem}")),
    }
}

async fn read_object(
    reader: &Arc<Reader>,
    plan: &FetchPlan,
    object: &crate::node::ObjectPlan,
    identity: &Arc<peerblock_common::object::ObjectIdentity>,
    header: Arc<str>,
    origin: &crate::origin::ObjectOrigin,
) -> Result<(), NodeError> {
    let stale = PartFile::remove_stale(&plan.output);
    if stale > 0 {
        eprintln!(
            "removed {stale} temporary file(s) of earlier fetches of {} that did not finish",
            plan.output.display()
        );
    }
    let shown = identity.url.authority();
    let part = PartFile::create(&plan.output, identity.size)?;
    let file = part.file.clone();
    let key = identity.key();
    let blocks = identity.blocks();
    let mut progress = Progress::new(format!("fetch {shown}"), identity.size);
    let mut failed: Vec<(u64, &'static str)> = Vec::new();
    let mut tasks = JoinSet::new();
    let mut next = 0u64;
    let mut write_error = None;
    loop {
        // The object changed, or cannot be read by ranges: stop at once.
        if let Some(problem) = origin.problem().filter(|p| p.is_fatal()) {
            tasks.abort_all();
            progress.finish();
            return Err(NodeError::Failed(format!(
                "{shown}: {problem}; nothing was written at {}",
                plan.output.display()
            )));
        }
        while tasks.len() < plan.parallel && next < blocks {
            let index = next;
            next += 1;
            let (reader, file, header) = (reader.clone(), file.clone(), header.clone());
            let (start, len) = identity.block_range(index).expect("index below blocks");
            tasks.spawn(async move {
                let spec = BlockSpec {
                    key: manifest::block_key(&key, index),
                    path: BlockPath { key, index },
                    expected: Some(len),
                    validator: None,
                    origin: Some(header),
                };
                let r = reader.read(spec).await;
                let written = write_found(&r.outcome, &file, start).await;
                (index, r.outcome.name(), written)
            });
        }
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        let (index, outcome, written) =
            joined.map_err(|e| NodeError::Failed(format!("a block read task failed: {e}")))?;
        match written {
            Some(Ok(n)) => progress.inc(n),
            Some(Err(e)) => {
                write_error.get_or_insert(e);
            }
            None => failed.push((index, outcome)),
        }
    }
    progress.finish();
    if let Some(e) = write_error {
        return Err(io_err("cannot write", part.path.display(), e));
    }
    if !failed.is_empty() {
        let why = origin
            .problem()
            .map_or_else(String::new, |p| format!(" ({p})"));
        return Err(NodeError::Failed(format!(
            "{} of {blocks} blocks not read: {}{why}; nothing was written at {}",
            failed.len(),
            failed_summary(&mut failed),
            plan.output.display()
        )));
    }
    let hash = object.hash.clone();
    let size = identity.size;
    let (part, verified) = tokio::task::spawn_blocking(move || {
        let verified = part.verify_hash(size, hash.as_ref());
        (part, verified)
    })
    .await
    .map_err(|e| NodeError::Failed(format!("verifying the written file failed: {e}")))?;
    if let Err(e) = verified {
        return Err(NodeError::Failed(format!(
            "{e}; nothing was written at {}",
            plan.output.display()
        )));
    }
    let output = plan.output.clone();
    tokio::task::spawn_blocking(move || part.persist(&output))
        .await
        .map_err(|e| NodeError::Failed(format!("moving the file into place failed: {e}")))??;
    let checked = match &object.hash {
        Some(crate::node::FileHash::Sha256(_)) => {
            "every block's length and the file's SHA-256 checked"
        }
        Some(crate::node::FileHash::Blake3(_)) => {
            "every block's length and the file's BLAKE3 checked"
        }
        None => "only block lengths checked: no --sha256/--blake3 given",
    };
    eprintln!(
        "fetched {size} bytes in {blocks} blocks to {} ({checked})",
        plan.output.display()
    );
    Ok(())
}

fn print_tally(tally: &Mutex<BTreeMap<String, PeerTally>>) {
    let t = tally.lock().unwrap_or_else(|e| e.into_inner());
    for (addr, p) in t.iter() {
        say(&format!(
            "{addr} {} bytes {} blocks {} invalid {} refused {} absent {} failed",
            p.bytes, p.ok, p.invalid, p.refused, p.absent, p.failed
        ));
    }
}

/// `get`: one exchange for one block; the body to the output (or stdout), the outcome
/// class on failure. Block 0 of a file's chunk key (its manifest) is validated against
/// the key; other blocks only against `--expected` (their hashes are in the manifest).
pub async fn get(plan: GetPlan) -> Result<(), NodeError> {
    let clock = Clock::new(std::time::Instant::now());
    let client = client(&plan.config, clock, Metrics::new(), None)?;
    let peer = Peer::from_addr(plan.peer.clone());
    let block = BlockRequest {
        path: BlockPath {
            key: plan.chunk,
            index: plan.index,
        },
        origin: plan.origin.as_deref(),
        hop: peerblock_core::wire::Hop(plan.hop),
    };
    // A manifest (block 0 of a 32-byte chunk key) is checked against its key: `get`
    // never hands out a manifest that is not the chunk's.
    let chunk = plan.chunk;
    let validator: Option<crate::client::Validator> =
        (plan.index == 0 && chunk.as_bytes().len() == 32).then(|| {
            Arc::new(move |b: &peerblock_core::bytes::Bytes| manifest::verify_manifest(&chunk, b))
                as crate::client::Validator
        });
    let options = GetOptions {
        expected: plan.expected,
        validator,
        ..GetOptions::default()
    };
    let fetched = client.fetch_block(&peer, block, options).await;
    let Some(bytes) = fetched.bytes() else {
        return Err(NodeError::Failed(format!(
            "{} block {}/{}: {}",
            plan.peer,
            plan.chunk,
            plan.index,
            fetched.describe()
        )));
    };
    match &plan.output {
        Some(path) => write_file(path, bytes)?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes)
                .and_then(|()| out.flush())
                .map_err(|e| io_err("cannot write", "stdout", e))?;
        }
    }
    eprintln!(
        "{} bytes from {} in {:.1} ms",
        bytes.len(),
        plan.peer,
        fetched.elapsed.as_secs_f64() * 1e3
    );
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file of its own (`fsync`, rename): the
/// output is the old file or the whole new one, never a part.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), NodeError> {
    use std::os::unix::fs::FileExt;
    let part = PartFile::create(path, bytes.len() as u64)?;
    part.file
        .write_all_at(bytes, 0)
        .map_err(|e| io_err("cannot write", part.path.display(), e))?;
    part.persist(path)
}
