//! The bounded membership table a node keeps and serves.
//!
//! This file holds the table, its entries and its accessors; the policy is in `policy.rs`,
//! placement in `placement.rs`, learning and merging in `learn.rs`, and each source's
//! learning budget and the verified-record cache in `budget.rs`.

mod budget;
mod learn;
mod placement;
mod policy;
#[cfg(test)]
mod tests;

pub use budget::{MAX_LEARN_SOURCES, VERIFY_CACHE_CAPACITY};
pub use learn::{ClaimRejection, LearnOutcome, MembershipStats, MergeReport};
pub use placement::MAX_PLACED_WEIGHT;
pub use policy::{
    MembershipMode, MembershipPolicy, PolicyError, DEFAULT_LEARN_INTERVAL,
    DEFAULT_MAX_CHECKS_PER_SOURCE, DEFAULT_MAX_NEW_PER_SOURCE, DEFAULT_MAX_PLACED_PER_HOST,
    DEFAULT_MAX_PLACED_PER_PREFIX, MAX_LEARN_INTERVAL,
};

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::record::{verify_epoch, Attestation, RecordError, RecordSig};
use super::{MemberProblem, Roster, RosterMember};
use crate::time::Instant;

use budget::Window;

/// One known peer (never the node itself, which is held separately).
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    addr: String,
    weight: f64,
    /// Last time the peer spoke for itself (it answered our roster request as the
    /// responder, or it called us and identified itself). `None` for hearsay: listed in
    /// someone else's roster only.
    heard: Option<Instant>,
    /// The verified record that set `addr` and `weight`; `None` for an unverified claim.
    record: Option<RecordSig>,
    /// The member spoke for itself from the host of the address it names (it answered a
    /// roster request sent to that address, or it called from that address's IP). Cleared
    /// when the address changes on anyone else's word.
    at_addr: bool,
    /// When the entry was added: among members over a placement budget, the earlier ones
    /// keep their place (a newcomer never displaces an established member).
    since: Instant,
    /// Its verified record carries an admission certificate that the policy's authority
    /// signed for its key (checked once, when the record was taken).
    admitted: bool,
}

/// A node's bounded view of the membership: itself plus up to `capacity` peers.
///
/// Rules (deterministic: ties are broken by id order, no hash order leaks), in the order
/// they apply to each claim (a roster member, or a caller describing itself):
///
/// - **Self is fixed.** The node's own entry comes from construction and is never
///   changed by what others say about it; a roster or caller claiming the node's id is
///   ignored for that entry.
/// - **Malformed records are rejected.** A member whose record fields are present but do
///   not parse is not learned at all (not even as unverified).
/// - **A verified record is replaced only by a verified record for the same id with a
///   higher sequence number.** A lower one, or the same one with other content, is a
///   replay; a record whose id is not derived from its key was signed by another key; a
///   signature that does not verify is bad. Each is rejected and counted
///   ([`MembershipStats`]). A record equal to the one held is recognised without a
///   signature check; a record verified before is recognised by its digest (a bounded
///   cache, [`VERIFY_CACHE_CAPACITY`]).
/// - **An unverified claim never replaces a verified record's address** (or weight); it is
///   rejected as [`ClaimRejection::Unverified`]. In [`MembershipMode::VerifiedOnly`] no
///   unverified claim is learned at all.
/// - **First-hand beats hearsay** among unverified claims: a peer describing itself (the
///   responder's own entry in its roster, credited to the id in its `X-DART-Node` header;
///   or a caller's `X-DART-Node` + `X-DART-Peer-Addr`) sets its unverified entry's
///   address and weight, and stamps it as heard now. A verified first-hand record stamps
///   it too. Entries about third parties are hearsay: they stamp nothing.
/// - **Epoch.** A roster with a higher epoch is adopted only if the policy names an
///   authority key and the roster's `epoch_sig` is that key's signature over the epoch;
///   then its unverified hearsay may overwrite unverified entries, and the table takes the
///   epoch and its signature (served onward). Without an authority, peers never move the
///   epoch (a higher one is counted in `epoch_refused`): one roster cannot pin the table.
///   Otherwise, unverified hearsay only adds unknown members. Epochs never go down.
/// - **Bounded learning.** Each source (the address a roster was fetched from, a caller's
///   IP) may add at most [`MembershipPolicy::max_new_per_source`] new members per
///   [`MembershipPolicy::learn_interval`]; the rest are counted as rate-limited and are
///   not verified (no signature check is spent on them).
/// - **Nothing is removed by a merge.** A member missing from someone's roster may simply
///   be unknown to them; liveness is a local decision ([`Membership::remove`]).
/// - **Bounded.** When full, a newcomer evicts: a hearsay newcomer may only displace a
///   hearsay entry, an unverified one first (lowest id first), and an unverified hearsay
///   newcomer only unverified hearsay; a first-hand newcomer displaces hearsay if any,
///   else the peer heard from longest ago. Otherwise the newcomer is dropped.
#[derive(Clone, Debug)]
pub struct Membership {
    me: RosterMember,
    epoch: u64,
    epoch_sig: Option<[u8; 64]>,
    peers: BTreeMap<String, Entry>,
    capacity: usize,
    policy: MembershipPolicy,
    sources: BTreeMap<String, Window>,
    cache: BTreeSet<[u8; 32]>,
    cache_order: VecDeque<[u8; 32]>,
    /// Digests a merge's planned checks verified (empty between merges), sorted so its
    /// claims find them by binary search: thousands of verified records cost one sort,
    /// not a tree insertion and removal each.
    batch_ok: Vec<[u8; 32]>,
    /// Digests a merge's planned checks found bad, with why (empty between merges): the
    /// claim is rejected without checking the record a second time.
    batch_bad: BTreeMap<[u8; 32], RecordError>,
    stats: MembershipStats,
}

impl Membership {
    /// A table for the node `me`, holding at most `capacity` peers besides itself
    /// (typically [`super::MAX_ROSTER_MEMBERS`]` - 1`, so a full snapshot still fits a roster),
    /// with the default [`MembershipPolicy`]. `me.record` is not taken: the node's own
    /// record is set, verified, with [`Membership::set_record`].
    pub fn new(mut me: RosterMember, epoch: u64, capacity: usize) -> Result<Self, MemberProblem> {
        me.check()?;
        me.record = Attestation::Unsigned;
        Ok(Membership {
            me,
            epoch,
            epoch_sig: None,
            peers: BTreeMap::new(),
            capacity: capacity.min(super::MAX_ROSTER_MEMBERS - 1),
            policy: MembershipPolicy::default(),
            sources: BTreeMap::new(),
            cache: BTreeSet::new(),
            cache_order: VecDeque::new(),
            batch_ok: Vec::new(),
            batch_bad: BTreeMap::new(),
            stats: MembershipStats::default(),
        })
    }

    /// The same table with `policy` (checked: `Err` names the field).
    pub fn with_policy(mut self, policy: MembershipPolicy) -> Result<Self, PolicyError> {
        policy.validate()?;
        self.policy = policy;
        Ok(self)
    }

    /// The policy in force.
    pub fn policy(&self) -> &MembershipPolicy {
        &self.policy
    }

    /// Sets this node's own record (signed with its key, [`super::NodeKey::sign`]) served
    /// in every snapshot. `Err` if it does not verify for this node's id, address and
    /// weight (our own misuse: the record is not taken).
    pub fn set_record(&mut self, record: RecordSig) -> Result<(), RecordError> {
        record.verify(&self.me.id, &self.me.addr, self.me.weight)?;
        self.me.record = Attestation::Signed(record);
        Ok(())
    }

    /// Sets the table's epoch to an authority-signed `epoch` (the operator's
    /// configuration). `Err(())` if no authority is configured, `sig` is not its
    /// signature, or `epoch` is below the table's (our own misuse).
    #[allow(clippy::result_unit_err)]
    pub fn set_signed_epoch(&mut self, epoch: u64, sig: [u8; 64]) -> Result<(), ()> {
        match &self.policy.authority {
            Some(k) if epoch >= self.epoch && verify_epoch(k, epoch, &sig) => {
                self.epoch = epoch;
                self.epoch_sig = Some(sig);
                Ok(())
            }
            _ => Err(()),
        }
    }

    /// The counters of what was verified and refused.
    pub fn stats(&self) -> &MembershipStats {
        &self.stats
    }

    /// The node's own entry.
    pub fn me(&self) -> &RosterMember {
        &self.me
    }

    /// The table's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Raises the epoch (a local membership change the operator or application versions).
    /// Lower values are ignored: epochs never go down. A raised epoch carries no authority
    /// signature.
    pub fn raise_epoch(&mut self, epoch: u64) {
        if epoch > self.epoch {
            self.epoch = epoch;
            self.epoch_sig = None;
        }
    }

    /// Peers known (not counting the node itself).
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether no peer is known.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// The known address of `id` (the node's own included).
    pub fn addr(&self, id: &str) -> Option<&str> {
        if id == self.me.id {
            return Some(&self.me.addr);
        }
        self.peers.get(id).map(|e| e.addr.as_str())
    }

    /// When `id` last spoke for itself, if ever.
    pub fn heard(&self, id: &str) -> Option<Instant> {
        self.peers.get(id).and_then(|e| e.heard)
    }

    /// The verified record held for `id`, if its entry is verified.
    pub fn record(&self, id: &str) -> Option<&RecordSig> {
        self.peers.get(id).and_then(|e| e.record.as_ref())
    }

    /// Forgets a peer (a local liveness decision). Returns whether it was known.
    pub fn remove(&mut self, id: &str) -> bool {
        self.peers.remove(id).is_some()
    }

    /// The roster this node serves: its epoch (with its authority signature, if any) and
    /// every member, itself first, then by id, each verified member with its record.
    pub fn snapshot(&self) -> Roster {
        let mut members = Vec::with_capacity(1 + self.peers.len());
        members.push(self.me.clone());
        members.extend(self.peers.iter().map(|(id, e)| RosterMember {
            id: id.clone(),
            addr: e.addr.clone(),
            weight: e.weight,
            record: match e.record {
                Some(r) => Attestation::Signed(r),
                None => Attestation::Unsigned,
            },
        }));
        Roster {
            epoch: self.epoch,
            epoch_sig: self.epoch_sig,
            members,
        }
    }
}
