//! The read-round state machine. See [`Read`].

use smallvec::SmallVec;

use crate::placement::{Key, PeerId};
use crate::rng::{seeded, ChaCha8Rng};
use crate::time::{Deadline, Duration, Instant};

use super::candidates::{ranked_distance, unranked_distance, Candidates, Tried};
use super::choice::ChoiceOption;
use super::config::{
    Absence, HedgeRule, ReadConfig, ReadConfigError, MAX_CANDIDATES, MAX_GETS_IN_FLIGHT,
};
use super::lookup::LookupPeer;
use super::outcome::{GetId, GetOutcome, OriginOutcome, ReadEvent, ReadOutcome};
use super::timers::{ReadTimer, Timer, Timers};
use super::view::PeerView;
use crate::placement::Distance;

/// Most peers one round remembers as skipped for a refusal (beyond refused candidates).
/// Bounded like the candidate list: a view listing thousands of refusals costs the read no
/// more than [`MAX_CANDIDATES`] entries; the nearest are kept, since only near peers can
/// count as possible holders.
pub const MAX_SKIPPED: usize = MAX_CANDIDATES;

/// One GET in flight. Its deadline is the timer row of its slot ([`Timer::Get`]).
#[derive(Clone, Copy, Debug)]
struct InFlight {
    id: GetId,
    peer: PeerId,
    sent_at: Instant,
    /// Its row in the timer table, `0..MAX_GETS_IN_FLIGHT`, distinct among GETs in flight.
    slot: usize,
    /// Whether the driver reported progress (response head or body bytes).
    progressed: bool,
}

/// Where the read is.
#[derive(Clone, Debug)]
enum Phase {
    /// A round is about to start: the next event is its lookup.
    Start,
    /// A round is running: GETs go out as candidates allow.
    Round {
        /// Whether the lookup answered (or timed out); a round ends only after it has.
        lookup_done: bool,
    },
    /// Between rounds (refusal wait or retry pause); [`Timer::Wait`] is armed.
    Waiting,
    /// Peers could not serve the record; the origin is asked.
    Origin {
        requested: bool,
        /// What to report if the origin fails too.
        fallback: ReadOutcome,
    },
    /// The outcome, until `Done` is emitted (then `None`).
    Finished(Option<ReadOutcome>),
}

/// Counters describing how a read went (for reports and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Rounds started (each begins with a lookup).
    pub rounds: u32,
    /// GETs sent.
    pub gets: u32,
    /// Hedge GETs sent (a second GET while one was in flight).
    pub hedges: u32,
    /// GETs that reported progress ([`Read::handle_get_progress`]) while in flight.
    pub progressed: u32,
    /// Waits for refusing possible holders.
    pub refusal_waits: u32,
    /// Retry pauses with nobody refusing.
    pub plain_retries: u32,
    /// GETs answered with an invalid copy ([`GetOutcome::Invalid`]).
    pub invalid: u32,
}

/// One read of one record: the read-round state machine.
///
/// # What it does
///
/// Each round starts with a lookup ([`ReadEvent::Lookup`]). GETs go first to the close group
/// as currently known (the nearest `close_group_size` candidates), picked among the members
/// not yet asked by the configured [`Spread`](super::Spread); past the close group, nearest
/// first. Peers the [`PeerView`] calls ineligible or refusing are never asked. A single
/// GET still silent after the hedge delay (or, under [`HedgeRule::AfterDelay`], merely
/// unanswered) gets a second one alongside; never more than [`MAX_GETS_IN_FLIGHT`]. The
/// first `Found` ends the read (the other GET is cancelled). A round that finds nothing
/// ends, in this order: waiting out refusing possible holders (up to `max_refusal_waits`,
/// then [`ReadOutcome::Busy`]); if a peer answered with an invalid copy
/// ([`GetOutcome::Invalid`]: never asked again by this read), a retry round while a
/// failed or refusing peer may still have a valid copy, then [`ReadOutcome::Invalid`]
/// (never `Absent`); [`ReadOutcome::Absent`] if a close group's worth of peers answered
/// `NotFound`; one retry round after `retry_delay`; then [`ReadOutcome::Unavailable`]. With `origin` configured, a read that peers cannot serve
/// ends with [`ReadEvent::FetchOrigin`]. `docs/read.md` has the full rules.
///
/// # Driving contract
///
/// - Inputs: [`handle_lookup`](Self::handle_lookup) (and optionally
///   [`handle_lookup_progress`](Self::handle_lookup_progress) for early reads),
///   [`handle_get_progress`](Self::handle_get_progress), [`handle_get`](Self::handle_get),
///   [`handle_origin`](Self::handle_origin), [`handle_timeout`](Self::handle_timeout) and
///   [`cancel`](Self::cancel). Each takes `now`.
/// - Events: after every input (and after construction), call
///   [`poll_event`](Self::poll_event) until it returns `None`, then arm a timer for
///   [`poll_timeout`](Self::poll_timeout). Decisions are taken inside `poll_event`, which
///   is why it takes the [`PeerView`]: eligibility, refusals and load are read at that
///   moment. [`ReadEvent::Done`] is emitted exactly once, last; from then on
///   [`is_finished`](Self::is_finished) is true, `poll_event` and `poll_timeout` return
///   `None` and inputs are ignored.
/// - Lookups: answer [`ReadEvent::Lookup`] with `handle_lookup(now, peers)` (any order, any
///   count; the read keeps the nearest [`MAX_CANDIDATES`]). An integrator that already
///   knows the candidates (roster placement) may call `handle_lookup` before the first
///   `poll_event`; that round then emits no `Lookup`. Results arriving outside a round
///   are ignored.
/// - GETs: answer each [`ReadEvent::Get`] exactly once with `handle_get(now, id, outcome)`,
///   unless it was cancelled ([`ReadEvent::Cancel`]); late or unknown ids are ignored.
///   Report `handle_get_progress(now, id)` when the GET's response head arrives (and, if
///   convenient, as body bytes flow; repeats are harmless): under the default
///   [`HedgeRule::OnSilence`] only a silent GET is hedged. A GET the driver never answers
///   is abandoned at its deadline, `get_timeout` after it was sent ([`ReadTimer::Get`],
///   then a `Cancel`).
/// - Time: `handle_timeout(now)` at or after the `poll_timeout` deadline; a spurious or
///   early call is harmless. `poll_timeout` gives the earliest deadline of the timer table
///   and its reason ([`ReadTimer`]); it never returns a deadline that stays in the past
///   after `handle_timeout`. Time must not go backwards; if it does, the machine uses the
///   latest instant it has seen instead (it never panics).
/// - End of life: `cancel(now)` ends the read at once: a `Cancel` for every GET in flight,
///   then `Done(`[`ReadOutcome::Cancelled`]`)`. It is idempotent and does nothing once the
///   read has its outcome (a pending `Done` is still emitted as it was). An outstanding
///   origin fetch is the driver's to drop; its answer is ignored.
/// - Randomness: the machine owns a ChaCha8 generator seeded in [`Read::new`], drawn only
///   by the spreading choice. Same seed, same inputs, same view answers: same events.
#[derive(Clone, Debug)]
pub struct Read {
    key: Key,
    config: ReadConfig,
    rng: ChaCha8Rng,
    now: Instant,
    phase: Phase,
    candidates: Candidates,
    in_flight: SmallVec<[InFlight; MAX_GETS_IN_FLIGHT]>,
    /// Cancels to emit before anything else.
    cancels: SmallVec<[GetId; MAX_GETS_IN_FLIGHT]>,
    timers: Timers,
    /// The hedge timer fired while no candidate could take the hedge; send it as soon as
    /// one can.
    hedge_due: bool,
    /// Peers seen skipped for a refusal this round (view listing at round start, or found
    /// refusing when chosen), nearest kept.
    skipped: SmallVec<[(Distance, PeerId); 4]>,
    /// Whether this round's view of refusals has been recorded in `skipped`.
    round_snapshot: bool,
    next_get: u32,
    stats: ReadStats,
    /// Candidates are ordered by the rank their lookup gave them
    /// ([`handle_lookup_ranked`](Read::handle_lookup_ranked)), not by XOR distance.
    ranked: bool,
}

impl Read {
    /// A read of `key` starting at `now`, its spreading choice seeded with `seed`.
    ///
    /// Fails only if `config` is out of range ([`ReadConfig::validate`]).
    pub fn new(
        key: Key,
        config: ReadConfig,
        now: Instant,
        seed: u64,
    ) -> Result<Self, ReadConfigError> {
        config.validate()?;
        Ok(Read {
            key,
            config,
            rng: seeded(seed),
            now,
            phase: Phase::Start,
            candidates: Candidates::default(),
            in_flight: SmallVec::new(),
            cancels: SmallVec::new(),
            timers: Timers::default(),
            hedge_due: false,
            skipped: SmallVec::new(),
            round_snapshot: false,
            next_get: 0,
            stats: ReadStats::default(),
            ranked: false,
        })
    }

    /// The record this read is for.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The configuration in force.
    pub fn config(&self) -> &ReadConfig {
        &self.config
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
    }

    /// GETs currently in flight (never more than [`MAX_GETS_IN_FLIGHT`]).
    pub fn gets_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether `Done` has been emitted: the read is over and ignores every input.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished(None))
    }

    fn clock(&mut self, now: Instant) -> Instant {
        if now > self.now {
            self.now = now;
        }
        self.now
    }

    /// Early lookup results: peers discovery has found so far, before it finishes. GETs may
    /// go to them at once (choosing within the close group they form, then nearest-first);
    /// the round cannot end until [`handle_lookup`](Self::handle_lookup) is called or the
    /// lookup times out.
    pub fn handle_lookup_progress(&mut self, now: Instant, peers: &[PeerId]) {
        self.lookup_progress(now, peers.iter().map(|&p| (p, None)));
    }

    /// [`handle_lookup_progress`](Self::handle_lookup_progress) with per-key load hints
    /// (see [`LookupPeer`]).
    pub fn handle_lookup_progress_peers(&mut self, now: Instant, peers: &[LookupPeer]) {
        self.lookup_progress(now, peers.iter().map(|p| (p.id, p.bounded_key_load())));
    }

    fn lookup_progress(
        &mut self,
        now: Instant,
        peers: impl Iterator<Item = (PeerId, Option<u32>)>,
    ) {
        self.clock(now);
        if let Phase::Start | Phase::Round { .. } = self.phase {
            self.merge(peers);
        }
    }

    /// The lookup's answer: the peers discovery found, in any order. Completes the round's
    /// lookup. See the driving contract for calls before the first `poll_event`.
    pub fn handle_lookup(&mut self, now: Instant, peers: &[PeerId]) {
        self.lookup(now, peers.iter().map(|&p| (p, None)));
    }

    /// [`handle_lookup`](Self::handle_lookup) with per-key load hints: each peer's reply
    /// may say how many GETs for this key it received recently ([`LookupPeer`]). The
    /// read keeps each candidate's latest hint (a peer without one keeps what an earlier
    /// lookup of this read said) and the load-aware spreads compare them
    /// (see `docs/read.md`, "Load-aware first reads"). Same contract as `handle_lookup` otherwise.
    pub fn handle_lookup_peers(&mut self, now: Instant, peers: &[LookupPeer]) {
        self.lookup(now, peers.iter().map(|p| (p.id, p.bounded_key_load())));
    }

    /// The lookup's answer in placement order, best owner first (roster deployments:
    /// rendezvous owners, whose order XOR distance does not follow). A peer's position is
    /// its rank: the read orders its candidates by rank instead of by XOR distance, so the
    /// first `close_group_size` are the close group (spread over, and whose `NotFound`s
    /// prove absence) and the rest are the fallbacks past it, asked nearest-first when no
    /// close-group member is left to ask (a close group that is silent, refusing, failing
    /// or serving invalid copies). A peer keeps the rank it was first given; a peer the
    /// view lists as refusing but no lookup ranked orders after every ranked one. Use
    /// ranked lookups for every round of a read, or none. Same contract as
    /// [`handle_lookup_peers`](Self::handle_lookup_peers) otherwise.
    pub fn handle_lookup_ranked(&mut self, now: Instant, peers: &[LookupPeer]) {
        self.ranked = true;
        self.clock(now);
        let key = self.key;
        let ranked = peers.iter().enumerate().map(|(rank, p)| {
            (
                ranked_distance(&key, &p.id, rank),
                p.id,
                p.bounded_key_load(),
            )
        });
        match self.phase {
            Phase::Start => {
                for (d, p, load) in ranked {
                    self.candidates.insert_at(d, p, load);
                }
                self.start_round(true);
            }
            Phase::Round { .. } => {
                for (d, p, load) in ranked {
                    self.candidates.insert_at(d, p, load);
                }
                self.timers.clear(Timer::Lookup);
                self.phase = Phase::Round { lookup_done: true };
            }
            _ => {}
        }
    }

    /// The order key of `peer`: its candidate's, else its XOR distance (after every
    /// ranked candidate in a ranked read).
    fn order_of(&self, peer: &PeerId) -> Distance {
        match self.candidates.get(peer) {
            Some(c) => c.distance,
            None if self.ranked => unranked_distance(&self.key, peer),
            None => self.key.distance(peer),
        }
    }

    fn lookup(&mut self, now: Instant, peers: impl Iterator<Item = (PeerId, Option<u32>)>) {
        self.clock(now);
        match self.phase {
            Phase::Start => {
                // Candidates supplied up front: this round needs no lookup action.
                self.merge(peers);
                self.start_round(true);
            }
            Phase::Round { .. } => {
                self.merge(peers);
                self.timers.clear(Timer::Lookup);
                self.phase = Phase::Round { lookup_done: true };
            }
            _ => {}
        }
    }

    fn merge(&mut self, peers: impl Iterator<Item = (PeerId, Option<u32>)>) {
        for (p, key_load) in peers {
            self.candidates.insert(&self.key, p, key_load);
        }
    }

    fn start_round(&mut self, lookup_done: bool) {
        self.stats.rounds += 1;
        self.phase = Phase::Round { lookup_done };
        self.round_snapshot = false;
    }

    /// The answer to GET `id`. Unknown, cancelled or repeated ids are ignored.
    pub fn handle_get(&mut self, now: Instant, id: GetId, outcome: GetOutcome) {
        let now = self.clock(now);
        let Some(pos) = self.in_flight.iter().position(|g| g.id == id) else {
            return;
        };
        let get = self.in_flight.remove(pos);
        self.timers.clear(Timer::Get(get.slot));
        match outcome {
            GetOutcome::Found(bytes) => {
                for other in self.in_flight.drain(..) {
                    self.cancels.push(other.id);
                }
                self.timers = Timers::default();
                self.phase = Phase::Finished(Some(ReadOutcome::Found(bytes)));
                return;
            }
            GetOutcome::NotFound => self.candidates.set(&get.peer, Tried::NotFound),
            GetOutcome::Refused { retry_after } => {
                let cooldown = retry_after
                    .map(|ra| ra.min(self.config.max_retry_after))
                    .unwrap_or(self.config.refused_cooldown);
                self.candidates.set(
                    &get.peer,
                    Tried::Refused {
                        until: now + cooldown,
                    },
                );
            }
            GetOutcome::Invalid => {
                self.stats.invalid += 1;
                self.candidates.set(&get.peer, Tried::Invalid);
            }
            GetOutcome::Failed => self.candidates.set(&get.peer, Tried::Failed),
        }
        self.rearm_hedge();
    }

    /// Progress on GET `id`: its response head arrived, or body bytes are flowing. Under
    /// [`HedgeRule::OnSilence`] a GET that progressed is never hedged (a pending hedge
    /// that has not gone out yet is dropped); under [`HedgeRule::AfterDelay`] progress
    /// changes nothing. Unknown, cancelled, answered or repeated ids are ignored.
    pub fn handle_get_progress(&mut self, now: Instant, id: GetId) {
        self.clock(now);
        let Some(get) = self.in_flight.iter_mut().find(|g| g.id == id) else {
            return;
        };
        if get.progressed {
            return;
        }
        get.progressed = true;
        self.stats.progressed += 1;
        if self.config.hedge == HedgeRule::OnSilence {
            self.rearm_hedge();
        }
    }

    /// Ends the read now, whatever it was doing: every GET in flight is cancelled
    /// ([`ReadEvent::Cancel`]) and the read finishes with [`ReadOutcome::Cancelled`]. Drain
    /// [`poll_event`](Self::poll_event) afterwards as after any input. Idempotent: once the
    /// read has an outcome (cancelled or not) this does nothing.
    pub fn cancel(&mut self, now: Instant) {
        self.clock(now);
        if matches!(self.phase, Phase::Finished(_)) {
            return;
        }
        for get in self.in_flight.drain(..) {
            self.cancels.push(get.id);
        }
        self.timers = Timers::default();
        self.hedge_due = false;
        self.phase = Phase::Finished(Some(ReadOutcome::Cancelled));
    }

    /// The origin's answer to [`ReadEvent::FetchOrigin`]. Ignored unless one is outstanding.
    pub fn handle_origin(&mut self, now: Instant, outcome: OriginOutcome) {
        self.clock(now);
        if let Phase::Origin {
            requested: true,
            fallback,
        } = &self.phase
        {
            let result = match outcome {
                OriginOutcome::Found(b) => ReadOutcome::FoundAtOrigin(b),
                OriginOutcome::NotFound => ReadOutcome::Absent,
                OriginOutcome::Failed => after_origin_failure(fallback),
            };
            self.timers.clear(Timer::Origin);
            self.phase = Phase::Finished(Some(result));
        }
    }

    /// Processes every deadline that has passed by `now`. Harmless when nothing is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock(now);
        if matches!(self.phase, Phase::Finished(_)) {
            return;
        }
        // GETs unanswered for too long are abandoned.
        let mut i = 0;
        while i < self.in_flight.len() {
            if self
                .timers
                .take_expired(Timer::Get(self.in_flight[i].slot), now)
            {
                let get = self.in_flight.remove(i);
                self.candidates.set(&get.peer, Tried::Failed);
                self.cancels.push(get.id);
            } else {
                i += 1;
            }
        }
        self.rearm_hedge();
        if self.timers.take_expired(Timer::Hedge, now) {
            self.hedge_due = true;
        }
        if self.timers.take_expired(Timer::Lookup, now) {
            if let Phase::Round { .. } = self.phase {
                self.phase = Phase::Round { lookup_done: true };
            }
        }
        if self.timers.take_expired(Timer::Wait, now) {
            if let Phase::Waiting = self.phase {
                self.candidates.reset_for_round();
                self.skipped.clear();
                self.hedge_due = false;
                self.phase = Phase::Start;
            }
        }
        if self.timers.take_expired(Timer::Origin, now) {
            if let Phase::Origin { fallback, .. } = &self.phase {
                self.phase = Phase::Finished(Some(after_origin_failure(fallback)));
            }
        }
    }

    /// Keeps the hedge timer consistent with the GETs in flight: armed for the single GET
    /// in flight (at its send time plus the hedge delay) if the [`HedgeRule`] lets it be
    /// hedged, disarmed otherwise.
    fn rearm_hedge(&mut self) {
        let rule = self.config.hedge;
        match self.in_flight.as_slice() {
            [only] if rule == HedgeRule::AfterDelay || !only.progressed => {
                if self.timers.get(Timer::Hedge).is_none() && !self.hedge_due {
                    self.timers
                        .set(Timer::Hedge, only.sent_at + self.config.hedge_delay);
                }
            }
            _ => {
                self.timers.clear(Timer::Hedge);
                self.hedge_due = false;
            }
        }
    }

    /// The earliest deadline at which [`handle_timeout`](Self::handle_timeout) has work,
    /// and its reason. `None` once the read has its outcome.
    pub fn poll_timeout(&self) -> Option<Deadline<ReadTimer>> {
        if matches!(self.phase, Phase::Finished(_)) {
            return None;
        }
        let (at, timer) = self.timers.earliest()?;
        let timer = match timer {
            Timer::Lookup => ReadTimer::Lookup,
            Timer::Hedge => ReadTimer::Hedge,
            Timer::Wait => ReadTimer::Wait,
            Timer::Origin => ReadTimer::Origin,
            Timer::Get(slot) => {
                let get = self.in_flight.iter().find(|g| g.slot == slot);
                // A GET row is set exactly while its slot holds a GET in flight.
                debug_assert!(get.is_some(), "GET timer without its GET");
                ReadTimer::Get(get.map_or(GetId(u32::MAX), |g| g.id))
            }
        };
        Some(Deadline { at, timer })
    }

    /// The next event for the driver, deciding with `view`'s current answers. Call until
    /// `None` after every input.
    #[must_use]
    pub fn poll_event(&mut self, now: Instant, view: &impl PeerView) -> Option<ReadEvent> {
        let now = self.clock(now);
        if !self.cancels.is_empty() {
            return Some(ReadEvent::Cancel {
                id: self.cancels.remove(0),
            });
        }
        loop {
            match &mut self.phase {
                Phase::Finished(outcome) => return outcome.take().map(ReadEvent::Done),
                Phase::Waiting => return None,
                Phase::Origin { requested, .. } => {
                    if *requested {
                        return None;
                    }
                    *requested = true;
                    self.timers
                        .set(Timer::Origin, now + self.config.origin_timeout);
                    return Some(ReadEvent::FetchOrigin);
                }
                Phase::Start => {
                    self.start_round(false);
                    self.snapshot_refusals(now, view);
                    self.timers
                        .set(Timer::Lookup, now + self.config.lookup_timeout);
                    return Some(ReadEvent::Lookup);
                }
                Phase::Round { lookup_done } => {
                    let lookup_done = *lookup_done;
                    if !self.round_snapshot {
                        self.snapshot_refusals(now, view);
                    }
                    if self.may_send(now) {
                        if let Some(index) = self.choose(now, view) {
                            return Some(self.send(now, index));
                        }
                    }
                    if lookup_done && self.in_flight.is_empty() {
                        self.conclude_round(now, view);
                        continue;
                    }
                    return None;
                }
            }
        }
    }

    fn may_send(&self, now: Instant) -> bool {
        match self.in_flight.len() {
            0 => true,
            1 => self.hedge_due || self.timers.get(Timer::Hedge).is_some_and(|at| at <= now),
            _ => false,
        }
    }

    /// Records the view's refusals at the start of a round, so a peer whose refusal ends
    /// during the round still counts at its end.
    fn snapshot_refusals(&mut self, now: Instant, view: &impl PeerView) {
        self.round_snapshot = true;
        let mut skipped = core::mem::take(&mut self.skipped);
        view.for_each_refused(now, &mut |peer, _left| {
            note_skipped(&mut skipped, self.order_of(&peer), peer);
        });
        self.skipped = skipped;
    }

    /// Picks the next candidate to ask, if any: the spread among untried, eligible members
    /// of the close group as currently known, else the nearest untried eligible peer.
    fn choose(&mut self, now: Instant, view: &impl PeerView) -> Option<usize> {
        let group = self.config.close_group_size.min(self.candidates.len());
        let mut options: SmallVec<[(usize, ChoiceOption); 8]> = SmallVec::new();
        let mut fallback = None;
        for (index, c) in self.candidates.as_slice().iter().enumerate() {
            if c.tried != Tried::Untried {
                continue;
            }
            if view.refused_for(now, &c.peer).is_some() {
                note_skipped(&mut self.skipped, c.distance, c.peer);
                continue;
            }
            if !view.eligible(now, &c.peer) {
                continue;
            }
            if index < group {
                options.push((
                    index,
                    ChoiceOption {
                        peer: c.peer,
                        rank: index,
                        in_flight: view.in_flight(&c.peer),
                        load: view.load(now, &c.peer),
                        key_load: c.key_load,
                    },
                ));
            } else {
                fallback = Some(index);
                break; // nearest-first past the close group
            }
        }
        if options.is_empty() {
            return fallback;
        }
        let plain: SmallVec<[ChoiceOption; 8]> = options.iter().map(|(_, o)| *o).collect();
        let pick = self.config.spread.choose(&plain, &mut self.rng);
        Some(options[pick].0)
    }

    fn send(&mut self, now: Instant, index: usize) -> ReadEvent {
        let peer = self.candidates.as_slice()[index].peer;
        self.candidates.set_at(index, Tried::InFlight);
        let id = GetId(self.next_get);
        self.next_get = self.next_get.wrapping_add(1);
        if !self.in_flight.is_empty() {
            self.stats.hedges += 1;
        }
        self.stats.gets += 1;
        let slot = (0..MAX_GETS_IN_FLIGHT)
            .find(|&slot| self.in_flight.iter().all(|g| g.slot != slot))
            .expect("may_send admits a GET only while a slot is free");
        self.in_flight.push(InFlight {
            id,
            peer,
            sent_at: now,
            slot,
            progressed: false,
        });
        self.timers
            .set(Timer::Get(slot), now + self.config.get_timeout);
        self.hedge_due = false;
        self.timers.clear(Timer::Hedge);
        self.rearm_hedge();
        ReadEvent::Get { id, peer }
    }

    /// A round ended without finding the record. Decide: wait out refusals, Busy, Absent,
    /// retry, or give up.
    fn conclude_round(&mut self, now: Instant, view: &impl PeerView) {
        let group = self.config.close_group_size;
        let mut shortest: Option<Duration> = None;
        let mut consider = |this: &Self, distance: Distance, peer: PeerId, own: Duration| {
            if let Some(c) = this.candidates.get(&peer) {
                if c.tried == Tried::NotFound {
                    return; // it answered for itself
                }
            }
            if this.candidates.not_found_nearer_than(&distance) >= group {
                return; // a close group of nearer peers already answered
            }
            let left = view
                .refused_for(now, &peer)
                .unwrap_or(Duration::ZERO)
                .max(own);
            shortest = Some(shortest.map_or(left, |s| s.min(left)));
        };
        for c in self.candidates.as_slice() {
            if let Tried::Refused { until } = c.tried {
                consider(self, c.distance, c.peer, until - now);
            }
        }
        for &(distance, peer) in &self.skipped {
            consider(self, distance, peer, Duration::ZERO);
        }
        view.for_each_refused(now, &mut |peer, _| {
            consider(self, self.order_of(&peer), peer, Duration::ZERO);
        });

        if let Some(left) = shortest {
            if self.stats.refusal_waits < self.config.max_refusal_waits {
                self.stats.refusal_waits += 1;
                self.wait(now, left.max(self.config.retry_delay));
            } else {
                self.finish(ReadOutcome::Busy);
            }
        } else if self.candidates.invalid() > 0 {
            // A copy exists (an invalid one): never absence. Retry while a holder that
            // failed or refused might have a valid copy; then say it is corrupt.
            if self.candidates.any_retryable()
                && self.stats.plain_retries < self.config.max_plain_retries
            {
                self.stats.plain_retries += 1;
                self.wait(now, self.config.retry_delay);
            } else {
                self.finish(ReadOutcome::Invalid);
            }
        } else if self.proves_absence() {
            self.finish(ReadOutcome::Absent);
        } else if self.stats.plain_retries < self.config.max_plain_retries {
            self.stats.plain_retries += 1;
            self.wait(now, self.config.retry_delay);
        } else {
            self.finish(ReadOutcome::Unavailable);
        }
    }

    /// Whether the `NotFound` answers so far prove the record absent under the configured
    /// [`Absence`] rule.
    fn proves_absence(&self) -> bool {
        let group = self.config.close_group_size;
        match self.config.absence {
            Absence::NearestCloseGroup => self.candidates.nearest_answered_not_found(group),
            Absence::AnyCloseGroup => self.candidates.not_found() >= group,
        }
    }

    fn wait(&mut self, now: Instant, d: Duration) {
        self.timers.set(Timer::Wait, now + d);
        self.phase = Phase::Waiting;
    }

    fn finish(&mut self, outcome: ReadOutcome) {
        self.timers = Timers::default();
        self.phase = if self.config.origin {
            Phase::Origin {
                requested: false,
                fallback: outcome,
            }
        } else {
            Phase::Finished(Some(outcome))
        };
    }
}

/// The outcome of a read whose origin fetch failed or timed out: the peers' outcome,
/// except that their `Absent` proves nothing when the content lives at the origin (its
/// holders may not have fetched it yet): that read ends [`ReadOutcome::Unavailable`],
/// never `Absent`. Only the origin's own "not found" makes a read with an origin absent.
fn after_origin_failure(fallback: &ReadOutcome) -> ReadOutcome {
    match fallback {
        ReadOutcome::Absent => ReadOutcome::Unavailable,
        other => other.clone(),
    }
}

/// Adds a skipped peer, deduplicated, keeping the nearest [`MAX_SKIPPED`].
fn note_skipped(skipped: &mut SmallVec<[(Distance, PeerId); 4]>, distance: Distance, peer: PeerId) {
    match skipped.binary_search_by(|(d, _)| d.cmp(&distance)) {
        Ok(_) => {}
        Err(pos) => {
            if pos < MAX_SKIPPED {
                skipped.insert(pos, (distance, peer));
                skipped.truncate(MAX_SKIPPED);
            }
        }
    }
}
