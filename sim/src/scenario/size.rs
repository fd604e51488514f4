//! Scenario size: the estimate of a run's peak memory and event count
//! ([`Scenario::estimate`]) and the [`Budget`] it is checked against before the run.

use crate::model::content::KEPT_PER_BLOCK;

use super::*;

impl Scenario {
    /// The scenario's estimated peak memory and event count, term by term (see
    /// [`Estimate`]). `sweep` adds the faults a `--seeds` sweep draws per seed.
    pub fn estimate(&self, sweep: bool) -> Estimate {
        let nodes = f64::from(self.cluster.nodes);
        let blocks = f64::from(self.blocks());
        let readers = f64::from(self.readers.count);
        let rounds = f64::from(self.readers.rounds);
        let downloads = readers * rounds;
        let reads = downloads * blocks;
        let known = nodes.min(blocks * f64::from(self.client.lookup_peers));
        let flap_steps: f64 = self
            .faults
            .iter()
            .filter(|f| f.kind == FaultKind::Flap)
            .map(|f| (f.duration_secs.unwrap_or(0.0) / f.period_secs.unwrap_or(1.0)).ceil() + 1.0)
            .sum();
        let sw = &self.sweep;
        let drawn = if sweep {
            2.0 * f64::from(sw.crashes + sw.silent + sw.partitions + sw.slow)
        } else {
            0.0
        };
        let kept = nodes.min(KEPT_PER_BLOCK as f64);
        let kademlia = self.client.routing == RoutingModel::Kademlia;
        // A routing table holds at most bucket_size nodes per non-empty bucket (about
        // log2(nodes) + 1 of them).
        let table = if kademlia {
            nodes.min(f64::from(self.client.bucket_size) * (nodes.max(2.0).log2() + 1.0))
        } else {
            0.0
        };
        let mut memory = vec![
            Term::new(
                "first-read counts per round, block and node",
                &[
                    "readers.rounds",
                    "file.size_mib / file.block_kib",
                    "cluster.nodes",
                ],
                (2.0 * rounds + 1.0) * blocks * nodes * 4.0,
            ),
            Term::new(
                "read durations",
                &[
                    "readers.count",
                    "readers.rounds",
                    "file.size_mib / file.block_kib",
                ],
                reads * 8.0,
            ),
            Term::new(
                "downloads and their round starts",
                &["readers.count", "readers.rounds"],
                downloads * 96.0,
            ),
            Term::new(
                "readers' per-node state (breaker, cooldowns, load)",
                &["readers.count", "cluster.nodes"],
                readers * (512.0 + known * 96.0),
            ),
            Term::new(
                "placement and per-node series",
                &["file.size_mib / file.block_kib", "cluster.nodes"],
                blocks * (kept * 4.0 + 96.0) + nodes * (48.0 + 101.0 * 8.0),
            ),
            Term::new(
                "fault timeline",
                &["faults.duration_secs / faults.period_secs", "sweep"],
                (flap_steps + drawn) * 48.0,
            ),
        ];
        memory.push(Term::new(
            "routing tables (client.routing = \"kademlia\")",
            &["readers.count", "cluster.nodes", "client.bucket_size"],
            (readers + nodes) * table * 4.0,
        ));
        let mut events = vec![
            Term::new(
                "block reads",
                &[
                    "readers.count",
                    "readers.rounds",
                    "file.size_mib / file.block_kib",
                ],
                reads * EVENTS_PER_READ,
            ),
            Term::new(
                "placement (distance comparisons / 16)",
                &["file.size_mib / file.block_kib", "cluster.nodes"],
                blocks * nodes * (nodes.max(2.0)).log2() / 16.0,
            ),
            Term::new(
                "fault steps",
                &["faults.duration_secs / faults.period_secs", "sweep"],
                flap_steps + drawn,
            ),
        ];
        events.push(Term::new(
            "Kademlia lookups (table entries sorted / 16)",
            &[
                "readers.count",
                "readers.rounds",
                "file.size_mib / file.block_kib",
                "client.bucket_size",
            ],
            reads
                * f64::from(self.client.lookup_rtts)
                * (crate::model::routing::ALPHA as f64 + 1.0)
                * table
                * table.max(2.0).log2()
                / 16.0,
        ));
        Estimate { memory, events }
    }

    /// Refuses a scenario whose [`Scenario::estimate`] is over `budget`: the message names
    /// the term's keys, its size and the bound.
    pub fn check_size(&self, budget: &Budget, sweep: bool) -> Result<(), String> {
        let e = self.estimate(sweep);
        let total_memory = e.memory_bytes();
        if total_memory > budget.memory_bytes {
            let t = e.largest_memory();
            return Err(format!(
                "too large to simulate: estimated memory {} exceeds the bound of {}; the \
                 largest part is {} ({} = {}), so lower {}",
                bytes(total_memory),
                bytes(budget.memory_bytes),
                t.what,
                t.keys.join(" × "),
                bytes(t.amount),
                t.keys.join(" or ")
            ));
        }
        let total_events = e.events();
        if total_events > budget.events {
            let t = e.largest_events();
            return Err(format!(
                "too large to simulate: estimated {} events exceed the bound of {}; the \
                 largest part is {} ({} = {} events), so lower {}",
                show(total_events.round()),
                show(budget.events),
                t.what,
                t.keys.join(" × "),
                show(t.amount.round()),
                t.keys.join(" or ")
            ));
        }
        Ok(())
    }
}

/// Events one block read costs, on average, in the estimate (the shipped scenarios measure
/// 16–25; overload adds refusals and retries).
pub const EVENTS_PER_READ: f64 = 30.0;

/// How large a scenario the simulator accepts, checked before the run by
/// [`Scenario::check_size`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Estimated peak memory, bytes.
    pub memory_bytes: f64,
    /// Estimated events (and equivalent work).
    pub events: f64,
}

impl Default for Budget {
    /// 4 GiB and 5 × 10^8 events (about an hour at the HTTP/1.1 path's pace of ~120,000
    /// events a second).
    fn default() -> Self {
        Budget {
            memory_bytes: 4.0 * (1u64 << 30) as f64,
            events: 5e8,
        }
    }
}

/// One part of an [`Estimate`]: what it is, the keys whose product it is, its size.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    /// What the memory or work is for.
    pub what: &'static str,
    /// The scenario keys (or key quotients) it is proportional to.
    pub keys: Vec<&'static str>,
    /// Bytes or events.
    pub amount: f64,
}

impl Term {
    fn new(what: &'static str, keys: &[&'static str], amount: f64) -> Self {
        Term {
            what,
            keys: keys.to_vec(),
            amount,
        }
    }
}

/// A scenario's size before it runs: the memory its tables take and the events it will
/// process, each as a sum of terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Memory terms, bytes.
    pub memory: Vec<Term>,
    /// Event terms.
    pub events: Vec<Term>,
}

impl Estimate {
    /// Total estimated memory, bytes.
    pub fn memory_bytes(&self) -> f64 {
        self.memory.iter().map(|t| t.amount).sum()
    }

    /// Total estimated events.
    pub fn events(&self) -> f64 {
        self.events.iter().map(|t| t.amount).sum()
    }

    /// The largest memory term.
    pub fn largest_memory(&self) -> &Term {
        largest(&self.memory)
    }

    /// The largest event term.
    pub fn largest_events(&self) -> &Term {
        largest(&self.events)
    }
}

fn largest(terms: &[Term]) -> &Term {
    terms
        .iter()
        .max_by(|a, b| a.amount.total_cmp(&b.amount))
        .expect("an estimate has terms")
}

/// `3.2 GiB`, `840.0 MiB`.
fn bytes(b: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == UNITS.len() - 1 && v >= 1024.0 {
        return format!("{} B", show(b));
    }
    format!("{v:.1} {}", UNITS[u])
}

/// A number as a person would read it: plain when moderate, in exponent form when huge or
/// tiny (`1e300`, not three hundred digits).
pub fn show(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 || (1e-3..1e7).contains(&a) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}
