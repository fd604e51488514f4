//! What a machine asks its driver to write: one type for both sides.
//!
//! [`ServerConnection`](crate::server::ServerConnection) and
//! [`Exchange`](crate::client::Exchange) both hand out [`Transmit`]s from `poll_transmit`.
//! The acknowledgement rule is the same on both sides: write `head` then `body` (vectored,
//! no copy), and once every byte of one `Transmit` is written call the machine's
//! `handle_transmitted(now)`. Transmits are acknowledged in the order they were handed out.
//! What happens to the connection afterwards is [`Transmit::close`].

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
