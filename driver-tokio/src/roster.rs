//! The roster service: core's `roster::Refresh` driven on a task over the node's
//! [`SharedMembership`] and its [`Client`].
//!
//! The refresh decides when a round runs and whom it asks; the service runs what it is
//! told:
//!
//! - at `Refresh::poll_timeout`: `handle_timeout(now, &membership)` (a due round picks
//!   its targets from the table, locked for that call only);
//! - `RefreshEvent::Fetch { addr, member }` → a task running
//!   [`Client::fetch_roster`]`(addr, member, Some(our caller))` (the breaker's roster path;
//!   our caller is `Membership::me`, so the peer learns us) → its ending goes to
//!   `handle_answer(now, addr, &ending, &mut membership)`, which merges a roster; for a
//!   roster, the signature checks core plans (`Membership::plan_checks`) are first run on
//!   every core in a blocking task ([`verify_on_threads`]) and the results handed over
//!   with `handle_verified_answer`, so the membership is not held while they run;
//! - `RefreshEvent::Cancel { addr }` → that fetch's task is aborted (its ticket settled);
//! - a shutdown signal → `Refresh::cancel`, every fetch aborted, the task ends.
//!
//! The client records each fetch's outcome in its `Peers` (`Peers::finish`) before the
//! service hands the ending to `handle_answer`: the two touch disjoint tables (breaker
//! and cooldowns; the membership), so the order core documents (answer, then finish)
//! changes nothing.

use std::collections::HashMap;

use peerblock_core::client::{Caller, Ending};
use peerblock_core::roster::{
    AnswerOutcome, Refresh, RefreshConfig, RefreshConfigError, RefreshEvent, MAX_REFRESH_IN_FLIGHT,
};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::client::{peer_id_for_addr, Client, Fetched};
use crate::SharedMembership;
use peerblock_common::roster::{verify_on_threads, verify_threads};

/// Answers in the service's channel: one per fetch in flight, at most
/// [`MAX_REFRESH_IN_FLIGHT`].
const ANSWER_CHANNEL_BOUND: usize = MAX_REFRESH_IN_FLIGHT;

pub use peerblock_common::roster::peer_id_for_member;

/// The running roster service. Dropping it without [`shutdown`](Self::shutdown) aborts
/// its task.
#[derive(Debug)]
pub struct RosterService {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    answers: watch::Receiver<u64>,
}

impl RosterService {
    /// Starts the refresh (`Refresh::new(now, config, seed)`; its first round is due at
    /// once) on a task. `membership` is the node's table (created by the caller with
    /// `Membership::new`, naming this node); `config.seeds` are the seed addresses. Call
    /// it within a tokio runtime (it spawns the service's task).
    pub fn start(
        client: Client,
        membership: SharedMembership,
        config: RefreshConfig,
        seed: u64,
    ) -> Result<RosterService, RefreshConfigError> {
        let refresh = Refresh::new(client.now(), config, seed)?;
        let (stop, stopped) = watch::channel(false);
        let (answered, answers) = watch::channel(0);
        let task = tokio::spawn(run(client, membership, refresh, stopped, answered));
        Ok(RosterService {
            stop,
            task: Some(task),
            answers,
        })
    }

    /// How many roster fetches have been answered and handed to the membership so far
    /// (merged or failed), as a watch: lets a caller wait for the first round to land
    /// (`answers().wait_for(|n| *n >= 1)`) instead of polling the table.
    pub fn answers(&self) -> watch::Receiver<u64> {
        self.answers.clone()
    }

    /// Stops the service: cancels the refresh and every fetch in flight, and waits for
    /// the task to end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for RosterService {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn run(
    client: Client,
    membership: SharedMembership,
    mut refresh: Refresh,
    mut stopped: watch::Receiver<bool>,
    answered: watch::Sender<u64>,
) {
    let lock = || membership.lock().unwrap_or_else(|e| e.into_inner());
    let me = lock().me().clone();
    let metrics = client.options().metrics.clone();
    metrics.roster_members.set(lock().len() as i64);
    let (tx, mut rx) = mpsc::channel::<(String, Fetched)>(ANSWER_CHANNEL_BOUND);
    let mut fetches: HashMap<String, JoinHandle<()>> = HashMap::new();
    loop {
        let now = client.now();
        refresh.handle_timeout(now, &lock());
        while let Some(event) = refresh.poll_event() {
            match event {
                RefreshEvent::Fetch { addr, member } => {
                    let member = member.as_deref().map(peer_id_for_member);
                    let (client, tx, me) = (client.clone(), tx.clone(), me.clone());
                    let a = addr.clone();
                    tracing::debug!(addr = %addr, "roster fetch");
                    let task = tokio::spawn(async move {
                        // Our signed record rides the request, so the peer learns us verified.
                        let record = me.record.record().map(|r| r.to_header(me.weight));
                        let caller = Caller {
                            id: &me.id,
                            addr: &me.addr,
                            record: record.as_deref(),
                        };
                        let member = member.or_else(|| Some(peer_id_for_addr(&a)));
                        let fetched = client.fetch_roster(&a, member, Some(caller)).await;
                        let _ = tx.send((a, fetched)).await;
                    });
                    if let Some(old) = fetches.insert(addr, task) {
                        old.abort();
                    }
                }
                RefreshEvent::Cancel { addr } => {
                    if let Some(task) = fetches.remove(&addr) {
                        task.abort();
                    }
                }
            }
        }
        if refresh.is_finished() {
            for (_, task) in fetches.drain() {
                task.abort();
            }
            return;
        }
        let deadline = refresh
            .poll_timeout()
            .and_then(|d| client.options().clock.to_std(d.at));
        tokio::select! {
            changed = stopped.changed() => {
                if changed.is_err() || *stopped.borrow() {
                    refresh.cancel(client.now());
                }
            }
            answer = rx.recv() => {
                let Some((addr, fetched)) = answer else { continue };
                fetches.remove(&addr);
                // A request that ended before any exchange (no connection slot) has no
                // ending of its own: the refresh hears a cancellation, i.e. no roster.
                let ending = fetched.ending.unwrap_or(Ending::Cancelled);
                // A roster's signed records are verified on every core, off the runtime's
                // threads and without holding the membership (a full roster of 4,096 new
                // records is tens of milliseconds of checks); then merged with the results.
                let verified = match &ending {
                    Ending::Roster(answer) => {
                        let checks = lock().plan_checks(client.now(), &addr, &answer.roster);
                        if checks.is_empty() {
                            Some(vec![checks.verify()])
                        } else {
                            tokio::task::spawn_blocking(move || {
                                verify_on_threads(checks, verify_threads())
                            })
                            .await
                            .ok()
                        }
                    }
                    _ => None,
                };
                let now = client.now();
                let mut m = lock();
                let outcome = match verified {
                    Some(v) => refresh.handle_verified_answer(now, &addr, &ending, &mut m, v),
                    None => refresh.handle_answer(now, &addr, &ending, &mut m),
                };
                match outcome {
                    AnswerOutcome::Merged(report) => {
                        tracing::debug!(addr = %addr, ?report, members = m.len(), "roster merged")
                    }
                    AnswerOutcome::Failed => {
                        tracing::debug!(addr = %addr, outcome = %fetched.class.name(), "roster fetch failed")
                    }
                    AnswerOutcome::Ignored => {}
                }
                metrics.roster_members.set(m.len() as i64);
                metrics.record_placed(&m);
                metrics.record_membership(m.stats());
                drop(m);
                answered.send_modify(|n| *n += 1);
            }
            _ = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}
