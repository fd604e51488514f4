//! The node processes: starting them, the NAT blackholes, signals, applying the
//! fault timeline's steps, and waiting for every node to know every member.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sim::faults::{Act, Step};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

use crate::node::{DriverKind, NodeError};

use super::*;

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

pub(super) fn blackhole(ip: Ipv4Addr) -> Result<Blackhole, NodeError> {
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

impl Cluster {
    pub(super) async fn apply(&mut self, step: &Step) -> Result<(), NodeError> {
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
    pub(super) async fn stop(&mut self) {
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

/// How long every node may take to know every member (seeded with node 0, 1 s rounds).
const MEMBERS_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until every node says it knows every member; an error names the node furthest
/// from it.
pub(super) async fn wait_members(cluster: &Cluster) -> Result<(), NodeError> {
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
pub(super) async fn start_nodes(
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
