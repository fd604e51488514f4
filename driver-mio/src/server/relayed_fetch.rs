//! One relayed upstream fetch: from the block's parent, then (when the parent's answer is
//! not final) from the origin, or an object origin's Range GET; a found block is validated
//! (against its chunk's manifest, or its exact length) before it is answered and kept.

use std::sync::Arc;

use peerblock_common::client::{GetOptions, Peer};
use peerblock_common::metrics::RelayCounters;
use peerblock_common::object::{ObjectIdentity, Scheme};
use peerblock_common::relay::{parent_answer_is_final, relayed_result};
use peerblock_common::store::{FileStore, RelayVerdict};
use peerblock_core::client::BlockRequest;
use peerblock_core::server::{SourceRequest, SourceResult};

use super::flights::want_flight;
use super::Shared;
use crate::client::Client;
use crate::worker::Worker;

/// One relayed fetch: from `peer` (the block's parent or the origin), then, when the
/// parent's answer is not final, from the origin `then`; the validated result goes to
/// `answer`.
pub(super) struct RelayedFetch {
    pub(super) worker: crate::worker::Remote,
    pub(super) client: Client,
    pub(super) store: FileStore,
    pub(super) path: peerblock_core::wire::BlockPath,
    pub(super) hop: peerblock_core::wire::Hop,
    pub(super) origin: Option<String>,
    pub(super) then: Option<String>,
    /// An object origin's identity: after the parent, the Range GET to the origin; a
    /// found block checked for its length and kept in the hot-block cache only.
    pub(super) object: Option<Arc<ObjectIdentity>>,
    pub(super) answer: Box<dyn FnOnce(SourceResult) + Send>,
    pub(super) counters: RelayCounters,
    /// Whether this fetch asks the origin (not the block's parent).
    pub(super) to_origin: bool,
    /// The server's shared state: a block `i` that cannot be checked here sends the
    /// chunk's manifest through its single-flight table.
    pub(super) shared: Arc<Shared>,
    /// The flight's request (its origin and hop are the manifest's too).
    pub(super) request: SourceRequest,
}

impl RelayedFetch {
    /// Starts the fetch from `peer` on worker `w`; the handle of this first request.
    pub(super) fn start(self, w: &mut Worker, peer: Peer) -> crate::RequestHandle {
        let origin = self.origin.clone();
        let block = BlockRequest {
            path: self.path,
            origin: origin.as_deref(),
            hop: self.hop,
        };
        let client = self.client.clone();
        let upstream = peer.addr.clone();
        if self.to_origin {
            self.counters.origin_fetches.inc();
        } else {
            self.counters.parent_fetches.inc();
        }
        client.submit_from(
            w,
            &peer,
            block,
            GetOptions::default(),
            Box::new(move |fetched| {
                let peer = Peer::from_addr(upstream);
                let result = relayed_result(fetched.ending.as_ref());
                let path = self.path;
                if let (true, SourceResult::Found(bytes)) = (self.to_origin, &result) {
                    self.counters.origin_bytes.inc_by(bytes.len() as u64);
                }
                tracing::debug!(%path, upstream = %peer.addr, outcome = fetched.describe(), "relayed");
                if self.object.is_some() && !self.object_answer_is_final(&result) {
                    let worker = self.worker.clone();
                    worker.run(move |w| {
                        // The parent could not serve it: the origin's Range GET.
                        let _ = self.start_range(w);
                    });
                    return;
                }
                if !parent_answer_is_final(&result) {
                    if let Some(origin) = self.then.clone() {
                        let worker = self.worker.clone();
                        let next = RelayedFetch {
                            then: None,
                            to_origin: true,
                            ..self
                        };
                        worker.run(move |w| {
                            // The parent could not serve it: the origin itself.
                            let _ = next.start(w, Peer::from_addr(origin));
                        });
                        return;
                    }
                }
                self.finish(result);
            }),
        )
    }

    /// The expected length of this object block (`None` without an object or past its
    /// end).
    fn object_len(&self) -> Option<u64> {
        self.object
            .as_ref()?
            .block_range(self.path.index)
            .map(|(_, len)| len)
    }

    /// Whether the parent's answer for an object block is final: a block of the exact
    /// length, or a refusal passed on.
    fn object_answer_is_final(&self, result: &SourceResult) -> bool {
        match result {
            SourceResult::Found(bytes) => Some(bytes.len() as u64) == self.object_len(),
            other => parent_answer_is_final(other),
        }
    }

    /// The Range GET of this object block from its origin (`http://` only: an
    /// `https://` object is answered `Failed` here, the mio driver has no TLS). `None`
    /// when no request was started (the answer is already given).
    pub(super) fn start_range(self, w: &mut Worker) -> Option<crate::RequestHandle> {
        let object = self.object.clone()?;
        if object.url.scheme == Scheme::Https {
            tracing::warn!(path = %self.path, "relay: https object origins are not read by the mio driver");
            (self.answer)(SourceResult::Failed);
            return None;
        }
        let index = self.path.index;
        if object.block_range(index).is_none() {
            // Declined by the server's identity screen before it gets here; never asked.
            (self.answer)(SourceResult::Miss);
            return None;
        }
        let client = self.client.clone();
        let shown = object.url.authority();
        self.counters.origin_fetches.inc();
        client.range_from(
            w,
            &object,
            index,
            Box::new(move |fetched| {
                let result = relayed_result(fetched.ending.as_ref());
                if let SourceResult::Found(bytes) = &result {
                    self.counters.origin_bytes.inc_by(bytes.len() as u64);
                }
                tracing::debug!(path = %self.path, origin = %shown, outcome = fetched.describe(), "relayed from the object origin");
                self.finish(result);
            }),
        )
    }

    /// Validates a found block before it is answered (and cached when it may be). A block
    /// `i` of a chunk whose manifest is not here has the manifest (block 0, checked
    /// against the key, one fetch per chunk through the single-flight table) fetched
    /// first, then is checked again; if the manifest cannot be had, the block is served
    /// unchecked (the reader validates it) and cached nowhere. A block of an object
    /// origin has its exact length checked instead.
    fn finish(self, result: SourceResult) {
        if let Some(len) = self.object_len() {
            // An object block: its exact length (no manifest to check it against), then
            // the relay cache and the hot-block cache (never imported content).
            // The waiters are answered once the block is kept (as the manifest-checked
            // path below): a miss after the answer finds it, never a second flight.
            match result {
                SourceResult::Found(bytes) if bytes.len() as u64 == len => {
                    let (answer, found) = (self.answer, bytes.clone());
                    crate::store_writer::keep_checked(
                        &self.store,
                        self.path,
                        bytes,
                        Box::new(move |_| answer(SourceResult::Found(found))),
                    );
                }
                SourceResult::Found(_) => (self.answer)(SourceResult::Failed),
                other => (self.answer)(other),
            }
            return;
        }
        let SourceResult::Found(bytes) = result else {
            (self.answer)(result);
            return;
        };
        let (store, path) = (self.store.clone(), self.path);
        let block = bytes.clone();
        let (shared, worker, answer) = (self.shared, self.worker, self.answer);
        let manifest = SourceRequest {
            path: peerblock_core::wire::BlockPath {
                key: path.key,
                index: 0,
            },
            ..self.request
        };
        crate::store_writer::check_then_put(
            &store.clone(),
            path,
            bytes,
            Box::new(move |verdict| match verdict {
                RelayVerdict::Reject => answer(SourceResult::Failed),
                RelayVerdict::Store => answer(SourceResult::Found(block)),
                RelayVerdict::ServeOnly if path.index == 0 => answer(SourceResult::Found(block)),
                RelayVerdict::ServeOnly => worker.run(move |w| {
                    let then = move |fetched: SourceResult| {
                        if !matches!(fetched, SourceResult::Found(_)) {
                            answer(SourceResult::Found(block));
                            return;
                        }
                        let found = block.clone();
                        crate::store_writer::check_then_put(
                            &store,
                            path,
                            block,
                            Box::new(move |verdict| {
                                answer(match verdict {
                                    RelayVerdict::Reject => SourceResult::Failed,
                                    _ => SourceResult::Found(found),
                                })
                            }),
                        );
                    };
                    want_flight(&shared, w, &manifest, Box::new(then));
                }),
            }),
        );
    }
}
