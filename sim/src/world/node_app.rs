//! The application on both ends of the HTTP/1.1 arms: what a node answers and what a
//! reader accepts, kept apart from the machines (`http1`) and the wire (`stream`).
//!
//! - The node's block source ([`NodeApp`], a [`ServerApp`]): a `Fetch` is answered with
//!   the block's (scaled) body if the node holds it, corrupted if the node is faulty, a
//!   miss otherwise; a silent node never answers. With `lookup_load_hints` the node counts
//!   every GET it receives per block, as the modelled path does on arrival.
//! - Relay: with content on its close group the nodes do not relay (a `Relay` is answered
//!   with a miss); with content at the origin (`file.placement = "origin"`) a node holds
//!   what its relay cache holds, and a `Relay` is handed to the node's single-flight table
//!   after the pump (module `relay`), which answers it later.
//! - Roster requests: the simulated readers send none (their placement is known); a
//!   `Roster` event would go unanswered until the connection's source deadline.
//! - Metrics: the refusals the node writes ([`count_refusal`]) and the reader's
//!   classification of each exchange's ending ([`result_of`]).
//! - The reader's validator ([`Blocks::validates`]): a body must start with the block's
//!   content token.

use std::cell::Cell;

use bytes::{Bytes, BytesMut};
use peerblock_core::client::{Ending, ExchangeError};
use peerblock_core::load::KeyCounter;
use peerblock_core::refusal::RefusalReason;
use peerblock_core::server::{RequestId, ServerEvent, SourceRequest, SourceResult};
use peerblock_core::time::Instant;
use peerblock_testkit::pump::{Answer, ServerApp};

use super::relay::Relays;
use crate::listener::Limit;
use crate::metrics::{GetResult, Metrics};
use crate::model::content::Content;
use crate::scenario::Scenario;
use crate::trace;
use crate::trace::Trace;

/// Bodies and byte budgets on the HTTP path are 1/`BODY_SCALE` of their nominal size.
///
/// Carrying real 4 MiB bodies through the machines would cost a copy per response (tens
/// of gigabytes per replay); the transfer *time* comes from the upload model anyway. Block
/// sizes are whole KiB and budgets whole MiB, so dividing both by 1024 keeps every
/// admission decision exact.
pub const BODY_SCALE: u64 = 1024;

/// The scaled body a correct holder of a block serves: its content token, padded to
/// 1/[`BODY_SCALE`] of the block's nominal size.
pub(super) fn body_for(token: Bytes, nominal: u64) -> Bytes {
    let len = (nominal / BODY_SCALE).max(token.len() as u64) as usize;
    let mut b = BytesMut::with_capacity(len);
    b.extend_from_slice(&token);
    b.resize(len, 0);
    b.freeze()
}

/// Per block: the content token (what the read machine gets) and the scaled body a correct
/// holder serves, built once (responses hand out clones, no copies).
#[derive(Debug)]
pub(super) struct Blocks {
    tokens: Vec<Bytes>,
    bodies: Vec<Bytes>,
}

impl Blocks {
    /// Every block of scenario `s`.
    pub(super) fn new(s: &Scenario, content: &Content) -> Self {
        let tokens: Vec<Bytes> = (0..s.blocks()).map(|b| content.token(b)).collect();
        let bodies = tokens
            .iter()
            .enumerate()
            .map(|(b, t)| body_for(t.clone(), s.block_bytes(b as u32)))
            .collect();
        Blocks { tokens, bodies }
    }

    /// The scaled body of `block` (the length the reader's exchange expects).
    pub(super) fn body(&self, block: u32) -> &Bytes {
        &self.bodies[block as usize]
    }

    /// The reader's validator: `body` is `block`'s.
    pub(super) fn validates(&self, block: u32, body: &[u8]) -> bool {
        body.starts_with(&self.tokens[block as usize])
    }

    /// What the read machine gets from a validated `body` of `block`: its content token.
    pub(super) fn token_of(&self, block: u32, body: &Bytes) -> Bytes {
        let token_len = self.tokens[block as usize].len();
        body.slice(..token_len.min(body.len()))
    }
}

/// Node `n`'s application for one of its server connections, borrowed for one pump.
pub(super) struct NodeApp<'a> {
    /// The scenario (load hints, block sizes).
    pub(super) s: &'a Scenario,
    /// Placement: which blocks the node holds.
    pub(super) content: &'a Content,
    /// The bodies it serves.
    pub(super) blocks: &'a Blocks,
    /// The node's index.
    pub(super) n: u32,
    /// A silent node accepts and never answers.
    pub(super) silent: bool,
    /// A corrupting node serves wrong bytes.
    pub(super) corrupt: bool,
    /// The node's per-block GET counter (for lookup load hints).
    pub(super) keys: &'a mut KeyCounter<u32>,
    /// Set to the nominal size of the block last answered `Found` (its `200` is next out,
    /// and the upload link carries that size).
    pub(super) nominal: &'a Cell<u64>,
    /// With content at the origin: the relays, whose caches hold what the node serves.
    pub(super) relays: Option<&'a mut Relays>,
    /// Relayed misses to hand to the node's flights after the pump (`ServerEvent::Relay`).
    pub(super) relayed: Vec<(RequestId, SourceRequest)>,
    /// Requests the server answered itself at its source timeout (they leave their
    /// flights).
    pub(super) timed_out: Vec<RequestId>,
}

impl ServerApp<u32> for NodeApp<'_> {
    fn on_event(&mut self, now: Instant, event: ServerEvent) -> Option<Answer> {
        match event {
            ServerEvent::Fetch { id, request } => {
                if self.silent {
                    return None; // accepts, never answers
                }
                let block = request.path.index as u32;
                if self.s.client.lookup_load_hints {
                    // The node counts every GET it receives, per block, for its lookup
                    // replies (as the modelled path does on arrival).
                    self.keys.bump(now, block);
                }
                let held = match self.relays.as_mut() {
                    // Content at the origin: a node holds what it relayed and still caches.
                    Some(relays) => relays.serve_cached(self.n, block),
                    None => self.content.holds(self.n, block),
                };
                let result = if held {
                    let mut body = self.blocks.body(block).clone();
                    if self.corrupt {
                        let mut wrong = BytesMut::from(&body[..]);
                        wrong[0] ^= 0xff;
                        body = wrong.freeze();
                    }
                    self.nominal.set(self.s.block_bytes(block));
                    SourceResult::Found(body)
                } else {
                    SourceResult::Miss
                };
                Some(Answer::Source(id, result))
            }
            ServerEvent::Relay { id, request } => {
                if self.relays.is_none() {
                    // Content on its close group: nodes do not relay.
                    return Some(Answer::Source(id, SourceResult::Miss));
                }
                // Answered when the node's flight answers (module `relay`).
                self.relayed.push((id, request));
                None
            }
            ServerEvent::SourceTimedOut { id } => {
                self.timed_out.push(id);
                None
            }
            // Peer errors: nothing to answer; no roster requests.
            ServerEvent::Roster { .. } | ServerEvent::Rejected { .. } => None,
            // An event a later core adds (`#[non_exhaustive]`): nothing to answer.
            _ => None,
        }
    }
}

/// Counts a refusal node `n` writes to reader `r`: `at_accept` for a connection refused
/// when it was accepted ("refuse"), else a request turned away ("turned-away").
pub(super) fn count_refusal(
    metrics: &mut Metrics,
    trace: &mut Trace,
    now: Instant,
    (n, r): (u32, u32),
    reason: RefusalReason,
    at_accept: bool,
) {
    let limit = Limit::from_reason(reason);
    metrics.limit_hit(limit);
    let kind = if at_accept { "refuse" } else { "turned-away" };
    trace!(trace, now, kind, "n={n} r={r} limit={}", limit.as_str());
}

/// The reader's classification of an exchange's ending, for the GET metrics.
pub(super) fn result_of(ending: &Ending) -> GetResult {
    match ending {
        Ending::Block(_) => GetResult::Found,
        Ending::Miss => GetResult::NotFound,
        Ending::Refused(_) => GetResult::Refused,
        Ending::Cancelled => GetResult::Cancelled,
        Ending::Failed(e) => match e {
            ExchangeError::DialFailed | ExchangeError::DialTimeout(_) => GetResult::DialFailed,
            ExchangeError::ResponseHeaderTimeout(_) | ExchangeError::RequestTimeout(_) => {
                GetResult::TimedOut
            }
            ExchangeError::Length(_) | ExchangeError::Validation | ExchangeError::Protocol(_) => {
                GetResult::Corrupt
            }
            _ => GetResult::Closed,
        },
        _ => GetResult::Closed,
    }
}
