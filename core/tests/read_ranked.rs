//! Ranked lookups (issue 25): a roster read's candidates in placement order, so its close
//! group is the placement's and, when that close group is silent, refusing, failing or
//! lying, the read goes on to the next ranked holders, nearest-first, bounded by the
//! candidates the lookup gave. One rule per test, on injected time.

mod read_support;

use bytes::Bytes;
use peerblock_core::placement::PeerId;
use peerblock_core::read::{
    GetOutcome, LookupPeer, Read, ReadConfig, ReadEvent, ReadOutcome, Spread,
};
use peerblock_core::time::Instant;
use peerblock_testkit::StaticView;
use read_support::{drain, key_and_peers, secs};

fn config(group: usize) -> ReadConfig {
    ReadConfig {
        close_group_size: group,
        spread: Spread::Nearest,
        ..ReadConfig::default()
    }
}

/// Runs a ranked read (every lookup answered with `ranked`, in that order) to its end;
/// every GET is answered at once with `answer(peer)`, every wait waited out. Returns the
/// outcome and the peers asked, in order.
fn run(
    mut read: Read,
    ranked: &[PeerId],
    answer: &mut dyn FnMut(PeerId) -> GetOutcome,
) -> (ReadOutcome, Vec<PeerId>) {
    let view = StaticView::new();
    let peers: Vec<LookupPeer> = ranked.iter().copied().map(LookupPeer::new).collect();
    let mut now: Instant = secs(0);
    let mut asked = Vec::new();
    for _ in 0..1_000 {
        let actions = drain(&mut read, now, &view);
        for a in &actions {
            match a {
                ReadEvent::Lookup => read.handle_lookup_ranked(now, &peers),
                ReadEvent::Get { id, peer } => {
                    asked.push(*peer);
                    read.handle_get(now, *id, answer(*peer));
                }
                ReadEvent::Done(outcome) => return (outcome.clone(), asked),
                _ => {}
            }
        }
        if actions.is_empty() {
            let at = read
                .poll_timeout()
                .expect("a read with nothing to do waits")
                .at;
            now = at.max(now);
            read.handle_timeout(now);
        }
    }
    panic!("the read never finished");
}

/// Ids 1..=n ranked in reverse: rank 0 is the XOR-farthest of them from key 0.
fn reversed(n: u64) -> Vec<PeerId> {
    let (_, mut peers) = key_and_peers(n);
    peers.reverse();
    peers
}

#[test]
fn a_ranked_close_group_is_the_first_ranked_peers_whatever_their_xor_distance() {
    let (key, _) = key_and_peers(0);
    let ranked = reversed(6);
    let read = Read::new(key, config(3), secs(0), 1).unwrap();
    let (outcome, asked) = run(read, &ranked, &mut |p| {
        if p == ranked[0] {
            GetOutcome::Found(Bytes::from_static(b"b"))
        } else {
            GetOutcome::NotFound
        }
    });
    assert!(matches!(outcome, ReadOutcome::Found(_)));
    assert_eq!(
        asked,
        vec![ranked[0]],
        "rank 0 first, not the XOR-nearest id 1"
    );
}

#[test]
fn a_failing_close_group_is_passed_for_the_next_ranked_holders_nearest_first() {
    let (key, _) = key_and_peers(0);
    let ranked = reversed(8);
    let read = Read::new(key, config(3), secs(0), 1).unwrap();
    let holder = ranked[4];
    let (outcome, asked) = run(read, &ranked, &mut |p| {
        if p == holder {
            GetOutcome::Found(Bytes::from_static(b"b"))
        } else if ranked[..3].contains(&p) {
            GetOutcome::Failed
        } else {
            GetOutcome::NotFound
        }
    });
    assert!(matches!(outcome, ReadOutcome::Found(_)), "{outcome:?}");
    assert_eq!(&asked[..3], &ranked[..3], "the close group first");
    assert_eq!(
        &asked[3..],
        &ranked[3..5],
        "then rank 3, rank 4: nearest-first"
    );
}

#[test]
fn a_close_group_serving_invalid_copies_is_passed_for_the_next_ranked_holder() {
    let (key, _) = key_and_peers(0);
    let ranked = reversed(8);
    let read = Read::new(key, config(3), secs(0), 1).unwrap();
    let (outcome, asked) = run(read, &ranked, &mut |p| {
        if ranked[..3].contains(&p) {
            GetOutcome::Invalid
        } else {
            GetOutcome::Found(Bytes::from_static(b"b"))
        }
    });
    assert!(matches!(outcome, ReadOutcome::Found(_)), "{outcome:?}");
    assert_eq!(
        asked.len(),
        4,
        "three liars, each asked once, then rank 3: {asked:?}"
    );
    assert_eq!(asked[3], ranked[3]);
}

#[test]
fn absence_is_proved_by_the_ranked_close_group_whatever_the_fallbacks_say() {
    let (key, _) = key_and_peers(0);
    let ranked = reversed(8);
    let read = Read::new(key, config(3), secs(0), 1).unwrap();
    // The fallbacks (XOR-nearer ids) fail: by XOR order they would be the close group and
    // the read could prove nothing; by rank, the close group answered.
    let (outcome, asked) = run(read, &ranked, &mut |p| {
        if ranked[..3].contains(&p) {
            GetOutcome::NotFound
        } else {
            GetOutcome::Failed
        }
    });
    assert_eq!(outcome, ReadOutcome::Absent, "asked {asked:?}");
}

#[test]
fn a_silent_ranked_close_group_leaves_the_read_unavailable_only_after_every_fallback() {
    let (key, _) = key_and_peers(0);
    let ranked = reversed(6);
    let read = Read::new(key, config(3), secs(0), 1).unwrap();
    let (outcome, asked) = run(read, &ranked, &mut |p| {
        if ranked[..3].contains(&p) {
            GetOutcome::Failed
        } else {
            GetOutcome::NotFound
        }
    });
    // The fallbacks' NotFounds do not prove absence (the close group could not answer).
    assert_eq!(outcome, ReadOutcome::Unavailable);
    for p in &ranked {
        assert!(asked.contains(p), "{p:?} never asked");
    }
}
