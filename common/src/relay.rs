//! What both drivers' relays share: where a relayed fetch goes ([`upstream_of`],
//! [`origin_authority`]) and how the upstream's answer maps onto core's `SourceResult`
//! ([`relayed_result`]). The table of that mapping, and why a relay's client has no
//! breaker, is in `peerblock_tokio::relay`'s docs (docs/node.md too).

use peerblock_core::client::{Ending, ExchangeError};
use peerblock_core::server::{SourceRequest, SourceResult};

/// For a relayed request: its origin as text (if it is UTF-8) and the `HOST:PORT` to
/// fetch from: `parent` if this node has one, else the origin's authority (`None` when
/// the origin is not an `http://HOST:PORT` URL: the request is then answered `Miss`).
pub fn upstream_of(
    request: &SourceRequest,
    parent: Option<&str>,
) -> (Option<String>, Option<String>) {
    let origin = request
        .origin
        .as_ref()
        .and_then(|o| std::str::from_utf8(o).ok())
        .map(str::to_owned);
    let upstream = parent.map(str::to_owned).or_else(|| {
        origin
            .as_deref()
            .and_then(origin_authority)
            .map(str::to_owned)
    });
    (origin, upstream)
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
        // The upstream's copy is rotten (it quarantined it): the requester hears the
        // same, and asks another holder.
        Some(Ending::Corrupt) => SourceResult::Corrupt,
        Some(Ending::UpstreamRefused { status }) => {
            SourceResult::UpstreamRefused { status: *status }
        }
        Some(Ending::Failed(ExchangeError::Status(status @ (401 | 403)))) => {
            SourceResult::UpstreamRefused { status: *status }
        }
        _ => SourceResult::Failed,
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
            relayed_result(Some(&Ending::Corrupt)),
            SourceResult::Corrupt
        );
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
