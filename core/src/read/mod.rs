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
//! - [`config`]: [`ReadConfig`] and its named defaults and bounds.
//! - [`choice`]: [`Spread`], the injected choice among close-group members.
//! - [`view`]: [`PeerView`], the driver's breaker/cooldown/load knowledge the machine asks
//!   at decision time, its implementation for [`CooldownTable`](crate::cooldown::CooldownTable),
//!   and [`StaticView`] for tests and simulations.
//! - [`outcome`]: [`ReadEvent`], [`GetOutcome`], [`OriginOutcome`], [`ReadOutcome`].
//! - [`ReadTimer`]: the kinds of deadline a read keeps (its timer table is data).
//! - [`lookup`]: [`LookupPeer`], a lookup's peer with its optional per-key load hint.
//! - [`hedge`]: [`HedgeEstimator`], the optional adaptive hedge delay.

mod candidates;
pub mod choice;
pub mod config;
pub mod hedge;
pub mod lookup;
mod machine;
pub mod outcome;
mod timers;
pub mod view;

pub use choice::{ChoiceOption, CustomChoice, Scoring, Spread};
pub use config::{
    Absence, HedgeRule, ReadConfig, ReadConfigError, MAX_CANDIDATES, MAX_GETS_IN_FLIGHT,
    MAX_REFUSAL_COOLDOWN,
};
pub use hedge::HedgeEstimator;
pub use lookup::LookupPeer;
pub use machine::{Read, ReadStats, MAX_SKIPPED};
pub use outcome::{GetId, GetOutcome, OriginOutcome, ReadEvent, ReadOutcome};
pub use timers::ReadTimer;
pub use view::{PeerView, StaticView};
