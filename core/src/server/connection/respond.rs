//! The response side of a connection: framing responses and refusals, taking the
//! application's answers, and handing out transmits in request order until acknowledged.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::http::{OutgoingResponse, ResponseKind};
use crate::refusal::{self, Refusal};
use crate::roster::Roster;
use crate::server::admission::Admission;
use crate::server::relay;
use crate::time::Instant;
use crate::transmit::{Close, External, Transmit};
use crate::wire::{Hop, Status};

use super::*;

impl<S: Ord + Clone> ServerConnection<S> {
    pub(super) fn refusal_transmit(&mut self, refusal: &Refusal, load: Option<u32>) -> Transmit {
        refusal::encode(
            refusal,
            Some(&self.config.node_id),
            load,
            &mut self.head_buf,
        );
        Transmit {
            head: self.head_buf.split().freeze(),
            body: Bytes::new(),
            status: Some(Status::ServiceUnavailable.code()),
            refusal: Some(refusal.reason),
            block: false,
            close: Close::Linger,
            external: None,
        }
    }

    pub(super) fn push_refusal(&mut self, refusal: &Refusal, load: Option<u32>) {
        let id = self.new_id();
        let transmit = self.refusal_transmit(refusal, load);
        self.stopped = true;
        self.queue.push_back(Slot {
            id,
            ticket: None,
            kind: SlotKind::Fixed,
            close_after: true,
            ready: Some(transmit.into()),
            asked_at: None,
        });
    }

    /// Frames a response. `close`: the request asked to close (`Close::AfterWrite`);
    /// `linger`: the response ends the connection because of an error (`Close::Linger`,
    /// also implied by a kind that forces the close).
    pub(super) fn frame(
        &mut self,
        kind: ResponseKind<'_>,
        body: Bytes,
        close: bool,
        linger: bool,
        load: Option<u32>,
    ) -> Transmit {
        let mut response = OutgoingResponse::new(kind, Some(&self.config.node_id));
        response.close = close || linger;
        response.load = load;
        let close = if !response.closes() {
            Close::KeepOpen
        } else if linger || kind.forces_close() {
            Close::Linger
        } else {
            Close::AfterWrite
        };
        let body = if matches!(
            kind,
            ResponseKind::Block { .. } | ResponseKind::Roster { .. }
        ) {
            body
        } else {
            response.error_body()
        };
        encode_into(&response, &mut self.head_buf);
        Transmit {
            head: self.head_buf.split().freeze(),
            body,
            status: Some(kind.status().code()),
            refusal: None,
            block: matches!(kind, ResponseKind::Block { .. }),
            close,
            external: None,
        }
    }

    fn slot_mut(&mut self, id: RequestId) -> Option<&mut Slot<S>> {
        self.queue
            .iter_mut()
            .find(|s| s.id == id && s.ready.is_none())
    }

    /// The application's answer for a [`ServerEvent::Fetch`] or [`ServerEvent::Relay`].
    pub fn handle_source(
        &mut self,
        now: Instant,
        admission: &mut Admission<S>,
        id: RequestId,
        result: SourceResult,
    ) -> Result<(), ServerUsageError> {
        let now = self.clamp(now);
        let config = Arc::clone(&self.config);
        let relay = config.relay;
        let slot = self
            .slot_mut(id)
            .ok_or(ServerUsageError::UnknownRequest(id))?;
        let SlotKind::Block { request, relayed } = &mut slot.kind else {
            return Err(ServerUsageError::UnknownRequest(id));
        };
        let close = slot.close_after;
        let (len, body, external) = match result {
            SourceResult::Found(block) => (block.len() as u64, block, None),
            SourceResult::External { len } => {
                (len, Bytes::new(), Some(External { request: id, len }))
            }
            other => {
                let kind = match other {
                    SourceResult::Found(_) | SourceResult::External { .. } => return Ok(()),
                    SourceResult::Miss | SourceResult::Corrupt => {
                        let miss = if other == SourceResult::Corrupt {
                            ResponseKind::Corrupt
                        } else {
                            ResponseKind::NotFound
                        };
                        match (relay, &request.origin, *relayed) {
                            (Some(config), Some(_), false) => {
                                match relay::on_miss(&config, request.hop.0) {
                                    Ok(next) => {
                                        *relayed = true;
                                        slot.asked_at = Some(now);
                                        let mut relayed_request = request.clone();
                                        relayed_request.hop = Hop(next);
                                        self.events.push_back(ServerEvent::Relay {
                                            id,
                                            request: relayed_request,
                                        });
                                        return Ok(());
                                    }
                                    Err(_) => miss,
                                }
                            }
                            _ => miss,
                        }
                    }
                    SourceResult::Failed => ResponseKind::InternalServerError,
                    SourceResult::UpstreamRefused { status } if (100..=999).contains(&status) => {
                        ResponseKind::UpstreamRefused {
                            upstream_status: status,
                        }
                    }
                    SourceResult::UpstreamRefused { .. } => ResponseKind::InternalServerError,
                };
                let transmit =
                    self.frame(kind, Bytes::new(), close, false, advertised_load(admission));
                self.set_ready(id, transmit);
                return Ok(());
            }
        };
        let ticket = slot
            .ticket
            .as_mut()
            .ok_or(ServerUsageError::UnknownRequest(id))?;
        if let Err(refusal) = admission.reserve_bytes(ticket, len) {
            let load = advertised_load(admission);
            let transmit = self.refusal_transmit(&refusal, load);
            self.stopped = true;
            self.set_ready(id, transmit);
            return Ok(());
        }
        let load = advertised_load(admission);
        // Framed when handed out: the driver holds its admission lock for this call.
        let found = FoundBlock {
            len,
            body,
            close,
            load,
            external,
        };
        self.set_ready(id, Ready::Block(found));
        Ok(())
    }

    pub(super) fn set_ready(&mut self, id: RequestId, ready: impl Into<Ready>) {
        if let Some(slot) = self.queue.iter_mut().find(|s| s.id == id) {
            slot.asked_at = None;
            slot.ready = Some(ready.into());
        }
    }

    /// The application's roster for a [`ServerEvent::Roster`]. The node's own entry is
    /// added if missing (members always include the sender).
    pub fn handle_roster(
        &mut self,
        now: Instant,
        id: RequestId,
        roster: &Roster,
    ) -> Result<(), ServerUsageError> {
        self.clamp(now);
        let slot = self
            .slot_mut(id)
            .ok_or(ServerUsageError::UnknownRequest(id))?;
        if !matches!(slot.kind, SlotKind::Roster) {
            return Err(ServerUsageError::UnknownRequest(id));
        }
        let close = slot.close_after;
        let body = if roster.contains(&self.config.node_id) {
            roster.to_json()
        } else {
            let mut repaired = roster.clone();
            repaired.ensure_member(&self.config.node_id, &self.config.advertised_addr);
            repaired.to_json()
        };
        let body = Bytes::from(body);
        let transmit = self.frame(
            ResponseKind::Roster {
                content_length: body.len() as u64,
            },
            body,
            close,
            false,
            // Roster answers are not block reads; nobody spreads by them.
            None,
        );
        self.set_ready(id, transmit);
        Ok(())
    }

    /// The next response to write, strictly in request order: a response whose source
    /// answered early waits for the ones before it. `now` starts its
    /// [`ServerTimer::SendProgress`] clock. `None` once finished.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let now = self.clamp(now);
        if self.finished || self.output_ended {
            return None;
        }
        let ready = self.queue.front().is_some_and(|s| s.ready.is_some());
        if !ready {
            return None;
        }
        let mut slot = self.queue.pop_front()?;
        let transmit = match slot.ready.take()? {
            Ready::Framed(transmit) => transmit,
            Ready::Block(found) => {
                let kind = ResponseKind::Block {
                    content_length: found.len,
                };
                let mut transmit = self.frame(kind, found.body, found.close, false, found.load);
                transmit.external = found.external;
                transmit
            }
        };
        if self.unacked.is_empty() {
            self.send_since = Some(now);
        }
        self.unacked.push_back(Unacked {
            ticket: slot.ticket.take(),
            close: transmit.close,
        });
        // Nothing follows a response that ends the connection (the driver closes or
        // half-closes after it); the requests queued behind it are never answered.
        self.output_ended = transmit.close.ends_connection();
        Some(transmit)
    }

    /// The oldest handed-out, unacknowledged [`Transmit`] has been fully written: release
    /// its request slot and bytes, act on its [`Close`], and decode and begin more
    /// pipelined requests. If it ended the connection, the requests queued behind it are
    /// dropped (slots released, unpolled asks withdrawn). A spurious call (nothing
    /// unacknowledged) is harmless.
    pub fn handle_transmitted(&mut self, now: Instant, admission: &mut Admission<S>) {
        let now = self.clamp(now);
        let Some(done) = self.unacked.pop_front() else {
            return;
        };
        if let Some(ticket) = done.ticket {
            admission.finish_request(now, self.session.as_mut(), ticket);
        }
        self.send_since = (!self.unacked.is_empty()).then_some(now);
        if done.close.ends_connection() {
            // The requests queued behind the response that ended the connection will never
            // be answered: give their slots and bytes back now rather than at `close`, and
            // withdraw the asks for them not yet polled (answers to ones already polled
            // are `Err(UnknownRequest)`, as after a source timeout).
            for slot in self.queue.drain(..) {
                if let Some(ticket) = slot.ticket {
                    admission.finish_request(now, None, ticket);
                }
            }
            self.events.retain(|e| {
                !matches!(
                    e,
                    ServerEvent::Fetch { .. }
                        | ServerEvent::Relay { .. }
                        | ServerEvent::Roster { .. }
                )
            });
        }
        match done.close {
            Close::KeepOpen => {}
            Close::AfterWrite => self.finished = true,
            Close::Linger if self.eof => self.finished = true,
            Close::Linger => {
                // A lingering connection only drains: it gives its session slot back now
                // (as a connection refused at accept never held one), bounded by time
                // alone, so the overload that caused the refusal is not prolonged.
                self.linger_until = Some(now + self.config.linger);
                if let Some(session) = self.session.take() {
                    admission.close_session(now, session);
                }
            }
        }
        if self.finished || self.linger_until.is_some() {
            return;
        }
        if self.in_progress() == 0 {
            self.idle_since = Some(now);
        }
        self.pump_decode();
        self.admit_decoded(now, admission);
        self.check_eof_finished();
    }
}

/// Encodes a head. A node id that cannot be sent as a header value (see
/// [`ServerConfig::validate`]) is dropped rather than failing the response: every other
/// value in our responses is produced by this module and always valid.
fn encode_into(response: &OutgoingResponse<'_>, out: &mut BytesMut) {
    if response.encode(out).is_err() {
        let mut plain = *response;
        plain.node = None;
        let _ = plain.encode(out);
    }
}
