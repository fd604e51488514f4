//! The command line as a user meets it: help, bad scenarios, missing files, outputs.

use std::process::Command;

fn sim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .output()
        .expect("run sim");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scenario(name: &str) -> String {
    format!("{}/../scenarios/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn help_documents_every_flag() {
    let (code, out, _) = sim(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--seed", "--json", "--trace", "--report", "--seeds", "--quiet",
    ] {
        assert!(out.contains(flag), "--help lacks {flag}");
    }
}

#[test]
fn a_missing_file_says_so() {
    let (code, _, err) = sim(&["/no/such/scenario.toml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read scenario file /no/such/scenario.toml"),
        "{err}"
    );
}

#[test]
fn an_unknown_key_is_named_with_its_line() {
    let p = temp("unknown.toml");
    std::fs::write(&p, "[cluster]\nnodes = 10\n\n[readers]\ncuont = 3\n").unwrap();
    let (code, _, err) = sim(&[p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("cuont") && err.contains("line 5"), "{err}");
}

#[test]
fn an_impossible_value_is_named_with_its_line() {
    let p = temp("impossible.toml");
    std::fs::write(&p, "[cluster]\nnodes = 10\nclose_group = 12\n").unwrap();
    let (code, _, err) = sim(&[p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains(":3:") && err.contains("cluster.close_group"),
        "{err}"
    );
}

#[test]
fn json_trace_and_report_are_written() {
    let (json, trace, report) = (temp("o.json"), temp("t.trace"), temp("r.html"));
    let (code, out, err) = sim(&[
        &scenario("fault-dead-holder.toml"),
        "--seed",
        "4",
        "--json",
        json.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("downloads completed"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["seed"], 4);
    assert_eq!(v["scenario"], "fault-dead-holder");
    assert!(std::fs::metadata(&trace).unwrap().len() > 1000);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg").count(), 4, "four plots");
    // Each plot has its legend outside the drawing (HTML, never over the data) and a
    // caption saying what to look at.
    assert_eq!(
        html.matches("<div class=\"legend\">").count(),
        4,
        "four legends"
    );
    assert_eq!(html.matches("<figcaption>").count(), 4, "four captions");
    assert!(
        html.contains("fault event"),
        "the dead holder's crash is marked"
    );
}

#[test]
fn a_sweep_reports_failing_seeds_with_a_replay_command() {
    let (code, out, _) = sim(&[
        &scenario("testnet-ab-old-limits-uniform.toml"),
        "--seeds",
        "1..3",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL"), "{out}");
    assert!(
        out.contains("replay: cargo run --release -p sim --"),
        "{out}"
    );
    assert!(out.contains("--seeds 1..=1"), "{out}");
}

#[test]
fn a_sweep_shows_seed_k_of_n_with_an_eta_on_stderr() {
    let (code, _, err) = sim(&[&scenario("fault-dead-holder.toml"), "--seeds", "1..4"]);
    assert_eq!(code, 0, "{err}");
    for k in 1..=3 {
        assert!(err.contains(&format!("seed {k}/3: seed {k}")), "{err}");
    }
    assert!(err.contains("ETA"), "{err}");
    let (_, _, quiet) = sim(&[
        &scenario("fault-dead-holder.toml"),
        "--seeds",
        "1..3",
        "--quiet",
    ]);
    assert!(!quiet.contains("seed 1/2"), "{quiet}");
}

#[test]
fn the_compare_arms_and_the_report_re_runs_show_progress() {
    let arm = scenario("fault-dead-holder.toml");
    let p = temp("compare-progress.toml");
    std::fs::write(&p, format!("compare = [{arm:?}, {arm:?}]\n")).unwrap();
    let report = temp("compare-progress.html");
    let (code, _, err) = sim(&[p.to_str().unwrap(), "--report", report.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("compare 1/2: arm fault-dead-holder"), "{err}");
    assert!(
        err.contains("compare 2/2: arm fault-dead-holder (ETA"),
        "{err}"
    );
    assert!(
        err.contains("report 3/3: re-running with spread = \"load-aware\""),
        "{err}"
    );
}

#[test]
fn a_sweep_warns_about_seeds_whose_blocks_all_sit_behind_nat() {
    // 8 of 10 nodes behind NAT and two holders per block: most seeds leave some block
    // with both holders NAT'd, which no reader can fetch.
    let p = temp("nat-heavy.toml");
    std::fs::write(
        &p,
        "[cluster]\nnodes = 10\nnat_nodes = 8\nclose_group = 2\n\n[client]\nlookup_peers = 10\n\n\
         [readers]\ncount = 4\n\n[sweep]\ncrashes = 0\nsilent = 0\npartitions = 0\nslow = 0\n",
    )
    .unwrap();
    let (code, out, err) = sim(&[p.to_str().unwrap(), "--seeds", "1..4", "--quiet"]);
    assert_eq!(code, 0, "no invariant is broken: {out}{err}");
    assert!(!out.contains(": ok  "), "no seed passes as plain ok: {out}");
    assert_eq!(out.matches(": warn ").count(), 3, "{out}");
    assert!(out.contains("have every holder behind NAT"), "{out}");
    assert!(
        out.contains("warning: 3 seed(s) with downloads that cannot complete"),
        "{out}"
    );
}
