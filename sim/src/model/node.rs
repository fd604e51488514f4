//! A modelled storage node: its health, its listener (sessions and limits) and its
//! upload link.
//!
//! Sessions model the reference's multiplexed transport (WebRTC sessions with channels):
//! one session per reader, carrying several requests at once. The simulation's HTTP/1.1
//! arms do not come here: their connections are real `ServerConnection`s admitted through
//! the node's `admission` (`world::http`).

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use peerblock_core::load::{KeyCounter, KeyCounterConfig};
use peerblock_core::server::{RequestTicket, SessionTicket};
use peerblock_core::time::{Duration, Instant};

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

/// A session's key: reader in the high half, connection number in the low half.
pub type ConnKey = u64;

/// The key of `reader`'s connection `conn`.
pub fn conn_key(reader: u32, conn: u32) -> ConnKey {
    (u64::from(reader) << 32) | u64::from(conn)
}

fn reader_range(reader: u32) -> RangeInclusive<ConnKey> {
    conn_key(reader, 0)..=conn_key(reader, u32::MAX)
}

/// One connection of a reader at a node.
#[derive(Debug)]
pub struct Session {
    /// The admission ticket (source address, requests in flight).
    pub ticket: SessionTicket<u32>,
    /// Last time a request started or finished on it.
    pub last_used: Instant,
    /// GETs the reader has assigned to this connection and not yet ended.
    pub claimed: u32,
}

impl Session {
    fn busy(&self) -> bool {
        self.ticket.requests() > 0 || self.claimed > 0
    }

    fn live(&self, now: Instant, idle: Duration) -> bool {
        self.busy() || self.last_used + idle > now
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
    /// Sessions by (reader, connection).
    pub sessions: BTreeMap<ConnKey, Session>,
    /// Upload link.
    pub uplink: Uplink,
    /// Bytes of completed responses.
    pub bytes_served: u64,
    /// GETs received per block, decayed: what the node reports in its lookup replies
    /// when the scenario's readers ask for per-key load hints.
    pub keys: KeyCounter<u32>,
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
            keys: KeyCounter::new(KeyCounterConfig::default()).expect("default is valid"),
            next_expiry: Instant::MAX,
        }
    }

    /// Whether a reader's packets reach the node at all.
    pub fn reachable(&self) -> bool {
        !self.nat && !self.partitioned && self.health != Health::Down
    }

    /// The live session of `reader` a new GET can use now, whatever it carries.
    pub fn usable_connection(&self, reader: u32, now: Instant, idle: Duration) -> Option<u32> {
        self.sessions
            .range(reader_range(reader))
            .find(|(_, s)| s.live(now, idle))
            .map(|(&k, _)| k as u32)
    }

    /// Assigns a GET to a connection.
    pub fn claim(&mut self, reader: u32, conn: u32) {
        if let Some(s) = self.sessions.get_mut(&conn_key(reader, conn)) {
            s.claimed += 1;
        }
    }

    /// A GET assigned to a connection ended; the connection may idle out from `now`.
    pub fn unclaim(&mut self, reader: u32, conn: u32, now: Instant, idle: Duration) {
        if let Some(s) = self.sessions.get_mut(&conn_key(reader, conn)) {
            s.claimed = s.claimed.saturating_sub(1);
            s.last_used = now;
            self.next_expiry = self.next_expiry.min(now + idle);
        }
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
        let expired: Vec<ConnKey> = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.live(now, idle))
            .map(|(&k, _)| k)
            .collect();
        for k in expired {
            if let Some(s) = self.sessions.remove(&k) {
                self.admission.close_session(now, s.ticket);
            }
        }
    }

    /// Opens connection `conn` for `reader` from `source` (or finds it already open),
    /// closing idle sessions first if a limit is in the way.
    pub fn open_session(
        &mut self,
        reader: u32,
        conn: u32,
        source: u32,
        now: Instant,
        idle: Duration,
    ) -> Result<(), Limit> {
        let key = conn_key(reader, conn);
        if let Some(s) = self.sessions.get(&key) {
            if s.live(now, idle) {
                return Ok(());
            }
            let s = self.sessions.remove(&key).expect("present");
            self.admission.close_session(now, s.ticket);
        }
        if !self.admission.can_open(source) {
            self.expire_idle(now, idle);
        }
        let ticket = self.admission.open_session(now, source)?;
        self.sessions.insert(
            key,
            Session {
                ticket,
                last_used: now,
                claimed: 0,
            },
        );
        self.next_expiry = self.next_expiry.min(now + idle);
        Ok(())
    }

    /// Starts a request on `reader`'s connection `conn` reserving `bytes`.
    pub fn begin_request(
        &mut self,
        reader: u32,
        conn: u32,
        now: Instant,
        bytes: u64,
    ) -> Result<RequestTicket<u32>, Limit> {
        let Some(s) = self.sessions.get_mut(&conn_key(reader, conn)) else {
            return Err(Limit::Sessions);
        };
        let ticket = self.admission.begin_request(now, &mut s.ticket, bytes)?;
        s.last_used = now;
        Ok(ticket)
    }

    /// Ends a request started with [`Node::begin_request`].
    pub fn finish_request(
        &mut self,
        reader: u32,
        conn: u32,
        now: Instant,
        ticket: RequestTicket<u32>,
        idle: Duration,
    ) {
        let session = match self.sessions.get_mut(&conn_key(reader, conn)) {
            Some(s) => {
                s.last_used = now;
                Some(&mut s.ticket)
            }
            None => None,
        };
        self.admission.finish_request(now, session, ticket);
        self.next_expiry = self.next_expiry.min(now + idle);
    }

    /// Marks a connection used at `now` (a small answer such as a 404).
    pub fn touch(&mut self, reader: u32, conn: u32, now: Instant, idle: Duration) {
        if let Some(s) = self.sessions.get_mut(&conn_key(reader, conn)) {
            s.last_used = now;
            self.next_expiry = self.next_expiry.min(now + idle);
        }
    }

    /// Closes `reader`'s connections that carry nothing (the reader went away).
    pub fn close_sessions(&mut self, reader: u32, now: Instant) {
        let idle: Vec<ConnKey> = self
            .sessions
            .range(reader_range(reader))
            .filter(|(_, s)| !s.busy())
            .map(|(&k, _)| k)
            .collect();
        for k in idle {
            if let Some(s) = self.sessions.remove(&k) {
                self.admission.close_session(now, s.ticket);
            }
        }
    }

    /// Crashes the node: sessions, counters and transfers are gone.
    pub fn crash(&mut self, now: Instant) {
        self.health = Health::Down;
        self.epoch = self.epoch.wrapping_add(1);
        self.sessions.clear();
        self.next_expiry = Instant::MAX;
        self.admission.reset();
        self.keys.clear();
        let _ = self.uplink.clear(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_session() -> Listener {
        Listener {
            max_sessions: 1,
            max_sessions_per_source: 1,
            ..Listener::default()
        }
    }

    #[test]
    fn idle_sessions_free_their_slot_when_needed() {
        let mut n = Node::new(false, 1e6, f64::INFINITY, &one_session());
        let idle = Duration::from_secs(30);
        n.open_session(1, 0, 1, Instant::ZERO, idle).unwrap();
        assert_eq!(
            n.open_session(2, 0, 2, Instant::from_secs(10), idle),
            Err(Limit::Sessions)
        );
        assert_eq!(
            n.open_session(2, 0, 2, Instant::from_secs(30), idle),
            Ok(())
        );
        assert_eq!(n.usable_connection(1, Instant::from_secs(31), idle), None);
    }

    #[test]
    fn a_busy_session_never_expires() {
        let mut n = Node::new(false, 1e6, f64::INFINITY, &one_session());
        let idle = Duration::from_secs(30);
        n.open_session(1, 0, 1, Instant::ZERO, idle).unwrap();
        let _held = n.begin_request(1, 0, Instant::ZERO, 10).unwrap();
        assert_eq!(
            n.open_session(2, 0, 2, Instant::from_secs(100), idle),
            Err(Limit::Sessions)
        );
        assert_eq!(
            n.usable_connection(1, Instant::from_secs(100), idle),
            Some(0)
        );
    }
}
