//! The fault timeline: scenario faults resolved to nodes, flaps expanded, and the random
//! faults a `--seeds` sweep draws per seed.

use peerblock_core::rng::{seeded, Rng};
use peerblock_core::time::{Duration, Instant};

use crate::model::content::Content;
use crate::scenario::{Fault, FaultKind, Scenario, Target};

/// What happens to a node at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Act {
    /// Stop answering; lose sessions and transfers.
    Crash,
    /// Back to healthy (clears crash, silence and corruption; restores bandwidth).
    Restart,
    /// Accept, never answer.
    Silent,
    /// Upload bandwidth becomes `factor` × nominal.
    Slow(f64),
    /// Unreachable from readers.
    Partition,
    /// Reachable again.
    Heal,
    /// Serve wrong bytes.
    Corrupt,
}

impl Act {
    /// Name used in traces.
    pub fn name(&self) -> &'static str {
        match self {
            Act::Crash => "crash",
            Act::Restart => "restart",
            Act::Silent => "silent",
            Act::Slow(_) => "slow",
            Act::Partition => "partition",
            Act::Heal => "heal",
            Act::Corrupt => "corrupt",
        }
    }
}

/// One resolved fault step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// When.
    pub at: Instant,
    /// Which node.
    pub node: u32,
    /// What happens.
    pub act: Act,
}

fn secs(s: f64) -> Instant {
    Instant::from_nanos((s * 1e9) as u64)
}

/// Resolves the scenario's faults (and `extra` drawn ones) into a time-ordered timeline.
pub fn timeline(faults: &[Fault], content: &Content) -> Vec<Step> {
    let mut out = Vec::new();
    for f in faults {
        let node = match f.target() {
            Target::Node(n) => n,
            Target::Holder { block, rank } => content.holders(block)[rank as usize],
        };
        let at = secs(f.at_secs);
        let act = match f.kind {
            FaultKind::Crash => Act::Crash,
            FaultKind::Restart => Act::Restart,
            FaultKind::Silent => Act::Silent,
            FaultKind::Slow => Act::Slow(f.factor.unwrap_or(1.0)),
            FaultKind::Partition => Act::Partition,
            FaultKind::Heal => Act::Heal,
            FaultKind::Corrupt => Act::Corrupt,
            FaultKind::Flap => {
                let period = Duration::from_nanos((f.period_secs.unwrap_or(1.0) * 1e9) as u64);
                let end = at + Duration::from_nanos((f.duration_secs.unwrap_or(0.0) * 1e9) as u64);
                let mut t = at;
                let mut down = true;
                while t < end {
                    let act = if down { Act::Crash } else { Act::Restart };
                    out.push(Step { at: t, node, act });
                    down = !down;
                    t += period;
                }
                if !down {
                    out.push(Step {
                        at: end,
                        node,
                        act: Act::Restart,
                    });
                }
                continue;
            }
        };
        out.push(Step { at, node, act });
    }
    // Stable sort: same-instant steps keep scenario order.
    out.sort_by_key(|s| s.at);
    out
}

/// Draws the sweep's random faults for one seed, as scenario faults (so they are logged
/// and resolved like any other).
pub fn draw(s: &Scenario, seed: u64) -> Vec<Fault> {
    let mut rng = seeded(seed);
    let sw = &s.sweep;
    let nodes = s.cluster.nodes;
    let mut unit = move || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let mut out = Vec::new();
    let pair = |out: &mut Vec<Fault>,
                start: FaultKind,
                end: FaultKind,
                factor: Option<f64>,
                u: &mut dyn FnMut() -> f64| {
        let node = ((u() * f64::from(nodes)) as u32).min(nodes - 1);
        let at = u() * sw.window_secs;
        let dur = 1.0 + u() * (sw.max_duration_secs - 1.0);
        let fault = |kind, at_secs, factor| Fault {
            at_secs,
            kind,
            node: Some(node),
            holder_block: None,
            holder_rank: None,
            factor,
            duration_secs: None,
            period_secs: None,
        };
        out.push(fault(start, at, factor));
        out.push(fault(end, at + dur, factor.map(|_| 1.0)));
    };
    for _ in 0..sw.crashes {
        pair(
            &mut out,
            FaultKind::Crash,
            FaultKind::Restart,
            None,
            &mut unit,
        );
    }
    for _ in 0..sw.silent {
        pair(
            &mut out,
            FaultKind::Silent,
            FaultKind::Restart,
            None,
            &mut unit,
        );
    }
    for _ in 0..sw.partitions {
        pair(
            &mut out,
            FaultKind::Partition,
            FaultKind::Heal,
            None,
            &mut unit,
        );
    }
    for _ in 0..sw.slow {
        let factor = 0.05 + 0.45 * unit();
        pair(
            &mut out,
            FaultKind::Slow,
            FaultKind::Slow,
            Some(factor),
            &mut unit,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flap_expands_into_alternating_crash_and_restart_ending_up() {
        let content = Content::new(10, 1, 3, 1, 2);
        let f = Fault {
            at_secs: 10.0,
            kind: FaultKind::Flap,
            node: Some(4),
            holder_block: None,
            holder_rank: None,
            factor: None,
            duration_secs: Some(25.0),
            period_secs: Some(10.0),
        };
        let t = timeline(&[f], &content);
        let acts: Vec<_> = t
            .iter()
            .map(|s| (s.at.as_nanos() / 1_000_000_000, s.act))
            .collect();
        assert_eq!(
            acts,
            vec![
                (10, Act::Crash),
                (20, Act::Restart),
                (30, Act::Crash),
                (35, Act::Restart)
            ]
        );
    }

    #[test]
    fn holder_targets_resolve_to_the_close_group() {
        let content = Content::new(20, 2, 7, 1, 2);
        let f = Fault {
            at_secs: 1.0,
            kind: FaultKind::Crash,
            node: None,
            holder_block: Some(1),
            holder_rank: Some(2),
            factor: None,
            duration_secs: None,
            period_secs: None,
        };
        assert_eq!(timeline(&[f], &content)[0].node, content.holders(1)[2]);
    }
}
