//! `swarm` for `file.placement = "origin"`: the scenario's origin is **nginx** from Debian,
//! serving the file as one object; the readers name it in every GET (`fetch URL`'s
//! `X-DART-Origin`), the node processes relay their misses through the block's parent
//! or to nginx and cache what they relayed, as `peerblock-node serve` does for anyone.
//!
//! | scenario | for real |
//! |---|---|
//! | `[origin]` | nginx on `127.3.0.1` (one process, no master), the file at the scenario's size × scale written from the swarm's block bytes; block *i* is the byte range read with `Range` |
//! | `origin.upload_mbps` | as root with `unshare` and `tc`: the swarm re-runs itself in a network namespace of its own (loopback only) where an htb class carries every packet from nginx's port at the scaled rate: one limit shared by all its connections. Otherwise a note, and nginx runs unshaped |
//! | `origin.reader_fallback` | the reader's own origin fetch (`Reader::with_origin`, a Range GET to nginx) |
//! | `[relay]` | the nodes' `relay = true`, `max_hop`, `[store] cache_bytes` (scaled); parents by the nodes' own rosters (every node seeded with node 0, 1 s roster rounds; the run starts when every node knows every member) |
//! | origin egress | nginx's access log (`$bytes_sent`: headers and body of every answer), by the time each answer ended |
//! | relay counters | each node's `/metrics` (`peerblock_relay_*`), scraped at the end; the nodes do not count refusals at the single-flight bounds, parent fallbacks or hop declines apart, so those read 0 |
//!
//! The block keys are the object's (`manifest::block_key` of the key `fetch URL` derives
//! from nginx's size and ETag), so the readers' lookups and the nodes' parents agree on
//! placement, as they do in a real cluster.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use peerblock_common::manifest;
use peerblock_common::object::ObjectIdentity;
use sim::metrics::RelayMetrics;
use sim::model::content::Content;
use tokio::process::{Child, Command};

use crate::error::NodeError;

/// Set in the environment of a swarm re-run inside its own network namespace.
pub const NETNS_ENV: &str = "PEERBLOCK_SWARM_NETNS";

/// The origin's address: outside the nodes' `127.1/16` and the readers' `127.2/16`.
pub const ORIGIN_IP: Ipv4Addr = Ipv4Addr::new(127, 3, 0, 1);

/// nginx's port inside the swarm's own network namespace (nothing else binds there).
const NETNS_PORT: u16 = 8080;

/// How long nginx may take to answer its first request.
const ORIGIN_START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one `/metrics` scrape of a node may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// The path nginx serves the file at.
const OBJECT_PATH: &str = "/file.bin";

/// `nginx` on `PATH` or in `/usr/sbin` (Debian's), if installed.
pub fn find_nginx() -> Option<PathBuf> {
    find_tool("nginx")
}

fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Whether the swarm can shape the origin: root, `unshare`, `ip` and `tc`.
pub fn can_shape() -> bool {
    rustix::process::geteuid().is_root()
        && ["unshare", "tc", "ip"]
            .iter()
            .all(|t| find_tool(t).is_some())
}

/// Whether this process is the swarm's re-run inside its own network namespace.
pub fn in_namespace() -> bool {
    std::env::var_os(NETNS_ENV).is_some_and(|v| v == "1")
}

/// Runs this same command again inside a network namespace of its own (`unshare -n`),
/// where the origin's upload can be shaped without touching the host's loopback; returns
/// its exit code.
pub async fn rerun_in_namespace() -> Result<i32, NodeError> {
    let exe = std::env::current_exe()
        .map_err(|e| NodeError::Failed(format!("cannot find the peerblock-node binary: {e}")))?;
    let unshare = find_tool("unshare").unwrap_or_else(|| "unshare".into());
    let status = Command::new(unshare)
        .arg("-n")
        .arg("--")
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(NETNS_ENV, "1")
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|e| NodeError::Failed(format!("cannot run unshare -n: {e}")))?;
    Ok(status.code().unwrap_or(1))
}

/// In the swarm's own namespace: loopback up, and every packet from the origin's `port`
/// through an htb class at `rate` bytes/s (rate = ceil: one limit for all the origin's
/// connections, as an uplink's); everything else through a class at 100 Gbit/s.
pub fn shape_origin(port: u16, rate: u64) -> Result<(), NodeError> {
    let run = |tool: &str, args: &[&str]| -> Result<(), NodeError> {
        let out = std::process::Command::new(find_tool(tool).unwrap_or_else(|| tool.into()))
            .args(args)
            .output()
            .map_err(|e| NodeError::Failed(format!("cannot run {tool}: {e}")))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(NodeError::Failed(format!(
                "{tool} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    };
    run("ip", &["link", "set", "lo", "up"])?;
    let bits = format!("{}bit", rate.saturating_mul(8));
    let burst = (rate / 50).max(256 * 1024).to_string();
    let port = port.to_string();
    run(
        "tc",
        &[
            "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "20", "r2q",
            "1000",
        ],
    )?;
    run(
        "tc",
        &[
            "class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", &bits,
            "ceil", &bits, "burst", &burst, "cburst", &burst,
        ],
    )?;
    run(
        "tc",
        &[
            "class", "add", "dev", "lo", "parent", "1:", "classid", "1:20", "htb", "rate",
            "100gbit", "ceil", "100gbit", "burst", "4m", "cburst", "4m",
        ],
    )?;
    run(
        "tc",
        &[
            "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "sport", &port, "0xffff", "flowid", "1:10",
        ],
    )
}

/// The port nginx listens on: 8080 in the swarm's own namespace, else one the kernel has
/// just handed out on [`ORIGIN_IP`].
pub fn origin_port() -> Result<u16, NodeError> {
    if in_namespace() {
        return Ok(NETNS_PORT);
    }
    let l = std::net::TcpListener::bind((ORIGIN_IP, 0))
        .map_err(|e| NodeError::Failed(format!("cannot bind {ORIGIN_IP}:0 for the origin: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| NodeError::Failed(format!("origin port: {e}")))
}

/// nginx serving the file: its process, its URL, its access log.
pub struct OriginServer {
    _child: Child,
    /// `http://127.3.0.1:PORT/file.bin`.
    pub url: String,
    /// The port it listens on.
    pub port: u16,
    access_log: PathBuf,
}

/// One answer in nginx's access log.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Served {
    /// When the answer ended, seconds since the Unix epoch.
    pub at: f64,
    /// Bytes sent: status line, headers and body.
    pub bytes: u64,
}

impl OriginServer {
    /// Writes `file` (the blocks in order) under `dir`, starts nginx on
    /// [`ORIGIN_IP`]`:port` and waits until it answers (at most 10 s).
    pub async fn start(
        nginx: &Path,
        dir: &Path,
        port: u16,
        file: &[u8],
    ) -> Result<OriginServer, NodeError> {
        let io = |what: &str, p: &Path, e: std::io::Error| {
            NodeError::Failed(format!("origin: {what} {}: {e}", p.display()))
        };
        let root = dir.join("www");
        std::fs::create_dir_all(dir.join("tmp")).map_err(|e| io("cannot create", dir, e))?;
        std::fs::create_dir_all(&root).map_err(|e| io("cannot create", &root, e))?;
        let object = root.join(OBJECT_PATH.trim_start_matches('/'));
        std::fs::write(&object, file).map_err(|e| io("cannot write", &object, e))?;
        let access_log = dir.join("access.log");
        let conf = dir.join("nginx.conf");
        let d = dir.display();
        let text = format!(
            "# written by peerblock-node swarm: the scenario's origin\n\
             master_process off;\n\
             daemon off;\n\
             pid {d}/nginx.pid;\n\
             error_log {d}/error.log;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n\
             \x20   log_format swarm '$msec $status $bytes_sent';\n\
             \x20   access_log {log} swarm;\n\
             \x20   client_body_temp_path {d}/tmp/body;\n\
             \x20   proxy_temp_path {d}/tmp/proxy;\n\
             \x20   fastcgi_temp_path {d}/tmp/fastcgi;\n\
             \x20   uwsgi_temp_path {d}/tmp/uwsgi;\n\
             \x20   scgi_temp_path {d}/tmp/scgi;\n\
             \x20   default_type application/octet-stream;\n\
             \x20   sendfile on;\n\
             \x20   keepalive_requests 100000;\n\
             \x20   server {{\n\
             \x20       listen {ORIGIN_IP}:{port};\n\
             \x20       root {root};\n\
             \x20   }}\n\
             }}\n",
            log = access_log.display(),
            root = root.display(),
        );
        std::fs::write(&conf, text).map_err(|e| io("cannot write", &conf, e))?;
        let mut child = Command::new(nginx)
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&conf)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| NodeError::Failed(format!("cannot start {}: {e}", nginx.display())))?;
        let addr = SocketAddr::from((ORIGIN_IP, port));
        let started = tokio::time::Instant::now();
        loop {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                break;
            }
            let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            if let Ok(Some(status)) = child.try_wait() {
                return Err(NodeError::Failed(format!(
                    "nginx exited ({status}) before answering on {addr}: {}",
                    log.trim()
                )));
            }
            if started.elapsed() > ORIGIN_START_TIMEOUT {
                return Err(NodeError::Failed(format!(
                    "nginx did not answer on {addr} within {ORIGIN_START_TIMEOUT:?}: {}",
                    log.trim()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(OriginServer {
            _child: child,
            url: format!("http://{addr}{OBJECT_PATH}"),
            port,
            access_log,
        })
    }

    /// Every answer nginx logged so far.
    pub fn served(&self) -> Result<Vec<Served>, NodeError> {
        let text = std::fs::read_to_string(&self.access_log).map_err(|e| {
            NodeError::Failed(format!(
                "origin: cannot read {}: {e}",
                self.access_log.display()
            ))
        })?;
        Ok(parse_access_log(&text))
    }
}

/// The `$msec $status $bytes_sent` lines of the swarm's nginx log; others are skipped.
pub fn parse_access_log(text: &str) -> Vec<Served> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let at = f.next()?.parse::<f64>().ok()?;
            let _status = f.next()?;
            let bytes = f.next()?.parse::<u64>().ok()?;
            Some(Served { at, bytes })
        })
        .collect()
}

/// `content` with the object's block keys (`manifest::block_key` of its chunk key and the
/// block's index) and each block's nodes re-ordered by XOR distance to them, nearest first:
/// the placement the readers' lookups and the nodes' parents both use.
pub fn object_content(content: &Content, identity: &ObjectIdentity) -> Content {
    let chunk = identity.key();
    let mut c = content.clone();
    let nodes = c.ids.len() as u32;
    for (b, key) in c.keys.iter_mut().enumerate() {
        *key = manifest::block_key(&chunk, b as u64);
        let mut order: Vec<u32> = (0..nodes).collect();
        order.sort_by_key(|&n| key.distance(&c.ids[n as usize]));
        order.truncate(sim::model::content::KEPT_PER_BLOCK);
        c.order[b] = order;
    }
    c
}

/// A node's `/metrics` (one GET through hyper's HTTP/1.1 client), each metric's samples
/// summed over its labels.
pub async fn scrape(addr: SocketAddr) -> Result<BTreeMap<String, f64>, NodeError> {
    use http_body_util::{BodyExt, Empty};
    let failed = |e: String| NodeError::Failed(format!("scraping {addr}/metrics: {e}"));
    let body = tokio::time::timeout(SCRAPE_TIMEOUT, async {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let request = hyper::Request::get("/metrics")
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::<hyper::body::Bytes>::new())
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("answered {}", response.status()));
        }
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok(body.to_bytes())
    })
    .await
    .map_err(|_| failed(format!("no answer within {SCRAPE_TIMEOUT:?}")))?
    .map_err(failed)?;
    Ok(parse_metrics(&String::from_utf8_lossy(&body)))
}

/// Prometheus text: each metric's samples summed over their labels.
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let name = name.split('{').next().unwrap_or(name).trim();
        *out.entry(name.to_owned()).or_insert(0.0) += value;
    }
    out
}

/// What the real run's origin and relays did, in the simulator's terms. Bytes are
/// nominal (divided by `scale`), as the simulator reports them.
pub struct RealRelay<'a> {
    /// The file's nominal size.
    pub file_bytes: u64,
    /// The run's scale.
    pub scale: f64,
    /// nginx's answers.
    pub served: &'a [Served],
    /// Each round's start, seconds since the Unix epoch.
    pub round_starts: &'a [f64],
    /// Each round's time from its start to its last download's end, ns.
    pub round_span_ns: Vec<u64>,
    /// Blocks the readers fetched from the origin themselves.
    pub reader_fetches: u64,
    /// The nodes' metrics, summed over the nodes.
    pub nodes: &'a BTreeMap<String, f64>,
}

impl RealRelay<'_> {
    /// The simulator's [`RelayMetrics`] for the run.
    pub fn metrics(&self) -> RelayMetrics {
        let nominal = |b: u64| (b as f64 / self.scale).round() as u64;
        let mut by_round = vec![0u64; self.round_starts.len()];
        for s in self.served {
            // Round r's window runs from its start to the next round's start (answers
            // before the first round, the probe's, go to the first).
            let r = self
                .round_starts
                .iter()
                .rposition(|&start| s.at >= start)
                .unwrap_or(0);
            if let Some(b) = by_round.get_mut(r) {
                *b += s.bytes;
            }
        }
        let m = |name: &str| self.nodes.get(name).copied().unwrap_or(0.0) as u64;
        let relays = m("peerblock_relay_misses_total");
        let joins = m("peerblock_relay_flight_joins_total");
        RelayMetrics {
            file_bytes: self.file_bytes,
            origin_bytes: nominal(self.served.iter().map(|s| s.bytes).sum()),
            origin_requests: self.served.len() as u64,
            origin_bytes_by_round: by_round.into_iter().map(nominal).collect(),
            round_span_ns: self.round_span_ns.clone(),
            reader_origin_fetches: self.reader_fetches,
            relays,
            flights_led: relays.saturating_sub(joins),
            flight_joins: joins,
            flights_full: 0,
            parent_fetches: m("peerblock_relay_parent_fetches_total"),
            parent_fallbacks: 0,
            hop_declines: 0,
            cache_hits: m("peerblock_relay_cache_hits_total"),
            cache_evictions: m("peerblock_relay_cache_evictions_total"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_access_log_gives_each_answers_time_and_bytes_and_skips_other_lines() {
        let log = "1700000000.125 206 1048832\nnot a line\n1700000001.500 200 300\n";
        assert_eq!(
            parse_access_log(log),
            vec![
                Served {
                    at: 1_700_000_000.125,
                    bytes: 1_048_832
                },
                Served {
                    at: 1_700_000_001.5,
                    bytes: 300
                },
            ]
        );
    }

    #[test]
    fn metrics_are_summed_over_labels_and_comments_skipped() {
        let text = "# HELP x y\n# TYPE a counter\na_total{k=\"1\"} 2\na_total{k=\"2\"} 3\nb 7.5\n";
        let m = parse_metrics(text);
        assert_eq!(m["a_total"], 5.0);
        assert_eq!(m["b"], 7.5);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn origin_bytes_go_to_the_round_whose_window_they_ended_in_at_nominal_size() {
        let served = [
            Served { at: 5.0, bytes: 10 }, // the probe, before round 0: round 0
            Served {
                at: 12.0,
                bytes: 100,
            }, // round 0
            Served {
                at: 20.0,
                bytes: 50,
            }, // round 1 starts at 20
            Served {
                at: 31.0,
                bytes: 40,
            }, // round 1
        ];
        let nodes: BTreeMap<String, f64> = [
            ("peerblock_relay_misses_total".to_owned(), 10.0),
            ("peerblock_relay_flight_joins_total".to_owned(), 4.0),
        ]
        .into_iter()
        .collect();
        let r = RealRelay {
            file_bytes: 1000,
            scale: 0.5,
            served: &served,
            round_starts: &[10.0, 20.0],
            round_span_ns: vec![1, 2],
            reader_fetches: 3,
            nodes: &nodes,
        }
        .metrics();
        assert_eq!(r.origin_bytes_by_round, vec![220, 180]);
        assert_eq!(r.origin_bytes, 400);
        assert_eq!(r.origin_requests, 4);
        assert_eq!((r.relays, r.flight_joins, r.flights_led), (10, 4, 6));
        assert_eq!(r.reader_origin_fetches, 3);
    }
}
