//! Validates and caches relayed blocks off the workers: one background thread checks each
//! block (`FileStore::check_relayed`: block 0 against the chunk key, block `i` against the
//! manifest the store holds, in the store or in its relay cache), keeps a validated one in
//! the relay cache (`FileStore::keep_relayed`) and the hot-block cache, and then runs the
//! relay's continuation with the verdict (which answers the requester), so a requester
//! that has the block knows the relay holds it too (as with the tokio driver), and no
//! worker ever waits for a disk write or a manifest read. A block that could not be
//! checked (no manifest for its chunk here) is served and cached nowhere.

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

use peerblock_common::store::{FileStore, RelayVerdict};
use peerblock_core::bytes::Bytes;
use peerblock_core::wire::BlockPath;

/// Blocks queued for writing at most: 64. A relay that fetches faster than the disk
/// writes skips the write of the newest (a block 0 is still checked against its key, on
/// the worker: a hash, no file access; a block `i` is answered unchecked and unwritten,
/// as a relay without the chunk's manifest does, and fetched again next time) rather
/// than grow without bound.
const QUEUE: usize = 64;

/// The continuation of a relayed block: runs with the validation verdict.
pub(crate) type Then = Box<dyn FnOnce(RelayVerdict) + Send>;

/// A queued block: its store, path and bytes, whether the relay has validated it already
/// (an object origin's block, length-checked: there is no manifest to check it against),
/// and the continuation.
type Job = (FileStore, BlockPath, Bytes, bool, Then);

fn writer() -> &'static SyncSender<Job> {
    static WRITER: OnceLock<SyncSender<Job>> = OnceLock::new();
    WRITER.get_or_init(|| {
        let (tx, rx) = sync_channel::<Job>(QUEUE);
        let spawned = std::thread::Builder::new()
            .name("peerblock-mio-store".into())
            .spawn(move || {
                for (store, path, bytes, checked, then) in rx {
                    let verdict = if checked {
                        RelayVerdict::Store
                    } else {
                        store.check_relayed(&path, &bytes)
                    };
                    match verdict {
                        RelayVerdict::Store => {
                            store.cache_insert(path, &bytes);
                            if let Err(e) = store.keep_relayed(&path, &bytes) {
                                tracing::warn!(%path, error = %e, "relay: could not cache the block");
                            }
                        }
                        RelayVerdict::ServeOnly => {
                            tracing::debug!(%path, "relay: no manifest for the chunk here: block served unchecked, not cached");
                        }
                        RelayVerdict::Reject => {
                            tracing::warn!(%path, "relay: the upstream's block fails validation: not served, not stored");
                        }
                    }
                    then(verdict);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "starting the store writer failed: relayed blocks stay in memory only");
        }
        tx
    })
}

/// Queues block `path` for validation and, if it validates, writing into `store` (and its
/// hot-block cache), then runs `then` with the verdict (on the writer's thread; post to a
/// worker from it). With the queue full or no writer, `then` runs at once and the block is
/// not written (see [`QUEUE`]).
pub(crate) fn check_then_put(store: &FileStore, path: BlockPath, bytes: Bytes, then: Then) {
    let unqueued = |store: &FileStore, bytes: &Bytes| {
        if path.index == 0 {
            // A hash and nothing else: checked here even when the writer is behind.
            match store.check_relayed(&path, bytes) {
                RelayVerdict::Reject => RelayVerdict::Reject,
                _ => RelayVerdict::ServeOnly,
            }
        } else {
            RelayVerdict::ServeOnly
        }
    };
    match writer().try_send((store.clone(), path, bytes, false, then)) {
        Ok(()) => {}
        Err(TrySendError::Full((store, _, bytes, _, then))) => {
            tracing::warn!(%path, "relay: the store writer is behind; block served, not stored");
            then(unqueued(&store, &bytes));
        }
        Err(TrySendError::Disconnected((store, _, bytes, _, then))) => {
            tracing::warn!(%path, "relay: no store writer; block served, not stored");
            then(unqueued(&store, &bytes));
        }
    }
}

/// Keeps block `path` of an object origin, already validated by the relay (its exact
/// length: an object has no manifest), in `store`'s relay cache and hot-block cache off
/// the worker, then runs `then` (on the writer's thread): a relay answers its waiters only
/// once the block is kept, so a miss that arrives after the answer finds it and never
/// starts a second fetch. With the queue full or no writer the block goes into the
/// hot-block cache only, and `then` runs at once.
pub(crate) fn keep_checked(store: &FileStore, path: BlockPath, bytes: Bytes, then: Then) {
    match writer().try_send((store.clone(), path, bytes, true, then)) {
        Ok(()) => {}
        Err(TrySendError::Full((store, _, bytes, _, then)))
        | Err(TrySendError::Disconnected((store, _, bytes, _, then))) => {
            tracing::warn!(%path, "relay: the store writer is behind; object block kept in memory only");
            store.cache_insert(path, &bytes);
            then(RelayVerdict::Store);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peerblock_common::relay_cache::RelayCache;
    use peerblock_core::wire::ChunkKey;

    /// Rule: an object block's continuation (which answers the relay's waiters) runs only
    /// once the block is in the hot-block cache and the relay cache, so a miss after the
    /// answer finds it and never starts a second origin fetch.
    #[test]
    fn keep_checked_runs_its_continuation_only_once_the_block_is_kept() {
        let root = std::env::temp_dir().join(format!("peerblock-keep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let cache = RelayCache::open(&root, 16 << 20, Default::default()).unwrap();
        let store = FileStore::with_cache(&root, 8 << 20, 16 << 20).with_relay_cache(cache);
        let (tx, rx) = std::sync::mpsc::channel();
        for index in 0..32u64 {
            let path = BlockPath {
                key: ChunkKey::from_array([7; 32]),
                index,
            };
            let seen = store.clone();
            let tx = tx.clone();
            keep_checked(
                &store,
                path,
                Bytes::from(vec![index as u8; 1 << 20]),
                Box::new(move |_| {
                    let hot = seen.cached(&path).is_some();
                    let kept = seen.relay_cache().is_some_and(|c| c.contains(&path));
                    tx.send((index, hot, kept)).unwrap();
                }),
            );
        }
        drop(tx);
        let seen: Vec<_> = (0..32)
            .map(|_| {
                rx.recv_timeout(std::time::Duration::from_secs(30))
                    .expect("every continuation runs")
            })
            .collect();
        for (index, hot, kept) in seen {
            assert!(
                hot,
                "block {index} answered before it was in the hot-block cache"
            );
            assert!(
                kept,
                "block {index} answered before it was in the relay cache"
            );
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
