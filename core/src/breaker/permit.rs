//! Generation-scoped permits: the binding between a request and the circuit it was
//! admitted under.
//!
//! A request's result may arrive long after the circuit it was admitted under has moved on:
//! a request started while closed can fail after a sibling's protocol violation already
//! opened the circuit, or succeed after the circuit was quarantined. If such a result were
//! applied to the current circuit, an old success could clear a fresh quarantine or take a
//! newer probe's slot, and an old failure could undo a recovery. So every admission hands
//! out a [`Permit`] that names the entry (a breaker-unique id, never reused, so a permit
//! for an evicted entry cannot touch or recreate its successor) and the entry's
//! generation. Opening a circuit and recovering it each start a new generation; recording a
//! permit from an older generation, or for an entry that no longer exists, changes nothing.

use super::outcome::State;
use crate::time::Duration;

/// Which admission path produced a [`Permit`]; decides how its outcome is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PermitKind {
    /// A data request admitted by a closed circuit.
    Data,
    /// A data request admitted as one of a half-open circuit's probes; it holds a probe
    /// slot until recorded or released (or until the probe lease runs out).
    Probe,
    /// A membership (roster) request: admitted regardless of the circuit, never holding
    /// a probe slot.
    Roster,
}

/// The right to report one request's outcome, bound to the entry and generation that
/// admitted it.
///
/// Consumed by value by [`Breaker::record`](super::Breaker::record) or
/// [`Breaker::release`](super::Breaker::release), so a result is counted at most once.
/// Dropping a permit without either is harmless except for a [`PermitKind::Probe`]
/// permit, whose slot is then held until the configured probe lease expires and the round
/// counts as failed; call `release` when the request is abandoned.
///
/// A permit is only meaningful to the breaker that issued it; recording it on another
/// breaker is a local bug whose effect is unspecified (it never panics).
#[must_use = "record or release the permit; a dropped probe permit holds its slot until the probe lease expires"]
#[derive(Debug, PartialEq, Eq)]
pub struct Permit {
    pub(super) slot: u32,
    pub(super) entry: u64,
    pub(super) generation: u64,
    pub(super) kind: PermitKind,
}

impl Permit {
    /// The admission path that produced this permit.
    pub fn kind(&self) -> PermitKind {
        self.kind
    }
}

/// Admission refused: the peer's circuit is open, or half-open with every probe slot taken.
///
/// The caller skips this peer (no dial at all); `retry_after` tells a scheduler when the
/// circuit may next admit a request, when that is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("peer circuit is {state}: request not admitted (retry after {retry_after:?})")]
pub struct Rejected {
    /// The circuit's state at the moment of the refusal.
    pub state: State,
    /// Time until the cooldown ends, for an open circuit; `None` while half-open probes
    /// are outstanding (their outcomes, not the clock, decide).
    pub retry_after: Option<Duration>,
}

/// Whether [`Breaker::record`](super::Breaker::record) applied an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recorded {
    /// The permit was current: the outcome was counted.
    Applied,
    /// The permit belonged to an older generation or an evicted entry; nothing changed.
    Stale,
}
