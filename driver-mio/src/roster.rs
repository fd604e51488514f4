//! The roster service on a readiness loop: core's `roster::Refresh` owned by one worker,
//! over the node's [`SharedMembership`] and its [`Client`].
//!
//! - at `Refresh::poll_timeout`: `handle_timeout(now, &membership)` (the table locked for
//!   that call only);
//! - `RefreshEvent::Fetch { addr, member }` → a roster fetch through the client (the
//!   breaker's roster path, identifying this node as `Membership::me`), whose ending is
//!   posted back to `handle_answer(now, addr, &ending, &mut membership)`; for a roster,
//!   the signature checks core plans (`Membership::plan_checks`) first run on every core
//!   on the service's verifier thread, never on the worker's loop, and come back to
//!   `handle_verified_answer`;
//! - `RefreshEvent::Cancel { addr }` → that fetch is cancelled;
//! - [`RosterService::shutdown`] → `Refresh::cancel`, every fetch cancelled.

use std::collections::HashMap;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use peerblock_common::client::{peer_id_for_addr, Fetched, OutcomeClass};
use peerblock_common::roster::{peer_id_for_member, verify_on_threads, verify_threads};
use peerblock_common::SharedMembership;
use peerblock_core::client::{Caller, Ending};
use peerblock_core::roster::{
    AnswerOutcome, Checks, Refresh, RefreshConfig, RefreshConfigError, RefreshEvent, Verified,
};

use crate::client::{Client, RequestHandle};
use crate::worker::{After, Driven, Entry, Key, Ready, Remote, Runtime, Worker};

/// What the service and its handle share: answers counted, and whether it has ended.
#[derive(Default)]
struct Progress {
    state: Mutex<(u64, bool)>,
    changed: Condvar,
}

/// The running roster service. Dropping it without [`shutdown`](Self::shutdown) leaves
/// it running until the runtime stops.
pub struct RosterService {
    progress: Arc<Progress>,
    runtime: Runtime,
    worker: usize,
    key: Arc<Mutex<Option<Key>>>,
}

impl std::fmt::Debug for RosterService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RosterService")
            .field("answers", &self.answers())
            .finish()
    }
}

impl RosterService {
    /// Starts the refresh (its first round is due at once) on worker 0 of `runtime`.
    pub fn start(
        runtime: &Runtime,
        client: Client,
        membership: SharedMembership,
        config: RefreshConfig,
        seed: u64,
    ) -> Result<RosterService, RefreshConfigError> {
        let refresh = Refresh::new(runtime.now(), config, seed)?;
        let progress = Arc::new(Progress::default());
        let key = Arc::new(Mutex::new(None));
        let (p, k) = (Arc::clone(&progress), Arc::clone(&key));
        runtime.remote(0).run(move |w| {
            let members = membership.lock().unwrap_or_else(|e| e.into_inner()).len();
            client.options().metrics.roster_members.set(members as i64);
            let task = RosterTask {
                client,
                membership,
                refresh,
                fetches: HashMap::new(),
                next_fetch: 0,
                progress: p,
                verifier: None,
            };
            let key = w.insert(Entry::new(Box::new(task)));
            *k.lock().unwrap_or_else(|e| e.into_inner()) = Some(key);
            w.drive(key, Ready::default());
        });
        Ok(RosterService {
            progress,
            runtime: runtime.clone(),
            worker: 0,
            key,
        })
    }

    /// Roster fetches answered and handed to the membership so far (merged or failed).
    pub fn answers(&self) -> u64 {
        self.progress
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// Blocks until at least `n` fetches have been answered; `false` if `timeout` passed.
    pub fn wait_answers(&self, n: u64, timeout: Duration) -> bool {
        let guard = self
            .progress
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .progress
            .changed
            .wait_timeout_while(guard, timeout, |s| s.0 < n && !s.1)
            .unwrap_or_else(|e| e.into_inner());
        guard.0 >= n
    }

    /// Cancels the refresh and every fetch in flight, and waits (bounded) for it to end.
    pub fn shutdown(self) {
        self.stop();
        let guard = self
            .progress
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let _ = self
            .progress
            .changed
            .wait_timeout_while(guard, Duration::from_secs(5), |s| !s.1);
    }

    /// Posts the cancellation to the service's worker. The key is read there: the start
    /// task, queued first on the same worker, has run by then.
    fn stop(&self) {
        let key = Arc::clone(&self.key);
        self.runtime.remote(self.worker).run(move |w| {
            let key = *key.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(key) = key {
                w.with_entry(key, |w, key, entry| match entry.get::<RosterTask>() {
                    Some(r) => {
                        let now = w.now();
                        r.refresh.cancel(now);
                        r.drive(w, key)
                    }
                    None => After::Unchanged,
                })
            }
        });
    }
}

impl Drop for RosterService {
    /// A service dropped without [`shutdown`](RosterService::shutdown) is cancelled too
    /// (without waiting), so it never keeps the runtime alive.
    fn drop(&mut self) {
        self.stop();
    }
}

/// The refresh on its worker.
pub(crate) struct RosterTask {
    client: Client,
    membership: SharedMembership,
    refresh: Refresh,
    /// Fetches in flight by address, each with its sequence number (an answer of an
    /// earlier fetch of the same address must not remove a newer one).
    fetches: HashMap<String, (u64, RequestHandle)>,
    next_fetch: u64,
    progress: Arc<Progress>,
    /// The verifier thread's queue ([`RosterTask::verifier`]), once started.
    verifier: Option<mpsc::Sender<VerifyJob>>,
}

/// A roster's planned signature checks, sent to the verifier thread with what the merge
/// needs once they are run.
struct VerifyJob {
    checks: Checks,
    addr: String,
    ending: Ending,
    class: OutcomeClass,
    back: Remote,
    key: Key,
}

impl RosterTask {
    pub(crate) fn drive(&mut self, w: &mut Worker, key: Key) -> After {
        let me = self
            .membership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .me()
            .clone();
        while let Some(event) = self.refresh.poll_event() {
            match event {
                RefreshEvent::Fetch { addr, member } => {
                    let member = member
                        .as_deref()
                        .map(peer_id_for_member)
                        .or_else(|| Some(peer_id_for_addr(&addr)));
                    tracing::debug!(addr = %addr, "roster fetch");
                    let back = w.me();
                    let a = addr.clone();
                    self.next_fetch += 1;
                    let seq = self.next_fetch;
                    // Our signed record rides the request, so the peer learns us verified.
                    let record = me.record.record().map(|r| r.to_header(me.weight));
                    let caller = Caller {
                        id: &me.id,
                        addr: &me.addr,
                        record: record.as_deref(),
                    };
                    let handle = self.client.roster_from(
                        w,
                        &addr,
                        member,
                        Some(caller),
                        Box::new(move |fetched| {
                            back.run(move |w| {
                                w.with_entry(key, |w, key, entry| match entry.get::<RosterTask>() {
                                    Some(r) => r.on_answer(w, key, a, seq, fetched),
                                    None => After::Unchanged,
                                })
                            })
                        }),
                    );
                    if let Some((_, old)) = self.fetches.insert(addr, (seq, handle)) {
                        self.client.cancel_from(w, old);
                    }
                }
                RefreshEvent::Cancel { addr } => {
                    if let Some((_, handle)) = self.fetches.remove(&addr) {
                        self.client.cancel_from(w, handle);
                    }
                }
            }
        }
        if self.refresh.is_finished() {
            for (_, (_, handle)) in self.fetches.drain() {
                self.client.cancel_from(w, handle);
            }
            let mut s = self
                .progress
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            s.1 = true;
            self.progress.changed.notify_all();
            return After::Done;
        }
        After::Keep(self.refresh.poll_timeout().map(|d| d.at))
    }

    pub(crate) fn timeout(&mut self, w: &mut Worker, key: Key) -> After {
        let now = w.now();
        {
            let m = self.membership.lock().unwrap_or_else(|e| e.into_inner());
            self.refresh.handle_timeout(now, &m);
        }
        self.drive(w, key)
    }

    fn on_answer(
        &mut self,
        w: &mut Worker,
        key: Key,
        addr: String,
        seq: u64,
        fetched: Fetched,
    ) -> After {
        if self.fetches.get(&addr).is_some_and(|(s, _)| *s == seq) {
            self.fetches.remove(&addr);
        }
        // A request that ended before any exchange has no ending: no roster.
        let ending = fetched.ending.unwrap_or(Ending::Cancelled);
        // A roster's signed records are verified on every core by a thread of its own,
        // never on this worker's loop (a full roster of new records is tens of
        // milliseconds of checks) and without holding the membership; the results come
        // back to `on_verified`.
        if let Ending::Roster(answer) = &ending {
            let checks = self
                .membership
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .plan_checks(w.now(), &addr, &answer.roster);
            if !checks.is_empty() {
                let job = VerifyJob {
                    checks,
                    addr,
                    ending,
                    class: fetched.class,
                    back: w.me(),
                    key,
                };
                match self.verifier() {
                    Some(tx) => match tx.send(job) {
                        Ok(()) => return After::Unchanged,
                        // The verifier is gone: the merge checks the records itself.
                        Err(mpsc::SendError(job)) => {
                            return self.merge(w, key, job.addr, job.ending, job.class, None)
                        }
                    },
                    None => return self.merge(w, key, job.addr, job.ending, job.class, None),
                }
            }
        }
        self.merge(w, key, addr, ending, fetched.class, None)
    }

    /// The service's verifier thread, started on first use: it runs each roster's
    /// checks on every core ([`verify_on_threads`]) and posts the results back to this
    /// worker's [`merge`](Self::merge). Jobs are bounded by the refresh's fetches in
    /// flight (one per answer); the thread ends when the task is dropped. `None` when no
    /// thread could be started.
    fn verifier(&mut self) -> Option<&mpsc::Sender<VerifyJob>> {
        if self.verifier.is_none() {
            let (tx, rx) = mpsc::channel::<VerifyJob>();
            let spawned = std::thread::Builder::new()
                .name("peerblock-verify".into())
                .spawn(move || {
                    for job in rx {
                        let VerifyJob {
                            checks,
                            addr,
                            ending,
                            class,
                            back,
                            key,
                        } = job;
                        let verified = verify_on_threads(checks, verify_threads());
                        back.run(move |w| {
                            w.with_entry(key, |w, key, entry| match entry.get::<RosterTask>() {
                                Some(r) => r.merge(w, key, addr, ending, class, Some(verified)),
                                None => After::Unchanged,
                            })
                        });
                    }
                });
            if spawned.is_ok() {
                self.verifier = Some(tx);
            }
        }
        self.verifier.as_ref()
    }

    /// Merges a fetch's ending, with the roster's signature checks already run when
    /// `verified` holds their results.
    fn merge(
        &mut self,
        w: &mut Worker,
        key: Key,
        addr: String,
        ending: Ending,
        class: OutcomeClass,
        verified: Option<Vec<Verified>>,
    ) -> After {
        let now = w.now();
        {
            let mut m = self.membership.lock().unwrap_or_else(|e| e.into_inner());
            let outcome = match verified {
                Some(v) => self
                    .refresh
                    .handle_verified_answer(now, &addr, &ending, &mut m, v),
                None => self.refresh.handle_answer(now, &addr, &ending, &mut m),
            };
            match outcome {
                AnswerOutcome::Merged(report) => {
                    tracing::debug!(addr = %addr, ?report, members = m.len(), "roster merged")
                }
                AnswerOutcome::Failed => {
                    tracing::debug!(addr = %addr, outcome = %class.name(), "roster fetch failed")
                }
                AnswerOutcome::Ignored => {}
            }
            self.client
                .options()
                .metrics
                .roster_members
                .set(m.len() as i64);
            self.client.options().metrics.record_placed(&m);
        }
        {
            let mut s = self
                .progress
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            s.0 += 1;
            self.progress.changed.notify_all();
        }
        self.drive(w, key)
    }
}

impl Driven for RosterTask {
    fn on_ready(&mut self, w: &mut Worker, key: Key, _ready: Ready) -> After {
        self.drive(w, key)
    }

    fn on_timer(&mut self, w: &mut Worker, key: Key) -> After {
        self.timeout(w, key)
    }
}
