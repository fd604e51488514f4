//! The simulated byte-stream network of the HTTP/1.1 arms: TCP connections between a
//! reader and a node as ordered byte segments on the event queue.
//!
//! - A connection is identified by a [`ConnId`] (unique per run). A dial is a
//!   [`Segment::Syn`] that reaches the node one latency later; the node's accept (or its
//!   silence) decides what happens next. A dial to an unreachable node (crashed or
//!   partitioned) is **blackholed**: nothing comes back, the client's dial deadline decides.
//! - Bytes travel as [`Segment::ToServer`] / [`Segment::ToClient`], each arriving after the
//!   pair's one-way latency (constant per pair, so segments never overtake each other).
//!   `eof` is a half-close of the sender's side; a segment for a connection the receiver no
//!   longer knows is answered with a **reset** (a `ToClient` with `eof` and no bytes), and a
//!   segment to or from an unreachable node is lost.
//! - Bandwidth: a response body leaves on the node's upload link as a [`Transfer`]; it is
//!   put on the wire (one latency to the reader) when the link has carried the block's
//!   **nominal** size, so transfer time comes from the upload model, as on the reference
//!   arms. A crash loses the node's transfers.
//!
//! The network knows nothing of HTTP or of the machines; `http1` moves bytes between it and
//! the machines, `node_app` decides what the node answers.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::slab::Handle;

/// A simulated connection's id (unique per run).
pub(super) type ConnId = u64;

/// One happening on the wire, delivered one latency after it was sent.
#[derive(Debug)]
pub(super) enum Segment {
    /// A dial (SYN) reaches the node.
    Syn { get: Handle, conn: ConnId },
    /// Bytes (and/or the half-close) from a reader reach the node's connection.
    ToServer {
        /// The GET the bytes belong to (`None` for a close).
        get: Option<Handle>,
        node: u32,
        conn: ConnId,
        bytes: Bytes,
        eof: bool,
    },
    /// Bytes (and/or the handshake, the half-close, a reset) from a node reach the reader.
    ToClient {
        get: Option<Handle>,
        reader: u32,
        node: u32,
        conn: ConnId,
        /// The handshake completed (the node accepted the dial).
        connected: bool,
        bytes: Bytes,
        eof: bool,
    },
}

impl Segment {
    /// A close (or reset) travelling to the reader: no bytes, end of stream.
    pub(super) fn fin_to_client(get: Option<Handle>, reader: u32, node: u32, conn: ConnId) -> Self {
        Segment::ToClient {
            get,
            reader,
            node,
            conn,
            connected: false,
            bytes: Bytes::new(),
            eof: true,
        }
    }

    /// Bytes travelling to the reader, with the half-close after them if `eof`.
    pub(super) fn data_to_client(
        get: Option<Handle>,
        reader: u32,
        node: u32,
        conn: ConnId,
        bytes: Bytes,
        eof: bool,
    ) -> Self {
        Segment::ToClient {
            get,
            reader,
            node,
            conn,
            connected: false,
            bytes,
            eof,
        }
    }
}

/// A response body on a node's upload link.
#[derive(Debug)]
pub(super) struct Transfer {
    pub(super) node: u32,
    pub(super) conn: ConnId,
    pub(super) reader: u32,
    pub(super) get: Option<Handle>,
    /// The bytes that go on the wire when the link has carried `nominal`.
    pub(super) body: Bytes,
    /// The node half-closes after it.
    pub(super) close: bool,
    /// The size the upload link carries (the block's real size; `body` is scaled).
    pub(super) nominal: u64,
}

/// The network's books: connection ids and the bodies on the upload links.
#[derive(Debug, Default)]
pub(super) struct Net {
    next_conn: ConnId,
    transfers: BTreeMap<u64, Transfer>,
    next_transfer: u64,
}

impl Net {
    /// A network with no connections.
    pub(super) fn new() -> Self {
        Net {
            next_conn: 1,
            transfers: BTreeMap::new(),
            next_transfer: 1,
        }
    }

    /// A fresh connection id for a dial.
    pub(super) fn new_conn(&mut self) -> ConnId {
        let id = self.next_conn;
        self.next_conn += 1;
        id
    }

    /// Files a body for the upload link; returns the transfer id the link carries it under.
    pub(super) fn start_transfer(&mut self, transfer: Transfer) -> u64 {
        let t = self.next_transfer;
        self.next_transfer += 1;
        self.transfers.insert(t, transfer);
        t
    }

    /// The upload link finished (or dropped) transfer `t`: its body, if still filed.
    pub(super) fn take_transfer(&mut self, t: u64) -> Option<Transfer> {
        self.transfers.remove(&t)
    }

    /// Node `n` crashed: its bodies in flight are gone.
    pub(super) fn crash(&mut self, n: u32) {
        self.transfers.retain(|_, t| t.node != n);
    }
}
