//! What callers report and what observers see: [`Outcome`] and [`State`].

use core::fmt;

/// How conclusive one exchange with a peer was; the caller classifies, the breaker counts.
///
/// The split exists because the failure modes differ in what they prove: a peer that
/// answered anything deliberate is alive; a peer that was slow or sent an unexpected status
/// may be having a hiccup; a peer we cannot connect to at all, or that provably violated the
/// protocol, is definitively unusable right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The peer did its job: 200, 404 ("I do not hold that block"), a relay's upstream
    /// refusal reported with `X-DART-Upstream-Status`, an explicit busy refusal, or a
    /// request the caller itself cancelled (a hedging loser, a client disconnect). Closes
    /// the circuit's failure count.
    Answered,
    /// Suspicious but possibly transient: our own request timeout fired, an unexpected
    /// status (a 500 without the upstream header), a truncated body. Spends one unit of the
    /// consecutive-failure budget.
    SoftFailure,
    /// Definitive: the dial failed or timed out, or a validated protocol violation such as
    /// a wrong body length. Opens the circuit at once.
    HardFailure,
}

/// A circuit as observers report it.
///
/// `Display` prints exactly `closed`, `open` and `half-open`, the words metrics and logs use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Requests flow; failures are being counted.
    Closed,
    /// Requests are rejected without dialing until the cooldown ends.
    Open,
    /// The cooldown ended; a bounded number of probes decides whether to close or reopen.
    HalfOpen,
}

impl State {
    /// The lower-case name printed by `Display`.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half-open",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
