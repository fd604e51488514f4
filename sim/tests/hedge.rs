//! The hedge rule in the replay: peerblock's arms hedge only silent GETs (core's
//! `HedgeRule::OnSilence`, fed by the simulator's progress input on both GET paths); the
//! reference arms keep the reference's rule (`client.hedge = "after-delay"`). docs/sim.md
//! "Hedging on silence" has the seeds 1–10 figures.

mod common;

use common::{run, shipped};
use sim::scenario::HedgePolicy;

const SEED: u64 = 1;

/// Rule: on the HTTP/1.1 path a GET whose response head has arrived is not hedged, however
/// long its 4 MiB body takes; under the reference's rule most reads hedge.
#[test]
fn http_path_hedges_only_gets_whose_response_has_not_started() {
    let silence = shipped("testnet-ab-peerblock.toml");
    assert_eq!(silence.client.hedge, HedgePolicy::OnSilence);
    let mut delay = silence.clone();
    delay.client.hedge = HedgePolicy::AfterDelay;
    let (s, d) = (run(&silence, SEED).summary, run(&delay, SEED).summary);
    assert!(
        d.gets.hedged > 1_000,
        "after-delay hedges slow bodies: {}",
        d.gets.hedged
    );
    assert!(
        s.gets.hedged * 20 < d.gets.hedged,
        "on-silence hedged {} vs after-delay {}",
        s.gets.hedged,
        d.gets.hedged
    );
    assert!(s.gets.cancelled * 20 < d.gets.cancelled);
    assert_eq!(s.downloads.completed, s.downloads.started);
}

/// Rule: the modelled (multiplexed) GET path reports progress too: the same reference arm
/// run under `on-silence` hedges far less than under its shipped `after-delay`. (Its 10 s
/// dial timeout leaves dials to NAT'd holders silent past the hedge delay, and those are
/// still hedged: the hedges that remain; the hedge losers cancelled fall most.)
#[test]
fn modelled_path_reports_progress_when_the_response_starts() {
    let delay = shipped("testnet-ab-new-limits-uniform.toml");
    assert_eq!(delay.client.hedge, HedgePolicy::AfterDelay);
    let mut silence = delay.clone();
    silence.client.hedge = HedgePolicy::OnSilence;
    let (s, d) = (run(&silence, SEED).summary, run(&delay, SEED).summary);
    assert!(d.gets.hedged > 1_000, "after-delay: {}", d.gets.hedged);
    assert!(
        s.gets.hedged * 2 < d.gets.hedged,
        "on-silence hedged {} vs after-delay {}",
        s.gets.hedged,
        d.gets.hedged
    );
    assert!(
        s.gets.cancelled * 3 < d.gets.cancelled,
        "on-silence cancelled {} vs after-delay {}",
        s.gets.cancelled,
        d.gets.cancelled
    );
}
