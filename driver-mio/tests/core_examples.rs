//! The two core-only examples (`core/examples/blocking_server.rs` and
//! `core/examples/blocking_client.rs`, shown whole in docs/integrating.md) run the
//! conformance suite: every rule they cover, as a driver of their own, against each other
//! and in mixed pairs with the mio driver's server and client. The rules they leave out
//! need what the examples do not have (metrics, graceful shutdown, a membership table,
//! relays, a connection pool, the read machine); `LEFT_OUT` names each with its reason, and
//! a test checks that every rule of the suite is run here or left out.

#[allow(dead_code)] // its `main` is not called here
#[path = "../../core/examples/blocking_server.rs"]
mod server;

#[allow(dead_code)]
#[path = "../../core/examples/blocking_client.rs"]
mod client;

mod harness;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use peerblock_common::client::{Fetched, GetOptions, Local, OutcomeClass, Peer};
use peerblock_common::metrics::Metrics;
use peerblock_common::read::{BlockSpec, Candidate, ReadResult};
use peerblock_core::client::{BlockRequest, ExchangeRequest};
use peerblock_core::placement::PeerId;
use peerblock_core::read::GetOutcome;
use peerblock_core::time::Clock;
use peerblock_testkit::conformance::{
    ClientSpec, Driver, PeerState, ServerSpec, TestClient, TestServer,
};

/// The examples as a driver: the blocking server and the blocking client.
struct CoreExamples;

impl Driver for CoreExamples {
    fn name(&self) -> String {
        "core-examples".into()
    }

    fn server(&self, spec: ServerSpec) -> Box<dyn TestServer> {
        let listener = TcpListener::bind(spec.listen).expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let mut config = spec.config;
        if config.advertised_addr.is_empty() {
            config.advertised_addr = addr.to_string();
        }
        let store = spec.store;
        let node = server::Node::new(
            config,
            spec.admission,
            Box::new(move |p| store.get_blocking(p)),
        )
        .expect("valid configuration");
        let serving = Arc::clone(&node);
        std::thread::spawn(move || serving.serve(listener));
        Box::new(ExampleServer {
            addr,
            node,
            metrics: spec.metrics,
        })
    }

    fn client(&self, spec: ClientSpec) -> Box<dyn TestClient> {
        let options = spec.options;
        let clock = options.clock;
        let client = client::Client::new(options.exchange, options.peers, clock)
            .expect("valid configuration");
        Box::new(ExampleClient { client, clock })
    }
}

struct ExampleServer {
    addr: SocketAddr,
    node: Arc<server::Node>,
    metrics: Metrics,
}

impl TestServer for ExampleServer {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn sessions(&self) -> usize {
        let mut sessions = 0;
        // A condition that holds at once: one look at the admission, no wait.
        let looked = |a: &peerblock_core::server::Admission| {
            sessions = a.sessions();
            true
        };
        self.node.wait_until(looked, Duration::ZERO);
        sessions
    }

    /// The example counts nothing: the rules that read metrics are left out.
    fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// Woken by the example's own notifications (after every accept and close); the
    /// condition sees the admission as it is then.
    fn wait_until(
        &self,
        condition: &mut dyn FnMut(&dyn TestServer) -> bool,
        timeout: Duration,
    ) -> bool {
        let server = |a: &peerblock_core::server::Admission| Seen {
            addr: self.addr,
            sessions: a.sessions(),
            metrics: self.metrics.clone(),
        };
        self.node.wait_until(|a| condition(&server(a)), timeout)
    }

    /// The example has no graceful shutdown: its accept thread lives on until the test
    /// process ends (the rules that test shutdown are left out).
    fn shutdown(self: Box<Self>, _grace: Duration) {}
}

/// The server as a waiting condition sees it: the admission under its lock.
struct Seen {
    addr: SocketAddr,
    sessions: usize,
    metrics: Metrics,
}

impl TestServer for Seen {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn sessions(&self) -> usize {
        self.sessions
    }

    fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    fn wait_until(&self, _: &mut dyn FnMut(&dyn TestServer) -> bool, _: Duration) -> bool {
        unreachable!("a condition does not wait")
    }

    fn shutdown(self: Box<Self>, _grace: Duration) {}
}

struct ExampleClient {
    client: client::Client,
    clock: Clock,
}

impl TestClient for ExampleClient {
    fn get(&self, peer: &Peer, block: BlockRequest<'_>, options: GetOptions) -> Fetched {
        let started = StdInstant::now();
        let host = peer.addr.as_str();
        let mut request = match (options.expected, &options.validator) {
            (Some(expected), v) => {
                ExchangeRequest::get_validated(host, block, expected, v.is_some())
            }
            (None, Some(_)) => ExchangeRequest::get_checked(host, block),
            (None, None) => ExchangeRequest::get(host, block),
        };
        if let Some(deadline) = options.deadline {
            request = request.with_deadline(deadline);
        }
        let validator = options.validator.clone();
        let validate = move |body: &[u8]| {
            validator
                .as_ref()
                .is_none_or(|v| v(&peerblock_core::bytes::Bytes::copy_from_slice(body)))
        };
        match self.client.get(peer.id, host, request, &validate) {
            Ok(finished) => Fetched {
                peer: peer.id,
                class: OutcomeClass::of(&finished.ending),
                get: finished.get,
                ending: Some(finished.ending),
                local: None,
                elapsed: started.elapsed(),
                pooled: false,
                retried_fresh: false,
            },
            Err(_) => Fetched {
                peer: peer.id,
                get: GetOutcome::Failed,
                ending: None,
                local: Some(Local::BreakerRejected),
                class: OutcomeClass::Unavailable,
                elapsed: started.elapsed(),
                pooled: false,
                retried_fresh: false,
            },
        }
    }

    fn roster(&self, _addr: &str, _caller: Option<(&str, &str, Option<&str>)>) -> Fetched {
        unreachable!("the roster rules are left out: the example client fetches blocks only")
    }

    fn read(&self, _block: BlockSpec, _candidates: Vec<Candidate>) -> ReadResult {
        unreachable!("the read rules are left out: the example client runs no read machine")
    }

    /// Every GET dials afresh: nothing is ever pooled.
    fn idle_connections(&self) -> usize {
        0
    }

    fn peer_state(&self, peer: &PeerId) -> PeerState {
        let now = self.clock.to_core(StdInstant::now());
        PeerState::of(&self.client.peers(), now, peer)
    }
}

/// Runs each named rule against `$driver` as a `#[test]` of the same name, in a module of
/// its own (the suite macro's own per-rule arm).
macro_rules! rules {
    ($module:ident, $driver:expr; $($rule:ident),* $(,)?) => {
        mod $module {
            use super::*;
            peerblock_testkit::conformance_suite!(@each $driver; $($rule),*);
        }
    };
}

use peerblock_testkit::conformance::Mixed;

// The server's rules, its client the example client, then the mio client.
rules!(server_rules, CoreExamples;
    a_block_not_held_is_404,
    a_malformed_block_path_is_400,
    a_method_other_than_get_is_405,
    a_bad_hop_is_400_and_the_source_is_never_invoked,
    a_block_file_above_the_max_block_size_is_500_on_every_request,
    pipelined_requests_then_half_close_get_every_response_in_order,
    a_request_and_fin_in_one_segment_are_answered_then_closed,
    many_concurrent_clients_all_get_exact_bytes,
    large_blocks_are_served_in_turn_no_connection_waits_beyond_its_fair_share,
    a_source_at_its_quota_is_refused_while_another_source_is_admitted,
    sessions_are_released_when_clients_reset,
    an_idle_connection_is_closed_after_the_idle_timeout,
    without_a_membership_the_roster_is_this_node_alone,
    a_rotten_block_is_quarantined_and_answered_404_corrupt_while_the_others_are_served,
    a_client_that_never_reads_is_cut_at_the_send_timeout,
);

// The client's rules, against the suite's canned peers and the example server.
rules!(client_rules, CoreExamples;
    client_round_trip_gives_the_exact_bytes,
    a_404_is_a_miss_of_class_absent,
    a_chunked_body_is_read_correctly,
    a_failing_validator_gives_an_invalid_outcome,
    a_validator_without_a_length_checks_a_body_of_any_length,
    a_404_that_says_corrupt_is_an_invalid_copy_not_a_miss,
    a_closed_port_is_routed_around_after_one_attempt,
    a_blackholed_peer_is_cut_at_the_dial_deadline,
    a_silent_peer_is_cut_at_the_response_header_deadline,
    a_body_stalled_midway_is_cut_at_the_request_deadline,
    an_oversized_body_is_refused_before_expected_plus_one_bytes_are_read,
    a_refusal_cools_the_peer_down_and_it_is_reached_again_after,
);

// Mixed pairs: the example server with the mio client, the mio server with the example
// client.
rules!(example_server_mio_client, Mixed::new(CoreExamples, harness::Mio::buffered());
    client_round_trip_gives_the_exact_bytes,
    a_block_not_held_is_404,
    a_source_at_its_quota_is_refused_while_another_source_is_admitted,
);
rules!(mio_server_example_client, Mixed::new(harness::Mio::buffered(), CoreExamples);
    client_round_trip_gives_the_exact_bytes,
    a_404_is_a_miss_of_class_absent,
);

/// The suite's rules the examples do not run, each with what it needs that they lack.
const LEFT_OUT: &[(&str, &str)] = &[
    ("server_round_trip_from_the_file_store_is_byte_exact", "counts requests in the server's metrics"),
    ("a_full_node_refuses_the_third_connection_with_503_and_retry_after", "counts the refusal in the server's metrics (the refusal itself: a_source_at_its_quota_...)"),
    ("graceful_shutdown_finishes_an_inflight_response_then_refuses_connects", "graceful shutdown"),
    ("shutdown_closes_connections_still_busy_after_the_grace_period", "graceful shutdown"),
    ("the_roster_is_answered_from_the_membership_and_its_caller_is_learned", "a membership table"),
    ("a_signed_caller_is_learned_verified", "a membership table"),
    ("an_unsigned_caller_never_moves_a_verified_member", "a membership table"),
    ("a_caller_record_signed_by_another_key_is_rejected", "a membership table"),
    ("two_sequential_gets_reuse_one_connection", "a connection pool (every GET dials afresh)"),
    ("open_connections_per_peer_never_exceed_the_cap", "per-peer connection slots"),
    ("a_read_whose_only_holder_refuses_once_completes_after_the_cooldown", "the read machine"),
    ("a_read_whose_holders_always_refuse_ends_busy_never_absent", "the read machine"),
    ("a_read_with_one_dead_and_one_live_holder_completes_from_the_live_one", "the read machine"),
    ("a_silent_holder_that_loses_to_the_hedge_is_still_cut_at_its_deadline_and_charged", "the read machine"),
    ("a_relay_fetches_a_missing_block_from_the_origin_caches_it_and_serves_it", "relays"),
    ("a_relay_that_cannot_get_a_chunks_manifest_serves_its_block_but_never_caches_it", "relays"),
    ("a_relay_fetches_the_manifest_it_lacks_checks_the_block_and_caches_both", "relays"),
    ("a_relayed_block_that_fails_the_relays_manifest_is_500_and_never_stored", "relays"),
    ("a_relayed_manifest_that_fails_its_chunk_key_is_500_and_never_stored", "relays"),
    ("a_relayed_fetch_is_given_up_when_its_requester_goes_away", "relays"),
    ("a_request_at_the_hop_bound_is_not_relayed_and_the_origin_is_never_asked", "relays"),
    ("an_upstream_refusal_is_passed_on_as_502_and_the_relays_circuit_stays_closed", "relays"),
];

#[test]
fn every_conformance_rule_is_run_against_the_examples_or_left_out_with_a_reason() {
    let suite = [
        include_str!("../../testkit/src/conformance/suite/server.rs"),
        include_str!("../../testkit/src/conformance/suite/client.rs"),
        include_str!("../../testkit/src/conformance/suite/reader.rs"),
        include_str!("../../testkit/src/conformance/suite/relay.rs"),
    ]
    .concat();
    let this = include_str!("core_examples.rs");
    let rules: Vec<&str> = suite
        .lines()
        .filter_map(|l| l.strip_prefix("pub fn "))
        .filter_map(|l| l.split_once("(d: &dyn Driver)").map(|(name, _)| name))
        .collect();
    assert!(
        rules.len() >= 40,
        "found only {} rules in suite/",
        rules.len()
    );
    for rule in rules {
        let run = this.contains(&format!("    {rule},\n"));
        let left_out = LEFT_OUT.iter().any(|(name, _)| *name == rule);
        assert!(
            run != left_out,
            "{rule}: run {run}, left out {left_out} (exactly one)"
        );
    }
}

/// Core's refusal bound, through the example server on real sockets: with one session
/// taken and `max_refusals = 1` held by a silent refused connection, the next refused
/// connection is closed at once, unanswered.
#[test]
fn the_example_server_closes_a_refusal_over_core_s_bound_unanswered() {
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;
    let admission = peerblock_core::server::AdmissionConfig {
        max_sessions: 1,
        max_sessions_per_source: 1,
        max_refusals: 1,
        ..Default::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let config = peerblock_core::server::ServerConfig::new("srv", addr.to_string());
    let miss = Box::new(|_: &_| peerblock_core::server::SourceResult::Miss);
    let node = server::Node::new(config, admission, miss).expect("valid configuration");
    let serving = Arc::clone(&node);
    std::thread::spawn(move || serving.serve(listener));
    let bound = Duration::from_secs(10);
    let _held = TcpStream::connect(addr).expect("connect");
    assert!(
        node.wait_until(|a| a.sessions() == 1, bound),
        "the first connection was admitted"
    );
    let _silent = TcpStream::connect(addr).expect("connect");
    assert!(
        node.wait_until(|a| a.refusals() == 1, bound),
        "the second holds the refusal slot"
    );
    let mut over = TcpStream::connect(addr).expect("connect");
    over.set_read_timeout(Some(bound)).expect("read timeout");
    let _ = over.write_all(b"GET /peer/v1/block/00/0 HTTP/1.1\r\nHost: s\r\n\r\n");
    let mut buf = [0u8; 256];
    let read = over.read(&mut buf);
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "closed without an answer: {read:?}"
    );
    assert!(
        node.wait_until(|a| a.refusals() == 1, bound),
        "the slot is still the silent one's"
    );
}
