//! What an orchestrator needs from `peerblock-node serve` (docs/deploy.md): the address a
//! node advertises (`--advertise`), seeds given as a DNS name that stands for several
//! nodes (a headless Service), and the probes on the admin address (`/healthz`,
//! `/readyz`). Real processes on loopback (127.0.0.0/8), every wait bounded; names are
//! resolved by a fixed table, never by outside DNS.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::procs::{run, Node, TempDir};
use peerblock_core::roster::{Membership, RefreshConfig, RosterMember};
use peerblock_core::time::Clock;
use peerblock_node::metrics::Metrics;
use peerblock_node::node::{expand_seeds, SeedResolver};
use peerblock_testkit::conformance::canned::{self, Reply};
use peerblock_tokio::client::{Client, ClientOptions};
use peerblock_tokio::roster::RosterService;

/// One HTTP/1.1 GET to `addr` (a loopback address), bounded: the status code and body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let addr: SocketAddr = addr.parse().expect("an IP:PORT");
    assert!(addr.ip().is_loopback(), "tests talk to loopback only");
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    // Read the head, then exactly Content-Length bytes (a peer port keeps connections
    // alive whatever `Connection: close` says; the admin port closes).
    loop {
        let n = s.read(&mut buf).expect("read an answer");
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            });
            if len.is_some_and(|len| body.len() >= len) {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// Asks `addr`'s `path` until `want` holds of the answer, for at most `bound`; returns the
/// last answer and whether `want` held.
fn poll_until(
    addr: &str,
    path: &str,
    bound: Duration,
    want: impl Fn(u16, &str) -> bool,
) -> (u16, String, bool) {
    let deadline = Instant::now() + bound;
    let mut tick = Duration::from_millis(20);
    loop {
        let (status, body) = http_get(addr, path);
        if want(status, &body) {
            return (status, body, true);
        }
        if Instant::now() >= deadline {
            return (status, body, false);
        }
        std::thread::sleep(tick);
        tick = (tick * 2).min(Duration::from_millis(500));
    }
}

/// A roster configuration whose rounds come every second and whose dial failures are
/// forgotten after one, so a seed that comes up late is asked soon.
fn fast_roster_config(dir: &TempDir) -> String {
    let path = dir.join("node.toml");
    std::fs::write(
        &path,
        "[roster]\ninterval = \"1s\"\njitter = \"100ms\"\n[client]\nfailed_dial_cooldown = \"1s\"\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// A loopback port free now on `ip` (bound, then released: the test binds it again soon).
fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn an_unspecified_listen_address_without_advertise_is_refused_at_start() {
    let dir = TempDir::new("adv-refused");
    let store = dir.join("store");
    let out = run(
        &[
            "serve",
            "--listen",
            "0.0.0.0:7070",
            "--store",
            store.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--listen: 0.0.0.0:7070") && stderr.contains("--advertise HOST:PORT"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing was served");
}

#[test]
fn an_unspecified_advertise_address_is_refused_at_start() {
    let dir = TempDir::new("adv-unspecified");
    let store = dir.join("store");
    let out = run(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--advertise",
            "0.0.0.0:7070",
            "--store",
            store.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--advertise: \"0.0.0.0:7070\" is an unspecified address"),
        "{stderr}"
    );
}

#[test]
fn the_advertised_address_is_the_one_peers_are_told() {
    let dir = TempDir::new("adv-roster");
    // Listens on one loopback address, says it is reachable at another (as a pod listens
    // on 0.0.0.0 and is reached at its pod IP).
    let node = Node::start(&dir.join("store"), &[], &["--advertise", "127.0.0.9:7171"]);
    let (status, body) = http_get(&node.addr, "/peer/v1/roster");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"addr\":\"127.0.0.9:7171\""),
        "the roster names the advertised address: {body}"
    );
    assert!(
        !body.contains(&format!("\"addr\":\"{}\"", node.addr)),
        "{body}"
    );
    assert!(node.terminate());
}

/// A fixed name table: what a test's "DNS" says.
struct Table(Vec<(&'static str, Vec<SocketAddr>)>);

impl SeedResolver for Table {
    fn resolve(&self, seed: &str) -> std::io::Result<Vec<SocketAddr>> {
        self.0
            .iter()
            .find(|(name, _)| *name == seed)
            .map(|(_, addrs)| addrs.clone())
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))
    }
}

#[test]
fn a_seed_name_counts_once_per_address_it_resolves_to() {
    let table = Table(vec![(
        "peerblock-seeds.test:7070",
        vec![
            "127.0.0.2:7070".parse().unwrap(),
            "127.0.0.3:7070".parse().unwrap(),
            "127.0.0.2:7070".parse().unwrap(),
        ],
    )]);
    let seeds = [
        "127.0.0.4:7070".to_owned(),
        "peerblock-seeds.test:7070".to_owned(),
        "gone.test:7070".to_owned(),
    ];
    let expanded = expand_seeds(&seeds, &table);
    assert_eq!(
        expanded.seeds,
        [
            "127.0.0.4:7070",
            "127.0.0.2:7070",
            "127.0.0.3:7070",
            // Names stay: resolved again whenever the refresh asks them.
            "peerblock-seeds.test:7070",
            "gone.test:7070",
        ]
    );
    assert_eq!(
        expanded.addrs,
        ["127.0.0.4:7070", "127.0.0.2:7070", "127.0.0.3:7070"]
    );
    assert!(expanded.unresolved, "gone.test resolved to nothing");
}

/// A canned roster server naming itself (`id` at `at`), as a node that knows nobody does.
fn roster_server(id: &'static str, at: &'static str) -> canned::Canned {
    canned::serve(move |_, _, _| {
        let body =
            format!(r#"{{"epoch":"0","members":[{{"id":"{id}","addr":"{at}","weight":1.0}}]}}"#);
        Reply::Bytes(
            format!(
                "HTTP/1.1 200 OK\r\nX-DART-Node: {id}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    })
}

#[tokio::test]
async fn every_address_behind_a_seed_name_is_asked_and_learned() {
    tokio::time::timeout(Duration::from_secs(30), async {
        // Two nodes behind one name, neither knowing the other: only asking both teaches
        // a newcomer both.
        let b = roster_server("nb", "127.0.0.22:7070");
        let c = roster_server("nc", "127.0.0.23:7070");
        let b_addr: SocketAddr = b.addr.parse().unwrap();
        // The name is `localhost` (so the refresh's own dial of the name, resolved by the
        // system, stays on loopback: /etc/hosts) with B's port; the test's table says it
        // stands for B and C.
        let name = format!("localhost:{}", b_addr.port());
        let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
        let table = Table(vec![(
            leaked,
            vec![b.addr.parse().unwrap(), c.addr.parse().unwrap()],
        )]);
        let expanded = expand_seeds(std::slice::from_ref(&name), &table);
        assert_eq!(expanded.seeds.len(), 3, "{:?}", expanded.seeds);
        let metrics = Metrics::new();
        let client = Client::new(ClientOptions::new(
            Clock::new(std::time::Instant::now()),
            metrics,
        ))
        .unwrap();
        let me = RosterMember {
            id: "na".into(),
            addr: "127.0.0.21:7070".into(),
            weight: 1.0,
            record: Default::default(),
        };
        let membership = Arc::new(Mutex::new(Membership::new(me, 0, 64).unwrap()));
        let config = RefreshConfig {
            seeds: expanded.seeds,
            // Every seed in the first round; no second round within the test.
            fanout: 3,
            interval: peerblock_core::time::Duration::from_secs(60),
            jitter: peerblock_core::time::Duration::from_secs(1),
            ..RefreshConfig::default()
        };
        let service = RosterService::start(client, Arc::clone(&membership), config, 7).unwrap();
        let mut answers = service.answers();
        answers
            .wait_for(|n| *n >= 3)
            .await
            .expect("service running");
        {
            let m = membership.lock().unwrap();
            assert!(m.addr("nb").is_some(), "B learned");
            assert!(m.addr("nc").is_some(), "C learned");
        }
        service.shutdown().await;
    })
    .await
    .expect("test bound");
}

#[test]
fn healthz_answers_ok_while_the_node_runs() {
    let dir = TempDir::new("healthz");
    let node = Node::start(&dir.join("store"), &[], &["--metrics", "127.0.0.1:0"]);
    let admin = node.metrics_addr();
    let (status, body) = http_get(&admin, "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    assert!(node.terminate());
}

#[test]
fn readyz_waits_for_a_roster_from_the_seeds() {
    let dir = TempDir::new("readyz-seeds");
    let config = fast_roster_config(&dir);
    let seed = format!("127.0.0.31:{}", free_port("127.0.0.31"));
    let a = Node::start(
        &dir.join("a"),
        &[&seed],
        &["--metrics", "127.0.0.1:0", "--config", &config],
    );
    let admin = a.metrics_addr();
    // Nothing listens at the seed: the node serves but has learned nobody.
    let (status, body) = http_get(&admin, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no member learned yet"), "{body}");
    // The seed comes up: A's next round learns it, and A becomes ready.
    let b = Node::start_on(&seed, &dir.join("b"), &[], &[]);
    let (status, body, ok) =
        poll_until(&admin, "/readyz", Duration::from_secs(30), |s, _| s == 200);
    assert!(ok, "never ready: {status} {body}");
    assert_eq!(body, "ready\n");
    assert!(a.terminate());
    assert!(b.terminate());
}

#[test]
fn a_node_whose_seeds_are_only_itself_is_ready_alone() {
    let dir = TempDir::new("readyz-alone");
    // The first pod of a DaemonSet: the headless Service names only itself.
    let own = format!("127.0.0.32:{}", free_port("127.0.0.32"));
    let node = Node::start_on(
        &own,
        &dir.join("store"),
        &[&own],
        &["--metrics", "127.0.0.1:0"],
    );
    let admin = node.metrics_addr();
    let (status, body) = http_get(&admin, "/readyz");
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    assert!(node.terminate());
}

#[test]
fn readyz_fails_when_the_store_cannot_be_read() {
    let dir = TempDir::new("readyz-store");
    let store = dir.join("store");
    let node = Node::start(&store, &[], &["--metrics", "127.0.0.1:0"]);
    let admin = node.metrics_addr();
    let (status, body) = http_get(&admin, "/readyz");
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    std::fs::remove_dir_all(&store).unwrap();
    let (status, body) = http_get(&admin, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains(&format!("store {}: cannot be read", store.display())),
        "{body}"
    );
    assert!(node.terminate());
}

#[test]
fn the_store_file_system_is_measured_for_the_store_near_full_alert() {
    let dir = TempDir::new("store-fs");
    let node = Node::start(&dir.join("store"), &[], &["--metrics", "127.0.0.1:0"]);
    let admin = node.metrics_addr();
    let (status, text) = http_get(&admin, "/metrics");
    assert_eq!(status, 200);
    let value = |name: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    let size = value("peerblock_store_filesystem_size_bytes");
    let avail = value("peerblock_store_filesystem_avail_bytes");
    assert!(size > 0 && (0..=size).contains(&avail), "{size} {avail}");
    assert!(node.terminate());
}

#[test]
fn a_new_node_exports_its_refusal_series_at_zero() {
    // A refusal counter that first appears at a high value has no rate in Prometheus:
    // the series the refusal alert divides are scraped at 0 from the start.
    let dir = TempDir::new("primed");
    let node = Node::start(&dir.join("store"), &[], &["--metrics", "127.0.0.1:0"]);
    let admin = node.metrics_addr();
    let (status, text) = http_get(&admin, "/metrics");
    assert_eq!(status, 200);
    for line in [
        "peerblock_requests_total{status=\"503\"} 0",
        "peerblock_requests_total{status=\"200\"} 0",
        "peerblock_connections_refused_total{reason=\"sessions\"} 0",
        "peerblock_connections_refused_total{reason=\"source-sessions\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in {text}");
    }
    assert!(node.terminate());
}
