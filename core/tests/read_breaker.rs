//! A real `Breaker` and `CooldownTable` behind one `PeerView`, as a driver would wire
//! them: a peer whose circuit is open is skipped by the read machine, and asked again once
//! the breaker lets it probe.

use bytes::Bytes;
use peerblock_core::breaker::{Breaker, BreakerConfig, State};
use peerblock_core::cooldown::{CooldownConfig, CooldownTable};
use peerblock_core::placement::{Key, PeerId};
use peerblock_core::read::{
    GetOutcome, PeerView, Read, ReadConfig, ReadEvent, ReadOutcome, Spread,
};
use peerblock_core::time::{Duration, Instant};

/// The driver's view: eligible only if the circuit is not open and the dial is not
/// suppressed; refusals come from the cooldown table.
struct DriverView<'a> {
    breaker: &'a Breaker<PeerId>,
    cooldowns: &'a CooldownTable<PeerId>,
}

impl PeerView for DriverView<'_> {
    fn eligible(&self, now: Instant, peer: &PeerId) -> bool {
        // The documented check: `healthy`, what the next admission would say.
        self.breaker.healthy(now, peer) && self.cooldowns.eligible(now, peer)
    }
    fn refused_for(&self, now: Instant, peer: &PeerId) -> Option<Duration> {
        PeerView::refused_for(self.cooldowns, now, peer)
    }
    fn for_each_refused(&self, now: Instant, f: &mut dyn FnMut(PeerId, Duration)) {
        self.cooldowns.for_each_refused(now, f)
    }
}

fn first_get(view: &DriverView<'_>, now: Instant, peers: &[PeerId]) -> PeerId {
    let cfg = ReadConfig {
        spread: Spread::Nearest,
        ..ReadConfig::default()
    };
    let mut read = Read::new(Key::from_u64(0), cfg, now, 1).unwrap();
    // Bounded: a read that never gets to its GET fails here instead of hanging the test.
    for _ in 0..100 {
        match read.poll_event(now, view).expect("read asks for something") {
            ReadEvent::Lookup => read.handle_lookup(now, peers),
            ReadEvent::Get { id, peer } => {
                read.handle_get(now, id, GetOutcome::Found(Bytes::from_static(b"b")));
                assert!(matches!(
                    read.poll_event(now, view),
                    Some(ReadEvent::Done(ReadOutcome::Found(_)))
                ));
                return peer;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    panic!("no GET after 100 events");
}

/// Rule: a peer whose circuit is open is never asked; once the breaker's cooldown lets it
/// probe, it is the nearest choice again.
#[test]
fn open_circuit_is_skipped_by_the_read() {
    let peers: Vec<PeerId> = (1..=7u64).map(PeerId::from_u64).collect();
    let mut breaker = Breaker::new(BreakerConfig::default()).unwrap();
    let cooldowns = CooldownTable::new(CooldownConfig::default()).unwrap();
    let t0 = Instant::from_secs(1);
    breaker.record_hard_failure(t0, &peers[0]);
    assert_eq!(breaker.state(t0, &peers[0]), State::Open);
    let view = DriverView {
        breaker: &breaker,
        cooldowns: &cooldowns,
    };
    assert_eq!(
        first_get(&view, t0, &peers),
        peers[1],
        "open circuit skipped"
    );
    let later = t0 + BreakerConfig::default().cooldown;
    assert_ne!(breaker.state(later, &peers[0]), State::Open);
    assert_eq!(
        first_get(&view, later, &peers),
        peers[0],
        "probe allowed again"
    );
}
