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
//! | 200 with the block | `Found` (and the block is written to the store) | 200 |
//! | 404 | `Miss` (a relayed miss is final) | 404 |
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
//! core incremented, so a chain of relays ends at the hop bound. A cached block is not
//! validated here (the relay does not know the manifest); readers validate every block end
//! to end, so a bad cached copy is rejected by them and read elsewhere.

use peerblock_core::bytes::Bytes;
use peerblock_core::client::{BlockRequest, Ending, ExchangeError};
use peerblock_core::server::{SourceRequest, SourceResult};

use crate::client::{Client, Peer};
use crate::source::{BlockFuture, BlockSource, FileStore};

/// The source `peerblock-node serve` uses when relaying is on.
#[derive(Clone, Debug)]
pub struct RelaySource {
    store: FileStore,
    client: Client,
    parent: Option<String>,
}

impl RelaySource {
    /// Serves `store`; relays through `client` (breakerless: see the module docs) to
    /// `parent` (if given) or the origin.
    pub fn new(store: FileStore, client: Client, parent: Option<String>) -> Self {
        RelaySource {
            store,
            client,
            parent,
        }
    }
}

/// The `HOST:PORT` of an origin URL (`http://HOST:PORT[/path]`), or `None` if it is not
/// one.
pub fn origin_authority(origin: &str) -> Option<&str> {
    let rest = origin.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    let port_ok = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    (!host.is_empty() && port_ok).then_some(authority)
}

/// Maps an upstream exchange's ending onto the answer for the requester (the table in
/// the module docs).
pub fn relayed_result(ending: Option<&Ending>) -> SourceResult {
    match ending {
        Some(Ending::Block(bytes)) => SourceResult::Found(bytes.clone()),
        Some(Ending::Miss) => SourceResult::Miss,
        Some(Ending::UpstreamRefused { status }) => {
            SourceResult::UpstreamRefused { status: *status }
        }
        Some(Ending::Failed(ExchangeError::Status(status @ (401 | 403)))) => {
            SourceResult::UpstreamRefused { status: *status }
        }
        _ => SourceResult::Failed,
    }
}

impl BlockSource for RelaySource {
    fn fetch(&self, request: &SourceRequest) -> BlockFuture {
        self.store.fetch(request)
    }

    fn relay(&self, request: &SourceRequest) -> BlockFuture {
        let origin = request
            .origin
            .as_ref()
            .and_then(|o| std::str::from_utf8(o).ok())
            .map(str::to_owned);
        let upstream = self.parent.clone().or_else(|| {
            origin
                .as_deref()
                .and_then(origin_authority)
                .map(str::to_owned)
        });
        let (store, client) = (self.store.clone(), self.client.clone());
        let (path, hop) = (request.path, request.hop);
        Box::pin(async move {
            let Some(upstream) = upstream else {
                tracing::warn!(?origin, "relay: the origin is not an http://HOST:PORT URL");
                return SourceResult::Miss;
            };
            let block = BlockRequest {
                path,
                origin: origin.as_deref(),
                hop,
            };
            let fetched = client.get(&Peer::from_addr(upstream.clone()), block).await;
            let result = relayed_result(fetched.ending.as_ref());
            tracing::debug!(%path, %upstream, outcome = fetched.describe(), "relayed");
            if let SourceResult::Found(bytes) = &result {
                cache(&store, path, bytes.clone()).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use peerblock_core::refusal::PeerRefusal;

    #[test]
    fn an_origin_url_names_its_authority_and_anything_else_names_none() {
        assert_eq!(
            origin_authority("http://127.0.0.1:7070"),
            Some("127.0.0.1:7070")
        );
        assert_eq!(
            origin_authority("http://node-1.test:80/objects/x?sig=1"),
            Some("node-1.test:80")
        );
        assert_eq!(origin_authority("https://127.0.0.1:7070"), None);
        assert_eq!(origin_authority("http://127.0.0.1"), None);
        assert_eq!(origin_authority("http://:80"), None);
        assert_eq!(origin_authority("127.0.0.1:80"), None);
    }

    #[test]
    fn an_upstream_credential_refusal_is_passed_on_and_other_failures_are_500s() {
        assert_eq!(
            relayed_result(Some(&Ending::Failed(ExchangeError::Status(403)))),
            SourceResult::UpstreamRefused { status: 403 }
        );
        assert_eq!(
            relayed_result(Some(&Ending::Failed(ExchangeError::Status(401)))),
            SourceResult::UpstreamRefused { status: 401 }
        );
        assert_eq!(
            relayed_result(Some(&Ending::UpstreamRefused { status: 410 })),
            SourceResult::UpstreamRefused { status: 410 }
        );
        assert_eq!(relayed_result(Some(&Ending::Miss)), SourceResult::Miss);
        assert_eq!(
            relayed_result(Some(&Ending::Failed(ExchangeError::Status(500)))),
            SourceResult::Failed
        );
        let refusal = Ending::Refused(PeerRefusal {
            reason: None,
            retry_after: None,
        });
        assert_eq!(relayed_result(Some(&refusal)), SourceResult::Failed);
        assert_eq!(relayed_result(None), SourceResult::Failed);
    }
}
