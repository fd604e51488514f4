//! # peerblock-common
//!
//! The parts of a peerblock node that both drivers share and that no async runtime owns:
//!
//! | module | what it is |
//! |---|---|
//! | [`store`] | the file store: one file per block, atomic durable writes, bounded reads, verification before serving and quarantine of rotten files, a hot-block cache, open files for a zero-copy path, stale temporary file cleanup |
//! | [`manifest`] | content addressing with BLAKE3: import, manifests, block validation |
//! | [`config`] | the node's TOML configuration, checked with core's validators |
//! | [`metrics`] | the Prometheus metrics every part of a node updates |
//! | [`client`] | what both clients share: peers, options, outcomes, the pool's bookkeeping |
//! | [`relay`] | where a relayed fetch goes and how its answer maps onto core's `SourceResult` |
//! | [`roster`] | the roster answer a server gives (learning an identified caller first) |
//! | [`read`] | what both readers share: candidates, placement discovery, the block asked for, the result |
//!
//! `peerblock-tokio` (the tokio driver), `peerblock-mio` (the mio driver) and
//! `peerblock-node` (the node binary over both) build on this crate, so the two drivers read the
//! same store, validate with the same manifest, load the same configuration and count the
//! same metrics. Everything here is plain blocking code: each driver decides where it runs.

#![warn(missing_docs)]

use std::sync::{Arc, Mutex};

pub mod client;
pub mod config;
pub mod manifest;
pub mod metrics;
pub mod object;
pub mod read;
pub mod relay;
pub mod relay_cache;
pub mod roster;
pub mod store;

/// The node's roster table, shared by its server (which answers roster requests and learns
/// identified callers), its roster service and its discovery. A plain mutex: every use is
/// short and never held across an `.await` or a blocking call.
pub type SharedMembership = Arc<Mutex<peerblock_core::roster::Membership>>;
