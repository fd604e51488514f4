//! # sim — the peerblock cluster simulator
//!
//! A deterministic discrete-event simulator that runs peerblock-core's real machines (the
//! read machine per block read, one circuit breaker and one cooldown table per reader)
//! against modelled nodes and readers: per-node upload bandwidth shared by concurrent
//! transfers, per-link latency, listener limits with a silent or refusing full listener,
//! NAT, and a fault timeline. Virtual time is core's `Instant`; randomness comes from
//! per-subsystem sub-seeds of one run seed; same scenario + seed gives a byte-identical
//! trace. See `docs/sim.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
pub mod faults;
pub mod listener;
pub mod metrics;
pub mod model;
pub mod net;
pub mod progress;
pub mod queue;
pub mod report;
pub mod scenario;
pub mod slab;
pub mod sweep;
pub mod trace;
pub mod world;
