//! Upload pacing: a token bucket of bytes, with time as a value.
//!
//! A node with an upload budget (`[listener] upload_bytes_per_second`) shares one
//! [`TokenBucket`] between all its connections; a per-connection ceiling is a second bucket
//! per connection. Before each socket write the driver asks for as many bytes as it wants
//! to write ([`TokenBucket::take`], or [`take_both`] for the two buckets); it writes at most
//! the granted amount, gives back what the socket did not take ([`TokenBucket::refund`]),
//! and when told to wait, sleeps until the instant it was given. The bucket never reads a
//! clock and never blocks: the driver owns the timer.
//!
//! Rules (each has a test below):
//! - a new bucket is full: `burst` bytes go at once;
//! - tokens accrue at `bytes_per_second`, exactly (no rounding drift: fractions of a byte
//!   are kept), and never beyond `burst`;
//! - a grant is at most what is wanted and what is available, and never less than
//!   [`MIN_GRANT`] (or the whole want, or the burst, if smaller): below that the caller is
//!   told to wait until that much has accrued, so a paced sender writes in chunks, not in
//!   single bytes;
//! - time going backwards accrues nothing (and breaks nothing);
//! - refunded bytes are available again at once (capped at `burst`).

use crate::time::{Duration, Instant};

/// The smallest grant worth a socket write (bytes): a caller that wants more is told to
/// wait until at least this much has accrued (a TCP segment's worth and a bit, so a paced
/// sender issues a few hundred writes a second, not millions).
pub const MIN_GRANT: u64 = 4096;

/// The smallest rate accepted (bytes per second): below it one [`MIN_GRANT`] takes more
/// than four seconds, and a server's send deadline would cut most responses.
pub const MIN_RATE: u64 = 1024;

/// Default burst as a fraction of a second's rate: 50 ms of tokens
/// ([`PaceConfig::with_rate`]).
pub const DEFAULT_BURST_DIVISOR: u64 = 20;

/// The smallest default burst (bytes): with tiny rates a burst of 50 ms would be below a
/// grant.
pub const MIN_DEFAULT_BURST: u64 = 16 * 1024;

const NANOS: u128 = 1_000_000_000;

/// A bucket's rate and depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaceConfig {
    /// Sustained rate, bytes per second (at least [`MIN_RATE`]).
    pub bytes_per_second: u64,
    /// Bytes that may go back to back after an idle spell (at least 1).
    pub burst: u64,
}

impl PaceConfig {
    /// `bytes_per_second` with the default burst: 50 ms of it, at least
    /// [`MIN_DEFAULT_BURST`].
    pub fn with_rate(bytes_per_second: u64) -> PaceConfig {
        PaceConfig {
            bytes_per_second,
            burst: (bytes_per_second / DEFAULT_BURST_DIVISOR).max(MIN_DEFAULT_BURST),
        }
    }

    /// Checks the rules of the fields.
    pub fn validate(&self) -> Result<(), PaceConfigError> {
        if self.bytes_per_second < MIN_RATE {
            return Err(PaceConfigError::RateTooLow(self.bytes_per_second));
        }
        if self.burst == 0 {
            return Err(PaceConfigError::ZeroBurst);
        }
        Ok(())
    }
}

/// A pacing configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaceConfigError {
    /// The rate is below [`MIN_RATE`].
    #[error("bytes_per_second is {0}: must be at least {MIN_RATE} (or the limit off)")]
    RateTooLow(u64),
    /// The burst is zero: nothing could ever be sent.
    #[error("burst is zero: nothing could ever be sent")]
    ZeroBurst,
}

/// What a [`TokenBucket::take`] allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Write at most this many bytes now (never more than wanted; `0` only when nothing
    /// was wanted).
    Now(u64),
    /// Nothing now: ask again at this instant.
    Wait(Instant),
}

/// A token bucket of bytes. Pure: every method is given `now`.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    config: PaceConfig,
    /// Tokens in nano-bytes (bytes × 10⁹), so accrual of `rate` per second is exact per
    /// nanosecond.
    nano_tokens: u128,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(config: PaceConfig, now: Instant) -> Result<TokenBucket, PaceConfigError> {
        config.validate()?;
        Ok(TokenBucket {
            config,
            nano_tokens: u128::from(config.burst) * NANOS,
            last: now,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PaceConfig {
        &self.config
    }

    fn cap(&self) -> u128 {
        u128::from(self.config.burst) * NANOS
    }

    fn refill(&mut self, now: Instant) {
        if let Some(elapsed) = now.checked_duration_since(self.last) {
            let add = elapsed.as_nanos() * u128::from(self.config.bytes_per_second);
            self.nano_tokens = self.nano_tokens.saturating_add(add).min(self.cap());
            self.last = now;
        }
    }

    /// Whole bytes available at `now`.
    pub fn available(&mut self, now: Instant) -> u64 {
        self.refill(now);
        u64::try_from(self.nano_tokens / NANOS).unwrap_or(u64::MAX)
    }

    /// The smallest grant for a want of `want` bytes.
    fn min_grant(&self, want: u64) -> u64 {
        want.min(MIN_GRANT).min(self.config.burst).max(1)
    }

    /// Asks to send `want` bytes at `now`: either a grant of `1..=want` bytes (taken from
    /// the bucket) or the instant at which at least the minimum grant will be there.
    pub fn take(&mut self, now: Instant, want: u64) -> Grant {
        if want == 0 {
            return Grant::Now(0);
        }
        let have = self.available(now);
        let min = self.min_grant(want);
        if have >= min {
            let n = have.min(want);
            self.nano_tokens -= u128::from(n) * NANOS;
            return Grant::Now(n);
        }
        let missing = u128::from(min) * NANOS - self.nano_tokens;
        let rate = u128::from(self.config.bytes_per_second);
        let nanos = missing.div_ceil(rate);
        let wait = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        Grant::Wait(now.saturating_add(wait))
    }

    /// Gives back `n` granted bytes that were not sent (capped at the burst).
    pub fn refund(&mut self, n: u64) {
        self.nano_tokens = self
            .nano_tokens
            .saturating_add(u128::from(n) * NANOS)
            .min(self.cap());
    }
}

/// A grant from two buckets at once (a connection's own ceiling first, then its node's
/// shared budget): the smaller of the two grants, each bucket charged only that. If either
/// says wait, nothing is taken from either and its instant is returned (the second is not
/// asked when the first already says wait).
pub fn take_both(
    first: &mut TokenBucket,
    second: &mut TokenBucket,
    now: Instant,
    want: u64,
) -> Grant {
    let a = match first.take(now, want) {
        Grant::Now(n) => n,
        wait => return wait,
    };
    match second.take(now, a) {
        Grant::Now(b) => {
            first.refund(a - b);
            Grant::Now(b)
        }
        Grant::Wait(at) => {
            first.refund(a);
            Grant::Wait(at)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    fn bucket(rate: u64, burst: u64) -> TokenBucket {
        TokenBucket::new(
            PaceConfig {
                bytes_per_second: rate,
                burst,
            },
            ms(0),
        )
        .unwrap()
    }

    #[test]
    fn a_new_bucket_is_full_and_grants_at_most_the_want() {
        let mut b = bucket(100_000, 50_000);
        assert_eq!(b.take(ms(0), 10_000), Grant::Now(10_000));
        assert_eq!(b.take(ms(0), 100_000), Grant::Now(40_000));
        assert_eq!(b.available(ms(0)), 0);
        assert_eq!(b.take(ms(0), 0), Grant::Now(0));
    }

    #[test]
    fn tokens_accrue_at_the_rate_and_stop_at_the_burst() {
        let mut b = bucket(100_000, 50_000);
        assert_eq!(b.take(ms(0), 50_000), Grant::Now(50_000));
        assert_eq!(b.available(ms(100)), 10_000);
        assert_eq!(b.available(ms(10_000)), 50_000, "capped at the burst");
    }

    #[test]
    fn fractions_of_a_byte_are_kept() {
        // 3 bytes per 1000 ms at 3 B/s... use 1500 B/s: 1.5 bytes per ms.
        let mut b = bucket(1500, 1_000_000);
        b.nano_tokens = 0;
        let mut t = 0;
        for _ in 0..1000 {
            t += 1;
            b.refill(ms(t));
        }
        assert_eq!(
            b.available(ms(t)),
            1500,
            "1000 steps of 1.5 bytes, no drift"
        );
    }

    #[test]
    fn below_the_minimum_grant_the_caller_waits_exactly_until_it_accrues() {
        let mut b = bucket(4096, 16_384);
        assert_eq!(b.take(ms(0), 16_384), Grant::Now(16_384));
        // MIN_GRANT = 4096 bytes at 4096 B/s: one second.
        assert_eq!(b.take(ms(0), 100_000), Grant::Wait(ms(1000)));
        assert_eq!(b.take(ms(999), 100_000), Grant::Wait(ms(1000)));
        assert_eq!(b.take(ms(1000), 100_000), Grant::Now(4096));
        // A want below the minimum grant waits only for itself.
        assert_eq!(
            b.take(ms(1000), 100),
            Grant::Wait(Instant::from_nanos(1_000_000_000 + 24_414_063))
        );
    }

    #[test]
    fn the_minimum_grant_is_capped_by_a_small_burst() {
        let mut b = bucket(2048, 1000);
        assert_eq!(b.take(ms(0), 5000), Grant::Now(1000));
        // The burst (1000) is below MIN_GRANT: wait for 1000 bytes, not 4096 (never).
        match b.take(ms(0), 5000) {
            Grant::Wait(at) => assert!(at <= ms(500) && at > ms(480), "{at:?}"),
            g => panic!("{g:?}"),
        }
    }

    #[test]
    fn time_going_backwards_accrues_nothing() {
        let mut b = bucket(100_000, 50_000);
        assert_eq!(b.take(ms(1000), 50_000), Grant::Now(50_000));
        assert_eq!(b.available(ms(500)), 0);
        assert_eq!(b.available(ms(1100)), 10_000);
    }

    #[test]
    fn refunds_come_back_capped_at_the_burst() {
        let mut b = bucket(100_000, 50_000);
        assert_eq!(b.take(ms(0), 30_000), Grant::Now(30_000));
        b.refund(10_000);
        assert_eq!(b.available(ms(0)), 30_000);
        b.refund(1_000_000);
        assert_eq!(b.available(ms(0)), 50_000);
    }

    #[test]
    fn sustained_rate_over_a_long_run_matches_the_config() {
        // A sender taking whatever it is granted, waking when told: 10 s at 1 MB/s with a
        // 50 ms burst sends 10 MB + the initial burst, within one grant.
        let mut b = TokenBucket::new(PaceConfig::with_rate(1_000_000), ms(0)).unwrap();
        let mut now = ms(0);
        let mut sent = 0u64;
        // About 2,500 grants and as many waits; a bucket that neither grants bytes nor
        // moves the clock fails here instead of hanging the test.
        let mut steps = 0u32;
        while now < ms(10_000) {
            steps += 1;
            assert!(
                steps < 100_000,
                "no progress after {steps} steps: sent {sent}"
            );
            match b.take(now, 1 << 20) {
                Grant::Now(n) => sent += n,
                Grant::Wait(at) => now = at,
            }
        }
        let expect = 10_000_000 + 50_000;
        assert!(
            sent.abs_diff(expect) <= MIN_GRANT,
            "sent {sent}, expected {expect}"
        );
    }

    #[test]
    fn take_both_grants_the_smaller_and_charges_each_only_that() {
        let mut conn = bucket(10_000, 20_000);
        let mut node = bucket(1_000_000, 8_000);
        assert_eq!(
            take_both(&mut conn, &mut node, ms(0), 50_000),
            Grant::Now(8_000)
        );
        assert_eq!(
            conn.available(ms(0)),
            12_000,
            "refunded what the node did not grant"
        );
        assert_eq!(node.available(ms(0)), 0);
        // The node must wait: the connection gets everything back.
        match take_both(&mut conn, &mut node, ms(0), 50_000) {
            Grant::Wait(at) => assert!(at > ms(0) && at <= ms(5)),
            g => panic!("{g:?}"),
        }
        assert_eq!(conn.available(ms(0)), 12_000);
        // The connection must wait: the node is not charged.
        let mut conn = bucket(10_000, 4096);
        let mut node = bucket(1_000_000, 1_000_000);
        assert_eq!(
            take_both(&mut conn, &mut node, ms(0), 4096),
            Grant::Now(4096)
        );
        assert!(matches!(
            take_both(&mut conn, &mut node, ms(0), 4096),
            Grant::Wait(_)
        ));
        assert_eq!(node.available(ms(0)), 1_000_000 - 4096);
    }

    #[test]
    fn configs_below_the_minimum_rate_or_with_no_burst_are_refused() {
        let bad = PaceConfig {
            bytes_per_second: MIN_RATE - 1,
            burst: 1,
        };
        assert_eq!(
            bad.validate(),
            Err(PaceConfigError::RateTooLow(MIN_RATE - 1))
        );
        let bad = PaceConfig {
            bytes_per_second: MIN_RATE,
            burst: 0,
        };
        assert_eq!(bad.validate(), Err(PaceConfigError::ZeroBurst));
        assert_eq!(PaceConfig::with_rate(MIN_RATE).burst, MIN_DEFAULT_BURST);
        assert_eq!(PaceConfig::with_rate(2_000_000).burst, 100_000);
    }
}
