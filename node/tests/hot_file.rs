//! A hot file across real nodes (issue 22): readers name the origin, holders that miss
//! relay through the block's parent, and each block leaves the origin about once.
//! Through the `peerblock-node` binary on loopback; every wait bounded.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use common::procs::{fetch, import, metric_value, random_file, run, Node, TempDir, FETCH_BOUND};

/// `fetch` naming `origin` (`HOST:PORT`) as the file's origin.
fn fetch_from(chunk: &str, seed: &str, out: &Path, origin: &str) -> std::process::Output {
    fetch(chunk, seed, out, &["--origin", &format!("http://{origin}")])
}

/// The report line of `addr` in a fetch's stdout: `ADDR N bytes ...` → N.
fn bytes_from(report: &str, addr: &str) -> u64 {
    report
        .lines()
        .find(|l| l.starts_with(&format!("{addr} ")))
        .and_then(|l| l.split(' ').nth(1))
        .map_or(0, |n| n.parse().expect("a byte count"))
}

/// Rule: with `--origin`, a file that only the origin holds is read through the cluster:
/// holders that miss relay through the block's parent, so every block leaves the origin
/// about once (here at most 1.25× the file), the cluster serves the reader, and a second
/// reader of the now-hot file costs the origin nothing.
#[test]
fn a_file_only_the_origin_holds_leaves_it_about_once_and_a_second_reader_costs_it_nothing() {
    hot_file_through_the_cluster(&[]);
}

/// The same rule with the cluster on the mio driver (its relay asks the block's parent
/// too, and the origin when the parent cannot serve).
#[test]
fn on_the_mio_driver_a_file_only_the_origin_holds_leaves_it_about_once() {
    hot_file_through_the_cluster(&["--driver", "mio", "--threads", "2"]);
}

fn hot_file_through_the_cluster(driver: &[&str]) {
    let dir = TempDir::new("hot");
    let origin_store = TempDir::new("hot-origin");
    let stores = [
        TempDir::new("hot-a"),
        TempDir::new("hot-b"),
        TempDir::new("hot-c"),
    ];
    let file = dir.join("input.bin");
    let size = 32 * 64 * 1024;
    let data = random_file(&file, size, 22);
    let chunk = import(&file, &origin_store.0, 64 * 1024);
    // The origin is not in the cluster's roster: only `X-DART-Origin` names it.
    let origin = Node::start(&origin_store.0, &[], &["--metrics", "127.0.0.1:0"]);
    let origin_metrics = origin.metrics_addr();
    // Roster rounds every second, so that every node places blocks over the same three
    // members before the reads start (a node's parent is computed over its own roster).
    let config = dir.join("node.toml");
    std::fs::write(&config, "[roster]\ninterval = \"1s\"\njitter = \"100ms\"\n").unwrap();
    let mut flags = vec![
        "--config",
        config.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
    ];
    flags.extend_from_slice(driver);
    let a = Node::start(&stores[0].0, &[], &flags);
    let a_metrics = a.metrics_addr();
    let b = Node::start(&stores[1].0, &[&a.addr], &flags);
    let b_metrics = b.metrics_addr();
    let c = Node::start(&stores[2].0, &[&a.addr], &flags);
    let c_metrics = c.metrics_addr();
    let cluster_metrics = [a_metrics, b_metrics, c_metrics];
    for n in [&a, &b, &c] {
        n.wait_members(3);
    }
    let served = || metric_value(&origin_metrics, "peerblock_served_bytes_total");
    let first = dir.join("first.bin");
    let fetched = fetch_from(&chunk, &b.addr, &first, &origin.addr);
    let stderr = String::from_utf8_lossy(&fetched.stderr);
    assert!(fetched.status.success(), "{stderr}");
    assert_eq!(std::fs::read(&first).unwrap(), data);
    let egress = served();
    assert!(
        egress >= size as u64 && egress * 4 <= size as u64 * 5,
        "the origin served {egress} bytes for a {size}-byte file"
    );
    let report = String::from_utf8_lossy(&fetched.stdout);
    let from_cluster: u64 = [&a, &b, &c]
        .iter()
        .map(|n| bytes_from(&report, &n.addr))
        .sum();
    assert!(
        from_cluster >= size as u64,
        "the cluster served {from_cluster} bytes: {report}"
    );
    // The relays count what they asked of the origin, and kept what they relayed in
    // their relay caches (not as imported content).
    let relayed: u64 = cluster_metrics
        .iter()
        .map(|m| metric_value(m, "peerblock_relay_origin_bytes_total"))
        .sum();
    assert!(
        relayed > 0 && relayed <= egress,
        "relays counted {relayed} origin bytes of {egress}"
    );
    let cached: u64 = cluster_metrics
        .iter()
        .map(|m| metric_value(m, "peerblock_relay_cache_bytes"))
        .sum();
    assert!(cached >= size as u64, "relay caches hold {cached} bytes");
    for store in &stores {
        assert!(
            !store.0.join(&chunk).exists(),
            "a relayed chunk became imported content in {}",
            store.0.display()
        );
    }
    // A second reader, through another seed: the origin serves nothing more.
    let second = dir.join("second.bin");
    let fetched = fetch_from(&chunk, &c.addr, &second, &origin.addr);
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert_eq!(std::fs::read(&second).unwrap(), data);
    assert_eq!(
        served(),
        egress,
        "the second reader reached the origin: {}\n{}",
        String::from_utf8_lossy(&fetched.stdout),
        String::from_utf8_lossy(&fetched.stderr)
    );
    let hits: u64 = cluster_metrics
        .iter()
        .map(|m| metric_value(m, "peerblock_relay_cache_hits_total"))
        .sum();
    assert!(hits > 0, "the second reader was served from no relay cache");
}

/// Rule: the relay cache keeps its bound: a node whose `[store] cache_bytes` is a quarter
/// of a relayed file evicts relayed blocks (least recently used first) to stay within it,
/// and never evicts or replaces its imported content.
#[test]
fn a_relay_cache_at_its_bound_evicts_relayed_blocks_and_never_imported_ones() {
    let dir = TempDir::new("cache-bound");
    let origin_store = TempDir::new("cache-bound-origin");
    let store = TempDir::new("cache-bound-a");
    let hot = dir.join("hot.bin");
    let size = 32 * 64 * 1024;
    let hot_data = random_file(&hot, size, 41);
    let hot_chunk = import(&hot, &origin_store.0, 64 * 1024);
    // The node's own file, imported: 16 blocks it must keep whatever it relays.
    let own = dir.join("own.bin");
    let own_data = random_file(&own, 16 * 64 * 1024, 42);
    let own_chunk = import(&own, &store.0, 64 * 1024);
    let origin = Node::start(&origin_store.0, &[], &[]);
    let bound = size / 4;
    let config = dir.join("node.toml");
    std::fs::write(&config, format!("[store]\ncache_bytes = {bound}\n")).unwrap();
    let a = Node::start(
        &store.0,
        &[],
        &[
            "--config",
            config.to_str().unwrap(),
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    let out = dir.join("hot-out.bin");
    let fetched = fetch_from(&hot_chunk, &a.addr, &out, &origin.addr);
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert_eq!(std::fs::read(&out).unwrap(), hot_data);
    let metrics = a.metrics_addr();
    let cached = metric_value(&metrics, "peerblock_relay_cache_bytes");
    assert!(
        cached > 0 && cached <= bound as u64,
        "the relay cache holds {cached} bytes, bound {bound}"
    );
    assert!(metric_value(&metrics, "peerblock_relay_cache_evictions_total") > 0);
    let on_disk: u64 = walk(&store.0.join(".relay-cache"));
    assert!(on_disk <= bound as u64, "{on_disk} bytes in .relay-cache");
    // Imported content is whole and still served.
    let own_out = dir.join("own-out.bin");
    let fetched = fetch(&own_chunk, &a.addr, &own_out, &[]);
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert_eq!(std::fs::read(&own_out).unwrap(), own_data);
    assert!(
        !store.0.join(&hot_chunk).exists(),
        "relayed blocks were imported"
    );
}

/// Bytes of the files under `dir`, recursively.
fn walk(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let t = e.file_type().unwrap();
                    if t.is_dir() {
                        walk(&e.path())
                    } else {
                        e.metadata().map_or(0, |m| m.len())
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Rule: without `--origin` a file only the origin holds is `absent` from the cluster (no
/// holder relays a request that names no origin): the origin is what makes it readable.
#[test]
fn without_an_origin_a_file_the_cluster_does_not_hold_is_absent() {
    let dir = TempDir::new("hot-none");
    let origin_store = TempDir::new("hot-none-origin");
    let store = TempDir::new("hot-none-a");
    let file = dir.join("input.bin");
    random_file(&file, 100_000, 23);
    let chunk = import(&file, &origin_store.0, 64 * 1024);
    let _origin = Node::start(&origin_store.0, &[], &[]);
    let a = Node::start(&store.0, &[], &[]);
    let out = dir.join("out.bin");
    let fetched = run(
        &[
            "fetch",
            &chunk,
            "--seed",
            &a.addr,
            "-o",
            out.to_str().unwrap(),
        ],
        FETCH_BOUND,
    );
    let stderr = String::from_utf8_lossy(&fetched.stderr);
    assert_eq!(fetched.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("absent"), "{stderr}");
}

/// Rule: an origin that is not `http://HOST:PORT` is refused at once (exit 2, naming the
/// flag).
#[test]
fn an_origin_that_is_not_an_http_host_port_url_is_refused() {
    let dir = TempDir::new("hot-bad-origin");
    let out = dir.join("out.bin");
    for bad in ["ftp://127.0.0.1:1", "http://127.0.0.1", "127.0.0.1:0"] {
        let fetched = run(
            &[
                "fetch",
                &"ab".repeat(32),
                "--seed",
                "127.0.0.1:9",
                "-o",
                out.to_str().unwrap(),
                "--origin",
                bad,
            ],
            FETCH_BOUND,
        );
        let stderr = String::from_utf8_lossy(&fetched.stderr);
        assert_eq!(fetched.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--origin"), "{stderr}");
    }
}

/// `GET /peer/v1/block/CHUNK/INDEX` naming `origin`, from source address `from`, to
/// `addr`; the status code.
fn relayed_get(from: std::net::IpAddr, addr: &str, chunk: &str, index: u64, origin: &str) -> u16 {
    let target: std::net::SocketAddr = addr.parse().expect("a socket address");
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    socket
        .bind(&std::net::SocketAddr::new(from, 0).into())
        .expect("bind the source address");
    socket
        .connect_timeout(&target.into(), Duration::from_secs(10))
        .expect("connect to the node");
    let mut s: TcpStream = socket.into();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /peer/v1/block/{chunk}/{index} HTTP/1.1\r\nHost: t\r\nX-DART-Origin: http://{origin}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the response");
    std::str::from_utf8(&raw[9..12])
        .expect("a status")
        .parse()
        .expect("a status code")
}

/// Rule: concurrent misses for one block at one node share one upstream fetch
/// (single-flight): 64 requests from 64 sources, while the origin's slow upload keeps the
/// first fetch in flight, are all answered 200 and the origin serves the block once.
#[test]
fn concurrent_relayed_misses_for_one_block_share_one_upstream_fetch() {
    relayed_misses_share_one_fetch(&[]);
}

/// The same rule with the relay on the mio driver.
#[test]
fn on_the_mio_driver_concurrent_relayed_misses_for_one_block_share_one_upstream_fetch() {
    relayed_misses_share_one_fetch(&["--driver", "mio", "--threads", "2"]);
}

fn relayed_misses_share_one_fetch(driver: &[&str]) {
    let dir = TempDir::new("flight");
    let origin_store = TempDir::new("flight-origin");
    let relay_store = TempDir::new("flight-relay");
    let file = dir.join("input.bin");
    random_file(&file, 256 * 1024, 31);
    let chunk = import(&file, &origin_store.0, 256 * 1024);
    // 256 KiB at 128 KiB/s: the one upstream fetch takes about 2 s.
    let config = dir.join("origin.toml");
    std::fs::write(
        &config,
        "[listener]\nupload_bytes_per_second = 131072\nsend_timeout = \"60s\"\n",
    )
    .unwrap();
    let origin = Node::start(
        &origin_store.0,
        &[],
        &[
            "--metrics",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let origin_metrics = origin.metrics_addr();
    let relay_config = dir.join("relay.toml");
    std::fs::write(&relay_config, "[listener]\nsource_timeout = \"30s\"\n").unwrap();
    let mut flags = vec!["--config", relay_config.to_str().unwrap()];
    flags.extend_from_slice(driver);
    let relay = Node::start(&relay_store.0, &[], &flags);
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..64u8)
            .map(|i| {
                let from = std::net::IpAddr::from([127, 0, 1, 10 + i]);
                let (addr, chunk, origin) = (&relay.addr, &chunk, &origin.addr);
                s.spawn(move || relayed_get(from, addr, chunk, 1, origin))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    // The block once, and once the chunk's manifest, which the relay fetched to check the
    // block before caching it.
    let served = metric_value(&origin_metrics, "peerblock_requests_total{status=\"200\"}");
    assert_eq!(served, 2, "the origin served {served} blocks");
}

/// Rule: `fetch --bind IP` makes every connection from that local address (what peers'
/// per-source limits see: readers on one host with several addresses count as several
/// sources).
#[test]
fn fetch_bind_dials_from_the_given_local_address() {
    let dir = TempDir::new("bind");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a listener");
    let seed = listener.local_addr().unwrap().to_string();
    let accepted = std::thread::spawn(move || {
        let (conn, from) = listener.accept().expect("the fetch connects");
        drop(conn);
        from.ip()
    });
    let out = dir.join("out.bin");
    let fetched = run(
        &[
            "fetch",
            &"ab".repeat(32),
            "--seed",
            &seed,
            "-o",
            out.to_str().unwrap(),
            "--bind",
            "127.0.0.77",
        ],
        FETCH_BOUND,
    );
    assert!(
        !fetched.status.success(),
        "nothing to fetch from a closed seed"
    );
    assert_eq!(
        accepted.join().unwrap(),
        std::net::IpAddr::from([127, 0, 0, 77])
    );
}
