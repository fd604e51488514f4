//! The testnet A/B replay reproduces the reference's shape (listener-limits-adr.md, "Test
//! evidence"): nearest-first concentrates first reads on one holder, spreading brings the
//! busiest holder to about 1/7 plus noise; old limits with silent listeners lose a large
//! share of downloads, every failure a false "not found"; new limits complete everything;
//! peerblock's arm completes everything with no false absent, even at the old limits.

mod common;

use common::{run, shipped};
use sim::metrics::Summary;

const SEED: u64 = 1;

fn arm(name: &str) -> Summary {
    run(&shipped(name), SEED).summary
}

#[test]
fn nearest_first_concentrates_and_spreading_brings_it_to_about_a_seventh() {
    let nearest = arm("testnet-ab-old-limits-nearest.toml");
    let uniform = arm("testnet-ab-old-limits-uniform.toml");
    let (n, u) = (
        nearest.first_read_share.mean_top,
        uniform.first_read_share.mean_top,
    );
    assert!(n > 0.45, "nearest-first busiest share {n}");
    assert!(n > 2.5 * u, "nearest {n} vs uniform {u}");
    assert!((1.0 / 7.0..0.22).contains(&u), "uniform busiest share {u}");
}

#[test]
fn old_limits_with_silent_listeners_lose_downloads_all_as_false_not_found() {
    // The old limits put the cluster on a knife edge: a round either completes nearly
    // entirely or collapses, depending on placement and timing. Over four seeds both old
    // arms lose a large share, and every lost download is a false "not found".
    for name in [
        "testnet-ab-old-limits-nearest.toml",
        "testnet-ab-old-limits-uniform.toml",
    ] {
        let (mut done, mut started) = (0, 0);
        for seed in 1..=4 {
            let s = run(&shipped(name), seed).summary;
            done += s.downloads.completed;
            started += s.downloads.started;
            assert_eq!(s.reads.absent, s.reads.false_absent, "{name} seed {seed}");
            assert_eq!(s.reads.busy + s.reads.unavailable, 0, "{name} seed {seed}");
            assert_eq!(
                s.reads.found + s.reads.absent,
                s.reads.started,
                "{name} seed {seed}"
            );
            assert_eq!(s.refusals, 0, "{name}: silent listeners never refuse");
        }
        let share = done as f64 / started as f64;
        assert!(
            (0.3..0.9).contains(&share),
            "{name}: completed {share} over seeds 1-4"
        );
    }
}

#[test]
fn new_limits_complete_every_download() {
    let s = arm("testnet-ab-new-limits-uniform.toml");
    assert_eq!((s.downloads.completed, s.downloads.started), (384, 384));
    let s = arm("testnet-ab-192-readers.toml");
    assert_eq!((s.downloads.completed, s.downloads.started), (768, 768));
    assert_eq!(s.reads.false_absent, 0);
}

#[test]
fn peerblock_completes_everything_with_no_false_absent() {
    let s = arm("testnet-ab-peerblock.toml");
    assert_eq!((s.downloads.completed, s.downloads.started), (384, 384));
    assert_eq!(s.reads.false_absent, 0);
    assert_eq!(s.reads.wrong_bytes, 0);
}

#[test]
fn peerblock_at_the_old_limits_never_reports_a_stored_block_absent() {
    // The reference's failure mode was silence plus a 30-minute suppression turning into
    // "not found". With explicit refusal and refusal waits, the same limits lose far fewer
    // downloads, and every read that fails says "busy", never "absent".
    let (mut done, mut started) = (0, 0);
    for seed in 1..=4 {
        let s = run(&shipped("testnet-ab-peerblock-old-limits.toml"), seed).summary;
        assert_eq!(s.reads.false_absent, 0, "seed {seed}");
        assert_eq!(s.reads.unavailable, 0, "seed {seed}");
        assert_eq!(s.reads.found + s.reads.busy, s.reads.started, "seed {seed}");
        assert!(
            s.refusals > 0,
            "seed {seed}: the old limits must actually refuse"
        );
        done += s.downloads.completed;
        started += s.downloads.started;
    }
    let mut old_done = 0;
    for seed in 1..=4 {
        old_done += run(&shipped("testnet-ab-old-limits-uniform.toml"), seed)
            .summary
            .downloads
            .completed;
    }
    assert!(
        done as f64 / started as f64 > 0.85,
        "completed {done}/{started}"
    );
    assert!(
        done > old_done,
        "peerblock {done} vs reference client {old_done}"
    );
}
