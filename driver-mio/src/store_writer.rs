//! Writes relayed blocks to the store off the workers: one background thread makes each
//! block durable (`FileStore::put_blocking`: temporary file, `fsync`, rename) and then
//! runs the relay's continuation (which answers the requester), so a requester that has
//! the block knows the relay holds it too (as with the tokio driver), and no worker ever
//! waits for a disk flush.

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

use peerblock_common::store::FileStore;
use peerblock_core::bytes::Bytes;
use peerblock_core::wire::BlockPath;

/// Blocks queued for writing at most: 64. A relay that fetches faster than the disk
/// writes skips the write of the newest (it is still answered, and kept in the hot-block
/// cache, and fetched again after eviction) rather than grow without bound.
const QUEUE: usize = 64;

type Job = (FileStore, BlockPath, Bytes, Box<dyn FnOnce() + Send>);

fn writer() -> &'static SyncSender<Job> {
    static WRITER: OnceLock<SyncSender<Job>> = OnceLock::new();
    WRITER.get_or_init(|| {
        let (tx, rx) = sync_channel::<Job>(QUEUE);
        let spawned = std::thread::Builder::new()
            .name("peerblock-mio-store".into())
            .spawn(move || {
                for (store, path, bytes, then) in rx {
                    if let Err(e) = store.put_blocking(&path, &bytes) {
                        tracing::warn!(%path, error = %e, "relay: could not store the block");
                    }
                    then();
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "starting the store writer failed: relayed blocks stay in memory only");
        }
        tx
    })
}

/// Queues block `path` for writing into `store`, then runs `then` (on the writer's
/// thread; post to a worker from it). With the queue full or no writer, `then` runs at
/// once and the block is not written.
pub(crate) fn put_then(
    store: &FileStore,
    path: BlockPath,
    bytes: Bytes,
    then: Box<dyn FnOnce() + Send>,
) {
    match writer().try_send((store.clone(), path, bytes, then)) {
        Ok(()) => {}
        Err(TrySendError::Full((_, _, _, then))) => {
            tracing::warn!(%path, "relay: the store writer is behind; block kept in the cache only");
            then();
        }
        Err(TrySendError::Disconnected((_, _, _, then))) => {
            tracing::warn!(%path, "relay: no store writer; block kept in the cache only");
            then();
        }
    }
}
