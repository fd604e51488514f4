//! `peerblock-node serve`: binding, the server and its parts (stores, relay, roster
//! service, metrics and readiness), and running the node until shutdown.

use std::sync::{Arc, Mutex};

use peerblock_core::roster::{Membership, RosterMember, NO_EPOCH};
use peerblock_core::time::Clock;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::client::{Client, ClientOptions};
use crate::config::{BodyPathKey, WhenFullKey};
use crate::metrics::{serve_admin, Metrics};
use crate::node::{DriverKind, NodeError, ServePlan};
use crate::pace::UploadPacing;
use crate::relay::RelaySource;
use crate::roster::RosterService;
use crate::server::{Server, ServerHandle, ServerOptions};
use crate::source::{BlockSource, FileStore, DEFAULT_MAX_BLOCK_SIZE};
use crate::SharedMembership;

use super::*;

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
