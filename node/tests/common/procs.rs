//! Real `peerblock-node` processes for end-to-end tests: each is started on 127.0.0.1 port
//! 0, reports the address it bound on its first stdout line (`listening ADDR`), and is
//! killed when dropped. Every wait is bounded.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_peerblock-node");

/// Bound on a node's start-up (bind and first line).
pub const START_BOUND: Duration = Duration::from_secs(20);

/// A fresh, empty directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new directory whose name says which test made it.
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "peerblock-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    /// A path inside.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `peerblock-node serve`.
pub struct Node {
    /// The process.
    pub child: Child,
    /// The address it bound.
    pub addr: String,
    /// Its store.
    pub store: PathBuf,
    /// Lines of stdout after the first, as they come.
    pub lines: mpsc::Receiver<String>,
}

impl Node {
    /// Starts `serve` with `store`, `--seed` for each of `seeds` and `extra` arguments,
    /// listening (and dialing) on a loopback address of its own (127.0.0.2 onwards), so
    /// that per-source limits see each node, and the commands run from 127.0.0.1, as
    /// distinct sources, as they would be on separate hosts.
    pub fn start(store: &Path, seeds: &[&str], extra: &[&str]) -> Node {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let host = 2 + NEXT.fetch_add(1, Ordering::Relaxed) % 250;
        let listen = format!("127.0.0.{host}:0");
        Node::start_on(&listen, store, seeds, extra)
    }

    /// Starts `serve` as [`Node::start`] does, listening on `listen` (a loopback
    /// `IP:PORT`).
    pub fn start_on(listen: &str, store: &Path, seeds: &[&str], extra: &[&str]) -> Node {
        let mut cmd = Command::new(BIN);
        // No `--id`: the node's id is the one its key (created in the store) certifies, and
        // its record is signed, as a node runs by default.
        cmd.args(["serve", "--listen", listen, "--store"])
            .arg(store);
        for seed in seeds {
            cmd.args(["--seed", seed]);
        }
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn peerblock-node serve");
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, lines) = mpsc::channel();
        forward_lines(stdout, tx);
        let first = lines
            .recv_timeout(START_BOUND)
            .expect("peerblock-node serve printed no `listening ADDR` line in time");
        let addr = first
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("first line is not `listening ADDR`: {first:?}"))
            .trim()
            .to_owned();
        Node {
            child,
            addr,
            store: store.to_owned(),
            lines,
        }
    }

    /// Waits (bounded: 30 s) until the node prints `members N` with N >= `want`.
    pub fn wait_members(&self, want: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("node {} never knew {want} members", self.addr));
            if let Some(n) = line.strip_prefix("members ") {
                if n.trim().parse::<usize>().is_ok_and(|n| n >= want) {
                    return;
                }
            }
        }
    }

    /// The metrics endpoint's address, from the `metrics ADDR` line a node started with
    /// `--metrics` prints right after `listening` (call it first, before other waits).
    pub fn metrics_addr(&self) -> String {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(10))
            .expect("a `metrics ADDR` line");
        line.strip_prefix("metrics ")
            .unwrap_or_else(|| panic!("not a metrics line: {line:?}"))
            .trim()
            .to_owned()
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit; returns whether it
    /// exited successfully.
    pub fn terminate(mut self) -> bool {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        wait_bounded(&mut self.child, Duration::from_secs(20))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn forward_lines(stdout: ChildStdout, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

/// Waits for `child` at most `bound` (a thread blocks in `wait` and reports the status);
/// kills it past the bound. True if it exited 0.
pub fn wait_bounded(child: &mut Child, bound: Duration) -> bool {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let _ = tx.send(child.wait().map(|st| st.success()).unwrap_or(false));
        });
        match rx.recv_timeout(bound) {
            Ok(ok) => ok,
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                let _ = rx.recv();
                false
            }
        }
    })
}

/// Runs `peerblock-node ARGS`, bounded by `bound` (killed past it, and the test fails);
/// returns its output.
pub fn run(args: &[&str], bound: Duration) -> Output {
    let child = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn peerblock-node");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(bound) {
        Ok(out) => out.expect("collect peerblock-node output"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("peerblock-node {args:?} did not finish within {bound:?}");
        }
    }
}

/// Bound on one `fetch` of a small file (a few MiB on loopback; generous for a loaded
/// CI machine, and waits for refusals of 1 s each).
pub const FETCH_BOUND: Duration = Duration::from_secs(90);

/// `peerblock-node fetch CHUNK --seed SEED -o OUT EXTRA...`, bounded by [`FETCH_BOUND`].
pub fn fetch(chunk: &str, seed: &str, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "fetch",
        chunk,
        "--seed",
        seed,
        "-o",
        out.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    run(&args, FETCH_BOUND)
}

/// Writes `len` deterministic pseudo-random bytes (seeded) to `path`; returns them.
pub fn random_file(path: &Path, len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let mut f = std::fs::File::create(path).expect("create file");
    f.write_all(&data).expect("write file");
    data
}

/// `peerblock-node import FILE --store STORE --block-size N`; returns the chunk key.
pub fn import(file: &Path, store: &Path, block_size: usize) -> String {
    let out = run(
        &[
            "import",
            file.to_str().expect("utf-8 path"),
            "--store",
            store.to_str().expect("utf-8 path"),
            "--block-size",
            &block_size.to_string(),
        ],
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "import failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8 stdout")
        .trim()
        .to_owned()
}

/// The value of the metric `name` (a counter or gauge, labels included in `name`) at the
/// metrics endpoint `at`, 0 when the node does not list it.
pub fn metric_value(at: &str, name: &str) -> u64 {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(at).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read the metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
        .map_or(0, |v| v.parse::<f64>().expect("a number") as u64)
}
