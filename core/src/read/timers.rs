//! The read's timers, as data: one deadline per kind.
//!
//! GET timeouts are not here: each in-flight GET carries its own deadline (there are at
//! most [`MAX_GETS_IN_FLIGHT`](super::MAX_GETS_IN_FLIGHT) of them).

use crate::time::Instant;

/// The kinds of timer a read arms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// The lookup has run long enough: proceed with the peers known.
    Lookup = 0,
    /// The single GET in flight has gone unanswered for the hedge delay.
    Hedge = 1,
    /// A refusal wait or retry pause is over: start the next round.
    Wait = 2,
    /// The origin fetch has run long enough.
    Origin = 3,
}

const TIMER_KINDS: usize = 4;

/// One optional deadline per [`Timer`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Timers([Option<Instant>; TIMER_KINDS]);

impl Timers {
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        self.0[timer as usize] = Some(at);
    }

    pub(crate) fn clear(&mut self, timer: Timer) {
        self.0[timer as usize] = None;
    }

    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.0[timer as usize]
    }

    /// Clears `timer` and returns true if it was due at `now`.
    pub(crate) fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        match self.0[timer as usize] {
            Some(at) if at <= now => {
                self.0[timer as usize] = None;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }
}
