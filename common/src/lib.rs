//! # peerblock-common
//!
//! The parts of a peerblock node that both drivers share and that no async runtime owns:
//!
//! | module | what it is |
//! |---|---|
//! | [`store`] | the file store: one file per block, atomic writes, bounded reads, a hot-block cache, and open files for a zero-copy path |
//! | [`manifest`] | content addressing with BLAKE3: import, manifests, block validation |
//! | [`config`] | the node's TOML configuration, checked with core's validators |
//! | [`metrics`] | the Prometheus metrics every part of a node updates |
//!
//! `peerblock-tokio` (the tokio driver and the `peerblock-node` binary) and
//! `peerblock-mio` (the mio driver) both build on this crate, so the two drivers read the
//! same store, validate with the same manifest, load the same configuration and count the
//! same metrics. Everything here is plain blocking code: each driver decides where it runs.

#![warn(missing_docs)]

pub mod config;
pub mod manifest;
pub mod metrics;
pub mod store;
