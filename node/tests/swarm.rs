//! `peerblock-node swarm` end to end: a tiny scenario (6 node processes, 2 behind NAT, a
//! holder crashing and restarting, a node stalled and continued, 6 readers, one round)
//! run for real, bounded; its JSON has exactly the simulator's keys, the report is the
//! simulator's, and no process or file is left behind. And a hot file that starts at the
//! origin only (`file.placement = "origin"`) with nginx as the origin: every reader's
//! bytes exact, the origin's egress about one file, the second wave served by the nodes.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::procs::{run, TempDir};

const BOUND: Duration = Duration::from_secs(60);

const TINY: &str = r#"
name = "swarm-tiny"
seed = 5
[cluster]
nodes = 6
nat_nodes = 2
upload_mbps = 80.0
close_group = 3
[network]
latency = { dist = "constant", ms = 5.0 }
transfer_mbps = 16.0
transport = "http1"
[file]
size_mib = 2
block_kib = 512
[readers]
count = 6
start_spread_secs = 1.0
rounds = 1
parallel_blocks = 2
[client]
lookup_peers = 6
dial_timeout_ms = 500
[[faults]]
at_secs = 0.5
holder_block = 0
holder_rank = 0
kind = "crash"
[[faults]]
at_secs = 1.5
holder_block = 0
holder_rank = 0
kind = "restart"
[[faults]]
at_secs = 0.2
holder_block = 1
holder_rank = 1
kind = "silent"
[[faults]]
at_secs = 1.0
holder_block = 1
holder_rank = 1
kind = "restart"
"#;

fn keys(v: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Some(map) = v.as_object() {
        for (k, v) in map {
            let key = format!("{prefix}{k}");
            keys(v, &format!("{key}."), out);
            out.insert(key);
        }
    }
}

/// Processes whose command line mentions `needle` (the work directory of a run).
fn processes_mentioning(needle: &Path) -> Vec<String> {
    let needle = needle.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(&needle) {
                found.push(cmd);
            }
        }
    }
    found
}

#[test]
fn a_tiny_scenario_runs_for_real_and_reports_like_the_simulator() {
    let dir = TempDir::new("swarm");
    let scenario = dir.join("tiny.toml");
    std::fs::write(&scenario, TINY).unwrap();
    let json = dir.join("real.json");
    let work = dir.join("work");
    let started = std::time::Instant::now();
    let out = run(
        &[
            "swarm",
            scenario.to_str().unwrap(),
            "--scale",
            "0.25",
            "--json",
            json.to_str().unwrap(),
            "--work-dir",
            work.to_str().unwrap(),
        ],
        BOUND,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    // The simulator's report, headed by what ran for real.
    assert!(stdout.contains("6 `serve` processes"), "{stdout}");
    assert!(
        stdout.contains("peerblock sim: swarm-tiny  (seed 5)"),
        "{stdout}"
    );
    assert!(stdout.contains("downloads completed   6/6"), "{stdout}");
    // Progress on stderr.
    assert!(
        stderr.contains("swarm: starting 6 node processes"),
        "{stderr}"
    );
    // The JSON: the simulator's keys exactly; every read ended; nothing false.
    let real: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let s = sim::scenario::Scenario::load(&scenario).unwrap();
    let simulated = sim::world::run(
        &s,
        sim::world::RunOptions {
            seed: 5,
            trace: None,
            extra_faults: Vec::new(),
            progress: None,
        },
    );
    let simulated: serde_json::Value = serde_json::from_str(&simulated.summary.to_json()).unwrap();
    let (mut a, mut b) = (BTreeSet::new(), BTreeSet::new());
    keys(&real, "", &mut a);
    keys(&simulated, "", &mut b);
    // limit_hits' entries are per run (the limits that were hit).
    a.retain(|k| !k.starts_with("limit_hits."));
    b.retain(|k| !k.starts_with("limit_hits."));
    assert_eq!(a, b, "the same --json keys as the simulator");
    assert_eq!(real["reads"]["started"], 24);
    assert_eq!(real["reads"]["found"], 24);
    assert_eq!(real["reads"]["false_not_found"], 0);
    assert_eq!(real["reads"]["wrong_bytes"], 0);
    assert_eq!(real["downloads"]["completed"], 6);
    // NAT'd holders cost failed dials (blackholed, not refused: a timeout).
    assert!(real["gets"]["dial_failed"].as_u64().unwrap() > 0, "{real}");
    // Every process stopped, the work directory removed.
    assert!(!work.exists(), "work directory left behind");
    let left = processes_mentioning(&work);
    assert!(left.is_empty(), "processes left: {left:?}");
}

#[test]
fn a_bad_scenario_is_refused_naming_the_key_before_anything_starts() {
    let dir = TempDir::new("swarm-bad");
    let scenario = dir.join("bad.toml");
    std::fs::write(&scenario, "[cluster]\nnodes = 4\nclose_group = 9\n").unwrap();
    let out = run(&["swarm", scenario.to_str().unwrap()], BOUND);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cluster.close_group"), "{stderr}");
    std::fs::write(
        &scenario,
        "[[faults]]\nat_secs = 1.0\nnode = 0\nkind = \"corrupt\"\n",
    )
    .unwrap();
    let out = run(&["swarm", scenario.to_str().unwrap()], BOUND);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("faults[0].kind"), "{stderr}");
    let out = run(
        &["swarm", scenario.to_str().unwrap(), "--scale", "2"],
        BOUND,
    );
    assert_eq!(out.status.code(), Some(2));
    // The simulator's relay ablations have no switch in the node: refused by name.
    std::fs::write(
        &scenario,
        "[network]\ntransport = \"http1\"\n[file]\nplacement = \"origin\"\n[relay]\nthrough_parent = false\n",
    )
    .unwrap();
    let out = run(&["swarm", scenario.to_str().unwrap()], BOUND);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("relay.through_parent = false"), "{stderr}");
    let out = run(&["swarm", "--help"], BOUND);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--seed", "--scale", "--json", "--driver", "--max-downloads"] {
        assert!(help.contains(flag), "{help}");
    }
}

const HOT: &str = r#"
name = "swarm-hot"
seed = 3
[cluster]
nodes = 4
upload_mbps = 160.0
close_group = 3
[network]
latency = { dist = "constant", ms = 1.0 }
transport = "http1"
[listener]
max_inflight_mib = 64
max_inflight_per_source_mib = 16
[file]
size_mib = 4
block_kib = 512
placement = "origin"
[origin]
upload_mbps = 40.0
latency_ms = 1.0
[relay]
cache_mib = 64
[readers]
count = 8
start_spread_secs = 0.0
rounds = 2
round_interval_secs = 6.0
parallel_blocks = 2
[client]
lookup_peers = 4
"#;

#[test]
fn a_hot_file_at_the_origin_runs_for_real_with_nginx_leaving_the_origin_about_once() {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    if nginx.is_none() {
        eprintln!(
            "skipped: nginx is not installed (apt-get install nginx-light; .ci/run installs it)"
        );
        return;
    }
    let dir = TempDir::new("swarm-hot");
    let scenario = dir.join("hot.toml");
    std::fs::write(&scenario, HOT).unwrap();
    let json = dir.join("real.json");
    let work = dir.join("work");
    let out = run(
        &[
            "swarm",
            scenario.to_str().unwrap(),
            "--scale",
            "1",
            "--json",
            json.to_str().unwrap(),
            "--work-dir",
            work.to_str().unwrap(),
        ],
        Duration::from_secs(90),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("origin nginx at http://127.3.0.1:"),
        "{stderr}"
    );
    let real: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // Every block of both waves read and exact.
    assert_eq!(real["downloads"]["completed"], 16, "{real}");
    assert_eq!(real["reads"]["wrong_bytes"], 0, "{real}");
    assert_eq!(real["reads"]["false_not_found"], 0, "{real}");
    let origin = &real["origin"];
    // The nodes relayed the misses; every block left the origin at least once, and the
    // origin sent about one file, not one per reader (8 readers would be 8 files).
    assert!(origin["relays"].as_u64().unwrap() > 0, "{origin}");
    let per_file = origin["egress_per_file"].as_f64().unwrap();
    assert!((1.0..2.0).contains(&per_file), "{origin}");
    // The second wave: the nodes' caches; the origin answers nothing but the readers'
    // probes (none: the swarm probes once), so under 1% of the file.
    let waves = origin["egress_bytes_per_round"].as_array().unwrap();
    assert_eq!(waves.len(), 2, "{origin}");
    assert!(
        waves[1].as_u64().unwrap() < (4 << 20) / 100,
        "second wave took from the origin: {origin}"
    );
    assert!(origin["cache_hits"].as_u64().unwrap() > 0, "{origin}");
    // The same report as the simulator's, with its origin lines.
    assert!(stdout.contains("origin egress"), "{stdout}");
    assert!(!work.exists(), "work directory left behind");
    let left = processes_mentioning(&work);
    assert!(left.is_empty(), "processes left: {left:?}");
}
