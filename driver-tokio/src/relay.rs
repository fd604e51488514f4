//! A relay-capable block source: serves what the local store holds and, when core decides
//! that a missed request may be relayed (`ServerEvent::Relay`: the request carried
//! `X-DART-Origin`, the hop is under the bound, the index in range), fetches the block on
//! the requester's behalf from this node's parent, else from the origin, and caches it.
//!
//! Core has already decided *whether* to relay and with which hop; this source only says
//! where to fetch from and maps the upstream's answer onto core's [`SourceResult`]:
//!
//! | upstream answer | `SourceResult` | the requester sees |
//! |---|---|---|
//! | 200 with a block that validates (below) | `Found` (and the block is written to the store) | 200 |
//! | 200 with block `i` of a chunk this node holds no manifest for | `Found` (kept in the hot-block cache, never written) | 200 |
//! | 200 with a block that fails validation | `Failed` | 500 |
//! | 404 | `Miss` (a relayed miss is final) | 404 |
//! | 404 + `X-Peerblock-Miss: corrupt` (the upstream quarantined its copy) | `Corrupt` | 404 + `X-Peerblock-Miss: corrupt` |
//! | 502 + `X-DART-Upstream-Status: S` (a relay further up) | `UpstreamRefused { status: S }` | 502 + S |
//! | 401 or 403 (the origin refused the requester's credential) | `UpstreamRefused { status }` | 502 + the status |
//! | anything else (refusal, timeout, dial failure, bad response) | `Failed` | 500 |
//!
//! # The relay's client
//!
//! Give the relay a client of its own whose `PeersConfig::breaker` is `None`: an origin's
//! answers depend on each requester's credential (a `403` for one expired link says
//! nothing about the next request), so a circuit opened by other requesters' refusals
//! would turn the next requester's fetch into a `500` instead of its own answer.
//! `peerblock-node serve` does this.
//!
//! # The origin
//!
//! peerblock's convention for `X-DART-Origin` is the URL of an HTTP server that serves the
//! chunk in the peer wire form (`http://HOST:PORT`, any path ignored): typically the node
//! that imported the file. The relayed request keeps the origin header and carries the hop
//! core incremented, so a chain of relays ends at the hop bound.
//!
//! # Validation
//!
//! A relay never persists a block it could not validate
//! ([`FileStore::check_relayed`](peerblock_common::store::FileStore::check_relayed)):
//! block 0 (the manifest) only if its BLAKE3 hash is the chunk key, block `i` only if the
//! relay's store holds the chunk's verified manifest and the block verifies against it. A
//! block 0 that fails its key, or a block `i` that fails the manifest the relay holds, is
//! answered `Failed` (never served). Block `i` of a chunk whose manifest the relay does
//! not hold is served (the reader validates it end to end) and kept in the hot-block cache
//! but never written to disk.

use peerblock_core::bytes::Bytes;
use peerblock_core::client::BlockRequest;
use peerblock_core::server::{SourceRequest, SourceResult};

use crate::client::{Client, Peer};
use crate::source::{BlockFuture, BlockSource, FileStore};
pub use peerblock_common::relay::{
    origin_authority, parent_answer_is_final, relayed_result, upstream_of, Parent,
};
use peerblock_common::store::RelayVerdict;
use peerblock_core::read::PeerView;

/// The source `peerblock-node serve` uses when relaying is on.
#[derive(Clone, Debug)]
pub struct RelaySource {
    store: FileStore,
    client: Client,
    parent: Parent,
}

impl RelaySource {
    /// Serves `store`; relays through `client` (breakerless: see the module docs) to
    /// `parent` (if given: [`Parent::Fixed`]) before the origin.
    pub fn new(store: FileStore, client: Client, parent: Option<String>) -> Self {
        RelaySource {
            store,
            client,
            parent: parent.map_or(Parent::None, Parent::Fixed),
        }
    }

    /// The same source asking `parent` before the origin ([`Parent::Placement`]: the
    /// block's nearest live holder nearer to its key than this node).
    pub fn with_parent(mut self, parent: Parent) -> Self {
        self.parent = parent;
        self
    }
}

impl BlockSource for RelaySource {
    fn fetch(&self, request: &SourceRequest) -> BlockFuture {
        self.store.fetch(request)
    }

    fn relay(&self, request: &SourceRequest) -> BlockFuture {
        let (origin, at_origin) = upstream_of(request, None);
        let (store, client) = (self.store.clone(), self.client.clone());
        let (path, hop) = (request.path, request.hop);
        let now = client.now();
        let parent = client.with_peers(|peers| {
            self.parent
                .of(&path, &|id| PeerView::eligible(&*peers, now, id))
        });
        Box::pin(async move {
            let block = BlockRequest {
                path,
                origin: origin.as_deref(),
                hop,
            };
            let mut answer = None;
            if let Some((id, addr)) = parent {
                let peer = match id {
                    Some(id) => Peer::new(id, addr),
                    None => Peer::from_addr(addr),
                };
                let fetched = client.get(&peer, block).await;
                let result = relayed_result(fetched.ending.as_ref());
                tracing::debug!(%path, parent = %peer.addr, outcome = fetched.describe(), "relayed through the block's parent");
                if parent_answer_is_final(&result) {
                    answer = Some((result, peer.addr));
                }
            }
            let (result, upstream) = match answer {
                Some(answer) => answer,
                None => {
                    let Some(upstream) = at_origin else {
                        tracing::warn!(?origin, "relay: the origin is not an http://HOST:PORT URL");
                        return SourceResult::Miss;
                    };
                    let fetched = client.get(&Peer::from_addr(upstream.clone()), block).await;
                    tracing::debug!(%path, %upstream, outcome = fetched.describe(), "relayed from the origin");
                    (relayed_result(fetched.ending.as_ref()), upstream)
                }
            };
            let SourceResult::Found(bytes) = &result else {
                return result;
            };
            let (checker, block) = (store.clone(), bytes.clone());
            let verdict =
                tokio::task::spawn_blocking(move || checker.check_relayed(&path, &block)).await;
            match verdict {
                Ok(RelayVerdict::Store) => cache(&store, path, bytes.clone()).await,
                Ok(RelayVerdict::ServeOnly) => {
                    tracing::debug!(%path, "relay: no manifest for the chunk here: block served, not stored");
                    store.cache_insert(path, bytes);
                }
                Ok(RelayVerdict::Reject) => {
                    tracing::warn!(%path, %upstream, "relay: the upstream's block fails validation: not served, not stored");
                    return SourceResult::Failed;
                }
                Err(e) => {
                    tracing::warn!(%path, error = %e, "relay: validating the block failed");
                    return SourceResult::Failed;
                }
            }
            result
        })
    }
}

async fn cache(store: &FileStore, path: peerblock_core::wire::BlockPath, bytes: Bytes) {
    if let Err(e) = crate::source::put(store, path, bytes).await {
        tracing::warn!(%path, error = %e, "relay: could not cache the block");
    }
}
