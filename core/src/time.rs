//! The injected clock.
//!
//! Core never reads a clock. Every input that depends on time carries a `now: Instant`
//! chosen by the driver (a real driver maps its monotonic clock onto it; the simulator
//! uses virtual time), so a machine's behaviour is a pure function of its inputs.
//!
//! [`Instant`] is a count of nanoseconds since an epoch the driver picks (typically the
//! moment the driver started). 2^64 ns is about 584 years, so arithmetic saturates
//! instead of wrapping or panicking: a deadline "at the end of time" is a valid value,
//! never a crash. Durations are `core::time::Duration`, re-exported here.
//!
//! Core's [`Instant`] has the same name as `std::time::Instant` but is not the same type:
//! a driver that imports this one writes the std one in full (`std::time::Instant::now()`,
//! as the examples in `core/examples/` do) and converts with [`Clock::to_core`] /
//! [`Clock::to_std`]; the compiler refuses any mix-up.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

pub use core::time::Duration;

/// A point on the driver's monotonic timeline, in nanoseconds since the driver's epoch.
///
/// Drivers must never hand a machine an `Instant` earlier than one it has already seen;
/// every machine in core documents what it does if they do (they clamp, they never panic).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The driver's epoch.
    pub const ZERO: Instant = Instant(0);
    /// The latest representable instant; used as "never" by saturating arithmetic.
    pub const MAX: Instant = Instant(u64::MAX);

    /// An instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// An instant `millis` milliseconds after the epoch (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Instant(millis.saturating_mul(1_000_000))
    }

    /// An instant `secs` seconds after the epoch (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Instant(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from the epoch to `self`.
    pub const fn since_epoch(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// `self + d`, or `None` if that is past [`Instant::MAX`].
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let nanos = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(nanos).map(Instant)
    }

    /// `self + d`, clamped to [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant::MAX)
    }

    /// `self - d`, clamped to [`Instant::ZERO`].
    pub fn saturating_sub(self, d: Duration) -> Instant {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_sub(nanos))
    }

    /// Time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Time from `earlier` to `self`, or `None` if `earlier` is later.
    pub fn checked_duration_since(self, earlier: Instant) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_nanos)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturating: see [`Instant::saturating_add`].
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = self.saturating_add(d);
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    /// Saturating: see [`Instant::saturating_sub`].
    fn sub(self, d: Duration) -> Instant {
        self.saturating_sub(d)
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: see [`Instant::saturating_duration_since`].
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Instant({:?})", self.since_epoch())
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.since_epoch();
        write!(f, "{}.{:09}s", d.as_secs(), d.subsec_nanos())
    }
}

/// The earliest deadline a machine wants to be woken at, and why.
///
/// Every machine's `poll_timeout` returns one of these (`K` is the machine's own timer-kind
/// enum), so a driver can log or count which timer fired. Drivers that only need the
/// instant use [`Deadline::at`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline<K> {
    /// When to call the machine's `handle_timeout`.
    pub at: Instant,
    /// Which timer this is.
    pub timer: K,
}

impl<K> Deadline<K> {
    /// How long a driver at `now` should sleep before this deadline (zero if it is due).
    pub fn wait_from(&self, now: Instant) -> Duration {
        self.at.saturating_duration_since(now)
    }

    /// The same wait as a blocking driver's socket timeout: `Some` of a duration that is
    /// never zero (std's `set_read_timeout` refuses `Some(Duration::ZERO)`), or `None` when
    /// the deadline is due at `now` — call the machine's `handle_timeout(now)` instead of
    /// waiting. (Never hand this `None` to `set_read_timeout`: there it means "block
    /// forever".)
    pub fn timeout_from(&self, now: Instant) -> Option<Duration> {
        let wait = self.wait_from(now);
        (!wait.is_zero()).then_some(wait)
    }
}

/// Maps a driver's monotonic clock onto core's [`Instant`] and back.
///
/// Core never reads a clock; a socket driver reads its own monotonic clock (`std::time::Instant`)
/// and converts each reading here, so every driver maps time the same way. The epoch is the std instant
/// given to [`Clock::new`] (typically when the driver started): core's `Instant::ZERO`.
/// Every machine of one node must share one `Clock` (one epoch), or their instants cannot
/// be compared.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: std::time::Instant,
}

impl Clock {
    /// A clock whose epoch (core's `Instant::ZERO`) is `epoch`.
    pub fn new(epoch: std::time::Instant) -> Self {
        Clock { epoch }
    }

    /// The epoch this clock maps to `Instant::ZERO`.
    pub fn epoch(&self) -> std::time::Instant {
        self.epoch
    }

    /// Core's instant for the std instant `t` (saturating: a `t` before the epoch maps to
    /// `Instant::ZERO`, one past 584 years to `Instant::MAX`).
    pub fn to_core(&self, t: std::time::Instant) -> Instant {
        let since = t.saturating_duration_since(self.epoch);
        Instant::ZERO.saturating_add(since)
    }

    /// The std instant for core's `t` (`None` if the platform cannot represent it, as
    /// for `Instant::MAX`, which means "never").
    pub fn to_std(&self, t: Instant) -> Option<std::time::Instant> {
        self.epoch.checked_add(t.since_epoch())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_from_is_never_zero_and_none_once_the_deadline_is_due() {
        let d = Deadline {
            at: Instant::from_secs(10),
            timer: (),
        };
        assert_eq!(d.timeout_from(Instant::from_secs(10)), None);
        assert_eq!(d.timeout_from(Instant::from_secs(11)), None);
        assert_eq!(
            d.timeout_from(Instant::from_secs(10) - Duration::from_nanos(1)),
            Some(Duration::from_nanos(1))
        );
        assert_eq!(
            d.timeout_from(Instant::from_secs(7)),
            Some(Duration::from_secs(3))
        );
    }

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant::ZERO - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(Instant::ZERO + Duration::MAX, Instant::MAX);
        assert_eq!(
            Instant::from_secs(1) - Instant::from_secs(2),
            Duration::ZERO
        );
        assert_eq!(Instant::from_secs(1).checked_add(Duration::MAX), None);
    }

    #[test]
    fn add_assign_adds_and_saturates() {
        let mut t = Instant::from_secs(1);
        t += Duration::from_millis(500);
        assert_eq!(t, Instant::from_millis(1_500));
        t += Duration::MAX;
        assert_eq!(t, Instant::MAX);
    }

    #[test]
    fn debug_and_display_show_the_time_since_the_epoch() {
        let t = Instant::from_millis(1_500);
        assert_eq!(format!("{t:?}"), "Instant(1.5s)");
        assert_eq!(t.to_string(), "1.500000000s");
    }

    #[test]
    fn units_agree() {
        assert_eq!(Instant::from_secs(2), Instant::from_millis(2_000));
        assert_eq!(Instant::from_millis(3).as_nanos(), 3_000_000);
        assert_eq!(
            Instant::from_secs(5) - Instant::from_millis(1_500),
            Duration::from_millis(3_500)
        );
        assert_eq!(Instant::from_millis(1_500).to_string(), "1.500000000s");
    }

    #[test]
    fn deadline_wait_is_zero_once_due() {
        let d = Deadline {
            at: Instant::from_secs(3),
            timer: (),
        };
        assert_eq!(d.wait_from(Instant::from_secs(1)), Duration::from_secs(2));
        assert_eq!(d.wait_from(Instant::from_secs(4)), Duration::ZERO);
    }
}
