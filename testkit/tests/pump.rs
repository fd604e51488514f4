//! The generic pumps: each test drives the real machines through `peerblock_testkit::pump`
//! and checks one rule of the driving contract the pump carries out for its driver.

use std::sync::Arc;

use bytes::Bytes;
use peerblock_core::client::{
    BlockRequest, ClientConfig, Ending, Exchange, ExchangeError, ExchangeRequest, Link,
};
use peerblock_core::server::{
    Admission, AdmissionConfig, ServerConfig, ServerConnection, ServerEvent, SourceResult,
};
use peerblock_core::time::{Duration, Instant};
use peerblock_core::transmit::Transmit;
use peerblock_core::wire::{BlockPath, ChunkKey};
use peerblock_testkit::pump::{self, Answer, Armed, ClientStep, Written};

const T0: Instant = Instant::ZERO;

fn path() -> BlockPath {
    BlockPath {
        key: ChunkKey::from_array([3; 32]),
        index: 0,
    }
}

fn block() -> Bytes {
    Bytes::from_static(b"the block's bytes")
}

/// A node holding `block()` at `path()`: answers every fetch at once.
fn holder(_now: Instant, event: ServerEvent) -> Option<Answer> {
    match event {
        ServerEvent::Fetch { id, .. } => Some(Answer::Source(id, SourceResult::Found(block()))),
        _ => None,
    }
}

fn server() -> (ServerConnection<u32>, Admission<u32>) {
    let mut admission = Admission::new(AdmissionConfig::default()).expect("valid defaults");
    let config = Arc::new(ServerConfig::new("n0", "n0:7070"));
    let conn = ServerConnection::accept(T0, &mut admission, 1, config).expect("valid config");
    (conn, admission)
}

/// An exchange for `block()`, connected, with its request written by the pump.
fn exchange() -> (Exchange, Bytes) {
    let request = ExchangeRequest::get_validated(
        "n0:7070",
        BlockRequest::new(path()),
        block().len() as u64,
        true,
    );
    let mut ex = Exchange::new(T0, &ClientConfig::default(), request, Link::Dial)
        .expect("valid config and request");
    ex.handle_connected(T0);
    let mut sent = Vec::new();
    let step = pump::poll_exchange(
        T0,
        &mut ex,
        |_| true,
        |tx| {
            sent.extend_from_slice(&tx.head);
            Written::All
        },
    );
    assert!(step.is_none(), "nothing to act on before the response");
    (ex, Bytes::from(sent))
}

/// The response bytes a real server writes for `request`.
fn response_to(request: &[u8]) -> Bytes {
    let (mut conn, mut admission) = server();
    pump::feed_server(T0, &mut conn, &mut admission, request);
    let mut out = Vec::new();
    pump::poll_server(T0, &mut conn, &mut admission, &mut holder, |_, tx| {
        out.extend_from_slice(&tx.head);
        out.extend_from_slice(&tx.body);
        Written::All
    });
    Bytes::from(out)
}

#[test]
fn feed_server_begins_every_decoded_request_at_admission() {
    let (_, request) = exchange();
    let (mut conn, mut admission) = server();
    let taken = pump::feed_server(T0, &mut conn, &mut admission, &request);
    assert_eq!(taken, request.len());
    assert!(!conn.needs_admission());
    // Begun: the request holds a slot and its fetch event is out.
    assert_eq!(admission.requests(), 1);
    assert!(matches!(conn.poll_event(), Some(ServerEvent::Fetch { .. })));
}

#[test]
fn poll_server_acknowledges_each_fully_written_transmit() {
    let (_, request) = exchange();
    let (mut conn, mut admission) = server();
    pump::feed_server(T0, &mut conn, &mut admission, &request);
    let mut written = 0;
    let pending = pump::poll_server(T0, &mut conn, &mut admission, &mut holder, |_, _| {
        written += 1;
        Written::All
    });
    assert!(!pending);
    assert_eq!(written, 1);
    // Acknowledged: the request's slot is released.
    assert_eq!(conn.in_progress(), 0);
    assert_eq!(admission.requests(), 0);
}

#[test]
fn poll_server_stops_at_a_transmit_still_being_written() {
    let (_, request) = exchange();
    let two = [&request[..], &request[..]].concat();
    let (mut conn, mut admission) = server();
    pump::feed_server(T0, &mut conn, &mut admission, &two);
    let mut written = 0;
    let pending = pump::poll_server(T0, &mut conn, &mut admission, &mut holder, |_, _| {
        written += 1;
        Written::Pending
    });
    assert!(pending);
    assert_eq!(
        written, 1,
        "the second response waits for the first to be written"
    );
    assert_eq!(conn.in_progress(), 2);
    // The driver acknowledges the first when its last byte is out; the second follows.
    conn.handle_transmitted(T0, &mut admission);
    pump::poll_server(T0, &mut conn, &mut admission, &mut holder, |_, _| {
        written += 1;
        Written::All
    });
    assert_eq!(written, 2);
    assert_eq!(conn.in_progress(), 0);
}

#[test]
fn poll_exchange_returns_the_response_head_before_the_outcome() {
    let (mut ex, request) = exchange();
    let response = response_to(&request);
    assert_eq!(pump::feed_exchange(T0, &mut ex, &response), response.len());
    let no_write = |_: Transmit| -> Written { unreachable!("nothing more to send") };
    let first = pump::poll_exchange(T0, &mut ex, |_| true, no_write);
    assert!(
        matches!(first, Some(ClientStep::Head { status: 200 })),
        "{first:?}"
    );
    let second = pump::poll_exchange(T0, &mut ex, |_| true, no_write);
    let Some(ClientStep::Done(outcome)) = second else {
        panic!("{second:?}")
    };
    let Ending::Block(got) = outcome.ending else {
        panic!("{:?}", outcome.ending)
    };
    assert_eq!(got, block());
}

#[test]
fn poll_exchange_reports_the_validators_verdict() {
    let (mut ex, request) = exchange();
    let response = response_to(&request);
    pump::feed_exchange(T0, &mut ex, &response);
    let no_write = |_: Transmit| -> Written { unreachable!("nothing more to send") };
    let mut steps = Vec::new();
    while let Some(step) = pump::poll_exchange(T0, &mut ex, |_| false, no_write) {
        steps.push(step);
    }
    let Some(ClientStep::Done(outcome)) = steps.pop() else {
        panic!("no outcome")
    };
    assert!(
        matches!(outcome.ending, Ending::Failed(ExchangeError::Validation)),
        "{:?}",
        outcome.ending
    );
}

#[test]
fn armed_schedules_only_a_deadline_earlier_than_the_pending_one() {
    let mut armed = Armed::default();
    let now = T0;
    let late = T0 + Duration::from_secs(5);
    let early = T0 + Duration::from_secs(1);
    assert_eq!(armed.arm(now, Some(late)), Some(late));
    assert_eq!(armed.arm(now, Some(late + Duration::from_secs(1))), None);
    assert_eq!(armed.arm(now, Some(early)), Some(early));
    assert_eq!(armed.arm(now, None), None);
}

#[test]
fn armed_schedules_again_once_the_pending_wake_up_fired() {
    let mut armed = Armed::default();
    let first = T0 + Duration::from_secs(1);
    let later = T0 + Duration::from_secs(3);
    assert_eq!(armed.arm(T0, Some(first)), Some(first));
    assert_eq!(armed.arm(T0, Some(later)), None);
    armed.fired(first);
    assert_eq!(armed.arm(first, Some(later)), Some(later));
}

#[test]
fn armed_never_schedules_in_the_past() {
    let mut armed = Armed::default();
    let now = T0 + Duration::from_secs(2);
    assert_eq!(armed.arm(now, Some(T0)), Some(now));
}
