//! Admission control: who may open a connection, start a request, or hold response bytes.
//!
//! A full node must say so at once instead of going silent (listener-limits ADR, decision 2):
//! a client that waits out a timeout on a busy holder mistakes it for a dead one and stops
//! asking it for a long time, exactly when demand peaks. [`Admission`] is the bookkeeping
//! behind that rule. Every decision is O(log sources), allocation-free once a source is
//! tracked, and a refusal reserves nothing, so refusing stays cheap under overload.
//!
//! Three kinds of capacity are metered, each globally and (where it matters) per source:
//!
//! | resource | global | per source | ticket |
//! |---|---|---|---|
//! | sessions (connections) | [`AdmissionConfig::max_sessions`] | [`AdmissionConfig::max_sessions_per_source`] | [`SessionTicket`] |
//! | requests in progress | [`AdmissionConfig::max_requests`] | [`AdmissionConfig::max_requests_per_session`] (per session) and the optional rate bucket | [`RequestTicket`] |
//! | response bytes in flight | [`AdmissionConfig::max_inflight_bytes`] | [`AdmissionConfig::max_inflight_bytes_per_source`] | held by the [`RequestTicket`] |
//!
//! Tickets are neither `Clone` nor `Copy`, and every release method takes its ticket by
//! value, so the type system releases each slot exactly once: a double release does not
//! compile. Forgetting a ticket leaks its slot; the server connection machine owns its
//! tickets and releases them on every ending (completion, error, abort) — its tests check
//! the counters return to zero on each path.
//!
//! Defaults and invariants are documented in `docs/limits.md`.

use crate::refusal::{Refusal, RefusalReason};
use core::net::IpAddr;
use std::collections::BTreeMap;

use crate::time::{Duration, Instant};

/// Default [`AdmissionConfig::max_sessions`]: 256 concurrent connections.
///
/// The reference listener's ceiling (ADR decision 4). At roughly 0.5 MiB of buffers per
/// session that is about 128 MiB of connection state at worst.
pub const DEFAULT_MAX_SESSIONS: usize = 256;

/// Default [`AdmissionConfig::max_sessions_per_source`]: 4 connections per source address.
///
/// Unchanged from the reference: one misbehaving or greedy host can hold at most 4 of the
/// 256 slots, so at least 64 distinct sources can always be served.
pub const DEFAULT_MAX_SESSIONS_PER_SOURCE: usize = 4;

/// Default [`AdmissionConfig::max_requests`]: 512 requests in progress node-wide.
///
/// Two per session (ADR decision 4): on the testnet readers held 1.4 request channels per
/// session at the median and 1.9 at p90, so one per session ran out before sessions did.
pub const DEFAULT_MAX_REQUESTS: usize = 512;

/// Default [`AdmissionConfig::max_requests_per_session`]: 2 requests in progress per
/// connection (pipelining depth actually served concurrently).
///
/// The "two per session" sizing of ADR decision 4. Further pipelined requests wait in the
/// connection's input buffer (back-pressure), they are not refused.
pub const DEFAULT_MAX_REQUESTS_PER_SESSION: usize = 2;

/// Default [`AdmissionConfig::max_inflight_bytes`]: 64 MiB of response bytes in flight
/// node-wide.
///
/// Unchanged from the reference: raising request counts is not permission for unbounded
/// payload memory. This bounds the block bytes pinned by responses not yet written.
pub const DEFAULT_MAX_INFLIGHT_BYTES: u64 = 64 * 1024 * 1024;

/// Default [`AdmissionConfig::max_inflight_bytes_per_source`]: 16 MiB per source address.
///
/// Unchanged from the reference: one source cannot pin more than a quarter of the global
/// response budget.
pub const DEFAULT_MAX_INFLIGHT_BYTES_PER_SOURCE: u64 = 16 * 1024 * 1024;

/// Default [`AdmissionConfig::max_tracked_sources`]: per-source entries kept at most.
///
/// Every source with a live session needs an entry, so this must be at least
/// [`DEFAULT_MAX_SESSIONS`]; the slack keeps rate-bucket memory of recently departed
/// sources (a source cannot reset its bucket by reconnecting) without growing unbounded.
pub const DEFAULT_MAX_TRACKED_SOURCES: usize = 1024;

/// Default [`AdmissionConfig::retry_after`]: what a capacity refusal advertises.
///
/// The refused cooldown of the read-spreading reference (15 s): long enough that a client
/// does not hammer a full node, short enough that a busy holder is not mistaken for a
/// departed one (a failed dial costs 30 min).
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(15);

/// Default [`AdmissionConfig::max_refusals`]: refused connections answered at once.
///
/// A refused connection holds no session but still costs the driver a socket, a 4 KiB
/// discard window and a thread or task for at most `refusal_head_timeout + linger` (4 s by
/// default). Over the bound a refused connection is closed at once without an answer, so
/// a flood of diallers cannot make the refusals themselves the overload. 256 answers
/// every refusal of a node at its default 256 sessions while as many again wait.
pub const DEFAULT_MAX_REFUSALS: usize = 256;

/// A per-source request-rate bucket (generic cell rate algorithm).
///
/// `per_second` requests per second sustained, bursts of up to `burst` back to back.
/// Optional because the session and request limits already bound concurrency; a rate
/// bucket additionally bounds the work one source can cause over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Sustained requests per second per source. Must be non-zero.
    pub per_second: u32,
    /// Requests a source may make back to back after being idle. Must be non-zero.
    pub burst: u32,
}

impl RateLimit {
    /// Time between two requests at the sustained rate.
    fn interval(&self) -> Duration {
        Duration::from_nanos(1_000_000_000 / u64::from(self.per_second.max(1)))
    }

    /// How far ahead of `now` the bucket's theoretical arrival time may run.
    fn tolerance(&self) -> Duration {
        self.interval()
            .saturating_mul(self.burst.max(1).saturating_sub(1))
    }
}

/// The admission limits of one server. Build with [`AdmissionConfig::default`] and adjust;
/// [`Admission::new`] checks the startup invariants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Connections open at once, node-wide. Default [`DEFAULT_MAX_SESSIONS`].
    pub max_sessions: usize,
    /// Connections open at once from one source. Default [`DEFAULT_MAX_SESSIONS_PER_SOURCE`].
    pub max_sessions_per_source: usize,
    /// Requests in progress, node-wide. Default [`DEFAULT_MAX_REQUESTS`].
    pub max_requests: usize,
    /// Requests in progress on one connection. Default [`DEFAULT_MAX_REQUESTS_PER_SESSION`].
    pub max_requests_per_session: usize,
    /// Response bytes reserved and not yet written, node-wide.
    /// Default [`DEFAULT_MAX_INFLIGHT_BYTES`].
    pub max_inflight_bytes: u64,
    /// Response bytes reserved and not yet written, per source.
    /// Default [`DEFAULT_MAX_INFLIGHT_BYTES_PER_SOURCE`].
    pub max_inflight_bytes_per_source: u64,
    /// Optional per-source request-rate bucket. Default `None`.
    pub rate: Option<RateLimit>,
    /// Bound on the per-source table. Default [`DEFAULT_MAX_TRACKED_SOURCES`].
    pub max_tracked_sources: usize,
    /// What a capacity refusal advertises in `Retry-After` (rate refusals advertise the
    /// bucket's own wait instead). Default [`DEFAULT_RETRY_AFTER`].
    pub retry_after: Duration,
    /// Refused connections answered (their first request head read, the 503 written) at
    /// once; a connection refused over it is finished at accept, answered with nothing
    /// ([`ServerConnection::dropped_at_accept`](crate::server::ServerConnection::dropped_at_accept)).
    /// Default [`DEFAULT_MAX_REFUSALS`].
    pub max_refusals: usize,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_source: DEFAULT_MAX_SESSIONS_PER_SOURCE,
            max_requests: DEFAULT_MAX_REQUESTS,
            max_requests_per_session: DEFAULT_MAX_REQUESTS_PER_SESSION,
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            max_inflight_bytes_per_source: DEFAULT_MAX_INFLIGHT_BYTES_PER_SOURCE,
            rate: None,
            max_tracked_sources: DEFAULT_MAX_TRACKED_SOURCES,
            retry_after: DEFAULT_RETRY_AFTER,
            max_refusals: DEFAULT_MAX_REFUSALS,
        }
    }
}

/// A startup invariant the configuration violates. Always the operator's fault (local
/// configuration), never a peer's; the message names the fields involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionConfigError {
    /// A limit is zero, so nothing could ever be admitted.
    #[error("admission limit `{field}` is zero: nothing could ever be admitted")]
    Zero {
        /// The offending field.
        field: &'static str,
    },
    /// A per-source limit exceeds its global limit, so it would never bind.
    #[error("`{per_source}` ({per_source_value}) exceeds `{global}` ({global_value}): a per-source quota above the global limit lets one source take everything")]
    PerSourceAboveGlobal {
        /// The per-source field.
        per_source: &'static str,
        /// Its value.
        per_source_value: u64,
        /// The global field.
        global: &'static str,
        /// Its value.
        global_value: u64,
    },
    /// One source's connections could hold every request slot.
    #[error("`max_sessions_per_source` × `max_requests_per_session` = {product} is not below `max_requests` ({max_requests}): one source could hold every request slot")]
    SourceCanTakeAllRequests {
        /// `max_sessions_per_source * max_requests_per_session`.
        product: u64,
        /// `max_requests`.
        max_requests: u64,
    },
    /// The source table cannot hold one entry per possible session.
    #[error("`max_tracked_sources` ({tracked}) is below `max_sessions` ({sessions}): a live session's source could not be tracked")]
    SourceTableTooSmall {
        /// `max_tracked_sources`.
        tracked: usize,
        /// `max_sessions`.
        sessions: usize,
    },
    /// A capacity refusal would advertise no wait at all, inviting an immediate retry storm.
    #[error("`retry_after` is zero: a refusal must tell the client to stay away for a while")]
    ZeroRetryAfter,
}

impl AdmissionConfig {
    /// Checks the startup invariants; the error names the offending fields.
    pub fn validate(&self) -> Result<(), AdmissionConfigError> {
        let zero = |field, v: u64| {
            if v == 0 {
                Err(AdmissionConfigError::Zero { field })
            } else {
                Ok(())
            }
        };
        zero("max_sessions", self.max_sessions as u64)?;
        zero(
            "max_sessions_per_source",
            self.max_sessions_per_source as u64,
        )?;
        zero("max_requests", self.max_requests as u64)?;
        zero(
            "max_requests_per_session",
            self.max_requests_per_session as u64,
        )?;
        zero("max_inflight_bytes", self.max_inflight_bytes)?;
        zero(
            "max_inflight_bytes_per_source",
            self.max_inflight_bytes_per_source,
        )?;
        zero("max_tracked_sources", self.max_tracked_sources as u64)?;
        zero("max_refusals", self.max_refusals as u64)?;
        if let Some(rate) = self.rate {
            zero("rate.per_second", u64::from(rate.per_second))?;
            zero("rate.burst", u64::from(rate.burst))?;
        }
        if self.retry_after.is_zero() {
            return Err(AdmissionConfigError::ZeroRetryAfter);
        }
        let above = |per_source, p: u64, global, g: u64| {
            if p > g {
                Err(AdmissionConfigError::PerSourceAboveGlobal {
                    per_source,
                    per_source_value: p,
                    global,
                    global_value: g,
                })
            } else {
                Ok(())
            }
        };
        above(
            "max_sessions_per_source",
            self.max_sessions_per_source as u64,
            "max_sessions",
            self.max_sessions as u64,
        )?;
        above(
            "max_requests_per_session",
            self.max_requests_per_session as u64,
            "max_requests",
            self.max_requests as u64,
        )?;
        above(
            "max_inflight_bytes_per_source",
            self.max_inflight_bytes_per_source,
            "max_inflight_bytes",
            self.max_inflight_bytes,
        )?;
        let product = (self.max_sessions_per_source as u64)
            .saturating_mul(self.max_requests_per_session as u64);
        if product >= self.max_requests as u64 {
            return Err(AdmissionConfigError::SourceCanTakeAllRequests {
                product,
                max_requests: self.max_requests as u64,
            });
        }
        if self.max_tracked_sources < self.max_sessions {
            return Err(AdmissionConfigError::SourceTableTooSmall {
                tracked: self.max_tracked_sources,
                sessions: self.max_sessions,
            });
        }
        Ok(())
    }
}

/// A connection's hold on a session slot. Not `Clone`: release it exactly once with
/// [`Admission::close_session`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a session ticket must be released with Admission::close_session, or its slot leaks"]
pub struct SessionTicket<S = IpAddr> {
    source: S,
    requests: usize,
}

impl<S> SessionTicket<S> {
    /// The source this session was admitted for.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Requests currently in progress on this session.
    pub fn requests(&self) -> usize {
        self.requests
    }
}

/// A request's hold on a request slot and on the response bytes it reserved. Not `Clone`:
/// release it exactly once with [`Admission::finish_request`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a request ticket must be released with Admission::finish_request, or its slot leaks"]
pub struct RequestTicket<S = IpAddr> {
    source: S,
    bytes: u64,
}

impl<S> RequestTicket<S> {
    /// Response bytes this request holds against the budgets.
    pub fn reserved_bytes(&self) -> u64 {
        self.bytes
    }
}

#[derive(Clone, Debug)]
struct SourceState {
    sessions: usize,
    requests: usize,
    inflight: u64,
    /// GCRA theoretical arrival time; at or before `now` means the bucket is full.
    tat: Instant,
}

impl SourceState {
    fn idle(&self) -> bool {
        self.sessions == 0 && self.requests == 0 && self.inflight == 0
    }
}

/// Admission bookkeeping for one server (shared by all of its connections).
///
/// Generic over the source key `S` (an [`IpAddr`] in the drivers, a node index in the
/// simulator). Time only moves the rate bucket; every method is deterministic given its
/// inputs. If `now` goes backwards the bucket simply refills later (never panics).
#[derive(Debug)]
pub struct Admission<S = IpAddr> {
    config: AdmissionConfig,
    sessions: usize,
    requests: usize,
    inflight: u64,
    refusals: usize,
    sources: BTreeMap<S, SourceState>,
}

impl<S: Ord + Clone> Admission<S> {
    /// Builds the bookkeeping, or names the startup invariant the configuration breaks.
    pub fn new(config: AdmissionConfig) -> Result<Self, AdmissionConfigError> {
        config.validate()?;
        Ok(Admission {
            config,
            sessions: 0,
            requests: 0,
            inflight: 0,
            refusals: 0,
            sources: BTreeMap::new(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    /// Sessions open now.
    pub fn sessions(&self) -> usize {
        self.sessions
    }

    /// Requests in progress now.
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// Response bytes reserved now.
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight
    }

    /// Refused connections being answered now (at most
    /// [`AdmissionConfig::max_refusals`]).
    pub fn refusals(&self) -> usize {
        self.refusals
    }

    /// Takes one of the [`AdmissionConfig::max_refusals`] slots for answering a refused
    /// connection; `false` when all are taken (the connection is closed unanswered).
    pub(crate) fn take_refusal(&mut self) -> bool {
        if self.refusals >= self.config.max_refusals {
            return false;
        }
        self.refusals += 1;
        true
    }

    /// Gives back a slot [`take_refusal`](Self::take_refusal) took.
    pub(crate) fn release_refusal(&mut self) {
        self.refusals = self.refusals.saturating_sub(1);
    }

    /// Sessions open now from `source`.
    pub fn source_sessions(&self, source: &S) -> usize {
        self.sources.get(source).map_or(0, |s| s.sessions)
    }

    /// Response bytes reserved now by `source`.
    pub fn source_inflight_bytes(&self, source: &S) -> u64 {
        self.sources.get(source).map_or(0, |s| s.inflight)
    }

    /// Entries in the per-source table (bounded by
    /// [`AdmissionConfig::max_tracked_sources`]).
    pub fn tracked_sources(&self) -> usize {
        self.sources.len()
    }

    fn refuse(&self, reason: RefusalReason) -> Refusal {
        Refusal {
            reason,
            retry_after: self.config.retry_after,
        }
    }

    /// Admits a new connection from `source`, or refuses it. A refusal reserves nothing.
    pub fn open_session(&mut self, now: Instant, source: S) -> Result<SessionTicket<S>, Refusal> {
        if self.sessions >= self.config.max_sessions {
            return Err(self.refuse(RefusalReason::Sessions));
        }
        if self.source_sessions(&source) >= self.config.max_sessions_per_source {
            return Err(self.refuse(RefusalReason::SourceSessions));
        }
        if !self.sources.contains_key(&source) {
            self.make_room(now);
        }
        let entry = self.sources.entry(source.clone()).or_insert(SourceState {
            sessions: 0,
            requests: 0,
            inflight: 0,
            tat: Instant::ZERO,
        });
        entry.sessions += 1;
        self.sessions += 1;
        Ok(SessionTicket {
            source,
            requests: 0,
        })
    }

    /// Keeps the source table below its bound before inserting a new source. Only idle
    /// entries (no session, request or bytes) are candidates; one whose rate bucket is full
    /// carries no information and goes first, otherwise the one closest to full. Because
    /// `max_tracked_sources >= max_sessions` and a new session is being admitted, an idle
    /// entry always exists when the table is full.
    fn make_room(&mut self, now: Instant) {
        if self.sources.len() < self.config.max_tracked_sources {
            return;
        }
        let victim = self
            .sources
            .iter()
            .filter(|(_, s)| s.idle())
            .min_by_key(|(_, s)| s.tat.max(now))
            .map(|(k, _)| k.clone());
        if let Some(k) = victim {
            self.sources.remove(&k);
        }
    }

    /// Drops a source's entry once it holds nothing and its bucket is full again.
    fn forget_if_clean(&mut self, now: Instant, source: &S) {
        if let Some(s) = self.sources.get(source) {
            if s.idle() && s.tat <= now {
                self.sources.remove(source);
            }
        }
    }

    /// Releases a session slot. Consumes the ticket, so it happens exactly once. Requests
    /// still open on the session keep their own tickets and are released separately.
    pub fn close_session(&mut self, now: Instant, ticket: SessionTicket<S>) {
        self.sessions = self.sessions.saturating_sub(1);
        if let Some(s) = self.sources.get_mut(&ticket.source) {
            s.sessions = s.sessions.saturating_sub(1);
        }
        self.forget_if_clean(now, &ticket.source);
    }

    /// Starts a request on `session`, or refuses it (request slots, per-session depth, rate
    /// bucket). A refusal reserves nothing and does not drain the rate bucket.
    pub fn begin_request(
        &mut self,
        now: Instant,
        session: &mut SessionTicket<S>,
    ) -> Result<RequestTicket<S>, Refusal> {
        if self.requests >= self.config.max_requests
            || session.requests >= self.config.max_requests_per_session
        {
            return Err(self.refuse(RefusalReason::Requests));
        }
        let rate = self.config.rate;
        let Some(state) = self.sources.get_mut(&session.source) else {
            // Unreachable with tickets from this Admission; refuse rather than panic.
            return Err(Refusal {
                reason: RefusalReason::Requests,
                retry_after: self.config.retry_after,
            });
        };
        if let Some(rate) = rate {
            let tat = state.tat.max(now);
            let ahead = tat - now;
            if ahead > rate.tolerance() {
                let wait = ahead - rate.tolerance();
                return Err(Refusal {
                    reason: RefusalReason::Rate,
                    retry_after: wait,
                });
            }
            state.tat = tat + rate.interval();
        }
        state.requests += 1;
        session.requests += 1;
        self.requests += 1;
        Ok(RequestTicket {
            source: session.source.clone(),
            bytes: 0,
        })
    }

    /// Reserves `bytes` of response memory for `request` against the global and per-source
    /// budgets, or refuses (reserving nothing).
    pub fn reserve_bytes(
        &mut self,
        request: &mut RequestTicket<S>,
        bytes: u64,
    ) -> Result<(), Refusal> {
        let source_inflight = self.source_inflight_bytes(&request.source);
        if self.inflight.saturating_add(bytes) > self.config.max_inflight_bytes {
            return Err(self.refuse(RefusalReason::InflightBytes));
        }
        if source_inflight.saturating_add(bytes) > self.config.max_inflight_bytes_per_source {
            return Err(self.refuse(RefusalReason::SourceInflightBytes));
        }
        if let Some(s) = self.sources.get_mut(&request.source) {
            s.inflight += bytes;
        }
        self.inflight += bytes;
        request.bytes += bytes;
        Ok(())
    }

    /// Ends a request (completed, failed or aborted): releases its slot and its bytes.
    /// Consumes the ticket, so it happens exactly once.
    pub fn finish_request(
        &mut self,
        now: Instant,
        session: Option<&mut SessionTicket<S>>,
        ticket: RequestTicket<S>,
    ) {
        self.requests = self.requests.saturating_sub(1);
        self.inflight = self.inflight.saturating_sub(ticket.bytes);
        if let Some(session) = session {
            session.requests = session.requests.saturating_sub(1);
        }
        if let Some(s) = self.sources.get_mut(&ticket.source) {
            s.requests = s.requests.saturating_sub(1);
            s.inflight = s.inflight.saturating_sub(ticket.bytes);
        }
        self.forget_if_clean(now, &ticket.source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, n])
    }

    fn small() -> AdmissionConfig {
        AdmissionConfig {
            max_sessions: 3,
            max_sessions_per_source: 2,
            max_requests: 5,
            max_requests_per_session: 2,
            max_inflight_bytes: 100,
            max_inflight_bytes_per_source: 60,
            rate: None,
            max_tracked_sources: 4,
            retry_after: Duration::from_secs(7),
            max_refusals: crate::server::DEFAULT_MAX_REFUSALS,
        }
    }

    const T0: Instant = Instant::ZERO;

    #[test]
    fn defaults_are_the_references_and_satisfy_the_invariants() {
        let c = AdmissionConfig::default();
        assert_eq!(c.max_sessions, 256);
        assert_eq!(c.max_sessions_per_source, 4);
        assert_eq!(c.max_requests, 512);
        assert_eq!(c.max_inflight_bytes, 64 << 20);
        assert_eq!(c.max_inflight_bytes_per_source, 16 << 20);
        assert_eq!(c.rate, None);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn invariant_violations_are_config_errors_naming_the_fields() {
        let mut c = small();
        c.max_sessions = 0;
        let e = Admission::<IpAddr>::new(c).unwrap_err();
        assert_eq!(
            e,
            AdmissionConfigError::Zero {
                field: "max_sessions"
            }
        );
        assert!(e.to_string().contains("max_sessions"));

        let mut c = small();
        c.max_sessions_per_source = 4;
        let e = c.validate().unwrap_err();
        assert!(matches!(
            e,
            AdmissionConfigError::PerSourceAboveGlobal {
                per_source: "max_sessions_per_source",
                global: "max_sessions",
                ..
            }
        ));

        let mut c = small();
        c.max_inflight_bytes_per_source = 101;
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("max_inflight_bytes_per_source"));
        assert!(e.to_string().contains("max_inflight_bytes"));

        // 4 sessions x 2 requests = 8: one source could take them all.
        let c = AdmissionConfig {
            max_requests: 8,
            ..AdmissionConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(
            e,
            AdmissionConfigError::SourceCanTakeAllRequests {
                product: 8,
                max_requests: 8
            }
        );

        let mut c = small();
        c.max_tracked_sources = 2;
        assert!(matches!(
            c.validate(),
            Err(AdmissionConfigError::SourceTableTooSmall { .. })
        ));

        let mut c = small();
        c.retry_after = Duration::ZERO;
        assert_eq!(c.validate(), Err(AdmissionConfigError::ZeroRetryAfter));

        let mut c = small();
        c.rate = Some(RateLimit {
            per_second: 0,
            burst: 1,
        });
        assert_eq!(
            c.validate(),
            Err(AdmissionConfigError::Zero {
                field: "rate.per_second"
            })
        );
    }

    #[test]
    fn global_session_limit_refuses_with_reason_and_retry_after() {
        let mut a = Admission::new(small()).unwrap();
        let t1 = a.open_session(T0, ip(1)).unwrap();
        let t2 = a.open_session(T0, ip(2)).unwrap();
        let t3 = a.open_session(T0, ip(3)).unwrap();
        let r = a.open_session(T0, ip(4)).unwrap_err();
        assert_eq!(r.reason, RefusalReason::Sessions);
        assert_eq!(r.retry_after, Duration::from_secs(7));
        // The refusal consumed nothing.
        assert_eq!(a.sessions(), 3);
        assert_eq!(a.source_sessions(&ip(4)), 0);
        a.close_session(T0, t1);
        let t4 = a.open_session(T0, ip(4)).unwrap();
        for t in [t2, t3, t4] {
            a.close_session(T0, t);
        }
        assert_eq!(a.sessions(), 0);
        assert_eq!(a.tracked_sources(), 0);
    }

    #[test]
    fn per_source_session_quota_binds_before_the_global_limit() {
        let mut a = Admission::new(small()).unwrap();
        let t1 = a.open_session(T0, ip(1)).unwrap();
        let t2 = a.open_session(T0, ip(1)).unwrap();
        let r = a.open_session(T0, ip(1)).unwrap_err();
        assert_eq!(r.reason, RefusalReason::SourceSessions);
        assert_eq!(a.sessions(), 2);
        // Another source still gets in.
        let t3 = a.open_session(T0, ip(2)).unwrap();
        for t in [t1, t2, t3] {
            a.close_session(T0, t);
        }
        assert_eq!(a.sessions(), 0);
    }

    #[test]
    fn request_limits_global_and_per_session() {
        let mut a = Admission::new(small()).unwrap();
        let mut s1 = a.open_session(T0, ip(1)).unwrap();
        let mut s2 = a.open_session(T0, ip(2)).unwrap();
        let mut s3 = a.open_session(T0, ip(3)).unwrap();
        let r1 = a.begin_request(T0, &mut s1).unwrap();
        let r2 = a.begin_request(T0, &mut s1).unwrap();
        // Per-session depth reached.
        let e = a.begin_request(T0, &mut s1).unwrap_err();
        assert_eq!(e.reason, RefusalReason::Requests);
        let r3 = a.begin_request(T0, &mut s2).unwrap();
        let r4 = a.begin_request(T0, &mut s2).unwrap();
        let r5 = a.begin_request(T0, &mut s3).unwrap();
        // Global request limit (5) reached.
        let e = a.begin_request(T0, &mut s3).unwrap_err();
        assert_eq!(e.reason, RefusalReason::Requests);
        assert_eq!(a.requests(), 5);
        a.finish_request(T0, Some(&mut s1), r1);
        let r6 = a.begin_request(T0, &mut s3).unwrap();
        a.finish_request(T0, Some(&mut s1), r2);
        a.finish_request(T0, Some(&mut s2), r3);
        a.finish_request(T0, Some(&mut s2), r4);
        a.finish_request(T0, Some(&mut s3), r5);
        a.finish_request(T0, Some(&mut s3), r6);
        assert_eq!(a.requests(), 0);
        for s in [s1, s2, s3] {
            assert_eq!(s.requests(), 0);
            a.close_session(T0, s);
        }
        assert_eq!(a.tracked_sources(), 0);
    }

    #[test]
    fn byte_budgets_global_and_per_source_and_released_on_finish() {
        let mut a = Admission::new(small()).unwrap();
        let mut s1 = a.open_session(T0, ip(1)).unwrap();
        let mut s2 = a.open_session(T0, ip(2)).unwrap();
        let mut r1 = a.begin_request(T0, &mut s1).unwrap();
        a.reserve_bytes(&mut r1, 50).unwrap();
        let mut r2 = a.begin_request(T0, &mut s1).unwrap();
        // 50 + 20 > 60 per source.
        let e = a.reserve_bytes(&mut r2, 20).unwrap_err();
        assert_eq!(e.reason, RefusalReason::SourceInflightBytes);
        assert_eq!(a.source_inflight_bytes(&ip(1)), 50);
        assert_eq!(r2.reserved_bytes(), 0);
        let mut r3 = a.begin_request(T0, &mut s2).unwrap();
        a.reserve_bytes(&mut r3, 50).unwrap();
        let mut r4 = a.begin_request(T0, &mut s2).unwrap();
        // 100 + 1 > 100 global.
        let e = a.reserve_bytes(&mut r4, 1).unwrap_err();
        assert_eq!(e.reason, RefusalReason::InflightBytes);
        assert_eq!(a.inflight_bytes(), 100);
        a.finish_request(T0, Some(&mut s1), r1);
        assert_eq!(a.inflight_bytes(), 50);
        a.reserve_bytes(&mut r4, 10).unwrap();
        a.finish_request(T0, Some(&mut s1), r2);
        a.finish_request(T0, Some(&mut s2), r3);
        a.finish_request(T0, Some(&mut s2), r4);
        assert_eq!(a.inflight_bytes(), 0);
        assert_eq!(a.source_inflight_bytes(&ip(1)), 0);
        a.close_session(T0, s1);
        a.close_session(T0, s2);
        assert_eq!((a.sessions(), a.requests(), a.tracked_sources()), (0, 0, 0));
    }

    #[test]
    fn aborted_session_releases_requests_opened_on_it() {
        // Abort path: the connection dies with requests in progress; the machine finishes
        // each request ticket (even after the session ticket is gone) and the counters
        // return to zero.
        let mut a = Admission::new(small()).unwrap();
        let mut s = a.open_session(T0, ip(9)).unwrap();
        let mut r = a.begin_request(T0, &mut s).unwrap();
        a.reserve_bytes(&mut r, 30).unwrap();
        a.close_session(T0, s);
        assert_eq!(a.tracked_sources(), 1, "bytes still held");
        a.finish_request(T0, None, r);
        assert_eq!((a.sessions(), a.requests(), a.inflight_bytes()), (0, 0, 0));
        assert_eq!(a.tracked_sources(), 0);
    }

    #[test]
    fn rate_bucket_allows_burst_then_refuses_with_exact_wait() {
        let mut c = small();
        c.max_requests = 100;
        c.max_requests_per_session = 40;
        c.max_sessions_per_source = 2;
        c.rate = Some(RateLimit {
            per_second: 10,
            burst: 3,
        });
        let mut a = Admission::new(c).unwrap();
        let mut s = a.open_session(T0, ip(1)).unwrap();
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(a.begin_request(T0, &mut s).unwrap());
        }
        let e = a.begin_request(T0, &mut s).unwrap_err();
        assert_eq!(e.reason, RefusalReason::Rate);
        assert_eq!(e.retry_after, Duration::from_millis(100));
        assert_eq!(a.requests(), 3, "a rate refusal reserves nothing");
        // Exactly at the advertised time one more request fits.
        let later = T0 + Duration::from_millis(100);
        held.push(a.begin_request(later, &mut s).unwrap());
        assert!(a.begin_request(later, &mut s).is_err());
        // Other sources have their own bucket.
        let mut s2 = a.open_session(T0, ip(2)).unwrap();
        held.push(a.begin_request(later, &mut s2).unwrap());
        for r in held {
            let sess = if r.source == ip(1) { &mut s } else { &mut s2 };
            a.finish_request(later, Some(sess), r);
        }
        a.close_session(later, s);
        a.close_session(later, s2);
        // Source 1's bucket is still draining: its entry stays so reconnecting does not
        // reset it; once refilled the entry goes.
        assert_eq!(a.tracked_sources(), 2);
        let mut s = a.open_session(later, ip(1)).unwrap();
        assert!(
            a.begin_request(later, &mut s).is_err(),
            "reconnecting does not refill"
        );
        a.close_session(later, s);
    }

    #[test]
    fn source_table_stays_bounded_evicting_only_idle_entries() {
        let mut c = small();
        c.max_sessions = 4;
        c.max_sessions_per_source = 1;
        c.max_requests = 9;
        c.max_requests_per_session = 2;
        c.max_tracked_sources = 4;
        c.rate = Some(RateLimit {
            per_second: 1,
            burst: 1,
        });
        let mut a = Admission::new(c).unwrap();
        for n in 0..50u8 {
            let mut s = a.open_session(T0, ip(n)).unwrap();
            let r = a.begin_request(T0, &mut s).unwrap(); // drains the bucket
            a.finish_request(T0, Some(&mut s), r);
            a.close_session(T0, s);
            assert!(a.tracked_sources() <= 4);
        }
        // Live sessions are never evicted.
        let live: Vec<_> = (100..104u8)
            .map(|n| a.open_session(T0, ip(n)).unwrap())
            .collect();
        assert_eq!(a.tracked_sources(), 4);
        for n in 100..104u8 {
            assert_eq!(a.source_sessions(&ip(n)), 1);
        }
        for s in live {
            a.close_session(T0, s);
        }
    }

    /// Rule: idle entries are evicted only to make room in a *full* table, so a source
    /// whose rate bucket is still draining keeps it while other sources come and go.
    #[test]
    fn idle_sources_are_evicted_only_when_the_table_is_full() {
        let mut c = small();
        c.rate = Some(RateLimit {
            per_second: 1,
            burst: 1,
        });
        let mut a = Admission::new(c).unwrap();
        let mut s = a.open_session(T0, ip(1)).unwrap();
        let r = a.begin_request(T0, &mut s).unwrap(); // drains ip(1)'s bucket
        a.finish_request(T0, Some(&mut s), r);
        a.close_session(T0, s);
        assert_eq!(a.tracked_sources(), 1, "the draining bucket is remembered");
        // Another source connects while the table (bound 4) has room.
        let other = a.open_session(T0, ip(2)).unwrap();
        assert_eq!(a.tracked_sources(), 2);
        let mut s = a.open_session(T0, ip(1)).unwrap();
        let e = a.begin_request(T0, &mut s).unwrap_err();
        assert_eq!(
            e.reason,
            RefusalReason::Rate,
            "ip(1) did not get a fresh bucket"
        );
        a.close_session(T0, s);
        a.close_session(T0, other);
    }

    /// Rule: a source is forgotten only when it holds nothing: a request still open after
    /// its session closed (even one with no bytes reserved yet) keeps the source's entry,
    /// so the per-source byte budget still binds that request.
    #[test]
    fn a_source_with_an_open_request_is_remembered_after_its_session_closes() {
        let mut a = Admission::new(small()).unwrap();
        let mut s = a.open_session(T0, ip(1)).unwrap();
        let mut r = a.begin_request(T0, &mut s).unwrap();
        a.close_session(T0, s);
        assert_eq!(a.tracked_sources(), 1, "the open request keeps the entry");
        a.reserve_bytes(&mut r, 60).unwrap();
        assert_eq!(a.source_inflight_bytes(&ip(1)), 60);
        let mut s2 = a.open_session(T0, ip(1)).unwrap();
        let mut r2 = a.begin_request(T0, &mut s2).unwrap();
        let e = a.reserve_bytes(&mut r2, 1).unwrap_err();
        assert_eq!(e.reason, RefusalReason::SourceInflightBytes);
        a.finish_request(T0, None, r);
        a.finish_request(T0, Some(&mut s2), r2);
        a.close_session(T0, s2);
        assert_eq!((a.sessions(), a.requests(), a.inflight_bytes()), (0, 0, 0));
        assert_eq!(a.tracked_sources(), 0);
    }

    /// Rule: a session ticket counts the requests in progress on its session.
    #[test]
    fn session_ticket_counts_its_requests_in_progress() {
        let mut a = Admission::new(small()).unwrap();
        let mut s = a.open_session(T0, ip(1)).unwrap();
        assert_eq!(s.requests(), 0);
        let r1 = a.begin_request(T0, &mut s).unwrap();
        assert_eq!(s.requests(), 1);
        let r2 = a.begin_request(T0, &mut s).unwrap();
        assert_eq!(s.requests(), 2);
        a.finish_request(T0, Some(&mut s), r1);
        assert_eq!(s.requests(), 1);
        a.finish_request(T0, Some(&mut s), r2);
        assert_eq!(s.requests(), 0);
        a.close_session(T0, s);
    }

    /// Rule: a request ticket holds the sum of the bytes reserved for it, and a refused
    /// reservation adds nothing.
    #[test]
    fn request_ticket_holds_the_bytes_reserved_for_it() {
        let mut a = Admission::new(small()).unwrap();
        let mut s = a.open_session(T0, ip(1)).unwrap();
        let mut r = a.begin_request(T0, &mut s).unwrap();
        a.reserve_bytes(&mut r, 25).unwrap();
        assert_eq!(r.reserved_bytes(), 25);
        a.reserve_bytes(&mut r, 10).unwrap();
        assert_eq!(r.reserved_bytes(), 35);
        assert!(a.reserve_bytes(&mut r, 26).is_err());
        assert_eq!(r.reserved_bytes(), 35);
        assert_eq!(a.inflight_bytes(), 35);
        a.finish_request(T0, Some(&mut s), r);
        assert_eq!(a.inflight_bytes(), 0);
        a.close_session(T0, s);
    }

    #[test]
    fn refusal_tokens_round_trip() {
        for r in RefusalReason::ALL {
            assert_eq!(RefusalReason::from_token(r.as_token().as_bytes()), Some(r));
        }
        assert_eq!(
            RefusalReason::from_token(b" Sessions "),
            Some(RefusalReason::Sessions)
        );
        assert_eq!(RefusalReason::from_token(b"moon-phase"), None);
    }
}
