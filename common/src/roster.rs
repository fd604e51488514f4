//! The roster a server answers with: the node's membership snapshot, after learning an
//! identified caller (`Membership::learn_caller`: its advertised address, verified by its
//! `X-Peerblock-Record` if it sent one, the connection's IP as the learning source),
//! or, for a node without a membership table, an empty roster to which core adds the node
//! itself. Both drivers answer `ServerEvent::Roster` with [`answer`], and verify a fetched
//! roster's signed records on all the machine's cores with [`verify_on_threads`].

use peerblock_core::placement::PeerId;
use std::net::SocketAddr;

use peerblock_core::roster::{Attestation, Checks, LearnOutcome, Roster, Verified, NO_EPOCH};
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
        metrics.record_placed(&table);
    }
    table.snapshot()
}

/// The breaker key of a roster member: its id parsed as a `PeerId` (64 hex digits, what
/// placement uses), else the BLAKE3 hash of the id.
pub fn peer_id_for_member(id: &str) -> PeerId {
    id.parse::<PeerId>()
        .unwrap_or_else(|_| PeerId(*blake3::hash(id.as_bytes()).as_bytes()))
}

/// Verifies a merge's planned signature checks ([`Membership::plan_checks`]) on up to
/// `threads` threads: core splits them ([`Checks::split`], never into parts too small to be
/// worth a thread) and each part runs [`Checks::verify`] on a scoped thread of its own (the
/// first on the calling thread). Blocking: an async driver calls it from a blocking task.
/// The results go to [`Membership::merge_verified`] or
/// [`Refresh::handle_verified_answer`](peerblock_core::roster::Refresh::handle_verified_answer).
/// Both drivers verify a fetched roster this way, so a full roster of signed members is
/// checked on every core the machine has, without holding the membership meanwhile.
///
/// [`Membership::plan_checks`]: peerblock_core::roster::Membership::plan_checks
/// [`Membership::merge_verified`]: peerblock_core::roster::Membership::merge_verified
pub fn verify_on_threads(checks: Checks, threads: usize) -> Vec<Verified> {
    if checks.is_empty() {
        return vec![checks.verify()];
    }
    let mut parts = checks.split(threads).into_iter();
    let first = parts.next().unwrap_or_default();
    std::thread::scope(|s| {
        let others: Vec<_> = parts.map(|p| s.spawn(move || p.verify())).collect();
        let mut out = vec![first.verify()];
        for h in others {
            // A part's verification is pure and cannot panic on any input; if it ever
            // did, the part is simply not counted as verified and the merge checks its
            // records one by one.
            if let Ok(v) = h.join() {
                out.push(v);
            }
        }
        out
    })
}

/// How many threads a driver gives [`verify_on_threads`]: the machine's cores.
pub fn verify_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
