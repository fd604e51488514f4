//! A node's listener limits: peerblock-core's server [`Admission`] plus the reference
//! transport's channel table.
//!
//! Sessions, the per-source session quota, request slots (global and per session) and the
//! in-flight response byte budgets are decided by the real `peerblock_core::server`
//! admission bookkeeping, tickets and all, exactly as a peerblock node decides them.
//! Channels exist only in the reference's WebRTC transport (each session holds one, each
//! request in flight one more); the simulator counts them on top, so a replay of the old
//! limits can run out of channels before sessions, as the testnet did. peerblock's own arm
//! sets the channel limit out of the way.
//!
//! The model only admits or names the limit that is full; what a full listener *does*
//! (stay silent or refuse) is decided by the node from [`crate::scenario::WhenFull`].

use peerblock_core::refusal::RefusalReason;
use peerblock_core::server::{
    Admission as CoreAdmission, AdmissionConfig, AdmissionConfigError, RequestTicket, SessionTicket,
};
use peerblock_core::time::{Duration, Instant};

use crate::scenario::Listener;

/// Sources tracked per node at least (core's default); raised to `max_sessions` if that is
/// larger, as core's startup invariant requires.
const MIN_TRACKED_SOURCES: usize = 1024;

/// Which limit turned a dial or request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Limit {
    /// `max_sessions`.
    Sessions,
    /// `max_sessions_per_source`.
    SourceSessions,
    /// `max_channels` (reference transport only).
    Channels,
    /// `max_requests` or `max_requests_per_session`.
    Requests,
    /// The per-source rate bucket.
    Rate,
    /// `max_inflight_mib`.
    InflightBytes,
    /// `max_inflight_per_source_mib`.
    SourceInflightBytes,
}

impl Limit {
    /// Short name used in traces and reports (core's refusal tokens, plus `channels`).
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Channels => "channels",
            Limit::Sessions => RefusalReason::Sessions.as_token(),
            Limit::SourceSessions => RefusalReason::SourceSessions.as_token(),
            Limit::Requests => RefusalReason::Requests.as_token(),
            Limit::Rate => RefusalReason::Rate.as_token(),
            Limit::InflightBytes => RefusalReason::InflightBytes.as_token(),
            Limit::SourceInflightBytes => RefusalReason::SourceInflightBytes.as_token(),
        }
    }

    /// The refusal reason a peerblock server puts on the wire for this limit (`None` for
    /// the reference transport's channels, which peerblock does not have).
    pub fn reason(self) -> Option<RefusalReason> {
        Some(match self {
            Limit::Channels => return None,
            Limit::Sessions => RefusalReason::Sessions,
            Limit::SourceSessions => RefusalReason::SourceSessions,
            Limit::Requests => RefusalReason::Requests,
            Limit::Rate => RefusalReason::Rate,
            Limit::InflightBytes => RefusalReason::InflightBytes,
            Limit::SourceInflightBytes => RefusalReason::SourceInflightBytes,
        })
    }

    /// The limit behind a refusal reason core's admission gave.
    pub fn from_reason(r: RefusalReason) -> Limit {
        match r {
            RefusalReason::Sessions => Limit::Sessions,
            RefusalReason::SourceSessions => Limit::SourceSessions,
            RefusalReason::Requests => Limit::Requests,
            RefusalReason::Rate => Limit::Rate,
            RefusalReason::InflightBytes => Limit::InflightBytes,
            RefusalReason::SourceInflightBytes => Limit::SourceInflightBytes,
        }
    }
}

/// Builds core's admission configuration from the scenario's `[listener]` table.
pub fn admission_config(l: &Listener) -> AdmissionConfig {
    AdmissionConfig {
        max_sessions: l.max_sessions as usize,
        max_sessions_per_source: l.max_sessions_per_source as usize,
        max_requests: l.max_requests as usize,
        max_requests_per_session: l.max_requests_per_session as usize,
        max_inflight_bytes: u64::from(l.max_inflight_mib) << 20,
        max_inflight_bytes_per_source: u64::from(l.max_inflight_per_source_mib) << 20,
        rate: None,
        max_tracked_sources: (l.max_sessions as usize).max(MIN_TRACKED_SOURCES),
        retry_after: Duration::from_secs(l.retry_after_secs),
        // The real nodes' bound on refusals answered at once (no scenario key).
        max_refusals: AdmissionConfig::default().max_refusals,
    }
}

/// The scenario key behind a field core's validation names.
pub fn scenario_key(e: &AdmissionConfigError) -> &'static str {
    let field: &str = match e {
        AdmissionConfigError::Zero { field } => field,
        AdmissionConfigError::PerSourceAboveGlobal { per_source, .. } => per_source,
        AdmissionConfigError::SourceCanTakeAllRequests { .. } => "max_requests",
        AdmissionConfigError::SourceTableTooSmall { .. } => "max_sessions",
        AdmissionConfigError::ZeroRetryAfter => "retry_after",
    };
    match field {
        "max_sessions" => "listener.max_sessions",
        "max_sessions_per_source" => "listener.max_sessions_per_source",
        "max_requests_per_session" => "listener.max_requests_per_session",
        "max_inflight_bytes" => "listener.max_inflight_mib",
        "max_inflight_bytes_per_source" => "listener.max_inflight_per_source_mib",
        "retry_after" => "listener.retry_after_secs",
        _ => "listener.max_requests",
    }
}

/// One node's admission state.
#[derive(Debug)]
pub struct Admission {
    core: CoreAdmission<u32>,
    config: AdmissionConfig,
    max_channels: u32,
    channels: u32,
}

impl Admission {
    /// Empty listener with the scenario's limits (validated with the scenario).
    pub fn new(l: &Listener) -> Self {
        let config = admission_config(l);
        Admission {
            core: CoreAdmission::new(config.clone()).expect("validated with the scenario"),
            config,
            max_channels: l.max_channels,
            channels: 0,
        }
    }

    /// The same listener with its byte budgets divided by `scale` (the HTTP path carries
    /// bodies at 1/`scale` of their nominal size; see `world::http`). Channels are left
    /// out: HTTP/1.1 has none, and that path admits through core alone.
    pub fn scaled(l: &Listener, scale: u64) -> Self {
        let mut config = admission_config(l);
        config.max_inflight_bytes /= scale;
        config.max_inflight_bytes_per_source /= scale;
        Admission {
            core: CoreAdmission::new(config.clone()).expect("validated with the scenario"),
            config,
            max_channels: u32::MAX,
            channels: 0,
        }
    }

    /// Core's admission itself, for the HTTP path's server connection machines.
    pub fn core_mut(&mut self) -> &mut CoreAdmission<u32> {
        &mut self.core
    }

    /// Sessions open.
    pub fn sessions(&self) -> usize {
        self.core.sessions()
    }

    /// Whether a new session from `source` would be admitted now (without admitting it).
    pub fn can_open(&self, source: u32) -> bool {
        self.channels < self.max_channels
            && self.core.sessions() < self.config.max_sessions
            && self.core.source_sessions(&source) < self.config.max_sessions_per_source
    }

    /// Opens a session (it holds one channel) from `source`, or names the full limit.
    pub fn open_session(&mut self, now: Instant, source: u32) -> Result<SessionTicket<u32>, Limit> {
        if self.channels >= self.max_channels {
            return Err(Limit::Channels);
        }
        let ticket = self
            .core
            .open_session(now, source)
            .map_err(|r| Limit::from_reason(r.reason))?;
        self.channels += 1;
        Ok(ticket)
    }

    /// Closes a session (idle timeout, the reader went away).
    pub fn close_session(&mut self, now: Instant, ticket: SessionTicket<u32>) {
        self.channels = self.channels.saturating_sub(1);
        self.core.close_session(now, ticket);
    }

    /// Starts a request on `session` reserving `bytes` of response memory; nothing stays
    /// reserved on refusal.
    pub fn begin_request(
        &mut self,
        now: Instant,
        session: &mut SessionTicket<u32>,
        bytes: u64,
    ) -> Result<RequestTicket<u32>, Limit> {
        if self.channels >= self.max_channels {
            return Err(Limit::Channels);
        }
        let mut ticket = self
            .core
            .begin_request(now, session)
            .map_err(|r| Limit::from_reason(r.reason))?;
        if let Err(r) = self.core.reserve_bytes(&mut ticket, bytes) {
            self.core.finish_request(now, Some(session), ticket);
            return Err(Limit::from_reason(r.reason));
        }
        self.channels += 1;
        Ok(ticket)
    }

    /// Ends a request started with [`Admission::begin_request`].
    pub fn finish_request(
        &mut self,
        now: Instant,
        session: Option<&mut SessionTicket<u32>>,
        ticket: RequestTicket<u32>,
    ) {
        self.channels = self.channels.saturating_sub(1);
        self.core.finish_request(now, session, ticket);
    }

    /// Forgets everything (the node crashed; outstanding tickets are dropped with it).
    pub fn reset(&mut self) {
        self.core = CoreAdmission::new(self.config.clone()).expect("validated");
        self.channels = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Instant = Instant::ZERO;

    fn limits() -> Listener {
        Listener {
            max_sessions: 2,
            max_sessions_per_source: 1,
            max_channels: 3,
            max_requests: 4,
            max_requests_per_session: 2,
            max_inflight_mib: 64,
            max_inflight_per_source_mib: 16,
            ..Listener::default()
        }
    }

    #[test]
    fn sessions_and_per_source_quota_come_from_core_admission() {
        let mut a = Admission::new(&limits());
        let t1 = a.open_session(T, 1).unwrap();
        assert_eq!(a.open_session(T, 1).unwrap_err(), Limit::SourceSessions);
        let t2 = a.open_session(T, 2).unwrap();
        assert_eq!(a.open_session(T, 3).unwrap_err(), Limit::Sessions);
        a.close_session(T, t2);
        let t3 = a.open_session(T, 3).unwrap();
        a.close_session(T, t1);
        a.close_session(T, t3);
        assert_eq!(a.sessions(), 0);
    }

    #[test]
    fn channels_fill_before_sessions() {
        // Two sessions hold two channels; one request takes the third; a second request
        // finds no channel although request slots are free.
        let mut a = Admission::new(&limits());
        let mut s1 = a.open_session(T, 1).unwrap();
        let mut s2 = a.open_session(T, 2).unwrap();
        let r1 = a.begin_request(T, &mut s1, 10).unwrap();
        assert_eq!(
            a.begin_request(T, &mut s2, 10).unwrap_err(),
            Limit::Channels
        );
        a.finish_request(T, Some(&mut s1), r1);
        let r2 = a.begin_request(T, &mut s2, 10).unwrap();
        a.finish_request(T, Some(&mut s2), r2);
        a.close_session(T, s1);
        a.close_session(T, s2);
    }

    #[test]
    fn byte_budgets_bound_concurrent_responses_and_a_refusal_reserves_nothing() {
        let mut a = Admission::new(&Listener {
            max_inflight_per_source_mib: 8,
            ..Listener::default()
        });
        let mut s = a.open_session(T, 1).unwrap();
        let r1 = a.begin_request(T, &mut s, 4 << 20).unwrap();
        let r2 = a.begin_request(T, &mut s, 4 << 20).unwrap();
        a.finish_request(T, Some(&mut s), r2);
        let r3 = a.begin_request(T, &mut s, 4 << 20).unwrap();
        let mut s2 = a.open_session(T, 1).unwrap();
        assert_eq!(
            a.begin_request(T, &mut s2, 4 << 20).unwrap_err(),
            Limit::SourceInflightBytes
        );
        a.finish_request(T, Some(&mut s), r1);
        a.finish_request(T, Some(&mut s), r3);
        let r4 = a.begin_request(T, &mut s2, 4 << 20).unwrap();
        a.finish_request(T, Some(&mut s2), r4);
        a.close_session(T, s);
        a.close_session(T, s2);
    }

    #[test]
    fn core_validation_errors_map_to_scenario_keys() {
        let bad = Listener {
            max_sessions_per_source: 8,
            max_requests_per_session: 2,
            max_requests: 16,
            ..Listener::default()
        };
        let e = admission_config(&bad).validate().unwrap_err();
        assert_eq!(scenario_key(&e), "listener.max_requests");
    }
}
