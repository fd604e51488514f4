//! One server connection on its worker: the turn loop that maps readiness events onto
//! core's `ServerConnection` (pump, write, read, within per-turn bounds), its events
//! (store fetches, relays, rosters), and its release through core's `close`.

use std::collections::HashMap;
use std::io::{self, Read as _};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mio::net::TcpStream;
use peerblock_common::store::{OpenBlock, Opened};
use peerblock_core::server::{
    RequestId, RequestRejection, ServerConnection, ServerEvent, SourceRequest, SourceResult,
};
use peerblock_core::time::Instant;

use super::flights::{leave_flight, want_flight};
use super::write::Outgoing;
use super::{BodyPath, Shared, CLOSING, DRAINING};
use crate::worker::{After, Driven, Key, Ready, Worker};

/// Most reads into one connection per turn.
const READS_PER_TURN: usize = 8;

/// Most bytes written to one connection per turn (head, body and file bytes): a client
/// reading a 64 MiB block as fast as loopback allows cannot hold its worker for the whole
/// block while other connections wait.
const WRITE_BYTES_PER_TURN: usize = 1024 * 1024;

/// One connection: its socket, its machine, and the response being written. Dropping it
/// calls core's `close` (every exit path).
pub(crate) struct ServerConn {
    pub(super) shared: Arc<Shared>,
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) machine: ServerConnection,
    /// Holds a session (counted in `sessions_open`); else a refusal slot.
    pub(super) admitted: bool,
    pub(super) out: Option<Outgoing>,
    /// Zero-copy blocks answered and not yet written, by request.
    pub(super) files: HashMap<RequestId, OpenBlock>,
    /// Relayed fetches in flight: (request, the client request's handle).
    pub(super) pending: Vec<(RequestId, u64)>,
    pub(super) readable: bool,
    pub(super) writable: bool,
    pub(super) eof: bool,
    pub(super) closed: bool,
}

/// How a turn of a connection ended.
enum Turn {
    /// Nothing more can be done until the socket or a timer says so.
    Idle,
    /// The work budget ran out with work left.
    Budget,
    /// The connection is over.
    End,
}

impl ServerConn {
    /// A readiness event (or a wake-up with none: a phase change, a source answer).
    pub(crate) fn drive(&mut self, w: &mut Worker, key: Key, ready: Ready) -> After {
        self.readable |= ready.readable;
        self.writable |= ready.writable;
        match self.turn(w, key) {
            Turn::End => {
                self.close();
                After::Done
            }
            Turn::Budget => After::Again(self.deadline()),
            Turn::Idle => After::Keep(self.deadline()),
        }
    }

    /// The machine's deadline is due (or a stale wake-up: harmless).
    pub(crate) fn timeout(&mut self, w: &mut Worker, key: Key) -> After {
        let now = w.now();
        self.machine.handle_timeout(now);
        self.drive(w, key, Ready::default())
    }

    fn deadline(&self) -> Option<Instant> {
        self.machine.poll_timeout().map(|d| d.at)
    }

    fn turn(&mut self, w: &mut Worker, key: Key) -> Turn {
        let mut reads = READS_PER_TURN;
        let mut budget = WRITE_BYTES_PER_TURN;
        loop {
            let phase = self.shared.phase();
            if phase == CLOSING {
                tracing::debug!(peer = %self.peer, "connection closed by shutdown");
                return Turn::End;
            }
            let now = w.now();
            self.pump(w, key, now);
            match self.write(w, key, &mut budget) {
                Ok(true) => {}
                Ok(false) => return Turn::Budget,
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "connection ended by a socket error");
                    return Turn::End;
                }
            }
            // Finished with a transmit still unwritten happens only when core gave up on
            // it (its send-progress deadline passed): the connection ends here too.
            if self.machine.is_finished() {
                tracing::debug!(peer = %self.peer, "connection finished");
                return Turn::End;
            }
            let draining = phase == DRAINING;
            if draining && self.machine.in_progress() == 0 && self.out.is_none() {
                return Turn::End;
            }
            if !self.readable || self.eof || draining {
                return Turn::Idle;
            }
            let Some(buf) = self.machine.read_buf() else {
                // Back-pressure: responses not yet written; the socket stays readable.
                return Turn::Idle;
            };
            if reads == 0 {
                return Turn::Budget;
            }
            reads -= 1;
            let now = w.now();
            match self.stream.read(buf) {
                Ok(0) => {
                    self.eof = true;
                    self.machine.handle_eof(now);
                }
                Ok(n) => {
                    self.machine.handle_read(now, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "connection ended by a read error");
                    return Turn::End;
                }
            }
        }
    }

    /// Begins decoded requests, answers every event that can be answered now, and takes
    /// the next transmit if none is being written.
    pub(super) fn pump(&mut self, w: &mut Worker, key: Key, now: Instant) {
        if self.machine.needs_admission() {
            let mut admission = self.shared.admission();
            self.machine.handle_admission(now, &mut admission);
        }
        while let Some(event) = self.machine.poll_event() {
            self.on_event(w, key, now, event);
        }
        if self.out.is_none() {
            if let Some(tx) = self.machine.poll_transmit(now) {
                let len = tx.body.len() as u64 + tx.external.map_or(0, |e| e.len);
                self.shared.metrics.inflight_bytes.inc_by(len as i64);
                let file = tx.external.and_then(|e| self.files.remove(&e.request));
                self.out = Some(Outgoing {
                    tx,
                    written: 0,
                    file,
                    sent: 0,
                });
            }
        }
    }

    fn on_event(&mut self, w: &mut Worker, key: Key, now: Instant, event: ServerEvent) {
        match event {
            ServerEvent::Fetch { id, request } => {
                tracing::trace!(peer = %self.peer, path = %request.path, "fetch");
                let (result, file) = self.fetch(&request);
                if let Some(file) = file {
                    self.files.insert(id, file);
                }
                self.answer(now, id, result);
            }
            ServerEvent::Relay { id, request } => {
                tracing::trace!(peer = %self.peer, path = %request.path, hop = request.hop.0, "relay");
                self.relay(w, key, id, &request);
            }
            ServerEvent::Roster { id, caller } => {
                let roster = peerblock_common::roster::answer(
                    self.shared.membership.as_ref(),
                    now,
                    caller.as_ref(),
                    &self.shared.metrics,
                    &self.peer,
                );
                if let Err(e) = self.machine.handle_roster(now, id, &roster) {
                    tracing::debug!(peer = %self.peer, error = %e, "roster answer dropped");
                }
            }
            ServerEvent::Rejected { status, error, .. } => match error {
                RequestRejection::Malformed(_) => {
                    tracing::warn!(peer = %self.peer, status, %error, "malformed request")
                }
                _ => tracing::debug!(peer = %self.peer, status, %error, "request rejected"),
            },
            ServerEvent::SourceTimedOut { id } => {
                tracing::debug!(peer = %self.peer, ?id, "source timed out: answered 500");
                self.files.remove(&id);
                if let Some(at) = self.pending.iter().position(|(p, _)| *p == id) {
                    let (_, waiter) = self.pending.swap_remove(at);
                    let shared = self.shared.clone();
                    leave_flight(&shared, now, waiter);
                }
            }
            // An event a later core adds (`#[non_exhaustive]`): nothing to answer.
            other => tracing::debug!(peer = %self.peer, event = ?other, "server event ignored"),
        }
    }

    /// The block from the store: from the hot-block cache or a read of its file (the
    /// buffered path), or its open file (the zero-copy path). Page-cached reads take
    /// microseconds; this worker's other sockets wait that long.
    fn fetch(&mut self, request: &SourceRequest) -> (SourceResult, Option<OpenBlock>) {
        let store = &self.shared.store;
        let path = request.path;
        match self.shared.body {
            BodyPath::Buffered => {
                if let Some(block) = store.cached(&path) {
                    return (SourceResult::Found(block), None);
                }
                let result = store.get_blocking(&path);
                if let SourceResult::Found(block) = &result {
                    self.shared
                        .metrics
                        .store_read_bytes
                        .inc_by(block.len() as u64);
                    store.cache_insert(path, block);
                }
                (result, None)
            }
            BodyPath::Sendfile => match store.open_block(&path) {
                Opened::File(block) => (SourceResult::External { len: block.len }, Some(block)),
                Opened::Missing => (SourceResult::Miss, None),
                Opened::Failed => (SourceResult::Failed, None),
                Opened::Corrupt => (SourceResult::Corrupt, None),
            },
        }
    }

    /// Hands a source's answer to the machine.
    fn answer(&mut self, now: Instant, id: RequestId, result: SourceResult) {
        let answered = {
            let mut admission = self.shared.admission();
            self.machine.handle_source(now, &mut admission, id, result)
        };
        if let Err(e) = answered {
            self.files.remove(&id);
            tracing::debug!(peer = %self.peer, error = %e, "late source answer dropped");
        }
    }

    /// Joins (or leads) the relayed fetch of the request's block in the single-flight
    /// table; its answer comes back to this connection on this worker.
    fn relay(&mut self, w: &mut Worker, key: Key, id: RequestId, request: &SourceRequest) {
        if self.shared.relay.is_none() {
            let now = w.now();
            self.answer(now, id, SourceResult::Miss);
            return;
        }
        let me = w.me();
        let answer = move |result: SourceResult| {
            me.run(move |w| {
                w.with_entry(key, |w, key, entry| match entry.get::<ServerConn>() {
                    Some(c) => {
                        c.pending.retain(|(p, _)| *p != id);
                        let now = w.now();
                        c.answer(now, id, result);
                        c.drive(w, key, Ready::default())
                    }
                    None => After::Unchanged,
                })
            })
        };
        // Concurrent misses for this block share one upstream fetch; this request waits
        // at most the source timeout (core answers it 500 then anyway).
        let shared = self.shared.clone();
        if let Some(waiter) = want_flight(&shared, w, request, Box::new(answer)) {
            self.pending.push((id, waiter));
        }
    }

    /// Calls core's `close` (releasing every ticket) and settles the metrics and the
    /// server's counts. Idempotent; also run on drop, so no exit path skips it.
    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let now = self.shared.now();
        {
            let mut admission = self.shared.admission();
            self.machine.close(now, &mut admission);
        }
        self.files.clear();
        // This connection's relayed requests leave their flights (a flight nobody else
        // waits for is abandoned; its fetch runs to its end and its result is ignored).
        let shared = self.shared.clone();
        for (_, waiter) in self.pending.drain(..) {
            leave_flight(&shared, now, waiter);
        }
        if let Some(out) = self.out.take() {
            let len = out.tx.body.len() as u64 + out.tx.external.map_or(0, |e| e.len);
            self.shared.metrics.inflight_bytes.dec_by(len as i64);
        }
        if self.admitted {
            self.shared.metrics.sessions_open.dec();
        }
        self.shared.live.fetch_sub(1, Ordering::SeqCst);
        self.shared.notify();
    }
}

impl Drop for ServerConn {
    fn drop(&mut self) {
        self.close();
    }
}

impl Driven for ServerConn {
    fn on_ready(&mut self, w: &mut Worker, key: Key, ready: Ready) -> After {
        self.drive(w, key, ready)
    }

    fn on_timer(&mut self, w: &mut Worker, key: Key) -> After {
        self.timeout(w, key)
    }
}
