//! A node's listener limits: sessions, per-source sessions, channels, requests and
//! in-flight response bytes.
//!
//! This is the simulator's model of the reference listener (`listener-limits-adr.md`).
//! Sessions, per-source quota, request slots and byte budgets have the same meaning as in
//! peerblock's server admission; channels exist only in the reference's WebRTC transport
//! (each session holds one, each request in flight one more), so a replay of the old
//! limits can run out of channels before sessions, as the testnet did.
//!
//! The model only counts; what a full listener *does* (stay silent or refuse) is decided
//! by the node from [`crate::scenario::WhenFull`].

use std::collections::BTreeMap;

use crate::scenario::Listener;

/// Which limit turned a dial or request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Limit {
    /// `max_sessions`.
    Sessions,
    /// `max_sessions_per_source`.
    SourceSessions,
    /// `max_channels`.
    Channels,
    /// `max_requests`.
    Requests,
    /// `max_requests_per_session`.
    SessionRequests,
    /// `max_inflight_mib`.
    InflightBytes,
    /// `max_inflight_per_source_mib`.
    SourceInflightBytes,
}

impl Limit {
    /// Short name used in traces and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Sessions => "sessions",
            Limit::SourceSessions => "source-sessions",
            Limit::Channels => "channels",
            Limit::Requests => "requests",
            Limit::SessionRequests => "session-requests",
            Limit::InflightBytes => "inflight-bytes",
            Limit::SourceInflightBytes => "source-inflight-bytes",
        }
    }

    /// Whether the limit is hit when opening a session (as opposed to a request).
    pub fn is_session_limit(self) -> bool {
        matches!(self, Limit::Sessions | Limit::SourceSessions)
    }
}

#[derive(Debug, Default, Clone)]
struct Source {
    sessions: u32,
    inflight: u64,
}

/// Counters of one listener against its limits.
#[derive(Debug, Clone)]
pub struct Admission {
    max_sessions: u32,
    max_sessions_per_source: u32,
    max_channels: u32,
    max_requests: u32,
    max_requests_per_session: u32,
    max_inflight: u64,
    max_inflight_per_source: u64,
    sessions: u32,
    channels: u32,
    requests: u32,
    inflight: u64,
    sources: BTreeMap<u32, Source>,
}

impl Admission {
    /// Empty listener with the scenario's limits.
    pub fn new(l: &Listener) -> Self {
        Admission {
            max_sessions: l.max_sessions,
            max_sessions_per_source: l.max_sessions_per_source,
            max_channels: l.max_channels,
            max_requests: l.max_requests,
            max_requests_per_session: l.max_requests_per_session,
            max_inflight: u64::from(l.max_inflight_mib) << 20,
            max_inflight_per_source: u64::from(l.max_inflight_per_source_mib) << 20,
            sessions: 0,
            channels: 0,
            requests: 0,
            inflight: 0,
            sources: BTreeMap::new(),
        }
    }

    /// Sessions open.
    pub fn sessions(&self) -> u32 {
        self.sessions
    }

    /// Whether a new session from `source` would be admitted now.
    pub fn can_open(&self, source: u32) -> Result<(), Limit> {
        if self.sessions >= self.max_sessions {
            return Err(Limit::Sessions);
        }
        if self.sources.get(&source).map_or(0, |s| s.sessions) >= self.max_sessions_per_source {
            return Err(Limit::SourceSessions);
        }
        if self.channels >= self.max_channels {
            return Err(Limit::Channels);
        }
        Ok(())
    }

    /// Opens a session (one channel) from `source`, or names the limit that is full.
    pub fn open_session(&mut self, source: u32) -> Result<(), Limit> {
        self.can_open(source)?;
        self.sessions += 1;
        self.channels += 1;
        self.sources.entry(source).or_default().sessions += 1;
        Ok(())
    }

    /// Closes a session opened by `source` (idle timeout, crash).
    pub fn close_session(&mut self, source: u32) {
        self.sessions = self.sessions.saturating_sub(1);
        self.channels = self.channels.saturating_sub(1);
        if let Some(s) = self.sources.get_mut(&source) {
            s.sessions = s.sessions.saturating_sub(1);
            if s.sessions == 0 && s.inflight == 0 {
                self.sources.remove(&source);
            }
        }
    }

    /// Starts a request on a session that already has `session_requests` in flight,
    /// reserving `bytes` of response memory; nothing is reserved on refusal.
    pub fn begin_request(
        &mut self,
        source: u32,
        session_requests: u32,
        bytes: u64,
    ) -> Result<(), Limit> {
        if self.channels >= self.max_channels {
            return Err(Limit::Channels);
        }
        if self.requests >= self.max_requests {
            return Err(Limit::Requests);
        }
        if session_requests >= self.max_requests_per_session {
            return Err(Limit::SessionRequests);
        }
        if self.inflight + bytes > self.max_inflight {
            return Err(Limit::InflightBytes);
        }
        let src = self.sources.entry(source).or_default();
        if src.inflight + bytes > self.max_inflight_per_source {
            return Err(Limit::SourceInflightBytes);
        }
        src.inflight += bytes;
        self.inflight += bytes;
        self.channels += 1;
        self.requests += 1;
        Ok(())
    }

    /// Ends a request started with [`Admission::begin_request`].
    pub fn finish_request(&mut self, source: u32, bytes: u64) {
        self.channels = self.channels.saturating_sub(1);
        self.requests = self.requests.saturating_sub(1);
        self.inflight = self.inflight.saturating_sub(bytes);
        if let Some(s) = self.sources.get_mut(&source) {
            s.inflight = s.inflight.saturating_sub(bytes);
            if s.sessions == 0 && s.inflight == 0 {
                self.sources.remove(&source);
            }
        }
    }

    /// Forgets everything (the node crashed).
    pub fn reset(&mut self) {
        self.sessions = 0;
        self.channels = 0;
        self.requests = 0;
        self.inflight = 0;
        self.sources.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Listener {
        Listener {
            max_sessions: 2,
            max_sessions_per_source: 1,
            max_channels: 3,
            max_requests: 2,
            max_requests_per_session: 2,
            max_inflight_mib: 64,
            max_inflight_per_source_mib: 16,
            ..Listener::default()
        }
    }

    #[test]
    fn sessions_and_per_source_quota_are_enforced() {
        let mut a = Admission::new(&limits());
        assert_eq!(a.open_session(1), Ok(()));
        assert_eq!(a.open_session(1), Err(Limit::SourceSessions));
        assert_eq!(a.open_session(2), Ok(()));
        assert_eq!(a.open_session(3), Err(Limit::Sessions));
        a.close_session(2);
        assert_eq!(a.open_session(3), Ok(()));
    }

    #[test]
    fn channels_fill_before_sessions() {
        // Two sessions hold two channels; one request takes the third; a second request
        // finds no channel although a request slot is free.
        let mut a = Admission::new(&limits());
        a.open_session(1).unwrap();
        a.open_session(2).unwrap();
        assert_eq!(a.begin_request(1, 0, 10), Ok(()));
        assert_eq!(a.begin_request(2, 0, 10), Err(Limit::Channels));
        a.finish_request(1, 10);
        assert_eq!(a.begin_request(2, 0, 10), Ok(()));
    }

    #[test]
    fn byte_budgets_bound_concurrent_responses() {
        let mut a = Admission::new(&Listener {
            max_inflight_per_source_mib: 8,
            ..Listener::default()
        });
        a.open_session(1).unwrap();
        assert_eq!(a.begin_request(1, 0, 4 << 20), Ok(()));
        assert_eq!(a.begin_request(1, 1, 4 << 20), Ok(()));
        assert_eq!(
            a.begin_request(1, 0, 4 << 20),
            Err(Limit::SourceInflightBytes)
        );
    }
}
