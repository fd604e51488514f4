//! The command line: `sim SCENARIO.toml [--seed N] [--json FILE] [--trace FILE]
//! [--report FILE.html] [--seeds A..B]`.
//!
//! Written by hand (a dozen flags do not need a parser crate). Exit codes: 0 success,
//! 1 a sweep found an invariant broken, 2 bad usage or a bad scenario, 3 an output file
//! could not be written.

use std::cell::Cell;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::rc::Rc;

use crate::report;
use crate::scenario::Scenario;
use crate::sweep;
use crate::world::{self, Progress, RunOptions};

/// `sim --help`.
pub const HELP: &str = "\
sim — deterministic cluster simulator for peerblock

USAGE:
    sim SCENARIO.toml [OPTIONS]

Runs the scenario once and prints a human report: downloads completed, read outcomes
(found / absent / false absent / busy / unavailable, and how many reads of stored
blocks the client reported as \"not found\"), the busiest holder's share of
first reads, read and download time percentiles, GET outcomes, bytes per node, and the
run's speed. Same scenario + seed: byte-identical trace, identical JSON (except
wall_seconds).

OPTIONS:
    --seed N            Seed of the run (default: the scenario's `seed`, else 1).
    --json FILE         Write the JSON summary to FILE (`-` for stdout, replacing the
                        human report).
    --trace FILE        Write the event trace (one line per event) to FILE.
    --report FILE.html  Write a self-contained HTML page with SVG plots: bytes served per
                        node over time, the busiest holder's share of first reads per block
                        under each spreading policy (the scenario re-run with nearest,
                        uniform and load-aware), the read-time CDF, and outcome counts.
    --seeds A..B        Sweep seeds A, A+1, .., B-1 (`A..=B` includes B). Each seed draws
                        random faults from the scenario's [sweep] table (printed before the
                        run) and is checked for invariants: no wrong bytes, no false
                        \"absent\" (nor an unavailable read reported as \"not found\"),
                        every read terminates. Prints each failing seed with the
                        command that replays it; exits 1 if any failed. With a single seed,
                        --json/--trace/--report apply to it.
    --quiet             No progress bar.
    -h, --help          This text.

Scenario files: see docs/sim.md for every key and its default. Exit status: 0 ok,
1 sweep found a broken invariant, 2 usage or scenario error, 3 output not writable.
";

/// Parsed command line.
#[derive(Debug, Default, PartialEq)]
pub struct Args {
    /// The scenario file.
    pub scenario: PathBuf,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--json`.
    pub json: Option<PathBuf>,
    /// `--trace`.
    pub trace: Option<PathBuf>,
    /// `--report`.
    pub report: Option<PathBuf>,
    /// `--seeds`, as a half-open range.
    pub seeds: Option<(u64, u64)>,
    /// `--quiet`.
    pub quiet: bool,
    /// `--help`.
    pub help: bool,
}

/// Parses `A..B` (half-open) or `A..=B` (inclusive) into a half-open range.
pub fn parse_seeds(v: &str) -> Result<(u64, u64), String> {
    let bad = || format!("--seeds expects A..B or A..=B with A < B, got `{v}`");
    let (a, b, inclusive) = if let Some((a, b)) = v.split_once("..=") {
        (a, b, true)
    } else if let Some((a, b)) = v.split_once("..") {
        (a, b, false)
    } else {
        return Err(bad());
    };
    let a: u64 = a.trim().parse().map_err(|_| bad())?;
    let b: u64 = b.trim().parse().map_err(|_| bad())?;
    let b = if inclusive {
        b.checked_add(1).ok_or_else(bad)?
    } else {
        b
    };
    if a >= b {
        return Err(bad());
    }
    Ok((a, b))
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Args, String> {
    let mut out = Args::default();
    let mut scenario = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value (see --help)"))
        };
        match a.as_str() {
            "-h" | "--help" => out.help = true,
            "--quiet" => out.quiet = true,
            "--seed" => {
                let v = value("--seed")?;
                out.seed = Some(
                    v.parse()
                        .map_err(|_| format!("--seed expects a number, got `{v}`"))?,
                );
            }
            "--json" => out.json = Some(value("--json")?.into()),
            "--trace" => out.trace = Some(value("--trace")?.into()),
            "--report" => out.report = Some(value("--report")?.into()),
            "--seeds" => out.seeds = Some(parse_seeds(&value("--seeds")?)?),
            flag if flag.starts_with('-') && flag != "-" => {
                return Err(format!("unknown option `{flag}` (see --help)"))
            }
            path => {
                if scenario.is_some() {
                    return Err(format!("only one scenario file, got a second: `{path}`"));
                }
                scenario = Some(PathBuf::from(path));
            }
        }
    }
    if out.help {
        return Ok(out);
    }
    out.scenario = scenario.ok_or("missing the scenario file (see --help)")?;
    if out.seed.is_some() && out.seeds.is_some() {
        return Err("give either --seed or --seeds, not both".into());
    }
    Ok(out)
}

/// A progress bar on stderr, shown once a run has taken more than two seconds, redrawn at
/// most four times a second, and only when stderr is a terminal.
pub fn progress_bar(quiet: bool) -> (Option<Progress>, Rc<Cell<bool>>) {
    let shown = Rc::new(Cell::new(false));
    if quiet || !std::io::stderr().is_terminal() {
        return (None, shown);
    }
    let start = std::time::Instant::now();
    let flag = shown.clone();
    let mut last = 0.0;
    let bar = move |done: u64, total: u64, sim_secs: f64| {
        let elapsed = start.elapsed().as_secs_f64();
        if elapsed < 2.0 || total == 0 || elapsed - last < 0.25 {
            return;
        }
        last = elapsed;
        flag.set(true);
        let width = 30usize;
        let filled = ((done as f64 / total as f64) * width as f64) as usize;
        eprint!(
            "\r[{}{}] {done}/{total} downloads, {sim_secs:.0} s simulated, {:.1} s wall ",
            "#".repeat(filled.min(width)),
            " ".repeat(width - filled.min(width)),
            start.elapsed().as_secs_f64()
        );
    };
    (Some(Box::new(bar)), shown)
}

fn write_file(path: &PathBuf, text: &str) -> Result<(), i32> {
    std::fs::write(path, text).map_err(|e| {
        eprintln!("sim: cannot write {}: {e}", path.display());
        3
    })
}

/// Entry point; returns the exit status.
pub fn main(args: Vec<String>) -> i32 {
    let args = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sim: {e}");
            return 2;
        }
    };
    if args.help {
        print!("{HELP}");
        return 0;
    }
    let scenario = match Scenario::load(&args.scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sim: {e}");
            return 2;
        }
    };
    if let Some((a, b)) = args.seeds {
        return sweep::main(&scenario, &args, a, b);
    }
    let seed = args.seed.unwrap_or(scenario.seed);
    match run_once(&scenario, &args, seed, Vec::new()) {
        Ok(_) => 0,
        Err(code) => code,
    }
}

/// Runs one seed with the outputs `args` asks for; returns the run.
pub fn run_once(
    scenario: &Scenario,
    args: &Args,
    seed: u64,
    extra_faults: Vec<crate::scenario::Fault>,
) -> Result<world::RunResult, i32> {
    let trace: Option<Box<dyn std::io::Write>> = match &args.trace {
        None => None,
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Some(Box::new(std::io::BufWriter::new(f))),
            Err(e) => {
                eprintln!("sim: cannot write {}: {e}", p.display());
                return Err(3);
            }
        },
    };
    let (progress, shown) = progress_bar(args.quiet);
    let result = world::run(
        scenario,
        RunOptions {
            seed,
            trace,
            extra_faults: extra_faults.clone(),
            progress,
        },
    );
    if shown.get() {
        eprintln!();
    }
    let json = result.summary.to_json();
    let to_stdout = args.json.as_ref().is_some_and(|p| p.as_os_str() == "-");
    match &args.json {
        Some(p) if !to_stdout => write_file(p, &(json.clone() + "\n"))?,
        _ => {}
    }
    let mut compared = String::new();
    if !scenario.compare.is_empty() && args.seeds.is_none() {
        let mut rows = Vec::new();
        for other in &scenario.compare {
            let path = args
                .scenario
                .parent()
                .unwrap_or(std::path::Path::new("."))
                .join(other);
            let s = Scenario::load(&path).map_err(|e| {
                eprintln!("sim: compare: {e}");
                2
            })?;
            let r = world::run(
                &s,
                RunOptions {
                    seed,
                    ..RunOptions::default()
                },
            );
            rows.push((s, r));
        }
        let main = world::run(
            scenario,
            RunOptions {
                seed,
                ..RunOptions::default()
            },
        );
        rows.push((scenario.clone(), main));
        compared = report::comparison(&rows);
    }
    if to_stdout {
        println!("{json}");
    } else if args.seeds.is_none() {
        print!("{}", report::text(scenario, &result));
        if !compared.is_empty() {
            println!();
            print!("{compared}");
        }
    }
    if let Some(p) = &args.report {
        let variants = report::policy_variants(scenario, seed, &extra_faults);
        write_file(p, &report::html(scenario, &result, &variants, &compared))?;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_every_flag() {
        let a = parse(&strs(&[
            "s.toml", "--seed", "7", "--json", "o.json", "--trace", "t.txt", "--report", "r.html",
        ]))
        .unwrap();
        assert_eq!(a.scenario, PathBuf::from("s.toml"));
        assert_eq!(a.seed, Some(7));
        assert_eq!(a.json, Some("o.json".into()));
        assert_eq!(a.trace, Some("t.txt".into()));
        assert_eq!(a.report, Some("r.html".into()));
    }

    #[test]
    fn seed_ranges() {
        assert_eq!(parse_seeds("3..7"), Ok((3, 7)));
        assert_eq!(parse_seeds("3..=7"), Ok((3, 8)));
        assert!(parse_seeds("7..3").is_err());
        assert!(parse_seeds("x..3").is_err());
    }

    #[test]
    fn usage_errors_are_explained() {
        assert!(parse(&strs(&[]))
            .unwrap_err()
            .contains("missing the scenario"));
        assert!(parse(&strs(&["a", "--bogus"]))
            .unwrap_err()
            .contains("--bogus"));
        assert!(parse(&strs(&["a", "--seed"]))
            .unwrap_err()
            .contains("needs a value"));
        assert!(parse(&strs(&["a", "--seed", "1", "--seeds", "1..2"])).is_err());
        assert!(parse(&strs(&["--help"])).unwrap().help);
    }
}
