//! The client's three deadlines, as data.
//!
//! There are three bounds, not one, because the failure modes they catch differ by orders
//! of magnitude (peer-transport §3.3):
//!
//! | timer | default | catches | why this value |
//! |---|---|---|---|
//! | [`ClientTimer::Dial`] | [`DEFAULT_DIAL_TIMEOUT`] (1 s) | the peer's machine is gone | a dead host sends no RST; without a bound the dial falls back to the OS SYN retry schedule (minutes). Peers share a cluster: no connection within a second means unusable |
//! | [`ClientTimer::ResponseHeader`] | [`DEFAULT_RESPONSE_HEADER_TIMEOUT`] (10 s) | the host died while our pooled connection to it sat idle: the write succeeds locally and nothing comes back | must stay above a relay's legitimate time to first byte (it may have to reach its own parent or the origin first) |
//! | [`ClientTimer::Request`] | [`DEFAULT_REQUEST_TIMEOUT`] (30 s) | a slow but live transfer | bounds the whole exchange, body included |
//!
//! plus [`ClientTimer::Caller`], the caller's own deadline if it has one. A disabled request
//! timeout ([`RequestTimeout::Caller`], the reference's "negative") defers entirely to it.
//!
//! The response-header deadline starts when the driver acknowledges the request as fully
//! written (`Exchange::handle_transmitted`), not when it takes the bytes: a request stuck
//! in a full send buffer is the request deadline's business, and the response-header
//! bound then measures only the peer's time to answer.

use crate::time::{Deadline, Duration, Instant};

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
    /// From the request acknowledged as written (`Exchange::handle_transmitted`) until the
    /// response head is complete.
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

/// The kinds of timer an exchange arms: what
/// [`Exchange::poll_timeout`](super::Exchange::poll_timeout)'s
/// [`Deadline`] names. The declaration order is the precedence when several expire at the
/// same instant: the caller's own deadline first (a cancellation is never charged to the
/// peer), then the most specific bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientTimer {
    /// The caller's own deadline: ends the exchange as a cancellation.
    Caller,
    /// Connection not established in time: a dial failure (hard).
    Dial,
    /// Response head not complete in time: a timeout (soft).
    ResponseHeader,
    /// Whole exchange not complete in time: a timeout (soft).
    Request,
}

impl ClientTimer {
    /// Every timer, in precedence order.
    pub const ALL: [ClientTimer; 4] = [
        ClientTimer::Caller,
        ClientTimer::Dial,
        ClientTimer::ResponseHeader,
        ClientTimer::Request,
    ];

    const fn index(self) -> usize {
        self as usize
    }
}

/// A deadline per [`ClientTimer`] kind; `None` is disarmed. Four words, no allocation.
/// Private to the client: drivers see only [`Deadline`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TimerTable {
    at: [Option<Instant>; 4],
}

impl TimerTable {
    /// Arms `timer` to fire at `at` (re-arming replaces the old deadline).
    pub(crate) fn set(&mut self, timer: ClientTimer, at: Instant) {
        self.at[timer.index()] = Some(at);
    }

    /// Disarms `timer`.
    pub(crate) fn stop(&mut self, timer: ClientTimer) {
        self.at[timer.index()] = None;
    }

    /// Disarms every timer.
    pub(crate) fn stop_all(&mut self) {
        self.at = [None; 4];
    }

    /// When `timer` fires, if armed.
    pub(crate) fn get(&self, timer: ClientTimer) -> Option<Instant> {
        self.at[timer.index()]
    }

    /// The earliest armed deadline and its kind, ties broken by [`ClientTimer`]
    /// precedence.
    pub(crate) fn next(&self) -> Option<Deadline<ClientTimer>> {
        ClientTimer::ALL
            .into_iter()
            .filter_map(|t| self.get(t).map(|at| (at, t)))
            .min()
            .map(|(at, timer)| Deadline { at, timer })
    }

    /// The timer that has expired at `now`: the earliest deadline at or before `now`,
    /// ties broken by [`ClientTimer`] precedence.
    pub(crate) fn expired(&self, now: Instant) -> Option<ClientTimer> {
        self.next().filter(|d| d.at <= now).map(|d| d.timer)
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
        t.set(ClientTimer::Request, Instant::from_secs(30));
        t.set(ClientTimer::Dial, Instant::from_secs(1));
        assert_eq!(
            t.next(),
            Some(Deadline {
                at: Instant::from_secs(1),
                timer: ClientTimer::Dial
            })
        );
        assert_eq!(t.expired(Instant::from_millis(999)), None);
        assert_eq!(t.expired(Instant::from_secs(1)), Some(ClientTimer::Dial));
        t.stop(ClientTimer::Dial);
        t.set(ClientTimer::Caller, Instant::from_secs(30));
        assert_eq!(t.expired(Instant::from_secs(40)), Some(ClientTimer::Caller));
        t.set(ClientTimer::ResponseHeader, Instant::from_secs(11));
        assert_eq!(
            t.expired(Instant::from_secs(40)),
            Some(ClientTimer::ResponseHeader)
        );
        t.stop_all();
        assert_eq!(t.next(), None);
    }
}
