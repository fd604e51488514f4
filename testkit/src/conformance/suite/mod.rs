//! The behaviours every driver must show, one function per rule; [`conformance_suite!`](crate::conformance_suite)
//! turns each into a `#[test]` of the same name, run under [`TEST_BOUND`].
//!
//! Server rules talk to [`Driver::server`] over raw `std::net` sockets (decoding with
//! core's `ResponseDecoder`) and, where a driver's own client adds something, through
//! [`Driver::client`] too; client and reader rules run [`Driver::client`] against the
//! misbehaving peers of [`canned`]; relay rules run both. Timing is only ever asserted as
//! a loose bound, and every wait is for an event (a connection admitted or closed, a head
//! read, a response), never a sleep, except where the behaviour is time passing (a
//! cooldown running out).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use peerblock_common::client::GetOptions;
use peerblock_common::store::{FileStore, DEFAULT_MAX_BLOCK_SIZE};
use peerblock_core::bytes::Bytes;
use peerblock_core::client::{BlockRequest, ClientConfig, Deadlines, RequestTimeout};
use peerblock_core::http::{BodyLimit, ResponseDecoder, ResponseEvent, ResponseHead};
use peerblock_core::server::{AdmissionConfig, ServerConfig};
use peerblock_core::wire::BlockPath;

use super::canned;
use super::{ClientSpec, Driver, ServerSpec, TestServer, TEST_BOUND};

mod client;
mod reader;
mod relay;
mod server;

pub use client::*;
pub use reader::*;
pub use relay::*;
pub use server::*;

/// Runs `rule` against the driver `make` builds, on a thread of its own, and fails the
/// test if it has not finished within [`TEST_BOUND`] (a hung rule fails, it does not
/// hang the suite). What [`conformance_suite!`](crate::conformance_suite) expands each test to.
pub fn run<D: Driver + 'static>(
    name: &'static str,
    make: impl FnOnce() -> D + Send + 'static,
    rule: fn(&dyn Driver),
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let driver = make();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rule(&driver)));
            let _ = tx.send(outcome);
        })
        .expect("spawn the rule's thread");
    match rx.recv_timeout(TEST_BOUND) {
        Ok(Ok(())) => {
            let _ = worker.join();
        }
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("conformance rule `{name}` did not finish within {TEST_BOUND:?}"),
    }
}

/// Expands to one `#[test]` per conformance rule, each named for its rule and run with
/// [`run`](crate::conformance::suite::run) under
/// [`TEST_BOUND`](crate::conformance::TEST_BOUND), against the driver `$driver` builds
/// (evaluated afresh for every test).
///
/// ```ignore
/// peerblock_testkit::conformance_suite!(Tokio);
/// // Mixed pairs: a module name first.
/// peerblock_testkit::conformance_suite!(tokio_server_mio_client, Mixed::new(Tokio, Mio));
/// ```
#[macro_export]
macro_rules! conformance_suite {
    (@tests $driver:expr) => {
        $crate::conformance_suite!(@each $driver;
            server_round_trip_from_the_file_store_is_byte_exact,
            a_block_not_held_is_404,
            a_malformed_block_path_is_400,
            a_method_other_than_get_is_405,
            a_bad_hop_is_400_and_the_source_is_never_invoked,
            a_block_file_above_the_max_block_size_is_500_on_every_request,
            a_rotten_block_is_quarantined_and_answered_404_corrupt_while_the_others_are_served,
            pipelined_requests_then_half_close_get_every_response_in_order,
            a_request_and_fin_in_one_segment_are_answered_then_closed,
            many_concurrent_clients_all_get_exact_bytes,
            large_blocks_are_served_in_turn_no_connection_waits_beyond_its_fair_share,
            a_full_node_refuses_the_third_connection_with_503_and_retry_after,
            a_source_at_its_quota_is_refused_while_another_source_is_admitted,
            sessions_are_released_when_clients_reset,
            an_idle_connection_is_closed_after_the_idle_timeout,
            graceful_shutdown_finishes_an_inflight_response_then_refuses_connects,
            shutdown_closes_connections_still_busy_after_the_grace_period,
            a_client_that_never_reads_is_cut_at_the_send_timeout,
            the_roster_is_answered_from_the_membership_and_its_caller_is_learned,
            without_a_membership_the_roster_is_this_node_alone,
            a_signed_caller_is_learned_verified,
            an_unsigned_caller_never_moves_a_verified_member,
            a_caller_record_signed_by_another_key_is_rejected,
            client_round_trip_gives_the_exact_bytes,
            a_404_is_a_miss_of_class_absent,
            a_chunked_body_is_read_correctly,
            a_failing_validator_gives_an_invalid_outcome,
            a_validator_without_a_length_checks_a_body_of_any_length,
            a_404_that_says_corrupt_is_an_invalid_copy_not_a_miss,
            two_sequential_gets_reuse_one_connection,
            open_connections_per_peer_never_exceed_the_cap,
            a_closed_port_is_routed_around_after_one_attempt,
            a_blackholed_peer_is_cut_at_the_dial_deadline,
            a_silent_peer_is_cut_at_the_response_header_deadline,
            a_body_stalled_midway_is_cut_at_the_request_deadline,
            an_oversized_body_is_refused_before_expected_plus_one_bytes_are_read,
            a_refusal_cools_the_peer_down_and_it_is_reached_again_after,
            a_read_whose_only_holder_refuses_once_completes_after_the_cooldown,
            a_read_whose_holders_always_refuse_ends_busy_never_absent,
            a_read_with_one_dead_and_one_live_holder_completes_from_the_live_one,
            a_silent_holder_that_loses_to_the_hedge_is_still_cut_at_its_deadline_and_charged,
            a_relay_fetches_a_missing_block_from_the_origin_caches_it_and_serves_it,
            a_relay_that_cannot_get_a_chunks_manifest_serves_its_block_but_never_caches_it,
            a_relay_fetches_the_manifest_it_lacks_checks_the_block_and_caches_both,
            a_relayed_block_that_fails_the_relays_manifest_is_500_and_never_stored,
            a_relayed_manifest_that_fails_its_chunk_key_is_500_and_never_stored,
            a_relayed_fetch_is_given_up_when_its_requester_goes_away,
            a_request_at_the_hop_bound_is_not_relayed_and_the_origin_is_never_asked,
            an_upstream_refusal_is_passed_on_as_502_and_the_relays_circuit_stays_closed,
        );
    };
    (@each $driver:expr; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                $crate::conformance::suite::run(
                    stringify!($rule),
                    || $driver,
                    $crate::conformance::suite::$rule,
                );
            }
        )*
    };
    ($module:ident, $driver:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $crate::conformance_suite!(@tests $driver);
        }
    };
    ($driver:expr) => {
        $crate::conformance_suite!(@tests $driver);
    };
}

// ---------------------------------------------------------------------------------------
// Helpers

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Waits inside a rule are bounded by this (well inside [`TEST_BOUND`]).
const WAIT: Duration = Duration::from_secs(20);

fn path(chunk: u8, index: u64) -> BlockPath {
    canned::block_path(chunk, index)
}

/// A block whose bytes depend on its path, so a mix-up shows.
fn block_for(p: &BlockPath, len: usize) -> Bytes {
    let seed = p.key.as_bytes()[0] as u64 * 1_000_003 + p.index;
    Bytes::from(
        (0..len)
            .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
            .collect::<Vec<u8>>(),
    )
}

fn get_head(p: &BlockPath) -> String {
    format!("GET {p} HTTP/1.1\r\nHost: test\r\n\r\n")
}

/// A unique scratch directory, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "peerblock-conf-{tag}-{}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    /// A file store rooted here.
    /// A store here, with a relay cache of 64 MiB (`<dir>/.relay-cache`).
    fn store(&self, max_block_size: u64) -> FileStore {
        let cache =
            peerblock_common::relay_cache::RelayCache::open(&self.0, 64 << 20, Default::default())
                .expect("open the relay cache");
        FileStore::new(&self.0, max_block_size).with_relay_cache(cache)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A node's file store holding `blocks`, and the directory it lives in.
fn store_with(tag: &str, blocks: &[(BlockPath, Bytes)]) -> (TempDir, FileStore) {
    let dir = TempDir::new(tag);
    let store = dir.store(DEFAULT_MAX_BLOCK_SIZE);
    for (p, b) in blocks {
        store.put_blocking(p, b).expect("put block");
    }
    (dir, store)
}

/// A transport-only node "srv" (advertising `srv.test:7070`) on 127.0.0.1 serving
/// `store`, with `tweak` applied to its spec.
fn node(
    d: &dyn Driver,
    store: &FileStore,
    tweak: impl FnOnce(&mut ServerSpec),
) -> Box<dyn TestServer> {
    let mut spec = ServerSpec::new(LOCALHOST, "srv", store.clone());
    spec.config = ServerConfig::new("srv", "srv.test:7070");
    tweak(&mut spec);
    d.server(spec)
}

fn admission(max_sessions: usize, per_source: usize) -> AdmissionConfig {
    AdmissionConfig {
        max_sessions,
        max_sessions_per_source: per_source,
        ..AdmissionConfig::default()
    }
}

fn sessions_become(server: &dyn TestServer, n: usize) {
    assert!(
        server.wait_until(&mut |s| s.sessions() == n, WAIT),
        "sessions never became {n} (now {})",
        server.sessions()
    );
}

struct Response {
    head: ResponseHead,
    body: Bytes,
}

impl Response {
    fn status(&self) -> u16 {
        self.head.status()
    }
}

/// A raw HTTP/1.1 client on one blocking connection.
struct Raw {
    stream: TcpStream,
    decoder: ResponseDecoder,
    expecting: bool,
}

impl Raw {
    fn connect(addr: SocketAddr) -> Raw {
        Raw::from_stream(TcpStream::connect(addr).expect("connect"))
    }

    /// Connects from the loopback address `from` (another source for admission), with
    /// a receive buffer of `recv_buffer` bytes if given (set before the connect, so the
    /// window is small from the start).
    fn connect_with(from: Ipv4Addr, addr: SocketAddr, recv_buffer: Option<usize>) -> Raw {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        if let Some(n) = recv_buffer {
            socket.set_recv_buffer_size(n).expect("SO_RCVBUF");
        }
        let local: SocketAddr = (from, 0).into();
        socket.bind(&local.into()).expect("bind client");
        socket.connect(&addr.into()).expect("connect");
        Raw::from_stream(socket.into())
    }

    fn from_stream(stream: TcpStream) -> Raw {
        stream.set_read_timeout(Some(WAIT)).expect("read timeout");
        Raw {
            stream,
            decoder: ResponseDecoder::new(),
            expecting: false,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write request");
    }

    /// Reads once from the socket into the decoder; false at end of stream.
    fn read_once(&mut self) -> bool {
        if !self.expecting {
            self.decoder
                .expect(BodyLimit::AtMost(64 * 1024 * 1024))
                .expect("decoder idle");
            self.expecting = true;
        }
        let buf = self.decoder.read_buf();
        let n = self.stream.read(buf).expect("read response");
        if n == 0 {
            self.decoder.handle_eof();
        } else {
            self.decoder.advance(n);
        }
        n > 0
    }

    /// The next complete response.
    fn response(&mut self) -> Response {
        if !self.expecting {
            self.decoder
                .expect(BodyLimit::AtMost(64 * 1024 * 1024))
                .expect("decoder idle");
            self.expecting = true;
        }
        let mut head = None;
        loop {
            match self.decoder.poll().expect("a well-formed response") {
                Some(ResponseEvent::Head(h)) => head = Some(h),
                Some(ResponseEvent::Body(body)) => {
                    self.expecting = false;
                    return Response {
                        head: head.expect("head before body"),
                        body,
                    };
                }
                None => {
                    self.read_once();
                }
            }
        }
    }

    /// Waits for the server to close the connection: true on a clean end of stream.
    fn closed_by_server(&mut self) -> bool {
        let mut buf = [0u8; 64];
        matches!(self.stream.read(&mut buf), Ok(0))
    }

    fn get(&mut self, p: &BlockPath) -> Response {
        self.send(get_head(p).as_bytes());
        self.response()
    }
}

/// Opens one admitted connection per address of `from`, each proven admitted by one
/// served request.
fn admitted(addr: SocketAddr, from: &[Ipv4Addr], p: &BlockPath) -> Vec<Raw> {
    from.iter()
        .map(|ip| {
            let mut c = Raw::connect_with(*ip, addr, None);
            assert_eq!(c.get(p).status(), 200);
            c
        })
        .collect()
}

/// Connects from `from`, sends one request and returns the response and its latency
/// (from the start of the connect to the complete response).
fn refused(from: Ipv4Addr, addr: SocketAddr, p: &BlockPath) -> (Response, Duration) {
    let started = Instant::now();
    let mut c = Raw::connect_with(from, addr, None);
    let r = c.get(p);
    (r, started.elapsed())
}

fn deadlines(dial_ms: u64, header_ms: u64, request_ms: u64) -> ClientConfig {
    ClientConfig {
        deadlines: Deadlines {
            dial: peerblock_core::time::Duration::from_millis(dial_ms),
            response_header: peerblock_core::time::Duration::from_millis(header_ms),
            request: RequestTimeout::After(peerblock_core::time::Duration::from_millis(request_ms)),
        },
        ..ClientConfig::default()
    }
}

fn client_with(d: &dyn Driver, f: impl FnOnce(&mut ClientSpec)) -> Box<dyn super::TestClient> {
    let mut spec = ClientSpec::new();
    f(&mut spec);
    d.client(spec)
}

fn block() -> BlockRequest<'static> {
    BlockRequest::new(canned::block_path(0xab, 3))
}

fn validated(
    expected: u64,
    validator: impl Fn(&Bytes) -> bool + Send + Sync + 'static,
) -> GetOptions {
    GetOptions {
        expected: Some(expected),
        validator: Some(Arc::new(validator)),
        ..GetOptions::default()
    }
}

fn metric(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|n| n.trim().parse().ok())
}
