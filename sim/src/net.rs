//! The network model: per-link latency and per-node upload bandwidth.
//!
//! Latency is one-way, drawn once per (reader, node) link from the scenario's
//! distribution. The draw is a pure function of the link and the network seed (a hash, not
//! a stream), so it does not matter in which order links are first used, and nothing has
//! to be stored for 10,000 × 1,000 links.
//!
//! Upload bandwidth is processor-shared: a node serving `n` responses gives each `1/n` of
//! its bandwidth, recomputed whenever a transfer starts, finishes or is cancelled. We track
//! the "virtual work" `w(t)` each active transfer has received since the node was created;
//! a transfer of `b` bytes started at `w0` finishes when `w` reaches `w0 + b`. That keeps
//! every operation `O(log n)` whatever the number of concurrent transfers.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use peerblock_core::time::{Duration, Instant};

use crate::scenario::Latency;

/// One-way latency of links, as a pure function of (seed, reader, node).
#[derive(Debug, Clone)]
pub struct LatencyModel {
    dist: Latency,
    seed: u64,
}

/// SplitMix64 finaliser: a bijection on u64 with good avalanche, used to hash link ids.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform draw in (0, 1) from a hash.
fn unit(h: u64) -> f64 {
    ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

impl LatencyModel {
    /// A model drawing from `dist` with the network sub-seed.
    pub fn new(dist: Latency, seed: u64) -> Self {
        LatencyModel { dist, seed }
    }

    /// One-way latency between `reader` and `node`.
    pub fn one_way(&self, reader: u32, node: u32) -> Duration {
        let h = mix(self.seed ^ mix((u64::from(reader) << 32) | u64::from(node)));
        let ms = match self.dist {
            Latency::Constant { ms } => ms,
            Latency::Uniform { min_ms, max_ms } => min_ms + (max_ms - min_ms) * unit(h),
            Latency::Lognormal { median_ms, sigma } => {
                // Box-Muller from two independent hashes.
                let u1 = unit(h);
                let u2 = unit(mix(h));
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                median_ms * (sigma * z).exp()
            }
        };
        Duration::from_nanos((ms.clamp(0.0, 600_000.0) * 1e6) as u64)
    }
}

/// Identifies a transfer on an uplink (the simulator's GET slot id).
pub type TransferId = u64;

/// A node's upload link, processor-shared among its active transfers.
#[derive(Debug)]
pub struct Uplink {
    /// Bytes per second at full rate (after any `slow` factor).
    rate: f64,
    /// Most bytes per second one transfer can use (the receiving connection's ceiling);
    /// `f64::INFINITY` for none.
    cap: f64,
    /// Virtual work per active transfer so far, bytes.
    work: f64,
    /// When `work` was last brought up to date.
    last: Instant,
    /// Active transfers by finishing work; cancelled ones are skipped lazily.
    finish: BinaryHeap<Reverse<(u64, TransferId)>>,
    cancelled: BTreeSet<TransferId>,
    active: u32,
    /// Bumped on every reschedule, so stale completion events can be told apart.
    generation: u64,
}

/// Work values are non-negative f64s; their bit patterns order like the numbers.
fn key(w: f64) -> u64 {
    w.max(0.0).to_bits()
}

impl Uplink {
    /// An idle link of `bytes_per_sec` whose transfers each get at most `cap` bytes per
    /// second.
    pub fn new(bytes_per_sec: f64, cap: f64) -> Self {
        Uplink {
            rate: bytes_per_sec,
            cap,
            work: 0.0,
            last: Instant::ZERO,
            finish: BinaryHeap::new(),
            cancelled: BTreeSet::new(),
            active: 0,
            generation: 0,
        }
    }

    fn advance(&mut self, now: Instant) {
        if self.active > 0 && now > self.last {
            let secs = (now - self.last).as_nanos() as f64 / 1e9;
            self.work += secs * self.per_transfer();
        }
        self.last = self.last.max(now);
    }

    /// Rate each active transfer gets: an equal share, up to the per-transfer cap.
    fn per_transfer(&self) -> f64 {
        (self.rate / f64::from(self.active.max(1))).min(self.cap)
    }

    /// Transfers currently sharing the link.
    pub fn active(&self) -> u32 {
        self.active
    }

    /// Current generation: a completion event scheduled under an older one is stale.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Starts sending `bytes` for `id`.
    pub fn start(&mut self, now: Instant, id: TransferId, bytes: u64) {
        self.advance(now);
        self.finish
            .push(Reverse((key(self.work + bytes as f64), id)));
        self.active += 1;
    }

    /// Stops sending `id` (the client gave up, or the node crashed).
    pub fn cancel(&mut self, now: Instant, id: TransferId) {
        self.advance(now);
        self.cancelled.insert(id);
        self.active -= 1;
    }

    /// Changes the link rate from `now` on (a `slow` fault or its end).
    pub fn set_rate(&mut self, now: Instant, bytes_per_sec: f64) {
        self.advance(now);
        self.rate = bytes_per_sec;
    }

    /// Drops every transfer (crash); their ids are returned in finishing order.
    pub fn clear(&mut self, now: Instant) -> Vec<TransferId> {
        self.advance(now);
        let mut out = Vec::new();
        while let Some(Reverse((_, id))) = self.finish.pop() {
            if !self.cancelled.remove(&id) {
                out.push(id);
            }
        }
        self.active = 0;
        out
    }

    fn skip_cancelled(&mut self) {
        while let Some(Reverse((_, id))) = self.finish.peek() {
            if self.cancelled.remove(id) {
                self.finish.pop();
            } else {
                break;
            }
        }
    }

    /// When the next transfer finishes at the current sharing, with a fresh generation
    /// for the completion event. `None` when idle.
    pub fn reschedule(&mut self) -> Option<(Instant, u64)> {
        self.skip_cancelled();
        self.generation += 1;
        let Reverse((k, _)) = *self.finish.peek()?;
        let left = (f64::from_bits(k) - self.work).max(0.0);
        let secs = left / self.per_transfer();
        let nanos = (secs * 1e9).ceil() as u64;
        Some((self.last + Duration::from_nanos(nanos), self.generation))
    }

    /// Pops every transfer that has finished by `now`.
    pub fn finished(&mut self, now: Instant) -> Vec<TransferId> {
        self.advance(now);
        let mut out = Vec::new();
        let slack = 1e-6 * self.work.max(1.0) + 1e-3;
        loop {
            self.skip_cancelled();
            match self.finish.peek() {
                Some(Reverse((k, id))) if f64::from_bits(*k) <= self.work + slack => {
                    out.push(*id);
                    self.finish.pop();
                    self.active -= 1;
                }
                _ => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_transfer_gets_full_rate() {
        let mut u = Uplink::new(1_000_000.0, f64::INFINITY);
        u.start(Instant::ZERO, 1, 2_000_000);
        let (t, _) = u.reschedule().unwrap();
        assert_eq!(t, Instant::from_secs(2));
        assert_eq!(u.finished(t), vec![1]);
        assert!(u.reschedule().is_none());
    }

    #[test]
    fn concurrent_transfers_share_bandwidth() {
        // Two 1 MB transfers on a 1 MB/s link: both take 2 s, not 1 s.
        let mut u = Uplink::new(1_000_000.0, f64::INFINITY);
        u.start(Instant::ZERO, 1, 1_000_000);
        u.start(Instant::ZERO, 2, 1_000_000);
        let (t, _) = u.reschedule().unwrap();
        assert_eq!(t, Instant::from_secs(2));
        assert_eq!(u.finished(t), vec![1, 2]);
    }

    #[test]
    fn a_late_starter_speeds_up_when_the_first_finishes() {
        // 1 MB/s. A: 1 MB at t=0. B: 1 MB at t=0.5. A has 0.5 MB left at 0.5 s, shared
        // halves: done at 1.5 s; B then has 0.5 MB left alone: done at 2.0 s.
        let mut u = Uplink::new(1_000_000.0, f64::INFINITY);
        u.start(Instant::ZERO, 1, 1_000_000);
        u.start(Instant::from_millis(500), 2, 1_000_000);
        let (t, _) = u.reschedule().unwrap();
        assert_eq!(t, Instant::from_millis(1_500));
        assert_eq!(u.finished(t), vec![1]);
        let (t, _) = u.reschedule().unwrap();
        assert_eq!(t, Instant::from_millis(2_000));
        assert_eq!(u.finished(t), vec![2]);
    }

    #[test]
    fn cancelling_frees_bandwidth() {
        let mut u = Uplink::new(1_000_000.0, f64::INFINITY);
        u.start(Instant::ZERO, 1, 1_000_000);
        u.start(Instant::ZERO, 2, 1_000_000);
        u.cancel(Instant::from_millis(500), 2);
        let (t, _) = u.reschedule().unwrap();
        // 0.25 MB done by 0.5 s, 0.75 MB left alone: 1.25 s.
        assert_eq!(t, Instant::from_millis(1_250));
        assert_eq!(u.finished(t), vec![1]);
    }

    #[test]
    fn a_transfer_cap_limits_a_lone_transfer_but_not_a_crowd() {
        // 1 MB/s link, 0.25 MB/s per transfer: one 1 MB transfer takes 4 s, not 1 s;
        // eight share the link at 0.125 MB/s each (below the cap): 8 s.
        let mut u = Uplink::new(1_000_000.0, 250_000.0);
        u.start(Instant::ZERO, 1, 1_000_000);
        assert_eq!(u.reschedule().unwrap().0, Instant::from_secs(4));
        let mut u = Uplink::new(1_000_000.0, 250_000.0);
        for id in 0..8 {
            u.start(Instant::ZERO, id, 1_000_000);
        }
        assert_eq!(u.reschedule().unwrap().0, Instant::from_secs(8));
    }

    #[test]
    fn latency_is_a_pure_function_of_the_link() {
        let m = LatencyModel::new(
            Latency::Uniform {
                min_ms: 10.0,
                max_ms: 20.0,
            },
            7,
        );
        assert_eq!(m.one_way(3, 4), m.one_way(3, 4));
        assert_ne!(m.one_way(3, 4), m.one_way(4, 3));
        for r in 0..50 {
            let d = m.one_way(r, 1);
            assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(20));
        }
    }
}
