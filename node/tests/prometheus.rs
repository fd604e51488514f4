//! deploy/'s dashboard and alert rules against a real Prometheus (Debian's `prometheus`,
//! installed by `.ci/run`): it scrapes three `peerblock-node serve` processes and an
//! in-process reader, all on loopback, while the test fetches a file and saturates one
//! node. No typo in a query can hide: every dashboard query, every recorded series and
//! every metric name the rules or the dashboard mention must come back with a series,
//! and the refusal alert must fire for the saturated node. Bounded in time (each wait
//! has a deadline) and in requests; every process is stopped when the test ends. Skipped,
//! with the reason printed, where `prometheus` is not installed.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::procs::{fetch, import, random_file, Node, TempDir};
use peerblock_core::read::{LookupPeer, ReadConfig, ReadOutcome};
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};
use peerblock_node::metrics::{serve_metrics, Metrics};
use peerblock_tokio::client::{Client, ClientOptions, Peer};
use peerblock_tokio::reader::{BlockSpec, Candidate, FixedDiscovery, Reader};

/// Longest wait for anything Prometheus is asked to show (scrapes and rule evaluations
/// come every second).
const QUERY_BOUND: Duration = Duration::from_secs(60);

/// Most requests the test sends to saturate a node.
const MAX_REFUSED_REQUESTS: usize = 2_000;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .join("deploy")
}

/// A free loopback port now (bound and released: the caller binds it again at once).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.0 GET to a loopback `addr`: the status and the body (the server closes).
fn get(addr: &str, target: &str) -> std::io::Result<(u16, String)> {
    let sock: SocketAddr = addr.parse().expect("IP:PORT");
    assert!(sock.ip().is_loopback(), "loopback only");
    let mut s = TcpStream::connect_timeout(&sock, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

/// Percent-encodes a query parameter's value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server on loopback, killed (and its data removed) when dropped.
struct Prometheus {
    child: Child,
    addr: String,
    _dir: TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts `prometheus` scraping `nodes` (job `peerblock`) and `readers` (job
    /// `peerblock-reader`) every second with the shipped rules, made fast for a test:
    /// every `for:` is `0s` and rules are evaluated every second. `None` when Prometheus
    /// is not installed.
    fn start(nodes: &[String], readers: &[String]) -> Option<Prometheus> {
        let dir = TempDir::new("prometheus");
        let rules = std::fs::read_to_string(deploy().join("prometheus/peerblock-rules.yml"))
            .unwrap()
            .lines()
            .map(|l| {
                let t = l.trim_start();
                if t.starts_with("for: ") || t.starts_with("interval: ") {
                    let indent = &l[..l.len() - t.len()];
                    let key = t.split(':').next().unwrap();
                    let value = if key == "for" { "0s" } else { "1s" };
                    format!("{indent}{key}: {value}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect::<String>();
        std::fs::write(dir.join("rules.yml"), rules).unwrap();
        let list = |v: &[String]| {
            v.iter()
                .map(|a| format!("\"{a}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nrule_files: [\"{}\"]\nscrape_configs:\n  - job_name: peerblock\n    static_configs:\n      - targets: [{}]\n  - job_name: peerblock-reader\n    static_configs:\n      - targets: [{}]\n",
            dir.join("rules.yml").display(),
            list(nodes),
            list(readers)
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let child = match Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--storage.tsdb.retention.time=1h")
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
        {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!(
                    "skipping: `prometheus` is not installed (.ci/run installs Debian's prometheus)"
                );
                return None;
            }
            Err(e) => panic!("cannot start prometheus: {e}"),
        };
        let p = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        let deadline = Instant::now() + QUERY_BOUND;
        let mut tick = Duration::from_millis(50);
        while !matches!(get(&p.addr, "/-/ready"), Ok((200, _))) {
            assert!(Instant::now() < deadline, "prometheus never became ready");
            std::thread::sleep(tick);
            tick = (tick * 2).min(Duration::from_millis(500));
        }
        Some(p)
    }

    /// The result of an instant query (`data.result`), or the error Prometheus gave.
    fn query(&self, promql: &str) -> Result<Vec<serde_json::Value>, String> {
        let (status, body) = get(
            &self.addr,
            &format!("/api/v1/query?query={}", encode(promql)),
        )
        .map_err(|e| e.to_string())?;
        let v: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("{status}: {e}: {body}"))?;
        if v["status"] != "success" {
            return Err(format!("{promql}: {body}"));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// Asks `promql` until it returns at least one series, for at most [`QUERY_BOUND`].
    fn wait_for_series(&self, promql: &str) -> Result<Vec<serde_json::Value>, String> {
        let deadline = Instant::now() + QUERY_BOUND;
        let mut tick = Duration::from_millis(100);
        loop {
            let result = self.query(promql)?;
            if !result.is_empty() {
                return Ok(result);
            }
            if Instant::now() >= deadline {
                return Err(format!("{promql}: no series within {QUERY_BOUND:?}"));
            }
            std::thread::sleep(tick);
            tick = (tick * 2).min(Duration::from_secs(1));
        }
    }

    /// Whether alert `name` is firing for `instance` (`/api/v1/alerts`).
    fn firing(&self, name: &str, instance: &str) -> bool {
        let Ok((_, body)) = get(&self.addr, "/api/v1/alerts") else {
            return false;
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["alerts"].as_array().is_some_and(|alerts| {
            alerts.iter().any(|a| {
                a["labels"]["alertname"] == name
                    && a["labels"]["instance"] == instance
                    && a["state"] == "firing"
            })
        })
    }
}

/// Three nodes (A holds a file; B, C seeded with A), each with its admin address, and an
/// in-process reader exporting its metrics.
struct Cluster {
    dir: TempDir,
    nodes: Vec<Node>,
    admins: Vec<String>,
    chunk: String,
    reader_admin: String,
    reader_stop: Option<tokio::sync::oneshot::Sender<()>>,
    runtime: tokio::runtime::Runtime,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = TempDir::new("prom-cluster");
        let fast = dir.join("fast.toml");
        std::fs::write(&fast, "[roster]\ninterval = \"1s\"\njitter = \"100ms\"\n").unwrap();
        let file = dir.join("file.bin");
        random_file(&file, 4 * 65_536, 24);
        let a_store = dir.join("a");
        let chunk = import(&file, &a_store, 65_536);
        let admin = ["--metrics", "127.0.0.1:0", "--config"];
        let start = |store: &str, seeds: &[&str], config: &Path| {
            let mut args = admin.to_vec();
            args.push(config.to_str().unwrap());
            Node::start(&dir.join(store), seeds, &args)
        };
        let a = start("a", &[], &fast);
        let a_admin = a.metrics_addr();
        let b = start("b", &[&a.addr], &fast);
        let b_admin = b.metrics_addr();
        let c = start("c", &[&a.addr], &fast);
        let c_admin = c.metrics_addr();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let reader_metrics = Metrics::new();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let reader_admin = listener.local_addr().unwrap().to_string();
        let (reader_stop, stopped) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(serve_metrics(listener, reader_metrics.clone(), async {
            let _ = stopped.await;
        }));
        let cluster = Cluster {
            admins: vec![a_admin, b_admin, c_admin],
            nodes: vec![a, b, c],
            chunk,
            reader_admin,
            reader_stop: Some(reader_stop),
            runtime,
            dir,
        };
        cluster.read_through_reader(reader_metrics);
        cluster
    }

    /// The file, fetched by `peerblock-node fetch` from the cluster.
    fn fetch_file(&self) {
        let out = fetch(&self.chunk, &self.nodes[1].addr, &self.dir.join("out"), &[]);
        assert!(
            out.status.success(),
            "fetch: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Block 1, read by an in-process reader (the driver's read engine) whose metrics
    /// Prometheus scrapes as a reader: read outcomes and GET latency come from readers.
    fn read_through_reader(&self, metrics: Metrics) {
        let chunk = ChunkKey::parse_hex(self.chunk.as_bytes()).unwrap();
        let nodes: Vec<String> = self.nodes.iter().map(|n| n.addr.clone()).collect();
        let got = self.runtime.block_on(async move {
            let client = Client::new(ClientOptions::new(
                Clock::new(std::time::Instant::now()),
                metrics,
            ))
            .unwrap();
            let discovery = FixedDiscovery(
                nodes
                    .iter()
                    .map(|a| {
                        let p = Peer::from_addr(a);
                        Candidate {
                            peer: LookupPeer::new(p.id),
                            addr: p.addr,
                        }
                    })
                    .collect(),
            );
            let reader =
                Reader::new(client, Arc::new(discovery), ReadConfig::default(), 5).unwrap();
            let spec = BlockSpec {
                key: peerblock_tokio::manifest::block_key(&chunk, 1),
                path: BlockPath {
                    key: chunk,
                    index: 1,
                },
                expected: Some(65_536),
                validator: None,
                origin: None,
            };
            tokio::time::timeout(Duration::from_secs(30), reader.read(spec))
                .await
                .expect("the read ends within 30 s")
        });
        assert!(
            matches!(got.outcome, ReadOutcome::Found(_)),
            "{:?}",
            got.outcome
        );
    }

    /// Fills C's per-source session quota (4, the default) from a source of the test's
    /// own, 127.0.0.99, with idle connections, then sends requests to C from that source
    /// on new connections, each answered 503 + Retry-After (`source-sessions`), until
    /// `until` says stop (asked after every 50) or [`MAX_REFUSED_REQUESTS`] were sent.
    /// Other sources (the nodes, the fetch) are served as before. Returns how many were
    /// refused.
    fn saturate_c(&self, until: impl Fn() -> bool) -> usize {
        let c: SocketAddr = self.nodes[2].addr.parse().unwrap();
        let dial = || -> TcpStream {
            let sock =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            sock.bind(&SocketAddr::from(([127, 0, 0, 99], 0)).into())
                .unwrap();
            sock.connect_timeout(&c.into(), Duration::from_secs(5))
                .unwrap();
            sock.into()
        };
        let hold: Vec<TcpStream> = (0..4).map(|_| dial()).collect();
        let mut refused = 0;
        let path = format!("/peer/v1/block/{}/1", self.chunk);
        for sent in 1..=MAX_REFUSED_REQUESTS {
            let mut s = dial();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: {c}\r\n\r\n").unwrap();
            let mut head = [0u8; 12];
            if s.read_exact(&mut head).is_ok() && &head[9..12] == b"503" {
                refused += 1;
            }
            drop(s);
            if sent % 50 == 0 && until() {
                break;
            }
        }
        drop(hold);
        refused
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(stop) = self.reader_stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The PromQL of every panel of the dashboard.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(deploy().join("grafana/peerblock.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().clone())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect()
}

/// The text of every `expr:` of a rules file (one-line and `|` blocks), annotations and
/// comments left out.
fn expressions(rules: &str) -> String {
    let mut out = String::new();
    let mut block: Option<usize> = None;
    for l in rules.lines() {
        let indent = l.len() - l.trim_start().len();
        if let Some(at) = block {
            if indent > at && !l.trim().is_empty() {
                out.push_str(l.trim());
                out.push('\n');
                continue;
            }
            block = None;
        }
        if let Some(e) = l.trim().strip_prefix("expr:") {
            out.push_str(e.trim_start_matches([' ', '|']));
            out.push('\n');
            block = Some(indent);
        }
    }
    out
}

/// `(record names, alert expressions)` of the shipped rules file, and the text of all
/// its expressions.
fn rules() -> (Vec<String>, Vec<String>, String) {
    let text = std::fs::read_to_string(deploy().join("prometheus/peerblock-rules.yml")).unwrap();
    let records = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record: "))
        .map(str::to_owned)
        .collect();
    let mut alerts = Vec::new();
    let mut in_alert = false;
    for l in text.lines() {
        let t = l.trim();
        if t.starts_with("- alert: ") {
            in_alert = true;
        } else if in_alert {
            if let Some(e) = t.strip_prefix("expr: ") {
                alerts.push(e.to_owned());
                in_alert = false;
            }
        }
    }
    (records, alerts, expressions(&text))
}

/// Every raw metric name (`peerblock_...`, not a recorded `a:b:c` name) in `text`.
fn metric_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| t.starts_with("peerblock_") && !t.contains(':'))
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_dashboard_query_and_alert_expression_returns_a_series_from_a_real_prometheus() {
    let cluster = Cluster::start();
    let mut nodes = cluster.admins.clone();
    nodes.sort();
    let Some(prom) = Prometheus::start(&nodes, std::slice::from_ref(&cluster.reader_admin)) else {
        return;
    };
    cluster.fetch_file();
    // A few refusals, for the refusals-by-reason panel.
    let refused = cluster.saturate_c(|| true);
    assert!(refused > 0, "C refused nothing");
    let (records, alerts, rules_exprs) = rules();
    assert_eq!(records.len(), 6, "{records:?}");
    assert_eq!(alerts.len(), 5, "{alerts:?}");
    let queries = dashboard_queries();
    assert!(queries.len() >= 14, "{queries:?}");
    let mut names = metric_names(&rules_exprs);
    names.extend(metric_names(&queries.join("\n")));
    names.sort();
    names.dedup();
    let mut failures = Vec::new();
    for name in &names {
        if let Err(e) = prom.wait_for_series(&format!("{{__name__=\"{name}\"}}")) {
            failures.push(format!("metric {name}: {e}"));
        }
    }
    for record in &records {
        if let Err(e) = prom.wait_for_series(record) {
            failures.push(format!("recorded {record}: {e}"));
        }
    }
    for q in &queries {
        if let Err(e) = prom.wait_for_series(q) {
            failures.push(format!("dashboard: {e}"));
        }
    }
    // An alert's expression returns a series only while it holds: it must be valid
    // PromQL over the recorded series, checked above.
    for a in &alerts {
        if let Err(e) = prom.query(a) {
            failures.push(format!("alert: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_refusal_alert_fires_for_a_saturated_node_in_a_real_prometheus() {
    let cluster = Cluster::start();
    let Some(prom) =
        Prometheus::start(&cluster.admins, std::slice::from_ref(&cluster.reader_admin))
    else {
        return;
    };
    cluster.fetch_file();
    let c_admin = cluster.admins[2].clone();
    // Nothing refused yet: no node is alerted on.
    prom.wait_for_series("instance:peerblock_refused_ratio:rate5m")
        .expect("the refusal ratio is recorded");
    assert!(!prom.firing("PeerblockNodeRefusingMost", &c_admin));
    let deadline = Instant::now() + QUERY_BOUND;
    let fired = || prom.firing("PeerblockNodeRefusingMost", &c_admin) || Instant::now() >= deadline;
    let refused = cluster.saturate_c(fired);
    let mut tick = Duration::from_millis(100);
    while !prom.firing("PeerblockNodeRefusingMost", &c_admin) && Instant::now() < deadline {
        std::thread::sleep(tick);
        tick = (tick * 2).min(Duration::from_secs(1));
    }
    assert!(
        prom.firing("PeerblockNodeRefusingMost", &c_admin),
        "PeerblockNodeRefusingMost never fired for {c_admin} after {refused} refusals: {:?} {:?} {:?}",
        prom.query("instance:peerblock_refused_ratio:rate5m"),
        prom.query("peerblock_requests_total"),
        prom.query("up"),
    );
    for other in &cluster.admins[..2] {
        assert!(
            !prom.firing("PeerblockNodeRefusingMost", other),
            "{other} refused nothing"
        );
    }
}
