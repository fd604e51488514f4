//! Breaker configuration, its defaults and its validation.
//!
//! Every knob has a named default taken from the reference (threshold 5, cooldown 5 s,
//! one half-open probe, 4096 tracked peers). The two behaviours that go beyond the
//! reference, [`BreakerConfig::max_open_share`] and [`BreakerConfig::backoff`], are off
//! unless set. [`BreakerConfig::validate`] rejects values that would make the breaker
//! meaningless (a zero threshold would open on nothing; zero probes could never close a
//! circuit again) and names the offending field, so a bad config file is a clear local
//! error instead of a panic or a silently stuck peer.

use crate::time::Duration;

/// Consecutive soft failures that open a closed circuit (reference default).
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 5;
/// How long an opened circuit stays open before it admits probes (reference default).
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(5);
/// Probes a half-open circuit admits; all must succeed to close it (reference default).
pub const DEFAULT_HALF_OPEN_PROBES: u32 = 1;
/// Tracked peers before the map sweeps or evicts (reference default): enough for any
/// close group and roster we talk to, small enough that failed-address churn in a
/// long-lived cluster cannot grow memory without bound.
pub const DEFAULT_MAX_PEERS: usize = 4096;
/// How long a half-open probe may stay unreported before its slot is reclaimed as a failed
/// probe. Twice the reference's 30 s whole-request bound, so a driver that enforces its
/// request timeout always reports first; the lease only catches a permit that was dropped
/// without being recorded or released (which would otherwise hold the slot forever).
pub const DEFAULT_PROBE_LEASE: Duration = Duration::from_secs(60);
/// The largest accepted [`BreakerConfig::max_peers`]: slots are addressed by `u32`, and
/// a map this large is already far past any sensible peer set.
pub const MAX_PEERS_LIMIT: usize = 1 << 24;
/// Growth factor of the optional probe-failure backoff: each consecutive failed probe
/// round doubles the target cooldown (before jitter, up to the cap).
pub const BACKOFF_FACTOR: u32 = 2;

/// Tuning of a [`Breaker`](super::Breaker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive soft failures that open a closed circuit. Hard failures open at once.
    pub failure_threshold: u32,
    /// Time an opened circuit rejects data requests before it turns half-open.
    pub cooldown: Duration,
    /// Probes admitted per half-open round; every one must succeed to close.
    pub half_open_probes: u32,
    /// Hard cap on tracked peers; past it clean entries are swept, else the
    /// least-recently-active entry is evicted.
    pub max_peers: usize,
    /// Unreported-probe lease: see [`DEFAULT_PROBE_LEASE`].
    pub probe_lease: Duration,
    /// Optional cap on the share of tracked peers whose circuits may be non-closed at once,
    /// in percent (1..=100). `None` (the default) never holds a circuit closed.
    pub max_open_share: Option<u8>,
    /// Optional jittered, growing cooldown for a peer that keeps failing its probes.
    /// `None` (the default) reopens with the plain [`cooldown`](Self::cooldown).
    pub backoff: Option<Backoff>,
}

/// The optional growing cooldown after failed probes.
///
/// After `k` consecutive failed probe rounds the target cooldown is
/// `cooldown * 2^k`, capped at [`max_cooldown`](Self::max_cooldown); the actual cooldown
/// is drawn uniformly from `[max(cooldown, target / 2), target]` so that many clients
/// that lost the same peer at the same moment do not all probe it in lockstep. The
/// jitter comes from a ChaCha8 stream seeded with [`seed`](Self::seed) in the
/// breaker's constructor, so runs are reproducible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    /// Upper bound of the grown cooldown; must be at least the base cooldown.
    pub max_cooldown: Duration,
    /// Seed of the jitter stream (derive it with `rng::child_seed(parent, "breaker")`).
    pub seed: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            cooldown: DEFAULT_COOLDOWN,
            half_open_probes: DEFAULT_HALF_OPEN_PROBES,
            max_peers: DEFAULT_MAX_PEERS,
            probe_lease: DEFAULT_PROBE_LEASE,
            max_open_share: None,
            backoff: None,
        }
    }
}

/// A [`BreakerConfig`] value that cannot work. Always the local integrator's mistake
/// (a config file or constructor argument), never a peer's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A count or duration that must be positive was zero.
    #[error("breaker config: `{field}` must be at least 1, got 0")]
    Zero {
        /// The offending field name.
        field: &'static str,
    },
    /// `max_peers` is above [`MAX_PEERS_LIMIT`].
    #[error("breaker config: `max_peers` is {got}, above the limit {limit}")]
    TooManyPeers {
        /// The configured value.
        got: usize,
        /// [`MAX_PEERS_LIMIT`].
        limit: usize,
    },
    /// `max_open_share` is not a percentage in 1..=100.
    #[error("breaker config: `max_open_share` must be a percentage in 1..=100, got {0}")]
    OpenShare(u8),
    /// `backoff.max_cooldown` is below the base cooldown, so the backoff could only shrink it.
    #[error("breaker config: `backoff.max_cooldown` ({max:?}) is below `cooldown` ({base:?})")]
    BackoffBelowCooldown {
        /// The configured cap.
        max: Duration,
        /// The configured base cooldown.
        base: Duration,
    },
}

impl BreakerConfig {
    /// Checks every field; the first problem found is returned, naming its field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.failure_threshold == 0 {
            return Err(ConfigError::Zero {
                field: "failure_threshold",
            });
        }
        if self.half_open_probes == 0 {
            return Err(ConfigError::Zero {
                field: "half_open_probes",
            });
        }
        if self.max_peers == 0 {
            return Err(ConfigError::Zero { field: "max_peers" });
        }
        if self.max_peers > MAX_PEERS_LIMIT {
            return Err(ConfigError::TooManyPeers {
                got: self.max_peers,
                limit: MAX_PEERS_LIMIT,
            });
        }
        if self.probe_lease.is_zero() {
            return Err(ConfigError::Zero {
                field: "probe_lease",
            });
        }
        if let Some(share) = self.max_open_share {
            if share == 0 || share > 100 {
                return Err(ConfigError::OpenShare(share));
            }
        }
        if let Some(backoff) = &self.backoff {
            if backoff.max_cooldown < self.cooldown {
                return Err(ConfigError::BackoffBelowCooldown {
                    max: backoff.max_cooldown,
                    base: self.cooldown,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_reference_values_and_valid() {
        let c = BreakerConfig::default();
        assert_eq!(c.failure_threshold, 5);
        assert_eq!(c.cooldown, Duration::from_secs(5));
        assert_eq!(c.half_open_probes, 1);
        assert_eq!(c.max_peers, 4096);
        assert_eq!(c.max_open_share, None);
        assert_eq!(c.backoff, None);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn zero_fields_are_errors_naming_the_field() {
        let zero = |f: fn(&mut BreakerConfig)| {
            let mut c = BreakerConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        let e = zero(|c| c.failure_threshold = 0);
        assert!(e.to_string().contains("failure_threshold"), "{e}");
        let e = zero(|c| c.half_open_probes = 0);
        assert!(e.to_string().contains("half_open_probes"), "{e}");
        let e = zero(|c| c.max_peers = 0);
        assert!(e.to_string().contains("max_peers"), "{e}");
        let e = zero(|c| c.probe_lease = Duration::ZERO);
        assert!(e.to_string().contains("probe_lease"), "{e}");
        assert_eq!(
            zero(|c| c.max_open_share = Some(101)),
            ConfigError::OpenShare(101)
        );
        assert_eq!(
            zero(|c| c.max_open_share = Some(0)),
            ConfigError::OpenShare(0)
        );
        assert!(matches!(
            zero(|c| c.max_peers = MAX_PEERS_LIMIT + 1),
            ConfigError::TooManyPeers { .. }
        ));
        assert!(matches!(
            zero(|c| c.backoff = Some(Backoff {
                max_cooldown: Duration::from_secs(1),
                seed: 0
            })),
            ConfigError::BackoffBelowCooldown { .. }
        ));
    }
}
