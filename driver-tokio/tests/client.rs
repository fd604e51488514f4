//! The tokio client against canned loopback servers (`peerblock_testkit::conformance::canned`,
//! on threads of their own): one rule per test.
//!
//! Only what the driver conformance suite (run on this driver by `conformance.rs`) does
//! not check: retrying a retired pooled connection fresh, a dropped request future
//! settling its ticket, waiting for a connection slot until the deadline, a header that
//! cannot be sent, interop with Python's `http.server`, and the client's option and type
//! checks. Every other client rule is a conformance rule.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use peerblock_core::client::BlockRequest;
use peerblock_core::read::PeerView;
use peerblock_core::time::{Clock, Duration};
use peerblock_testkit::conformance::canned::{self, Canned, Reply, Stats};
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

fn block() -> BlockRequest<'static> {
    BlockRequest::new(canned::block_path(0xab, 3))
}

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(BOUND, f).await.expect("test bound")
}

/// Waits until `condition` holds of `server`'s counters (woken on every accept, close and
/// head; on a blocking thread, so the runtime's tasks go on), failing after [`BOUND`].
async fn until(
    server: &Canned,
    what: &str,
    condition: impl FnMut(&Stats) -> bool + Send + 'static,
) {
    let stats = Arc::clone(&server.stats);
    let met = tokio::task::spawn_blocking(move || stats.wait_until(condition, BOUND))
        .await
        .expect("wait task");
    assert!(met, "{what}");
}

#[tokio::test]
async fn a_pooled_connection_retired_by_the_server_is_retried_once_fresh() {
    bounded(async {
        // Every connection answers one request keep-alive, then the server closes it:
        // the second GET takes the pooled (now closed) connection and must retry fresh.
        let server = canned::serve(|_, _, _| Reply::BytesThenClose(canned::ok(b"block")));
        let c = client();
        let peer = Peer::from_addr(&server.addr);
        let first = c.get(&peer, block()).await;
        assert_eq!(first.class, OutcomeClass::Ok);
        assert_eq!(c.idle_connections(), 1, "a keep-alive answer is pooled");
        // Wait until the server's close has happened (its task ended the connection).
        until(&server, "the server closed its connection", |s| {
            s.open() == 0
        })
        .await;
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
        let server = canned::serve(|_, _, _| Reply::BytesThenHold(Vec::new()));
        let c = client();
        let peer = Peer::from_addr(&server.addr);
        let get = {
            let (c, p) = (c.clone(), peer.clone());
            tokio::spawn(async move { c.get(&p, block()).await })
        };
        until(&server, "the server read the request", |s| {
            !s.heads().is_empty()
        })
        .await;
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
        let server = canned::serve(|_, _, _| Reply::Bytes(canned::ok(b"x")));
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
        let server = canned::serve(|_, _, _| Reply::BytesThenHold(Vec::new()));
        let c = client_with(|o| o.max_conns_per_peer = 1);
        let peer = Peer::from_addr(&server.addr);
        let first = {
            let (c, p) = (c.clone(), peer.clone());
            tokio::spawn(async move { c.get(&p, block()).await })
        };
        until(&server, "the server read the request", |s| {
            !s.heads().is_empty()
        })
        .await;
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
