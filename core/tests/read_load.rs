//! Server-advertised load through the read machine: the first GET's choice uses the
//! holders' advertised load, never at the expense of eligibility, and only while the hint
//! is live. Each test names its rule and fails without it.

mod read_support;

use peerblock_core::load::{LoadConfig, LoadTable};
use peerblock_core::placement::PeerId;
use peerblock_core::read::{Read, ReadConfig, ReadEvent, Spread};
use peerblock_core::rng::indexed_seed;
use peerblock_core::time::{Duration, Instant};
use peerblock_testkit::StaticView;
use read_support::{drain, gets, key_and_peers, secs};

const READS: u64 = 7_000;

fn load_aware() -> ReadConfig {
    ReadConfig {
        spread: Spread::LeastLoadedOfTwo,
        ..ReadConfig::default()
    }
}

/// Starts `READS` reads at `now` against peers 1..=7 and counts where each first GET went.
fn first_gets(now: Instant, view: &impl peerblock_core::read::PeerView) -> [u32; 8] {
    let (key, peers) = key_and_peers(7);
    let mut counts = [0u32; 8];
    for i in 0..READS {
        let mut read = Read::new(key, load_aware(), now, indexed_seed(9, i)).unwrap();
        assert_eq!(drain(&mut read, now, view), vec![ReadEvent::Lookup]);
        read.handle_lookup(now, &peers);
        let sent = gets(&drain(&mut read, now, view));
        assert_eq!(sent.len(), 1, "one first GET");
        counts[sent[0].1 .0[31] as usize] += 1;
    }
    counts
}

/// Rule: a holder advertising more load than the others is chosen less often than
/// uniform would choose it (1/7 of first reads, 1,000 of 7,000); here, never.
#[test]
fn a_holder_advertising_high_load_is_chosen_less_than_uniform() {
    let mut view = StaticView::new();
    for p in 1..=7u64 {
        view.advertised
            .insert(PeerId::from_u64(p), if p == 4 { 12 } else { 2 });
    }
    let counts = first_gets(secs(1), &view);
    assert_eq!(counts[4], 0, "{counts:?}");
    for p in [1, 2, 3, 5, 6, 7] {
        assert!((1_000..1_400).contains(&counts[p]), "{counts:?}");
    }
}

/// Rule: load never makes an ineligible holder eligible. Holders advertising zero load but
/// blocked (circuit open) or refusing are never chosen, however loaded the rest are.
#[test]
fn ineligible_idle_holders_are_never_chosen_over_loaded_eligible_ones() {
    let mut view = StaticView::new();
    for p in 1..=7u64 {
        view.advertised
            .insert(PeerId::from_u64(p), if p <= 2 { 0 } else { 50 });
    }
    view.block(PeerId::from_u64(1));
    view.refuse_until(PeerId::from_u64(2), secs(100));
    let counts = first_gets(secs(1), &view);
    assert_eq!((counts[1], counts[2]), (0, 0), "{counts:?}");
    assert_eq!(counts.iter().sum::<u32>(), READS as u32);
}

/// Rule: a hint only counts while it is live. Through a real [`LoadTable`] (the driver's
/// table as the view), a holder that reported itself busy is avoided within the horizon
/// and chosen like any other once the hint has aged out.
#[test]
fn stale_hints_age_out_of_the_choice() {
    let mut table: LoadTable<PeerId> = LoadTable::new(LoadConfig::default()).unwrap();
    let t0 = secs(1);
    for p in 1..=7u64 {
        table.record(t0, PeerId::from_u64(p), if p == 3 { 20 } else { 1 });
    }
    let fresh = first_gets(t0 + Duration::from_secs(1), &table);
    assert_eq!(
        fresh[3], 0,
        "busy holder avoided while its hint is live: {fresh:?}"
    );
    let horizon = table.config().horizon;
    let stale = first_gets(t0 + horizon, &table);
    assert!(
        (800..1_200).contains(&stale[3]),
        "aged-out hint ignored: {stale:?}"
    );
}

/// Rule: the driver's table stays within its bound however many peers answer, keeping
/// the newest hints.
#[test]
fn the_load_table_stays_bounded() {
    let capacity = 100;
    let mut table: LoadTable<PeerId> = LoadTable::new(LoadConfig {
        capacity,
        ..LoadConfig::default()
    })
    .unwrap();
    for i in 0..10_000u64 {
        table.record(Instant::from_millis(i / 10), PeerId::from_u64(i), 3);
        assert!(table.len() <= capacity);
    }
    let now = Instant::from_millis(1_000);
    assert!(table.load(now, &PeerId::from_u64(9_999)).is_some());
    assert!(table.load(now, &PeerId::from_u64(9_899)).is_none());
}
