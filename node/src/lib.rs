//! # peerblock-node
//!
//! The peerblock storage node: the `peerblock-node` binary's command line, its
//! configuration loading into driver options, identity files, progress and `swarm`, over
//! the tokio driver (`peerblock-tokio`) and the mio driver (`peerblock-mio`). Nothing
//! depends on this crate; an integrator embeds a driver instead (docs/integrating.md).
//!
//! | module | what it owns |
//! |---|---|
//! | [`error`] | how a command fails: [`error::NodeError`] and the exit codes |
//! | [`node`] | the `peerblock-node` command line and its validation into plans |
//! | [`run`] | each command's plan run by the module that owns the command |
//! | [`check`] | `peerblock-node check`: verify a store's chunks, quarantine, re-fetch |
//! | [`identity`] | the node's key file and record sequence number |
//! | [`swarm`] | `peerblock-node swarm`: a simulator scenario run for real (node processes, in-process readers, the simulator's report) |
//! | [`swarm_origin`] | `swarm` of a scenario whose content starts at the origin: nginx as the origin, shaped in a namespace of its own, its egress and the nodes' relay counters |
//! | [`progress`] | progress of `import` and `fetch`: a bar on a terminal, lines otherwise |
//! | [`metrics`] | the Prometheus metrics (kept in `peerblock-common`) and the admin endpoint that serves them |
//!
//! docs/node.md is the operator's manual for `peerblock-node`.

#![warn(missing_docs)]

pub mod check;
mod cmd;
pub mod error;
pub mod identity;
pub mod metrics;
pub mod node;
pub mod progress;
pub mod run;
pub mod swarm;
pub mod swarm_origin;

// The tokio driver's modules, and common's configuration and manifest, under the names
// the node's modules use (`crate::client`, `crate::config`, ...).
use peerblock_common::SharedMembership;
pub use peerblock_common::{config, manifest};
use peerblock_tokio::{client, origin, pace, reader, relay, roster, server, source};
