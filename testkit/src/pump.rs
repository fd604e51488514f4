//! Generic machine pumps: the driver-side loops of docs/architecture.md's driving contract,
//! written once, independent of any socket, event loop or simulated world.
//!
//! A driver owns the byte stream; these functions do what the contract asks of it around a
//! [`ServerConnection`] and an [`Exchange`]:
//!
//! - bytes in: [`feed_server`] / [`feed_exchange`] hand every received byte to the machine
//!   (the slice form, `handle_input`, until it takes nothing more), and [`feed_server`]
//!   begins decoded requests at the node's `Admission` when the machine asks for it;
//! - events and bytes out: [`poll_server`] drains `poll_event` (answering each through the
//!   application's [`ServerApp`]) and then `poll_transmit`, handing each [`Transmit`] to the
//!   driver's writer and acknowledging it with `handle_transmitted` as soon as the writer
//!   says it was fully written ([`Written::All`]), or stopping while it is still being
//!   written ([`Written::Pending`]: the driver acknowledges it later, in order);
//!   [`poll_exchange`] does the same for the client side and returns the events only the
//!   application can act on ([`ClientStep`]), running the validator itself;
//! - timers: [`Armed`] keeps one scheduled wake-up per machine for a driver whose timer
//!   wheel cannot move an entry (an event queue): a later `poll_timeout` is scheduled when
//!   the earlier one fires (a spurious `handle_timeout` is harmless by contract).
//!
//! End of life (`close`, `cancel`, `is_finished`) stays with the driver: it decides when its
//! socket goes away. The simulator (`sim`) drives every HTTP/1.1 GET through these pumps.

use bytes::Bytes;

use peerblock_core::client::{ClientEvent, Exchange, ExchangeOutcome};
use peerblock_core::roster::Roster;
use peerblock_core::server::{Admission, RequestId, ServerConnection, ServerEvent, SourceResult};
use peerblock_core::time::Instant;
use peerblock_core::transmit::Transmit;

/// What the driver's writer did with a [`Transmit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Every byte of it is written: the pump acknowledges it now.
    All,
    /// It is still being written: the pump stops handing out transmits; the driver calls
    /// `handle_transmitted` when the last byte is out.
    Pending,
}

/// The application's answer to a [`ServerEvent`], applied by [`poll_server`] at once.
#[derive(Clone, Debug)]
pub enum Answer {
    /// The block source's answer to a `Fetch` or `Relay`.
    Source(RequestId, SourceResult),
    /// The membership table's roster for a `Roster` request.
    Roster(RequestId, Roster),
}

/// The node application behind a [`ServerConnection`]: it hears every event and answers
/// now ([`Answer`]), later (by calling `handle_source`/`handle_roster` itself), or never.
pub trait ServerApp<K> {
    /// One event of the machine, in order.
    fn on_event(&mut self, now: Instant, event: ServerEvent) -> Option<Answer>;
}

impl<K, F: FnMut(Instant, ServerEvent) -> Option<Answer>> ServerApp<K> for F {
    fn on_event(&mut self, now: Instant, event: ServerEvent) -> Option<Answer> {
        self(now, event)
    }
}

/// Hands `data` (bytes read from the connection) to the server machine, beginning every
/// decoded request at `admission` when the machine needs it. Returns how many bytes it
/// took; the rest must be offered again after the machine made room (its responses were
/// written).
pub fn feed_server<K: Clone + Ord>(
    now: Instant,
    conn: &mut ServerConnection<K>,
    admission: &mut Admission<K>,
    data: &[u8],
) -> usize {
    let mut off = 0;
    while off < data.len() {
        let taken = conn.handle_input(now, &data[off..]);
        if conn.needs_admission() {
            conn.handle_admission(now, admission);
        }
        if taken == 0 {
            break;
        }
        off += taken;
    }
    off
}

/// Drains the server machine: every event to `app` (its immediate answers applied in
/// order), then every transmit to `write`, acknowledging each fully written one. Returns
/// `true` if a transmit is still being written ([`Written::Pending`]).
///
/// An answer the machine rejects (a stale request id: the request ended meanwhile) is
/// dropped, as a driver would.
pub fn poll_server<K: Clone + Ord>(
    now: Instant,
    conn: &mut ServerConnection<K>,
    admission: &mut Admission<K>,
    app: &mut impl ServerApp<K>,
    mut write: impl FnMut(&ServerConnection<K>, Transmit) -> Written,
) -> bool {
    while let Some(event) = conn.poll_event() {
        match app.on_event(now, event) {
            Some(Answer::Source(id, result)) => {
                let _ = conn.handle_source(now, admission, id, result);
            }
            Some(Answer::Roster(id, roster)) => {
                let _ = conn.handle_roster(now, id, &roster);
            }
            None => {}
        }
    }
    while let Some(tx) = conn.poll_transmit(now) {
        match write(conn, tx) {
            Written::All => conn.handle_transmitted(now, admission),
            Written::Pending => return true,
        }
    }
    false
}

/// Hands `data` (bytes read from the connection) to the exchange. Returns how many bytes
/// it took (all of them unless the exchange finished or its buffer is full).
pub fn feed_exchange(now: Instant, exchange: &mut Exchange, data: &[u8]) -> usize {
    let mut off = 0;
    while off < data.len() {
        let taken = exchange.handle_input(now, &data[off..]);
        if taken == 0 {
            break;
        }
        off += taken;
    }
    off
}

/// An exchange event only the application can act on.
#[derive(Debug)]
pub enum ClientStep {
    /// The response head arrived ([`ClientEvent::Head`]): the GET is making progress (the
    /// read machine's `handle_get_progress` input).
    Head {
        /// The response status.
        status: u16,
    },
    /// The exchange is over ([`ClientEvent::Done`]).
    Done(ExchangeOutcome),
}

/// Drives the exchange until the application has something to do: writes and
/// acknowledges its transmits (`write` returns [`Written::All`] once the bytes are on the
/// connection; with [`Written::Pending`] the driver acknowledges later), runs `validate` on
/// a complete body and reports the verdict, and returns the next [`ClientStep`], or `None`
/// when the exchange waits for input or a timer.
pub fn poll_exchange(
    now: Instant,
    exchange: &mut Exchange,
    mut validate: impl FnMut(&Bytes) -> bool,
    mut write: impl FnMut(Transmit) -> Written,
) -> Option<ClientStep> {
    loop {
        if let Some(tx) = exchange.poll_transmit(now) {
            if write(tx) == Written::All {
                exchange.handle_transmitted(now);
            }
            continue;
        }
        match exchange.poll_event()? {
            ClientEvent::Head { status } => return Some(ClientStep::Head { status }),
            ClientEvent::Validate { body } => {
                let ok = validate(&body);
                exchange.handle_validated(now, ok);
            }
            ClientEvent::Done(outcome) => return Some(ClientStep::Done(outcome)),
            // An event a later core adds (`#[non_exhaustive]`): nothing asked of us.
            _ => {}
        }
    }
}

/// One scheduled wake-up per machine, for a driver whose timers cannot be moved once set
/// (an event queue). Keep the earliest instant a wake-up is scheduled for; a later deadline
/// is not scheduled while one is pending: when the pending one fires (spuriously, as far
/// as the machine is concerned), the driver re-arms at the machine's current deadline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Armed(Option<Instant>);

impl Armed {
    /// A wake-up fired at `now`: forget it if it was the one scheduled.
    pub fn fired(&mut self, now: Instant) {
        if self.0 == Some(now) {
            self.0 = None;
        }
    }

    /// The machine's current deadline is `deadline`: returns the instant to schedule a new
    /// wake-up at (not before `now`), or `None` if the pending one comes first.
    pub fn arm(&mut self, now: Instant, deadline: Option<Instant>) -> Option<Instant> {
        let at = deadline?;
        if self.0.is_none_or(|armed| at < armed) {
            self.0 = Some(at);
            return Some(at.max(now));
        }
        None
    }
}
