//! Property: under any sequence of connections, requests, answers, writes, timeouts and
//! aborts, admission never exceeds a limit, and once every connection is closed every
//! slot and byte has been released exactly once.

use std::sync::Arc;

use bytes::Bytes;
use peerblock_core::server::{
    Admission, AdmissionConfig, RequestId, ServerConfig, ServerConnection, ServerEvent,
    ServerUsageError, SourceResult,
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
    /// Whether each transmit handed out and not yet acknowledged ends the connection.
    unacked: std::collections::VecDeque<bool>,
    /// A connection-ending response was acknowledged: the requests queued behind it are
    /// withdrawn, so an answer to an ask already polled is `Err(UnknownRequest)`
    /// (documented at `handle_transmitted`), and no other error is allowed.
    ended: bool,
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
        let roster = peerblock_core::roster::Roster { epoch: 1, epoch_sig: None, members: vec![] };
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
                    conns.push(Conn { machine, pending: vec![], unacked: Default::default(), ended: false });
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
                            other => panic!("an event this test does not know: {other:?}"),
                        }
                    }
                    if !c.pending.is_empty() {
                        let (id, block) = c.pending.remove(0);
                        let answered = if block {
                            let result = match k {
                                0 => SourceResult::Found(Bytes::from(vec![7u8; n])),
                                1 => SourceResult::Miss,
                                2 => SourceResult::Failed,
                                _ => SourceResult::UpstreamRefused { status: 403 },
                            };
                            c.machine.handle_source(now, &mut adm, id, result)
                        } else {
                            c.machine.handle_roster(now, id, &roster)
                        };
                        // Ok, except an ask withdrawn behind an acknowledged
                        // connection-ending response: exactly `UnknownRequest` of its id.
                        let withdrawn = c.ended && answered == Err(ServerUsageError::UnknownRequest(id));
                        prop_assert!(answered.is_ok() || withdrawn, "{answered:?}");
                    }
                }
                Op::Write(i, ack) => if let Some(c) = conns.get_mut(i % n_conns) {
                    if let Some(tx) = c.machine.poll_transmit(now) {
                        c.unacked.push_back(tx.close.ends_connection());
                    }
                    if ack {
                        if let Some(ends) = c.unacked.pop_front() {
                            c.machine.handle_transmitted(now, &mut adm);
                            c.ended |= ends;
                        }
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

// ---- the client exchange ----

mod client {
    use super::*;
    use peerblock_core::client::{
        BlockRequest, ClientConfig, ClientEvent, Exchange, ExchangeRequest, Link,
    };
    use peerblock_core::wire::{BlockPath, ChunkKey};

    /// One input to the exchange. `Bytes(k, n)`: the next `n` bytes of response `k`.
    #[derive(Clone, Debug)]
    enum In {
        Connected,
        Transmit(bool),
        Ack,
        Bytes(usize),
        Eof,
        Wait(u64),
        Validate(bool),
        Cancel,
    }

    fn input() -> impl Strategy<Value = In> {
        prop_oneof![
            Just(In::Connected),
            any::<bool>().prop_map(In::Transmit),
            Just(In::Ack),
            (1usize..40).prop_map(In::Bytes),
            Just(In::Eof),
            (0u64..15_000).prop_map(In::Wait),
            any::<bool>().prop_map(In::Validate),
            Just(In::Cancel),
        ]
    }

    const RESPONSES: [&[u8]; 6] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcdHTTP/1.1 200 OK\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 503 Service Unavailable\r\nX-Peerblock-Refused: rate\r\nRetry-After: 99\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
        b"SMTP ready\r\n\r\n",
    ];

    /// Runs `inputs` against response `k`, feeding bytes by slice or through the read
    /// window; returns the transcript (every count taken and every event) after checking
    /// the per-step rules.
    fn run(k: usize, inputs: &[In], window: bool) -> Vec<String> {
        let req = ExchangeRequest::get_validated(
            "s:1",
            BlockRequest::new(BlockPath {
                key: ChunkKey::from_array([1; 32]),
                index: 1,
            }),
            4,
            true,
        );
        let mut ex =
            Exchange::new(Instant::ZERO, &ClientConfig::default(), req, Link::Dial).expect("valid");
        let wire = RESPONSES[k];
        let (mut at, mut now) = (0usize, Instant::ZERO);
        let (mut heads, mut dones) = (0, 0);
        let mut log = Vec::new();
        for i in inputs {
            match *i {
                In::Connected => ex.handle_connected(now),
                In::Transmit(ack) => {
                    if let Some(t) = ex.poll_transmit(now) {
                        log.push(format!("tx {}", t.head.len()));
                        if ack {
                            ex.handle_transmitted(now);
                        }
                    }
                }
                In::Ack => ex.handle_transmitted(now),
                In::Bytes(n) => {
                    let chunk = &wire[at.min(wire.len())..(at + n).min(wire.len())];
                    let finished = ex.is_finished();
                    let taken = if !window {
                        ex.handle_input(now, chunk)
                    } else if let Some(w) = ex.read_buf() {
                        assert!(!w.is_empty(), "an empty window");
                        let m = w.len().min(chunk.len());
                        w[..m].copy_from_slice(&chunk[..m]);
                        ex.handle_read(now, m)
                    } else {
                        ex.handle_read(now, chunk.len())
                    };
                    assert!(taken <= chunk.len());
                    if finished {
                        assert_eq!(taken, chunk.len(), "after the outcome, all is discarded");
                    }
                    at += taken;
                    log.push(format!("in {taken}"));
                }
                In::Eof => ex.handle_eof(now),
                In::Wait(ms) => {
                    now += Duration::from_millis(ms);
                    ex.handle_timeout(now);
                }
                In::Validate(ok) => ex.handle_validated(now, ok),
                In::Cancel => ex.cancel(now),
            }
            while let Some(e) = ex.poll_event() {
                match &e {
                    ClientEvent::Head { .. } => {
                        heads += 1;
                        assert_eq!(dones, 0, "a head after the outcome");
                    }
                    ClientEvent::Validate { .. } => assert_eq!(dones, 0),
                    ClientEvent::Done(_) => dones += 1,
                    other => panic!("an event this test does not know: {other:?}"),
                }
                log.push(format!("{e:?}"));
            }
            assert!(heads <= 1, "more than one head event");
            assert!(dones <= 1, "more than one outcome");
            if ex.is_finished() {
                assert_eq!(ex.poll_timeout(), None);
                assert!(ex.read_buf().is_none());
            }
        }
        log
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn at_most_one_head_and_one_outcome_and_both_input_forms_agree(
            k in 0usize..RESPONSES.len(),
            inputs in proptest::collection::vec(input(), 1..40),
        ) {
            let by_slice = run(k, &inputs, false);
            let by_window = run(k, &inputs, true);
            prop_assert_eq!(by_slice, by_window);
        }
    }
}
