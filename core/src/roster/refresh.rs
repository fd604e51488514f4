//! The roster refresh: when to exchange membership, and with whom.

use std::collections::VecDeque;

use rand_chacha::ChaCha8Rng;
use rand_core::Rng;

use super::{MemberProblem, Membership, MergeReport, Verified, MAX_ADDR_LEN};
use crate::client::Ending;
use crate::rng::{child_seed, seeded};
use crate::time::{Deadline, Duration, Instant};

/// Default [`RefreshConfig::interval`]: 30 s between rounds.
///
/// Membership changes at the pace of deploys and restarts (minutes), and the inbound half
/// of every exchange (the responder learns its caller) spreads a newcomer faster than the
/// rounds do. With [`DEFAULT_REFRESH_FANOUT`] = 2, a member heard of by one node reaches
/// the others in about `log3(N)` rounds (each round, every node that knows it can tell two
/// more): about 2 minutes for 50 nodes. The cost is two roster fetches per node per 30 s,
/// a few KiB each for a cluster of tens of nodes.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// Default [`RefreshConfig::jitter`]: ±3 s, a uniform ±10 % of the interval, so a cluster
/// booted together does not refresh in lockstep (every node fetching at the same instant
/// would also find every peer busy answering at that instant).
pub const DEFAULT_REFRESH_JITTER: Duration = Duration::from_secs(3);

/// Default [`RefreshConfig::fanout`]: 2 peers asked per round. One would spread news along
/// a chain; two make it spread geometrically while keeping a round's cost constant per
/// node, whatever the cluster's size.
pub const DEFAULT_REFRESH_FANOUT: usize = 2;

/// Default [`RefreshConfig::max_in_flight`]: 8 fetches outstanding. A fetch to a peer that
/// never answers lasts up to the exchange's own deadlines (31 s by default), longer than a
/// round, so a round can start while earlier fetches linger; 8 leaves room for four rounds
/// of silent peers before rounds ask fewer than [`DEFAULT_REFRESH_FANOUT`].
pub const DEFAULT_MAX_REFRESH_IN_FLIGHT: usize = 8;

/// Default [`RefreshConfig::fetch_timeout`]: 40 s.
///
/// The exchange bounds itself (dial [`DEFAULT_DIAL_TIMEOUT`](crate::client::DEFAULT_DIAL_TIMEOUT) 1 s + request
/// [`DEFAULT_REQUEST_TIMEOUT`](crate::client::DEFAULT_REQUEST_TIMEOUT) 30 s = 31 s with the client's defaults), so with default
/// deadlines this never fires before the exchange ends on its own. It is the refresh's
/// safety net for a fetch whose ending the driver never reports: without it, such a fetch
/// would hold its in-flight slot (and keep its address from being asked) forever.
pub const DEFAULT_REFRESH_FETCH_TIMEOUT: Duration = Duration::from_secs(40);

/// Largest [`RefreshConfig::fanout`]: 16. A larger round is a broadcast, not a gossip
/// round, and every answer may be up to [`MAX_ROSTER_BYTES`](super::MAX_ROSTER_BYTES) (2 MiB): 16 bounds one round
/// to 32 MiB of roster bodies at worst.
pub const MAX_REFRESH_FANOUT: usize = 16;

/// Largest [`RefreshConfig::max_in_flight`]: 64 fetches, 128 MiB of roster bodies at worst
/// (64 × [`MAX_ROSTER_BYTES`](super::MAX_ROSTER_BYTES)); also the bound on the machine's in-flight table and event
/// queue.
pub const MAX_REFRESH_IN_FLIGHT: usize = 64;

/// Most [`RefreshConfig::seeds`]: 256. A seed list names a handful of bootstrap addresses
/// (a DNS name's records, a static list); 256 is far beyond any real list and bounds the
/// configuration's memory.
pub const MAX_REFRESH_SEEDS: usize = 256;

/// Longest [`RefreshConfig::interval`]: one day. A slower refresh no longer refreshes
/// anything, and the bound keeps the jitter arithmetic within 64-bit nanoseconds.
pub const MAX_REFRESH_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// How a [`Refresh`] paces its rounds and whom it may ask. `Default` has no seeds (a node
/// that is only ever called learns its peers from its callers); set [`seeds`](Self::seeds)
/// for a node that must find the cluster itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefreshConfig {
    /// Mean time between rounds (default [`DEFAULT_REFRESH_INTERVAL`], at most
    /// [`MAX_REFRESH_INTERVAL`]).
    pub interval: Duration,
    /// Each next round is due `interval ± jitter` after the round that scheduled it,
    /// uniformly (default [`DEFAULT_REFRESH_JITTER`]); strictly below `interval`, so a
    /// round is never due at the instant it is scheduled.
    pub jitter: Duration,
    /// Peers asked per round (default [`DEFAULT_REFRESH_FANOUT`], 1 to
    /// [`MAX_REFRESH_FANOUT`], at most `max_in_flight`).
    pub fanout: usize,
    /// Addresses (`host:port`) asked in the first round and in every round while the
    /// table knows no member but us: DNS and seed lists hand out addresses, never ids. At
    /// most [`MAX_REFRESH_SEEDS`], each non-empty and at most [`MAX_ADDR_LEN`] bytes. The
    /// node's own address may be listed (one list shared by the whole cluster); it is never
    /// asked.
    pub seeds: Vec<String>,
    /// Most fetches outstanding at once (default [`DEFAULT_MAX_REFRESH_IN_FLIGHT`], 1 to
    /// [`MAX_REFRESH_IN_FLIGHT`]); a round asks fewer than `fanout` peers when too many
    /// earlier fetches are still outstanding.
    pub max_in_flight: usize,
    /// A fetch whose ending the driver has not reported this long after the round that
    /// asked for it is abandoned ([`RefreshEvent::Cancel`]) and its slot freed (default
    /// [`DEFAULT_REFRESH_FETCH_TIMEOUT`]).
    pub fetch_timeout: Duration,
}

impl Default for RefreshConfig {
    fn default() -> Self {
        RefreshConfig {
            interval: DEFAULT_REFRESH_INTERVAL,
            jitter: DEFAULT_REFRESH_JITTER,
            fanout: DEFAULT_REFRESH_FANOUT,
            seeds: Vec::new(),
            max_in_flight: DEFAULT_MAX_REFRESH_IN_FLIGHT,
            fetch_timeout: DEFAULT_REFRESH_FETCH_TIMEOUT,
        }
    }
}

/// A [`RefreshConfig`] field out of range (local misuse, found by [`Refresh::new`]). Every
/// variant names its field ([`RefreshConfigError::field`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RefreshConfigError {
    /// A duration or count that must be positive is zero.
    #[error("refresh config `{field}` is zero: {why}")]
    Zero {
        /// The offending field.
        field: &'static str,
        /// What a zero would do.
        why: &'static str,
    },
    /// A count is above its bound.
    #[error("refresh config `{field}` is {value}, above the bound of {max}")]
    TooMany {
        /// The offending field.
        field: &'static str,
        /// The value given.
        value: usize,
        /// The bound.
        max: usize,
    },
    /// `interval` is above [`MAX_REFRESH_INTERVAL`].
    #[error("refresh config `interval` {value:?} is above {MAX_REFRESH_INTERVAL:?}")]
    IntervalTooLong {
        /// The value given.
        value: Duration,
    },
    /// `jitter` is not below `interval`: a round could be due the instant it is scheduled.
    #[error("refresh config `jitter` {jitter:?} must be below `interval` {interval:?}")]
    JitterNotBelowInterval {
        /// The jitter given.
        jitter: Duration,
        /// The interval given.
        interval: Duration,
    },
    /// `fanout` is above `max_in_flight`: no round could ever ask that many peers.
    #[error("refresh config `fanout` {fanout} is above `max_in_flight` {max_in_flight}")]
    FanoutAboveInFlight {
        /// The fanout given.
        fanout: usize,
        /// The in-flight bound given.
        max_in_flight: usize,
    },
    /// A seed address is empty or too long.
    #[error("refresh config `seeds[{index}]`: {problem}")]
    Seed {
        /// Position in `seeds`.
        index: usize,
        /// What is wrong with it ([`MemberProblem::EmptyAddr`] or
        /// [`MemberProblem::AddrTooLong`]).
        problem: MemberProblem,
    },
}

impl RefreshConfigError {
    /// The [`RefreshConfig`] field at fault (`"seeds"` for a bad seed).
    pub fn field(&self) -> &'static str {
        match self {
            RefreshConfigError::Zero { field, .. } | RefreshConfigError::TooMany { field, .. } => {
                field
            }
            RefreshConfigError::IntervalTooLong { .. } => "interval",
            RefreshConfigError::JitterNotBelowInterval { .. } => "jitter",
            RefreshConfigError::FanoutAboveInFlight { .. } => "fanout",
            RefreshConfigError::Seed { .. } => "seeds",
        }
    }
}

impl RefreshConfig {
    /// Checks every bound; [`Refresh::new`] calls this.
    pub fn validate(&self) -> Result<(), RefreshConfigError> {
        use RefreshConfigError::*;
        if self.interval.is_zero() {
            return Err(Zero {
                field: "interval",
                why: "rounds would be due continuously",
            });
        }
        if self.interval > MAX_REFRESH_INTERVAL {
            return Err(IntervalTooLong {
                value: self.interval,
            });
        }
        if self.jitter >= self.interval {
            return Err(JitterNotBelowInterval {
                jitter: self.jitter,
                interval: self.interval,
            });
        }
        if self.fanout == 0 {
            return Err(Zero {
                field: "fanout",
                why: "no round would ask anyone",
            });
        }
        if self.fanout > MAX_REFRESH_FANOUT {
            return Err(TooMany {
                field: "fanout",
                value: self.fanout,
                max: MAX_REFRESH_FANOUT,
            });
        }
        if self.max_in_flight == 0 {
            return Err(Zero {
                field: "max_in_flight",
                why: "no fetch could ever start",
            });
        }
        if self.max_in_flight > MAX_REFRESH_IN_FLIGHT {
            return Err(TooMany {
                field: "max_in_flight",
                value: self.max_in_flight,
                max: MAX_REFRESH_IN_FLIGHT,
            });
        }
        if self.fanout > self.max_in_flight {
            return Err(FanoutAboveInFlight {
                fanout: self.fanout,
                max_in_flight: self.max_in_flight,
            });
        }
        if self.fetch_timeout.is_zero() {
            return Err(Zero {
                field: "fetch_timeout",
                why: "every fetch would be abandoned as it starts",
            });
        }
        if self.seeds.len() > MAX_REFRESH_SEEDS {
            return Err(TooMany {
                field: "seeds",
                value: self.seeds.len(),
                max: MAX_REFRESH_SEEDS,
            });
        }
        for (index, seed) in self.seeds.iter().enumerate() {
            let problem = if seed.is_empty() {
                MemberProblem::EmptyAddr
            } else if seed.len() > MAX_ADDR_LEN {
                MemberProblem::AddrTooLong
            } else {
                continue;
            };
            return Err(Seed { index, problem });
        }
        Ok(())
    }
}

/// The refresh's timer kinds (the reason of [`Refresh::poll_timeout`]'s deadline).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefreshTimer {
    /// The next round is due.
    Round,
    /// A fetch reaches [`RefreshConfig::fetch_timeout`] unanswered.
    Fetch,
}

/// What the refresh asks of the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefreshEvent {
    /// Fetch the roster at `addr`: run an [`Exchange`](crate::client::Exchange) with
    /// [`ExchangeRequest::roster`](crate::client::ExchangeRequest::roster)`(addr,
    /// Some(Caller { id, addr }))` naming this node ([`Membership::me`]), its breaker permit
    /// taken on the roster path ([`BreakerPath::Roster`](crate::client::BreakerPath::Roster):
    /// never refused, outcome still recorded). Report its ending with
    /// [`Refresh::handle_answer`].
    Fetch {
        /// The address to ask.
        addr: String,
        /// The id the table lists at `addr` (whose breaker the fetch's outcome is
        /// recorded against); `None` for a seed, known only by its address (it has no id,
        /// and so no breaker entry, until it answers).
        member: Option<String>,
    },
    /// Stop the fetch to `addr` (cancel its exchange): it was abandoned at its
    /// [`RefreshConfig::fetch_timeout`], or the refresh was cancelled. Its ending, if still
    /// reported, is ignored.
    Cancel {
        /// The address of the abandoned fetch.
        addr: String,
    },
}

/// What [`Refresh::handle_answer`] did with a fetch's ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerOutcome {
    /// The fetch returned a roster, merged into the table.
    Merged(MergeReport),
    /// The fetch ended without a roster (failure, refusal, cancellation, or a block
    /// ending that a roster fetch cannot produce); only its in-flight mark was cleared.
    Failed,
    /// No fetch to that address is in flight (never asked, already answered, abandoned,
    /// or the refresh was cancelled): nothing changed.
    Ignored,
}

/// Counters since construction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefreshStats {
    /// Rounds run.
    pub rounds: u64,
    /// Fetches asked for ([`RefreshEvent::Fetch`]).
    pub fetches: u64,
    /// Fetches whose roster was merged.
    pub merged: u64,
    /// Fetches that ended without a roster.
    pub failed: u64,
    /// Fetches abandoned at their timeout or by [`Refresh::cancel`].
    pub abandoned: u64,
}

#[derive(Clone, Debug)]
struct InFlight {
    addr: String,
    deadline: Instant,
}

/// A candidate target of a round.
struct Target {
    addr: String,
    member: Option<String>,
}

/// The sans-IO roster refresh: decides when this node exchanges membership and with whom
/// (peer-transport §3.7), so a driver only runs the fetches it is told to run.
///
/// # Rules
///
/// - **Rounds.** The first round is due at construction's `now`; each round schedules the
///   next at its own `now + interval ± jitter` (uniform), so a cluster booted together
///   drifts apart instead of refreshing in lockstep, and a driver that wakes late does not
///   get a burst of catch-up rounds.
/// - **Targets.** A round asks up to `fanout` addresses, fewer if `max_in_flight` fetches
///   would be exceeded. In the first round, and whenever the table lists no member but
///   this node, it asks seeds; otherwise members of the table. A round whose seeds are all
///   ineligible asks members instead. Targets are chosen uniformly at random without
///   replacement by the machine's own seeded generator, over the seeds in configuration
///   order or the members in id order: same seed, same inputs, same targets.
/// - **Never ourselves, never twice.** An address equal to this node's own
///   ([`Membership::me`]) is never asked (a seed list shared by the cluster lists every
///   node), nor a member with our id, nor an address whose fetch is still in flight.
/// - **Answers.** A roster answer is merged with [`Membership::merge_from`] (the fetched
///   address as the learning source), credited first-hand
///   to the responder's `X-DART-Node` id (an answer without one is all hearsay); a member
///   learned this way is a target of later rounds. Any ending clears the address's
///   in-flight mark. Discovery bypasses breaker admission (there is no other source of
///   membership, and a cluster booting together would otherwise stall behind circuits
///   opened by dials to peers not yet listening) but the driver still records the
///   outcome.
///
/// # Driving contract
///
/// The contract every core machine follows (`docs/architecture.md`), with the table as an
/// extra argument where a decision reads or changes it:
///
/// - Inputs: [`handle_timeout`](Self::handle_timeout)`(now, &membership)`,
///   [`handle_answer`](Self::handle_answer)`(now, addr, &ending, &mut membership)` and
///   [`cancel`](Self::cancel)`(now)`. After each (and after construction) drain
///   [`poll_event`](Self::poll_event) until `None`, then arm a timer for
///   [`poll_timeout`](Self::poll_timeout).
/// - Fetches: answer every [`RefreshEvent::Fetch`] exactly once with `handle_answer`, with
///   the exchange's [`Ending`] (`&outcome.ending`), unless a [`RefreshEvent::Cancel`] for
///   that address came first; late, repeated or unknown answers are ignored. A driver that
///   verifies a roster's signatures on threads of its own answers with
///   [`handle_verified_answer`](Self::handle_verified_answer) instead (the same rules).
///   A fetch never
///   answered is abandoned at its `fetch_timeout` ([`RefreshTimer::Fetch`], then a
///   `Cancel`).
/// - Time: `handle_timeout(now, ..)` at or after the `poll_timeout` deadline; a spurious
///   or early call is harmless. `poll_timeout` gives the earliest of the next round and
///   the fetch deadlines, with its reason ([`RefreshTimer`]); after `handle_timeout(now)`
///   it is never at or before `now`. Time must not go backwards; an earlier `now` is
///   clamped to the latest seen (it never panics).
/// - End of life: a refresh runs until [`cancel`](Self::cancel)led. `cancel(now)` drops the
///   schedule and emits a `Cancel` for every fetch in flight; it is idempotent and
///   non-consuming. [`is_finished`](Self::is_finished) is true once it was cancelled and
///   those events were drained; from then on every input is ignored and `poll_timeout` is
///   `None`.
/// - Bounds: at most `max_in_flight` fetches outstanding, and at most twice that many
///   events queued (a `Fetch` abandoned before the driver polled it is withdrawn rather
///   than followed by a `Cancel`).
/// - Randomness: the machine owns two ChaCha8 streams derived from the seed given to
///   [`Refresh::new`] with [`child_seed`] (`"targets"`, `"jitter"`), so target choices do
///   not depend on how many jitter draws came before.
#[derive(Clone, Debug)]
pub struct Refresh {
    config: RefreshConfig,
    targets: ChaCha8Rng,
    jitter: ChaCha8Rng,
    now: Instant,
    /// When the next round is due; `None` once cancelled.
    next_round: Option<Instant>,
    in_flight: Vec<InFlight>,
    events: VecDeque<RefreshEvent>,
    stats: RefreshStats,
}

impl Refresh {
    /// A refresh starting at `now` (its first round due then), its choices drawn from
    /// streams derived from `seed`.
    ///
    /// Fails only if `config` is out of range ([`RefreshConfig::validate`]).
    pub fn new(now: Instant, config: RefreshConfig, seed: u64) -> Result<Self, RefreshConfigError> {
        config.validate()?;
        Ok(Refresh {
            targets: seeded(child_seed(seed, "targets")),
            jitter: seeded(child_seed(seed, "jitter")),
            now,
            next_round: Some(now),
            in_flight: Vec::with_capacity(config.max_in_flight),
            events: VecDeque::new(),
            stats: RefreshStats::default(),
            config,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &RefreshConfig {
        &self.config
    }

    /// Counters so far.
    pub fn stats(&self) -> RefreshStats {
        self.stats
    }

    /// Fetches asked for and not yet answered or abandoned (at most `max_in_flight`).
    pub fn fetches_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether a fetch to `addr` is in flight.
    pub fn is_in_flight(&self, addr: &str) -> bool {
        self.in_flight.iter().any(|f| f.addr == addr)
    }

    /// Whether the refresh was cancelled and every event it queued has been polled: it
    /// ignores every input from now on.
    pub fn is_finished(&self) -> bool {
        self.next_round.is_none() && self.events.is_empty()
    }

    fn clock(&mut self, now: Instant) -> Instant {
        if now > self.now {
            self.now = now;
        }
        self.now
    }

    /// The earliest deadline: the next round ([`RefreshTimer::Round`]) or a fetch's
    /// timeout ([`RefreshTimer::Fetch`]); a fetch deadline wins a tie. `None` once
    /// cancelled.
    pub fn poll_timeout(&self) -> Option<Deadline<RefreshTimer>> {
        let round = self.next_round?;
        let fetch = self.in_flight.iter().map(|f| f.deadline).min();
        Some(match fetch {
            Some(at) if at <= round => Deadline {
                at,
                timer: RefreshTimer::Fetch,
            },
            _ => Deadline {
                at: round,
                timer: RefreshTimer::Round,
            },
        })
    }

    /// The next request to the driver, if any. Drain until `None` after every input.
    pub fn poll_event(&mut self) -> Option<RefreshEvent> {
        self.events.pop_front()
    }

    /// Processes every deadline that has passed by `now`: abandons fetches past their
    /// timeout, then, if a round is due, picks its targets from `membership` (read only)
    /// and schedules the next round. Harmless when nothing is due or after cancel.
    pub fn handle_timeout(&mut self, now: Instant, membership: &Membership) {
        let now = self.clock(now);
        let Some(due) = self.next_round else {
            return;
        };
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].deadline <= now {
                let fetch = self.in_flight.remove(i);
                self.abandon(fetch.addr);
            } else {
                i += 1;
            }
        }
        if due <= now {
            self.round(now, membership);
            self.next_round = Some(self.next_round_after(now));
        }
    }

    /// The ending of the fetch to `addr` (the exchange's [`Ending`]): a roster is merged
    /// into `membership` at `now`, credited first-hand to the responder's id; any ending
    /// clears the in-flight mark. An address with no fetch in flight is ignored.
    pub fn handle_answer(
        &mut self,
        now: Instant,
        addr: &str,
        ending: &Ending,
        membership: &mut Membership,
    ) -> AnswerOutcome {
        self.answer(now, addr, ending, membership, None)
    }

    /// As [`handle_answer`](Self::handle_answer), with the roster's signature checks
    /// already run by the driver: `verified` holds the results of
    /// [`Membership::plan_checks`]`(now, addr, &roster)` verified ([`Checks::verify`],
    /// one [`Verified`] per part of [`Checks::split`]), handed to
    /// [`Membership::merge_verified`]. This lets a driver verify a large roster on
    /// threads of its own without holding the membership meanwhile. The rules are the
    /// same; a record the results do not cover is checked in the merge.
    ///
    /// [`Checks::verify`]: super::Checks::verify
    /// [`Checks::split`]: super::Checks::split
    pub fn handle_verified_answer(
        &mut self,
        now: Instant,
        addr: &str,
        ending: &Ending,
        membership: &mut Membership,
        verified: Vec<Verified>,
    ) -> AnswerOutcome {
        self.answer(now, addr, ending, membership, Some(verified))
    }

    fn answer(
        &mut self,
        now: Instant,
        addr: &str,
        ending: &Ending,
        membership: &mut Membership,
        verified: Option<Vec<Verified>>,
    ) -> AnswerOutcome {
        let now = self.clock(now);
        let Some(pos) = self.in_flight.iter().position(|f| f.addr == addr) else {
            return AnswerOutcome::Ignored;
        };
        self.in_flight.remove(pos);
        match ending {
            Ending::Roster(answer) => {
                // No member has an empty id (`RosterMember::check`), so an answer without
                // a responder id credits nobody first-hand: all of it is hearsay.
                let responder = answer.responder.as_deref().unwrap_or("");
                self.stats.merged += 1;
                AnswerOutcome::Merged(match verified {
                    Some(v) => membership.merge_verified(now, addr, responder, &answer.roster, v),
                    None => membership.merge_from(now, addr, responder, &answer.roster),
                })
            }
            _ => {
                self.stats.failed += 1;
                AnswerOutcome::Failed
            }
        }
    }

    /// Ends the refresh: no further round, and a [`RefreshEvent::Cancel`] for every fetch in
    /// flight (drain [`poll_event`](Self::poll_event) as after any input). Idempotent.
    pub fn cancel(&mut self, now: Instant) {
        self.clock(now);
        if self.next_round.take().is_none() {
            return;
        }
        for fetch in std::mem::take(&mut self.in_flight) {
            self.abandon(fetch.addr);
        }
    }

    /// Stops tracking the fetch to `addr`: withdraws its `Fetch` if the driver has not
    /// polled it yet, else tells the driver to cancel it.
    fn abandon(&mut self, addr: String) {
        self.stats.abandoned += 1;
        let queued = self
            .events
            .iter()
            .position(|e| matches!(e, RefreshEvent::Fetch { addr: a, .. } if *a == addr));
        match queued {
            Some(pos) => {
                self.events.remove(pos);
            }
            None => self.events.push_back(RefreshEvent::Cancel { addr }),
        }
    }

    fn round(&mut self, now: Instant, membership: &Membership) {
        self.stats.rounds += 1;
        let first = self.stats.rounds == 1;
        let room = self.config.max_in_flight - self.in_flight.len();
        let want = self.config.fanout.min(room);
        if want == 0 {
            return;
        }
        let me = membership.me();
        let mut pool: Vec<Target> = Vec::new();
        if first || membership.is_empty() {
            pool.extend(
                self.config
                    .seeds
                    .iter()
                    .filter(|s| **s != me.addr && !self.is_in_flight(s))
                    .map(|s| Target {
                        addr: s.clone(),
                        member: None,
                    }),
            );
        }
        if pool.is_empty() {
            pool.extend(
                membership
                    .snapshot()
                    .members
                    .into_iter()
                    .filter(|m| m.id != me.id && m.addr != me.addr && !self.is_in_flight(&m.addr))
                    .map(|m| Target {
                        addr: m.addr,
                        member: Some(m.id),
                    }),
            );
        }
        // Partial Fisher-Yates: the first `picked` slots hold a uniform sample without
        // replacement. An address listed twice (a duplicated seed, two ids at one
        // address) is skipped once it is in flight.
        let mut picked = 0;
        let mut next = 0;
        while picked < want && next < pool.len() {
            let j = next + index_from_draw(self.targets.next_u64(), pool.len() - next);
            pool.swap(next, j);
            next += 1;
            let target = &pool[next - 1];
            if self.is_in_flight(&target.addr) {
                continue;
            }
            self.in_flight.push(InFlight {
                addr: target.addr.clone(),
                deadline: now + self.config.fetch_timeout,
            });
            self.events.push_back(RefreshEvent::Fetch {
                addr: target.addr.clone(),
                member: target.member.clone(),
            });
            self.stats.fetches += 1;
            picked += 1;
        }
    }

    /// `now + interval - jitter + U[0, 2 jitter]`, strictly after `now` (jitter < interval).
    fn next_round_after(&mut self, now: Instant) -> Instant {
        // Both fit u64 nanoseconds: interval is at most a day, jitter below it.
        let jitter = self.config.jitter.as_nanos() as u64;
        let span = 2 * jitter + 1;
        let offset = ((u128::from(self.jitter.next_u64()) * u128::from(span)) >> 64) as u64;
        now + (self.config.interval - self.config.jitter) + Duration::from_nanos(offset)
    }
}

/// A uniform index in `0..n` (n > 0) from a 64-bit draw (Lemire's multiply-shift, bias
/// below n / 2^64).
fn index_from_draw(draw: u64, n: usize) -> usize {
    ((u128::from(draw) * n as u128) >> 64) as usize
}
