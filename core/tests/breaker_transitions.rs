//! Drives a real breaker through every row of `breaker::TRANSITIONS` and checks that
//! `docs/breaker.md` embeds the rendered table, so code, table and docs agree.

use peerblock_core::breaker::{Breaker, BreakerConfig, Event, Outcome, State, TRANSITIONS};
use peerblock_core::time::{Duration, Instant};
use peerblock_testkit::breaker_doc::{render_state_diagram, render_transition_table};

const P: &str = "peer";

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn breaker(f: impl FnOnce(&mut BreakerConfig)) -> Breaker<&'static str> {
    let mut c = BreakerConfig::default();
    f(&mut c);
    Breaker::new(c).unwrap()
}

/// Puts a breaker into `from`, applies `event`, and returns (state before, state after).
fn drive(from: State, event: Event) -> (State, State) {
    let mut b = breaker(|c| {
        c.half_open_probes = 2;
        c.max_open_share = (event == Event::OpeningHeldByOpenShare).then_some(1);
    });
    let t0 = ms(0);
    let half = ms(5_000);
    // Common setups.
    let old = b.admit(t0, &P).unwrap();
    match from {
        State::Closed => {}
        State::Open => b.record_hard_failure(t0, &P),
        State::HalfOpen => b.record_hard_failure(t0, &P),
    }
    let now = if from == State::HalfOpen { half } else { ms(1) };
    let before = b.state(now, &P);
    match (from, event) {
        (State::Closed, Event::DataAdmission) => assert!(b.admit(now, &P).is_ok()),
        (State::Closed, Event::Answered) => {
            b.record_failure(now, &P);
            b.record(now, old, Outcome::Answered);
            b.record_failure(now, &P);
            // Count was reset: 4 more failures (5 since reset would open) keep it closed.
            for _ in 0..3 {
                b.record_failure(now, &P);
            }
        }
        (State::Closed, Event::SoftFailureBelowThreshold) => b.record_failure(now, &P),
        (State::Closed, Event::SoftFailureAtThreshold) => {
            for _ in 0..5 {
                b.record_failure(now, &P);
            }
        }
        (State::Closed, Event::HardFailure) => {
            b.record(now, old, Outcome::HardFailure);
        }
        (State::Closed, Event::OpeningHeldByOpenShare) => {
            b.record_hard_failure(now, &"other");
            b.record(now, old, Outcome::HardFailure);
        }
        (State::Closed, Event::StaleResult) => {
            b.record_hard_failure(now, &P);
            b.record_success(now, &P);
            assert_eq!(b.state(now, &P), State::Closed);
            b.record(now, old, Outcome::HardFailure);
        }
        (State::Open, Event::DataAdmission) => assert!(b.admit(now, &P).is_err()),
        (State::Open, Event::FailureWhileOpen) => {
            let r = b.admit_roster(now, &P);
            b.record(ms(4_000), r, Outcome::HardFailure);
            assert_eq!(b.state(ms(5_000), &P), State::HalfOpen, "not restamped");
        }
        (State::Open, Event::RosterAnsweredWhileOpen) => {
            let r = b.admit_roster(now, &P);
            b.record(now, r, Outcome::Answered);
        }
        (State::Open, Event::StaleResult) => {
            b.record(now, old, Outcome::Answered);
        }
        (State::Open, Event::CooldownElapsed) => {
            return (before, b.state(half, &P));
        }
        (State::HalfOpen, Event::ProbeAdmitted) => {
            let _p = b.admit(now, &P).unwrap();
        }
        (State::HalfOpen, Event::AdmissionWhileProbing) => {
            let _p1 = b.admit(now, &P).unwrap();
            let _p2 = b.admit(now, &P).unwrap();
            assert!(b.admit(now, &P).is_err());
        }
        (State::HalfOpen, Event::ProbeSucceededSiblingsPending) => {
            let p1 = b.admit(now, &P).unwrap();
            let _p2 = b.admit(now, &P).unwrap();
            b.record(now, p1, Outcome::Answered);
            assert!(b.admit(now, &P).is_err(), "paused");
        }
        (State::HalfOpen, Event::LastProbeSucceeded) => {
            let p1 = b.admit(now, &P).unwrap();
            let p2 = b.admit(now, &P).unwrap();
            b.record(now, p1, Outcome::Answered);
            b.record(now, p2, Outcome::Answered);
        }
        (State::HalfOpen, Event::ProbeFailed) => {
            let p1 = b.admit(now, &P).unwrap();
            b.record(now, p1, Outcome::SoftFailure);
        }
        (State::HalfOpen, Event::ProbeLeaseExpired) => {
            drop(b.admit(now, &P).unwrap());
            let expired = now + b.config().probe_lease;
            return (before, b.state(expired, &P));
        }
        (State::HalfOpen, Event::RosterAnsweredNoProbes) => {
            let r = b.admit_roster(now, &P);
            b.record(now, r, Outcome::Answered);
        }
        (State::HalfOpen, Event::RosterAnsweredProbesPending) => {
            let _p = b.admit(now, &P).unwrap();
            let r = b.admit_roster(now, &P);
            b.record(now, r, Outcome::Answered);
        }
        (State::HalfOpen, Event::RosterFailureWhileProbing) => {
            let _p = b.admit(now, &P).unwrap();
            let r = b.admit_roster(now, &P);
            b.record(now, r, Outcome::HardFailure);
        }
        (State::HalfOpen, Event::StaleResult) => {
            let _p = b.admit(now, &P).unwrap();
            b.record(now, old, Outcome::Answered);
            assert!(b.admit(now, &P).is_ok(), "second slot still free");
            assert!(b.admit(now, &P).is_err(), "stale success took no slot");
        }
        (from, event) => panic!("no driver for ({from}, {event}): add one"),
    }
    (before, b.state(now + Duration::from_millis(1), &P))
}

#[test]
fn every_transition_row_is_what_the_breaker_does() {
    for t in TRANSITIONS {
        let (before, after) = drive(t.from, t.event);
        assert_eq!(before, t.from, "setup for {t:?}");
        assert_eq!(after, t.to, "row {t:?}");
    }
}

#[test]
fn transition_rows_are_unique() {
    for (i, a) in TRANSITIONS.iter().enumerate() {
        for b in &TRANSITIONS[i + 1..] {
            assert!((a.from, a.event) != (b.from, b.event), "duplicate {a:?}");
        }
    }
}

#[test]
fn docs_embed_the_rendered_transition_table() {
    let doc = include_str!("../../docs/breaker.md");
    assert!(
        doc.contains(&render_transition_table()),
        "docs/breaker.md is out of date; paste:\n{}",
        render_transition_table()
    );
}

#[test]
fn docs_embed_the_rendered_state_diagram() {
    let doc = include_str!("../../docs/breaker.md");
    assert!(
        doc.contains(&render_state_diagram()),
        "docs/breaker.md is out of date; paste:\n{}",
        render_state_diagram()
    );
}

/// Rule: the rendered table (what the doc check compares) has its header, its separator and
/// one row per transition, each row's four cells being that transition's states, event and
/// effect; so an empty or partial rendering cannot satisfy `docs_embed_the_rendered_*`.
#[test]
fn rendered_transition_table_has_one_full_row_per_transition() {
    let table = render_transition_table();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), TRANSITIONS.len() + 2, "{table}");
    assert_eq!(lines[0], "| from | event | to | effect |");
    assert_eq!(lines[1], "|---|---|---|---|");
    for (line, t) in lines[2..].iter().zip(TRANSITIONS) {
        let cells: Vec<&str> = line
            .strip_prefix("| ")
            .and_then(|l| l.strip_suffix(" |"))
            .unwrap_or_else(|| panic!("not a table row: {line}"))
            .split(" | ")
            .collect();
        let from = t.from.to_string();
        let to = t.to.to_string();
        assert_eq!(cells, [&from, t.event.describe(), &to, t.effect], "{line}");
        assert!(cells.iter().all(|c| !c.trim().is_empty()), "{line}");
    }
}

/// Rule: every event has its own non-empty description, and an event displays as it.
#[test]
fn events_are_described_distinctly_and_display_as_described() {
    let mut seen = std::collections::HashSet::new();
    for t in TRANSITIONS {
        let d = t.event.describe();
        assert!(!d.trim().is_empty(), "{:?}", t.event);
        assert_eq!(t.event.to_string(), d);
        seen.insert((t.event, d));
    }
    let events: std::collections::HashSet<_> = seen.iter().map(|(e, _)| *e).collect();
    let texts: std::collections::HashSet<_> = seen.iter().map(|(_, d)| *d).collect();
    assert_eq!(events.len(), texts.len(), "two events share a description");
    assert!(events.len() > 10, "the table names every event");
}

/// Rule: the rendered diagram starts at closed and has one edge per state-changing
/// transition, labelled with that transition's event.
#[test]
fn rendered_state_diagram_has_one_edge_per_state_change() {
    let diagram = render_state_diagram();
    let lines: Vec<&str> = diagram.lines().collect();
    let changes: Vec<_> = TRANSITIONS.iter().filter(|t| t.from != t.to).collect();
    assert_eq!(lines.len(), changes.len() + 2, "{diagram}");
    assert_eq!(lines[..2], ["stateDiagram-v2", "    [*] --> Closed"]);
    for (line, t) in lines[2..].iter().zip(&changes) {
        let label = t.event.describe().replace('`', "");
        assert!(!label.is_empty());
        assert_eq!(*line, format!("    {:?} --> {:?}: {label}", t.from, t.to));
    }
}
