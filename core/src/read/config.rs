//! Read configuration: the reference defaults, named, and validated once.

use crate::placement::DEFAULT_CLOSE_GROUP_SIZE;
use crate::refusal::{DEFAULT_MAX_RETRY_AFTER, DEFAULT_REFUSED_COOLDOWN};
use crate::time::Duration;

use super::choice::Spread;

/// Hedge delay: a first GET with no answer after this long gets a second GET alongside
/// it. The reference's 1 s: long past a healthy peer's answer, short next to a stuck one.
pub const DEFAULT_HEDGE_DELAY: Duration = Duration::from_secs(1);

/// The pause before a retry round, and the least a refusal wait lasts (the reference's
/// "usual 1 s"): gives discovery and peers a moment to change before asking again.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_secs(1);

/// How many times a read waits out refusing possible holders before reporting
/// [`Busy`](super::ReadOutcome::Busy): 3 waits, 45 s with the 15 s refusal cooldown.
pub const DEFAULT_MAX_REFUSAL_WAITS: u32 = 3;

/// Retry rounds when nothing was proven and nobody was refusing: the reference's single
/// 1 s retry before giving up.
pub const DEFAULT_MAX_PLAIN_RETRIES: u32 = 1;

/// How long one GET may go unanswered before the read abandons it. The driver's client
/// exchange normally reports a failure sooner; this bounds the read even if it never does.
/// 10 s is the reference's channel-open timeout.
pub const DEFAULT_GET_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a lookup may run before the read proceeds with the peers it knows.
pub const DEFAULT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the origin fetch may take before the read reports the peers' outcome.
pub const DEFAULT_ORIGIN_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many GETs of one read are in flight at once: the first and one hedge. A
/// hot record read by many clients must not multiply its load by more than two.
pub const MAX_GETS_IN_FLIGHT: usize = 2;

/// Most candidates one read keeps (the nearest win). A lookup returns about a close group
/// plus a few; 32 leaves room for several rounds of churn while bounding the per-read work
/// and memory whatever a discovery layer or a hostile peer returns.
pub const MAX_CANDIDATES: usize = 32;

/// Largest accepted `close_group_size`: must fit well inside [`MAX_CANDIDATES`] so a read
/// can still see peers beyond the group.
pub const MAX_CLOSE_GROUP_SIZE: usize = 16;

/// Upper bound on `max_refusal_waits`: each wait can last a refusal cooldown, so this
/// bounds a read's lifetime.
pub const MAX_REFUSAL_WAITS_LIMIT: u32 = 16;

/// Upper bound on `max_plain_retries`, for the same reason.
pub const MAX_PLAIN_RETRIES_LIMIT: u32 = 16;

/// Upper bound on `refused_cooldown` and `max_retry_after`: 5 minutes, twenty times the
/// reference's 15 s. Each refusal wait can last this long, so with
/// [`MAX_REFUSAL_WAITS_LIMIT`] waits it bounds how long a read can wait out refusals.
pub const MAX_REFUSAL_COOLDOWN: Duration = Duration::from_secs(300);

/// When the single GET in flight gets a second GET alongside it (the hedge).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HedgeRule {
    /// peerblock's rule: hedge a GET only if it showed no progress (no
    /// [`Read::handle_get_progress`](super::Read::handle_get_progress): no response head,
    /// no body bytes) within `hedge_delay`. A GET whose bytes are flowing is not hedged
    /// however long its body takes; a body that stalls later is the GET deadline's (and
    /// the client exchange's) business. A driver that never reports progress gets the
    /// reference's behaviour.
    #[default]
    OnSilence,
    /// The reference client's rule, kept so the simulator can replay it: hedge a GET still
    /// unanswered after `hedge_delay`, whatever its progress. A large block that takes
    /// longer than the delay to arrive is hedged although its bytes are flowing.
    AfterDelay,
}

/// Which `NotFound` answers prove a record absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Absence {
    /// peerblock's rule: the nearest `close_group_size` known peers all answered
    /// `NotFound`. A nearer peer that failed, timed out or was skipped may be an unreachable
    /// holder, so it blocks absence and the read ends `Unavailable` instead.
    #[default]
    NearestCloseGroup,
    /// The reference client's rule, kept so the simulator can replay it: any
    /// `close_group_size` distinct peers answering `NotFound` prove absence, even when
    /// they are the peers past a close group of unreachable holders. It reports records
    /// "not found" while their holders are only unreachable; do not use it in a client.
    AnyCloseGroup,
}

/// Rules and timings for one read. `Default` is peerblock's behaviour: the reference's
/// timings and counts, with peerblock's absence rule ([`Absence::NearestCloseGroup`]) and
/// hedge rule ([`HedgeRule::OnSilence`]); each field names the reference's value where it
/// differs.
#[derive(Clone, Debug)]
pub struct ReadConfig {
    /// Peers that hold a record; also how many `NotFound`s prove absence (default 7).
    pub close_group_size: usize,
    /// Delay before the hedge GET (default 1 s). See also [`super::HedgeEstimator`].
    pub hedge_delay: Duration,
    /// Which GETs are hedged after `hedge_delay` (default [`HedgeRule::OnSilence`]; the
    /// reference's is [`HedgeRule::AfterDelay`]).
    pub hedge: HedgeRule,
    /// Delay before a retry round and the least a refusal wait lasts (default 1 s).
    pub retry_delay: Duration,
    /// Refusal waits before [`Busy`](super::ReadOutcome::Busy) (default 3).
    pub max_refusal_waits: u32,
    /// How long this read skips a peer that answered a GET with a refusal carrying no
    /// `Retry-After` (default [`DEFAULT_REFUSED_COOLDOWN`], 15 s; at most
    /// [`MAX_REFUSAL_COOLDOWN`]). Use the same value as the driver's cooldown table.
    pub refused_cooldown: Duration,
    /// The cap on a peer's `Retry-After` when this read skips it after a refusal (default
    /// [`DEFAULT_MAX_RETRY_AFTER`], the one 15 s cap; at most [`MAX_REFUSAL_COOLDOWN`]).
    /// Use the same value as the client's `max_refusal_cooldown` and the cooldown table.
    pub max_retry_after: Duration,
    /// Retry rounds when nobody refused (default 1).
    pub max_plain_retries: u32,
    /// How first reads choose within the close group (default [`Spread::Uniform`]).
    pub spread: Spread,
    /// Abandon a GET unanswered for this long (default 10 s).
    pub get_timeout: Duration,
    /// Proceed without the lookup after this long (default 10 s).
    pub lookup_timeout: Duration,
    /// Which `NotFound` answers prove absence (default [`Absence::NearestCloseGroup`]).
    pub absence: Absence,
    /// Whether a read that peers cannot serve ends by fetching from the origin.
    pub origin: bool,
    /// Abandon the origin fetch after this long (default 10 s).
    pub origin_timeout: Duration,
}

impl Default for ReadConfig {
    fn default() -> Self {
        ReadConfig {
            close_group_size: DEFAULT_CLOSE_GROUP_SIZE,
            hedge_delay: DEFAULT_HEDGE_DELAY,
            hedge: HedgeRule::OnSilence,
            retry_delay: DEFAULT_RETRY_DELAY,
            max_refusal_waits: DEFAULT_MAX_REFUSAL_WAITS,
            refused_cooldown: DEFAULT_REFUSED_COOLDOWN,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            max_plain_retries: DEFAULT_MAX_PLAIN_RETRIES,
            spread: Spread::Uniform,
            get_timeout: DEFAULT_GET_TIMEOUT,
            lookup_timeout: DEFAULT_LOOKUP_TIMEOUT,
            absence: Absence::NearestCloseGroup,
            origin: false,
            origin_timeout: DEFAULT_ORIGIN_TIMEOUT,
        }
    }
}

/// A [`ReadConfig`] field the integrator set out of range (local misuse).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadConfigError {
    /// `close_group_size` was 0 or above [`MAX_CLOSE_GROUP_SIZE`].
    #[error("read config: close_group_size {0} must be in 1..={MAX_CLOSE_GROUP_SIZE}")]
    CloseGroupSize(usize),
    /// A timeout that must be positive was zero (the named field).
    #[error("read config: {0} must be greater than zero")]
    ZeroDuration(&'static str),
    /// `max_refusal_waits` was above [`MAX_REFUSAL_WAITS_LIMIT`].
    #[error("read config: max_refusal_waits {0} exceeds {MAX_REFUSAL_WAITS_LIMIT}")]
    TooManyRefusalWaits(u32),
    /// `refused_cooldown` or `max_retry_after` (the named field) was above
    /// [`MAX_REFUSAL_COOLDOWN`].
    #[error("read config: {field} {value:?} exceeds {MAX_REFUSAL_COOLDOWN:?}")]
    RefusalCooldownTooLong {
        /// The field.
        field: &'static str,
        /// The value given.
        value: Duration,
    },
    /// `max_plain_retries` was above [`MAX_PLAIN_RETRIES_LIMIT`].
    #[error("read config: max_plain_retries {0} exceeds {MAX_PLAIN_RETRIES_LIMIT}")]
    TooManyRetries(u32),
}

impl ReadConfig {
    /// Checks every bound; `Read::new` calls this.
    pub fn validate(&self) -> Result<(), ReadConfigError> {
        if self.close_group_size == 0 || self.close_group_size > MAX_CLOSE_GROUP_SIZE {
            return Err(ReadConfigError::CloseGroupSize(self.close_group_size));
        }
        for (name, d) in [
            ("hedge_delay", self.hedge_delay),
            ("get_timeout", self.get_timeout),
            ("lookup_timeout", self.lookup_timeout),
            ("origin_timeout", self.origin_timeout),
            ("refused_cooldown", self.refused_cooldown),
            ("max_retry_after", self.max_retry_after),
        ] {
            if d.is_zero() {
                return Err(ReadConfigError::ZeroDuration(name));
            }
        }
        for (field, value) in [
            ("refused_cooldown", self.refused_cooldown),
            ("max_retry_after", self.max_retry_after),
        ] {
            if value > MAX_REFUSAL_COOLDOWN {
                return Err(ReadConfigError::RefusalCooldownTooLong { field, value });
            }
        }
        if self.max_refusal_waits > MAX_REFUSAL_WAITS_LIMIT {
            return Err(ReadConfigError::TooManyRefusalWaits(self.max_refusal_waits));
        }
        if self.max_plain_retries > MAX_PLAIN_RETRIES_LIMIT {
            return Err(ReadConfigError::TooManyRetries(self.max_plain_retries));
        }
        Ok(())
    }
}
