//! Single-flight for relays: concurrent relayed misses for one block at one node share one
//! upstream fetch. See [`RelayFlights`].
//!
//! Without it, 64 requesters missing the same block at one relay make 64 upstream fetches
//! (issue 22, item 3). With it, the first relayed miss *leads* a flight (one
//! [`FlightEvent::Fetch`]), the others *join* it, and the one result is handed to every
//! waiter ([`FlightEvent::Answer`]): a `Found` block as the same [`Bytes`] (shared by
//! reference count, never copied), a failure as the same typed outcome.

use std::collections::VecDeque;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::time::{Deadline, Instant};
use crate::wire::{BlockPath, Hop};

use super::connection::{SourceRequest, SourceResult};

/// Default [`FlightConfig::max_flights`]: 512 upstream fetches in flight at once.
///
/// Every flight has at least one waiter and every waiter is a request the node admitted,
/// so a node never needs more flights than its admission allows requests in progress
/// ([`DEFAULT_MAX_REQUESTS`](super::DEFAULT_MAX_REQUESTS), 512): at the default the table
/// never refuses what admission let in.
pub const DEFAULT_MAX_FLIGHTS: usize = 512;

/// Default [`FlightConfig::max_waiters`]: 512 waiters across all flights.
///
/// Every waiter is an admitted request in progress, so admission's
/// [`DEFAULT_MAX_REQUESTS`](super::DEFAULT_MAX_REQUESTS) (512) already bounds them; the
/// table's own bound is that value, so it only binds when the driver's admission is
/// configured larger than the table.
pub const DEFAULT_MAX_WAITERS: usize = 512;

/// Default [`FlightConfig::max_waiters_per_flight`]: 256 waiters share one fetch at most.
///
/// A result is fanned out to every waiter in one call, so this bounds the work (and the
/// events queued) per input; and one hot block can hold at most half of
/// [`DEFAULT_MAX_WAITERS`], so other blocks keep relaying while it flies.
pub const DEFAULT_MAX_WAITERS_PER_FLIGHT: usize = 256;

/// Default [`FlightConfig::max_block_bytes`]: 64 MiB, the most one flight's result may
/// hold.
///
/// The relay fetches without an expected length, so its client buffers up to its body cap
/// ([`client::DEFAULT_MAX_BODY`](crate::client::DEFAULT_MAX_BODY), 64 MiB, also the
/// largest block a manifest may name): that is what one flight can pin before its result
/// is known. A deployment with smaller blocks sets this to its block size (and its relay
/// client's `max_body` to match), which lets more flights fit in
/// [`FlightConfig::max_flight_bytes`].
pub const DEFAULT_MAX_BLOCK_BYTES: u64 = 64 * 1024 * 1024;

/// Default [`FlightConfig::max_flight_bytes`]: 4 GiB, the block bytes all flights may pin
/// at once (each flight is charged [`FlightConfig::max_block_bytes`] while it flies).
///
/// 64 flights at the 64 MiB worst case; with 1 MiB blocks configured, 4096, so the
/// flight count binds first. Without single-flight a node pinned up to one body per
/// relayed request (512 × 64 MiB = 32 GiB at the default bounds); results are shared
/// [`Bytes`], so one fetch's bytes are pinned once however many waiters it has.
pub const DEFAULT_MAX_FLIGHT_BYTES: u64 = 64 * DEFAULT_MAX_BLOCK_BYTES;

/// Waiters one flight holds without a heap allocation (more spill, and the spilled
/// storage is kept for the next flight).
const INLINE_WAITERS: usize = 8;

/// Bounds of a [`RelayFlights`] table. Check with [`FlightConfig::validate`] (the table's
/// constructor does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlightConfig {
    /// Upstream fetches in flight at once (distinct [`FlightKey`]s). Default
    /// [`DEFAULT_MAX_FLIGHTS`].
    pub max_flights: usize,
    /// Waiters across all flights. Default [`DEFAULT_MAX_WAITERS`].
    pub max_waiters: usize,
    /// Waiters sharing one fetch. Default [`DEFAULT_MAX_WAITERS_PER_FLIGHT`].
    pub max_waiters_per_flight: usize,
    /// The most bytes one flight's result may hold, charged to each flight while it flies.
    /// A `Found` longer than this is answered `Failed` to every waiter. Default
    /// [`DEFAULT_MAX_BLOCK_BYTES`].
    pub max_block_bytes: u64,
    /// The bytes all flights may pin at once: a new flight leads only while
    /// `(flights + 1) × max_block_bytes` stays within it. Default
    /// [`DEFAULT_MAX_FLIGHT_BYTES`].
    pub max_flight_bytes: u64,
    /// Whether requests for the same block and origin share one fetch whatever their hop
    /// ([`FlightKey`], "Hop"); the fetch carries its lead's hop. Safe only where no request
    /// a flight causes can come back to the node that leads it: with parents by placement,
    /// where each relay asks a holder strictly nearer to the block's key, so a chain of
    /// relays never returns to a node it passed. Default `false` (a fixed or configured
    /// parent can form a loop).
    pub share_across_hops: bool,
}

impl Default for FlightConfig {
    fn default() -> Self {
        FlightConfig {
            max_flights: DEFAULT_MAX_FLIGHTS,
            max_waiters: DEFAULT_MAX_WAITERS,
            max_waiters_per_flight: DEFAULT_MAX_WAITERS_PER_FLIGHT,
            max_block_bytes: DEFAULT_MAX_BLOCK_BYTES,
            max_flight_bytes: DEFAULT_MAX_FLIGHT_BYTES,
            share_across_hops: false,
        }
    }
}

/// A [`FlightConfig`] that cannot work; each names the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlightConfigError {
    /// A bound is zero: nothing could ever fly.
    #[error("flight config: {field} must be at least 1")]
    Zero {
        /// The field.
        field: &'static str,
    },
    /// `max_block_bytes` is above `max_flight_bytes`: not one flight could lead.
    #[error(
        "flight config: max_block_bytes ({max_block_bytes}) is above max_flight_bytes ({max_flight_bytes})"
    )]
    BlockAboveFlightBytes {
        /// The configured `max_block_bytes`.
        max_block_bytes: u64,
        /// The configured `max_flight_bytes`.
        max_flight_bytes: u64,
    },
}

impl FlightConfig {
    /// Checks that every bound is at least 1 and that one flight fits the byte bound.
    pub fn validate(&self) -> Result<(), FlightConfigError> {
        let counts = [
            ("max_flights", self.max_flights as u64),
            ("max_waiters", self.max_waiters as u64),
            ("max_waiters_per_flight", self.max_waiters_per_flight as u64),
            ("max_block_bytes", self.max_block_bytes),
            ("max_flight_bytes", self.max_flight_bytes),
        ];
        if let Some((field, _)) = counts.iter().find(|(_, v)| *v == 0) {
            return Err(FlightConfigError::Zero { field });
        }
        if self.max_block_bytes > self.max_flight_bytes {
            return Err(FlightConfigError::BlockAboveFlightBytes {
                max_block_bytes: self.max_block_bytes,
                max_flight_bytes: self.max_flight_bytes,
            });
        }
        Ok(())
    }
}

/// What requests may share one fetch: the same block, relayed with the same hop and the
/// same `X-DART-Origin` (compared byte for byte).
///
/// - **Hop**: a request that came back to this node around a relay loop carries a higher
///   hop than the flight it would wait on, so it leads a fetch of its own, which the hop
///   bound ends as it does without single-flight. Keyed by path alone, it would wait on
///   itself until its deadline. Where relays cannot loop (parents by placement),
///   [`FlightConfig::share_across_hops`] keys by block and origin alone
///   ([`RelayFlights::key_of`]): a reader's request (hop 0) and a relay's (hop 1) for one
///   block at its parent then share one fetch instead of asking the origin twice.
/// - **Origin**: the upstream's answer may depend on the requester's credential (an
///   expired signed link is refused `403` for that requester only), so only requests that
///   would send the same upstream request share its answer.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlightKey {
    /// The block.
    pub path: BlockPath,
    /// The hop the upstream request carries (already incremented by the server).
    pub hop: Hop,
    /// `X-DART-Origin` (a shared slice of the lead's request head: no copy).
    pub origin: Option<Bytes>,
}

impl FlightKey {
    /// The key of a [`ServerEvent::Relay`](super::ServerEvent::Relay)'s request.
    pub fn of(request: &SourceRequest) -> FlightKey {
        FlightKey {
            path: request.path,
            hop: request.hop,
            origin: request.origin.clone(),
        }
    }

    /// The upstream request a flight of this key makes.
    pub fn request(&self) -> SourceRequest {
        SourceRequest {
            path: self.path,
            origin: self.origin.clone(),
            hop: self.hop,
        }
    }
}

/// Names one flight for its whole life; never reused by a table. A result is matched to
/// its flight by this id, so the late result of an abandoned flight never answers the
/// waiters of a newer flight of the same key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlightId(u64);

impl FlightId {
    /// The id's number (flights are numbered from 0 in the order they lead).
    pub fn get(self) -> u64 {
        self.0
    }
}

/// How a want was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// No fetch was in flight for the key: this waiter leads one, and a
    /// [`FlightEvent::Fetch`] for it is queued.
    Lead(FlightId),
    /// The waiter shares the fetch already in flight.
    Joined(FlightId),
    /// The deadline had already passed: the waiter was answered
    /// [`FlightAnswer::TimedOut`] at once (an [`FlightEvent::Answer`] is queued), and
    /// nothing flies for it.
    Expired,
}

/// A want refused because one of the table's own bounds is reached: a local condition of
/// this node, never the requester's or the upstream's fault. Answer the request as a
/// failed relay (`SourceResult::Failed`, a 500: the reader asks another holder) and charge
/// nobody.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlightsFull {
    /// [`FlightConfig::max_flights`] fetches are in flight.
    #[error("relay flights full (local bound): {max} fetches in flight")]
    Flights {
        /// The bound.
        max: usize,
    },
    /// [`FlightConfig::max_waiters`] waiters wait across all flights.
    #[error("relay flights full (local bound): {max} waiters in all")]
    Waiters {
        /// The bound.
        max: usize,
    },
    /// [`FlightConfig::max_waiters_per_flight`] waiters share this key's fetch.
    #[error("relay flight full (local bound): {max} waiters share this fetch")]
    WaitersPerFlight {
        /// The bound.
        max: usize,
    },
    /// Another flight would take the bytes pinned past [`FlightConfig::max_flight_bytes`].
    #[error("relay flights full (local bound): {max} bytes pinned by fetches in flight")]
    Bytes {
        /// The bound.
        max: u64,
    },
}

/// What one waiter is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlightAnswer {
    /// The flight's outcome, the same for every waiter of the flight (a `Found` block is
    /// the same [`Bytes`] for each).
    Fetched(SourceResult),
    /// The waiter's own deadline passed before the result: it alone leaves the flight.
    TimedOut,
}

impl FlightAnswer {
    /// The answer for [`ServerConnection::handle_source`](super::ServerConnection::handle_source):
    /// the outcome, or `Failed` (500) for a timeout (the same as the server's own source
    /// timeout answers).
    pub fn into_source_result(self) -> SourceResult {
        match self {
            FlightAnswer::Fetched(result) => result,
            FlightAnswer::TimedOut => SourceResult::Failed,
        }
    }
}

/// What the table tells the driver. Drain with [`RelayFlights::poll_event`] after every
/// input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlightEvent<W> {
    /// Start one upstream fetch of `request` (the lead's relayed request: path, origin,
    /// hop); answer it with [`RelayFlights::handle_result`]`(now, id, ..)`.
    Fetch {
        /// The flight.
        id: FlightId,
        /// What to fetch.
        request: SourceRequest,
    },
    /// Answer `waiter`'s request with `answer` (the waiter has left the table).
    Answer {
        /// The waiter.
        waiter: W,
        /// Its flight (`None` for [`Want::Expired`], which never flew).
        flight: Option<FlightId>,
        /// The answer.
        answer: FlightAnswer,
    },
    /// Nobody waits for flight `id` any more (every waiter cancelled or timed out): cancel
    /// its upstream fetch. A result that still arrives is ignored.
    Abandon {
        /// The flight.
        id: FlightId,
        /// Its block (for logs).
        path: BlockPath,
    },
}

/// Why the table wants to be woken: a waiter's deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlightTimer<W> {
    /// `waiter`'s deadline: it is answered [`FlightAnswer::TimedOut`].
    Waiter(W),
}

#[derive(Clone, Copy, Debug)]
struct Waiter<W> {
    waiter: W,
    deadline: Instant,
}

type Waiters<W> = SmallVec<[Waiter<W>; INLINE_WAITERS]>;

#[derive(Clone, Debug)]
struct Flight<W> {
    id: FlightId,
    key: FlightKey,
    /// In arrival order: the lead first.
    waiters: Waiters<W>,
}

/// The relay single-flight table of one node: waiters per [`FlightKey`], bounded in
/// flights, waiters and pinned bytes, each waiter with its own deadline.
///
/// `W` is the driver's handle for a waiting request (a connection key and its
/// [`RequestId`](super::RequestId), say). Handles must be distinct among the waiters
/// currently in the table.
///
/// # What it does
///
/// A relayed miss ([`ServerEvent::Relay`](super::ServerEvent::Relay)) becomes a want:
/// the first want of a key leads a flight (one [`FlightEvent::Fetch`]), later wants of the
/// same key join it. The flight's result goes to every waiter as the same
/// [`FlightAnswer::Fetched`] outcome, in arrival order; a failure (`Miss`, `Corrupt`,
/// `Failed`, `UpstreamRefused`) fans out exactly like a block. A waiter whose deadline
/// passes first is answered [`FlightAnswer::TimedOut`] alone; the others keep waiting.
/// When the last waiter leaves (timed out or cancelled) the flight is abandoned
/// ([`FlightEvent::Abandon`]). The table never holds a result: answers are handed out as
/// events at once, so a block's bytes are pinned by the responses, not here.
///
/// # Driving contract
///
/// - Inputs: [`handle_want`](Self::handle_want), [`handle_result`](Self::handle_result),
///   [`handle_cancel`](Self::handle_cancel), [`handle_timeout`](Self::handle_timeout).
///   Each takes `now` and first answers every waiter whose deadline is at or before `now`
///   with `TimedOut`: no waiter is ever answered a result at or after its deadline.
/// - Events: after every input, call [`poll_event`](Self::poll_event) until it returns
///   `None`. Events come in the order the inputs caused them, and within one input in a
///   fixed order (flights in the order they led, waiters in arrival order): never hash
///   order.
/// - Fetches: answer every [`FlightEvent::Fetch`] once with `handle_result(now, id,
///   result)`, unless an [`FlightEvent::Abandon`] for it came first (then cancel the fetch;
///   a result that still arrives is ignored). A result for an unknown or finished flight
///   is ignored. A relayed fetch never yields `SourceResult::External` (bytes must be in
///   memory to be shared): it is answered `Failed`, as is a `Found` longer than
///   [`FlightConfig::max_block_bytes`].
/// - Waiters: each want is answered exactly once (an [`FlightEvent::Answer`]) unless it is
///   cancelled with `handle_cancel(now, waiter)` (its connection closed), which leaves no
///   answer. A refused want ([`FlightsFull`]) was never in the table.
/// - Time: [`poll_timeout`](Self::poll_timeout) gives the earliest waiter deadline and its
///   [`FlightTimer`]; call `handle_timeout(now)` at or after it. A spurious or early call
///   is harmless, and after `handle_timeout(now)` no deadline at or before `now` remains.
///   Time must not go backwards; if it does, the table uses the latest instant it has seen
///   (it never panics).
/// - Cost: once warmed up (the tables have grown to the load), no input allocates: the
///   flights and the key index are sorted vectors whose capacity is kept, a flight holds
///   up to 8 waiters inline, and spilled waiter lists are kept for later flights. A want
///   finds its key in `O(log flights)`; cancels, timeouts and `poll_timeout` scan the
///   waiters (`O(waiters)`, at most [`FlightConfig::max_waiters`]). No clock reads, no
///   randomness.
#[derive(Clone, Debug)]
pub struct RelayFlights<W> {
    config: FlightConfig,
    now: Instant,
    /// Flights in the order they led, so sorted by id (ids only grow).
    flights: Vec<Flight<W>>,
    /// The flights' keys, sorted, each with its flight.
    by_key: Vec<(FlightKey, FlightId)>,
    next_id: u64,
    waiters: usize,
    events: VecDeque<FlightEvent<W>>,
    /// Emptied waiter lists kept for the next flights (their spilled capacity reused).
    spare: Vec<Waiters<W>>,
}

impl<W: Copy + Eq> RelayFlights<W> {
    /// An empty table starting at `now`. Fails only if `config` is out of range
    /// ([`FlightConfig::validate`]).
    pub fn new(config: FlightConfig, now: Instant) -> Result<Self, FlightConfigError> {
        config.validate()?;
        Ok(RelayFlights {
            config,
            now,
            flights: Vec::new(),
            by_key: Vec::new(),
            next_id: 0,
            waiters: 0,
            events: VecDeque::new(),
            spare: Vec::new(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &FlightConfig {
        &self.config
    }

    /// Fetches in flight.
    pub fn flights(&self) -> usize {
        self.flights.len()
    }

    /// Waiters across all flights.
    pub fn waiters(&self) -> usize {
        self.waiters
    }

    /// Bytes charged to the flights in flight (`flights × max_block_bytes`).
    pub fn pinned_bytes(&self) -> u64 {
        (self.flights.len() as u64).saturating_mul(self.config.max_block_bytes)
    }

    /// The key `request`'s want is filed under: [`FlightKey::of`], with the hop cleared
    /// when [`FlightConfig::share_across_hops`] is set.
    pub fn key_of(&self, request: &SourceRequest) -> FlightKey {
        let mut key = FlightKey::of(request);
        if self.config.share_across_hops {
            key.hop = Hop(0);
        }
        key
    }

    /// The flight a key's wants currently join, if one is in flight (look a request's
    /// key up with [`key_of`](Self::key_of)).
    pub fn flight_of(&self, key: &FlightKey) -> Option<FlightId> {
        let at = self.key_index(key).ok()?;
        Some(self.by_key[at].1)
    }

    /// Where `key` is in the key index (or would be inserted).
    fn key_index(&self, key: &FlightKey) -> Result<usize, usize> {
        self.by_key.binary_search_by(|(k, _)| k.cmp(key))
    }

    /// Where flight `id` is in `flights`.
    fn flight_index(&self, id: FlightId) -> Option<usize> {
        self.flights.binary_search_by_key(&id, |f| f.id).ok()
    }

    /// Takes flight `at` out of both tables.
    fn remove_flight(&mut self, at: usize) -> Flight<W> {
        let flight = self.flights.remove(at);
        if let Ok(k) = self.key_index(&flight.key) {
            self.by_key.remove(k);
        }
        flight
    }

    fn clock(&mut self, now: Instant) -> Instant {
        if now > self.now {
            self.now = now;
        }
        self.now
    }

    /// A relayed miss: `waiter` wants the block of `request` (the `Relay` event's
    /// request) by `deadline`. Leads a flight, joins the one in flight, or is refused at a
    /// bound (nothing is recorded then).
    pub fn handle_want(
        &mut self,
        now: Instant,
        request: &SourceRequest,
        waiter: W,
        deadline: Instant,
    ) -> Result<Want, FlightsFull> {
        let now = self.clock(now);
        self.expire(now);
        debug_assert!(
            !self
                .flights
                .iter()
                .any(|f| f.waiters.iter().any(|w| w.waiter == waiter)),
            "waiter handles must be distinct among waiters in the table"
        );
        if deadline <= now {
            self.events.push_back(FlightEvent::Answer {
                waiter,
                flight: None,
                answer: FlightAnswer::TimedOut,
            });
            return Ok(Want::Expired);
        }
        if self.waiters >= self.config.max_waiters {
            return Err(FlightsFull::Waiters {
                max: self.config.max_waiters,
            });
        }
        let entry = Waiter { waiter, deadline };
        let key = self.key_of(request);
        let slot = match self.key_index(&key) {
            Ok(k) => {
                let id = self.by_key[k].1;
                let max = self.config.max_waiters_per_flight;
                let at = self.flight_index(id).expect("an indexed flight exists");
                let flight = &mut self.flights[at];
                if flight.waiters.len() >= max {
                    return Err(FlightsFull::WaitersPerFlight { max });
                }
                flight.waiters.push(entry);
                self.waiters += 1;
                return Ok(Want::Joined(id));
            }
            Err(slot) => slot,
        };
        if self.flights.len() >= self.config.max_flights {
            return Err(FlightsFull::Flights {
                max: self.config.max_flights,
            });
        }
        if self
            .pinned_bytes()
            .saturating_add(self.config.max_block_bytes)
            > self.config.max_flight_bytes
        {
            return Err(FlightsFull::Bytes {
                max: self.config.max_flight_bytes,
            });
        }
        let id = FlightId(self.next_id);
        self.next_id += 1;
        let mut waiters = self.spare.pop().unwrap_or_default();
        waiters.push(entry);
        self.by_key.insert(slot, (key.clone(), id));
        self.events.push_back(FlightEvent::Fetch {
            id,
            request: SourceRequest {
                hop: request.hop,
                ..key.request()
            },
        });
        self.flights.push(Flight { id, key, waiters });
        self.waiters += 1;
        Ok(Want::Lead(id))
    }

    /// Flight `id`'s upstream fetch ended with `result`: every waiter still waiting gets
    /// it (after those whose deadline is at or before `now` are answered `TimedOut`), and
    /// the flight ends. Ignored for an unknown, abandoned or finished flight.
    pub fn handle_result(&mut self, now: Instant, id: FlightId, result: SourceResult) {
        let now = self.clock(now);
        self.expire(now);
        let Some(at) = self.flight_index(id) else {
            return;
        };
        let flight = self.remove_flight(at);
        let result = match result {
            SourceResult::Found(bytes) if (bytes.len() as u64) > self.config.max_block_bytes => {
                SourceResult::Failed
            }
            SourceResult::External { .. } => SourceResult::Failed,
            other => other,
        };
        let mut waiters = flight.waiters;
        self.waiters -= waiters.len();
        for w in waiters.drain(..) {
            self.events.push_back(FlightEvent::Answer {
                waiter: w.waiter,
                flight: Some(id),
                answer: FlightAnswer::Fetched(result.clone()),
            });
        }
        self.spare.push(waiters);
    }

    /// `waiter` went away (its connection closed, its request was answered otherwise): it
    /// leaves its flight without an answer. The flight goes on for the others; if it was
    /// the last, the flight is abandoned ([`FlightEvent::Abandon`]). Unknown waiters are
    /// ignored.
    pub fn handle_cancel(&mut self, now: Instant, waiter: W) {
        let now = self.clock(now);
        self.expire(now);
        let found = self.flights.iter_mut().enumerate().find_map(|(at, f)| {
            let w = f.waiters.iter().position(|w| w.waiter == waiter)?;
            f.waiters.remove(w);
            Some(at)
        });
        if let Some(at) = found {
            self.waiters -= 1;
            if self.flights[at].waiters.is_empty() {
                self.abandon(at);
            }
        }
    }

    /// Answers every waiter whose deadline is at or before `now` with `TimedOut` and
    /// abandons the flights left without waiters. Harmless when nothing is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock(now);
        self.expire(now);
    }

    /// The earliest waiter deadline, and whose.
    pub fn poll_timeout(&self) -> Option<Deadline<FlightTimer<W>>> {
        let mut best: Option<Deadline<FlightTimer<W>>> = None;
        for w in self.flights.iter().flat_map(|f| f.waiters.iter()) {
            if best.is_none_or(|b| w.deadline < b.at) {
                best = Some(Deadline {
                    at: w.deadline,
                    timer: FlightTimer::Waiter(w.waiter),
                });
            }
        }
        best
    }

    /// The next event, if any. Drain until `None` after every input.
    pub fn poll_event(&mut self) -> Option<FlightEvent<W>> {
        self.events.pop_front()
    }

    /// Answers the waiters due at `now` and abandons the flights they empty.
    fn expire(&mut self, now: Instant) {
        if self.poll_timeout().is_none_or(|d| d.at > now) {
            return;
        }
        let mut at = 0;
        while at < self.flights.len() {
            let flight = &mut self.flights[at];
            let (id, before) = (flight.id, flight.waiters.len());
            let events = &mut self.events;
            flight.waiters.retain(|w| {
                let due = w.deadline <= now;
                if due {
                    events.push_back(FlightEvent::Answer {
                        waiter: w.waiter,
                        flight: Some(id),
                        answer: FlightAnswer::TimedOut,
                    });
                }
                !due
            });
            self.waiters -= before - flight.waiters.len();
            if flight.waiters.is_empty() {
                self.abandon(at);
            } else {
                at += 1;
            }
        }
    }

    /// Flight `at` has no waiter left: it ends, and the driver is told to drop its fetch.
    fn abandon(&mut self, at: usize) {
        let flight = self.remove_flight(at);
        self.events.push_back(FlightEvent::Abandon {
            id: flight.id,
            path: flight.key.path,
        });
        self.spare.push(flight.waiters);
    }
}
