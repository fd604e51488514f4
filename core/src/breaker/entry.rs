//! One peer's circuit: its phase, generation, and every transition.
//!
//! Transitions that only the clock causes (the cooldown ending, an unreported probe's
//! lease running out) are applied lazily: [`Entry::view`] computes them without mutating,
//! for observers, and [`Entry::settle`] applies exactly the same transitions on the
//! request paths. Because both follow one definition, an observer never sees a state that
//! the next request would not also see, and observers need no `&mut`.

use super::config::{BreakerConfig, BACKOFF_FACTOR};
use super::outcome::{Outcome, State};
use crate::rng::{ChaCha8Rng, Rng};
use crate::time::{Duration, Instant};

/// The mutable part of a circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Counting consecutive soft failures.
    Closed { failures: u32 },
    /// Rejecting data requests until `until`.
    Open { until: Instant },
    /// Probing. `in_flight` probes are outstanding, `succeeded` have succeeded in this
    /// round (any failure ends the round). `lease_until` is meaningful while
    /// `in_flight > 0`. `reopen_cooldown` is the cooldown a failure of this round applies,
    /// drawn when the round began so that observers can predict lease expiry purely.
    HalfOpen {
        in_flight: u32,
        succeeded: u32,
        lease_until: Instant,
        reopen_cooldown: Duration,
    },
}

/// Who is reporting an outcome, which decides how it counts (see the module docs of
/// `breaker` for the roster rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    /// A data permit admitted while closed.
    Data,
    /// A data permit holding a half-open probe slot.
    Probe,
    /// A roster permit: bypassed admission, holds no slot.
    Roster,
    /// The unscoped `record_*` API: counts against whatever the circuit is now.
    Unscoped,
}

/// What a transition did to the set of non-closed circuits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// Nothing that affects the open count.
    None,
    /// Closed → open.
    Opened,
    /// Open or half-open → closed.
    Closed,
}

/// The observable result of [`Entry::view`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum View {
    Closed,
    Open { until: Instant },
    HalfOpen { can_admit: bool },
}

impl View {
    pub(super) fn state(self) -> State {
        match self {
            View::Closed => State::Closed,
            View::Open { .. } => State::Open,
            View::HalfOpen { .. } => State::HalfOpen,
        }
    }
}

/// One tracked peer's circuit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// Bumped when the circuit opens, reopens, or recovers; permits from older
    /// generations are stale.
    pub(super) generation: u64,
    pub(super) phase: Phase,
    /// Consecutive failed probe rounds since the circuit last closed (drives backoff).
    pub(super) failed_rounds: u32,
}

impl Entry {
    pub(super) const fn new() -> Self {
        Self {
            generation: 0,
            phase: Phase::Closed { failures: 0 },
            failed_rounds: 0,
        }
    }

    /// Carries no information: closed with no failures (and so no probes in flight).
    /// Such entries are the first to be swept when the map is full.
    pub(super) fn is_clean(&self) -> bool {
        matches!(self.phase, Phase::Closed { failures: 0 })
    }

    pub(super) fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed { .. })
    }

    /// The circuit as of `now`, with clock-driven transitions applied but not stored.
    pub(super) fn view(&self, now: Instant, cfg: &BreakerConfig) -> View {
        match self.phase {
            Phase::Closed { .. } => View::Closed,
            Phase::Open { until } if now < until => View::Open { until },
            Phase::Open { .. } => View::HalfOpen { can_admit: true },
            Phase::HalfOpen {
                in_flight,
                succeeded,
                lease_until,
                reopen_cooldown,
            } => {
                if in_flight > 0 && now >= lease_until {
                    let until = lease_until + reopen_cooldown;
                    if now < until {
                        return View::Open { until };
                    }
                    return View::HalfOpen { can_admit: true };
                }
                View::HalfOpen {
                    can_admit: succeeded == 0 && in_flight < cfg.half_open_probes,
                }
            }
        }
    }

    /// Applies the clock-driven transitions due at `now` (the ones [`view`](Self::view)
    /// predicts). A time earlier than a stored deadline simply leaves it pending.
    pub(super) fn settle(
        &mut self,
        now: Instant,
        cfg: &BreakerConfig,
        rng: Option<&mut ChaCha8Rng>,
    ) {
        let mut rng = rng;
        // At most: lease expiry -> reopen -> cooldown elapsed -> half-open; the loop is
        // bounded because a fresh half-open round has nothing in flight.
        loop {
            match self.phase {
                Phase::Open { until } if now >= until => {
                    let reopen_cooldown =
                        reopen_cooldown(cfg, rng.as_deref_mut(), self.failed_rounds);
                    self.phase = Phase::HalfOpen {
                        in_flight: 0,
                        succeeded: 0,
                        lease_until: Instant::ZERO,
                        reopen_cooldown,
                    };
                }
                Phase::HalfOpen {
                    in_flight,
                    lease_until,
                    reopen_cooldown,
                    ..
                } if in_flight > 0 && now >= lease_until => {
                    // A probe nobody reported: count the round as failed, as of the
                    // moment its lease ran out.
                    self.reopen(lease_until, reopen_cooldown);
                }
                _ => return,
            }
        }
    }

    /// Admits a data request if the circuit allows one now (after [`settle`](Self::settle)).
    /// `Ok(true)` means the request holds a probe slot.
    pub(super) fn admit(&mut self, now: Instant, cfg: &BreakerConfig) -> Result<bool, View> {
        match &mut self.phase {
            Phase::Closed { .. } => Ok(false),
            Phase::Open { until } => Err(View::Open { until: *until }),
            Phase::HalfOpen {
                in_flight,
                succeeded,
                lease_until,
                ..
            } => {
                if *succeeded == 0 && *in_flight < cfg.half_open_probes {
                    *in_flight += 1;
                    *lease_until = now + cfg.probe_lease;
                    Ok(true)
                } else {
                    Err(View::HalfOpen { can_admit: false })
                }
            }
        }
    }

    /// Counts one current-generation outcome (after [`settle`](Self::settle)).
    /// `may_open` is false when the optional open-share cap forbids opening right now.
    pub(super) fn apply(
        &mut self,
        now: Instant,
        via: Via,
        outcome: Outcome,
        cfg: &BreakerConfig,
        may_open: bool,
    ) -> Change {
        match (self.phase, outcome) {
            (Phase::Closed { .. }, Outcome::Answered) => {
                self.phase = Phase::Closed { failures: 0 };
                Change::None
            }
            (Phase::Closed { failures }, Outcome::SoftFailure) => {
                let failures = failures.saturating_add(1);
                if failures >= cfg.failure_threshold {
                    self.open(now, cfg, may_open)
                } else {
                    self.phase = Phase::Closed { failures };
                    Change::None
                }
            }
            (Phase::Closed { .. }, Outcome::HardFailure) => self.open(now, cfg, may_open),
            // Open and not yet cooled down. A failure does not restamp the cooldown (only
            // opening and a failed probe do), so late completions cannot pin it open. A
            // success from a request that bypassed admission at this generation (roster,
            // or an unscoped report) proves the peer answers: recover.
            (Phase::Open { .. }, Outcome::Answered) => match via {
                Via::Roster | Via::Unscoped => self.close(),
                Via::Data | Via::Probe => Change::None,
            },
            (Phase::Open { .. }, _) => Change::None,
            (
                Phase::HalfOpen {
                    in_flight,
                    succeeded,
                    lease_until,
                    reopen_cooldown,
                },
                outcome,
            ) => {
                let probe = match via {
                    Via::Probe => true,
                    Via::Unscoped => in_flight > 0 || outcome != Outcome::Answered,
                    Via::Roster | Via::Data => false,
                };
                if !probe {
                    // Roster results never take or override a data probe's slot: a success
                    // recovers only when no probe is outstanding; a failure is left to the
                    // probes (the clock-driven cooldown already passed, and only a failed
                    // probe restamps it).
                    if matches!(via, Via::Roster | Via::Unscoped)
                        && outcome == Outcome::Answered
                        && in_flight == 0
                    {
                        return self.close();
                    }
                    return Change::None;
                }
                match outcome {
                    Outcome::Answered => {
                        let in_flight = in_flight.saturating_sub(1);
                        if in_flight == 0 {
                            self.close()
                        } else {
                            self.phase = Phase::HalfOpen {
                                in_flight,
                                succeeded: succeeded + 1,
                                lease_until,
                                reopen_cooldown,
                            };
                            Change::None
                        }
                    }
                    Outcome::SoftFailure | Outcome::HardFailure => {
                        self.reopen(now, reopen_cooldown);
                        Change::None
                    }
                }
            }
        }
    }

    fn open(&mut self, now: Instant, cfg: &BreakerConfig, may_open: bool) -> Change {
        if !may_open {
            // Held closed by the open-share cap: keep the budget spent so the next
            // failure tries again.
            self.phase = Phase::Closed {
                failures: cfg.failure_threshold,
            };
            return Change::None;
        }
        self.generation += 1;
        self.failed_rounds = 0;
        self.phase = Phase::Open {
            until: now + cfg.cooldown,
        };
        Change::Opened
    }

    fn reopen(&mut self, at: Instant, cooldown: Duration) {
        self.generation += 1;
        self.failed_rounds = self.failed_rounds.saturating_add(1);
        self.phase = Phase::Open {
            until: at + cooldown,
        };
    }

    fn close(&mut self) -> Change {
        self.generation += 1;
        self.failed_rounds = 0;
        self.phase = Phase::Closed { failures: 0 };
        Change::Closed
    }
}

/// The cooldown a failure of the coming probe round will apply. Without backoff (or
/// without an RNG, which only happens when backoff is off) it is the base cooldown.
fn reopen_cooldown(
    cfg: &BreakerConfig,
    rng: Option<&mut ChaCha8Rng>,
    failed_rounds: u32,
) -> Duration {
    let (Some(backoff), Some(rng)) = (&cfg.backoff, rng) else {
        return cfg.cooldown;
    };
    // This round failing would make `failed_rounds + 1` consecutive failed rounds.
    let rounds = failed_rounds.saturating_add(1).min(32);
    let factor = BACKOFF_FACTOR.saturating_pow(rounds);
    let target = cfg
        .cooldown
        .checked_mul(factor)
        .unwrap_or(backoff.max_cooldown)
        .min(backoff.max_cooldown);
    let low = (target / 2).max(cfg.cooldown);
    let span = u64::try_from((target - low).as_nanos()).unwrap_or(u64::MAX);
    let jitter = if span == 0 {
        0
    } else {
        rng.next_u64() % span.saturating_add(1)
    };
    low + Duration::from_nanos(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::config::Backoff;

    #[test]
    fn backoff_grows_within_bounds_and_is_capped() {
        let cfg = BreakerConfig {
            backoff: Some(Backoff {
                max_cooldown: Duration::from_secs(60),
                seed: 1,
            }),
            ..BreakerConfig::default()
        };
        let mut rng = crate::rng::seeded(1);
        for rounds in 0..40 {
            let target = (Duration::from_secs(5) * 2u32.saturating_pow((rounds + 1).min(32)))
                .min(Duration::from_secs(60));
            for _ in 0..20 {
                let d = reopen_cooldown(&cfg, Some(&mut rng), rounds);
                assert!(d <= target && d >= (target / 2).max(cfg.cooldown), "{d:?}");
            }
        }
        assert_eq!(
            reopen_cooldown(&BreakerConfig::default(), None, 7),
            Duration::from_secs(5)
        );
    }

    /// Rule (module docs): an observer sees what the next request would see. A probe round
    /// that has begun (stored half-open, nothing in flight) is half-open and admitting,
    /// whatever cooldown its failure would apply, also before that cooldown's length has
    /// passed since the clock's zero.
    #[test]
    fn a_fresh_probe_round_is_seen_half_open_by_observers_as_by_requests() {
        let cfg = BreakerConfig {
            backoff: Some(Backoff {
                max_cooldown: Duration::from_secs(60),
                seed: 1,
            }),
            ..BreakerConfig::default()
        };
        let mut rng = crate::rng::seeded(3);
        let opened_until = Instant::ZERO + cfg.cooldown;
        let mut e = Entry {
            generation: 1,
            phase: Phase::Open {
                until: opened_until,
            },
            // Two failed rounds: this round's failure would apply 20 to 40 s, longer than
            // the time since the clock's zero.
            failed_rounds: 2,
        };
        let now = opened_until;
        e.settle(now, &cfg, Some(&mut rng));
        assert!(
            matches!(e.phase, Phase::HalfOpen { in_flight: 0, reopen_cooldown, .. }
                if reopen_cooldown > now - Instant::ZERO),
            "{:?}",
            e.phase
        );
        assert_eq!(e.view(now, &cfg), View::HalfOpen { can_admit: true });
        assert_eq!(e.admit(now, &cfg), Ok(true), "the request sees the same");
    }

    /// Rule (docs/breaker.md, `backoff`): the grown cooldown is drawn *uniformly* from
    /// `[max(cooldown, target/2), target]`: over many seeded draws every tenth of the range
    /// gets its share, both ends are reached, and the mean sits in the middle.
    #[test]
    fn backoff_jitter_is_uniform_over_the_whole_range() {
        let cfg = BreakerConfig {
            backoff: Some(Backoff {
                max_cooldown: Duration::from_secs(60),
                seed: 1,
            }),
            ..BreakerConfig::default()
        };
        let mut rng = crate::rng::seeded(7);
        // (failed rounds so far, low, target): 5 s x 2^(rounds+1), capped at 60 s.
        for (rounds, low, target) in [(0, 5, 10), (2, 20, 40), (9, 30, 60)] {
            let (low, target) = (Duration::from_secs(low), Duration::from_secs(target));
            let span = (target - low).as_nanos();
            const DRAWS: u32 = 4000;
            const BINS: usize = 10;
            let mut bins = [0u32; BINS];
            let (mut min, mut max, mut sum) = (target, low, 0u128);
            for _ in 0..DRAWS {
                let d = reopen_cooldown(&cfg, Some(&mut rng), rounds);
                assert!(
                    d >= low && d <= target,
                    "{d:?} outside [{low:?}, {target:?}]"
                );
                let off = (d - low).as_nanos();
                bins[usize::try_from(off * BINS as u128 / (span + 1)).unwrap()] += 1;
                (min, max, sum) = (min.min(d), max.max(d), sum + off);
            }
            // Expected 400 per bin, standard deviation 19: 300..500 is over 5 sigma.
            for (i, n) in bins.iter().enumerate() {
                assert!(
                    (300..=500).contains(n),
                    "rounds {rounds}: bin {i} has {n}: {bins:?}"
                );
            }
            assert!(
                min - low < (target - low) / 100,
                "rounds {rounds}: min {min:?}"
            );
            assert!(
                target - max < (target - low) / 100,
                "rounds {rounds}: max {max:?}"
            );
            let mean = sum / u128::from(DRAWS);
            assert!(
                mean.abs_diff(span / 2) < span / 50,
                "rounds {rounds}: mean offset {mean} ns of {span}"
            );
        }
    }
}
