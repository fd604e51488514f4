//! The client aggregate `client::Peers`: the calls around each GET (admit, finish,
//! abandon), its `PeerView` answers, the exchange-to-read outcome mapping and the bridge
//! from roster membership to placement members. One rule per test.

use bytes::Bytes;
use peerblock_core::breaker::{BreakerConfig, State};
use peerblock_core::client::{
    get_outcome, placement_members, BreakerPath, ConnectionFate, CooldownEntry, Ending,
    ExchangeError, ExchangeOutcome, Peers, PeersConfig, PeersConfigError, ProtocolError,
    INVALID_STRIKES, INVALID_WINDOW,
};
use peerblock_core::cooldown::CooldownConfig;
use peerblock_core::http::{LengthError, ResponseError};
use peerblock_core::placement::PeerId;
use peerblock_core::read::{GetOutcome, PeerView};
use peerblock_core::refusal::{PeerRefusal, RefusalReason};
use peerblock_core::roster::{Membership, Roster, RosterMember};
use peerblock_core::time::{Duration, Instant};

fn peer(n: u64) -> PeerId {
    PeerId::from_u64(n)
}

fn secs(s: u64) -> Instant {
    Instant::from_secs(s)
}

fn outcome(ending: Ending) -> ExchangeOutcome {
    ExchangeOutcome::new(ending, BreakerPath::Data, ConnectionFate::Close)
}

/// A hard failure without a cooldown entry: the peer does not speak the wire form.
fn protocol_violation() -> Ending {
    Ending::Failed(ExchangeError::Protocol(ProtocolError::Http(
        ResponseError::MalformedStatusLine,
    )))
}

/// Rule: wrong bytes for one block (a failed validation, a wrong length) are a soft
/// failure: the GET learns `Invalid`, and the peer's circuit opens only after the
/// threshold of them in a row, so one rotten block never stops reads of its other blocks.
#[test]
fn invalid_bytes_are_invalid_for_the_read_and_open_the_circuit_only_at_the_threshold() {
    let mut p = peers();
    let threshold = BreakerConfig::default().failure_threshold;
    for n in 1..=threshold {
        let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
        let f = p.finish(
            secs(0),
            t,
            outcome(Ending::Failed(ExchangeError::Validation)),
        );
        assert_eq!(f.get, GetOutcome::Invalid);
        // Every second invalid block also puts the peer on the failed cooldown (issue 25).
        let struck = n % INVALID_STRIKES == 0;
        assert_eq!(
            f.cooldown,
            struck.then_some(CooldownEntry::Failed),
            "after {n}"
        );
        assert_eq!(f.invalid_cooldown, struck);
        assert_eq!(f.circuit_opened, n == threshold, "after {n} invalid blocks");
    }
    assert!(p.admit(secs(0), peer(1), BreakerPath::Data).is_err());
    // A good block in between resets the count.
    let t = p.admit(secs(0), peer(2), BreakerPath::Data).unwrap();
    let _ = p.finish(
        secs(0),
        t,
        outcome(Ending::Failed(ExchangeError::Validation)),
    );
    let t = p.admit(secs(0), peer(2), BreakerPath::Data).unwrap();
    let _ = p.finish(secs(0), t, outcome(Ending::Block(Bytes::from_static(b"b"))));
    for _ in 1..threshold {
        let t = p.admit(secs(0), peer(2), BreakerPath::Data).unwrap();
        let f = p.finish(
            secs(0),
            t,
            outcome(Ending::Failed(ExchangeError::Validation)),
        );
        assert!(!f.circuit_opened);
    }
}

/// Rule: a holder's "my copy is corrupt" (404 + `X-Peerblock-Miss: corrupt`) is
/// `Invalid` for the read and never charged to the peer.
#[test]
fn a_corrupt_copy_is_invalid_for_the_read_and_never_charged() {
    let mut p = peers();
    for _ in 0..20 {
        let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
        let f = p.finish(secs(0), t, outcome(Ending::Corrupt));
        assert_eq!(f.get, GetOutcome::Invalid);
        assert!(!f.circuit_opened);
    }
    assert!(p.eligible(secs(0), &peer(1)));
}

fn refused(retry_after: Option<Duration>) -> Ending {
    Ending::Refused(PeerRefusal {
        reason: Some(RefusalReason::Sessions),
        retry_after,
    })
}

/// A breaker whose circuit opens on one hard failure, cools down for 10 s and admits one
/// probe.
fn peers() -> Peers {
    Peers::new(PeersConfig {
        breaker: Some(BreakerConfig {
            cooldown: Duration::from_secs(10),
            half_open_probes: 1,
            ..BreakerConfig::default()
        }),
        ..PeersConfig::default()
    })
    .unwrap()
}

#[test]
fn admit_counts_a_get_in_flight_until_it_finishes() {
    let mut p = peers();
    let a = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    let b = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    assert_eq!(p.in_flight(&peer(1)), 2);
    assert_eq!(p.in_flight(&peer(2)), 0);
    let _ = p.finish(secs(1), a, outcome(Ending::Miss));
    assert_eq!(p.in_flight(&peer(1)), 1);
    p.abandon(secs(1), b);
    assert_eq!(p.in_flight(&peer(1)), 0);
}

#[test]
fn a_roster_fetch_is_admitted_through_an_open_circuit_and_not_counted_as_a_get() {
    let mut p = peers();
    let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    let f = p.finish(secs(0), t, outcome(protocol_violation()));
    assert!(f.circuit_opened);
    assert!(p.admit(secs(1), peer(1), BreakerPath::Data).is_err());
    let roster = p.admit(secs(1), peer(1), BreakerPath::Roster).unwrap();
    assert_eq!(p.in_flight(&peer(1)), 0);
    p.abandon(secs(1), roster);
}

#[test]
fn a_refusal_makes_the_peer_ineligible_for_its_advertised_wait_and_lists_it() {
    let mut p = peers();
    let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    let f = p.finish(secs(0), t, outcome(refused(Some(Duration::from_secs(3)))));
    assert_eq!(
        f.get,
        GetOutcome::Refused {
            retry_after: Some(Duration::from_secs(3))
        }
    );
    assert_eq!(
        f.cooldown,
        Some(CooldownEntry::Refused {
            retry_after: Some(Duration::from_secs(3))
        })
    );
    assert!(!f.circuit_opened, "a refusal is an answer, never a failure");
    assert!(!p.eligible(secs(1), &peer(1)));
    assert_eq!(
        p.refused_for(secs(1), &peer(1)),
        Some(Duration::from_secs(2))
    );
    let mut listed = Vec::new();
    p.for_each_refused(secs(1), &mut |id, left| listed.push((id, left)));
    assert_eq!(listed, vec![(peer(1), Duration::from_secs(2))]);
    assert!(p.eligible(secs(3), &peer(1)));
}

#[test]
fn a_failed_dial_suppresses_the_peer_for_the_failed_cooldown() {
    let mut p = Peers::new(PeersConfig {
        cooldown: CooldownConfig {
            failed: Duration::from_secs(60),
            ..CooldownConfig::default()
        },
        breaker: None,
        ..PeersConfig::default()
    })
    .unwrap();
    let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    let f = p.finish(
        secs(0),
        t,
        outcome(Ending::Failed(ExchangeError::DialFailed)),
    );
    assert_eq!(f.cooldown, Some(CooldownEntry::Failed));
    assert_eq!(f.get, GetOutcome::Failed);
    assert!(!p.eligible(secs(59), &peer(1)));
    assert_eq!(p.refused_for(secs(1), &peer(1)), None, "not a refusal");
    assert!(p.eligible(secs(60), &peer(1)));
}

#[test]
fn a_hard_failure_opens_the_circuit_and_the_view_skips_the_peer_until_it_may_probe() {
    let mut p = peers();
    let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    let f = p.finish(secs(0), t, outcome(protocol_violation()));
    assert!(f.circuit_opened);
    assert_eq!(p.breaker().unwrap().state(secs(0), &peer(1)), State::Open);
    assert!(!p.eligible(secs(9), &peer(1)));
    assert!(
        p.eligible(secs(10), &peer(1)),
        "half-open with a free probe"
    );
}

#[test]
fn the_view_asks_healthy_so_a_half_open_peer_with_its_probe_taken_is_ineligible() {
    // The settled breaker check: `state != Open` would call this peer eligible, and the
    // admission would then turn the read's GET away.
    let mut p = peers();
    let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    let _ = p.finish(secs(0), t, outcome(protocol_violation()));
    let probe = p.admit(secs(10), peer(1), BreakerPath::Data).unwrap();
    assert_eq!(
        p.breaker().unwrap().state(secs(10), &peer(1)),
        State::HalfOpen
    );
    assert!(!p.eligible(secs(10), &peer(1)));
    assert!(p.admit(secs(10), peer(1), BreakerPath::Data).is_err());
    // Abandoning the probe (a hedging loser) gives the slot back as answered.
    p.abandon(secs(10), probe);
    assert!(p.eligible(secs(10), &peer(1)));
}

#[test]
fn finish_records_the_load_the_response_advertised() {
    let mut p = peers();
    assert_eq!(p.load(secs(0), &peer(1)), None);
    let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    let mut out = outcome(Ending::Miss);
    out.load = Some(7);
    let _ = p.finish(secs(0), t, out);
    assert_eq!(p.load(secs(0), &peer(1)), Some(7));
}

#[test]
fn finish_hands_the_block_to_the_read() {
    let mut p = peers();
    let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    let f = p.finish(
        secs(0),
        t,
        outcome(Ending::Block(Bytes::from_static(b"blk"))),
    );
    assert_eq!(f.get, GetOutcome::Found(Bytes::from_static(b"blk")));
    assert!(f.cooldown.is_none());
    assert!(!f.circuit_opened);
}

#[test]
fn get_outcome_maps_block_miss_and_refusal_and_everything_else_fails() {
    assert_eq!(
        get_outcome(Ending::Block(Bytes::from_static(b"x"))),
        GetOutcome::Found(Bytes::from_static(b"x"))
    );
    assert_eq!(get_outcome(Ending::Miss), GetOutcome::NotFound);
    assert_eq!(
        get_outcome(refused(None)),
        GetOutcome::Refused { retry_after: None }
    );
    for ending in [
        Ending::UpstreamRefused { status: 403 },
        Ending::Cancelled,
        Ending::Failed(ExchangeError::Closed),
        Ending::Failed(ExchangeError::Status(500)),
    ] {
        assert_eq!(get_outcome(ending), GetOutcome::Failed);
    }
}

#[test]
fn forget_clears_circuits_cooldowns_and_loads_but_keeps_gets_in_flight() {
    let mut p = peers();
    let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    let mut out = outcome(refused(Some(Duration::from_secs(5))));
    out.load = Some(3);
    let _ = p.finish(secs(0), t, out);
    let t = p.admit(secs(0), peer(2), BreakerPath::Data).unwrap();
    let _ = p.finish(secs(0), t, outcome(protocol_violation()));
    let running = p.admit(secs(0), peer(3), BreakerPath::Data).unwrap();
    p.forget();
    assert!(p.eligible(secs(0), &peer(1)));
    assert!(p.eligible(secs(0), &peer(2)));
    assert_eq!(p.load(secs(0), &peer(1)), None);
    assert_eq!(p.in_flight(&peer(3)), 1);
    p.abandon(secs(0), running);
    assert_eq!(p.in_flight(&peer(3)), 0);
}

#[test]
fn without_a_breaker_every_peer_is_admitted() {
    let mut p = Peers::new(PeersConfig {
        breaker: None,
        ..PeersConfig::default()
    })
    .unwrap();
    for _ in 0..3 {
        let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
        let f = p.finish(secs(0), t, outcome(protocol_violation()));
        assert!(!f.circuit_opened);
    }
    assert!(p.eligible(secs(0), &peer(1)));
}

#[test]
fn an_invalid_part_is_a_config_error() {
    let err = Peers::new(PeersConfig {
        cooldown: CooldownConfig {
            capacity: 0,
            ..CooldownConfig::default()
        },
        ..PeersConfig::default()
    })
    .unwrap_err();
    assert!(matches!(err, PeersConfigError::Cooldown(_)), "{err:?}");
    let err = Peers::new(PeersConfig {
        breaker: Some(BreakerConfig {
            max_peers: 0,
            ..BreakerConfig::default()
        }),
        ..PeersConfig::default()
    })
    .unwrap_err();
    assert!(matches!(err, PeersConfigError::Breaker(_)), "{err:?}");
}

#[test]
fn placement_members_are_the_roster_members_with_parsed_ids_unplaceable_ids_left_out() {
    let id = |n: u64| peer(n).to_hex();
    let me = RosterMember {
        id: id(9),
        addr: "10.0.0.9:7070".into(),
        weight: 1.0,
        record: Default::default(),
    };
    let mut table = Membership::new(me, 1, 16).unwrap();
    let roster = Roster {
        epoch: 1,
        members: vec![
            RosterMember {
                id: id(2),
                addr: "10.0.0.2:7070".into(),
                weight: 2.0,
                record: Default::default(),
            },
            RosterMember {
                id: "not-a-peer-id".into(),
                addr: "10.0.0.3:7070".into(),
                weight: 1.0,
                record: Default::default(),
            },
        ],
        epoch_sig: None,
    };
    // Fetched from 10.0.0.2:7070, whose responder is id 2: it spoke from its address.
    let _ = table.merge_from(secs(0), "10.0.0.2:7070", &id(2), &roster);
    let members = placement_members(&table);
    let got: Vec<(PeerId, &str, f64)> = members
        .iter()
        .map(|m| (m.id, m.addr.as_str(), m.weight))
        .collect();
    assert_eq!(
        got,
        vec![
            (peer(2), "10.0.0.2:7070", 2.0),
            (peer(9), "10.0.0.9:7070", 1.0)
        ]
    );
}

#[test]
fn finish_hands_back_the_ending_it_derived_the_get_outcome_from() {
    // Rule: a driver reports what happened (the typed failure, the block) after recording
    // it, so `finish` returns the ending along with the read's outcome derived from it.
    let mut p = peers();
    let t = p.admit(secs(0), peer(1), BreakerPath::Data).unwrap();
    let f = p.finish(
        secs(0),
        t,
        outcome(Ending::Block(Bytes::from_static(b"abc"))),
    );
    assert_eq!(f.get, GetOutcome::Found(Bytes::from_static(b"abc")));
    assert!(matches!(f.ending, Ending::Block(ref b) if b.as_ref() == b"abc"));
    let t = p.admit(secs(0), peer(2), BreakerPath::Data).unwrap();
    let f = p.finish(secs(0), t, outcome(Ending::Failed(ExchangeError::Closed)));
    assert_eq!(f.get, GetOutcome::Failed);
    assert!(matches!(f.ending, Ending::Failed(ExchangeError::Closed)));
}

#[test]
fn a_ticket_names_the_peer_and_path_it_admitted() {
    let mut p = peers();
    let t = p.admit(secs(0), peer(7), BreakerPath::Roster).unwrap();
    assert_eq!(t.peer(), &peer(7));
    assert_eq!(t.path(), BreakerPath::Roster);
    p.abandon(secs(0), t);
}

#[test]
fn the_configuration_in_force_is_the_one_given() {
    let config = PeersConfig {
        breaker: Some(BreakerConfig {
            cooldown: Duration::from_secs(10),
            half_open_probes: 1,
            ..BreakerConfig::default()
        }),
        ..PeersConfig::default()
    };
    let p = Peers::new(config.clone()).unwrap();
    assert_eq!(p.config(), &config);
}

#[test]
fn a_load_recorded_at_the_response_head_is_what_the_view_reports() {
    let mut p = peers();
    assert_eq!(p.load(secs(0), &peer(3)), None);
    p.record_load(secs(0), peer(3), 17);
    assert_eq!(p.load(secs(0), &peer(3)), Some(17));
}

/// Rule (issue 25): invalid data is charged to its sender. The first invalid block costs a
/// soft breaker failure only; the second within the window puts the peer on the long
/// (failed) cooldown, so no read asks it for anything, and is counted.
#[test]
fn a_second_invalid_block_puts_the_peer_on_the_failed_cooldown() {
    let mut p = peers();
    let invalid = |p: &mut Peers, at: Instant, e: ExchangeError| {
        let t = p.admit(at, peer(1), BreakerPath::Data).unwrap();
        p.finish(at, t, outcome(Ending::Failed(e)))
    };
    let f = invalid(&mut p, secs(0), ExchangeError::Validation);
    assert!(!f.invalid_cooldown && f.cooldown.is_none());
    assert!(
        p.eligible(secs(0), &peer(1)),
        "one invalid block: still asked"
    );
    // A wrong length is invalid data too.
    let f = invalid(
        &mut p,
        secs(1),
        ExchangeError::Length(LengthError::ContentLengthAboveLimit {
            limit: 1,
            content_length: 9,
        }),
    );
    assert!(f.invalid_cooldown);
    assert_eq!(f.cooldown, Some(CooldownEntry::Failed));
    assert!(
        !p.eligible(secs(1), &peer(1)),
        "two: on the failed cooldown"
    );
    assert!(!p.eligible(secs(29 * 60), &peer(1)));
    assert!(
        p.eligible(secs(31 * 60), &peer(1)),
        "for the failed cooldown only"
    );
    assert_eq!(p.invalid_cooldowns(), 1);
    // A holder's own "corrupt" report is never a strike.
    for s in 0..4 {
        let t = p
            .admit(secs(40 * 60 + s), peer(2), BreakerPath::Data)
            .unwrap();
        let f = p.finish(secs(40 * 60 + s), t, outcome(Ending::Corrupt));
        assert!(!f.invalid_cooldown);
    }
    assert_eq!(p.invalid_cooldowns(), 1);
}

/// Rule: the strikes count within `INVALID_WINDOW`: two invalid blocks further apart are
/// two first strikes.
#[test]
fn invalid_blocks_further_apart_than_the_window_are_not_a_second_strike() {
    let mut p = peers();
    let gap = INVALID_WINDOW.as_secs();
    for at in [0, gap, 2 * gap] {
        let t = p.admit(secs(at), peer(1), BreakerPath::Data).unwrap();
        let f = p.finish(
            secs(at),
            t,
            outcome(Ending::Failed(ExchangeError::Validation)),
        );
        assert!(!f.invalid_cooldown, "at {at}");
    }
    assert_eq!(p.invalid_cooldowns(), 0);
}
