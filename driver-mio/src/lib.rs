//! # peerblock-mio
//!
//! The mio driver for `peerblock-core`: one readiness loop running the same core machines
//! as the tokio driver. It is not built yet: this crate currently exports nothing, so that
//! no one mistakes it for a working driver.
