//! The breaker's transition table, as data.
//!
//! [`TRANSITIONS`] lists every (state, event) pair the breaker distinguishes, what it
//! moves to and what else happens. It is the single source for the table in
//! `docs/breaker.md` (the test kit renders it, and a test checks the doc contains that
//! rendering verbatim) and `core/tests/breaker_transitions.rs` drives a real breaker through
//! every row, so the table, the docs and the code cannot drift apart.

use super::outcome::State;
use core::fmt;

/// Something that happens to one peer's circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// A current-generation answered outcome (200, 404, upstream refusal, caller cancel).
    Answered,
    /// A soft failure that leaves the count below the threshold.
    SoftFailureBelowThreshold,
    /// A soft failure that reaches the consecutive-failure threshold.
    SoftFailureAtThreshold,
    /// A hard failure (dial failed, validated protocol violation).
    HardFailure,
    /// A failure that would open the circuit while `max_open_share` forbids it.
    OpeningHeldByOpenShare,
    /// A data request asks for admission.
    DataAdmission,
    /// A current-generation failure reported while open (roster or unscoped).
    FailureWhileOpen,
    /// A current-generation roster success (or unscoped success) while open.
    RosterAnsweredWhileOpen,
    /// `now` reaches the end of the cooldown.
    CooldownElapsed,
    /// A data request asks for admission with a probe slot free and no probe succeeded yet.
    ProbeAdmitted,
    /// A data request asks for admission while no slot is free or a probe already succeeded.
    AdmissionWhileProbing,
    /// A probe succeeds while sibling probes are still outstanding.
    ProbeSucceededSiblingsPending,
    /// The last outstanding probe succeeds (all probes of the round succeeded).
    LastProbeSucceeded,
    /// A probe fails (soft or hard).
    ProbeFailed,
    /// A probe stays unreported past the probe lease (its permit was dropped).
    ProbeLeaseExpired,
    /// A current-generation roster success with no data probe outstanding.
    RosterAnsweredNoProbes,
    /// A current-generation roster success while data probes are outstanding.
    RosterAnsweredProbesPending,
    /// A current-generation roster failure while half-open.
    RosterFailureWhileProbing,
    /// Any outcome carried by a permit from an older generation or an evicted entry.
    StaleResult,
}

impl Event {
    /// Short human description used in the rendered table.
    pub const fn describe(self) -> &'static str {
        match self {
            Event::Answered => "answered",
            Event::SoftFailureBelowThreshold => "soft failure, count below threshold",
            Event::SoftFailureAtThreshold => "soft failure reaching the threshold",
            Event::HardFailure => "hard failure",
            Event::OpeningHeldByOpenShare => "opening failure, `max_open_share` reached",
            Event::DataAdmission => "data admission",
            Event::FailureWhileOpen => "roster/unscoped failure (late failure)",
            Event::RosterAnsweredWhileOpen => "roster/unscoped success",
            Event::CooldownElapsed => "cooldown elapsed",
            Event::ProbeAdmitted => "data admission, slot free, no success yet",
            Event::AdmissionWhileProbing => "data admission, slots taken or a probe succeeded",
            Event::ProbeSucceededSiblingsPending => "probe success, siblings outstanding",
            Event::LastProbeSucceeded => "last outstanding probe succeeds",
            Event::ProbeFailed => "probe failure",
            Event::ProbeLeaseExpired => "probe unreported past the lease",
            Event::RosterAnsweredNoProbes => "roster success, no probe outstanding",
            Event::RosterAnsweredProbesPending => "roster success, probes outstanding",
            Event::RosterFailureWhileProbing => "roster failure",
            Event::StaleResult => "stale permit (old generation or evicted entry)",
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// One row of the transition table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// State before the event.
    pub from: State,
    /// What happened.
    pub event: Event,
    /// State after the event.
    pub to: State,
    /// Side effects beyond the state change.
    pub effect: &'static str,
}

const fn row(from: State, event: Event, to: State, effect: &'static str) -> Transition {
    Transition {
        from,
        event,
        to,
        effect,
    }
}

use State::{Closed, HalfOpen, Open};

/// Every transition the breaker makes; see the module docs.
pub const TRANSITIONS: &[Transition] = &[
    row(
        Closed,
        Event::DataAdmission,
        Closed,
        "admitted (data permit)",
    ),
    row(Closed, Event::Answered, Closed, "failure count reset"),
    row(
        Closed,
        Event::SoftFailureBelowThreshold,
        Closed,
        "failure count + 1",
    ),
    row(
        Closed,
        Event::SoftFailureAtThreshold,
        Open,
        "new generation; cooldown stamped",
    ),
    row(
        Closed,
        Event::HardFailure,
        Open,
        "new generation; cooldown stamped",
    ),
    row(
        Closed,
        Event::OpeningHeldByOpenShare,
        Closed,
        "budget stays spent; next failure retries",
    ),
    row(
        Closed,
        Event::StaleResult,
        Closed,
        "nothing (an old failure cannot undo recovery)",
    ),
    row(
        Open,
        Event::DataAdmission,
        Open,
        "rejected without dialing; activity stamped",
    ),
    row(
        Open,
        Event::FailureWhileOpen,
        Open,
        "nothing: cooldown NOT restamped",
    ),
    row(
        Open,
        Event::RosterAnsweredWhileOpen,
        Closed,
        "recovered; new generation",
    ),
    row(
        Open,
        Event::StaleResult,
        Open,
        "nothing (an old success cannot clear quarantine)",
    ),
    row(Open, Event::CooldownElapsed, HalfOpen, "probe round begins"),
    row(
        HalfOpen,
        Event::ProbeAdmitted,
        HalfOpen,
        "probe slot taken; lease stamped",
    ),
    row(
        HalfOpen,
        Event::AdmissionWhileProbing,
        HalfOpen,
        "rejected without dialing",
    ),
    row(
        HalfOpen,
        Event::ProbeSucceededSiblingsPending,
        HalfOpen,
        "admission paused until all finish",
    ),
    row(
        HalfOpen,
        Event::LastProbeSucceeded,
        Closed,
        "recovered; new generation",
    ),
    row(
        HalfOpen,
        Event::ProbeFailed,
        Open,
        "new generation; cooldown restamped (grown with backoff)",
    ),
    row(
        HalfOpen,
        Event::ProbeLeaseExpired,
        Open,
        "new generation; cooldown stamped at lease end",
    ),
    row(
        HalfOpen,
        Event::RosterAnsweredNoProbes,
        Closed,
        "recovered; new generation",
    ),
    row(
        HalfOpen,
        Event::RosterAnsweredProbesPending,
        HalfOpen,
        "nothing: probes decide",
    ),
    row(
        HalfOpen,
        Event::RosterFailureWhileProbing,
        HalfOpen,
        "nothing: probes decide",
    ),
    row(
        HalfOpen,
        Event::StaleResult,
        HalfOpen,
        "nothing (cannot take a newer probe's slot)",
    ),
];
