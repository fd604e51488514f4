//! Roster exchange (§3.7) end to end through the pair: round trip, string epoch, no state
//! field, learning the advertised address, anonymous callers, self-repair, bad bodies.

use std::sync::Arc;

use peerblock_core::client::{
    BreakerOutcome, BreakerPath, Caller, Ending, ExchangeError, ExchangeRequest, ProtocolError,
};
use peerblock_core::roster::{Membership, Roster, RosterDecodeError, RosterMember, NO_EPOCH};
use peerblock_core::server::{
    Admission, AdmissionConfig, ServerConfig, ServerConnection, ServerEvent,
};
use peerblock_core::time::Instant;
use peerblock_testkit::pair::Pair;

const HOST: &str = "10.0.0.1:7070";

fn pair() -> Pair {
    let mut pair = Pair::with_source(
        ServerConfig::new("server-id", HOST),
        AdmissionConfig::default(),
        Default::default(),
    );
    pair.membership
        .learn(Instant::ZERO, "third", "10.0.0.3:7070")
        .unwrap();
    pair
}

fn roster_of(ending: &Ending) -> (&Roster, Option<&str>) {
    match ending {
        Ending::Roster(a) => (&a.roster, a.responder.as_deref()),
        other => panic!("expected a roster, got {other:?}"),
    }
}

#[test]
fn caller_holding_only_an_address_learns_the_responders_id_and_its_peers() {
    let mut pair = pair();
    let out = pair.exchange(ExchangeRequest::roster(HOST, None));
    let (roster, responder) = roster_of(&out.ending);
    assert_eq!(responder, Some("server-id"), "from X-DART-Node");
    assert!(
        roster.contains("server-id"),
        "members always include the sender"
    );
    assert!(roster.contains("third"));
    assert_eq!(out.breaker, BreakerOutcome::Answered);
    assert_eq!(out.path, BreakerPath::Roster);
}

#[test]
fn epoch_above_2_pow_53_survives_as_a_string() {
    let mut pair = pair();
    let epoch = (1u64 << 53) + 1;
    pair.membership.raise_epoch(epoch);
    let out = pair.exchange(ExchangeRequest::roster(HOST, None));
    assert_eq!(roster_of(&out.ending).0.epoch, epoch);
    let body = pair.stats.served_bodies.last().unwrap();
    let text = std::str::from_utf8(body).unwrap();
    assert!(text.contains("\"epoch\":\"9007199254740993\""), "{text}");
}

#[test]
fn roster_on_the_wire_has_no_state_field() {
    let mut pair = pair();
    let _ = pair.exchange(ExchangeRequest::roster(HOST, None));
    let body = pair.stats.served_bodies.last().unwrap();
    let text = std::str::from_utf8(body).unwrap().to_ascii_lowercase();
    assert!(
        !text.contains("state") && !text.contains("alive") && !text.contains("live"),
        "{text}"
    );
}

#[test]
fn server_learns_the_advertised_address_not_the_connection_source() {
    let mut pair = pair();
    pair.source_id = 4242; // the connection's source as admission sees it
    let out = pair.exchange(ExchangeRequest::roster(
        HOST,
        Some(Caller {
            id: "caller-id",
            addr: "10.0.0.9:7070",
            record: None,
        }),
    ));
    assert!(matches!(out.ending, Ending::Roster(_)));
    assert_eq!(pair.membership.addr("caller-id"), Some("10.0.0.9:7070"));
    assert_eq!(pair.membership.heard("caller-id"), Some(Instant::ZERO));
}

#[test]
fn anonymous_caller_teaches_nothing() {
    let mut pair = pair();
    let before = pair.membership.snapshot();
    let _ = pair.exchange(ExchangeRequest::roster(HOST, None));
    assert_eq!(pair.membership.snapshot(), before);
}

#[test]
fn caller_with_only_one_of_the_two_headers_is_anonymous() {
    let mut adm = Admission::<u32>::new(AdmissionConfig::default()).unwrap();
    let config = Arc::new(ServerConfig::new("s", HOST));
    let mut conn = ServerConnection::accept(Instant::ZERO, &mut adm, 1, config).unwrap();
    conn.handle_input(
        Instant::ZERO,
        b"GET /peer/v1/roster HTTP/1.1\r\nHost: s\r\nX-DART-Node: half\r\n\r\n",
    );
    conn.handle_admission(Instant::ZERO, &mut adm);
    assert!(matches!(
        conn.poll_event(),
        Some(ServerEvent::Roster { caller: None, .. })
    ));
    conn.close(Instant::ZERO, &mut adm);
}

#[test]
fn server_repairs_a_roster_that_omits_itself() {
    let mut adm = Admission::<u32>::new(AdmissionConfig::default()).unwrap();
    let config = Arc::new(ServerConfig::new("s", HOST));
    let mut conn = ServerConnection::accept(Instant::ZERO, &mut adm, 1, config).unwrap();
    conn.handle_input(
        Instant::ZERO,
        b"GET /peer/v1/roster HTTP/1.1\r\nHost: s\r\n\r\n",
    );
    conn.handle_admission(Instant::ZERO, &mut adm);
    let Some(ServerEvent::Roster { id, .. }) = conn.poll_event() else {
        panic!()
    };
    let without_me = Roster {
        epoch: 3,
        members: vec![RosterMember {
            id: "other".into(),
            addr: "o:1".into(),
            weight: 1.0,
            record: Default::default(),
        }],
        epoch_sig: None,
    };
    conn.handle_roster(Instant::ZERO, id, &without_me).unwrap();
    let t = conn.poll_transmit(Instant::ZERO).unwrap();
    let served = Roster::from_json(&t.body).unwrap();
    assert!(served.contains("s"));
    assert!(served.contains("other"));
    conn.handle_transmitted(Instant::ZERO, &mut adm);
    conn.close(Instant::ZERO, &mut adm);
}

fn scripted_roster(node: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-DART-Node: {node}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn client_repairs_a_responder_that_omits_itself_from_its_header() {
    let mut pair = pair();
    pair.script(
        scripted_roster(
            "resp",
            r#"{"epoch":"1","members":[{"id":"x","addr":"x:1","weight":1}]}"#,
        ),
        false,
    );
    let out = pair.exchange(ExchangeRequest::roster(HOST, None));
    let (roster, responder) = roster_of(&out.ending);
    assert_eq!(responder, Some("resp"));
    let me = roster
        .members
        .iter()
        .find(|m| m.id == "resp")
        .expect("repaired");
    assert_eq!(me.addr, HOST, "at the address we dialed");
}

#[test]
fn unknown_fields_and_a_foreign_state_field_are_ignored() {
    let mut pair = pair();
    pair.script(
        scripted_roster(
            "resp",
            r#"{"epoch":"7","v":2,"members":[{"id":"resp","addr":"r:1","weight":2,"state":"dead"}]}"#,
        ),
        false,
    );
    let out = pair.exchange(ExchangeRequest::roster(HOST, None));
    let (roster, _) = roster_of(&out.ending);
    assert_eq!(roster.epoch, 7);
    assert_eq!(roster.members.len(), 1);
}

#[test]
fn malformed_roster_body_is_a_clear_protocol_error() {
    for body in [
        "not json",
        r#"{"epoch":5,"members":[]}"#,
        r#"{"members":[]}"#,
    ] {
        let mut pair = pair();
        pair.script(scripted_roster("resp", body), false);
        let out = pair.exchange(ExchangeRequest::roster(HOST, None));
        match &out.ending {
            Ending::Failed(ExchangeError::Protocol(ProtocolError::Roster(e))) => {
                assert!(e.to_string().contains("roster"), "{e}");
            }
            other => panic!("{body}: expected a roster error, got {other:?}"),
        }
        assert_eq!(out.breaker, BreakerOutcome::HardFailure);
    }
}

#[test]
fn non_get_roster_request_is_405() {
    let mut adm = Admission::<u32>::new(AdmissionConfig::default()).unwrap();
    let config = Arc::new(ServerConfig::new("s", HOST));
    let mut conn = ServerConnection::accept(Instant::ZERO, &mut adm, 1, config).unwrap();
    conn.handle_input(
        Instant::ZERO,
        b"PUT /peer/v1/roster HTTP/1.1\r\nHost: s\r\nContent-Length: 0\r\n\r\n",
    );
    conn.handle_admission(Instant::ZERO, &mut adm);
    assert!(
        matches!(
            conn.poll_event(),
            Some(ServerEvent::Rejected { status: 405, .. })
        ),
        "no roster source consulted"
    );
    let t = conn.poll_transmit(Instant::ZERO).unwrap();
    assert!(t.head.starts_with(b"HTTP/1.1 405 "));
    conn.handle_transmitted(Instant::ZERO, &mut adm);
    conn.close(Instant::ZERO, &mut adm);
}

#[test]
fn roster_fetch_merges_into_the_callers_membership_crediting_the_responder() {
    let mut pair = pair();
    let out = pair.exchange(ExchangeRequest::roster(HOST, None));
    let Ending::Roster(answer) = out.ending else {
        panic!()
    };
    let mut mine = Membership::new(
        RosterMember {
            id: "me".into(),
            addr: "10.0.0.2:7070".into(),
            weight: 1.0,
            record: Default::default(),
        },
        0,
        64,
    )
    .unwrap();
    let report = mine.merge(
        Instant::from_secs(5),
        answer.responder.as_deref().unwrap(),
        &answer.roster,
    );
    assert_eq!(report.added, 2);
    assert_eq!(mine.heard("server-id"), Some(Instant::from_secs(5)));
    assert_eq!(mine.heard("third"), None, "hearsay is not liveness");
    assert_eq!(mine.addr("server-id"), Some(HOST));
}

// What a reference Go peer's `RosterServer` sends: `json.Marshal` of the untagged
// `Roster{Epoch string; Members []RosterMember}` (field names as keys, a whole float64
// weight without a fraction, a nil slice as `null`).
const GO_ROSTER: &str =
    r#"{"Epoch":"7","Members":[{"ID":"n1","Addr":"node-1.test:7070","Weight":1}]}"#;
const GO_ZERO_ROSTER: &str = r#"{"Epoch":"","Members":null}"#;

#[test]
fn a_go_peers_roster_is_learned_through_the_exchange() {
    let mut pair = pair();
    pair.script(scripted_roster("n1", GO_ROSTER), false);
    let out = pair.exchange(ExchangeRequest::roster("node-1.test:7070", None));
    let (roster, responder) = roster_of(&out.ending);
    assert_eq!(responder, Some("n1"));
    assert_eq!(roster.epoch, 7);
    assert_eq!(
        roster.members,
        vec![RosterMember {
            id: "n1".into(),
            addr: "node-1.test:7070".into(),
            weight: 1.0,
            record: Default::default(),
        }]
    );
    assert_eq!(out.breaker, BreakerOutcome::Answered);
}

#[test]
fn a_go_peer_with_no_epoch_and_null_members_is_never_newer() {
    let mut pair = pair();
    pair.script(scripted_roster("n1", GO_ZERO_ROSTER), false);
    let out = pair.exchange(ExchangeRequest::roster("node-1.test:7070", None));
    let Ending::Roster(answer) = out.ending else {
        panic!("expected a roster, got {:?}", out.ending)
    };
    assert_eq!(answer.roster.epoch, NO_EPOCH);
    assert_eq!(
        answer.roster.members.len(),
        1,
        "only the repaired responder"
    );
    let mut mine = Membership::new(
        RosterMember {
            id: "me".into(),
            addr: "10.0.0.2:7070".into(),
            weight: 1.0,
            record: Default::default(),
        },
        5,
        64,
    )
    .unwrap();
    mine.learn(Instant::ZERO, "n1", "10.9.9.9:7070").unwrap();
    let report = mine.merge(Instant::from_secs(1), "n1", &answer.roster);
    assert!(!report.epoch_advanced);
    assert_eq!(mine.epoch(), 5);
    assert_eq!(
        mine.addr("n1"),
        Some("node-1.test:7070"),
        "first-hand still updates"
    );
}

#[test]
fn a_go_peers_fractional_weights_are_read() {
    let mut pair = pair();
    pair.script(
        scripted_roster(
            "n1",
            r#"{"Epoch":"3","Members":[{"ID":"n1","Addr":"h:1","Weight":0.5},{"ID":"n2","Addr":"h:2","Weight":2.25}]}"#,
        ),
        false,
    );
    let out = pair.exchange(ExchangeRequest::roster(HOST, None));
    let weights: Vec<f64> = roster_of(&out.ending)
        .0
        .members
        .iter()
        .map(|m| m.weight)
        .collect();
    assert_eq!(weights, [0.5, 2.25]);
}

#[test]
fn a_bad_go_roster_is_a_typed_decode_error() {
    let mut pair = pair();
    pair.script(
        scripted_roster(
            "n1",
            r#"{"Epoch":"-1","Members":[{"ID":"n1","Addr":"h:1","Weight":1}]}"#,
        ),
        false,
    );
    let out = pair.exchange(ExchangeRequest::roster(HOST, None));
    match &out.ending {
        Ending::Failed(ExchangeError::Protocol(ProtocolError::Roster(
            RosterDecodeError::Epoch { value },
        ))) => assert_eq!(value, "-1"),
        other => panic!("expected an epoch error, got {other:?}"),
    }
    assert_eq!(out.breaker, BreakerOutcome::HardFailure);
}
