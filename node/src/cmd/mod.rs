//! The bodies of `peerblock-node serve`, `fetch` and `get`: each wires the driver's parts
//! (server, stores, client, reader, roster service, metrics endpoint) for one command.
//! The plans they run are validated in [`crate::node`].

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use peerblock_core::client::Ending;
use peerblock_core::roster::{Membership, RosterMember, MAX_ROSTER_MEMBERS, NO_EPOCH};
use peerblock_core::time::Clock;
use tokio::task::JoinSet;

use crate::client::{Client, ClientOptions, Fetched, PoolConfig};
use crate::config::NodeConfig;
use crate::metrics::Metrics;
use crate::node::NodeError;
use crate::SharedMembership;

mod fetch;
mod get;
mod serve;

pub use fetch::fetch;
pub use get::get;
pub use serve::serve;

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

fn print_tally(tally: &Mutex<BTreeMap<String, PeerTally>>) {
    let t = tally.lock().unwrap_or_else(|e| e.into_inner());
    for (addr, p) in t.iter() {
        say(&format!(
            "{addr} {} bytes {} blocks {} invalid {} refused {} absent {} failed",
            p.bytes, p.ok, p.invalid, p.refused, p.absent, p.failed
        ));
    }
}
