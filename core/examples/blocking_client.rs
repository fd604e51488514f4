//! A blocking `std::net` client over `peerblock-core` alone: one GET per call, on a
//! fresh connection, settled in a shared `Peers` (breaker, cooldowns, loads), so a peer
//! that keeps failing is skipped without a dial. docs/integrating.md shows it whole; the
//! conformance suite runs it (testkit/tests/core_examples.rs).
//!
//! `cargo run -p peerblock-core --example blocking_client -- HOST:PORT CHUNK-HEX INDEX > out`
//! writes the block to stdout and the outcome to stderr; it exits 1 without the block.

use std::io::{self, ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard, PoisonError};

use peerblock_core::client::{
    BlockRequest, ClientConfig, ClientEvent, Exchange, ExchangeRequest, Finished, Link, Peers,
    PeersConfig,
};
use peerblock_core::placement::PeerId;
use peerblock_core::read::GetOutcome;
use peerblock_core::time::{Clock, Instant};
use peerblock_core::wire::{BlockPath, ChunkKey};

/// A body check: `true` accepts the body (`ClientEvent::Validate`).
pub type Validator<'a> = &'a dyn Fn(&[u8]) -> bool;

/// One client: its configuration, its peer tables and its clock.
pub struct Client {
    config: ClientConfig,
    peers: Mutex<Peers>,
    clock: Clock,
}

impl Client {
    /// Checks both configurations once, at start-up (rule 9). `clock` is the node's one
    /// clock (rule 2), shared with its server.
    pub fn new(config: ClientConfig, peers: PeersConfig, clock: Clock) -> Result<Client, String> {
        config.validate().map_err(|e| e.to_string())?;
        let peers = Mutex::new(Peers::new(peers).map_err(|e| e.to_string())?);
        Ok(Client {
            config,
            peers,
            clock,
        })
    }

    /// The peer tables, locked for one call at a time (never across socket I/O).
    pub fn peers(&self) -> MutexGuard<'_, Peers> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The clock, read at every call into core (rule 2).
    pub fn now(&self) -> Instant {
        self.clock.to_core(std::time::Instant::now())
    }

    /// One GET of `request` from `peer` at `addr`: admit, dial, exchange, settle. `Err`
    /// when the peer's circuit is open (nothing dialed) or the request cannot be sent.
    pub fn get(
        &self,
        peer: PeerId,
        addr: &str,
        request: ExchangeRequest<'_>,
        validate: Validator<'_>,
    ) -> Result<Finished, String> {
        // Our misuse (a header that cannot be sent) is an `Err` here, before any ticket.
        let mut exchange = Exchange::new(self.now(), &self.config, request, Link::Dial)
            .map_err(|e| e.to_string())?;
        // An open circuit: nothing dialed, nothing to settle (the exchange just drops).
        let path = exchange.breaker_path();
        let ticket = self
            .peers()
            .admit(self.now(), peer, path)
            .map_err(|e| format!("{addr}: {e:?}"))?;
        let outcome = self.run(&mut exchange, addr, validate);
        Ok(self.peers().finish(self.now(), ticket, outcome)) // exactly once (rule 4)
    }

    /// Drives one exchange to its outcome; every socket failure is an input to it.
    fn run(
        &self,
        ex: &mut Exchange,
        addr: &str,
        validate: Validator<'_>,
    ) -> peerblock_core::client::ExchangeOutcome {
        let mut stream = self.dial(ex, addr);
        loop {
            // Drain events first (rule 1): `Done` comes exactly once, last.
            while let Some(event) = ex.poll_event() {
                match event {
                    ClientEvent::Validate { body } => {
                        ex.handle_validated(self.now(), validate(&body))
                    }
                    ClientEvent::Done(outcome) => return outcome,
                    _ => {} // `Head`, or a later core's event: nothing asked of us
                }
            }
            let Some(s) = stream.as_mut() else {
                ex.handle_dial_failed(self.now()); // not connected: `dial` has ended it
                continue;
            };
            if let Some(tx) = ex.poll_transmit(self.now()) {
                // Every byte, then the ack; a failed write means the peer is gone.
                match s.write_all(&tx.head) {
                    Ok(()) => ex.handle_transmitted(self.now()),
                    Err(_) => ex.handle_eof(self.now()),
                }
                continue;
            }
            let (now, deadline) = (self.now(), ex.poll_timeout());
            let timeout = deadline.and_then(|d| d.timeout_from(now)); // never zero
            if deadline.is_some() && timeout.is_none() {
                ex.handle_timeout(now); // due: fire it with the time now (rule 3)
                continue;
            }
            let Some(buf) = ex.read_buf() else { continue }; // events to drain first
            if s.set_read_timeout(timeout).is_err() {
                ex.handle_eof(self.now());
                continue;
            }
            match s.read(buf) {
                Ok(0) => ex.handle_eof(self.now()), // EOF while unfinished: core classifies it
                Ok(n) => _ = ex.handle_read(self.now(), n),
                Err(e) => match e.kind() {
                    ErrorKind::WouldBlock | ErrorKind::TimedOut => ex.handle_timeout(self.now()),
                    ErrorKind::Interrupted => {}
                    _ => ex.handle_eof(self.now()), // a reset
                },
            }
        }
    }

    /// Connects within the exchange's own dial deadline, not the kernel's SYN retries.
    fn dial(&self, ex: &mut Exchange, addr: &str) -> Option<TcpStream> {
        let target: Option<SocketAddr> = addr.to_socket_addrs().ok().and_then(|mut a| a.next());
        let wait = ex.poll_timeout().and_then(|d| d.timeout_from(self.now()));
        let (Some(target), Some(wait)) = (target, wait) else {
            ex.handle_dial_failed(self.now()); // unresolvable, or the deadline passed
            return None;
        };
        match TcpStream::connect_timeout(&target, wait) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                ex.handle_connected(self.now());
                Some(stream)
            }
            // Our deadline cut the connect: the machine's `Dial` timer ends it.
            Err(e) if e.kind() == ErrorKind::TimedOut => {
                ex.handle_timeout(self.now());
                None
            }
            // Refused, unreachable, or the kernel's own connect timeout: a failed dial.
            Err(_) => {
                ex.handle_dial_failed(self.now());
                None
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(addr), Some(key), Some(index)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("usage: blocking_client HOST:PORT CHUNK-HEX INDEX");
        std::process::exit(2);
    };
    let key = ChunkKey::parse_hex(key.as_bytes()).unwrap_or_else(|e| {
        eprintln!("CHUNK-HEX {key}: {e}");
        std::process::exit(2)
    });
    let index: u64 = index.parse().unwrap_or_else(|e| {
        eprintln!("INDEX {index}: {e}");
        std::process::exit(2)
    });
    let clock = Clock::new(std::time::Instant::now());
    let client = Client::new(ClientConfig::default(), PeersConfig::default(), clock)
        .expect("default configuration");
    let request = ExchangeRequest::get(addr, BlockRequest::new(BlockPath { key, index }));
    match client
        .get(PeerId::default(), addr, request, &|_| true)
        .map(|f| (f.get, f.ending))
    {
        Ok((GetOutcome::Found(bytes), _)) => {
            io::stdout()
                .write_all(&bytes)
                .expect("write the block to stdout");
            eprintln!("{} bytes from {addr}", bytes.len());
        }
        Ok((_, ending)) => {
            eprintln!("{addr}: {ending:?}");
            std::process::exit(1)
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
}
