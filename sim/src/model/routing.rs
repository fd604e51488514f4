//! Per-participant routing views (`client.routing = "kademlia"`): every reader and every node
//! knows only part of the cluster, as a Kademlia routing table does, and a reader's lookup
//! walks those tables, so different readers can end up with different close groups.
//!
//! A table for an identity `X` sorts every other node into the bucket of its common-prefix
//! length with `X` (the leading zero bits of `X ⊕ id`) and keeps at most `bucket_size` of
//! each bucket, drawn at random from the table's own sub-seed: the peers it happened to
//! learn of. Far buckets (half the network, a quarter, ...) are sampled; near buckets,
//! smaller than `bucket_size`, are complete. A lookup for a key starts from the reader's own
//! table, asks the `ALPHA` nearest not-yet-asked nodes it can reach (not NAT'd, up, not
//! partitioned) for their nearest known nodes to the key, and repeats for
//! `client.lookup_rtts` rounds; it returns every node learned, nearest to the key first.

use peerblock_core::placement::{Distance, Key, PeerId};
use peerblock_core::rng::{seeded, Rng};

/// Nodes asked in parallel per lookup round (Kademlia's α).
pub const ALPHA: usize = 3;

/// One routing table per reader and per node.
#[derive(Debug, Clone)]
pub struct Routing {
    /// Node indices each reader knows.
    pub readers: Vec<Vec<u32>>,
    /// Node indices each node knows.
    pub nodes: Vec<Vec<u32>>,
    /// Most nodes a node returns per query (Kademlia's k).
    pub k: usize,
}

fn prefix_len(a: &[u8; 32], b: &[u8; 32]) -> usize {
    for i in 0..32 {
        let x = a[i] ^ b[i];
        if x != 0 {
            return i * 8 + x.leading_zeros() as usize;
        }
    }
    256
}

/// The table of identity `own` over `ids` (skipping index `skip`), at most `bucket_size`
/// per bucket, drawn with `seed`.
pub fn table(
    own: &[u8; 32],
    ids: &[PeerId],
    skip: Option<u32>,
    bucket_size: usize,
    seed: u64,
) -> Vec<u32> {
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); 257];
    for (n, id) in ids.iter().enumerate() {
        if Some(n as u32) == skip {
            continue;
        }
        buckets[prefix_len(own, &id.0)].push(n as u32);
    }
    let mut rng = seeded(seed);
    let mut out = Vec::new();
    for b in &mut buckets {
        // A seeded partial Fisher-Yates pick of `bucket_size` members.
        let keep = b.len().min(bucket_size);
        for i in 0..keep {
            let j = i + (rng.next_u64() % (b.len() - i) as u64) as usize;
            b.swap(i, j);
        }
        out.extend_from_slice(&b[..keep]);
    }
    out.sort_unstable();
    out
}

impl Routing {
    /// Tables for `reader_ids.len()` readers and every node.
    pub fn new(
        reader_ids: &[[u8; 32]],
        ids: &[PeerId],
        bucket_size: usize,
        k: usize,
        seed: u64,
    ) -> Self {
        let readers = reader_ids
            .iter()
            .enumerate()
            .map(|(r, own)| {
                table(
                    own,
                    ids,
                    None,
                    bucket_size,
                    peerblock_core::rng::indexed_seed(seed, r as u64),
                )
            })
            .collect();
        let nodes = ids
            .iter()
            .enumerate()
            .map(|(n, own)| {
                table(
                    &own.0,
                    ids,
                    Some(n as u32),
                    bucket_size,
                    peerblock_core::rng::indexed_seed(seed ^ 0x6e6f6465, n as u64),
                )
            })
            .collect();
        Routing { readers, nodes, k }
    }

    /// Reader `reader`'s lookup for `key`: node indices learned, nearest first.
    /// `answers(n)` says whether the reader can query node `n`.
    pub fn lookup(
        &self,
        reader: u32,
        key: &Key,
        ids: &[PeerId],
        rounds: u32,
        answers: &dyn Fn(u32) -> bool,
    ) -> Vec<u32> {
        let dist = |n: u32| -> Distance { key.distance(&ids[n as usize]) };
        let mut known: Vec<u32> = self.readers[reader as usize].clone();
        let mut asked: Vec<u32> = Vec::new();
        for _ in 0..rounds {
            known.sort_by_key(|&n| dist(n));
            known.dedup();
            let ask: Vec<u32> = known
                .iter()
                .copied()
                .filter(|n| !asked.contains(n) && answers(*n))
                .take(ALPHA)
                .collect();
            if ask.is_empty() {
                break;
            }
            for q in ask {
                asked.push(q);
                let mut theirs: Vec<u32> = self.nodes[q as usize].clone();
                theirs.sort_by_key(|&n| dist(n));
                known.extend(theirs.into_iter().take(self.k));
                known.push(q);
            }
        }
        known.sort_by_key(|&n| dist(n));
        known.dedup();
        known
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::content::Content;

    fn setup(nodes: u32, bucket: usize) -> (Content, Routing) {
        let content = Content::new(nodes, 8, 7, 1, 2);
        let mut rng = seeded(3);
        let readers: Vec<[u8; 32]> = (0..16)
            .map(|_| {
                let mut b = [0u8; 32];
                rng.fill_bytes(&mut b);
                b
            })
            .collect();
        let routing = Routing::new(&readers, &content.ids, bucket, bucket, 4);
        (content, routing)
    }

    #[test]
    fn a_bucket_keeps_at_most_bucket_size_nodes_and_near_buckets_are_complete() {
        let (content, routing) = setup(60, 2);
        for (n, known) in routing.nodes.iter().enumerate() {
            assert!(!known.contains(&(n as u32)), "a node does not list itself");
            let mut per_bucket = std::collections::BTreeMap::new();
            for &m in known {
                let b = prefix_len(&content.ids[n].0, &content.ids[m as usize].0);
                *per_bucket.entry(b).or_insert(0) += 1;
            }
            assert!(per_bucket.values().all(|&c| c <= 2), "{per_bucket:?}");
        }
        // With buckets larger than the cluster, every table is complete.
        let (_, full) = setup(60, 64);
        assert!(full.readers.iter().all(|t| t.len() == 60));
    }

    #[test]
    fn with_kademlias_bucket_size_every_lookup_finds_the_true_close_group() {
        let (content, routing) = setup(60, 20);
        for block in 0..8u32 {
            let truth = content.holders(block);
            for reader in 0..16 {
                let found = routing.lookup(
                    reader,
                    &content.keys[block as usize],
                    &content.ids,
                    3,
                    &|_| true,
                );
                assert_eq!(&found[..7], truth, "reader {reader} block {block}");
            }
        }
    }

    #[test]
    fn single_entry_buckets_and_one_round_make_readers_disagree() {
        let (content, routing) = setup(60, 1);
        let disagreements: usize = (0..8u32)
            .map(|block| {
                let truth = content.holders(block)[0];
                (0..16)
                    .filter(|&r| {
                        routing.lookup(r, &content.keys[block as usize], &content.ids, 1, &|_| true)
                            [0]
                            != truth
                    })
                    .count()
            })
            .sum();
        assert!(
            disagreements > 0,
            "some reader misses a block's nearest holder"
        );
    }
}
