//! What both drivers' relays share: where a relayed fetch goes ([`upstream_of`],
//! [`origin_authority`]) and how the upstream's answer maps onto core's `SourceResult`
//! ([`relayed_result`]). The table of that mapping, and why a relay's client has no
//! breaker, is in `peerblock_tokio::relay`'s docs (docs/node.md too).

use peerblock_core::client::{placement_members, Ending, ExchangeError, RangeAnswer};
use peerblock_core::placement::{owners, PeerId};
use peerblock_core::server::{SourceRequest, SourceResult};
use peerblock_core::wire::BlockPath;

use crate::SharedMembership;

/// Where a relay fetches a block it misses before it asks the request's origin.
///
/// With [`Parent::Placement`] a holder that misses asks **the block's parent**: the
/// nearest live holder of the block (rendezvous placement of its block key over this
/// node's roster, within the close group) that is nearer to the key than this node. The
/// parent, missing too, does the same, so every request for a block converges on its
/// nearest live holder, which alone asks the origin: the origin sees each block about
/// once while reads keep spreading over the whole close group. Distances strictly
/// decrease along the chain, so it never loops; the hop bound caps it anyway. A node
/// that is itself the block's nearest live holder has no parent and asks the origin.
#[derive(Clone, Default)]
pub enum Parent {
    /// No parent: always the origin.
    #[default]
    None,
    /// Always this peer (`HOST:PORT`), for every block.
    Fixed(String),
    /// The block's parent by placement over `membership`, this node being `me`, within
    /// the nearest `close_group` owners of the block's key.
    Placement {
        /// The node's roster table.
        membership: SharedMembership,
        /// This node's placement id.
        me: PeerId,
        /// The close group's size (`[read] close_group_size`).
        close_group: usize,
    },
}

impl std::fmt::Debug for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Parent::None => f.write_str("None"),
            Parent::Fixed(addr) => f.debug_tuple("Fixed").field(addr).finish(),
            Parent::Placement {
                me, close_group, ..
            } => f
                .debug_struct("Placement")
                .field("me", me)
                .field("close_group", close_group)
                .finish(),
        }
    }
}

impl Parent {
    /// The parent to ask for block `path` now, with its placement id when it has one:
    /// see the type's docs. `alive` says whether a peer may be asked now (its circuit and
    /// dial cooldown, as the relay's client sees them); a dead holder is skipped.
    pub fn of(
        &self,
        path: &BlockPath,
        alive: &dyn Fn(&PeerId) -> bool,
    ) -> Option<(Option<PeerId>, String)> {
        match self {
            Parent::None => None,
            Parent::Fixed(addr) => Some((None, addr.clone())),
            Parent::Placement {
                membership,
                me,
                close_group,
            } => {
                let key = crate::manifest::block_key(&path.key, path.index);
                let members = {
                    let m = membership.lock().unwrap_or_else(|e| e.into_inner());
                    placement_members(&m)
                };
                for holder in owners(&key, &members).into_iter().take(*close_group) {
                    if holder.id == *me {
                        return None; // nobody nearer: this node asks the origin
                    }
                    if alive(&holder.id) {
                        return Some((Some(holder.id), holder.addr.clone()));
                    }
                }
                None
            }
        }
    }
}

/// Whether a parent's answer is final for the requester: the block, or the origin's
/// refusal of the requester's credential passed on (`UpstreamRefused`). Anything else (the
/// parent down, refusing, failing, over the hop bound, without the block or with a
/// corrupt copy) sends the relay to the origin itself.
pub fn parent_answer_is_final(result: &SourceResult) -> bool {
    matches!(
        result,
        SourceResult::Found(_) | SourceResult::UpstreamRefused { .. }
    )
}

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

/// The `HOST:PORT` of a wire-form origin URL (`http://HOST:PORT[/path]`), or `None` if it
/// is not one. An object origin (an URL whose fragment is `#peerblock-object=...`,
/// [`crate::object`]) is not a wire-form origin: it has no authority here, and a relay
/// reads it by byte ranges instead ([`object_origin`]).
pub fn origin_authority(origin: &str) -> Option<&str> {
    if origin
        .split_once('#')
        .is_some_and(|(_, f)| f.starts_with(crate::object::FRAGMENT_PREFIX))
    {
        return None;
    }
    let rest = origin.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    let port_ok = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    (!host.is_empty() && port_ok).then_some(authority)
}

/// The object identity of a relayed request's origin, if it names an object origin
/// (`None` for a wire-form origin, a malformed identity or no origin: core's screen has
/// already declined a malformed one with 404 when the node's `ServerConfig::identity` is
/// [`crate::object::ObjectOriginIdentity`]).
pub fn object_origin(request: &SourceRequest) -> Option<crate::object::ObjectIdentity> {
    let origin = std::str::from_utf8(request.origin.as_deref()?).ok()?;
    crate::object::parse_origin(origin).ok().flatten()
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
        // An object origin's bytes (their length is the caller's to check).
        Some(Ending::Range(RangeAnswer::Part { body, .. })) => SourceResult::Found(body.clone()),
        _ => SourceResult::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peerblock_core::placement::Member;
    use peerblock_core::refusal::PeerRefusal;
    use peerblock_core::roster::{Membership, RosterMember};
    use peerblock_core::time::Instant;
    use peerblock_core::wire::ChunkKey;
    use std::sync::{Arc, Mutex};

    fn member(n: u64) -> RosterMember {
        RosterMember {
            id: PeerId::from_u64(n).to_hex(),
            addr: format!("127.0.0.{n}:7070"),
            weight: 1.0,
            record: Default::default(),
        }
    }

    /// A roster table of members 1..=n as seen by member `me`.
    fn table(me: u64, n: u64) -> SharedMembership {
        let mut m = Membership::new(member(me), 1, 64).unwrap();
        // Each member spoke for itself from its address (unverified hearsay is not placed).
        for i in (1..=n).filter(|&i| i != me) {
            m.learn(Instant::ZERO, &member(i).id, &member(i).addr)
                .unwrap();
        }
        assert_eq!(placement_members(&m).len() as u64, n);
        Arc::new(Mutex::new(m))
    }

    fn path() -> BlockPath {
        BlockPath {
            key: ChunkKey::from_array([7; 32]),
            index: 3,
        }
    }

    /// The block's holders, nearest first, as placement ranks them over members 1..=n.
    fn ranked(n: u64) -> Vec<PeerId> {
        let members: Vec<Member> = (1..=n)
            .map(|i| Member {
                id: PeerId::from_u64(i),
                addr: member(i).addr,
                weight: 1.0,
            })
            .collect();
        let key = crate::manifest::block_key(&path().key, path().index);
        owners(&key, &members).into_iter().map(|m| m.id).collect()
    }

    fn n_of(id: &PeerId) -> u64 {
        (1..=64).find(|&i| PeerId::from_u64(i) == *id).unwrap()
    }

    fn placement(me: u64, n: u64, group: usize) -> Parent {
        Parent::Placement {
            membership: table(me, n),
            me: PeerId::from_u64(me),
            close_group: group,
        }
    }

    #[test]
    fn a_holders_parent_is_the_nearest_live_holder_nearer_to_the_key_than_itself() {
        let order = ranked(8);
        let last = n_of(&order[6]);
        let all = |_: &PeerId| true;
        let got = placement(last, 8, 7).of(&path(), &all).expect("a parent");
        assert_eq!(got, (Some(order[0]), member(n_of(&order[0])).addr));
        // The nearest dead: the next nearest live one, still nearer than this node.
        let dead = order[0];
        let got = placement(last, 8, 7).of(&path(), &|p| *p != dead);
        assert_eq!(got.map(|g| g.0), Some(Some(order[1])));
    }

    #[test]
    fn the_nearest_live_holder_has_no_parent_and_asks_the_origin() {
        let order = ranked(8);
        let all = |_: &PeerId| true;
        assert_eq!(placement(n_of(&order[0]), 8, 7).of(&path(), &all), None);
        // Every holder nearer than this one is dead: no parent either (never a farther
        // one, so the chain can never loop).
        let third = n_of(&order[2]);
        let (a, b) = (order[0], order[1]);
        assert_eq!(
            placement(third, 8, 7).of(&path(), &|p| *p != a && *p != b),
            None
        );
    }

    #[test]
    fn a_node_outside_the_close_group_asks_the_nearest_live_holder() {
        let order = ranked(10);
        let outside = n_of(&order[9]);
        let all = |_: &PeerId| true;
        let got = placement(outside, 10, 3).of(&path(), &all);
        assert_eq!(got.map(|g| g.0), Some(Some(order[0])));
        // The close group all dead: nobody to ask but the origin.
        let group = [order[0], order[1], order[2]];
        assert_eq!(
            placement(outside, 10, 3).of(&path(), &|p| !group.contains(p)),
            None
        );
    }

    #[test]
    fn a_fixed_parent_is_always_asked_and_none_never() {
        let all = |_: &PeerId| true;
        assert_eq!(
            Parent::Fixed("10.0.0.1:1".into()).of(&path(), &all),
            Some((None, "10.0.0.1:1".into()))
        );
        assert_eq!(Parent::None.of(&path(), &all), None);
    }

    #[test]
    fn only_the_block_or_a_credential_refusal_from_the_parent_is_final() {
        assert!(parent_answer_is_final(&SourceResult::Found(
            peerblock_core::bytes::Bytes::from_static(b"b")
        )));
        assert!(parent_answer_is_final(&SourceResult::UpstreamRefused {
            status: 403
        }));
        for other in [
            SourceResult::Miss,
            SourceResult::Corrupt,
            SourceResult::Failed,
        ] {
            assert!(!parent_answer_is_final(&other), "{other:?}");
        }
    }

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
        assert_eq!(
            origin_authority("http://127.0.0.1:8080/o#peerblock-object=v1;size=1;bs=1;validator="),
            None,
            "an object origin is not a wire-form origin"
        );
        assert_eq!(
            origin_authority("http://127.0.0.1:8080/o#other"),
            Some("127.0.0.1:8080")
        );
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
