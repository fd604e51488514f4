//! # peerblock-core
//!
//! The sans-IO protocol core of peerblock: everything that decides, nothing that does I/O.
//!
//! Many readers want the same content-addressed blocks at once. This crate holds the
//! machines that make that work: the HTTP/1.1 peer wire form and its codecs, per-peer
//! circuit breakers, dial-level cooldowns, placement, the read-round state machine and the
//! client/server exchange machines. None of them opens a socket, reads a clock, spawns a
//! thread or draws from a global RNG: time arrives as a [`time::Instant`] argument,
//! randomness as an RNG argument or a seeded generator, and bytes as slices. A driver
//! (tokio, mio, the simulator, or your own) moves bytes and timers; every decision is made
//! here. See `docs/architecture.md` for the driving contract shared by all machines.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The `bytes` crate, whose [`Bytes`](bytes::Bytes) appears in core's public types.
pub use bytes;

pub mod breaker;
pub mod client;
pub mod cooldown;
pub mod http;
pub mod load;
pub mod pace;
pub mod placement;
pub mod read;
pub mod refusal;
pub mod rng;
pub mod roster;
pub mod server;
pub mod time;
mod timed;
pub mod transmit;
pub mod wire;
