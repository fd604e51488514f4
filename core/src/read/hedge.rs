//! Optional adaptive hedge delay (beyond the reference; off by default).
//!
//! A fixed 1 s hedge is generous on a fast network: a holder that usually answers in 30 ms
//! and has not answered after 200 ms is probably stuck. [`HedgeEstimator`] remembers this
//! client's recent GET latencies and proposes a hedge delay at a high quantile of them,
//! never below a floor (hedging too eagerly doubles load) and never above the configured
//! ceiling (the reference 1 s). The driver owns one per client, feeds it every answered
//! GET's latency, and copies [`HedgeEstimator::delay`] into each new read's
//! [`ReadConfig::hedge_delay`](super::ReadConfig::hedge_delay). Reads without it keep the
//! fixed delay.

use crate::time::Duration;

/// Latencies remembered: enough for a stable 95th percentile, small enough to sort on
/// every query without noticing (64 × 8 bytes).
pub const HEDGE_WINDOW: usize = 64;

/// Samples needed before the estimate replaces the ceiling: below this the quantile is
/// noise.
pub const HEDGE_MIN_SAMPLES: usize = 16;

/// Default quantile, in thousandths: hedge only the slowest 5% of GETs.
pub const DEFAULT_HEDGE_QUANTILE_PERMILLE: u16 = 950;

/// Default floor: below 50 ms a hedge races ordinary jitter and doubles load for nothing.
pub const DEFAULT_HEDGE_FLOOR: Duration = Duration::from_millis(50);

/// A bounded window of recent GET latencies and the hedge delay they suggest.
#[derive(Clone, Debug)]
pub struct HedgeEstimator {
    samples: [u64; HEDGE_WINDOW],
    len: usize,
    next: usize,
    quantile_permille: u16,
    floor: Duration,
    ceiling: Duration,
}

impl HedgeEstimator {
    /// An estimator with the default quantile and floor, capped at `ceiling` (normally
    /// the fixed hedge delay, 1 s). The quantile is clamped to at most 1000‰.
    pub fn new(ceiling: Duration) -> Self {
        Self::with(
            DEFAULT_HEDGE_QUANTILE_PERMILLE,
            DEFAULT_HEDGE_FLOOR,
            ceiling,
        )
    }

    /// An estimator with an explicit quantile (‰), floor and ceiling. A floor above the
    /// ceiling is lowered to it.
    pub fn with(quantile_permille: u16, floor: Duration, ceiling: Duration) -> Self {
        HedgeEstimator {
            samples: [0; HEDGE_WINDOW],
            len: 0,
            next: 0,
            quantile_permille: quantile_permille.min(1000),
            floor: floor.min(ceiling),
            ceiling,
        }
    }

    /// Records one answered GET's latency (the oldest sample is forgotten when full).
    pub fn observe(&mut self, latency: Duration) {
        self.samples[self.next] = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.next = (self.next + 1) % HEDGE_WINDOW;
        self.len = (self.len + 1).min(HEDGE_WINDOW);
    }

    /// The hedge delay to use now: the configured quantile of recent latencies within
    /// `[floor, ceiling]`, or the ceiling until [`HEDGE_MIN_SAMPLES`] were seen.
    pub fn delay(&self) -> Duration {
        if self.len < HEDGE_MIN_SAMPLES {
            return self.ceiling;
        }
        let mut sorted = self.samples;
        let window = &mut sorted[..self.len];
        window.sort_unstable();
        let rank = (self.len - 1) * usize::from(self.quantile_permille) / 1000;
        Duration::from_nanos(window[rank]).clamp(self.floor, self.ceiling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_until_enough_samples_then_quantile_within_bounds() {
        let mut h = HedgeEstimator::new(Duration::from_secs(1));
        for _ in 0..HEDGE_MIN_SAMPLES - 1 {
            h.observe(Duration::from_millis(100));
        }
        assert_eq!(h.delay(), Duration::from_secs(1));
        for i in 0..HEDGE_WINDOW as u64 {
            h.observe(Duration::from_millis(100 + i));
        }
        // 95th percentile of 100..=163 ms: rank floor(63 × 0.95) = 59.
        assert_eq!(h.delay(), Duration::from_millis(159));
        for _ in 0..HEDGE_WINDOW {
            h.observe(Duration::from_millis(1));
        }
        assert_eq!(h.delay(), DEFAULT_HEDGE_FLOOR);
        for _ in 0..HEDGE_WINDOW {
            h.observe(Duration::from_secs(5));
        }
        assert_eq!(h.delay(), Duration::from_secs(1));
    }

    #[test]
    fn exactly_the_minimum_samples_replace_the_ceiling() {
        let mut h = HedgeEstimator::new(Duration::from_secs(1));
        for _ in 0..HEDGE_MIN_SAMPLES {
            h.observe(Duration::from_millis(200));
        }
        assert_eq!(h.delay(), Duration::from_millis(200));
    }
}
