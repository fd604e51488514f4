//! Unit tests of swarm planning: scaling, node configurations and the plan's checks.

use super::*;
use crate::config::NodeConfig;

fn scenario(text: &str) -> Scenario {
    Scenario::parse(text, "t.toml", "t").unwrap()
}

#[test]
fn scale_multiplies_sizes_rates_budgets_and_rounds() {
    let s = scenario(
        "[cluster]\nupload_mbps = 1000.0\n[network]\ntransfer_mbps = 32.0\n\
         [file]\nsize_mib = 50\nblock_kib = 4096\n[readers]\nrounds = 6\n",
    );
    let sc = scale_scenario(&s, 0.125).unwrap();
    assert_eq!(sc.rounds, 1);
    assert_eq!(sc.block_len.len(), 13);
    assert_eq!(sc.block_len[0], 512 * 1024);
    assert_eq!(sc.block_len[12], (2 * 1024 * 1024) / 8);
    assert_eq!(sc.upload_bytes_per_second, 15_625_000);
    assert_eq!(sc.connection_bytes_per_second, 500_000);
    assert_eq!(sc.max_inflight_bytes, 8 * 1024 * 1024);
    assert_eq!(sc.max_inflight_bytes_per_source, 2 * 1024 * 1024);
    assert_eq!(scale_scenario(&s, 1.0).unwrap().rounds, 6);
    // A multiplexed scenario's per-response window: budgets × block / window.
    let m = scenario(
        "[network]\ntransport = \"multiplexed\"\n[listener]\nreserve_kib = 256\n\
         [file]\nsize_mib = 50\nblock_kib = 4096\n",
    );
    let windowed = scale_scenario(&m, 0.125).unwrap();
    assert_eq!(windowed.max_inflight_bytes, 16 * 8 * 1024 * 1024);
    assert_eq!(windowed.max_inflight_bytes_per_source, 16 * 2 * 1024 * 1024);
    assert_eq!(scale_scenario(&s, 0.25).unwrap().rounds, 2);
    let text = node_config_text(&s, &sc);
    let config = NodeConfig::from_toml_str(&text).unwrap();
    assert_eq!(config.listener.upload_bytes_per_second, 15_625_000);
    assert_eq!(config.listener.idle_timeout, Duration::from_secs(30));
    assert!(!config.listener.relay);
}

#[test]
fn a_scale_out_of_range_or_below_the_pacing_minimum_is_refused() {
    let s = scenario("[cluster]\nupload_mbps = 0.01\n");
    for bad in [0.0, -1.0, 1.5, f64::NAN] {
        let e = scale_scenario(&s, bad).unwrap_err().to_string();
        assert!(e.contains("--scale"), "{e}");
    }
    let e = scale_scenario(&s, 0.5).unwrap_err().to_string();
    assert!(e.contains("cluster.upload_mbps"), "{e}");
}

#[test]
fn addresses_are_distinct_loopback_addresses() {
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..MAX_SWARM_NODES {
        let ip = node_ip(i);
        assert!(ip.is_loopback() && ip.octets()[3] != 0);
        assert!(seen.insert(ip));
    }
    for a in 0..MAX_SWARM_READERS {
        let ip = reader_ip(a);
        assert!(ip.is_loopback() && ip.octets()[3] != 0);
        assert!(seen.insert(ip));
    }
}
