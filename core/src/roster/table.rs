//! The bounded membership table a node keeps and serves.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::record::{verify_admission, verify_epoch, Attestation, RecordError, RecordSig};
use super::verify::{Check, Checks, Verified};
use super::{check_identity, MemberProblem, Roster, RosterMember, DEFAULT_WEIGHT};
use crate::time::{Duration, Instant};

/// Default [`MembershipPolicy::max_new_per_source`]: 256 new members per source per
/// interval. A node joining a cluster of 4096 learns it in 16 intervals from one source,
/// in about 8 rounds (4 minutes at the default 30 s) with the refresh's fanout of 2, while
/// one hostile source can introduce at most 256 invented members per 30 s.
pub const DEFAULT_MAX_NEW_PER_SOURCE: usize = 256;

/// Default [`MembershipPolicy::max_checks_per_source`]: 512 signature checks per source per
/// interval, twice the default budget of new members: room for a source's new members and as
/// many updates (higher sequence numbers) of known ones, while a source relaying garbage
/// records with invented higher sequence numbers for every known member costs at most
/// 512 checks (about 20 ms here) per interval, not one per member per exchange.
pub const DEFAULT_MAX_CHECKS_PER_SOURCE: usize = 512;

/// Default [`MembershipPolicy::learn_interval`]: 30 s, the roster refresh's interval, so
/// a source's budget refills once per round.
pub const DEFAULT_LEARN_INTERVAL: Duration = Duration::from_secs(30);

/// Most sources whose learning budgets are tracked at once: 1024 (each a source text of at
/// most an address and two words). When full, the source whose window started longest ago
/// is forgotten (its budget refills early: a bounded leak, never unbounded memory).
pub const MAX_LEARN_SOURCES: usize = 1024;

/// Records whose signature verified and that are remembered by digest so the same record
/// is never verified twice: 4096 digests of 32 bytes (a full roster's worth), evicted
/// oldest first. Records the table holds are recognised without the cache (a record equal
/// to the one held costs no check).
pub const VERIFY_CACHE_CAPACITY: usize = 4096;

/// Longest [`MembershipPolicy::learn_interval`]: one day.
pub const MAX_LEARN_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// Default [`MembershipPolicy::max_placed_per_host`]: 4 members placed per host (IP
/// address, or host name). A machine with a few disks runs a node per disk; one address
/// owning more than 4 members is an address inventing them. With the close group of 7,
/// an outsider needs members on 2 hosts to fill one key's close group
/// (`docs/security.md`, "Placement").
pub const DEFAULT_MAX_PLACED_PER_HOST: usize = 4;

/// Default [`MembershipPolicy::max_placed_per_prefix`]: 64 members placed per network
/// prefix (an IPv4 /24, an IPv6 /48; a host name is its own prefix). A rack or a subnet
/// holds many honest nodes; one /24 holds at most 256 addresses, so this bounds what one
/// rented block of addresses can place to 64 members.
pub const DEFAULT_MAX_PLACED_PER_PREFIX: usize = 64;

/// Highest placement weight a member is placed with: a member that signs (or claims) a
/// larger weight is placed as if it had signed this one. Honest nodes sign weight 1, so a
/// member can take at most 4 default members' share of the keys, never all of them (an
/// unbounded weight wins every key's rendezvous).
pub const MAX_PLACED_WEIGHT: f64 = 4.0;

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

/// Whether the table learns unverified claims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MembershipMode {
    /// Verified records and unverified claims (reference peers, nodes without keys) are
    /// both learned; an unverified claim never replaces a verified record's address.
    #[default]
    Open,
    /// Only verified records are learned (`membership = "verified-only"`).
    VerifiedOnly,
    /// Learned as in [`Open`](Self::Open), but placed only when admitted: a verified
    /// record carrying the cluster authority's admission certificate for its key
    /// ([`super::record::sign_admission`]), or an unverified member at an address of
    /// [`MembershipPolicy::allow`] that spoke for itself from it (reference peers named by
    /// the operator). Needs [`MembershipPolicy::authority`] (`membership = "admitted"`).
    Admitted,
}

/// How a [`Membership`] table decides what it learns ([`Membership::with_policy`]).
#[derive(Clone, Debug, PartialEq)]
pub struct MembershipPolicy {
    /// Whether unverified claims are learned (default [`MembershipMode::Open`]).
    pub mode: MembershipMode,
    /// The cluster authority's public key: a roster's higher epoch is adopted only when
    /// this key signed it. `None` (the default): no peer ever changes the table's epoch,
    /// which only [`Membership::raise_epoch`] moves.
    pub authority: Option<[u8; 32]>,
    /// New members one source (a fetched roster's address; a caller's IP) may add per
    /// `learn_interval` (default [`DEFAULT_MAX_NEW_PER_SOURCE`]; at least 1).
    pub max_new_per_source: usize,
    /// Signature checks one source's claims may cost per `learn_interval` (default
    /// [`DEFAULT_MAX_CHECKS_PER_SOURCE`]; at least 1). Claims beyond it are rate-limited
    /// unverified (records already held or cached cost no check and pass).
    pub max_checks_per_source: usize,
    /// The window of `max_new_per_source` and `max_checks_per_source` (default [`DEFAULT_LEARN_INTERVAL`]; positive, at
    /// most [`MAX_LEARN_INTERVAL`]).
    pub learn_interval: Duration,
    /// Members placed per host (default [`DEFAULT_MAX_PLACED_PER_HOST`]; at least 1):
    /// see [`Membership::placed`].
    pub max_placed_per_host: usize,
    /// Members placed per network prefix, an IPv4 /24 or an IPv6 /48 (default
    /// [`DEFAULT_MAX_PLACED_PER_PREFIX`]; at least 1): see [`Membership::placed`].
    pub max_placed_per_prefix: usize,
    /// In [`MembershipMode::Admitted`]: addresses (`host:port`, as members advertise them)
    /// whose unsigned member is placed once it spoke for itself from there (Go reference
    /// peers, which have no key). Ignored in the other modes. Default empty.
    pub allow: Vec<String>,
}

impl Default for MembershipPolicy {
    fn default() -> Self {
        MembershipPolicy {
            mode: MembershipMode::Open,
            authority: None,
            max_new_per_source: DEFAULT_MAX_NEW_PER_SOURCE,
            max_checks_per_source: DEFAULT_MAX_CHECKS_PER_SOURCE,
            learn_interval: DEFAULT_LEARN_INTERVAL,
            max_placed_per_host: DEFAULT_MAX_PLACED_PER_HOST,
            max_placed_per_prefix: DEFAULT_MAX_PLACED_PER_PREFIX,
            allow: Vec::new(),
        }
    }
}

/// A [`MembershipPolicy`] field out of range (local misuse). Names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A count or duration that must be positive is zero.
    #[error("membership policy `{field}` is zero")]
    Zero {
        /// The field.
        field: &'static str,
    },
    /// `learn_interval` is above [`MAX_LEARN_INTERVAL`].
    #[error("membership policy `learn_interval` {value:?} is above {MAX_LEARN_INTERVAL:?}")]
    IntervalTooLong {
        /// The value given.
        value: Duration,
    },
    /// `authority` is not a valid Ed25519 public key.
    #[error("membership policy `authority` is not a valid Ed25519 public key")]
    BadAuthority,
    /// [`MembershipMode::Admitted`] without an `authority` to check certificates with.
    #[error("membership policy `mode` admitted needs an `authority` key")]
    AdmittedWithoutAuthority,
}

impl PolicyError {
    /// The policy field at fault.
    pub fn field(&self) -> &'static str {
        match self {
            PolicyError::Zero { field } => field,
            PolicyError::IntervalTooLong { .. } => "learn_interval",
            PolicyError::BadAuthority | PolicyError::AdmittedWithoutAuthority => "authority",
        }
    }
}

impl MembershipPolicy {
    /// Checks every bound.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.max_new_per_source == 0 {
            return Err(PolicyError::Zero {
                field: "max_new_per_source",
            });
        }
        if self.max_checks_per_source == 0 {
            return Err(PolicyError::Zero {
                field: "max_checks_per_source",
            });
        }
        if self.max_placed_per_host == 0 {
            return Err(PolicyError::Zero {
                field: "max_placed_per_host",
            });
        }
        if self.max_placed_per_prefix == 0 {
            return Err(PolicyError::Zero {
                field: "max_placed_per_prefix",
            });
        }
        if self.learn_interval.is_zero() {
            return Err(PolicyError::Zero {
                field: "learn_interval",
            });
        }
        if self.learn_interval > MAX_LEARN_INTERVAL {
            return Err(PolicyError::IntervalTooLong {
                value: self.learn_interval,
            });
        }
        if self.mode == MembershipMode::Admitted && self.authority.is_none() {
            return Err(PolicyError::AdmittedWithoutAuthority);
        }
        if let Some(key) = &self.authority {
            match ed25519_dalek::VerifyingKey::from_bytes(key) {
                Ok(k) if !k.is_weak() => {}
                _ => return Err(PolicyError::BadAuthority),
            }
        }
        Ok(())
    }
}

/// Why one claim (a roster member, a caller) was not learned. The sender's fault, counted
/// in [`MembershipStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimRejection {
    /// A signed record not newer than the verified one held (a lower sequence number, or
    /// the same one with other content): a replay.
    Replayed,
    /// The id is not derived from the record's key: a record signed by another key.
    WrongKey,
    /// The key is invalid or the signature does not verify.
    BadSignature,
    /// Record fields present but unusable (garbage, truncated, partial).
    Malformed,
    /// An unverified claim that would change a verified member, or any unverified claim in
    /// [`MembershipMode::VerifiedOnly`].
    Unverified,
    /// The source's budget of new members, or of signature checks, for this interval is
    /// spent.
    RateLimited,
}

impl ClaimRejection {
    /// A short name for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            ClaimRejection::Replayed => "replayed",
            ClaimRejection::WrongKey => "wrong-key",
            ClaimRejection::BadSignature => "bad-signature",
            ClaimRejection::Malformed => "malformed",
            ClaimRejection::Unverified => "unverified",
            ClaimRejection::RateLimited => "rate-limited",
        }
    }
}

/// What [`Membership::learn_caller`] did with a caller's claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LearnOutcome {
    /// Learned; `changed` if the table changed beyond the heard stamp, `verified` if by a
    /// verified record.
    Learned {
        /// The address or weight changed, or the member is new.
        changed: bool,
        /// The claim carried a record that verified (or was already held).
        verified: bool,
    },
    /// Not taken: the table is full of better-known peers.
    Dropped,
    /// Rejected (counted).
    Rejected(ClaimRejection),
}

/// Counters of what the table verified and refused, since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MembershipStats {
    /// Ed25519 verifications run (records and epochs). A steady-state exchange adds none.
    pub signature_checks: u64,
    /// Records recognised as verified from the cache, without a check.
    pub cache_hits: u64,
    /// Rejected: [`ClaimRejection::Replayed`].
    pub replayed: u64,
    /// Rejected: [`ClaimRejection::WrongKey`].
    pub wrong_key: u64,
    /// Rejected: [`ClaimRejection::BadSignature`].
    pub bad_signature: u64,
    /// Rejected: [`ClaimRejection::Malformed`].
    pub malformed: u64,
    /// Rejected: [`ClaimRejection::Unverified`].
    pub unverified_refused: u64,
    /// Rejected: [`ClaimRejection::RateLimited`].
    pub rate_limited: u64,
    /// Higher epochs not adopted (no authority configured, or not signed by it).
    pub epoch_refused: u64,
}

impl MembershipStats {
    fn count(&mut self, r: ClaimRejection) {
        let c = match r {
            ClaimRejection::Replayed => &mut self.replayed,
            ClaimRejection::WrongKey => &mut self.wrong_key,
            ClaimRejection::BadSignature => &mut self.bad_signature,
            ClaimRejection::Malformed => &mut self.malformed,
            ClaimRejection::Unverified => &mut self.unverified_refused,
            ClaimRejection::RateLimited => &mut self.rate_limited,
        };
        *c += 1;
    }
}

/// What a [`Membership::merge`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Members that were not known before.
    pub added: usize,
    /// Known members whose address or weight changed.
    pub updated: usize,
    /// Members not taken because the table was full of better-known peers.
    pub dropped: usize,
    /// Members rejected (replayed, wrong key, bad or malformed signature, unverified where
    /// refused), counted by kind in [`Membership::stats`].
    pub rejected: usize,
    /// New members not taken because the source's budget was spent.
    pub rate_limited: usize,
    /// Whether the table's epoch moved up to the roster's.
    pub epoch_advanced: bool,
}

/// A source's learning window.
#[derive(Clone, Copy, Debug)]
struct Window {
    start: Instant,
    added: usize,
    checks: usize,
}

/// Why a record was not found verified.
enum VerifyFail {
    Record(RecordError),
    Budget,
}

/// The outcome of one claim inside the table.
enum Claim {
    Added,
    Updated,
    Unchanged,
    Dropped,
    Rejected(ClaimRejection),
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

    /// Whether `id`'s entry may be placed at all (before the budgets): its record verified,
    /// or (unverified) it spoke for itself from the host of the address it names. Unverified
    /// hearsay is never placed: it may be asked for rosters, but owns no key until it has
    /// spoken for itself. In [`MembershipMode::Admitted`]: only a verified record with a
    /// valid admission certificate, or an unverified member that spoke for itself from an
    /// address of [`MembershipPolicy::allow`]. The node itself is always placeable.
    pub fn placeable(&self, id: &str) -> bool {
        if id == self.me.id {
            return true;
        }
        self.peers.get(id).is_some_and(|e| self.entry_placeable(e))
    }

    fn entry_placeable(&self, e: &Entry) -> bool {
        match self.policy.mode {
            MembershipMode::Admitted => {
                e.admitted
                    || (e.record.is_none() && e.at_addr && self.policy.allow.contains(&e.addr))
            }
            _ => e.record.is_some() || e.at_addr,
        }
    }

    /// Whether `record` carries an admission certificate the policy's authority signed for
    /// its key (one signature check, counted; only in [`MembershipMode::Admitted`]).
    fn admits(&mut self, record: &RecordSig) -> bool {
        let (MembershipMode::Admitted, Some(authority), Some(cert)) =
            (self.policy.mode, self.policy.authority, record.admission)
        else {
            return false;
        };
        self.stats.signature_checks += 1;
        verify_admission(&authority, &record.key, &cert)
    }

    /// The members placement may use: the node itself first, then every placeable member
    /// ([`placeable`](Self::placeable)) within the placement budgets, by id. Budgets: one
    /// member per address (`host:port`: one listener is one node), at
    /// most [`MembershipPolicy::max_placed_per_host`] members per host of their address
    /// (an IP, or a host name) and [`MembershipPolicy::max_placed_per_prefix`] per
    /// network prefix (IPv4 /24, IPv6 /48). The node itself counts first; then members
    /// with a verified record that also spoke from their address, then other verified
    /// members, then unverified members that spoke from their address; within each, the
    /// longest known first (ties by id). A newcomer therefore never displaces an
    /// established member, and inventing members at one address places at most the host's
    /// budget of them. Each member is returned with its weight capped at
    /// [`MAX_PLACED_WEIGHT`] and its record (if verified).
    pub fn placed(&self) -> Vec<RosterMember> {
        let mut order: Vec<(u8, Instant, &String, &Entry)> = self
            .peers
            .iter()
            .filter(|(_, e)| self.entry_placeable(e))
            .map(|(id, e)| {
                let class = match (e.admitted || e.record.is_some(), e.at_addr) {
                    (true, true) => 0,
                    (true, false) => 1,
                    _ => 2,
                };
                (class, e.since, id, e)
            })
            .collect();
        order.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
        let mut hosts: BTreeMap<String, usize> = BTreeMap::new();
        let mut prefixes: BTreeMap<String, usize> = BTreeMap::new();
        let (per_host, per_prefix) = (
            self.policy.max_placed_per_host,
            self.policy.max_placed_per_prefix,
        );
        let mut addrs: BTreeSet<String> = BTreeSet::new();
        let mut admit = |addr: &str| -> bool {
            // One listener is one node: a second member at an address already placed is
            // an id invented for it.
            if addrs.contains(&addr.to_ascii_lowercase()) {
                return false;
            }
            let host = normal_host(host_of(addr));
            let prefix = prefix_of(&host);
            let h = hosts.get(&host).copied().unwrap_or(0);
            let p = prefixes.get(&prefix).copied().unwrap_or(0);
            if h >= per_host || p >= per_prefix {
                return false;
            }
            hosts.insert(host, h + 1);
            prefixes.insert(prefix, p + 1);
            addrs.insert(addr.to_ascii_lowercase());
            true
        };
        let mut me = self.me.clone();
        me.weight = me.weight.min(MAX_PLACED_WEIGHT);
        admit(&me.addr);
        let mut members = vec![me];
        for (_, _, id, e) in order {
            if admit(&e.addr) {
                members.push(RosterMember {
                    id: id.clone(),
                    addr: e.addr.clone(),
                    weight: e.weight.min(MAX_PLACED_WEIGHT),
                    record: match e.record {
                        Some(r) => Attestation::Signed(r),
                        None => Attestation::Unsigned,
                    },
                });
            }
        }
        members[1..].sort_by(|a, b| a.id.cmp(&b.id));
        members
    }

    /// The inbound half, unsigned: a caller identified itself with `X-DART-Node: id` and
    /// `X-DART-Peer-Addr: addr` and no record. Learns exactly that advertised pair (never
    /// the connection's source address, whose port is ephemeral), under the rules, as
    /// if the caller called from the host of `addr` (that host is the learning source, and
    /// the member counts as having spoken from its address: it is placed, see
    /// [`Membership::placed`]). For integrators whose transport already ties a caller to
    /// its address, and for tests; the caller that omits either header is anonymous and
    /// must not reach this call. Returns `Ok(true)` if the table changed beyond the heard
    /// stamp. Drivers that know the caller's IP call [`Membership::learn_caller`], which
    /// places the member only if that IP is its address's.
    pub fn learn(&mut self, now: Instant, id: &str, addr: &str) -> Result<bool, MemberProblem> {
        let source = host_of(addr).to_owned();
        match self.learn_caller(now, &source, id, addr, &Attestation::Unsigned, None)? {
            LearnOutcome::Learned { changed, .. } => Ok(changed),
            _ => Ok(false),
        }
    }

    /// The inbound half: a caller at `source` (its IP: the budget of new members is per
    /// source) claims `id` at `addr` with `record` (its `X-Peerblock-Record`, read by
    /// [`Attestation::from_header`], and the weight it signs; `None` weight keeps a known
    /// weight or [`DEFAULT_WEIGHT`]). `Err` only for an id or address outside the bounds
    /// (the driver should not have passed it); a refused claim is
    /// `Ok(LearnOutcome::Rejected(..))`, counted.
    pub fn learn_caller(
        &mut self,
        now: Instant,
        source: &str,
        id: &str,
        addr: &str,
        record: &Attestation,
        weight: Option<f64>,
    ) -> Result<LearnOutcome, MemberProblem> {
        check_identity(id, addr)?;
        if id == self.me.id {
            return Ok(LearnOutcome::Learned {
                changed: false,
                verified: false,
            });
        }
        let verified = matches!(record, Attestation::Signed(_));
        Ok(
            match self.claim(now, source, id, addr, weight, record, true, false) {
                Claim::Added | Claim::Updated => LearnOutcome::Learned {
                    changed: true,
                    verified,
                },
                Claim::Unchanged => LearnOutcome::Learned {
                    changed: false,
                    verified,
                },
                Claim::Dropped => LearnOutcome::Dropped,
                Claim::Rejected(r) => LearnOutcome::Rejected(r),
            },
        )
    }

    /// The outbound half: merges a roster fetched from `responder` (the id in its
    /// `X-DART-Node` header) at `now`, with `responder` as the learning source. See the
    /// type's rules. The refresh uses [`Membership::merge_from`] with the fetched address.
    pub fn merge(&mut self, now: Instant, responder: &str, roster: &Roster) -> MergeReport {
        self.merge_from(now, responder, responder, roster)
    }

    /// Merges a roster fetched from `source` (the address asked: the budget of new members
    /// is per source) whose `X-DART-Node` header named `responder`. The signature checks
    /// run here, on the caller's thread: [`plan_checks`](Self::plan_checks), then
    /// [`Checks::verify`], then [`merge_verified`](Self::merge_verified). A driver that
    /// wants them on threads of its own makes those three calls itself.
    pub fn merge_from(
        &mut self,
        now: Instant,
        source: &str,
        responder: &str,
        roster: &Roster,
    ) -> MergeReport {
        let verified = self.plan_checks(now, source, roster).verify();
        self.merge_verified(now, source, responder, roster, [verified])
    }

    /// The records of `roster` whose signatures a merge from `source` at `now` needs
    /// checked: signed, valid in shape, newer than the record held, not cached, and for
    /// new members only within the source's remaining budget of new members; at most the
    /// source's remaining budget of checks. Nothing is charged or changed but the
    /// source's learning window (opened or renewed at `now`); the checks are charged when
    /// their results are merged. A steady-state exchange plans none.
    pub fn plan_checks(&mut self, now: Instant, source: &str, roster: &Roster) -> Checks {
        let (mut remaining, checks) = self.remaining_budget(now, source);
        let mut items = Vec::new();
        for m in &roster.members {
            if items.len() >= checks {
                break;
            }
            let Attestation::Signed(r) = &m.record else {
                continue;
            };
            if m.id == self.me.id || m.check().is_err() {
                continue;
            }
            match self.peers.get(&m.id) {
                Some(e) => {
                    if e.record.is_some_and(|h| r.seq <= h.seq) {
                        continue;
                    }
                }
                None if remaining == 0 => continue,
                None => remaining -= 1,
            }
            let digest = r.digest(&m.id, &m.addr, m.weight);
            if self.cache.contains(&digest) {
                continue;
            }
            items.push(Check {
                id: m.id.clone(),
                addr: m.addr.clone(),
                weight: m.weight,
                record: *r,
                digest,
            });
        }
        Checks { items }
    }

    /// Merges `roster` (as [`merge_from`](Self::merge_from)) with the results of the
    /// checks [`plan_checks`](Self::plan_checks) planned for it, verified wherever the
    /// driver chose ([`Checks::verify`], one [`Verified`] per part of
    /// [`Checks::split`]). Each checked record is charged once to `source`'s check budget
    /// and counted in [`MembershipStats::signature_checks`]; a record that verified is
    /// taken without a second check and one that failed is rejected without one. A record
    /// the results do not cover is checked here, one by one, under the same rules.
    /// Results planned for another roster or an earlier state are harmless: a digest
    /// names one exact record, and a record's signature verifies or not once and for all.
    pub fn merge_verified(
        &mut self,
        now: Instant,
        source: &str,
        responder: &str,
        roster: &Roster,
        verified: impl IntoIterator<Item = Verified>,
    ) -> MergeReport {
        let mut report = MergeReport::default();
        let newer = roster.epoch > self.epoch && {
            let signed = match (&self.policy.authority, &roster.epoch_sig) {
                (Some(k), Some(sig)) => {
                    self.stats.signature_checks += 1;
                    verify_epoch(k, roster.epoch, sig)
                }
                _ => false,
            };
            if !signed {
                self.stats.epoch_refused += 1;
            }
            signed
        };
        for v in verified {
            self.stats.signature_checks += v.records as u64;
            self.window(now, source).checks += v.records;
            self.batch_ok.extend(v.good);
            self.batch_bad.extend(v.bad);
        }
        self.batch_ok.sort_unstable();
        for m in &roster.members {
            if m.id == self.me.id || m.check().is_err() {
                continue;
            }
            let first_hand = m.id == responder;
            match self.claim(
                now,
                source,
                &m.id,
                &m.addr,
                Some(m.weight),
                &m.record,
                first_hand,
                newer,
            ) {
                Claim::Added => report.added += 1,
                Claim::Updated => report.updated += 1,
                Claim::Unchanged => {}
                Claim::Dropped => report.dropped += 1,
                Claim::Rejected(ClaimRejection::RateLimited) => report.rate_limited += 1,
                Claim::Rejected(_) => report.rejected += 1,
            }
        }
        self.batch_ok.clear();
        self.batch_bad.clear();
        if newer {
            self.epoch = roster.epoch;
            self.epoch_sig = roster.epoch_sig;
            report.epoch_advanced = true;
        }
        report
    }

    /// New members and signature checks `source` may still spend in its current window.
    fn remaining_budget(&mut self, now: Instant, source: &str) -> (usize, usize) {
        let (max_new, max_checks) = (
            self.policy.max_new_per_source,
            self.policy.max_checks_per_source,
        );
        let w = self.window(now, source);
        (
            max_new.saturating_sub(w.added),
            max_checks.saturating_sub(w.checks),
        )
    }

    /// Applies one claim under the rules (bounds already checked, never our own id).
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &mut self,
        now: Instant,
        source: &str,
        id: &str,
        addr: &str,
        weight: Option<f64>,
        record: &Attestation,
        first_hand: bool,
        newer_epoch: bool,
    ) -> Claim {
        let heard = first_hand.then_some(now);
        let at_addr = first_hand && same_host(source, addr);
        let known = self.peers.get(id);
        let reject = |this: &mut Self, r: ClaimRejection| {
            this.stats.count(r);
            Claim::Rejected(r)
        };
        match record {
            Attestation::Malformed(_) => reject(self, ClaimRejection::Malformed),
            Attestation::Signed(r) => {
                let w = weight.unwrap_or(DEFAULT_WEIGHT);
                if let Some(held) = known.and_then(|e| e.record.as_ref().map(|h| (e, h))) {
                    let (e, h) = held;
                    if r.seq < h.seq {
                        return reject(self, ClaimRejection::Replayed);
                    }
                    if r.seq == h.seq {
                        if r.same_record(h) && e.addr == addr && e.weight == w {
                            // The record held: verified already, no check. A certificate
                            // it did not carry (or that did not verify) is taken if it
                            // verifies; a held one is never replaced by another.
                            let newly_admitted =
                                !e.admitted && r.admission.is_some() && self.admits(r);
                            if let Some(e) = self.peers.get_mut(id) {
                                e.heard = heard.max(e.heard);
                                e.at_addr |= at_addr;
                                if newly_admitted {
                                    if let Some(held) = e.record.as_mut() {
                                        held.admission = r.admission;
                                    }
                                    e.admitted = true;
                                    return Claim::Updated;
                                }
                            }
                            return Claim::Unchanged;
                        }
                        return reject(self, ClaimRejection::Replayed);
                    }
                }
                let new = known.is_none();
                if new && !self.budget(now, source) {
                    return reject(self, ClaimRejection::RateLimited);
                }
                if let Err(e) = self.verify(now, source, r, id, addr, w) {
                    return reject(
                        self,
                        match e {
                            VerifyFail::Budget => ClaimRejection::RateLimited,
                            VerifyFail::Record(RecordError::IdMismatch) => ClaimRejection::WrongKey,
                            VerifyFail::Record(RecordError::BadKey | RecordError::BadSignature) => {
                                ClaimRejection::BadSignature
                            }
                            VerifyFail::Record(RecordError::Member(_)) => ClaimRejection::Malformed,
                        },
                    );
                }
                self.apply(now, source, id, addr, Some(w), heard, at_addr, Some(*r))
            }
            Attestation::Unsigned => {
                if self.policy.mode == MembershipMode::VerifiedOnly {
                    return reject(self, ClaimRejection::Unverified);
                }
                match known {
                    Some(e) if e.record.is_some() => {
                        if e.addr != addr || weight.is_some_and(|w| w != e.weight) {
                            return reject(self, ClaimRejection::Unverified);
                        }
                        Claim::Unchanged
                    }
                    Some(_) if !first_hand && !newer_epoch => Claim::Unchanged,
                    Some(_) => self.apply(now, source, id, addr, weight, heard, at_addr, None),
                    None => {
                        if !self.budget(now, source) {
                            return reject(self, ClaimRejection::RateLimited);
                        }
                        self.apply(now, source, id, addr, weight, heard, at_addr, None)
                    }
                }
            }
        }
    }

    /// Verifies a record: the cache, then the merge's batch, then one check charged to
    /// `source`'s check budget.
    fn verify(
        &mut self,
        now: Instant,
        source: &str,
        r: &RecordSig,
        id: &str,
        addr: &str,
        w: f64,
    ) -> Result<(), VerifyFail> {
        let digest = r.digest(id, addr, w);
        if self.cache.contains(&digest) {
            self.stats.cache_hits += 1;
            return Ok(());
        }
        if let Some(e) = self.batch_bad.remove(&digest) {
            return Err(VerifyFail::Record(e));
        }
        if self.batch_ok.binary_search(&digest).is_err() {
            let max = self.policy.max_checks_per_source;
            let window = self.window(now, source);
            if window.checks >= max {
                return Err(VerifyFail::Budget);
            }
            window.checks += 1;
            self.stats.signature_checks += 1;
            r.verify(id, addr, w).map_err(VerifyFail::Record)?;
        }
        if self.cache_order.len() >= VERIFY_CACHE_CAPACITY {
            if let Some(old) = self.cache_order.pop_front() {
                self.cache.remove(&old);
            }
        }
        if self.cache.insert(digest) {
            self.cache_order.push_back(digest);
        }
        Ok(())
    }

    /// `source`'s window, opened (forgetting the oldest window when
    /// [`MAX_LEARN_SOURCES`] are tracked) or renewed once `learn_interval` has passed.
    fn window(&mut self, now: Instant, source: &str) -> &mut Window {
        let interval = self.policy.learn_interval;
        // A source already tracked is found without copying its name (a merge asks for
        // its window once or twice a member).
        if !self.sources.contains_key(source) {
            if self.sources.len() >= MAX_LEARN_SOURCES {
                let oldest = self
                    .sources
                    .iter()
                    .min_by_key(|(_, w)| w.start)
                    .map(|(s, _)| s.clone());
                if let Some(s) = oldest {
                    self.sources.remove(&s);
                }
            }
            self.sources.insert(
                source.to_owned(),
                Window {
                    start: now,
                    added: 0,
                    checks: 0,
                },
            );
        }
        let w = self
            .sources
            .get_mut(source)
            .expect("the source's window was inserted above");
        if now.saturating_duration_since(w.start) >= interval {
            *w = Window {
                start: now,
                added: 0,
                checks: 0,
            };
        }
        w
    }

    /// Whether `source` may add one more new member now.
    fn budget(&mut self, now: Instant, source: &str) -> bool {
        let max = self.policy.max_new_per_source;
        self.window(now, source).added < max
    }

    /// Charges one new member to `source`.
    fn charge(&mut self, now: Instant, source: &str) {
        self.window(now, source).added += 1;
    }

    /// Inserts or updates a claim that passed the rules.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        now: Instant,
        source: &str,
        id: &str,
        addr: &str,
        weight: Option<f64>,
        heard: Option<Instant>,
        at_addr: bool,
        record: Option<RecordSig>,
    ) -> Claim {
        let admitted = record.as_ref().is_some_and(|r| self.admits(r));
        if let Some(e) = self.peers.get_mut(id) {
            let mut changed = false;
            if e.addr != addr {
                e.addr = addr.to_owned();
                e.at_addr = at_addr;
                changed = true;
            } else {
                e.at_addr |= at_addr;
            }
            if let Some(w) = weight {
                if e.weight != w {
                    e.weight = w;
                    changed = true;
                }
            }
            if record.is_some() {
                changed |= e.record.is_none() || e.admitted != admitted;
                e.record = record;
                e.admitted = admitted;
            }
            if heard.is_some() {
                e.heard = heard.max(e.heard);
            }
            return if changed {
                Claim::Updated
            } else {
                Claim::Unchanged
            };
        }
        if self.peers.len() >= self.capacity && !self.evict_for(heard.is_some(), record.is_some()) {
            return Claim::Dropped;
        }
        self.charge(now, source);
        self.peers.insert(
            id.to_owned(),
            Entry {
                addr: addr.to_owned(),
                weight: weight.unwrap_or(DEFAULT_WEIGHT),
                heard,
                record,
                at_addr,
                since: now,
                admitted,
            },
        );
        Claim::Added
    }

    /// Frees one slot for a newcomer, per the eviction rule. Returns whether it did.
    fn evict_for(&mut self, first_hand: bool, verified: bool) -> bool {
        let hearsay = |want_verified: bool| {
            self.peers
                .iter()
                .find(|(_, e)| e.heard.is_none() && e.record.is_some() == want_verified)
                .map(|(id, _)| id.clone())
        };
        let victim = match hearsay(false) {
            Some(id) => Some(id),
            None if first_hand || verified => match hearsay(true) {
                Some(id) => Some(id),
                None if first_hand => self
                    .peers
                    .iter()
                    .min_by_key(|(_, e)| e.heard)
                    .map(|(id, _)| id.clone()),
                None => None,
            },
            None => None,
        };
        match victim {
            Some(id) => {
                self.peers.remove(&id);
                true
            }
            None => false,
        }
    }
}

/// The host part of an address or a learning source: `host` of `host:port`, the text
/// between the brackets of `[v6]:port`, and the whole text otherwise (an IP without a
/// port, as a caller's source is given; a bare IPv6 address).
pub(crate) fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match addr.rsplit_once(':') {
        Some((host, _)) if !host.contains(':') => host,
        _ => addr,
    }
}

/// A host as compared: an IP address in its canonical text (an IPv4-mapped IPv6 address
/// as its IPv4 address, as a dual-stack listener reports an IPv4 caller), a name in lower
/// case.
fn normal_host(host: &str) -> String {
    match host.parse::<core::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().to_string(),
        Err(_) => host.to_ascii_lowercase(),
    }
}

/// Whether a claim learned from `source` came from the host of the address `addr` it
/// names.
fn same_host(source: &str, addr: &str) -> bool {
    normal_host(host_of(source)) == normal_host(host_of(addr))
}

/// The network prefix a (normalised) host counts against: an IPv4 /24, an IPv6 /48, a
/// host name itself.
fn prefix_of(host: &str) -> String {
    match host.parse::<core::net::IpAddr>() {
        Ok(core::net::IpAddr::V4(v4)) => {
            let [a, b, c, _] = v4.octets();
            format!("{a}.{b}.{c}.0/24")
        }
        Ok(core::net::IpAddr::V6(v6)) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2])
        }
        Err(_) => host.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_compare_by_address_whatever_their_spelling() {
        assert_eq!(host_of("10.0.0.1:7070"), "10.0.0.1");
        assert_eq!(host_of("[::1]:7070"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("10.0.0.1"), "10.0.0.1");
        assert!(
            same_host("::ffff:10.0.0.1", "10.0.0.1:7070"),
            "a mapped caller"
        );
        assert!(same_host("[0:0::1]:9", "[::1]:7070"));
        assert!(same_host("Node.Example:1", "node.example:2"));
        assert!(!same_host("10.0.0.1", "10.0.0.2:7070"));
        assert_eq!(prefix_of("10.1.2.3"), "10.1.2.0/24");
        assert_eq!(prefix_of("2001:db8:1:2::5"), "2001:db8:1::/48");
        assert_eq!(prefix_of("node.example"), "node.example");
    }

    fn m(id: &str, addr: &str, weight: f64) -> RosterMember {
        RosterMember {
            id: id.into(),
            addr: addr.into(),
            weight,
            record: Default::default(),
        }
    }

    fn table(cap: usize) -> Membership {
        Membership::new(m("me", "10.0.0.1:7070", 1.0), 5, cap).unwrap()
    }

    const T1: Instant = Instant::from_secs(1);
    const T2: Instant = Instant::from_secs(2);

    #[test]
    fn snapshot_always_includes_self_first() {
        let mut t = table(8);
        t.learn(T1, "b", "h:2").unwrap();
        let r = t.snapshot();
        assert_eq!(r.members[0].id, "me");
        assert_eq!(r.epoch, 5);
        assert!(r.contains("b"));
    }

    #[test]
    fn learn_takes_the_advertised_address_and_ignores_self_claims() {
        let mut t = table(8);
        assert_eq!(t.learn(T1, "b", "10.0.0.2:7070"), Ok(true));
        assert_eq!(t.addr("b"), Some("10.0.0.2:7070"));
        assert_eq!(t.heard("b"), Some(T1));
        // A caller's self-report overrides what we heard about it.
        assert_eq!(t.learn(T2, "b", "10.0.0.3:7070"), Ok(true));
        assert_eq!(t.addr("b"), Some("10.0.0.3:7070"));
        assert_eq!(t.learn(T2, "me", "evil:1"), Ok(false));
        assert_eq!(t.addr("me"), Some("10.0.0.1:7070"));
        assert_eq!(t.learn(T2, "", "h:1"), Err(MemberProblem::EmptyId));
    }

    #[test]
    fn lower_or_equal_epoch_only_adds_unknown_members() {
        let mut t = table(8);
        t.learn(T1, "b", "b:1").unwrap();
        let r = Roster {
            epoch: 5,
            members: vec![
                m("resp", "r:1", 2.0),
                m("b", "stale:1", 9.0),
                m("c", "c:1", 1.0),
            ],
            epoch_sig: None,
        };
        let rep = t.merge(T2, "resp", &r);
        assert_eq!(rep.added, 2);
        assert_eq!(rep.updated, 0);
        assert!(!rep.epoch_advanced);
        assert_eq!(
            t.addr("b"),
            Some("b:1"),
            "hearsay at an old epoch never overwrites"
        );
        assert_eq!(
            t.heard("resp"),
            Some(T2),
            "liveness credited to the responder id"
        );
        assert_eq!(t.heard("c"), None, "third parties are hearsay");
        assert_eq!(t.epoch(), 5);
    }

    #[test]
    fn higher_authority_signed_epoch_overwrites_and_is_adopted_but_never_self() {
        let authority = crate::roster::NodeKey::from_seed(&[9; 32]);
        let mut t = table(8)
            .with_policy(MembershipPolicy {
                authority: Some(authority.public()),
                ..MembershipPolicy::default()
            })
            .unwrap();
        t.learn(T1, "b", "b:1").unwrap();
        let r = Roster {
            epoch: 9,
            members: vec![m("b", "b:2", 3.0), m("me", "elsewhere:1", 0.0)],
            epoch_sig: Some(crate::roster::record::sign_epoch(&authority, 9)),
        };
        let rep = t.merge(T2, "x", &r);
        assert_eq!(rep.updated, 1);
        assert!(rep.epoch_advanced);
        assert_eq!(t.epoch(), 9);
        assert_eq!(t.snapshot().epoch_sig, r.epoch_sig, "served onward");
        assert_eq!(t.addr("b"), Some("b:2"));
        assert_eq!(t.addr("me"), Some("10.0.0.1:7070"));
        // Epochs never go down.
        t.merge(
            T2,
            "x",
            &Roster {
                epoch: 1,
                members: vec![],
                epoch_sig: None,
            },
        );
        t.raise_epoch(3);
        assert_eq!(t.epoch(), 9);
    }

    #[test]
    fn an_unsigned_higher_epoch_is_refused_and_only_adds() {
        let mut t = table(8);
        t.learn(T1, "b", "b:1").unwrap();
        let r = Roster {
            epoch: 9,
            members: vec![m("b", "b:2", 3.0), m("c", "c:1", 1.0)],
            epoch_sig: None,
        };
        let rep = t.merge(T2, "x", &r);
        assert!(!rep.epoch_advanced);
        assert_eq!((rep.added, rep.updated), (1, 0));
        assert_eq!(t.epoch(), 5);
        assert_eq!(t.addr("b"), Some("b:1"));
        assert_eq!(t.stats().epoch_refused, 1);
    }

    #[test]
    fn table_is_bounded_and_first_hand_beats_hearsay() {
        let mut t = table(3);
        t.learn(T1, "a", "a:1").unwrap();
        t.learn(T2, "b", "b:1").unwrap();
        let r = Roster {
            epoch: 1,
            epoch_sig: None,
            members: (0..10).map(|i| m(&format!("h{i}"), "h:1", 1.0)).collect(),
        };
        let rep = t.merge(T2, "nobody", &r);
        assert_eq!(t.len(), 3);
        assert_eq!(rep.added, 10, "hearsay displaces hearsay");
        assert_eq!(t.heard("a"), Some(T1));
        assert_eq!(t.heard("b"), Some(T2));
        // A first-hand newcomer takes the hearsay slot.
        t.learn(T2, "c", "c:1").unwrap();
        assert_eq!(t.len(), 3);
        assert!(t.addr("a").is_some() && t.addr("b").is_some() && t.addr("c").is_some());
        // Now all first-hand: hearsay is dropped, a first-hand newcomer evicts the oldest.
        let rep = t.merge(T2, "nobody", &r);
        assert_eq!(rep.dropped, 10);
        t.learn(Instant::from_secs(3), "d", "d:1").unwrap();
        assert_eq!(t.addr("a"), None, "a was heard from longest ago");
        assert_eq!(t.len(), 3);
    }
}
