//! The client's three deadlines, as data.
//!
//! There are three bounds, not one, because the failure modes they catch differ by orders
//! of magnitude (peer-transport §3.3):
//!
//! | timer | default | catches | why this value |
//! |---|---|---|---|
//! | [`Timer::Dial`] | [`DEFAULT_DIAL_TIMEOUT`] (1 s) | the peer's machine is gone | a dead host sends no RST; without a bound the dial falls back to the OS SYN retry schedule (minutes). Peers share a cluster: no connection within a second means unusable |
//! | [`Timer::ResponseHeader`] | [`DEFAULT_RESPONSE_HEADER_TIMEOUT`] (10 s) | the host died while our pooled connection to it sat idle: the write succeeds locally and nothing comes back | must stay above a relay's legitimate time to first byte (it may have to reach its own parent or the origin first) |
//! | [`Timer::Request`] | [`DEFAULT_REQUEST_TIMEOUT`] (30 s) | a slow but live transfer | bounds the whole exchange, body included |
//!
//! plus [`Timer::Caller`], the caller's own deadline if it has one. A disabled request
//! timeout ([`RequestTimeout::Caller`], the reference's "negative") defers entirely to it.

use crate::time::{Duration, Instant};

/// Default dial deadline: 1 s (see the module table).
pub const DEFAULT_DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// Default response-header deadline: 10 s (see the module table).
pub const DEFAULT_RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default whole-request deadline: 30 s (see the module table).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The whole-request bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestTimeout {
    /// The exchange fails (soft) this long after it started, dial included.
    After(Duration),
    /// No bound of our own: only the caller's deadline (if any) ends the exchange, and it
    /// ends as a cancellation. The reference's "negative timeout".
    Caller,
}

/// The three deadlines of one exchange. [`Deadlines::default`] gives the reference values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// From start until the driver reports the connection established.
    pub dial: Duration,
    /// From the request handed to the driver until the response head is complete.
    pub response_header: Duration,
    /// From start until the exchange ends.
    pub request: RequestTimeout,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            dial: DEFAULT_DIAL_TIMEOUT,
            response_header: DEFAULT_RESPONSE_HEADER_TIMEOUT,
            request: RequestTimeout::After(DEFAULT_REQUEST_TIMEOUT),
        }
    }
}

/// A deadline configuration that could never let an exchange succeed. Local
/// misconfiguration, named by field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeadlineError {
    /// A deadline of zero would fail every exchange at once.
    #[error("client deadline `{field}` is zero: every exchange would fail immediately")]
    Zero {
        /// The offending field.
        field: &'static str,
    },
}

impl Deadlines {
    /// Checks that every enabled deadline is non-zero.
    pub fn validate(&self) -> Result<(), DeadlineError> {
        if self.dial.is_zero() {
            return Err(DeadlineError::Zero { field: "dial" });
        }
        if self.response_header.is_zero() {
            return Err(DeadlineError::Zero {
                field: "response_header",
            });
        }
        if self.request == RequestTimeout::After(Duration::ZERO) {
            return Err(DeadlineError::Zero { field: "request" });
        }
        Ok(())
    }
}

/// The kinds of timer an exchange arms. The declaration order is the precedence when
/// several expire at the same instant: the caller's own deadline first (a cancellation is
/// never charged to the peer), then the most specific bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timer {
    /// The caller's own deadline: ends the exchange as a cancellation.
    Caller,
    /// Connection not established in time: a dial failure (hard).
    Dial,
    /// Response head not complete in time: a timeout (soft).
    ResponseHeader,
    /// Whole exchange not complete in time: a timeout (soft).
    Request,
}

impl Timer {
    /// Every timer, in precedence order.
    pub const ALL: [Timer; 4] = [
        Timer::Caller,
        Timer::Dial,
        Timer::ResponseHeader,
        Timer::Request,
    ];

    const fn index(self) -> usize {
        self as usize
    }
}

/// A deadline per [`Timer`] kind; `None` is disarmed. Four words, no allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerTable {
    at: [Option<Instant>; 4],
}

impl TimerTable {
    /// Arms `timer` to fire at `at` (re-arming replaces the old deadline).
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.at[timer.index()] = Some(at);
    }

    /// Disarms `timer`.
    pub fn stop(&mut self, timer: Timer) {
        self.at[timer.index()] = None;
    }

    /// Disarms every timer.
    pub fn stop_all(&mut self) {
        self.at = [None; 4];
    }

    /// When `timer` fires, if armed.
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.at[timer.index()]
    }

    /// The earliest armed deadline.
    pub fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// The timer that has expired at `now`: the earliest deadline at or before `now`,
    /// ties broken by [`Timer`] precedence.
    pub fn expired(&self, now: Instant) -> Option<Timer> {
        Timer::ALL
            .into_iter()
            .filter_map(|t| self.get(t).filter(|&at| at <= now).map(|at| (at, t)))
            .min()
            .map(|(_, t)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_references() {
        let d = Deadlines::default();
        assert_eq!(d.dial, Duration::from_secs(1));
        assert_eq!(d.response_header, Duration::from_secs(10));
        assert_eq!(d.request, RequestTimeout::After(Duration::from_secs(30)));
        assert!(d.validate().is_ok());
    }

    #[test]
    fn zero_deadlines_are_config_errors() {
        let d = Deadlines {
            dial: Duration::ZERO,
            ..Deadlines::default()
        };
        assert_eq!(d.validate(), Err(DeadlineError::Zero { field: "dial" }));
        let d = Deadlines {
            request: RequestTimeout::After(Duration::ZERO),
            ..Deadlines::default()
        };
        assert_eq!(d.validate(), Err(DeadlineError::Zero { field: "request" }));
        let d = Deadlines {
            request: RequestTimeout::Caller,
            ..Deadlines::default()
        };
        assert!(d.validate().is_ok());
    }

    #[test]
    fn table_reports_earliest_and_breaks_ties_by_precedence() {
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Request, Instant::from_secs(30));
        t.set(Timer::Dial, Instant::from_secs(1));
        assert_eq!(t.next(), Some(Instant::from_secs(1)));
        assert_eq!(t.expired(Instant::from_millis(999)), None);
        assert_eq!(t.expired(Instant::from_secs(1)), Some(Timer::Dial));
        t.stop(Timer::Dial);
        t.set(Timer::Caller, Instant::from_secs(30));
        assert_eq!(t.expired(Instant::from_secs(40)), Some(Timer::Caller));
        t.set(Timer::ResponseHeader, Instant::from_secs(11));
        assert_eq!(
            t.expired(Instant::from_secs(40)),
            Some(Timer::ResponseHeader)
        );
        t.stop_all();
        assert_eq!(t.next(), None);
    }
}
