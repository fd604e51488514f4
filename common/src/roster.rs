//! The roster a server answers with: the node's membership snapshot, after learning an
//! identified caller (`Membership::learn_caller`: its advertised address, verified by its
//! `X-Peerblock-Record` if it sent one, the connection's IP as the learning source),
//! or, for a node without a membership table, an empty roster to which core adds the node
//! itself. Both drivers answer `ServerEvent::Roster` with [`answer`].

use peerblock_core::placement::PeerId;
use std::net::SocketAddr;

use peerblock_core::roster::{Attestation, LearnOutcome, Roster, NO_EPOCH};
use peerblock_core::server::RosterCaller;
use peerblock_core::time::Instant;

use crate::metrics::Metrics;
use crate::SharedMembership;

/// The roster to hand to `ServerConnection::handle_roster`, learning `caller` first (the
/// membership is locked for this call only). `peer` is the connection's source: its IP is
/// the learning budget's source, and it names the connection in logs.
pub fn answer(
    membership: Option<&SharedMembership>,
    now: Instant,
    caller: Option<&RosterCaller>,
    metrics: &Metrics,
    peer: &SocketAddr,
) -> Roster {
    let Some(membership) = membership else {
        // No table: core adds this node's own entry to the empty roster.
        return Roster {
            epoch: NO_EPOCH,
            epoch_sig: None,
            members: Vec::new(),
        };
    };
    let mut table = membership.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(caller) = caller {
        let source = peer.ip().to_string();
        let (record, weight) = Attestation::from_header(caller.record.as_deref());
        let weight = caller.record.is_some().then_some(weight);
        match table.learn_caller(now, &source, &caller.id, &caller.addr, &record, weight) {
            Ok(LearnOutcome::Rejected(why)) => {
                tracing::debug!(%peer, id = %caller.id, reason = why.name(), "roster caller rejected")
            }
            Ok(outcome) => {
                tracing::debug!(%peer, id = %caller.id, addr = %caller.addr, ?outcome, "roster caller learned")
            }
            Err(e) => {
                tracing::debug!(%peer, id = %caller.id, error = %e, "roster caller not learned")
            }
        }
        metrics.record_membership(table.stats());
        metrics.roster_members.set(table.len() as i64 + 1);
    }
    table.snapshot()
}

/// The breaker key of a roster member: its id parsed as a `PeerId` (64 hex digits, what
/// placement uses), else the BLAKE3 hash of the id.
pub fn peer_id_for_member(id: &str) -> PeerId {
    id.parse::<PeerId>()
        .unwrap_or_else(|_| PeerId(*blake3::hash(id.as_bytes()).as_bytes()))
}
