//! # peerblock-tokio
//!
//! The tokio driver for `peerblock-core`: a library to embed in a service of your own.
//! The `peerblock-node` binary built on it is the `peerblock-node` crate.
//!
//! Core decides everything; this crate owns sockets, tasks, timers and files and nothing
//! else. Each part drives one of core's machines:
//!
//! | module | drives | what it owns |
//! |---|---|---|
//! | [`server`] | `server::ServerConnection` + one shared `server::Admission` | the listener, one task per connection, the refusal path, graceful shutdown |
//! | [`source`] | – | the [`source::BlockSource`] trait and the file and memory stores |
//! | [`client`] | `client::Exchange` + one shared `client::Peers` | the connection pool, dials and their deadline |
//! | [`reader`] | `read::Read` | lookups through a [`reader::Discovery`], the read's GETs, its timers |
//! | [`roster`] | `roster::Refresh` + one shared `roster::Membership` | periodic roster exchange |
//! | [`relay`] | – | the relay-capable source: fetch on behalf from a parent or the origin, cache |
//! | [`origin`] | – | the object origin a relay fetches from: plain TCP or TLS, range GETs |
//! | [`pace`] | `pace::TokenBucket` (node-wide and per connection) | upload pacing of the server's writes |
//! | [`manifest`] | – | content addressing: import, manifests, block validation (re-exported from `peerblock-common`) |
//! | [`config`] | – | the node's TOML configuration (re-exported from `peerblock-common`) |
//! | [`metrics`] | – | the Prometheus metrics (re-exported from `peerblock-common`) |
//!
//! docs/architecture.md says how core's driving contract maps onto tokio;
//! docs/integrating.md ("Embed a driver") and `examples/embed.rs` show a program that
//! serves its own blocks and reads one back.

#![warn(missing_docs)]

pub mod client;
pub use peerblock_common::{config, manifest, metrics};
pub mod origin;
pub mod pace;
pub mod reader;
pub mod relay;
pub mod roster;
pub mod server;
pub mod source;

pub use peerblock_common::SharedMembership;
