//! Planning a swarm: the scenario scaled, each node's configuration text, the checked
//! [`SwarmPlan`], and the loopback addresses nodes and readers use.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use peerblock_core::bytes::Bytes;
use peerblock_core::pace::MIN_RATE;
use peerblock_core::placement::Key;
use sim::scenario::{FaultKind, Placement, Scenario, Transport, WhenFull};

use crate::config::NodeConfig;
use crate::node::{DriverKind, NodeError};

use super::*;

fn usage(flag: &'static str, rule: impl Into<String>) -> NodeError {
    NodeError::Usage {
        flag,
        rule: rule.into(),
    }
}

/// The scenario at `scale`; an error names the scenario key that cannot be scaled.
pub fn scale_scenario(s: &Scenario, scale: f64) -> Result<Scaled, NodeError> {
    if !(scale.is_finite() && scale > 0.0 && scale <= 1.0) {
        return Err(usage(
            "--scale",
            format!("{scale} is out of range: more than 0, at most 1"),
        ));
    }
    let bytes = |x: f64| (x * scale).round() as u64;
    let block_len: Vec<u64> = (0..s.blocks())
        .map(|i| bytes(s.block_bytes(i) as f64).max(1))
        .collect();
    if let Some(b) = block_len.iter().find(|b| **b > MAX_BLOCK) {
        return Err(usage(
            "--scale",
            format!("a block of {b} bytes at this scale is above the node's {MAX_BLOCK}-byte bound (file.block_kib): lower --scale"),
        ));
    }
    let upload = bytes(s.cluster.upload_mbps * 1e6 / 8.0);
    if upload < MIN_RATE {
        return Err(usage(
            "--scale",
            format!("cluster.upload_mbps × scale is {upload} bytes/s, below the pacing minimum of {MIN_RATE}: raise --scale"),
        ));
    }
    let conn = if s.network.transfer_mbps > 0.0 {
        let c = bytes(s.network.transfer_mbps * 1e6 / 8.0);
        if c < MIN_RATE {
            return Err(usage(
                "--scale",
                format!("network.transfer_mbps × scale is {c} bytes/s, below the pacing minimum of {MIN_RATE}: raise --scale"),
            ));
        }
        c
    } else {
        0
    };
    // The reference transport reserves a send window per response (`reserve_kib`), the
    // real server the whole response: the budgets grow by block / window so they admit
    // the same number of concurrent responses as the scenario's.
    let window = match s.network.transport {
        Transport::Multiplexed if s.listener.reserve_kib > 0 => {
            (s.file.block_kib as f64 / s.listener.reserve_kib as f64).max(1.0)
        }
        _ => 1.0,
    };
    let mib = |m: u32| bytes(f64::from(m) * 1024.0 * 1024.0 * window);
    Ok(Scaled {
        rounds: ((f64::from(s.readers.rounds) * scale).round() as u32).max(1),
        block_len,
        upload_bytes_per_second: upload,
        connection_bytes_per_second: conn,
        max_inflight_bytes: mib(s.listener.max_inflight_mib),
        max_inflight_bytes_per_source: mib(s.listener.max_inflight_per_source_mib),
        cache_bytes: bytes(s.relay.cache_mib as f64 * 1024.0 * 1024.0),
        origin_bytes_per_second: bytes(s.origin.upload_mbps * 1e6 / 8.0).max(MIN_RATE),
    })
}

/// The `--config` every node of the swarm runs with: the scenario's listener at scale;
/// with `file.placement = "origin"` also the relay, its cache and fast roster rounds.
pub fn node_config_text(s: &Scenario, sc: &Scaled) -> String {
    let l = &s.listener;
    let origin = s.file.placement == Placement::Origin;
    let mut text = format!(
        "# written by peerblock-node swarm for scenario {name:?}\n\
         [listener]\n\
         max_sessions = {}\n\
         max_sessions_per_source = {}\n\
         max_requests = {}\n\
         max_requests_per_session = {}\n\
         max_inflight_bytes = {}\n\
         max_inflight_bytes_per_source = {}\n\
         retry_after = \"{}s\"\n\
         idle_timeout = \"{}s\"\n\
         relay = {origin}\n\
         upload_bytes_per_second = {}\n\
         connection_upload_bytes_per_second = {}\n\
         when_full = \"{}\"\n\
         max_channels = {}\n",
        l.max_sessions,
        l.max_sessions_per_source,
        l.max_requests,
        l.max_requests_per_session,
        sc.max_inflight_bytes,
        sc.max_inflight_bytes_per_source,
        l.retry_after_secs,
        l.session_idle_secs,
        sc.upload_bytes_per_second,
        sc.connection_bytes_per_second,
        match l.when_full {
            WhenFull::Refuse => "refuse",
            WhenFull::Silent => "silent",
        },
        // The reference transport's channel table, as a silent listener counts it.
        match (s.network.transport, l.when_full) {
            (Transport::Multiplexed, WhenFull::Silent) => l.max_channels as usize,
            _ => 0,
        },
        name = s.name,
    );
    if origin {
        text.push_str(&format!(
            "max_hop = {}\n\
             [store]\n\
             cache_bytes = {}\n\
             [read]\n\
             close_group_size = {}\n\
             # Rosters converge within seconds: every node is seeded with node 0.\n\
             [roster]\n\
             interval = \"1s\"\n\
             jitter = \"100ms\"\n",
            s.relay.max_hop, sc.cache_bytes, s.cluster.close_group
        ));
    }
    text
}

/// Validates a swarm run: the scenario (through the simulator's own parser and
/// validation), the scale, the bounds of a real run and what of the scenario cannot run
/// for real. Starts nothing.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    path: &Path,
    seed: Option<u64>,
    scale: f64,
    json: Option<PathBuf>,
    driver: DriverKind,
    max_downloads: usize,
    quiet: bool,
    keep: bool,
    work_dir: Option<PathBuf>,
) -> Result<SwarmPlan, NodeError> {
    let scenario = Scenario::load(path).map_err(|e| usage("SCENARIO", e.to_string()))?;
    let s = &scenario;
    if s.cluster.nodes > MAX_SWARM_NODES {
        return Err(usage(
            "SCENARIO",
            format!(
                "cluster.nodes is {}: a swarm starts one process per node, at most {MAX_SWARM_NODES}",
                s.cluster.nodes
            ),
        ));
    }
    if s.readers.count > MAX_SWARM_READERS {
        return Err(usage(
            "SCENARIO",
            format!(
                "readers.count is {}: a swarm runs at most {MAX_SWARM_READERS} readers",
                s.readers.count
            ),
        ));
    }
    for (i, f) in s.faults.iter().enumerate() {
        match f.kind {
            FaultKind::Crash | FaultKind::Restart | FaultKind::Silent | FaultKind::Flap => {}
            other => {
                return Err(usage(
                    "SCENARIO",
                    format!("faults[{i}].kind = {other:?} is not run for real (a swarm runs crash, restart, silent and flap)"),
                ))
            }
        }
    }
    if driver == DriverKind::Mio {
        return Err(usage(
            "--driver",
            "mio: the mio server has no upload pacing yet, and every scenario's cluster.upload_mbps needs it; use --driver tokio",
        ));
    }
    if max_downloads == 0 {
        return Err(usage(
            "--max-downloads",
            "0: at least one download must run",
        ));
    }
    let nginx = if s.file.placement == Placement::Origin {
        if !s.relay.through_parent || !s.relay.single_flight {
            return Err(usage(
                "SCENARIO",
                "relay.through_parent = false and relay.single_flight = false are ablations of the simulator: peerblock-node serve always relays through the parent and shares flights",
            ));
        }
        Some(crate::swarm_origin::find_nginx().ok_or_else(|| {
            usage(
                "SCENARIO",
                "file.placement = \"origin\" runs nginx as the origin, and nginx is not installed (apt-get install nginx-light)",
            )
        })?)
    } else {
        None
    };
    let scaled = scale_scenario(s, scale)?;
    let node_config = node_config_text(s, &scaled);
    NodeConfig::from_toml_str(&node_config).map_err(|e| {
        usage(
            "SCENARIO",
            format!("the scenario's listener at this scale is no valid node configuration: {e}"),
        )
    })?;
    let exe = std::env::current_exe().map_err(|e| {
        usage(
            "swarm",
            format!("cannot find the peerblock-node binary: {e}"),
        )
    })?;
    let work_dir = work_dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("peerblock-swarm-{}", std::process::id()))
    });
    Ok(SwarmPlan {
        path: path.to_owned(),
        seed: seed.unwrap_or(s.seed),
        scenario,
        scale,
        json,
        driver,
        max_downloads,
        quiet,
        keep,
        work_dir,
        exe,
        scaled,
        node_config,
        nginx,
    })
}

/// The loopback address of node `i`: `127.1.H.L`.
pub fn node_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// The loopback address of reader source `a`: `127.2.H.L`.
pub fn reader_ip(a: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 2, (a / 250 % 256) as u8, (a % 250 + 1) as u8)
}

/// The bytes of a block: BLAKE3's output stream keyed by its placement key.
pub(super) fn block_bytes(key: &Key, len: u64) -> Bytes {
    let mut v = vec![0u8; len as usize];
    blake3::Hasher::new()
        .update(b"peerblock-swarm-block\0")
        .update(&key.0)
        .finalize_xof()
        .fill(&mut v);
    Bytes::from(v)
}
