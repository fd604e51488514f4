//! The clock mapping drivers share (`time::Clock`).

use peerblock_core::time::{Clock, Duration, Instant};

#[test]
fn clock_maps_std_instants_both_ways_from_its_epoch() {
    let epoch = std::time::Instant::now();
    let clock = Clock::new(epoch);
    let later = epoch + Duration::from_millis(1_250);
    assert_eq!(clock.to_core(epoch), Instant::ZERO);
    assert_eq!(clock.to_core(later), Instant::from_millis(1_250));
    assert_eq!(clock.to_std(Instant::from_millis(1_250)), Some(later));
}

#[test]
fn clock_saturates_before_its_epoch_instead_of_panicking() {
    let epoch = std::time::Instant::now() + Duration::from_secs(10);
    let clock = Clock::new(epoch);
    assert_eq!(clock.to_core(epoch - Duration::from_secs(5)), Instant::ZERO);
}
