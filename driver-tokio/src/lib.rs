//! # peerblock-tokio
//!
//! The tokio driver for `peerblock-core`: it will own sockets, timers and tasks and run the
//! core machines over them (client pool, server, read runner, roster, and the
//! `peerblock-node` binary). It is not built yet: this crate currently exports nothing, so
//! that no one mistakes it for a working driver.
