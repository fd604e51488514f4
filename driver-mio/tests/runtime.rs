//! Rules of the mio driver's runtime that the conformance suite (one server per runtime)
//! cannot see: entries of different servers and clients share a worker's loop and timers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use peerblock_common::store::FileStore;
use peerblock_core::server::ServerConfig;
use peerblock_core::time::Clock;
use peerblock_mio::{Runtime, Server, ServerOptions};

fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("peerblock-mio-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn server(rt: &Runtime, store: &FileStore, idle: Duration) -> peerblock_mio::ServerHandle {
    let mut config = ServerConfig::new("node", "node.test:1");
    config.idle_timeout = idle;
    let options = ServerOptions::new(Arc::new(config), store.clone());
    Server::bind("127.0.0.1:0".parse().unwrap(), options)
        .unwrap()
        .start(rt)
}

/// One server's shutdown drives that server's entries only: a connection of another
/// server on the same worker keeps its timer, so its idle timeout still closes it.
#[test]
fn a_servers_shutdown_leaves_the_timers_of_other_entries_on_its_worker_armed() {
    let rt = Runtime::new(1, Clock::new(std::time::Instant::now())).unwrap();
    let dir = scratch("phase");
    let store = FileStore::new(&dir, 1 << 20);
    let a = server(&rt, &store, Duration::from_secs(120));
    let b = server(&rt, &store, Duration::from_millis(300));
    let mut conn = TcpStream::connect(b.local_addr()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // One request answered (a 404, kept alive): every readiness event of the connection
    // has been handled and its idle timer is armed before A's phase changes.
    let path = format!("/peer/v1/block/{}/1", "ab".repeat(32));
    write!(conn, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(conn.read(&mut byte).unwrap(), 1, "the 404's head");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 404 "), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).unwrap();
    a.shutdown(Duration::ZERO);
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = conn
        .read(&mut buf)
        .expect("B closes the idle connection, not a read timeout");
    assert_eq!(n, 0, "a FIN, no bytes");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "closed at B's idle timeout: {:?}",
        started.elapsed()
    );
    b.shutdown(Duration::from_secs(1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two servers on one runtime each answer their own requests (their entries share the
/// workers, never their state).
#[test]
fn two_servers_on_one_runtime_serve_independently() {
    let rt = Runtime::new(2, Clock::new(std::time::Instant::now())).unwrap();
    let (da, db) = (scratch("two-a"), scratch("two-b"));
    let (sa, sb) = (FileStore::new(&da, 1 << 20), FileStore::new(&db, 1 << 20));
    let path = peerblock_core::wire::BlockPath {
        key: peerblock_core::wire::ChunkKey::from_array([3; 32]),
        index: 1,
    };
    sa.put_blocking(&path, b"from a").unwrap();
    let a = server(&rt, &sa, Duration::from_secs(120));
    let b = server(&rt, &sb, Duration::from_secs(120));
    let get = |addr: std::net::SocketAddr| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    };
    let from_a = get(a.local_addr());
    assert!(from_a.starts_with("HTTP/1.1 200 "), "{from_a}");
    assert!(from_a.ends_with("from a"), "{from_a}");
    let from_b = get(b.local_addr());
    assert!(from_b.starts_with("HTTP/1.1 404 "), "{from_b}");
    a.shutdown(Duration::from_secs(1));
    b.shutdown(Duration::from_secs(1));
    let _ = std::fs::remove_dir_all(&da);
    let _ = std::fs::remove_dir_all(&db);
}

mod client_rules {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use peerblock_common::client::{ClientOptions, GetOptions, Local, OutcomeClass, Peer};
    use peerblock_common::metrics::Metrics;
    use peerblock_core::client::{BlockRequest, ClientConfig, Deadlines, RequestTimeout};
    use peerblock_core::time::Clock;
    use peerblock_core::wire::{BlockPath, ChunkKey, Hop};
    use peerblock_mio::{Client, Runtime};
    use peerblock_testkit::conformance::canned::{self, Reply};

    fn path() -> BlockPath {
        BlockPath {
            key: ChunkKey::from_array([9; 32]),
            index: 1,
        }
    }

    fn client(rt: &Runtime, f: impl FnOnce(&mut ClientOptions)) -> Client {
        let mut o = ClientOptions::new(rt.clock(), Metrics::new());
        f(&mut o);
        Client::new(rt, o).unwrap()
    }

    /// Requests that end during their first turn (a dial that fails at once) leave no
    /// trace in the worker's request table.
    #[test]
    fn requests_that_end_at_once_leave_nothing_tracked() {
        let rt = Runtime::new(2, Clock::new(std::time::Instant::now())).unwrap();
        let c = client(&rt, |_| {});
        for i in 0..50 {
            // Not an address: the dial fails before any socket exists.
            let got = c.get(
                &Peer::from_addr(format!("no-port-{i}")),
                BlockRequest::new(path()),
            );
            assert_eq!(got.class, OutcomeClass::Unavailable, "{}", got.describe());
        }
        assert_eq!(c.tracked_requests(), 0);
    }

    /// A long queue of requests waiting for one peer's only slot, each failing as soon as
    /// it gets it, is worked through as tasks, not recursively: every one is answered and
    /// the worker survives (a recursive hand-over overflowed its stack).
    #[test]
    fn a_long_queue_of_waiters_failing_at_once_is_answered_without_recursion() {
        let silent = canned::serve(|_, _, _| Reply::BytesThenHold(Vec::new()));
        let rt = Runtime::new(1, Clock::new(std::time::Instant::now())).unwrap();
        let c = client(&rt, |o| {
            o.max_conns_per_peer = 1;
            o.exchange = ClientConfig {
                deadlines: Deadlines {
                    dial: Duration::from_millis(500),
                    response_header: Duration::from_millis(300),
                    request: RequestTimeout::After(Duration::from_secs(30)),
                },
                ..ClientConfig::default()
            };
        });
        let peer = Peer::from_addr(&silent.addr);
        // Holds the only slot until its response-header deadline.
        let holder = {
            let (c, peer) = (c.clone(), peer.clone());
            std::thread::spawn(move || c.get(&peer, BlockRequest::new(path())))
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let answered = Arc::new(AtomicUsize::new(0));
        const WAITERS: usize = 5_000;
        for _ in 0..WAITERS {
            let (tx, answered) = (tx.clone(), Arc::clone(&answered));
            // An origin with a line break cannot be sent: `Exchange::new` refuses it the
            // moment the waiter gets the slot.
            let block = BlockRequest {
                path: path(),
                origin: Some("http://x\r\ny"),
                hop: Hop(0),
            };
            c.submit(
                &peer,
                block,
                GetOptions::default(),
                Box::new(move |f| {
                    if answered.fetch_add(1, Ordering::SeqCst) + 1 == WAITERS {
                        let _ = tx.send(());
                    }
                    assert_eq!(f.local, Some(Local::Unsendable), "{}", f.describe());
                }),
            );
        }
        let held = holder.join().unwrap();
        assert_eq!(held.class, OutcomeClass::Unavailable, "{}", held.describe());
        rx.recv_timeout(Duration::from_secs(30))
            .expect("every waiter answered");
        assert_eq!(answered.load(Ordering::SeqCst), WAITERS);
        // The worker is alive: a new request is still served.
        let again = c.get(&Peer::from_addr("no-port"), BlockRequest::new(path()));
        assert_eq!(again.class, OutcomeClass::Unavailable);
    }
}

/// A roster service stopped right after it started stops at once (the stop is queued
/// behind the start on the service's worker), and a dropped one stops too.
#[test]
fn a_roster_service_shut_down_at_once_stops_at_once() {
    use peerblock_common::client::ClientOptions;
    use peerblock_common::metrics::Metrics;
    use peerblock_core::roster::{Membership, RefreshConfig, RosterMember, NO_EPOCH};
    let rt = Runtime::new(2, Clock::new(std::time::Instant::now())).unwrap();
    let client =
        peerblock_mio::Client::new(&rt, ClientOptions::new(rt.clock(), Metrics::new())).unwrap();
    let me = RosterMember {
        id: "me".into(),
        addr: "127.0.0.1:1".into(),
        weight: 1.0,
        record: Default::default(),
    };
    let membership = Arc::new(std::sync::Mutex::new(
        Membership::new(me, NO_EPOCH, 16).unwrap(),
    ));
    let config = RefreshConfig {
        seeds: vec!["127.0.0.1:9".into()],
        ..RefreshConfig::default()
    };
    let started = Instant::now();
    let service = peerblock_mio::RosterService::start(
        &rt,
        client.clone(),
        Arc::clone(&membership),
        config.clone(),
        1,
    )
    .unwrap();
    service.shutdown();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "stopped at once: {:?}",
        started.elapsed()
    );
    let dropped = peerblock_mio::RosterService::start(&rt, client, membership, config, 2).unwrap();
    drop(dropped);
}

/// A fetched roster of signed members is verified off the worker (the service's verifier
/// thread, split over the cores) and merged: every good record learned verified, every bad
/// one rejected, each checked exactly once.
#[test]
fn a_fetched_roster_of_signed_members_is_verified_off_the_worker_and_learned() {
    use peerblock_common::client::ClientOptions;
    use peerblock_common::metrics::Metrics;
    use peerblock_core::roster::{
        Membership, MembershipPolicy, RefreshConfig, RosterMember, MIN_PARALLEL_PART,
    };
    use peerblock_testkit::conformance::canned::{self, Reply};
    let n = 2 * MIN_PARALLEL_PART as u32 + 100;
    // Every 100th member signs another address: its signature does not verify.
    let (reply, good) = canned::signed_roster_answer(n, 13);
    let server = canned::serve(move |_, _, _| Reply::Bytes(reply.clone()));
    let rt = Runtime::new(2, Clock::new(std::time::Instant::now())).unwrap();
    let client =
        peerblock_mio::Client::new(&rt, ClientOptions::new(rt.clock(), Metrics::new())).unwrap();
    let policy = MembershipPolicy {
        max_new_per_source: n as usize,
        max_checks_per_source: n as usize,
        ..MembershipPolicy::default()
    };
    let membership = Arc::new(std::sync::Mutex::new(
        Membership::new(RosterMember::new("me", "me.test:7070", 1.0), 0, 4095)
            .unwrap()
            .with_policy(policy)
            .unwrap(),
    ));
    let config = RefreshConfig {
        seeds: vec![server.addr.clone()],
        interval: peerblock_core::time::Duration::from_secs(60),
        jitter: peerblock_core::time::Duration::from_secs(1),
        ..RefreshConfig::default()
    };
    let service =
        peerblock_mio::RosterService::start(&rt, client, Arc::clone(&membership), config, 5)
            .unwrap();
    assert!(
        service.wait_answers(1, Duration::from_secs(20)),
        "no answer merged within 20 s"
    );
    {
        let m = membership.lock().unwrap();
        assert_eq!(m.len(), good.len());
        assert!(good.iter().all(|id| m.record(id).is_some()));
        assert_eq!(m.stats().bad_signature, (n - good.len() as u32) as u64);
        assert_eq!(m.stats().signature_checks, n as u64);
    }
    service.shutdown();
}
