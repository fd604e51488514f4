//! Where a server's blocks come from: the [`BlockSource`] trait, a file store and an
//! in-memory store.

use std::future::Future;
use std::pin::Pin;

use peerblock_core::server::{SourceRequest, SourceResult};

/// The future a [`BlockSource`] returns.
pub type BlockFuture = Pin<Box<dyn Future<Output = SourceResult> + Send + 'static>>;

/// The application's blocks, as the server asks for them.
///
/// The server calls [`fetch`](Self::fetch) for core's `ServerEvent::Fetch` and
/// [`relay`](Self::relay) for `ServerEvent::Relay` (core has already decided that the
/// request may be relayed and incremented its hop), each on a task of its own, and hands
/// the answer back to core with `ServerConnection::handle_source`. Core answers a source
/// that takes longer than its source timeout with a `500` and drops the late answer.
///
/// Implementations must not block the calling thread: blocking file I/O belongs on
/// `tokio::task::spawn_blocking`.
pub trait BlockSource: Send + Sync + 'static {
    /// The block `request.path` if this node holds it: `Found`, `Miss` or `Failed`.
    fn fetch(&self, request: &SourceRequest) -> BlockFuture;

    /// Fetches the block on the requester's behalf from this node's parent or the origin
    /// named in `request.origin`, with `request.hop` (already one higher). The default is
    /// a transport-only node: `Miss`.
    fn relay(&self, request: &SourceRequest) -> BlockFuture {
        let _ = request;
        Box::pin(std::future::ready(SourceResult::Miss))
    }
}
