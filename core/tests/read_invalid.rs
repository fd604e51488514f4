//! The read machine's rules for invalid copies (`GetOutcome::Invalid`: a body that failed
//! validation, or a holder's "my copy is corrupt"), one scenario each, with injected time.
//! Bit rot on one copy must never make a block unreadable while another copy is good,
//! and a block whose every copy is bad is reported as corrupt, never as absent.

mod read_support;

use bytes::Bytes;
use peerblock_core::placement::PeerId;
use peerblock_core::read::{GetOutcome, OriginOutcome, Read, ReadConfig, ReadEvent, ReadOutcome};
use peerblock_core::time::Instant;
use peerblock_testkit::StaticView;
use read_support::{drain, gets, key_and_peers, millis, secs};

fn block() -> Bytes {
    Bytes::from_static(b"block")
}

/// Runs `read` to its end from its first lookup at time 0: every GET is answered at once
/// with `answer(peer)`, every wait is waited out (time jumps to the deadline). Returns
/// the outcome and the peers asked, in order.
fn run(
    mut read: Read,
    peers: &[PeerId],
    answer: &mut dyn FnMut(PeerId) -> GetOutcome,
) -> (ReadOutcome, Vec<PeerId>) {
    let view = StaticView::new();
    let mut now: Instant = secs(0);
    let mut asked = Vec::new();
    let mut actions = drain(&mut read, now, &view);
    for _ in 0..1_000 {
        let mut progressed = false;
        for a in &actions {
            match a {
                ReadEvent::Lookup => {
                    read.handle_lookup(now, peers);
                    progressed = true;
                }
                ReadEvent::Get { id, peer } => {
                    asked.push(*peer);
                    read.handle_get(now, *id, answer(*peer));
                    progressed = true;
                }
                ReadEvent::FetchOrigin => {
                    read.handle_origin(now, OriginOutcome::Failed);
                    progressed = true;
                }
                ReadEvent::Done(outcome) => return (outcome.clone(), asked),
                ReadEvent::Cancel { .. } => {}
            }
        }
        if !progressed {
            now = read
                .poll_timeout()
                .expect("a read without work has a deadline")
                .at;
            read.handle_timeout(now);
        }
        actions = drain(&mut read, now, &view);
    }
    panic!("the read never ended");
}

/// Rule: a peer that answered with an invalid copy is never asked for that record again,
/// and the read goes on to another holder, which serves it.
#[test]
fn an_invalid_copy_sends_the_read_to_another_holder_and_never_back() {
    let (key, peers) = key_and_peers(7);
    for seed in 0..50 {
        let read = Read::new(key, ReadConfig::default(), secs(0), seed).unwrap();
        let mut first = None;
        let (outcome, asked) = run(read, &peers, &mut |p| match first {
            None => {
                first = Some(p);
                GetOutcome::Invalid
            }
            Some(_) => GetOutcome::Found(block()),
        });
        assert_eq!(outcome, ReadOutcome::Found(block()), "seed {seed}");
        assert_eq!(asked.len(), 2, "seed {seed}: {asked:?}");
        assert_ne!(
            asked[0], asked[1],
            "seed {seed}: the bad copy was asked again"
        );
    }
}

/// Rule: invalid copies and misses everywhere else end the read `Invalid` (the record
/// exists and is corrupt), never `Absent`, at once when nobody is left to retry, and the
/// invalid peers are asked exactly once.
#[test]
fn invalid_copies_with_misses_elsewhere_end_invalid_never_absent() {
    let (key, peers) = key_and_peers(7);
    let bad = [peers[0], peers[3]];
    let read = Read::new(key, ReadConfig::default(), secs(0), 7).unwrap();
    let (outcome, asked) = run(read, &peers, &mut |p| {
        if bad.contains(&p) {
            GetOutcome::Invalid
        } else {
            GetOutcome::NotFound
        }
    });
    assert_eq!(outcome, ReadOutcome::Invalid);
    for b in bad {
        assert_eq!(asked.iter().filter(|&&p| p == b).count(), 1, "{asked:?}");
    }
    assert_eq!(asked.len(), 7, "every holder asked once, no retry round");
}

/// Rule: with every holder answering an invalid copy the read is `Invalid` (it was
/// `Unavailable` before: "corrupt" is the operator's cue to repair), and the counter of
/// invalid answers says how many copies were bad.
#[test]
fn a_record_bad_on_every_holder_is_invalid_and_counted() {
    let (key, peers) = key_and_peers(3);
    let config = ReadConfig {
        close_group_size: 3,
        ..ReadConfig::default()
    };
    let mut read = Read::new(key, config, secs(0), 1).unwrap();
    let view = StaticView::new();
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let mut outcome = None;
    let mut actions = drain(&mut read, millis(1), &view);
    while outcome.is_none() {
        for (id, _) in gets(&actions) {
            read.handle_get(millis(2), id, GetOutcome::Invalid);
        }
        actions = drain(&mut read, millis(2), &view);
        outcome = actions.iter().find_map(|a| match a {
            ReadEvent::Done(o) => Some(o.clone()),
            _ => None,
        });
        assert!(outcome.is_some() || !gets(&actions).is_empty(), "stuck");
    }
    assert_eq!(outcome, Some(ReadOutcome::Invalid));
    assert_eq!(read.stats().invalid, 3);
    assert_eq!(read.stats().plain_retries, 0);
}

/// Rule: while a holder that failed might still hold a valid copy, an invalid copy
/// elsewhere earns the read its retry round (only the failed holder is asked again),
/// and only then does the read end `Invalid`.
#[test]
fn an_invalid_copy_with_an_unreachable_holder_retries_it_before_ending_invalid() {
    let (key, peers) = key_and_peers(7);
    let read = Read::new(key, ReadConfig::default(), secs(0), 3).unwrap();
    let (bad, down) = (peers[1], peers[2]);
    let (outcome, asked) = run(read, &peers, &mut |p| {
        if p == bad {
            GetOutcome::Invalid
        } else if p == down {
            GetOutcome::Failed
        } else {
            GetOutcome::NotFound
        }
    });
    assert_eq!(outcome, ReadOutcome::Invalid);
    assert_eq!(asked.iter().filter(|&&p| p == down).count(), 2, "{asked:?}");
    assert_eq!(asked.iter().filter(|&&p| p == bad).count(), 1, "{asked:?}");
    assert_eq!(asked.len(), 8);
}

/// Rule: the retry round can find the valid copy: a holder that failed the first round
/// and serves in the second ends the read `Found`, although another copy was invalid.
#[test]
fn the_retry_round_after_an_invalid_copy_can_still_find_the_record() {
    let (key, peers) = key_and_peers(7);
    let read = Read::new(key, ReadConfig::default(), secs(0), 5).unwrap();
    let (bad, flaky) = (peers[0], peers[4]);
    let mut flaky_calls = 0;
    let (outcome, _) = run(read, &peers, &mut |p| {
        if p == bad {
            GetOutcome::Invalid
        } else if p == flaky {
            flaky_calls += 1;
            if flaky_calls == 1 {
                GetOutcome::Failed
            } else {
                GetOutcome::Found(block())
            }
        } else {
            GetOutcome::NotFound
        }
    });
    assert_eq!(outcome, ReadOutcome::Found(block()));
}

/// Rule: with an origin configured, a record that no holder has a valid copy of is asked
/// of the origin; if the origin fails too, the read says `Invalid` (what the peers
/// showed), not `Unavailable`.
#[test]
fn an_invalid_read_falls_back_to_the_origin_and_keeps_its_outcome_if_the_origin_fails() {
    let (key, peers) = key_and_peers(7);
    let config = ReadConfig {
        origin: true,
        ..ReadConfig::default()
    };
    let read = Read::new(key, config, secs(0), 9).unwrap();
    let mut origin_asked = false;
    let view = StaticView::new();
    let mut read = read;
    let _ = drain(&mut read, secs(0), &view);
    read.handle_lookup(secs(0), &peers);
    let mut outcome = None;
    for _ in 0..100 {
        let actions = drain(&mut read, secs(0), &view);
        for a in &actions {
            match a {
                ReadEvent::Get { id, peer } => {
                    let answer = if *peer == peers[0] {
                        GetOutcome::Invalid
                    } else {
                        GetOutcome::NotFound
                    };
                    read.handle_get(secs(0), *id, answer);
                }
                ReadEvent::FetchOrigin => {
                    origin_asked = true;
                    read.handle_origin(secs(0), OriginOutcome::Failed);
                }
                ReadEvent::Done(o) => outcome = Some(o.clone()),
                _ => {}
            }
        }
        if outcome.is_some() {
            break;
        }
    }
    assert!(origin_asked);
    assert_eq!(outcome, Some(ReadOutcome::Invalid));
}
