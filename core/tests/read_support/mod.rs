//! Shared helpers for the read-engine integration tests (`core/tests/read_*.rs`).
#![allow(dead_code)]

use peerblock_core::placement::{Key, PeerId};
use peerblock_core::read::{PeerView, Read, ReadEvent};
use peerblock_core::time::Instant;

/// Every action the read has for the driver right now.
pub fn drain(read: &mut Read, now: Instant, view: &impl PeerView) -> Vec<ReadEvent> {
    let mut out = Vec::new();
    while let Some(a) = read.poll_event(now, view) {
        out.push(a);
        assert!(out.len() < 1_000, "poll_event never ran dry");
    }
    out
}

/// Peers with ids 1..=n and a key 0, so peer `i` is at distance `i`: nearest first is
/// simply ascending id.
pub fn key_and_peers(n: u64) -> (Key, Vec<PeerId>) {
    (Key::from_u64(0), (1..=n).map(PeerId::from_u64).collect())
}

/// The GETs among `actions`.
pub fn gets(actions: &[ReadEvent]) -> Vec<(peerblock_core::read::GetId, PeerId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            ReadEvent::Get { id, peer } => Some((*id, *peer)),
            _ => None,
        })
        .collect()
}

pub fn secs(s: u64) -> Instant {
    Instant::from_secs(s)
}

pub fn millis(ms: u64) -> Instant {
    Instant::from_millis(ms)
}
