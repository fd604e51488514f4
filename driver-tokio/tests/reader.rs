//! The reader (core's `Read` over the tokio client) against canned loopback holders
//! (`peerblock_testkit::conformance::canned`): one rule per test.
//!
//! Only what the driver conformance suite (run on this driver by `conformance.rs`) does
//! not check: a read through `PlacementDiscovery` over a membership (the suite's reads
//! are given their candidates), the silent hedge loser charged within 600 ms, and the
//! reader's construction and type checks. The other reader rules are conformance rules.

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use peerblock_core::placement::{Key, PeerId};
use peerblock_core::read::{LookupPeer, ReadConfig, ReadOutcome};
use peerblock_core::roster::{Membership, RosterMember};
use peerblock_core::time::Clock;
use peerblock_testkit::conformance::canned::{self, Reply};
use peerblock_tokio::client::{Client, ClientOptions, Peer};
use peerblock_tokio::metrics::Metrics;
use peerblock_tokio::reader::{BlockSpec, Candidate, FixedDiscovery, PlacementDiscovery, Reader};

const BOUND: StdDuration = StdDuration::from_secs(20);

fn client() -> Client {
    Client::new(ClientOptions::new(
        Clock::new(std::time::Instant::now()),
        Metrics::new(),
    ))
    .unwrap()
}

fn spec(body: &[u8]) -> BlockSpec {
    let expected = body.to_vec();
    BlockSpec {
        key: Key([0x11; 32]),
        path: canned::block_path(0x11, 0),
        expected: Some(body.len() as u64),
        validator: Some(Arc::new(move |b| b.as_ref() == &expected[..])),
        origin: None,
    }
}

fn fixed(addrs: &[&str]) -> Arc<FixedDiscovery> {
    Arc::new(FixedDiscovery(
        addrs
            .iter()
            .map(|a| {
                let p = Peer::from_addr(*a);
                Candidate {
                    peer: LookupPeer::new(p.id),
                    addr: p.addr,
                }
            })
            .collect(),
    ))
}

/// Through `PlacementDiscovery` over a roster of one dead (closed port) and one live
/// holder, every read completes from the live one, and the dead one is routed around
/// after the read that asked it first. (The conformance rule
/// `a_read_with_one_dead_and_one_live_holder_completes_from_the_live_one` checks the
/// same with fixed candidates.)
#[tokio::test]
async fn a_placement_read_with_one_dead_and_one_live_holder_completes_from_the_live_one() {
    tokio::time::timeout(BOUND, async {
        let live = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"live block")));
        let dead = canned::closed_port();
        // Placement over a roster: the node itself (an id that is not a placement id, so
        // it holds nothing) and two members with placement ids.
        let me = RosterMember {
            id: "reader".into(),
            addr: "reader.test:9".into(),
            weight: 1.0,
            record: Default::default(),
        };
        let mut m = Membership::new(me, 1, 16).unwrap();
        let c = client();
        let dead_id = PeerId::from_u64(1);
        let live_id = PeerId::from_u64(2);
        m.learn(c.now(), &dead_id.to_hex(), &dead).unwrap();
        m.learn(c.now(), &live_id.to_hex(), &live.addr).unwrap();
        let membership = Arc::new(Mutex::new(m));
        let discovery = Arc::new(PlacementDiscovery::new(membership, 7));
        assert_eq!(discovery.owners_now(&Key([0x11; 32])).len(), 2);
        let reader = Reader::new(c.clone(), discovery, ReadConfig::default(), 99).unwrap();
        // Read until a read has asked the dead holder first (its uniform first choice is
        // a coin flip per read; after its one failure the breaker routes around it).
        let mut tried_dead = 0;
        for _ in 0..40 {
            let got = reader.read(spec(b"live block")).await;
            assert_eq!(
                got.outcome,
                ReadOutcome::Found(b"live block".as_ref().into())
            );
            let by = got.served_by.unwrap();
            assert_eq!((by.id, by.addr.as_str()), (live_id, live.addr.as_str()));
            if got.stats.gets > 1 {
                tried_dead += 1;
                println!(
                    "read asking the dead holder first: {:?} after {:?}",
                    got.stats, got.elapsed
                );
                break;
            }
        }
        assert_eq!(
            tried_dead, 1,
            "some read asked the dead holder and went on to the live one"
        );
        let now = c.now();
        use peerblock_core::read::PeerView;
        assert!(
            !c.with_peers(|p| p.eligible(now, &dead_id)),
            "the dead holder is routed around"
        );
    })
    .await
    .expect("test bound");
}

/// A holder that takes the request and never answers (a host whose link went down, no
/// RST, no FIN) loses every read to the hedge. Its GET, cancelled while silent, must still
/// be cut at the client's deadline and charged to it: had the cancellation counted as
/// answered (the peer "responded"), the dead holder's circuit would never open and every
/// read asking it first would pay the hedge delay for ever.
///
/// The conformance rule of the same name waits up to 5 s for the circuit to open; this
/// one asks it open 600 ms after the read, so the 300 ms response-header deadline must be
/// what cut the GET, not the 2 s request deadline.
#[tokio::test]
async fn a_silent_holder_that_loses_to_the_hedge_is_still_cut_at_its_deadline_and_charged() {
    use peerblock_core::breaker::{BreakerConfig, State};
    use peerblock_core::client::RequestTimeout;
    use peerblock_core::time::Duration;
    tokio::time::timeout(BOUND, async {
        let live = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"live block")));
        let silent = canned::serve(|_, _, _| Reply::BytesThenHold(Vec::new()));
        let mut options = ClientOptions::new(Clock::new(std::time::Instant::now()), Metrics::new());
        options.exchange.deadlines.dial = Duration::from_millis(500);
        options.exchange.deadlines.response_header = Duration::from_millis(300);
        options.exchange.deadlines.request = RequestTimeout::After(Duration::from_secs(2));
        options.peers.breaker = Some(BreakerConfig {
            failure_threshold: 1,
            ..BreakerConfig::default()
        });
        let c = Client::new(options).unwrap();
        let config = ReadConfig {
            hedge_delay: Duration::from_millis(50),
            ..ReadConfig::default()
        };
        let reader = Reader::new(c.clone(), fixed(&[&live.addr, &silent.addr]), config, 5).unwrap();
        let silent_id = Peer::from_addr(&silent.addr).id;
        let mut asked_silent_first = false;
        for _ in 0..40 {
            let got = reader.read(spec(b"live block")).await;
            assert_eq!(got.served_by.unwrap().addr, live.addr);
            if got.stats.gets > 1 {
                asked_silent_first = true;
                println!(
                    "read that asked the silent holder first: {:?} after {:?}",
                    got.stats, got.elapsed
                );
                break;
            }
        }
        assert!(
            asked_silent_first,
            "some read asked the silent holder first"
        );
        // The silent GET was cancelled (the hedge won) about 50 ms in; its response-header
        // deadline is 300 ms after its request was written. Wait for the charge (its
        // circuit opening), bounded: the driver gives no event for it, so the breaker is
        // polled, and the test fails if it is not open within 5 s.
        let opened = tokio::time::timeout(StdDuration::from_secs(5), async {
            loop {
                let now = c.now();
                if c.with_peers(|p| p.breaker().unwrap().state(now, &silent_id)) == State::Open {
                    break;
                }
                tokio::time::sleep(StdDuration::from_millis(10)).await;
            }
        })
        .await;
        assert!(
            opened.is_ok(),
            "the silent holder's response-header timeout was charged (its circuit opened)"
        );
        assert_eq!(c.with_peers(|p| p.in_flight_to(&silent_id)), 0);
    })
    .await
    .expect("test bound");
}

#[test]
fn reads_can_be_spawned() {
    fn assert_send<T: Send>(_: &T) {}
    let reader = Reader::new(client(), fixed(&[]), ReadConfig::default(), 1).unwrap();
    assert_send(&reader.read(spec(b"x")));
}

#[test]
fn a_bad_read_config_is_refused_at_construction() {
    let config = ReadConfig {
        close_group_size: 0,
        ..ReadConfig::default()
    };
    let err = Reader::new(client(), fixed(&[]), config, 1).unwrap_err();
    assert!(err.to_string().contains("close_group_size"), "{err}");
}
