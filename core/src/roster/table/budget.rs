//! Learning budgets: each source's window of new members and signature checks, and the
//! cache of records verified before.

use super::Membership;
use crate::roster::record::{RecordError, RecordSig};
use crate::time::Instant;

/// Most sources whose learning budgets are tracked at once: 1024 (each a source text of at
/// most an address and two words). When full, the source whose window started longest ago
/// is forgotten (its budget refills early: a bounded leak, never unbounded memory).
pub const MAX_LEARN_SOURCES: usize = 1024;

/// Records whose signature verified and that are remembered by digest so the same record
/// is never verified twice: 4096 digests of 32 bytes (a full roster's worth), evicted
/// oldest first. Records the table holds are recognised without the cache (a record equal
/// to the one held costs no check).
pub const VERIFY_CACHE_CAPACITY: usize = 4096;

/// A source's learning window.
#[derive(Clone, Copy, Debug)]
pub(super) struct Window {
    start: Instant,
    added: usize,
    pub(super) checks: usize,
}

/// Why a record was not found verified.
pub(super) enum VerifyFail {
    Record(RecordError),
    Budget,
}

impl Membership {
    /// New members and signature checks `source` may still spend in its current window.
    pub(super) fn remaining_budget(&mut self, now: Instant, source: &str) -> (usize, usize) {
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

    /// Verifies a record: the cache, then the merge's batch, then one check charged to
    /// `source`'s check budget.
    pub(super) fn verify(
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
    pub(super) fn window(&mut self, now: Instant, source: &str) -> &mut Window {
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
    pub(super) fn budget(&mut self, now: Instant, source: &str) -> bool {
        let max = self.policy.max_new_per_source;
        self.window(now, source).added < max
    }

    /// Charges one new member to `source`.
    pub(super) fn charge(&mut self, now: Instant, source: &str) {
        self.window(now, source).added += 1;
    }
}
