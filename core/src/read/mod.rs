//! The read engine: one sans-IO state machine per read of one record.
//!
//! A hot record must be read from its whole close group, not from the one nearest holder;
//! a slow holder is hedged, a dead one is routed around, and a holder that is only busy
//! (refusing for lack of capacity) is waited for instead of being reported as a missing
//! record. [`Read`] implements those rules; its doc comment states the driving contract,
//! and `docs/read.md` states the rules and how each reference rule was interpreted.
//!
//! The pieces:
//!
//! - [`ReadConfig`] and its named defaults and bounds.
//! - [`Spread`], the injected choice among close-group members.
//! - [`PeerView`], the driver's breaker/cooldown/load knowledge the machine asks at
//!   decision time (core's [`client::Peers`](crate::client::Peers) implements it; the test
//!   kit has a plain `StaticView` for tests).
//! - [`ReadEvent`], [`GetOutcome`], [`OriginOutcome`], [`ReadOutcome`].
//! - [`ReadTimer`]: the kinds of deadline a read keeps (its timer table is data).
//! - [`LookupPeer`], a lookup's peer with its optional per-key load hint.
//! - [`HedgeEstimator`], the optional adaptive hedge delay.

mod candidates;
mod choice;
mod config;
mod hedge;
mod lookup;
mod machine;
mod outcome;
mod timers;
mod view;

pub use choice::{ChoiceOption, CustomChoice, Spread};
pub use config::{
    Absence, HedgeRule, ReadConfig, ReadConfigError, DEFAULT_GET_TIMEOUT, DEFAULT_HEDGE_DELAY,
    DEFAULT_LOOKUP_TIMEOUT, DEFAULT_MAX_PLAIN_RETRIES, DEFAULT_MAX_REFUSAL_WAITS,
    DEFAULT_ORIGIN_TIMEOUT, DEFAULT_RETRY_DELAY, MAX_CANDIDATES, MAX_CLOSE_GROUP_SIZE,
    MAX_GETS_IN_FLIGHT, MAX_PLAIN_RETRIES_LIMIT, MAX_REFUSAL_COOLDOWN, MAX_REFUSAL_WAITS_LIMIT,
};
pub use hedge::{
    HedgeEstimator, DEFAULT_HEDGE_FLOOR, DEFAULT_HEDGE_QUANTILE_PERMILLE, HEDGE_MIN_SAMPLES,
    HEDGE_WINDOW,
};
pub use lookup::LookupPeer;
pub use machine::{Read, ReadStats, MAX_SKIPPED};
pub use outcome::{GetId, GetOutcome, OriginOutcome, ReadEvent, ReadOutcome};
pub use timers::ReadTimer;
pub use view::PeerView;
