//! # peerblock-tokio
//!
//! The tokio driver for `peerblock-core`, and the `peerblock-node` binary built on it.
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
//! | [`manifest`] | – | content addressing: import, manifests, block validation (re-exported from `peerblock-common`) |
//! | [`node`] | – | the `peerblock-node` command line, its validation and its commands |
//! | [`check`] | – | `peerblock-node check`: verify a store's chunks, quarantine, re-fetch |
//! | [`identity`] | – | the node's key file and record sequence number |
//! | [`pace`] | `pace::TokenBucket` (node-wide and per connection) | upload pacing of the server's writes |
//! | [`swarm`] | – | `peerblock-node swarm`: a simulator scenario run for real (node processes, in-process readers, the simulator's report) |
//! | [`swarm_origin`] | – | `swarm` of a scenario whose content starts at the origin: nginx as the origin, shaped in a namespace of its own, its egress and the nodes' relay counters |
//! | [`progress`] | – | progress of `import` and `fetch`: a bar on a terminal, lines otherwise |
//! | [`config`] | – | the node's TOML configuration (re-exported from `peerblock-common`) |
//! | [`metrics`] | – | the Prometheus metrics (kept in `peerblock-common`) and their admin endpoint |
//!
//! docs/architecture.md says how core's driving contract maps onto tokio; docs/node.md is
//! the operator's manual for `peerblock-node`.

#![warn(missing_docs)]

pub mod check;
pub mod client;
pub mod identity;
pub use peerblock_common::{config, manifest};
mod cmd;
pub mod metrics;
pub mod node;
pub mod origin;
pub mod pace;
pub mod progress;
pub mod reader;
pub mod relay;
pub mod roster;
pub mod server;
pub mod source;
pub mod swarm;
pub mod swarm_origin;

pub use peerblock_common::SharedMembership;
