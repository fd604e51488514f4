//! The accept side: one worker's copy of the server's listening socket, core admission at
//! accept time (a session, the bounded refusal path, or an immediate close), and the
//! dealing of each accepted connection to the workers in turn.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Token};
use peerblock_core::server::ServerConnection;

use super::conn::ServerConn;
use super::{Shared, RUNNING};
use crate::worker::{After, Driven, Entry, Key, Ready, Worker};

/// Most connections one worker accepts per wake-up of its listener before it turns to
/// its other sockets (bounded work per wake-up); the rest are accepted next turn.
const ACCEPTS_PER_TURN: usize = 64;

/// How long a listener pauses after an accept error (out of file descriptors, say) before
/// accepting again.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(20);

/// One worker's copy of a server's listening socket.
pub(crate) struct ListenerEntry {
    pub(super) shared: Option<Arc<Shared>>,
    pub(super) listener: Option<TcpListener>,
}

impl ListenerEntry {
    pub(super) fn is(&self, shared: &Arc<Shared>) -> bool {
        self.shared.as_ref().is_some_and(|s| Arc::ptr_eq(s, shared))
    }

    /// Accepts what is queued (at most [`ACCEPTS_PER_TURN`]), admitting each connection
    /// at once; closes the listener when the server is no longer running.
    pub(crate) fn drive(&mut self, w: &mut Worker, _key: Key) -> After {
        let (Some(shared), Some(listener)) = (&self.shared, &mut self.listener) else {
            return After::Done;
        };
        if shared.phase() != RUNNING {
            let _ = w.poll.registry().deregister(listener);
            return After::Done;
        }
        for _ in 0..ACCEPTS_PER_TURN {
            match listener.accept() {
                Ok((stream, peer)) => on_accept(w, shared, stream, peer),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return After::Keep(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors, say: try again after a pause (the timer drives
                    // this entry again), so a persistent error does not spin a core.
                    tracing::warn!(error = %e, "accept failed");
                    return After::Keep(Some(w.now() + ACCEPT_ERROR_BACKOFF));
                }
            }
        }
        After::Again(None)
    }
}

impl Drop for ListenerEntry {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.live.fetch_sub(1, Ordering::SeqCst);
            shared.notify();
        }
    }
}

/// Admission at accept time: an admitted connection gets a session; a refused one the
/// light path (within core's `AdmissionConfig::max_refusals`) or, over that bound, an
/// immediate close.
fn on_accept(w: &mut Worker, shared: &Arc<Shared>, stream: TcpStream, peer: SocketAddr) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%peer, error = %e, "setting TCP_NODELAY failed");
    }
    let now = w.now();
    let accepted = {
        let mut admission = shared.admission();
        ServerConnection::accept(now, &mut admission, peer.ip(), Arc::clone(&shared.config))
    };
    let mut machine = match accepted {
        Ok(machine) => machine,
        Err(e) => {
            // Unreachable: the configuration was validated when the server was built.
            tracing::error!(error = %e, "server configuration rejected by core");
            return;
        }
    };
    let admitted = machine.refused().is_none();
    if let Some(refusal) = machine.refused() {
        shared.metrics.refused(refusal.reason.as_token());
        if machine.dropped_at_accept() {
            tracing::debug!(%peer, reason = refusal.reason.as_token(), "connection refused and the refusal path is full: closed at once");
            machine.close(now, &mut shared.admission());
            shared.notify();
            return;
        }
        tracing::debug!(%peer, reason = refusal.reason.as_token(), "connection refused: answering its first request");
    } else {
        shared.metrics.connections_accepted.inc();
        shared.metrics.sessions_open.inc();
        tracing::debug!(%peer, "connection admitted");
    }
    shared.live.fetch_add(1, Ordering::SeqCst);
    shared.notify();
    let conn = ServerConn {
        shared: Arc::clone(shared),
        stream,
        peer,
        machine,
        admitted,
        out: None,
        files: HashMap::new(),
        pending: Vec::new(),
        readable: true,
        writable: true,
        eof: false,
        closed: false,
    };
    // Connections are dealt to the workers in turn: the worker whose poll saw the
    // listener first would otherwise accept a whole burst and serve it alone.
    let target = shared.next_worker.fetch_add(1, Ordering::Relaxed) % w.remotes.len();
    let conn = Box::new(conn);
    w.post(target, move |w| {
        w.spawn(Entry::new(conn), |w, key, entry| {
            match entry.get::<ServerConn>() {
                Some(c) => w.poll.registry().register(
                    &mut c.stream,
                    Token(key.index),
                    Interest::READABLE | Interest::WRITABLE,
                ),
                None => Ok(()),
            }
        });
    });
}

impl Driven for ListenerEntry {
    fn on_ready(&mut self, w: &mut Worker, key: Key, _ready: Ready) -> After {
        self.drive(w, key)
    }

    fn on_timer(&mut self, w: &mut Worker, key: Key) -> After {
        self.drive(w, key)
    }
}
