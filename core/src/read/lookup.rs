//! What discovery hands the read machine: peers, each optionally with a per-key load hint.

use crate::load::MAX_ADVERTISED_LOAD;
use crate::placement::PeerId;

/// One peer of a lookup's answer, with the load hint its own reply carried, if any.
///
/// In a DHT the lookup's last hop queries the close-group members themselves, so their
/// replies can say how many GETs *for this key* each received recently (a
/// [`KeyCounter`](crate::load::KeyCounter) on the node side). That is the information a
/// load-aware first read needs and cannot get otherwise: a GET response tells only about
/// the holder that sent it, and a node's total load mixes every hot record it holds.
/// Discovery layers without such hints pass `key_load: None` (or use
/// [`Read::handle_lookup`](super::Read::handle_lookup) with plain ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupPeer {
    /// The peer.
    pub id: PeerId,
    /// GETs for the read's key the peer reported receiving recently (its decayed count),
    /// or `None` when its reply carried no hint (it was not asked directly, or does not
    /// report). A peer's reply is its input: values are clamped to
    /// [`MAX_ADVERTISED_LOAD`] when stored.
    pub key_load: Option<u32>,
}

impl LookupPeer {
    /// A peer without a hint.
    pub fn new(id: PeerId) -> Self {
        LookupPeer { id, key_load: None }
    }

    /// A peer whose reply reported `key_load` recent GETs for the key.
    pub fn with_key_load(id: PeerId, key_load: u32) -> Self {
        LookupPeer {
            id,
            key_load: Some(key_load),
        }
    }

    /// The hint as the read stores it (clamped).
    pub(crate) fn bounded_key_load(&self) -> Option<u32> {
        self.key_load.map(|l| l.min(MAX_ADVERTISED_LOAD))
    }
}

impl From<PeerId> for LookupPeer {
    fn from(id: PeerId) -> Self {
        LookupPeer::new(id)
    }
}
