//! # peerblock-testkit
//!
//! What peerblock's tests, its simulator and every driver's conformance suite share, kept
//! out of `peerblock-core`'s public API:
//!
//! - [`pair`]: an in-memory client ↔ server pair of the real exchange machines on a
//!   virtual clock (quinn-proto's test `Pair` shape);
//! - [`pump`]: the driver-side loops of the driving contract around a `ServerConnection`
//!   and an `Exchange` (feed bytes, drain events and transmits, acknowledge, arm timers),
//!   independent of any socket or event loop; the simulator drives its HTTP/1.1 path
//!   through them;
//! - [`StaticView`]: a plain, explicit [`PeerView`](peerblock_core::read::PeerView) for
//!   tests of the read machine;
//! - [`conformance`]: the driver conformance suite every driver runs (a driver-neutral
//!   harness, misbehaving peers, one test per behaviour);
//! - [`breaker_doc`]: the breaker's transition table rendered for `docs/breaker.md`.
//!
//! Depending on this crate turns on core's `diagnostics` feature (for example
//! `Breaker::eviction_order`), which tests use to look inside a machine.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod breaker_doc;
pub mod conformance;
pub mod pair;
pub mod pump;
mod view;

pub use view::StaticView;
