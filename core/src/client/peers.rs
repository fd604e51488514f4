//! The client's shared knowledge of its peers: one [`Peers`] per client, consulted by every
//! read and fed by every exchange.
//!
//! A read machine owns no breaker, cooldown table or load counters: they are shared by all
//! reads of a client, so the driver owns them and answers for them through
//! [`PeerView`]. [`Peers`] is that state in one place, so every driver does the same:
//!
//! | part | fed by | answers |
//! |---|---|---|
//! | circuit breaker ([`Breaker`]) | [`Peers::admit`] (permit) and [`Peers::finish`] (the exchange's breaker outcome) | `eligible`: [`Breaker::healthy`] |
//! | cooldown table ([`CooldownTable`]) | [`Peers::finish`] (the exchange's cooldown entry: refused, failed dial) | `eligible`, `refused_for`, `for_each_refused` |
//! | load table ([`LoadTable`]) | [`Peers::finish`] (the load the response advertised) or [`Peers::record_load`] | `load` |
//! | GETs in flight | [`Peers::admit`] up, [`Peers::finish`] / [`Peers::abandon`] down | `in_flight` |
//!
//! # Around each GET
//!
//! 1. [`Peers::admit`] when the read asks for a GET to a peer: takes the breaker permit
//!    and counts the GET in flight. `Err` means the circuit just refused (a half-open
//!    circuit whose probe slot was taken since the view said eligible): report
//!    [`GetOutcome::Failed`] to the read without dialing.
//! 2. Run the [`Exchange`](super::Exchange).
//! 3. [`Peers::finish`] with its [`ExchangeOutcome`]: records what the outcome says in
//!    the breaker, the cooldown table and the load table, and returns the read's
//!    [`GetOutcome`] ([`get_outcome`]). A GET the read cancelled (a hedging loser) is
//!    [`Peers::abandon`]ed instead: its permit goes back as answered, nothing else is
//!    recorded. An outcome with [`ExchangeOutcome::retry_fresh`] that the driver retries
//!    on a fresh connection is not finished: the retry keeps the ticket.
//!
//! # The breaker check
//!
//! `eligible` asks [`Breaker::healthy`]: closed, or half-open with a free probe slot. That
//! is exactly what the next [`Peers::admit`] would say, so the read never picks a peer the
//! admission then turns away (`state != Open` would offer half-open peers whose probe
//! slots are all taken). Both are read-only: asking never stamps activity.
//!
//! # Keys
//!
//! Everything is keyed by [`PeerId`], the name the read machine uses. Roster deployments
//! get their placement members from their [`Membership`] with [`placement_members`].

use std::collections::BTreeMap;

use crate::breaker::{Breaker, BreakerConfig, Permit, Rejected, State};
use crate::cooldown::{CooldownConfig, CooldownConfigError, CooldownTable};
use crate::load::{LoadConfig, LoadConfigError, LoadTable};
use crate::placement::{Member, PeerId};
use crate::read::{GetOutcome, PeerView};
use crate::roster::Membership;
use crate::time::{Duration, Instant};

use super::outcome::{BreakerPath, CooldownEntry, Ending, ExchangeOutcome};

/// How a [`Peers`] is built.
#[derive(Clone, Debug, PartialEq)]
pub struct PeersConfig {
    /// The per-peer circuit breaker; `None` runs without one (every peer admitted, no
    /// circuit ever opens).
    pub breaker: Option<BreakerConfig>,
    /// Dial-level suppression (refused: short; failed dial: long). Its
    /// `max_retry_after` defaults to the one refusal cap,
    /// [`DEFAULT_MAX_RETRY_AFTER`](crate::refusal::DEFAULT_MAX_RETRY_AFTER).
    pub cooldown: CooldownConfig,
    /// How long advertised loads are remembered and how many.
    pub load: LoadConfig,
}

impl Default for PeersConfig {
    fn default() -> Self {
        PeersConfig {
            breaker: Some(BreakerConfig::default()),
            cooldown: CooldownConfig::default(),
            load: LoadConfig::default(),
        }
    }
}

/// A [`PeersConfig`] part that its own constructor rejects (the inner error names the
/// field). Local misconfiguration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeersConfigError {
    /// The breaker config is invalid.
    #[error(transparent)]
    Breaker(#[from] crate::breaker::ConfigError),
    /// The cooldown config is invalid.
    #[error(transparent)]
    Cooldown(#[from] CooldownConfigError),
    /// The load config is invalid.
    #[error(transparent)]
    Load(#[from] LoadConfigError),
}

/// One GET (or roster fetch) admitted to a peer, to be settled exactly once by
/// [`Peers::finish`] or [`Peers::abandon`]. Holds the breaker permit.
#[must_use = "finish or abandon the ticket: it holds a breaker permit and an in-flight count"]
#[derive(Debug)]
pub struct GetTicket {
    peer: PeerId,
    permit: Option<Permit>,
    path: BreakerPath,
}

impl GetTicket {
    /// The peer this ticket admitted.
    pub fn peer(&self) -> &PeerId {
        &self.peer
    }

    /// How the breaker permit was taken.
    pub fn path(&self) -> BreakerPath {
        self.path
    }
}

/// What [`Peers::finish`] recorded, and what the read machine learns.
#[derive(Debug)]
pub struct Finished {
    /// For [`Read::handle_get`](crate::read::Read::handle_get).
    pub get: GetOutcome,
    /// The cooldown entry recorded against the peer, if any (a refusal, a failed dial).
    pub cooldown: Option<CooldownEntry>,
    /// Whether this outcome opened the peer's circuit (for metrics and logs).
    pub circuit_opened: bool,
    /// Whether this outcome was the peer's second invalid block within
    /// [`INVALID_WINDOW`] and put it on the long (failed) cooldown: the driver counts it
    /// (`peerblock_invalid_cooldowns_total`) and logs the peer.
    pub invalid_cooldown: bool,
    /// The exchange's ending itself, handed back so a driver can report what happened
    /// (the failure's typed error, a roster answer) after recording it; `get` is derived
    /// from it ([`get_outcome`]).
    pub ending: Ending,
}

/// What the read machine learns from an exchange that ended in `ending`: the block, a
/// miss, an invalid copy (a body that failed validation or had the wrong length, or a
/// holder's `404` saying its copy is corrupt), a refusal with its (already bounded)
/// `Retry-After`, or a failure for everything else (an upstream refusal, a cancellation,
/// a roster answer to a GET, every other error).
pub fn get_outcome(ending: Ending) -> GetOutcome {
    get_outcome_of(&ending)
}

/// [`get_outcome`] of a borrowed ending (a block's bytes are shared, not copied).
fn get_outcome_of(ending: &Ending) -> GetOutcome {
    match ending {
        Ending::Block(bytes)
        | Ending::Range(crate::client::RangeAnswer::Part { body: bytes, .. }) => {
            GetOutcome::Found(bytes.clone())
        }
        Ending::Range(crate::client::RangeAnswer::Empty { .. }) => {
            GetOutcome::Found(bytes::Bytes::new())
        }
        Ending::Miss => GetOutcome::NotFound,
        Ending::Corrupt
        | Ending::Failed(
            crate::client::ExchangeError::Validation | crate::client::ExchangeError::Length(_),
        ) => GetOutcome::Invalid,
        Ending::Refused(refusal) => GetOutcome::Refused {
            retry_after: refusal.retry_after,
        },
        Ending::Roster(_)
        | Ending::Range(_)
        | Ending::UpstreamRefused { .. }
        | Ending::Cancelled
        | Ending::Failed(_) => GetOutcome::Failed,
    }
}

/// The placement members of a roster table: the members [`Membership::placed`] returns
/// (the node itself, then members whose record verified or that spoke for themselves from
/// their address, within the per-host and per-prefix budgets, weights capped at
/// [`MAX_PLACED_WEIGHT`](crate::roster::MAX_PLACED_WEIGHT)) whose id is a [`PeerId`] (64
/// hex digits), with address and weight, in id order. Unverified hearsay is never placed;
/// members whose id is not a `PeerId` cannot be placed and are left out.
pub fn placement_members(membership: &Membership) -> Vec<Member> {
    let mut members: Vec<Member> = membership
        .placed()
        .into_iter()
        .filter_map(|m| {
            let id = m.id.parse::<PeerId>().ok()?;
            Some(Member {
                id,
                addr: m.addr,
                weight: m.weight,
            })
        })
        .collect();
    members.sort_by_key(|m| m.id);
    members
}

/// Invalid blocks (bytes that failed validation, or the wrong length) a peer may serve
/// within [`INVALID_WINDOW`] before it is put on the failed cooldown: 2. The first costs a
/// read one GET (that peer is never asked for that block again) and one soft breaker
/// failure; the second is no accident: a holder whose own copy rotted says so (`404`
/// corrupt, never charged), so a peer that sends wrong bytes twice is lying or broken, and
/// is not asked for anything for the cooldown table's failed cooldown (30 min by default).
pub const INVALID_STRIKES: u32 = 2;

/// The window in which [`INVALID_STRIKES`] invalid blocks put a peer on the failed
/// cooldown: 30 minutes, the reference's dial-failure cooldown.
pub const INVALID_WINDOW: Duration = Duration::from_secs(30 * 60);

/// Peers whose invalid blocks are remembered at once: 4096, the peer map's bound. When full,
/// the entry whose first strike is oldest is forgotten.
pub const MAX_INVALID_TRACKED: usize = 4096;

/// A client's breaker, cooldown table, load table and GETs in flight per peer. See the
/// module docs for the calls around each GET.
#[derive(Debug)]
pub struct Peers {
    config: PeersConfig,
    breaker: Option<Breaker<PeerId>>,
    cooldown: CooldownTable<PeerId>,
    loads: LoadTable<PeerId>,
    /// GETs in flight per peer; a peer with none has no entry, so the map holds at most
    /// one entry per outstanding [`GetTicket`].
    in_flight: BTreeMap<PeerId, u32>,
    /// Invalid blocks per peer within [`INVALID_WINDOW`]: (count, first strike).
    invalid: BTreeMap<PeerId, (u32, Instant)>,
    /// Peers put on the failed cooldown for invalid blocks, since creation.
    invalid_cooldowns: u64,
}

impl Peers {
    /// Empty tables, or the error of the first invalid part.
    pub fn new(config: PeersConfig) -> Result<Peers, PeersConfigError> {
        let breaker = match &config.breaker {
            Some(c) => Some(Breaker::new(c.clone())?),
            None => None,
        };
        Ok(Peers {
            breaker,
            cooldown: CooldownTable::new(config.cooldown.clone())?,
            loads: LoadTable::new(config.load.clone())?,
            in_flight: BTreeMap::new(),
            invalid: BTreeMap::new(),
            invalid_cooldowns: 0,
            config,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &PeersConfig {
        &self.config
    }

    /// Admits a request to `peer` on `path` at `now`: takes the breaker permit
    /// ([`BreakerPath::Data`]: refused while the circuit is open or its probes are taken;
    /// [`BreakerPath::Roster`]: never refused) and, for a data GET, counts it in flight.
    /// Settle the ticket with [`finish`](Self::finish) or [`abandon`](Self::abandon).
    pub fn admit(
        &mut self,
        now: Instant,
        peer: PeerId,
        path: BreakerPath,
    ) -> Result<GetTicket, Rejected> {
        let permit = match (self.breaker.as_mut(), path) {
            (None, _) => None,
            (Some(b), BreakerPath::Data) => Some(b.admit(now, &peer)?),
            (Some(b), BreakerPath::Roster) => Some(b.admit_roster(now, &peer)),
        };
        if path == BreakerPath::Data {
            *self.in_flight.entry(peer).or_insert(0) += 1;
        }
        Ok(GetTicket { peer, permit, path })
    }

    /// The exchange admitted by `ticket` ended with `outcome` at `now`: records the load
    /// it advertised, its cooldown entry and its breaker outcome, stops counting it in
    /// flight, and returns what the read machine learns.
    pub fn finish(
        &mut self,
        now: Instant,
        ticket: GetTicket,
        outcome: ExchangeOutcome,
    ) -> Finished {
        let peer = ticket.peer;
        if let Some(load) = outcome.load {
            self.loads.record(now, peer, load);
        }
        let mut cooldown = outcome.cooldown;
        let invalid_cooldown = matches!(
            outcome.ending,
            Ending::Failed(
                crate::client::ExchangeError::Validation | crate::client::ExchangeError::Length(_)
            )
        ) && self.strike(now, peer);
        if invalid_cooldown {
            cooldown = Some(CooldownEntry::Failed);
        }
        if let Some(entry) = cooldown {
            self.cooldown.record(now, peer, entry);
        }
        let circuit_opened = self.record_breaker(now, ticket, outcome.breaker);
        Finished {
            get: get_outcome_of(&outcome.ending),
            cooldown,
            circuit_opened,
            invalid_cooldown,
            ending: outcome.ending,
        }
    }

    /// Charges one invalid block to `peer`; true when it is its [`INVALID_STRIKES`]th
    /// within [`INVALID_WINDOW`] (the strikes are then forgotten: the cooldown says it).
    fn strike(&mut self, now: Instant, peer: PeerId) -> bool {
        if !self.invalid.contains_key(&peer) && self.invalid.len() >= MAX_INVALID_TRACKED {
            if let Some(oldest) = self
                .invalid
                .iter()
                .min_by_key(|(_, v)| v.1)
                .map(|(p, _)| *p)
            {
                self.invalid.remove(&oldest);
            }
        }
        let e = self.invalid.entry(peer).or_insert((0, now));
        if now.saturating_duration_since(e.1) >= INVALID_WINDOW {
            *e = (0, now);
        }
        e.0 += 1;
        if e.0 >= INVALID_STRIKES {
            self.invalid.remove(&peer);
            self.invalid_cooldowns += 1;
            return true;
        }
        false
    }

    /// Peers put on the failed cooldown for serving [`INVALID_STRIKES`] invalid blocks,
    /// since this `Peers` was created.
    pub fn invalid_cooldowns(&self) -> u64 {
        self.invalid_cooldowns
    }

    /// The caller gave up on the exchange admitted by `ticket` (a hedging loser): its
    /// permit goes back as answered (the peer is not to blame, and a half-open probe slot
    /// is freed) and it stops counting in flight. Nothing else is recorded.
    pub fn abandon(&mut self, now: Instant, ticket: GetTicket) {
        self.ended(&ticket);
        if let (Some(b), Some(p)) = (self.breaker.as_mut(), ticket.permit) {
            let _ = b.release(now, p);
        }
    }

    /// Records the load `peer` advertised in a response received at `now`, for drivers
    /// that hear it before the exchange ends (at the response head).
    pub fn record_load(&mut self, now: Instant, peer: PeerId, load: u32) {
        self.loads.record(now, peer, load);
    }

    /// Forgets every circuit, cooldown, invalid-block strike and load hint (a restarted client, a reloaded
    /// page). GETs in flight stay counted; their tickets still settle (a permit from the
    /// forgotten breaker changes nothing).
    pub fn forget(&mut self) {
        if let Some(c) = &self.config.breaker {
            self.breaker = Some(Breaker::new(c.clone()).expect("validated in Peers::new"));
        }
        self.cooldown =
            CooldownTable::new(self.config.cooldown.clone()).expect("validated in Peers::new");
        self.loads = LoadTable::new(self.config.load.clone()).expect("validated in Peers::new");
        self.invalid.clear();
    }

    /// The breaker, if one runs.
    pub fn breaker(&self) -> Option<&Breaker<PeerId>> {
        self.breaker.as_ref()
    }

    /// The cooldown table.
    pub fn cooldowns(&self) -> &CooldownTable<PeerId> {
        &self.cooldown
    }

    /// The load table.
    pub fn loads(&self) -> &LoadTable<PeerId> {
        &self.loads
    }

    /// Data GETs in flight to `peer`.
    pub fn in_flight_to(&self, peer: &PeerId) -> u32 {
        self.in_flight.get(peer).copied().unwrap_or(0)
    }

    fn ended(&mut self, ticket: &GetTicket) {
        if ticket.path != BreakerPath::Data {
            return;
        }
        if let Some(n) = self.in_flight.get_mut(&ticket.peer) {
            *n -= 1;
            if *n == 0 {
                self.in_flight.remove(&ticket.peer);
            }
        }
    }

    /// Records `outcome` with the ticket's permit; returns whether it opened the circuit.
    fn record_breaker(
        &mut self,
        now: Instant,
        ticket: GetTicket,
        outcome: crate::breaker::Outcome,
    ) -> bool {
        self.ended(&ticket);
        let (Some(b), Some(p)) = (self.breaker.as_mut(), ticket.permit) else {
            return false;
        };
        let before = b.state(now, &ticket.peer);
        let _ = b.record(now, p, outcome);
        before != State::Open && b.state(now, &ticket.peer) == State::Open
    }
}

impl PeerView for Peers {
    /// Not suppressed by a cooldown, and the breaker would admit a data request now
    /// ([`Breaker::healthy`]; see the module docs).
    fn eligible(&self, now: Instant, peer: &PeerId) -> bool {
        !self.cooldown.is_suppressed(now, peer)
            && self.breaker.as_ref().is_none_or(|b| b.healthy(now, peer))
    }

    fn refused_for(&self, now: Instant, peer: &PeerId) -> Option<Duration> {
        self.cooldown.refused_for(now, peer)
    }

    fn in_flight(&self, peer: &PeerId) -> u32 {
        self.in_flight_to(peer)
    }

    fn load(&self, now: Instant, peer: &PeerId) -> Option<u32> {
        self.loads.load(now, peer)
    }

    fn for_each_refused(&self, now: Instant, f: &mut dyn FnMut(PeerId, Duration)) {
        for (p, left) in self.cooldown.refusals(now) {
            f(*p, left);
        }
    }
}
