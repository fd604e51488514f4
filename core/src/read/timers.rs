//! The read's timers, as data: one optional deadline per kind, GET deadlines included.
//!
//! The table has a fixed row per kind: lookup, hedge, wait, origin, and one per GET slot
//! (at most [`MAX_GETS_IN_FLIGHT`] GETs are in flight, each in its own slot). The public
//! face of a row is [`ReadTimer`], the reason [`Read::poll_timeout`](super::Read::poll_timeout)
//! gives for its earliest deadline.

use crate::time::Instant;

use super::config::MAX_GETS_IN_FLIGHT;
use super::outcome::GetId;

/// Why a read wants to be woken: the kind of its earliest deadline
/// (see [`Read::poll_timeout`](super::Read::poll_timeout)). For logs and counters; a
/// driver only has to call `handle_timeout` at the deadline, whatever its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadTimer {
    /// The lookup has run for `lookup_timeout`: the round proceeds with the peers known.
    Lookup,
    /// The single GET in flight is due a hedge (see
    /// [`HedgeRule`](super::HedgeRule)): a second GET may go out.
    Hedge,
    /// A refusal wait or retry pause is over: the next round starts.
    Wait,
    /// The origin fetch has run for `origin_timeout`: the read reports what peers proved.
    Origin,
    /// GET `id` has gone unanswered for `get_timeout`: it is abandoned (a `Cancel` follows).
    Get(GetId),
}

/// A row of the table: a kind, or the GET slot `0..MAX_GETS_IN_FLIGHT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// See [`ReadTimer::Lookup`].
    Lookup,
    /// See [`ReadTimer::Hedge`].
    Hedge,
    /// See [`ReadTimer::Wait`].
    Wait,
    /// See [`ReadTimer::Origin`].
    Origin,
    /// The deadline of the GET in this slot (see [`ReadTimer::Get`]).
    Get(usize),
}

/// Rows before the GET slots.
const KIND_ROWS: usize = 4;

/// Rows in the table: the four kinds and one per GET slot.
const TIMER_ROWS: usize = KIND_ROWS + MAX_GETS_IN_FLIGHT;

impl Timer {
    fn row(self) -> usize {
        match self {
            Timer::Lookup => 0,
            Timer::Hedge => 1,
            Timer::Wait => 2,
            Timer::Origin => 3,
            Timer::Get(slot) => {
                debug_assert!(slot < MAX_GETS_IN_FLIGHT);
                KIND_ROWS + slot
            }
        }
    }

    fn of_row(row: usize) -> Timer {
        match row {
            0 => Timer::Lookup,
            1 => Timer::Hedge,
            2 => Timer::Wait,
            3 => Timer::Origin,
            slot => Timer::Get(slot - KIND_ROWS),
        }
    }
}

/// One optional deadline per [`Timer`] row.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Timers([Option<Instant>; TIMER_ROWS]);

impl Timers {
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        self.0[timer.row()] = Some(at);
    }

    pub(crate) fn clear(&mut self, timer: Timer) {
        self.0[timer.row()] = None;
    }

    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.0[timer.row()]
    }

    /// Clears `timer` and returns true if it was due at `now`.
    pub(crate) fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        match self.0[timer.row()] {
            Some(at) if at <= now => {
                self.0[timer.row()] = None;
                true
            }
            _ => false,
        }
    }

    /// The earliest deadline and its row (the first row on a tie).
    pub(crate) fn earliest(&self) -> Option<(Instant, Timer)> {
        let mut best: Option<(Instant, usize)> = None;
        for (row, at) in self.0.iter().enumerate() {
            if let Some(at) = *at {
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, row));
                }
            }
        }
        best.map(|(at, row)| (at, Timer::of_row(row)))
    }
}
