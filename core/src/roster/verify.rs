//! Signature checks planned ahead of a merge, so that a driver can run them on threads of
//! its own ([`Membership::plan_checks`], [`Checks::verify`],
//! [`Membership::merge_verified`]).
//!
//! Core decides *what* is verified (which records a merge needs checked, within the
//! source's budgets) and *how the work may be divided* ([`Checks::split`]); the driver
//! decides only *where* each part runs. Verification is pure computation: the same checks
//! always give the same [`Verified`].
//!
//! [`Membership::plan_checks`]: super::Membership::plan_checks
//! [`Membership::merge_verified`]: super::Membership::merge_verified

use super::record::{verify_batch, Claimed, RecordError, RecordSig};

/// Fewest records verified as one batch: below it, one by one (a batch has a fixed cost of
/// its own and gains little on a handful).
pub const MIN_VERIFY_BATCH: usize = 8;

/// Fewest records in one part of [`Checks::split`]: a smaller part would cost a thread
/// hand-off for less work than the hand-off itself, and batch verification gains most on
/// large batches.
pub const MIN_PARALLEL_PART: usize = 256;

/// One record a merge needs verified, owned (no borrow of the roster), with its digest.
#[derive(Clone, Debug)]
pub(super) struct Check {
    pub(super) id: String,
    pub(super) addr: String,
    pub(super) weight: f64,
    pub(super) record: RecordSig,
    pub(super) digest: [u8; 32],
}

impl Check {
    fn claimed(&self) -> Claimed<'_> {
        Claimed {
            record: &self.record,
            id: &self.id,
            addr: &self.addr,
            weight: self.weight,
        }
    }
}

/// The signature checks one merge needs, planned by [`Membership::plan_checks`]: owned and
/// `Send`, so a driver can split them ([`split`](Self::split)) and verify each part on a
/// thread of its own ([`verify`](Self::verify)) before handing the results to
/// [`Membership::merge_verified`].
///
/// [`Membership::plan_checks`]: super::Membership::plan_checks
/// [`Membership::merge_verified`]: super::Membership::merge_verified
#[derive(Clone, Debug, Default)]
pub struct Checks {
    pub(super) items: Vec<Check>,
}

impl Checks {
    /// Records planned for a check.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing needs a check (a steady-state exchange: every record is held or
    /// cached).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Splits the checks into at most `parts` parts of near-equal size, in order, none
    /// smaller than [`MIN_PARALLEL_PART`] (so fewer parts than asked when there are few
    /// checks, and always at least one). `parts` is how many threads the driver can give
    /// the work; 0 is taken as 1.
    pub fn split(self, parts: usize) -> Vec<Checks> {
        let n = self.items.len();
        let parts = parts.max(1).min((n / MIN_PARALLEL_PART).max(1));
        if parts == 1 {
            return vec![self];
        }
        let (base, extra) = (n / parts, n % parts);
        let mut rest = self.items;
        let mut out = Vec::with_capacity(parts);
        for p in 0..parts {
            let size = base + usize::from(p < extra);
            let tail = rest.split_off(size);
            out.push(Checks { items: rest });
            rest = tail;
        }
        out
    }

    /// Verifies every planned record: pure computation (no I/O, no clock, no RNG),
    /// deterministic. All of them as one Ed25519 batch; a batch that fails is halved and
    /// each half verified again, down to single records, so one bad record among many costs
    /// a few batches rather than a check of every record one by one. When both halves of
    /// a failed batch fail too, bad records are many and the rest are checked one by one
    /// (an attacker's roster of bad signatures costs at most about twice the single checks
    /// of its records, never a cascade of batches).
    pub fn verify(self) -> Verified {
        let mut out = Verified {
            records: self.items.len(),
            ..Verified::default()
        };
        bisect(&self.items, false, &mut out);
        out
    }
}

/// Verifies `items` into `out`: as a batch (when large enough), halving on failure.
/// `sibling_failed` says the other half of the batch these came from failed too.
fn bisect(items: &[Check], sibling_failed: bool, out: &mut Verified) {
    if items.len() < MIN_VERIFY_BATCH || sibling_failed {
        for c in items {
            match c.record.verify(&c.id, &c.addr, c.weight) {
                Ok(()) => out.good.push(c.digest),
                Err(e) => out.bad.push((c.digest, e)),
            }
        }
        return;
    }
    let claims: Vec<Claimed<'_>> = items.iter().map(Check::claimed).collect();
    if verify_batch(&claims) {
        out.good.extend(items.iter().map(|c| c.digest));
        return;
    }
    let (a, b) = items.split_at(items.len() / 2);
    let before = out.bad.len();
    bisect(a, false, out);
    // The first half held a bad record (or was checked one by one): if it was all bad,
    // the second half is likely bad too, so skip straight to single checks.
    let first_all_bad = out.bad.len() - before == a.len() && !a.is_empty();
    bisect(b, first_all_bad, out);
}

/// What [`Checks::verify`] found: the digests of the records that verified and of those
/// that did not (with why). Only `verify` makes one, so a driver cannot mark a record
/// verified; a `Verified` handed to another merge than the one it was planned for is
/// harmless (a digest names one exact record, and a record that verified once always
/// does).
#[derive(Clone, Debug, Default)]
pub struct Verified {
    pub(super) good: Vec<[u8; 32]>,
    pub(super) bad: Vec<([u8; 32], RecordError)>,
    /// Records checked (each counted once, however many batches it was part of).
    pub(super) records: usize,
}

impl Verified {
    /// Records checked.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Records whose signature verified.
    pub fn verified(&self) -> usize {
        self.good.len()
    }

    /// Records that did not verify.
    pub fn failed(&self) -> usize {
        self.bad.len()
    }
}
