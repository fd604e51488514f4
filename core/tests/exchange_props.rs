//! Property: under any sequence of connections, requests, answers, writes, timeouts and
//! aborts, admission never exceeds a limit, and once every connection is closed every
//! slot and byte has been released exactly once.

use std::sync::Arc;

use bytes::Bytes;
use peerblock_core::server::{
    Admission, AdmissionConfig, RequestId, ServerConfig, ServerConnection, ServerEvent,
    SourceResult,
};
use peerblock_core::time::{Duration, Instant};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Accept(u32),
    Input(usize, u8),
    Answer(usize, u8, usize),
    Write(usize, bool),
    Wait(u64),
    Close(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..4).prop_map(Op::Accept),
        (0usize..8, 0u8..6).prop_map(|(c, k)| Op::Input(c, k)),
        (0usize..8, 0u8..4, 0usize..80).prop_map(|(c, k, n)| Op::Answer(c, k, n)),
        (0usize..8, any::<bool>()).prop_map(|(c, a)| Op::Write(c, a)),
        (0u64..200).prop_map(Op::Wait),
        (0usize..8).prop_map(Op::Close),
    ]
}

const REQUESTS: [&[u8]; 6] = [
    b"GET /peer/v1/block/0a0b/1 HTTP/1.1\r\nHost: s\r\n\r\n",
    b"GET /peer/v1/block/0a0b/2 HTTP/1.1\r\nHost: s\r\nX-DART-Hop: -1\r\n\r\n",
    b"GET /peer/v1/roster HTTP/1.1\r\nHost: s\r\nX-DART-Node: c\r\nX-DART-Peer-Addr: c:1\r\n\r\n",
    b"garbage\r\n\r\n",
    b"GET /peer/v1/block/0a0b/3 HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n",
    b"GET /peer/v1/block/0a0b/4 HTTP/1.1\r\nHost: s\r\n\r\nGET /peer/v1/block/0a0b/5 HTTP/1.1\r\nHost: s\r\n\r\n",
];

struct Conn {
    machine: ServerConnection<u32>,
    pending: Vec<(RequestId, bool)>,
    unacked: usize,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn admission_is_bounded_and_fully_released(ops in proptest::collection::vec(op(), 1..80)) {
        let limits = AdmissionConfig {
            max_sessions: 5,
            max_sessions_per_source: 2,
            max_requests: 5,
            max_requests_per_session: 2,
            max_inflight_bytes: 120,
            max_inflight_bytes_per_source: 70,
            max_tracked_sources: 8,
            ..AdmissionConfig::default()
        };
        let mut adm = Admission::<u32>::new(limits.clone()).unwrap();
        let config = Arc::new(ServerConfig::new("n", "h:1"));
        let mut conns: Vec<Conn> = Vec::new();
        let mut now = Instant::ZERO;
        let roster = peerblock_core::roster::Roster { epoch: 1, members: vec![] };
        for op in ops {
            let n_conns = conns.len().max(1);
            match op {
                Op::Accept(source) => {
                    let before = (adm.sessions(), adm.requests(), adm.inflight_bytes());
                    let machine = ServerConnection::accept(now, &mut adm, source, Arc::clone(&config)).unwrap();
                    if machine.refused().is_some() {
                        // A refused connection reserves nothing; it answers its first
                        // request with the 503.
                        prop_assert_eq!(before, (adm.sessions(), adm.requests(), adm.inflight_bytes()));
                    }
                    conns.push(Conn { machine, pending: vec![], unacked: 0 });
                }
                Op::Input(i, k) => if let Some(c) = conns.get_mut(i % n_conns) {
                    let _ = c.machine.handle_input(now, REQUESTS[usize::from(k)]);
                    if c.machine.needs_admission() {
                        c.machine.handle_admission(now, &mut adm);
                    }
                }
                Op::Answer(i, k, n) => if let Some(c) = conns.get_mut(i % n_conns) {
                    while let Some(e) = c.machine.poll_event() {
                        match e {
                            ServerEvent::Fetch { id, .. } | ServerEvent::Relay { id, .. } => c.pending.push((id, true)),
                            ServerEvent::Roster { id, .. } => c.pending.push((id, false)),
                            ServerEvent::SourceTimedOut { id } => c.pending.retain(|(p, _)| *p != id),
                            ServerEvent::Rejected { .. } => {}
                        }
                    }
                    if !c.pending.is_empty() {
                        let (id, block) = c.pending.remove(0);
                        if block {
                            let result = match k {
                                0 => SourceResult::Found(Bytes::from(vec![7u8; n])),
                                1 => SourceResult::Miss,
                                2 => SourceResult::Failed,
                                _ => SourceResult::UpstreamRefused { status: 403 },
                            };
                            prop_assert!(c.machine.handle_source(now, &mut adm, id, result).is_ok());
                        } else {
                            prop_assert!(c.machine.handle_roster(now, id, &roster).is_ok());
                        }
                    }
                }
                Op::Write(i, ack) => if let Some(c) = conns.get_mut(i % n_conns) {
                    if c.machine.poll_transmit(now).is_some() {
                        c.unacked += 1;
                    }
                    if ack && c.unacked > 0 {
                        c.unacked -= 1;
                        c.machine.handle_transmitted(now, &mut adm);
                    }
                }
                Op::Wait(s) => {
                    now += Duration::from_secs(s);
                    for c in &mut conns {
                        c.machine.handle_timeout(now);
                        if let Some(t) = c.machine.poll_timeout() {
                            prop_assert!(t.at > now, "stale deadline");
                        }
                    }
                }
                Op::Close(i) => if !conns.is_empty() {
                    let mut c = conns.remove(i % conns.len());
                    c.machine.close(now, &mut adm);
                }
            }
            prop_assert!(adm.sessions() <= limits.max_sessions);
            prop_assert!(adm.requests() <= limits.max_requests);
            prop_assert!(adm.inflight_bytes() <= limits.max_inflight_bytes);
            prop_assert!(adm.tracked_sources() <= limits.max_tracked_sources);
        }
        for mut c in conns {
            c.machine.close(now, &mut adm);
        }
        prop_assert_eq!((adm.sessions(), adm.requests(), adm.inflight_bytes()), (0, 0, 0));
        prop_assert_eq!(adm.tracked_sources(), 0);
    }
}
