//! Scenario validation: the bounds every numeric key is checked against and
//! [`Scenario::validate`], which names the first bad key and why.

use std::fmt;

use peerblock_core::read::{
    MAX_CLOSE_GROUP_SIZE, MAX_PLAIN_RETRIES_LIMIT, MAX_REFUSAL_COOLDOWN, MAX_REFUSAL_WAITS_LIMIT,
};

use crate::model::content::KEPT_PER_BLOCK;

use super::*;

impl Scenario {
    /// Checks that every value is one the simulator can run: every numeric key within its
    /// documented range (docs/sim.md, "Ranges"), and the keys that constrain each other
    /// consistent. Returns the dotted key and the reason for the first bad value.
    pub fn validate(&self) -> Result<(), (String, String)> {
        fn bad(key: &str, reason: impl Into<String>) -> Result<(), (String, String)> {
            Err((key.to_string(), reason.into()))
        }
        let c = &self.cluster;
        int(
            "cluster.nodes",
            c.nodes,
            1,
            MAX_NODES,
            "a cluster needs at least one node",
        )?;
        int(
            "cluster.nat_nodes",
            c.nat_nodes,
            0,
            c.nodes,
            "NAT nodes are some of cluster.nodes",
        )?;
        real("cluster.upload_mbps", c.upload_mbps, 0.001, 1e6, "Mbit/s")?;
        int(
            "cluster.close_group",
            c.close_group,
            1,
            c.nodes.min(MAX_CLOSE_GROUP_SIZE as u32),
            "holders per block: at most cluster.nodes and at most core's bound of 16",
        )?;
        match self.network.latency {
            Latency::Constant { ms } => real("network.latency.ms", ms, 0.0, MAX_LATENCY_MS, "ms")?,
            Latency::Uniform { min_ms, max_ms } => {
                real("network.latency.min_ms", min_ms, 0.0, MAX_LATENCY_MS, "ms")?;
                real(
                    "network.latency.max_ms",
                    max_ms,
                    min_ms,
                    MAX_LATENCY_MS,
                    "ms",
                )?;
            }
            Latency::Lognormal { median_ms, sigma } => {
                real(
                    "network.latency.median_ms",
                    median_ms,
                    0.001,
                    MAX_LATENCY_MS,
                    "ms",
                )?;
                real("network.latency.sigma", sigma, 0.0, 3.0, "")?;
            }
        }
        int(
            "network.dial_retransmit_ms",
            self.network.dial_retransmit_ms,
            0,
            60_000,
            "0 = no retransmits",
        )?;
        let t = self.network.transfer_mbps;
        if t != 0.0 {
            real(
                "network.transfer_mbps",
                t,
                0.001,
                1e6,
                "Mbit/s (0 = no ceiling)",
            )?;
        }
        let l = &self.listener;
        for (key, v, hi) in [
            ("listener.max_sessions", l.max_sessions, 1_000_000),
            (
                "listener.max_sessions_per_source",
                l.max_sessions_per_source,
                1_000_000,
            ),
            ("listener.max_channels", l.max_channels, 1_000_000),
            ("listener.max_requests", l.max_requests, 1_000_000),
            (
                "listener.max_requests_per_session",
                l.max_requests_per_session,
                65_536,
            ),
            ("listener.max_inflight_mib", l.max_inflight_mib, 1 << 20),
            (
                "listener.max_inflight_per_source_mib",
                l.max_inflight_per_source_mib,
                1 << 20,
            ),
        ] {
            int(key, v, 1, hi, "a limit of 0 admits nothing")?;
        }
        int(
            "listener.reserve_kib",
            l.reserve_kib,
            0,
            1 << 20,
            "0 = the whole response",
        )?;
        int(
            "listener.retry_after_secs",
            l.retry_after_secs,
            0,
            86_400,
            "seconds",
        )?;
        int(
            "listener.session_idle_secs",
            l.session_idle_secs,
            1,
            86_400,
            "seconds",
        )?;
        if let Err(e) = crate::listener::admission_config(l).validate() {
            return bad(crate::listener::scenario_key(&e), e.to_string());
        }
        let f = &self.file;
        int("file.size_mib", f.size_mib, 1, 1 << 20, "MiB")?;
        int("file.block_kib", f.block_kib, 1, 1 << 20, "KiB")?;
        if u64::from(self.blocks()) > MAX_BLOCKS {
            return bad(
                "file.block_kib",
                format!(
                    "file.size_mib / file.block_kib gives {} blocks, more than {MAX_BLOCKS}",
                    self.blocks()
                ),
            );
        }
        if f.placement == Placement::Origin {
            if self.network.transport != Transport::Http1 {
                return bad(
                    "file.placement",
                    "\"origin\" needs network.transport = \"http1\" (only peerblock's HTTP/1.1 nodes relay)",
                );
            }
            let o = &self.origin;
            real("origin.upload_mbps", o.upload_mbps, 0.001, 1e6, "Mbit/s")?;
            real("origin.latency_ms", o.latency_ms, 0.0, MAX_LATENCY_MS, "ms")?;
            let r = &self.relay;
            // At least one block: a cache that cannot hold one would relay and forget.
            let min_mib = (f.block_kib * 1024).div_ceil(1 << 20);
            int(
                "relay.cache_mib",
                r.cache_mib,
                min_mib,
                1 << 20,
                "MiB of relayed blocks per node, at least one block",
            )?;
            int(
                "relay.max_hop",
                r.max_hop,
                0,
                16,
                "core's relay hop bound; 0 = never relay",
            )?;
            real(
                "relay.node_latency_ms",
                r.node_latency_ms,
                0.0,
                MAX_LATENCY_MS,
                "ms",
            )?;
        }
        let reserved = if l.reserve_kib == 0 {
            f.block_kib
        } else {
            l.reserve_kib.min(f.block_kib)
        };
        if u64::from(l.max_inflight_per_source_mib) * 1024 < reserved {
            return bad(
                "listener.max_inflight_per_source_mib",
                "smaller than one block: no response could ever be admitted",
            );
        }
        let r = &self.readers;
        int("readers.count", r.count, 1, MAX_READERS, "readers")?;
        int(
            "readers.addresses",
            r.addresses,
            0,
            r.count,
            "0 = one each, else at most readers.count",
        )?;
        for (key, v) in [
            ("readers.start_spread_secs", r.start_spread_secs),
            ("readers.first_round_at_secs", r.first_round_at_secs),
            ("readers.round_interval_secs", r.round_interval_secs),
        ] {
            real(key, v, 0.0, MAX_SECS, "seconds")?;
        }
        int("readers.rounds", r.rounds, 1, 10_000, "rounds")?;
        int(
            "readers.parallel_blocks",
            r.parallel_blocks,
            1,
            1_024,
            "blocks a download reads at once",
        )?;
        let cl = &self.client;
        for (key, v) in [
            ("client.hedge_delay_ms", cl.hedge_delay_ms),
            ("client.retry_delay_ms", cl.retry_delay_ms),
            ("client.dial_timeout_ms", cl.dial_timeout_ms),
            ("client.response_timeout_ms", cl.response_timeout_ms),
            ("client.request_timeout_ms", cl.request_timeout_ms),
        ] {
            int(key, v, 1, MAX_TIMEOUT_MS, "ms (up to one hour)")?;
        }
        if cl.request_timeout_ms < cl.response_timeout_ms {
            return bad(
                "client.request_timeout_ms",
                "the whole exchange cannot be bounded tighter than its response header",
            );
        }
        int(
            "client.max_refusal_waits",
            cl.max_refusal_waits,
            0,
            MAX_REFUSAL_WAITS_LIMIT,
            "core's bound",
        )?;
        int(
            "client.max_plain_retries",
            cl.max_plain_retries,
            0,
            MAX_PLAIN_RETRIES_LIMIT,
            "core's bound",
        )?;
        int(
            "client.refused_cooldown_secs",
            cl.refused_cooldown_secs,
            1,
            MAX_REFUSAL_COOLDOWN.as_secs(),
            "seconds (core's bound)",
        )?;
        int(
            "client.failed_cooldown_secs",
            cl.failed_cooldown_secs,
            1,
            86_400,
            "seconds",
        )?;
        if let Err(e) = crate::world::read_config(self).validate() {
            use peerblock_core::read::ReadConfigError as E;
            let key = match &e {
                E::CloseGroupSize(_) => "cluster.close_group",
                E::TooManyRefusalWaits(_) => "client.max_refusal_waits",
                E::TooManyRetries(_) => "client.max_plain_retries",
                E::RefusalCooldownTooLong {
                    field: "refused_cooldown",
                    ..
                } => "client.refused_cooldown_secs",
                _ => "client",
            };
            return bad(key, e.to_string());
        }
        int(
            "client.lookup_rtts",
            cl.lookup_rtts,
            1,
            100,
            "round trips per lookup",
        )?;
        int(
            "client.lookup_peers",
            cl.lookup_peers,
            c.close_group,
            KEPT_PER_BLOCK as u32,
            "a lookup returns at least a close group and at most the peers kept per block",
        )?;
        if !(cl.lookup_miss.is_finite() && (0.0..1.0).contains(&cl.lookup_miss)) {
            return bad(
                "client.lookup_miss",
                format!(
                    "must be a probability in [0, 1), got {}",
                    show(cl.lookup_miss)
                ),
            );
        }
        let b = &self.breaker;
        if b.enabled {
            int(
                "breaker.failure_threshold",
                b.failure_threshold,
                1,
                1_000,
                "failures",
            )?;
            int(
                "breaker.cooldown_ms",
                b.cooldown_ms,
                1,
                MAX_TIMEOUT_MS,
                "ms",
            )?;
            int(
                "breaker.half_open_probes",
                b.half_open_probes,
                1,
                1_000,
                "probes",
            )?;
        }
        for (i, fault) in self.faults.iter().enumerate() {
            let key = |k: &str| format!("faults[{i}].{k}");
            real(&key("at_secs"), fault.at_secs, 0.0, MAX_SECS, "seconds")?;
            match (fault.node, fault.holder_block) {
                (Some(_), Some(_)) => {
                    return bad(&key("node"), "give either node or holder_block, not both")
                }
                (None, None) => return bad(&key("node"), "give node or holder_block"),
                (Some(n), None) if n >= c.nodes => {
                    return bad(
                        &key("node"),
                        format!("no node {n}: the cluster has {}", c.nodes),
                    )
                }
                (None, Some(blk)) if blk >= self.blocks() => {
                    return bad(
                        &key("holder_block"),
                        format!("no block {blk}: the file has {}", self.blocks()),
                    )
                }
                _ => {}
            }
            if fault.holder_rank.unwrap_or(0) >= c.close_group {
                return bad(&key("holder_rank"), "must be below cluster.close_group");
            }
            match fault.kind {
                FaultKind::Slow => match fault.factor {
                    Some(f) => real(&key("factor"), f, 0.001, 1_000.0, "× the upload bandwidth")?,
                    None => return bad(&key("factor"), "slow needs factor"),
                },
                FaultKind::Flap => {
                    let (Some(p), Some(d)) = (fault.period_secs, fault.duration_secs) else {
                        let missing = if fault.period_secs.is_none() {
                            "period_secs"
                        } else {
                            "duration_secs"
                        };
                        return bad(&key(missing), format!("flap needs {missing}"));
                    };
                    real(&key("period_secs"), p, 0.001, MAX_SECS, "seconds")?;
                    real(&key("duration_secs"), d, 0.001, MAX_SECS, "seconds")?;
                    let steps = d / p;
                    if steps > MAX_FLAP_STEPS as f64 {
                        return bad(
                            &key("period_secs"),
                            format!(
                                "faults[{i}].duration_secs / faults[{i}].period_secs = {} \
                                 crash/restart steps, more than {MAX_FLAP_STEPS}",
                                show(steps.ceil())
                            ),
                        );
                    }
                }
                _ => {}
            }
        }
        let s = &self.sweep;
        for (key, v) in [
            ("sweep.crashes", s.crashes),
            ("sweep.silent", s.silent),
            ("sweep.partitions", s.partitions),
            ("sweep.slow", s.slow),
        ] {
            int(key, v, 0, MAX_SWEEP_FAULTS, "faults drawn per seed")?;
        }
        for (key, range) in [
            ("reference.completed_pct", self.reference.completed_pct),
            ("reference.busiest_pct", self.reference.busiest_pct),
        ] {
            if let Some([lo, hi]) = range {
                real(key, lo, 0.0, 100.0, "percent (low)")?;
                real(key, hi, lo, 100.0, "percent (high, at least low)")?;
            }
        }
        real("sweep.window_secs", s.window_secs, 0.0, MAX_SECS, "seconds")?;
        real(
            "sweep.max_duration_secs",
            s.max_duration_secs,
            1.0,
            MAX_SECS,
            "seconds",
        )?;
        Ok(())
    }
}

/// Most nodes a cluster may have.
pub const MAX_NODES: u32 = 100_000;
/// Most readers a scenario may have.
pub const MAX_READERS: u32 = 1_000_000;
/// Most blocks the hot file may have.
pub const MAX_BLOCKS: u64 = 100_000;
/// Longest latency a link may have, ms (one minute).
pub const MAX_LATENCY_MS: f64 = 60_000.0;
/// Longest client timeout or delay, ms (one hour).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Latest simulated instant a scenario may name, seconds (about 116 days).
pub const MAX_SECS: f64 = 1e7;
/// Most crash/restart steps one flap may expand to.
pub const MAX_FLAP_STEPS: u64 = 100_000;
/// Most faults of one kind a sweep may draw per seed.
pub const MAX_SWEEP_FAULTS: u32 = 10_000;

/// An integer key within `lo..=hi`.
fn int<T: PartialOrd + fmt::Display + Copy>(
    key: &str,
    v: T,
    lo: T,
    hi: T,
    what: &str,
) -> Result<(), (String, String)> {
    if lo <= v && v <= hi {
        return Ok(());
    }
    Err((
        key.to_string(),
        format!("must be between {lo} and {hi} ({what}), got {v}"),
    ))
}

/// A real key within `lo..=hi` (finite).
fn real(key: &str, v: f64, lo: f64, hi: f64, unit: &str) -> Result<(), (String, String)> {
    if v.is_finite() && lo <= v && v <= hi {
        return Ok(());
    }
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    Err((
        key.to_string(),
        format!(
            "must be between {} and {}{unit}, got {}",
            show(lo),
            show(hi),
            show(v)
        ),
    ))
}
