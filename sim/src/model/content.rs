//! Node identities, the hot file's blocks, and who holds what.
//!
//! Node ids and block keys are random 256-bit values from their own sub-seeds. A block is
//! held by its XOR close group (the `close_group` nodes nearest its key), exactly as the
//! reference's record store places records. The simulator knows the truth, so it can tell
//! a false "not found" from a true one.
//!
//! A node's index is written into the last four bytes of its id: the id stays a uniformly
//! random point for all practical purposes (two ids agreeing on their first 28 bytes is a
//! 2^-224 event), and the driver maps a [`PeerId`] back to its node without a lookup table.

use bytes::Bytes;
use peerblock_core::placement::{Key, PeerId};
use peerblock_core::rng::{seeded, Rng};

/// How many nearest nodes per block are kept in distance order (discovery walks this list,
/// skipping suppressed nodes).
pub const KEPT_PER_BLOCK: usize = 64;

/// Placement of the file's blocks on the cluster.
#[derive(Debug, Clone)]
pub struct Content {
    /// Node ids by node index.
    pub ids: Vec<PeerId>,
    /// Block keys by block index.
    pub keys: Vec<Key>,
    /// Per block: node indices by XOR distance to the key, nearest first (at most
    /// [`KEPT_PER_BLOCK`]).
    pub order: Vec<Vec<u32>>,
    /// Holders per block (the first `close_group` of `order`).
    pub close_group: usize,
}

/// Node index encoded in an id by [`Content::new`].
pub fn node_of(id: &PeerId) -> u32 {
    u32::from_be_bytes([id.0[28], id.0[29], id.0[30], id.0[31]])
}

impl Content {
    /// Draws ids for `nodes` nodes and keys for `blocks` blocks.
    pub fn new(nodes: u32, blocks: u32, close_group: usize, id_seed: u64, key_seed: u64) -> Self {
        let mut rng = seeded(id_seed);
        let ids: Vec<PeerId> = (0..nodes)
            .map(|i| {
                let mut b = [0u8; 32];
                rng.fill_bytes(&mut b);
                b[28..].copy_from_slice(&i.to_be_bytes());
                PeerId(b)
            })
            .collect();
        let mut rng = seeded(key_seed);
        let keys: Vec<Key> = (0..blocks)
            .map(|_| {
                let mut b = [0u8; 32];
                rng.fill_bytes(&mut b);
                Key(b)
            })
            .collect();
        let order = keys
            .iter()
            .map(|k| {
                let mut idx: Vec<u32> = (0..nodes).collect();
                idx.sort_by_key(|&n| k.distance(&ids[n as usize]));
                idx.truncate(KEPT_PER_BLOCK);
                idx
            })
            .collect();
        Content {
            ids,
            keys,
            order,
            close_group,
        }
    }

    /// The holders of `block`, nearest first.
    pub fn holders(&self, block: u32) -> &[u32] {
        let o = &self.order[block as usize];
        &o[..self.close_group.min(o.len())]
    }

    /// Whether `node` holds `block`.
    pub fn holds(&self, node: u32, block: u32) -> bool {
        self.holders(block).contains(&node)
    }

    /// The bytes a correct holder returns for `block`: a short token standing for the
    /// block's content (the transfer itself is modelled by size, not carried).
    pub fn token(&self, block: u32) -> Bytes {
        let mut v = self.keys[block as usize].0.to_vec();
        v.extend_from_slice(&block.to_be_bytes());
        Bytes::from(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_index_and_holders_are_nearest() {
        let c = Content::new(30, 4, 7, 1, 2);
        for (i, id) in c.ids.iter().enumerate() {
            assert_eq!(node_of(id) as usize, i);
        }
        for b in 0..4 {
            let h = c.holders(b);
            assert_eq!(h.len(), 7);
            let key = c.keys[b as usize];
            let worst_holder = h
                .iter()
                .map(|&n| key.distance(&c.ids[n as usize]))
                .max()
                .unwrap();
            for n in 0..30u32 {
                if !h.contains(&n) {
                    assert!(key.distance(&c.ids[n as usize]) > worst_holder);
                }
            }
        }
    }
}
