//! Reader rules: whole reads over several holders, through refusals, dead holders and
//! the hedge.

use std::sync::Arc;
use std::time::{Duration, Instant};

use peerblock_common::client::Peer;
use peerblock_common::read::{BlockSpec, Candidate};
use peerblock_core::breaker::State;
use peerblock_core::bytes::Bytes;
use peerblock_core::placement::Key;
use peerblock_core::read::{LookupPeer, ReadConfig, ReadOutcome};

use crate::conformance::canned::{self, Reply};
use crate::conformance::Driver;

use super::*;

fn spec(body: &[u8]) -> BlockSpec {
    let expected = body.to_vec();
    BlockSpec {
        key: Key([0x11; 32]),
        path: canned::block_path(0x11, 0),
        expected: Some(body.len() as u64),
        validator: Some(Arc::new(move |b: &Bytes| b.as_ref() == &expected[..])),
        origin: None,
    }
}

fn candidates(addrs: &[&str]) -> Vec<Candidate> {
    addrs
        .iter()
        .map(|a| {
            let p = Peer::from_addr(*a);
            Candidate {
                peer: LookupPeer::new(p.id),
                addr: p.addr,
            }
        })
        .collect()
}

/// A read whose only holder refuses once (Retry-After 1 s) waits the refusal out and
/// completes from it.
pub fn a_read_whose_only_holder_refuses_once_completes_after_the_cooldown(d: &dyn Driver) {
    let server = canned::serve(|_, r, _| match r {
        0 => Reply::BytesThenClose(canned::refusal(1)),
        _ => Reply::Bytes(canned::ok(b"the block")),
    });
    let c = client_with(d, |s| s.seed = 7);
    let got = c.read(spec(b"the block"), candidates(&[&server.addr]));
    println!(
        "{}: refused once, then: {:?} after {:?} ({:?})",
        d.name(),
        got.outcome,
        got.elapsed,
        got.stats
    );
    assert_eq!(
        got.outcome,
        ReadOutcome::Found(b"the block".as_ref().into())
    );
    assert!(got.stats.refusal_waits >= 1, "{:?}", got.stats);
    assert!(
        got.elapsed >= Duration::from_millis(900),
        "waited out the 1 s Retry-After: {:?}",
        got.elapsed
    );
    assert_eq!(got.served_by.expect("served").addr, server.addr);
    assert_eq!(server.stats.accepts(), 2);
}

/// Holders that always refuse end the read Busy, never Absent.
pub fn a_read_whose_holders_always_refuse_ends_busy_never_absent(d: &dyn Driver) {
    let a = canned::serve(|_, _, _| Reply::BytesThenClose(canned::refusal(1)));
    let b = canned::serve(|_, _, _| Reply::BytesThenClose(canned::refusal(1)));
    let c = client_with(d, |s| {
        s.read = ReadConfig {
            max_refusal_waits: 1,
            ..ReadConfig::default()
        };
        s.seed = 7;
    });
    let got = c.read(spec(b"the block"), candidates(&[&a.addr, &b.addr]));
    println!(
        "{}: always refused: {:?} after {:?} ({:?})",
        d.name(),
        got.outcome,
        got.elapsed,
        got.stats
    );
    assert_eq!(got.outcome, ReadOutcome::Busy);
    assert!(got.served_by.is_none());
}

/// With one dead (closed port) and one live holder every read completes from the live
/// one; a read that asked the dead one first goes on to the live one, and the dead one
/// is routed around after.
pub fn a_read_with_one_dead_and_one_live_holder_completes_from_the_live_one(d: &dyn Driver) {
    let live = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"live block")));
    let dead = canned::closed_port();
    let c = client_with(d, |s| s.seed = 99);
    let holders = candidates(&[&dead, &live.addr]);
    let mut tried_dead = false;
    // Read until a read has asked the dead holder first (the uniform first choice is a
    // coin flip per read).
    for _ in 0..40 {
        let got = c.read(spec(b"live block"), holders.clone());
        assert_eq!(
            got.outcome,
            ReadOutcome::Found(b"live block".as_ref().into())
        );
        assert_eq!(got.served_by.expect("served").addr, live.addr);
        if got.stats.gets > 1 {
            println!(
                "{}: read asking the dead holder first: {:?} after {:?}",
                d.name(),
                got.stats,
                got.elapsed
            );
            tried_dead = true;
            break;
        }
    }
    assert!(
        tried_dead,
        "some read asked the dead holder and went on to the live one"
    );
    assert!(
        !c.peer_state(&Peer::from_addr(&dead).id).eligible,
        "the dead holder is routed around"
    );
}

/// A holder that takes the request and never answers (a host whose link went down: no
/// RST, no FIN) loses every read to the hedge. Its GET, cancelled while silent, must still
/// be cut at the client's own deadline and charged to it: counted as answered, the dead
/// holder's circuit would never open and every read asking it first would pay the hedge
/// delay for ever. A GET that has shown its head may be cancelled as answered.
pub fn a_silent_holder_that_loses_to_the_hedge_is_still_cut_at_its_deadline_and_charged(
    d: &dyn Driver,
) {
    use peerblock_core::breaker::BreakerConfig;
    let live = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"live block")));
    let silent = canned::serve(|_, _, _| Reply::BytesThenHold(Vec::new()));
    let c = client_with(d, |s| {
        s.options.exchange = deadlines(500, 300, 2_000);
        s.options.peers.breaker = Some(BreakerConfig {
            failure_threshold: 1,
            ..BreakerConfig::default()
        });
        s.read = ReadConfig {
            hedge_delay: Duration::from_millis(50),
            ..ReadConfig::default()
        };
        s.seed = 5;
    });
    let silent_id = Peer::from_addr(&silent.addr).id;
    let holders = candidates(&[&live.addr, &silent.addr]);
    let mut asked_silent_first = false;
    for _ in 0..40 {
        let got = c.read(spec(b"live block"), holders.clone());
        assert_eq!(got.served_by.expect("served").addr, live.addr);
        if got.stats.gets > 1 {
            println!(
                "{}: read that asked the silent holder first: {:?} after {:?}",
                d.name(),
                got.stats,
                got.elapsed
            );
            asked_silent_first = true;
            break;
        }
    }
    assert!(
        asked_silent_first,
        "some read asked the silent holder first"
    );
    // The silent GET lost to the hedge about 50 ms in; its response-header deadline is
    // 300 ms after its request was written. Wait (bounded) for the client's tables to
    // record it.
    let end = Instant::now() + Duration::from_secs(5);
    let mut state = c.peer_state(&silent_id);
    while state.breaker != Some(State::Open) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
        state = c.peer_state(&silent_id);
    }
    assert_eq!(
        state.breaker,
        Some(State::Open),
        "the silent holder's response-header timeout was charged"
    );
    assert_eq!(state.in_flight, 0, "its ticket was settled");
}
