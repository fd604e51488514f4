//! What a machine asks its driver to write: one type for both sides.
//!
//! [`ServerConnection`](crate::server::ServerConnection) and
//! [`Exchange`](crate::client::Exchange) both hand out [`Transmit`]s from `poll_transmit`.
//! The acknowledgement rule is the same on both sides: write `head` then `body` (vectored,
//! no copy), and once every byte of one `Transmit` is written call the machine's
//! `handle_transmitted(now)`. Transmits are acknowledged in the order they were handed out.
//! What happens to the connection afterwards is [`Transmit::close`]. A zero-copy block's
//! bytes follow `body` from the driver itself ([`Transmit::external`]).

use bytes::Bytes;

use crate::refusal::RefusalReason;

/// Bytes to write, in order: `head`, then `body`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// A request or response head (for a refusal, the whole response).
    pub head: Bytes,
    /// The body: for a `200` the application's block bytes themselves, never copied.
    pub body: Bytes,
    /// The response status, for logs and metrics (`None` for a client's request).
    pub status: Option<u16>,
    /// For a `503` refusal, which limit was hit.
    pub refusal: Option<RefusalReason>,
    /// Whether `body` is a block (a `200` answering a block request), so a driver can
    /// count block bytes served apart from roster bodies and error bodies.
    pub block: bool,
    /// What to do with the connection once this is written.
    pub close: Close,
    /// Body bytes the driver sends itself after `head` and `body` (which is then empty):
    /// a block the application answered with
    /// [`SourceResult::External`](crate::server::SourceResult::External), for a zero-copy
    /// path such as `sendfile` from the store's file. `None` for every other transmit.
    /// The transmit is written, and acknowledged with `handle_transmitted`, only once all
    /// `external.len` bytes are sent; a driver that cannot send them all (the file shrank)
    /// must close the connection, never pad or send other bytes.
    pub external: Option<External>,
}

/// The part of a response body a driver sends itself ([`Transmit::external`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct External {
    /// The request this answers: the id the driver's `SourceResult::External` was given
    /// for, so it can find the file it opened.
    pub request: crate::server::RequestId,
    /// Exactly how many bytes to send (the response's `Content-Length`).
    pub len: u64,
}

/// What happens to the connection after a [`Transmit`] is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// Keep the connection open: more requests or responses may follow.
    KeepOpen,
    /// Close the connection after writing (nothing more will be read).
    AfterWrite,
    /// Half-close after writing (shut down the write side) and linger: keep reading and
    /// feeding input to the machine, which discards it, until the peer closes or the
    /// machine says it is finished (its linger deadline). Closing at once while the peer
    /// is still sending would make the kernel answer its data with a reset that can
    /// destroy the error response before the peer reads it (RFC 9112 §9.6).
    Linger,
}

impl Close {
    /// Whether the connection ends after this write (at once or after lingering).
    pub fn ends_connection(self) -> bool {
        !matches!(self, Close::KeepOpen)
    }
}
