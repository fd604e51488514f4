//! The relay's single-flight table: concurrent relayed misses for one block share one
//! upstream fetch; waiters join and leave it, and its events (start a fetch, answer a
//! waiter, abandon a fetch) are carried out outside its lock.

use std::collections::HashMap;
use std::sync::Arc;

use peerblock_common::client::Peer;
use peerblock_common::relay::{object_origin, upstream_of};
use peerblock_core::server::{FlightEvent, FlightId, RelayFlights, SourceRequest, SourceResult};
use peerblock_core::time::Instant;

use super::relayed_fetch::RelayedFetch;
use super::Shared;
use crate::worker::Worker;

/// The relay's single-flight table (core's [`RelayFlights`]: concurrent relayed misses for
/// one block share one upstream fetch) and the answers its waiters wait for, each a
/// continuation that posts the result to the waiter's connection on its worker.
pub(crate) struct Flights {
    pub(super) table: RelayFlights<u64>,
    pub(super) next: u64,
    pub(super) answers: HashMap<u64, Box<dyn FnOnce(SourceResult) + Send>>,
    /// The upstream request of each flight in flight, to cancel when it is abandoned.
    pub(super) fetches: HashMap<FlightId, crate::client::RequestHandle>,
}

impl Flights {
    /// The events the table has now (taken under the lock, carried out outside it).
    fn events(&mut self) -> Vec<FlightEvent<u64>> {
        std::iter::from_fn(|| self.table.poll_event()).collect()
    }
}

/// Carries out single-flight events outside the table's lock: a fetch starts on worker
/// `w` (only a want, which has its worker, leads one), an answer runs its waiter's
/// continuation, an abandoned flight's fetch runs to its end and its result is ignored.
fn act_on_flights(shared: &Arc<Shared>, mut w: Option<&mut Worker>, events: Vec<FlightEvent<u64>>) {
    for event in events {
        match event {
            FlightEvent::Fetch { id, request } => match w.as_deref_mut() {
                Some(w) => start_flight(shared, w, id, &request),
                None => debug_assert!(false, "a fetch led outside a want"),
            },
            FlightEvent::Answer { waiter, answer, .. } => {
                let answer_to = shared.flights().answers.remove(&waiter);
                if let Some(answer_to) = answer_to {
                    answer_to(answer.into_source_result());
                }
            }
            FlightEvent::Abandon { id, .. } => {
                // Nobody waits any more: the upstream connection is closed at once (its
                // slot and ticket freed), not held until the upstream's deadlines.
                let fetch = shared.flights().fetches.remove(&id);
                if let (Some(handle), Some(relay)) = (fetch, &shared.relay) {
                    relay.client.cancel(handle);
                }
            }
        }
    }
}

/// The result of flight `id`'s upstream fetch: fanned out to its waiters.
fn flight_result(shared: &Arc<Shared>, now: Instant, id: FlightId, result: SourceResult) {
    let events = {
        let mut flights = shared.flights();
        flights.fetches.remove(&id);
        flights.table.handle_result(now, id, result);
        flights.events()
    };
    act_on_flights(shared, None, events);
}

/// A waiter whose request went away (source timeout, connection closed) leaves its flight.
pub(super) fn leave_flight(shared: &Arc<Shared>, now: Instant, waiter: u64) {
    let events = {
        let mut flights = shared.flights();
        flights.table.handle_cancel(now, waiter);
        flights.answers.remove(&waiter);
        flights.events()
    };
    act_on_flights(shared, None, events);
}

/// Joins (or leads) the flight of `request`'s block on worker `w`, waiting at most the
/// source timeout; `answer` runs with its result, `Failed` at once if the table is full
/// (then `None`). The waiter's id, for [`leave_flight`] if its request goes away. A want
/// of the relay itself (a manifest to check a block) has no request to go away: its
/// flight ends by its upstream fetch's own deadlines.
pub(super) fn want_flight(
    shared: &Arc<Shared>,
    w: &mut Worker,
    request: &SourceRequest,
    answer: Box<dyn FnOnce(SourceResult) + Send>,
) -> Option<u64> {
    let now = w.now();
    let deadline = now + shared.config.source_timeout;
    let wanted = {
        let mut flights = shared.flights();
        let waiter = flights.next;
        flights.next += 1;
        match flights.table.handle_want(now, request, waiter, deadline) {
            Ok(want) => {
                if let Some(relay) = &shared.relay {
                    relay.counters.misses.inc();
                    if matches!(want, peerblock_core::server::Want::Joined(_)) {
                        relay.counters.flight_joins.inc();
                    }
                }
                flights.answers.insert(waiter, answer);
                Ok((waiter, flights.events()))
            }
            Err(full) => Err((full, answer)),
        }
    };
    match wanted {
        Ok((waiter, events)) => {
            act_on_flights(shared, Some(w), events);
            Some(waiter)
        }
        Err((full, answer)) => {
            tracing::warn!(path = %request.path, error = %full, "relay refused: single-flight table full");
            answer(SourceResult::Failed);
            None
        }
    }
}

/// Starts flight `id`'s one upstream fetch on worker `w`: through the block's parent, else
/// from the origin, validated (see [`RelayedFetch`]); its result goes to the table.
fn start_flight(shared: &Arc<Shared>, w: &mut Worker, id: FlightId, request: &SourceRequest) {
    let Some(relay) = shared.relay.clone() else {
        flight_result(shared, w.now(), id, SourceResult::Miss);
        return;
    };
    let (origin, at_origin) = upstream_of(request, None);
    let now = relay.client.now();
    let parent = relay.client.with_peers(|peers| {
        relay.parent.of(&request.path, &|p| {
            peerblock_core::read::PeerView::eligible(&*peers, now, p)
        })
    });
    if let Some(object) = object_origin(request) {
        // An object origin: the block's parent, else the Range GET to the origin.
        let results = shared.clone();
        let client = relay.client.clone();
        let relayed = RelayedFetch {
            counters: relay.counters.clone(),
            // `start_range` counts its own origin fetch.
            to_origin: false,
            shared: shared.clone(),
            request: request.clone(),
            worker: w.me(),
            client: relay.client.clone(),
            store: shared.store.clone(),
            path: request.path,
            hop: request.hop,
            origin,
            then: None,
            object: Some(Arc::new(object)),
            answer: Box::new(move |result| flight_result(&results, client.now(), id, result)),
        };
        let handle = match parent {
            Some((pid, addr)) => {
                let peer = match pid {
                    Some(pid) => Peer::new(pid, addr),
                    None => Peer::from_addr(addr),
                };
                Some(relayed.start(w, peer))
            }
            None => relayed.start_range(w),
        };
        let mut flights = shared.flights();
        if let Some(handle) = handle {
            if flights.table.flight_of(&flights.table.key_of(request)) == Some(id) {
                flights.fetches.insert(id, handle);
            }
        }
        return;
    }
    let first = match (parent, at_origin.clone()) {
        (Some((id, addr)), _) => {
            let peer = match id {
                Some(id) => Peer::new(id, addr),
                None => Peer::from_addr(addr),
            };
            // The origin after the parent, unless the parent's answer is final.
            (peer, at_origin, false)
        }
        (None, Some(upstream)) => (Peer::from_addr(upstream), None, true),
        (None, None) => {
            tracing::warn!(?origin, "relay: the origin is not an http://HOST:PORT URL");
            flight_result(shared, w.now(), id, SourceResult::Miss);
            return;
        }
    };
    let (results, client) = (shared.clone(), relay.client.clone());
    let relayed = RelayedFetch {
        counters: relay.counters.clone(),
        to_origin: first.2,
        shared: shared.clone(),
        request: request.clone(),
        worker: w.me(),
        client: relay.client.clone(),
        store: shared.store.clone(),
        path: request.path,
        hop: request.hop,
        origin,
        then: first.1,
        object: None,
        answer: Box::new(move |result| flight_result(&results, client.now(), id, result)),
    };
    let handle = relayed.start(w, first.0);
    let mut flights = shared.flights();
    // Kept only while the flight is still in flight (its fetch may have ended already).
    if flights.table.flight_of(&flights.table.key_of(request)) == Some(id) {
        flights.fetches.insert(id, handle);
    }
}
