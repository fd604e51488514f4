//! Bad scenarios and bad command lines get a clear error before the run: never a panic, a
//! hang or an out-of-memory kill. One test per case found by trying bad inputs (issue 13,
//! section 2). "Before the run" is checked by stdout staying empty: a run prints its report
//! there.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn sim_in(dir: &Path, args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run sim");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn sim(args: &[&str]) -> Out {
    sim_in(Path::new("."), args)
}

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sim-bad-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `text` as a scenario file and returns its path.
fn scenario(name: &str, text: &str) -> String {
    let p = dir(name).join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

fn shipped(name: &str) -> String {
    format!("{}/../scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The scenario is refused with exit status 2 before any run, and the message names every
/// one of `words` (the key, the bound).
fn refused(name: &str, text: &str, words: &[&str]) -> String {
    let p = scenario(name, text);
    let o = sim(&[&p, "--quiet"]);
    assert_eq!(o.code, 2, "{name}: exit status; stderr: {}", o.stderr);
    assert!(o.stdout.is_empty(), "{name}: nothing ran: {}", o.stdout);
    assert!(!o.stderr.contains("panicked"), "{name}: {}", o.stderr);
    for w in words {
        assert!(
            o.stderr.contains(w),
            "{name}: message lacks `{w}`: {}",
            o.stderr
        );
    }
    o.stderr
}

#[test]
fn a_close_group_above_cores_bound_is_refused_not_a_panic() {
    refused(
        "close17",
        "[cluster]\nclose_group = 17\n",
        &["cluster.close_group", "16", "got 17", ":2:"],
    );
}

#[test]
fn a_zero_failed_cooldown_names_its_own_key() {
    let err = refused(
        "failed0",
        "[client]\nfailed_cooldown_secs = 0\n",
        &["client.failed_cooldown_secs", ":2:"],
    );
    assert!(!err.contains("refused_cooldown_secs"), "{err}");
}

#[test]
fn a_flap_too_fast_or_too_long_is_refused() {
    let flap = |period: &str, duration: &str| {
        format!(
            "[[faults]]\nat_secs = 1.0\nkind = \"flap\"\nnode = 0\nperiod_secs = {period}\nduration_secs = {duration}\n"
        )
    };
    refused(
        "flapfast",
        &flap("1e-10", "10.0"),
        &["faults[0].period_secs", "1e-10", ":5:"],
    );
    refused(
        "flaplong",
        &flap("1.0", "1e12"),
        &["faults[0].duration_secs", "1e12", ":6:"],
    );
    // Each within its range, but their quotient is a million steps.
    refused(
        "flapsteps",
        &flap("0.01", "10000.0"),
        &["faults[0].duration_secs / faults[0].period_secs", "100000"],
    );
}

#[test]
fn a_million_readers_times_ten_thousand_rounds_is_refused_by_the_estimate() {
    refused(
        "huge-readers",
        "[readers]\ncount = 1000000\nrounds = 10000\n",
        &[
            "too large to simulate",
            "readers.count",
            "readers.rounds",
            "bound of",
        ],
    );
}

#[test]
fn a_sweep_drawing_a_hundred_million_crashes_is_refused() {
    let p = scenario("sweep-crashes", "[sweep]\ncrashes = 100000000\n");
    let o = sim(&[&p, "--seeds", "1..3", "--quiet"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    assert!(
        o.stderr.contains("sweep.crashes") && o.stderr.contains("10000"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_hundred_thousand_nodes_times_97000_blocks_is_refused_at_once() {
    refused(
        "huge-placement",
        "[cluster]\nnodes = 100000\n\n[file]\nsize_mib = 97000\nblock_kib = 1024\n",
        &[
            "too large to simulate",
            "cluster.nodes",
            "file.size_mib / file.block_kib",
        ],
    );
}

#[test]
fn nonsense_magnitudes_are_refused_with_their_range() {
    refused(
        "tiny-upload",
        "[cluster]\nupload_mbps = 1e-300\n",
        &["cluster.upload_mbps", "1e-300", "0.001"],
    );
    refused(
        "huge-latency",
        "[network]\nlatency = { dist = \"constant\", ms = 1e300 }\n",
        &["network.latency.ms", "1e300", "60000", ":2:"],
    );
    refused(
        "huge-dial",
        "[client]\ndial_timeout_ms = 9000000000000000000\n",
        &["client.dial_timeout_ms", "3600000"],
    );
}

#[test]
fn an_unwritable_output_is_reported_before_the_run() {
    for flag in ["--json", "--report", "--trace"] {
        let o = sim(&[
            &shipped("fault-dead-holder.toml"),
            flag,
            "/no/such/dir/out",
            "--quiet",
        ]);
        assert_eq!(o.code, 3, "{flag}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{flag}: nothing ran: {}", o.stdout);
        assert!(
            o.stderr.contains(flag) && o.stderr.contains("/no/such/dir/out"),
            "{flag}: {}",
            o.stderr
        );
    }
}

#[test]
fn per_run_outputs_with_a_multi_seed_sweep_are_usage_errors() {
    for flag in ["--json", "--report", "--trace"] {
        let o = sim(&[
            &shipped("fault-dead-holder.toml"),
            "--seeds",
            "1..3",
            flag,
            "out",
        ]);
        assert_eq!(o.code, 2, "{flag}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{flag}: {}", o.stdout);
        assert!(
            o.stderr.contains(flag) && o.stderr.contains("single seed"),
            "{flag}: {}",
            o.stderr
        );
    }
}

#[test]
fn trace_dash_means_stdout_as_json_dash_does() {
    let d = dir("trace-dash");
    let o = sim_in(
        &d,
        &[
            &shipped("fault-dead-holder.toml"),
            "--trace",
            "-",
            "--quiet",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!d.join("-").exists(), "no file named `-`");
    let first = o.stdout.lines().next().unwrap_or_default();
    // A trace line: `seconds.micros kind details`.
    let time = first.split(' ').next().unwrap();
    assert!(
        time.split_once('.')
            .is_some_and(|(s, us)| s.parse::<u64>().is_ok() && us.len() == 6),
        "stdout starts with the trace: {first}"
    );
    assert!(
        !o.stdout.contains("downloads completed"),
        "the trace replaces the human report"
    );
    let both = sim_in(
        &d,
        &[
            &shipped("fault-dead-holder.toml"),
            "--trace",
            "-",
            "--json",
            "-",
        ],
    );
    assert_eq!(both.code, 2, "{}", both.stderr);
}

#[test]
fn a_missing_compared_file_is_reported_before_the_main_run() {
    let p = scenario("compare-missing", "compare = [\"no-such-arm.toml\"]\n");
    let o = sim(&[&p, "--quiet"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stdout.is_empty(), "nothing ran: {}", o.stdout);
    assert!(
        o.stderr.contains("compare") && o.stderr.contains("no-such-arm.toml"),
        "{}",
        o.stderr
    );
}

#[test]
fn every_shipped_scenario_fits_the_budget() {
    for entry in std::fs::read_dir(format!("{}/../scenarios", env!("CARGO_MANIFEST_DIR"))).unwrap()
    {
        let path = entry.unwrap().path();
        let s = sim::scenario::Scenario::load(&path).unwrap();
        let budget = sim::scenario::Budget::default();
        assert_eq!(s.check_size(&budget, true), Ok(()), "{}", path.display());
    }
}
