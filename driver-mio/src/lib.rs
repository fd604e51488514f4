//! # peerblock-mio
//!
//! The mio driver for `peerblock-core`: readiness loops and no async runtime. A
//! [`Runtime`] runs N worker threads (default: the machine's cores), each with one
//! `mio::Poll` and owning the server connections, client exchanges and reads that run on
//! it; a timer heap per worker holds core's deadlines; other threads hand a worker work
//! through its task queue and waker.
//!
//! Core decides everything; this crate owns sockets, threads and timers and nothing else.
//! It is the second driver over the same core as `peerblock-tokio`, and passes the same
//! conformance suite (`peerblock_testkit::conformance`), alone and in mixed pairs with the
//! tokio driver.
//!
//! | module | drives | what it owns |
//! |---|---|---|
//! | [`server`] | `server::ServerConnection` + one shared `server::Admission` | the listener in every worker's poll, connections dealt to the workers in turn, the refusal path, the buffered and `sendfile` body paths, graceful shutdown |
//! | [`client`] | `client::Exchange` + one shared `client::Peers` | non-blocking dials, per-peer slots and pools on the peer's worker |
//! | [`reader`] | `read::Read` | a read on one worker, its GETs on their peers' workers |
//! | [`roster`] | `roster::Refresh` | periodic roster exchange |
//!
//! The file store, manifest, configuration and metrics are `peerblock-common`'s, shared
//! with the tokio driver. docs/integrating.md ("Write your own driver") walks through
//! this crate's code as its worked example.

#![warn(missing_docs)]

pub mod client;
pub mod reader;
pub mod roster;
pub mod server;
mod store_writer;
mod worker;

pub use client::{Client, RequestHandle};
pub use reader::{Discovery, FixedDiscovery, PlacementDiscovery, Reader};
pub use roster::RosterService;
pub use server::{BodyPath, RelayOptions, Server, ServerError, ServerHandle, ServerOptions};
pub use worker::{default_threads, Runtime};
