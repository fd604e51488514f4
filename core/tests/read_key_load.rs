//! Per-key load hints delivered with the lookup ([`LookupPeer`]): the two-choices rule
//! compares the GETs for *this record* each holder reported, a holder without a hint keeps
//! its uniform share, node-level load only breaks ties, eligibility always wins, and a
//! peer's hint is bounded. Each test names its rule and fails without it.

mod read_support;

use peerblock_core::load::MAX_ADVERTISED_LOAD;
use peerblock_core::placement::PeerId;
use peerblock_core::read::{LookupPeer, PeerView, Read, ReadConfig, ReadEvent, Spread};
use peerblock_core::rng::indexed_seed;
use peerblock_testkit::StaticView;
use read_support::{drain, gets, key_and_peers, secs};

const READS: u64 = 7_000;

fn config(spread: Spread) -> ReadConfig {
    ReadConfig {
        spread,
        ..ReadConfig::default()
    }
}

/// Peers 1..=7, each with `hints[i - 1]` as its per-key hint.
fn hinted(hints: [Option<u32>; 7]) -> Vec<LookupPeer> {
    let (_, peers) = key_and_peers(7);
    peers
        .into_iter()
        .zip(hints)
        .map(|(id, key_load)| LookupPeer { id, key_load })
        .collect()
}

/// Starts `READS` load-aware reads, answers each lookup with `answer`, and counts where
/// each first GET went (index = peer id).
fn first_gets(view: &impl PeerView, spread: Spread, answer: impl Fn(&mut Read)) -> [u32; 8] {
    let (key, _) = key_and_peers(7);
    let now = secs(1);
    let mut counts = [0u32; 8];
    for i in 0..READS {
        let mut read = Read::new(key, config(spread), now, indexed_seed(11, i)).unwrap();
        assert_eq!(drain(&mut read, now, view), vec![ReadEvent::Lookup]);
        answer(&mut read);
        let sent = gets(&drain(&mut read, now, view));
        assert_eq!(sent.len(), 1, "one first GET");
        counts[sent[0].1 .0[31] as usize] += 1;
    }
    counts
}

fn some(v: [u32; 7]) -> [Option<u32>; 7] {
    v.map(Some)
}

/// Rule: per-key hints drive the choice. A holder reporting many more GETs for the key
/// than the others loses every pairing: never chosen, where the same reads without the
/// hints (plain `handle_lookup`) choose it about 1,000 times in 7,000 like uniform.
#[test]
fn a_holder_reporting_many_gets_for_the_key_is_chosen_less_than_uniform() {
    let view = StaticView::new();
    let peers = hinted(some([5, 5, 5, 30, 5, 5, 5]));
    let counts = first_gets(&view, Spread::LeastLoadedOfTwo, |r| {
        r.handle_lookup_peers(secs(1), &peers)
    });
    assert_eq!(counts[4], 0, "{counts:?}");
    for p in [1, 2, 3, 5, 6, 7] {
        assert!((1_000..1_400).contains(&counts[p]), "{counts:?}");
    }
    let ids: Vec<PeerId> = peers.iter().map(|p| p.id).collect();
    let plain = first_gets(&view, Spread::LeastLoadedOfTwo, |r| {
        r.handle_lookup(secs(1), &ids)
    });
    assert!((850..1_150).contains(&plain[4]), "{plain:?}");
    // Uniform ignores hints by definition.
    let uniform = first_gets(&view, Spread::Uniform, |r| {
        r.handle_lookup_peers(secs(1), &peers)
    });
    assert!((850..1_150).contains(&uniform[4]), "{uniform:?}");
}

/// Rule: per-key hints come before node-level load (different scales, never mixed; node
/// load only breaks ties). Holder 4 advertises itself idle at node level while every other
/// holder advertises 10 requests in progress, but it reported 30 GETs for this key against
/// the others' 5: it is never chosen. (Scored on node load it would win every pairing it is
/// drawn into: about 2,000 of 7,000.) With equal per-key hints the node load decides.
#[test]
fn per_key_hints_come_before_node_level_load() {
    let mut view = StaticView::new();
    for p in 1..=7u64 {
        view.advertised
            .insert(PeerId::from_u64(p), if p == 4 { 0 } else { 10 });
    }
    let peers = hinted(some([5, 5, 5, 30, 5, 5, 5]));
    let counts = first_gets(&view, Spread::LeastLoadedOfTwo, |r| {
        r.handle_lookup_peers(secs(1), &peers)
    });
    assert_eq!(counts[4], 0, "{counts:?}");
    let tied = hinted(some([5; 7]));
    let counts = first_gets(&view, Spread::LeastLoadedOfTwo, |r| {
        r.handle_lookup_peers(secs(1), &tied)
    });
    assert!((1_800..2_200).contains(&counts[4]), "{counts:?}");
}

/// Rule: a holder without a per-key hint (its reply carried none: behind NAT, reached only
/// through others) keeps exactly its uniform share, about 1,000 of 7,000 — neither
/// presumed idle (it would win most pairings) nor presumed as loaded as the mean hint
/// (it would lose to every below-mean holder: far fewer than 1,000). Among the hinted
/// holders the per-key comparison still applies.
#[test]
fn a_holder_without_a_hint_keeps_its_uniform_share() {
    let view = StaticView::new();
    let peers = hinted([Some(0), Some(0), Some(0), Some(0), Some(20), None, None]);
    let counts = first_gets(&view, Spread::LeastLoadedOfTwo, |r| {
        r.handle_lookup_peers(secs(1), &peers)
    });
    for p in [6, 7] {
        assert!((850..1_150).contains(&counts[p]), "{counts:?}");
    }
    assert_eq!(counts[5], 0, "{counts:?}");
}

/// Rule: hints never make an ineligible holder eligible. Holders reporting no GETs at all
/// but blocked (circuit open) or refusing are never chosen, however requested the rest are.
#[test]
fn ineligible_holders_are_never_chosen_however_low_their_key_load() {
    let mut view = StaticView::new();
    view.block(PeerId::from_u64(1));
    view.refuse_until(PeerId::from_u64(2), secs(100));
    let peers = hinted(some([0, 0, 50, 50, 50, 50, 50]));
    let counts = first_gets(&view, Spread::LeastLoadedOfTwo, |r| {
        r.handle_lookup_peers(secs(1), &peers)
    });
    assert_eq!((counts[1], counts[2]), (0, 0), "{counts:?}");
    assert_eq!(counts.iter().sum::<u32>(), READS as u32);
}

/// Rule: a peer's hint is its input, so it is bounded. `u32::MAX` reaches the choice as
/// [`MAX_ADVERTISED_LOAD`], and adding this client's GETs in flight cannot overflow.
#[test]
fn hints_are_bounded() {
    fn check(options: &[peerblock_core::read::ChoiceOption], _: u64) -> usize {
        assert!(options
            .iter()
            .all(|o| o.key_load.is_some_and(|k| k <= MAX_ADVERTISED_LOAD)));
        assert!(options
            .iter()
            .any(|o| o.key_load == Some(MAX_ADVERTISED_LOAD)));
        0
    }
    let peers = hinted(some([u32::MAX, 1, 1, 1, 1, 1, 1]));
    let view = StaticView::new();
    let counts = first_gets(&view, Spread::Custom(check), |r| {
        r.handle_lookup_peers(secs(1), &peers)
    });
    assert_eq!(counts[1], READS as u32);
    // The hostile hint loses every pairing, with the hostile holder's own GETs in flight
    // added on top (saturating, never wrapping to a small score).
    let mut busy = StaticView::new();
    busy.load.insert(PeerId::from_u64(1), u32::MAX);
    let counts = first_gets(&busy, Spread::LeastLoadedOfTwo, |r| {
        r.handle_lookup_peers(secs(1), &peers)
    });
    assert_eq!(counts[1], 0, "{counts:?}");
}

/// Rule: a read keeps each candidate's latest hint. A later lookup's hint replaces an
/// earlier one (holder 4 went from 0 to 30 GETs: avoided), while a lookup without hints
/// keeps what the read knew (holder 4 still at 0: preferred, about 2,000 of 7,000).
#[test]
fn a_later_hint_replaces_an_earlier_one_and_a_plain_lookup_keeps_it() {
    let view = StaticView::new();
    let early = hinted(some([10, 10, 10, 0, 10, 10, 10]));
    let late = hinted(some([10, 10, 10, 30, 10, 10, 10]));
    let ids: Vec<PeerId> = early.iter().map(|p| p.id).collect();
    let replaced = first_gets(&view, Spread::LeastLoadedOfTwo, |r| {
        r.handle_lookup_progress_peers(secs(1), &early[..5]);
        r.handle_lookup_peers(secs(1), &late);
    });
    assert_eq!(replaced[4], 0, "{replaced:?}");
    let kept = first_gets(&view, Spread::LeastLoadedOfTwo, |r| {
        r.handle_lookup_progress_peers(secs(1), &early);
        r.handle_lookup(secs(1), &ids);
    });
    assert!((1_800..2_200).contains(&kept[4]), "{kept:?}");
}
