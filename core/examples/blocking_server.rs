//! A blocking `std::net` server over `peerblock-core` alone: a thread per connection, one
//! `Mutex<Admission>` per node, blocks from the integrator's own source. Shown whole in
//! docs/integrating.md, run by the conformance suite (testkit/tests/core_examples.rs).
//! `cargo run -p peerblock-core --example blocking_server -- 127.0.0.1:0 DIR`

use std::io::{self, ErrorKind, Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use peerblock_core::bytes::Bytes;
use peerblock_core::roster::Roster;
use peerblock_core::server::{
    Admission, AdmissionConfig, ServerConfig, ServerConnection, ServerEvent, SourceResult,
};
use peerblock_core::time::{Clock, Instant};
use peerblock_core::wire::BlockPath;

/// The integrator's block store: `Found`, `Miss`, `Corrupt` or `Failed` for a path.
pub type Source = dyn Fn(&BlockPath) -> SourceResult + Send + Sync;

/// What every connection thread of the node shares.
pub struct Node {
    config: Arc<ServerConfig>,
    admission: Mutex<Admission>,
    source: Box<Source>,
    clock: Clock,
    changed: Condvar, // notified after every accept and close
}

impl Node {
    /// Checks the configuration once, at start-up (rule 9): later calls cannot fail on it.
    pub fn new(cfg: ServerConfig, adm: AdmissionConfig, src: Box<Source>) -> io::Result<Arc<Node>> {
        cfg.validate().map_err(io::Error::other)?;
        let admission = Admission::new(adm).map_err(io::Error::other)?;
        Ok(Arc::new(Node {
            config: Arc::new(cfg),
            admission: Mutex::new(admission),
            source: src,
            clock: Clock::new(std::time::Instant::now()),
            changed: Condvar::new(),
        }))
    }

    fn admission(&self) -> MutexGuard<'_, Admission> {
        self.admission.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One clock per node, read at every call into core (rule 2).
    fn now(&self) -> Instant {
        self.clock.to_core(std::time::Instant::now())
    }

    /// Blocks until `done(&admission)` holds, checked after every accept and close;
    /// `false` if `timeout` passed first.
    pub fn wait_until(&self, mut done: impl FnMut(&Admission) -> bool, timeout: Duration) -> bool {
        let waited = (self.changed).wait_timeout_while(self.admission(), timeout, |a| !done(a));
        !waited.unwrap_or_else(PoisonError::into_inner).1.timed_out()
    }

    /// Accepts connections until accepting fails, each on a thread of its own.
    pub fn serve(self: &Arc<Self>, listener: TcpListener) -> io::Result<()> {
        loop {
            let (stream, peer) = listener.accept()?;
            // Admission at accept (rule 8): a refused connection still reads the request
            // head and answers 503, unless core's `max_refusals` are all taken.
            let (now, config) = (self.now(), Arc::clone(&self.config));
            let accepted = ServerConnection::accept(now, &mut self.admission(), peer.ip(), config);
            let machine = accepted.map_err(io::Error::other)?; // validated in `new`
            let mut conn = Conn {
                node: Arc::clone(self),
                machine,
            };
            self.changed.notify_all();
            if conn.machine.dropped_at_accept() {
                continue; // over the refusal bound: `conn` closes here, unanswered
            }
            std::thread::spawn(move || {
                if let Err(e) = conn.drive(stream) {
                    eprintln!("{peer}: {e}");
                }
            });
        }
    }
}

/// One connection's machine. Its `Drop` calls core's `close`, so every exit (finished, a
/// socket error, a panic) releases the session, request and refusal slots once (rule 4).
struct Conn {
    node: Arc<Node>,
    machine: ServerConnection,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.machine
            .close(self.node.now(), &mut self.node.admission());
        self.node.changed.notify_all();
    }
}

impl Conn {
    /// Drain after every input, then read until the next deadline, until finished.
    fn drive(&mut self, mut stream: TcpStream) -> io::Result<()> {
        let (node, m) = (&*self.node, &mut self.machine);
        stream.set_nodelay(true)?;
        // A blocking write cannot wait on the `SendProgress` timer: this stands in for it.
        stream.set_write_timeout(Some(node.config.send_timeout))?;
        loop {
            // Rule 1, in this order: admission, events, transmits; again after each ack.
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
                // Every byte, then the ack (rule 5); no `External` answers, so no file bytes.
                stream.write_all(&tx.head)?; // a failed write returns: `Drop` closes
                stream.write_all(&tx.body)?;
                m.handle_transmitted(node.now(), &mut node.admission());
                if tx.close.ends_connection() {
                    stream.shutdown(Shutdown::Write)?; // rule 6: Linger keeps reading
                }
            }
            if m.is_finished() {
                return Ok(());
            }
            // The next deadline is the read timeout; one already due fires now (rule 3).
            let (now, deadline) = (node.now(), m.poll_timeout());
            let timeout = deadline.and_then(|d| d.timeout_from(now)); // never zero
            if deadline.is_some() && timeout.is_none() {
                m.handle_timeout(now);
                continue;
            }
            // Answers are synchronous: never `None` here (rule 7), but a timer could help.
            let Some(buf) = m.read_buf() else {
                std::thread::sleep(timeout.unwrap_or(Duration::from_secs(1)));
                m.handle_timeout(node.now());
                continue;
            };
            stream.set_read_timeout(timeout)?;
            match stream.read(buf) {
                Ok(0) => m.handle_eof(node.now()), // EOF: requests already read are answered
                Ok(n) => _ = m.handle_read(node.now(), n), // all `n` are taken
                Err(e) => match e.kind() {
                    // The deadline passed: the time now, not the deadline (rule 3).
                    ErrorKind::WouldBlock | ErrorKind::TimedOut => m.handle_timeout(node.now()),
                    ErrorKind::Interrupted => {}
                    _ => return Err(e), // a reset: `Drop` closes the machine
                },
            }
        }
    }
}

/// Answers one event on the connection's thread (blocking lookups are fine here).
fn answer(node: &Node, m: &mut ServerConnection, event: ServerEvent) {
    let answered = match event {
        ServerEvent::Fetch { id, request } => {
            let result = (node.source)(&request.path);
            m.handle_source(node.now(), &mut node.admission(), id, result)
        }
        // Core adds this node to the empty roster (no membership table here).
        ServerEvent::Roster { id, .. } => m.handle_roster(node.now(), id, &Roster::empty()),
        ServerEvent::Rejected { status, error, .. } => {
            eprintln!("rejected {status}: {error}"); // the peer's fault: log, count, charge
            Ok(())
        }
        // `Relay` needs `ServerConfig::relay` (off); `SourceTimedOut` needs an answer that
        // comes later (ours are synchronous); a later core's events ask nothing of us.
        _ => Ok(()),
    };
    if let Err(e) = answered {
        eprintln!("answer dropped: {e}"); // our misuse, never the peer's fault
    }
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, dir] = &args[..] else {
        eprintln!("usage: blocking_server LISTEN-ADDR DIR");
        std::process::exit(2);
    };
    let (listener, dir) = (TcpListener::bind(listen.as_str())?, dir.clone());
    let addr = listener.local_addr()?;
    // The integrator's store; here a block is the file `DIR/<chunk-hex>/<index>`.
    let files = move |p: &BlockPath| match std::fs::read(format!("{dir}/{}/{}", p.key, p.index)) {
        Ok(bytes) => SourceResult::Found(Bytes::from(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => SourceResult::Miss,
        Err(_) => SourceResult::Failed,
    };
    let config = ServerConfig::new("blocking-server", addr.to_string());
    let node = Node::new(config, AdmissionConfig::default(), Box::new(files))?;
    println!("listening {addr}");
    node.serve(listener)
}
