//! A modelled storage node: its health, its listener (sessions and limits) and its
//! upload link.

use std::collections::BTreeMap;

use peerblock_core::time::{Duration, Instant};

use peerblock_core::server::{RequestTicket, SessionTicket};

use crate::listener::{Admission, Limit};
use crate::net::Uplink;
use crate::scenario::Listener;

/// What a node does with traffic that reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Serving normally.
    Up,
    /// Crashed: nothing is answered, sessions are gone.
    Down,
    /// Accepts dials and requests, never answers a request.
    Silent,
}

/// One reader's session at a node.
#[derive(Debug)]
pub struct Session {
    /// The admission ticket (source address, requests in flight).
    pub ticket: SessionTicket<u32>,
    /// Last time a request started or finished on it.
    pub last_used: Instant,
}

impl Session {
    fn busy(&self) -> bool {
        self.ticket.requests() > 0
    }
}

/// A node.
#[derive(Debug)]
pub struct Node {
    /// Behind NAT: readers cannot dial it.
    pub nat: bool,
    /// Current health.
    pub health: Health,
    /// Cut off from readers by a partition.
    pub partitioned: bool,
    /// Serves wrong bytes (a `corrupt` fault): readers' verification must catch it.
    pub corrupt: bool,
    /// Bumped on every crash, so work started before it is recognised as lost.
    pub epoch: u32,
    /// Full-rate upload bandwidth, bytes per second.
    pub base_rate: f64,
    /// Listener counters.
    pub admission: Admission,
    /// Sessions by reader.
    pub sessions: BTreeMap<u32, Session>,
    /// Upload link.
    pub uplink: Uplink,
    /// Bytes of completed responses.
    pub bytes_served: u64,
    /// No idle session can expire before this: sweeps before it are skipped (a lower
    /// bound, so a sweep may find nothing, never miss anything).
    next_expiry: Instant,
}

impl Node {
    /// A healthy, idle node.
    pub fn new(nat: bool, bytes_per_sec: f64, cap: f64, limits: &Listener) -> Self {
        Node {
            nat,
            health: Health::Up,
            partitioned: false,
            corrupt: false,
            epoch: 0,
            base_rate: bytes_per_sec,
            admission: Admission::new(limits),
            sessions: BTreeMap::new(),
            uplink: Uplink::new(bytes_per_sec, cap),
            bytes_served: 0,
            next_expiry: Instant::MAX,
        }
    }

    /// Whether a reader's packets reach the node at all.
    pub fn reachable(&self) -> bool {
        !self.nat && !self.partitioned && self.health != Health::Down
    }

    /// Whether `reader` holds a live session here at `now` (idle sessions expire).
    pub fn has_session(&self, reader: u32, now: Instant, idle: Duration) -> bool {
        self.sessions
            .get(&reader)
            .is_some_and(|s| s.busy() || s.last_used + idle > now)
    }

    /// Closes sessions idle for `idle` or longer.
    pub fn expire_idle(&mut self, now: Instant, idle: Duration) {
        if now < self.next_expiry {
            return;
        }
        self.next_expiry = self
            .sessions
            .values()
            .filter(|s| !s.busy() && s.last_used + idle > now)
            .map(|s| s.last_used + idle)
            .min()
            .unwrap_or(Instant::MAX);
        let expired: Vec<u32> = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.busy() && s.last_used + idle <= now)
            .map(|(&r, _)| r)
            .collect();
        for r in expired {
            if let Some(s) = self.sessions.remove(&r) {
                self.admission.close_session(now, s.ticket);
            }
        }
    }

    /// Opens a session for `reader` from `source`, closing idle sessions first if a limit
    /// is in the way.
    pub fn open_session(
        &mut self,
        reader: u32,
        source: u32,
        now: Instant,
        idle: Duration,
    ) -> Result<(), Limit> {
        if let Some(s) = self.sessions.get(&reader) {
            if s.busy() || s.last_used + idle > now {
                return Ok(());
            }
            let s = self.sessions.remove(&reader).expect("present");
            self.admission.close_session(now, s.ticket);
        }
        if !self.admission.can_open(source) {
            self.expire_idle(now, idle);
        }
        let ticket = self.admission.open_session(now, source)?;
        self.sessions.insert(
            reader,
            Session {
                ticket,
                last_used: now,
            },
        );
        self.next_expiry = self.next_expiry.min(now + idle);
        Ok(())
    }

    /// Starts a request on `reader`'s session reserving `bytes`.
    pub fn begin_request(
        &mut self,
        reader: u32,
        now: Instant,
        bytes: u64,
    ) -> Result<RequestTicket<u32>, Limit> {
        let Some(s) = self.sessions.get_mut(&reader) else {
            return Err(Limit::Sessions);
        };
        let ticket = self.admission.begin_request(now, &mut s.ticket, bytes)?;
        s.last_used = now;
        Ok(ticket)
    }

    /// Ends a request started with [`Node::begin_request`]; the session may expire
    /// `idle` after this if nothing else uses it.
    pub fn finish_request(
        &mut self,
        reader: u32,
        now: Instant,
        ticket: RequestTicket<u32>,
        idle: Duration,
    ) {
        let session = self.sessions.get_mut(&reader);
        let ticket_session = match session {
            Some(s) => {
                s.last_used = now;
                Some(&mut s.ticket)
            }
            None => None,
        };
        self.admission.finish_request(now, ticket_session, ticket);
        self.next_expiry = self.next_expiry.min(now + idle);
    }

    /// Marks `reader`'s session used at `now` (a small answer such as a 404).
    pub fn touch(&mut self, reader: u32, now: Instant, idle: Duration) {
        if let Some(s) = self.sessions.get_mut(&reader) {
            s.last_used = now;
            self.next_expiry = self.next_expiry.min(now + idle);
        }
    }

    /// Closes `reader`'s session if it has nothing in flight (the reader went away).
    pub fn close_session(&mut self, reader: u32, now: Instant) {
        if self.sessions.get(&reader).is_some_and(|s| !s.busy()) {
            let s = self.sessions.remove(&reader).expect("present");
            self.admission.close_session(now, s.ticket);
        }
    }

    /// Crashes the node: sessions, counters and transfers are gone.
    pub fn crash(&mut self, now: Instant) {
        self.health = Health::Down;
        self.epoch = self.epoch.wrapping_add(1);
        self.sessions.clear();
        self.next_expiry = Instant::MAX;
        self.admission.reset();
        let _ = self.uplink.clear(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_sessions_free_their_slot_when_needed() {
        let limits = Listener {
            max_sessions: 1,
            max_sessions_per_source: 1,
            ..Listener::default()
        };
        let mut n = Node::new(false, 1e6, f64::INFINITY, &limits);
        let idle = Duration::from_secs(30);
        n.open_session(1, 1, Instant::ZERO, idle).unwrap();
        assert_eq!(
            n.open_session(2, 2, Instant::from_secs(10), idle),
            Err(Limit::Sessions)
        );
        assert_eq!(n.open_session(2, 2, Instant::from_secs(30), idle), Ok(()));
        assert!(!n.has_session(1, Instant::from_secs(31), idle));
    }

    #[test]
    fn a_busy_session_never_expires() {
        let limits = Listener {
            max_sessions: 1,
            max_sessions_per_source: 1,
            ..Listener::default()
        };
        let mut n = Node::new(false, 1e6, f64::INFINITY, &limits);
        let idle = Duration::from_secs(30);
        n.open_session(1, 1, Instant::ZERO, idle).unwrap();
        let _held = n.begin_request(1, Instant::ZERO, 10).unwrap();
        assert_eq!(
            n.open_session(2, 2, Instant::from_secs(100), idle),
            Err(Limit::Sessions)
        );
        assert!(n.has_session(1, Instant::from_secs(100), idle));
    }
}
