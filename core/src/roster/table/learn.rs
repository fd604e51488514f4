//! Learning: the inbound claims of callers and the outbound merges of fetched rosters,
//! under the table's rules, and what they report.

use super::budget::VerifyFail;
use super::placement::{host_of, same_host};
use super::{Entry, Membership, MembershipMode};
use crate::roster::record::{verify_epoch, Attestation, RecordError, RecordSig};
use crate::roster::verify::{Check, Checks, Verified};
use crate::roster::{check_identity, MemberProblem, Roster, DEFAULT_WEIGHT};
use crate::time::Instant;

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

/// The outcome of one claim inside the table.
enum Claim {
    Added,
    Updated,
    Unchanged,
    Dropped,
    Rejected(ClaimRejection),
}

impl Membership {
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
