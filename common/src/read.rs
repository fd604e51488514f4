//! What both drivers' readers share: a lookup's [`Candidate`]s (and placement over the
//! roster, [`placement_candidates`]), the block a read asks for ([`BlockSpec`]) and how it
//! ended ([`ReadResult`]).

use std::sync::Arc;

use peerblock_core::client::placement_members;
use peerblock_core::placement::{owners, Key};
use peerblock_core::read::{LookupPeer, ReadOutcome, ReadStats};
use peerblock_core::wire::BlockPath;

use crate::client::{Fetched, Peer, Validator};
use crate::SharedMembership;

/// One candidate a lookup found: the read's `LookupPeer` (id and optional per-key load
/// hint) and the address to dial it at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The peer as the read machine sees it.
    pub peer: LookupPeer,
    /// Its `host:port`.
    pub addr: String,
}

/// Told of every GET a reader's reads finish: the peer asked and what it gave.
pub type GetObserver = Arc<dyn Fn(&Peer, &Fetched) + Send + Sync>;

/// One block to read.
#[derive(Clone)]
pub struct BlockSpec {
    /// Its placement key (what the read machine and discovery place by).
    pub key: Key,
    /// Its wire path (what the GETs ask for).
    pub path: BlockPath,
    /// Its exact length, if known: GETs are then `get_validated`.
    pub expected: Option<u64>,
    /// The validator, run on a body of exactly `expected` bytes, or, without `expected`,
    /// on a body of any length up to the client's body cap. A copy it refuses is an
    /// invalid copy for the read: that peer is never asked again for this block.
    pub validator: Option<Validator>,
    /// The origin every GET of the read names (`X-DART-Origin`, hop 0): a relay-capable
    /// holder that misses fetches the block on the reader's behalf, through the block's
    /// parent or from this origin (docs/node.md, "Relaying"). `None`: no origin, a holder
    /// that misses answers 404.
    pub origin: Option<Arc<str>>,
}

impl std::fmt::Debug for BlockSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockSpec")
            .field("key", &self.key)
            .field("path", &self.path.to_string())
            .field("expected", &self.expected)
            .field("validator", &self.validator.is_some())
            .field("origin", &self.origin)
            .finish()
    }
}

/// Fallbacks a roster read gets past its close group, as a multiple of the close group:
/// 1, so a read whose close group of 7 is silent, refusing, failing or lying goes on to
/// the next 7 owners, nearest-first (at most 14 candidates a read, within core's
/// `MAX_CANDIDATES` of 32). docs/read.md, "Reads past a poisoned close group", bounds the
/// time this costs.
pub const FALLBACK_GROUPS: usize = 1;

/// The rendezvous owners of `key` among `membership`'s placed members
/// (`client::placement_members` + `placement::owners`), in owner order: the first
/// `close_group_size` (the close group) and [`FALLBACK_GROUPS`] times as many past it.
/// What a roster deployment's discovery answers, ranked (`Read::handle_lookup_ranked`).
pub fn placement_candidates(
    membership: &SharedMembership,
    key: &Key,
    close_group_size: usize,
) -> Vec<Candidate> {
    let members = {
        let m = membership.lock().unwrap_or_else(|e| e.into_inner());
        placement_members(&m)
    };
    owners(key, &members)
        .into_iter()
        .take(close_group_size * (1 + FALLBACK_GROUPS))
        .map(|m| Candidate {
            peer: LookupPeer::new(m.id),
            addr: m.addr.clone(),
        })
        .collect()
}

/// How one read ended.
#[derive(Clone, Debug)]
pub struct ReadResult {
    /// Core's outcome.
    pub outcome: ReadOutcome,
    /// Core's counters of the read.
    pub stats: ReadStats,
    /// The peer whose answer was the block (`Found` only).
    pub served_by: Option<Peer>,
    /// Time from the call to the outcome.
    pub elapsed: std::time::Duration,
}
