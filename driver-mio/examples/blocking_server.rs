//! A blocking `std::net` peerblock server: one thread per connection, core's
//! `ServerConnection` per socket, one `Mutex<Admission>` per node, blocks from a
//! `FileStore`. docs/integrating.md ("A blocking server in one file") shows it whole and
//! says how it keeps each rule; tests/example_blocking_server.rs checks it.
//!
//! ```text
//! cargo run -p peerblock-mio --example blocking_server -- --listen 127.0.0.1:0 --store DIR
//! ```
//!
//! prints `listening ADDR`, then answers `GET /peer/v1/block/<chunk-hex>/<index>` from
//! `DIR/<chunk-hex>/<index>` until it is killed.

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use peerblock_common::store::{FileStore, DEFAULT_MAX_BLOCK_SIZE};
use peerblock_core::roster::Roster;
use peerblock_core::server::{
    Admission, AdmissionConfig, ServerConfig, ServerConnection, ServerEvent, SourceResult,
};
use peerblock_core::time::{Clock, Instant};

/// Most refused connections answered at once (each holds a thread for at most
/// `refusal_head_timeout + linger`, 4 s); over it a refused socket is closed at once.
const MAX_REFUSALS: usize = 64;

/// What every connection thread of the node shares.
struct Node {
    config: Arc<ServerConfig>,
    admission: Mutex<Admission>,
    store: FileStore,
    clock: Clock,
    refusals: AtomicUsize,
}

impl Node {
    fn admission(&self) -> MutexGuard<'_, Admission> {
        self.admission
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Time never goes backwards: one clock (one epoch) per node, read from the
    /// monotonic clock at every call into core.
    fn now(&self) -> Instant {
        self.clock.to_core(std::time::Instant::now())
    }
}

/// One connection's machine. Dropping it calls core's `close`, so every exit (finished,
/// socket error, panic) releases the session and request slots exactly once.
struct Conn {
    node: Arc<Node>,
    machine: ServerConnection,
    holds_refusal: bool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        let now = self.node.now();
        self.machine.close(now, &mut self.node.admission());
        if self.holds_refusal {
            self.node.refusals.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Serves `store` on `listener` within `admission`'s limits until accepting fails.
pub fn serve(
    listener: TcpListener,
    store: FileStore,
    admission: AdmissionConfig,
) -> io::Result<()> {
    let config = ServerConfig::new("blocking-server", listener.local_addr()?.to_string());
    // Configuration is checked at construction, once, before anything is accepted.
    config.validate().map_err(io::Error::other)?;
    let admission = Admission::new(admission).map_err(io::Error::other)?;
    let node = Arc::new(Node {
        config: Arc::new(config),
        admission: Mutex::new(admission),
        store,
        clock: Clock::new(std::time::Instant::now()),
        refusals: AtomicUsize::new(0),
    });
    for stream in listener.incoming() {
        let (stream, peer) = match stream.and_then(|s| s.peer_addr().map(|p| (s, p))) {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("accept: {e}");
                continue;
            }
        };
        // Admission at accept time. A refused connection still gets a machine: it reads
        // the first request head and answers it with the 503 (HTTP/1.1 answers, it
        // never speaks first).
        let accepted = ServerConnection::accept(
            node.now(),
            &mut node.admission(),
            peer.ip(),
            Arc::clone(&node.config),
        );
        let machine = accepted.map_err(io::Error::other)?; // validated above
        let refused = machine.refused().is_some();
        let mut conn = Conn {
            node: Arc::clone(&node),
            machine,
            holds_refusal: false,
        };
        if refused {
            if node.refusals.fetch_add(1, Ordering::SeqCst) >= MAX_REFUSALS {
                node.refusals.fetch_sub(1, Ordering::SeqCst);
                continue; // `conn` drops here: closed at once, without an answer
            }
            conn.holds_refusal = true;
        }
        std::thread::spawn(move || {
            if let Err(e) = drive(&mut conn, stream) {
                eprintln!("{peer}: {e}");
            }
        }); // `conn` drops when the thread ends, on every path
    }
    Ok(())
}

/// One connection: drain the machine, then read (or wait for its deadline), until it is
/// finished. Returns on a socket error; the caller's `Conn` then closes the machine.
fn drive(conn: &mut Conn, mut stream: TcpStream) -> io::Result<()> {
    let (node, m) = (&*conn.node, &mut conn.machine);
    stream.set_nodelay(true)?;
    // A blocking write cannot wait on the machine's SendProgress timer: the socket's
    // write timeout stands in for it (per write call, a little more lenient).
    stream.set_write_timeout(Some(node.config.send_timeout))?;
    loop {
        // Drain after every input: admission, events, transmits, until nothing is left
        // (acknowledging a transmit can begin the next pipelined request).
        loop {
            if m.needs_admission() {
                m.handle_admission(node.now(), &mut node.admission());
            }
            while let Some(event) = m.poll_event() {
                answer(node, m, event);
            }
            let Some(tx) = m.poll_transmit(node.now()) else {
                break;
            };
            // Every byte first: head, then body. This driver answers `Found`, never
            // `External`, so `tx.external` is `None`; a sendfile driver would send its
            // `external.len` file bytes here, before acknowledging.
            stream.write_all(&tx.head)?;
            stream.write_all(&tx.body)?;
            // Then acknowledge, in order (one transmit at a time here): this releases its
            // request slot and bytes.
            m.handle_transmitted(node.now(), &mut node.admission());
            // `Transmit::close`: AfterWrite has finished the machine; Linger keeps it
            // reading (and discarding) until EOF or its linger deadline. Both half-close.
            if tx.close.ends_connection() {
                stream.shutdown(Shutdown::Write)?;
            }
        }
        if m.is_finished() {
            return Ok(());
        }
        let now = node.now();
        let wait = m.poll_timeout().map(|d| d.wait_from(now));
        if wait == Some(Duration::ZERO) {
            m.handle_timeout(now); // due already (std refuses a zero read timeout)
            continue;
        }
        let Some(buf) = m.read_buf() else {
            // Back-pressure: take nothing now. Every request is answered and written
            // before this read, so the pipeline is empty and this does not happen here;
            // only a timer could change the machine's state.
            std::thread::sleep(wait.unwrap_or(Duration::from_secs(1)));
            m.handle_timeout(node.now());
            continue;
        };
        // The machine's next deadline is the socket's read timeout.
        stream.set_read_timeout(wait)?;
        match stream.read(buf) {
            Ok(0) => m.handle_eof(node.now()),
            Ok(n) => {
                m.handle_read(node.now(), n);
            }
            Err(e) => match e.kind() {
                // The deadline passed: pass the current time, not the deadline.
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => m.handle_timeout(node.now()),
                io::ErrorKind::Interrupted => {}
                _ => return Err(e), // a reset, say: `Conn`'s drop closes the machine
            },
        }
    }
}

/// Answers one event at once, on the connection's thread (blocking file I/O is fine here).
fn answer(node: &Node, m: &mut ServerConnection, event: ServerEvent) {
    let answered = match event {
        ServerEvent::Fetch { id, request } => {
            let result = node.store.get_blocking(&request.path); // Found, Miss or Failed
            m.handle_source(node.now(), &mut node.admission(), id, result)
        }
        // Only a node with `config.relay` relays; this one never gets a `Relay`.
        ServerEvent::Relay { id, .. } => {
            m.handle_source(node.now(), &mut node.admission(), id, SourceResult::Miss)
        }
        // No membership table: core adds this node to the empty roster.
        ServerEvent::Roster { id, .. } => m.handle_roster(node.now(), id, &Roster::empty()),
        ServerEvent::Rejected { status, error, .. } => {
            eprintln!("request rejected with {status}: {error}");
            Ok(())
        }
        // Answered `500` by core; nothing of ours is running (answers are synchronous).
        ServerEvent::SourceTimedOut { .. } => Ok(()),
        // An event a later core adds (`ServerEvent` is `#[non_exhaustive]`): nothing asked.
        _ => Ok(()),
    };
    if let Err(e) = answered {
        eprintln!("answer dropped: {e}"); // our misuse, never the peer's fault
    }
}

const USAGE: &str = "usage: blocking_server --listen ADDR --store DIR [--max-sessions N]";

fn parse(args: &[String]) -> Result<(SocketAddr, PathBuf, AdmissionConfig), String> {
    let (mut listen, mut store, mut admission) = (None, None, AdmissionConfig::default());
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => {
                listen = Some(
                    value
                        .parse()
                        .map_err(|e| format!("--listen {value}: {e}"))?,
                )
            }
            "--store" => store = Some(PathBuf::from(value)),
            "--max-sessions" => {
                let n: usize = value
                    .parse()
                    .map_err(|e| format!("--max-sessions {value}: {e}"))?;
                admission.max_sessions = n;
                admission.max_sessions_per_source = admission.max_sessions_per_source.min(n);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok((
        listen.ok_or("--listen is required")?,
        store.ok_or("--store is required")?,
        admission,
    ))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return;
    }
    let (listen, dir, admission) = parse(&args).unwrap_or_else(|e| {
        eprintln!("blocking_server: {e}\n{USAGE}");
        std::process::exit(2)
    });
    let listener = TcpListener::bind(listen).and_then(|l| l.local_addr().map(|a| (l, a)));
    let (listener, addr) = listener.unwrap_or_else(|e| {
        eprintln!("blocking_server: binding {listen}: {e}");
        std::process::exit(1)
    });
    println!("listening {addr}");
    if let Err(e) = serve(
        listener,
        FileStore::new(dir, DEFAULT_MAX_BLOCK_SIZE),
        admission,
    ) {
        eprintln!("blocking_server: {e}");
        std::process::exit(1);
    }
}
