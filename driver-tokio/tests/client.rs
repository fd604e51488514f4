//! The tokio client against canned loopback servers: one rule per test.

#[path = "common/canned.rs"]
mod canned;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use canned::Reply;
use peerblock_core::client::{
    BlockRequest, ClientConfig, Deadlines, Ending, ExchangeError, LengthError, RequestTimeout,
};
use peerblock_core::read::{GetOutcome, PeerView};
use peerblock_core::time::{Clock, Duration};
use peerblock_tokio::client::{Client, ClientOptions, Local, OutcomeClass, Peer};
use peerblock_tokio::metrics::Metrics;

const BOUND: StdDuration = StdDuration::from_secs(20);

fn options() -> ClientOptions {
    ClientOptions::new(Clock::new(std::time::Instant::now()), Metrics::new())
}

fn client_with(f: impl FnOnce(&mut ClientOptions)) -> Client {
    let mut o = options();
    f(&mut o);
    Client::new(o).unwrap()
}

fn client() -> Client {
    client_with(|_| {})
}

fn deadlines(dial_ms: u64, header_ms: u64, request_ms: u64) -> ClientConfig {
    ClientConfig {
        deadlines: Deadlines {
            dial: Duration::from_millis(dial_ms),
            response_header: Duration::from_millis(header_ms),
            request: RequestTimeout::After(Duration::from_millis(request_ms)),
        },
        ..ClientConfig::default()
    }
}

fn block() -> BlockRequest<'static> {
    BlockRequest::new(canned::block_path(0xab, 3))
}

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(BOUND, f).await.expect("test bound")
}

#[tokio::test]
async fn a_round_trip_gives_the_exact_bytes() {
    bounded(async {
        let body: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let b = body.clone();
        let server = canned::serve(move |_, _, _| Reply::Bytes(canned::ok(&b))).await;
        let c = client();
        let got = c.get(&Peer::from_addr(&server.addr), block()).await;
        assert_eq!(got.class, OutcomeClass::Ok, "{}", got.describe());
        assert_eq!(got.bytes().unwrap().as_ref(), &body[..]);
        let heads = server.stats.heads();
        let path = canned::block_path(0xab, 3).to_string();
        assert!(
            heads[0].starts_with(&format!("GET {path} HTTP/1.1\r\n")),
            "{}",
            heads[0]
        );
    })
    .await;
}

#[tokio::test]
async fn a_404_is_a_miss_of_class_absent() {
    bounded(async {
        let server = canned::serve(|_, _, _| Reply::Bytes(canned::not_found())).await;
        let got = client().get(&Peer::from_addr(&server.addr), block()).await;
        assert_eq!(got.class, OutcomeClass::Absent);
        assert_eq!(got.class.name(), "absent");
        assert_eq!(got.get, GetOutcome::NotFound);
        assert!(matches!(got.ending, Some(Ending::Miss)));
    })
    .await;
}

#[tokio::test]
async fn a_chunked_body_is_read_correctly() {
    bounded(async {
        let body: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let b = body.clone();
        let server = canned::serve(move |_, _, _| Reply::Bytes(canned::chunked(&b, 4000))).await;
        let c = client();
        let got = c
            .get_validated(
                &Peer::from_addr(&server.addr),
                block(),
                body.len() as u64,
                |_| true,
            )
            .await;
        assert_eq!(got.class, OutcomeClass::Ok, "{}", got.describe());
        assert_eq!(got.bytes().unwrap().as_ref(), &body[..]);
    })
    .await;
}

#[tokio::test]
async fn a_failing_validator_gives_an_invalid_outcome() {
    bounded(async {
        let server = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"corrupt!"))).await;
        let seen = Arc::new(AtomicUsize::new(0));
        let s = Arc::clone(&seen);
        let got = client()
            .get_validated(&Peer::from_addr(&server.addr), block(), 8, move |b| {
                s.fetch_add(b.len(), Ordering::SeqCst);
                false
            })
            .await;
        assert_eq!(
            seen.load(Ordering::SeqCst),
            8,
            "the validator saw the whole body"
        );
        assert_eq!(got.class, OutcomeClass::Invalid);
        assert_eq!(got.get, GetOutcome::Failed);
        assert!(matches!(
            got.ending,
            Some(Ending::Failed(ExchangeError::Validation))
        ));
    })
    .await;
}

#[tokio::test]
async fn two_sequential_gets_reuse_one_connection() {
    bounded(async {
        let server = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"block"))).await;
        let c = client();
        let peer = Peer::from_addr(&server.addr);
        let first = c.get(&peer, block()).await;
        let second = c.get(&peer, block()).await;
        assert_eq!(
            (first.class, second.class),
            (OutcomeClass::Ok, OutcomeClass::Ok)
        );
        assert!(!first.pooled && second.pooled);
        assert_eq!(
            server.stats.accepts(),
            1,
            "one connection carried both GETs"
        );
        assert_eq!(c.idle_connections(), 1);
    })
    .await;
}

#[tokio::test]
async fn open_connections_per_peer_never_exceed_the_cap() {
    bounded(async {
        // The server answers nothing until 4 connections have been open at once; a
        // client without the cap would open one connection per concurrent GET (12).
        let server = canned::serve(|_, _, _| Reply::AfterOpen(4, canned::ok(b"block"))).await;
        let c = client();
        assert_eq!(c.options().max_conns_per_peer, 4);
        let peer = Peer::from_addr(&server.addr);
        let gets: Vec<_> = (0..12)
            .map(|_| {
                let (c, p) = (c.clone(), peer.clone());
                tokio::spawn(async move { c.get(&p, block()).await.class })
            })
            .collect();
        for g in gets {
            assert_eq!(g.await.unwrap(), OutcomeClass::Ok);
        }
        println!(
            "12 concurrent GETs: {} accepts, at most {} open at once",
            server.stats.accepts(),
            server.stats.max_open()
        );
        assert_eq!(server.stats.max_open(), 4);
    })
    .await;
}

#[tokio::test]
async fn a_closed_port_is_routed_around_after_one_attempt() {
    bounded(async {
        let addr = canned::closed_port().await;
        let c = client();
        let peer = Peer::from_addr(&addr);
        let first = c.get(&peer, block()).await;
        assert!(matches!(
            first.ending,
            Some(Ending::Failed(ExchangeError::DialFailed))
        ));
        let now = c.now();
        assert!(
            !c.with_peers(|p| p.eligible(now, &peer.id)),
            "breaker/cooldown route around it"
        );
        let t = std::time::Instant::now();
        for _ in 0..200 {
            let got = c.get(&peer, block()).await;
            assert_eq!(got.local, Some(Local::BreakerRejected));
        }
        let took = t.elapsed();
        println!("200 GETs to a closed port after one failed attempt: {took:?}");
        assert!(took < StdDuration::from_secs(1), "{took:?}");
    })
    .await;
}

#[tokio::test]
async fn a_blackholed_peer_is_cut_at_the_dial_deadline() {
    bounded(async {
        let (addr, _queued, _listener) = canned::blackhole();
        let c = client_with(|o| o.exchange = deadlines(300, 10_000, 30_000));
        let t = std::time::Instant::now();
        let got = c.get(&Peer::from_addr(&addr), block()).await;
        let took = t.elapsed();
        println!("blackholed dial ended after {took:?}: {}", got.describe());
        assert!(
            matches!(
                got.ending,
                Some(Ending::Failed(ExchangeError::DialTimeout(_)))
            ),
            "{}",
            got.describe()
        );
        // The first SYN retransmission alone is 1 s on Linux.
        assert!(
            took >= StdDuration::from_millis(290) && took < StdDuration::from_millis(900),
            "{took:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_silent_peer_is_cut_at_the_response_header_deadline() {
    bounded(async {
        let server = canned::serve(|_, _, _| Reply::BytesThenHold(Vec::new())).await;
        let c = client_with(|o| o.exchange = deadlines(1000, 300, 30_000));
        let t = std::time::Instant::now();
        let got = c.get(&Peer::from_addr(&server.addr), block()).await;
        let took = t.elapsed();
        assert!(
            matches!(
                got.ending,
                Some(Ending::Failed(ExchangeError::ResponseHeaderTimeout(_)))
            ),
            "{}",
            got.describe()
        );
        assert!(
            took >= StdDuration::from_millis(290) && took < StdDuration::from_secs(3),
            "{took:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_body_stalled_midway_is_cut_at_the_request_deadline() {
    bounded(async {
        let mut half = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".to_vec();
        half.extend_from_slice(&[7u8; 400]);
        let server = canned::serve(move |_, _, _| Reply::BytesThenHold(half.clone())).await;
        let c = client_with(|o| o.exchange = deadlines(1000, 300, 700));
        let t = std::time::Instant::now();
        let got = c.get(&Peer::from_addr(&server.addr), block()).await;
        let took = t.elapsed();
        assert!(
            matches!(
                got.ending,
                Some(Ending::Failed(ExchangeError::RequestTimeout(_)))
            ),
            "{}",
            got.describe()
        );
        assert!(
            took >= StdDuration::from_millis(690) && took < StdDuration::from_secs(3),
            "{took:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn an_oversized_body_is_refused_before_expected_plus_one_bytes_are_read() {
    bounded(async {
        // Content-Length above the expected length: refused at the head, although the
        // server then stalls (a client that waited for the body would hit the 10 s
        // request deadline instead).
        let server = canned::serve(|_, _, _| {
            let mut v = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n".to_vec();
            v.extend_from_slice(&[1u8; 100]);
            Reply::BytesThenHold(v)
        })
        .await;
        let c = client_with(|o| o.exchange = deadlines(1000, 10_000, 10_000));
        let got = c
            .get_validated(&Peer::from_addr(&server.addr), block(), 100, |_| true)
            .await;
        assert!(
            matches!(got.ending, Some(Ending::Failed(ExchangeError::Length(_)))),
            "{}",
            got.describe()
        );
        assert!(got.elapsed < StdDuration::from_secs(5), "{:?}", got.elapsed);
        // Chunked: exactly expected + 1 bytes, then a stall: refused once the extra byte
        // arrives, without waiting for the rest.
        let server = canned::serve(|_, _, _| {
            let mut v = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n".to_vec();
            v.extend_from_slice(&[1u8; 101]);
            Reply::BytesThenHold(v)
        })
        .await;
        let got = c
            .get_validated(&Peer::from_addr(&server.addr), block(), 100, |_| true)
            .await;
        assert!(
            matches!(
                got.ending,
                Some(Ending::Failed(ExchangeError::Length(
                    LengthError::Long { .. }
                )))
            ),
            "{}",
            got.describe()
        );
        assert!(got.elapsed < StdDuration::from_secs(5), "{:?}", got.elapsed);
    })
    .await;
}

#[tokio::test]
async fn a_refusal_cools_the_peer_down_and_it_is_reached_again_after() {
    bounded(async {
        let server = canned::serve(|_, r, _| match r {
            0 => Reply::BytesThenClose(canned::refusal(1)),
            _ => Reply::Bytes(canned::ok(b"block")),
        })
        .await;
        let c = client();
        let peer = Peer::from_addr(&server.addr);
        let first = c.get(&peer, block()).await;
        assert_eq!(first.class, OutcomeClass::Busy);
        assert_eq!(
            first.get,
            GetOutcome::Refused {
                retry_after: Some(Duration::from_secs(1))
            }
        );
        let now = c.now();
        let left = c
            .with_peers(|p| p.refused_for(now, &peer.id))
            .expect("in cooldown");
        assert!(!c.with_peers(|p| p.eligible(now, &peer.id)));
        let until = c.options().clock.to_std(now + left).unwrap();
        tokio::time::sleep_until(until.into()).await;
        let now = c.now();
        assert!(
            c.with_peers(|p| p.eligible(now, &peer.id)),
            "the cooldown is over"
        );
        let second = c.get(&peer, block()).await;
        assert_eq!(second.class, OutcomeClass::Ok, "{}", second.describe());
        assert_eq!(server.stats.accepts(), 2);
    })
    .await;
}

#[tokio::test]
async fn a_pooled_connection_retired_by_the_server_is_retried_once_fresh() {
    bounded(async {
        // Every connection answers one request keep-alive, then the server closes it:
        // the second GET takes the pooled (now closed) connection and must retry fresh.
        let server = canned::serve(|_, _, _| Reply::BytesThenClose(canned::ok(b"block"))).await;
        let c = client();
        let peer = Peer::from_addr(&server.addr);
        let first = c.get(&peer, block()).await;
        assert_eq!(first.class, OutcomeClass::Ok);
        assert_eq!(c.idle_connections(), 1, "a keep-alive answer is pooled");
        // Wait until the server's close has happened (its task ended the connection).
        while server.stats.open.load(Ordering::SeqCst) > 0 {
            tokio::task::yield_now().await;
        }
        let second = c.get(&peer, block()).await;
        assert_eq!(second.class, OutcomeClass::Ok, "{}", second.describe());
        assert!(second.retried_fresh);
        assert_eq!(server.stats.accepts(), 2);
        let now = c.now();
        assert!(
            c.with_peers(|p| p.eligible(now, &peer.id)),
            "nothing charged to the peer"
        );
    })
    .await;
}

#[tokio::test]
async fn a_dropped_get_settles_its_ticket() {
    bounded(async {
        let server = canned::serve(|_, _, _| Reply::BytesThenHold(Vec::new())).await;
        let c = client();
        let peer = Peer::from_addr(&server.addr);
        let get = {
            let (c, p) = (c.clone(), peer.clone());
            tokio::spawn(async move { c.get(&p, block()).await })
        };
        while server.stats.heads().is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(c.with_peers(|p| p.in_flight(&peer.id)), 1);
        get.abort();
        let _ = get.await;
        assert_eq!(
            c.with_peers(|p| p.in_flight(&peer.id)),
            0,
            "abandoned on drop"
        );
    })
    .await;
}

#[tokio::test]
async fn python_http_server_serves_a_block_byte_exact() {
    bounded(async {
        if std::process::Command::new("python3")
            .arg("--version")
            .output()
            .is_err()
        {
            println!("skipped: python3 is not on PATH");
            return;
        }
        let dir = std::env::temp_dir().join(format!("peerblock-py-{}", std::process::id()));
        let path = canned::block_path(0x5c, 2);
        let file = dir.join(path.to_string().trim_start_matches('/'));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let body: Vec<u8> = (0..70_000u32).map(|i| (i * 13 + 5) as u8).collect();
        std::fs::write(&file, &body).unwrap();
        let script = dir.join("serve.py");
        std::fs::write(
            &script,
            "import http.server, functools, sys\n\
             h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])\n\
             s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)\n\
             print(s.server_address[1], flush=True)\n\
             s.serve_forever()\n",
        )
        .unwrap();
        let mut child = tokio::process::Command::new("python3")
            .arg(&script)
            .arg(&dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let port: u16 = lines
            .next_line()
            .await
            .unwrap()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let c = client();
        let got = c
            .get_validated(
                &Peer::from_addr(format!("127.0.0.1:{port}")),
                BlockRequest::new(path),
                body.len() as u64,
                |_| true,
            )
            .await;
        assert_eq!(got.class, OutcomeClass::Ok, "{}", got.describe());
        assert_eq!(got.bytes().unwrap().as_ref(), &body[..]);
        let _ = child.kill().await;
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

#[test]
fn a_zero_connection_cap_is_refused_naming_the_option() {
    let mut o = options();
    o.max_conns_per_peer = 0;
    let err = Client::new(o).unwrap_err();
    assert!(err.to_string().contains("max_conns_per_peer"), "{err}");
    let mut o = options();
    o.pool.idle_per_peer = peerblock_tokio::client::MAX_IDLE_PER_PEER + 1;
    let err = Client::new(o).unwrap_err();
    assert!(err.to_string().contains("pool.idle_per_peer"), "{err}");
}

#[test]
fn a_header_that_cannot_be_sent_is_our_error_and_charges_nobody() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(bounded(async {
        let server = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"x"))).await;
        let c = client();
        let peer = Peer::from_addr(&server.addr);
        let mut bad = block();
        bad.origin = Some("http://origin\r\nX-Evil: 1");
        let got = c.get(&peer, bad).await;
        assert_eq!(got.local, Some(Local::Unsendable));
        assert_eq!(server.stats.accepts(), 0, "nothing was sent");
        let now = c.now();
        assert!(c.with_peers(|p| p.eligible(now, &peer.id)));
        assert_eq!(c.with_peers(|p| p.in_flight(&peer.id)), 0);
    }));
}

#[test]
fn request_futures_can_be_spawned() {
    fn assert_send<T: Send>(_: &T) {}
    let c = client();
    let peer = Peer::from_addr("peer.test:1");
    assert_send(&c.get(&peer, block()));
    assert_send(&c.get_validated(&peer, block(), 1, |_| true));
    assert_send(&c.fetch_roster("peer.test:1", None, None));
}

#[tokio::test]
async fn a_request_waiting_for_a_connection_slot_gives_up_at_its_deadline() {
    bounded(async {
        // One connection per peer, held by a GET the server never answers: a second GET
        // waits for the slot until its own deadline, and nothing is charged to the peer.
        let server = canned::serve(|_, _, _| Reply::BytesThenHold(Vec::new())).await;
        let c = client_with(|o| o.max_conns_per_peer = 1);
        let peer = Peer::from_addr(&server.addr);
        let first = {
            let (c, p) = (c.clone(), peer.clone());
            tokio::spawn(async move { c.get(&p, block()).await })
        };
        while server.stats.heads().is_empty() {
            tokio::task::yield_now().await;
        }
        let opts = peerblock_tokio::client::GetOptions {
            deadline: Some(c.now() + Duration::from_millis(200)),
            ..Default::default()
        };
        let second = c.fetch_block(&peer, block(), opts).await;
        assert_eq!(second.local, Some(Local::NoConnectionSlot));
        assert!(
            second.elapsed >= StdDuration::from_millis(190)
                && second.elapsed < StdDuration::from_secs(3),
            "{:?}",
            second.elapsed
        );
        assert_eq!(server.stats.accepts(), 1, "the second GET never dialed");
        assert_eq!(
            c.with_peers(|p| p.in_flight(&peer.id)),
            1,
            "only the first is in flight"
        );
        first.abort();
    })
    .await;
}
