//! Relay decisions: when a node fetches a block it does not hold on a requester's behalf.
//!
//! A request carrying `X-DART-Origin` names an upstream the block can be fetched from. A
//! relay-capable node that misses may fetch it (through its own parent or the origin),
//! cache it and serve it; the relayed request carries `X-DART-Hop` one higher, and the
//! hop bound stops relay loops when membership views disagree.
//!
//! The order of checks is the reference's (peer-transport §2):
//!
//! 1. Before any cache or upstream access ([`screen`]): a block index above
//!    [`RelayConfig::max_block_index`] is declined (byte-offset arithmetic on it could
//!    overflow signed range geometry), and a chunk key that disagrees with the origin's
//!    identity (as the injected [`OriginIdentity`] computes it) is declined. Both are
//!    requester errors answered with 404; they must never quarantine an honest parent.
//! 2. After a local miss ([`on_miss`]): relay when the hop is below
//!    [`RelayConfig::max_hop`], otherwise decline with 404.
//!
//! Requests without `X-DART-Origin` are cache-only and skip both: they never relay.

/// Default [`RelayConfig::max_hop`]: a request that already crossed 3 relays is not relayed
/// again.
///
/// Each relay may spend up to a response-header deadline (10 s) waiting for its own
/// parent before its first byte; three such waits already fill the requester's 30 s
/// request deadline, so a deeper chain could only ever time out. It also stops loops
/// between nodes whose membership views disagree after at most three extra fetches.
pub const DEFAULT_MAX_HOP: u32 = 3;

/// Default [`RelayConfig::max_block_index`]: the largest index whose byte offset fits in a
/// signed 64-bit range for blocks of up to [`MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX`] bytes.
///
/// The wire accepts any u64 index; a relay turns the index into a byte range on the origin,
/// so an index whose offset overflows `i64` must be declined before that arithmetic.
pub const DEFAULT_MAX_BLOCK_INDEX: u64 = (i64::MAX as u64) / MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX;

/// Block size assumed by [`DEFAULT_MAX_BLOCK_INDEX`] (64 MiB, above any block peerblock
/// serves); deployments with smaller blocks may raise the index bound accordingly.
pub const MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX: u64 = 64 * 1024 * 1024;

/// Relay policy of one server. A node without one (`None` in the server configuration) is
/// transport-only: it serves what it holds and answers 404 otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelayConfig {
    /// Requests whose `X-DART-Hop` is at or past this are declined instead of relayed.
    /// Default [`DEFAULT_MAX_HOP`].
    pub max_hop: u32,
    /// Block indices above this are declined before any access. Default
    /// [`DEFAULT_MAX_BLOCK_INDEX`].
    pub max_block_index: u64,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            max_hop: DEFAULT_MAX_HOP,
            max_block_index: DEFAULT_MAX_BLOCK_INDEX,
        }
    }
}

/// The application's rule for "does this chunk key belong to this origin object?".
///
/// Injected because only the application knows how object identity, namespace and chunk
/// index map to a chunk key. Returning `false` declines the request (404) before any cache
/// or upstream access.
pub trait OriginIdentity {
    /// Whether `chunk_key` (raw bytes, decoded from the path's hex) is the chunk that
    /// `origin` and `block_index` identify.
    fn agrees(&self, origin: &str, chunk_key: &[u8], block_index: u64) -> bool;
}

impl<F: Fn(&str, &[u8], u64) -> bool> OriginIdentity for F {
    fn agrees(&self, origin: &str, chunk_key: &[u8], block_index: u64) -> bool {
        self(origin, chunk_key, block_index)
    }
}

/// Accepts every pairing: for deployments whose chunk keys carry no origin identity.
#[derive(Clone, Copy, Debug, Default)]
pub struct TrustOrigin;

impl OriginIdentity for TrustOrigin {
    fn agrees(&self, _: &str, _: &[u8], _: u64) -> bool {
        true
    }
}

/// Why a relay-capable node answered 404 without relaying. All are requester-side
/// conditions (or plain absence), never the node's fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Decline {
    /// The block index is above [`RelayConfig::max_block_index`].
    #[error("block index {index} is above the maximum {max}")]
    BlockIndexTooLarge {
        /// The requested index.
        index: u64,
        /// The configured maximum.
        max: u64,
    },
    /// The chunk key does not belong to the origin named in `X-DART-Origin`.
    #[error("chunk key disagrees with the identity of the origin object")]
    IdentityMismatch,
    /// The request already crossed the relay bound.
    #[error("hop {hop} is at or past the relay bound {max_hop}")]
    HopBound {
        /// The request's `X-DART-Hop`.
        hop: u32,
        /// The configured bound.
        max_hop: u32,
    },
}

/// Step 1, for a request carrying `X-DART-Origin`: decline before any cache or upstream
/// access if the index is out of range or the key disagrees with the origin.
pub(crate) fn screen(
    config: &RelayConfig,
    identity: &dyn OriginIdentity,
    origin: &str,
    chunk_key: &[u8],
    block_index: u64,
) -> Result<(), Decline> {
    if block_index > config.max_block_index {
        return Err(Decline::BlockIndexTooLarge {
            index: block_index,
            max: config.max_block_index,
        });
    }
    if !identity.agrees(origin, chunk_key, block_index) {
        return Err(Decline::IdentityMismatch);
    }
    Ok(())
}

/// Step 2, after a local miss of a request carrying `X-DART-Origin`: relay with the
/// returned hop (one higher), or decline at or past the bound.
pub(crate) fn on_miss(config: &RelayConfig, hop: u32) -> Result<u32, Decline> {
    if hop >= config.max_hop {
        return Err(Decline::HopBound {
            hop,
            max_hop: config.max_hop,
        });
    }
    Ok(hop + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_below_bound_relays_with_hop_plus_one() {
        let c = RelayConfig::default();
        assert_eq!(on_miss(&c, 0), Ok(1));
        assert_eq!(on_miss(&c, DEFAULT_MAX_HOP - 1), Ok(DEFAULT_MAX_HOP));
    }

    #[test]
    fn hop_at_or_past_bound_declines() {
        let c = RelayConfig::default();
        assert!(matches!(
            on_miss(&c, DEFAULT_MAX_HOP),
            Err(Decline::HopBound { .. })
        ));
        assert!(on_miss(&c, u32::MAX).is_err(), "no overflow at the top");
    }

    #[test]
    fn index_above_max_declined_before_identity_is_consulted() {
        let c = RelayConfig {
            max_hop: 3,
            max_block_index: 10,
        };
        let consulted = core::cell::Cell::new(false);
        let id = |_: &str, _: &[u8], _: u64| {
            consulted.set(true);
            true
        };
        assert_eq!(
            screen(&c, &id, "https://o/x", b"k", 11),
            Err(Decline::BlockIndexTooLarge { index: 11, max: 10 })
        );
        assert!(!consulted.get());
        assert_eq!(screen(&c, &id, "https://o/x", b"k", 10), Ok(()));
        assert!(consulted.get());
    }

    #[test]
    fn chunk_key_disagreeing_with_origin_identity_is_declined() {
        let c = RelayConfig::default();
        let id = |origin: &str, key: &[u8], _: u64| origin.as_bytes().ends_with(key);
        assert_eq!(screen(&c, &id, "https://o/abc", b"abc", 0), Ok(()));
        assert_eq!(
            screen(&c, &id, "https://o/abc", b"xyz", 0),
            Err(Decline::IdentityMismatch)
        );
        assert_eq!(screen(&c, &TrustOrigin, "o", b"xyz", 0), Ok(()));
    }

    #[test]
    fn default_index_bound_keeps_offsets_in_signed_range() {
        // The largest index whose offset, for the documented 64 MiB blocks, fits an i64:
        // that index's offset fits, the next one's does not.
        let block = 64u128 << 20;
        assert_eq!(u128::from(MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX), block);
        let max = u128::from(RelayConfig::default().max_block_index);
        assert!(max * block <= i64::MAX as u128);
        assert!((max + 1) * block > i64::MAX as u128);
    }
}
