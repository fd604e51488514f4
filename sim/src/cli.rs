//! The command line: `sim SCENARIO.toml [--seed N] [--json FILE] [--trace FILE]
//! [--report FILE.html] [--seeds A..B] [--quiet]`, parsed with clap (derive).
//!
//! Everything that can be checked before the run is: the scenario and every file it
//! compares with are loaded and validated, the scenario's size is estimated against
//! [`crate::scenario::Budget`], conflicting options are usage errors, and every output
//! file is created before the first event. Exit codes: 0 success, 1 a sweep found an
//! invariant broken, 2 bad usage or a bad scenario, 3 an output file could not be
//! written.

use std::cell::Cell;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use crate::progress::Steps;
use crate::report;
use crate::scenario::{Budget, Scenario};
use crate::sweep;
use crate::world::{self, Progress, RunOptions};

/// Text under `--help`'s options.
const AFTER_HELP: &str = "\
Scenario files: docs/sim.md lists every key, its default and its range; a scenario whose
estimated memory or event count is over the simulator's bound is refused before the run,
naming the keys. Progress goes to stderr (a redrawn line on a terminal, plain lines
otherwise; --quiet silences it).

Exit status: 0 ok, 1 a sweep found a broken invariant, 2 usage or scenario error, 3 an
output file cannot be written (checked before the run).";

/// Parsed command line.
#[derive(Debug, Default, PartialEq, Parser)]
#[command(
    name = "sim",
    about = "sim — deterministic cluster simulator for peerblock",
    long_about = "sim — deterministic cluster simulator for peerblock

Runs the scenario once and prints a human report: downloads completed, read outcomes
(found / absent / false absent / busy / unavailable, and how many reads of stored blocks
the client reported as \"not found\"), the busiest holder's share of first reads, read and
download time percentiles, GET outcomes, bytes per node, and the run's speed. Same
scenario + seed: byte-identical trace, identical JSON (except wall_seconds).",
    after_help = AFTER_HELP,
    after_long_help = AFTER_HELP
)]
pub struct Args {
    /// The scenario file (TOML; docs/sim.md lists every key).
    #[arg(value_name = "SCENARIO.toml")]
    pub scenario: PathBuf,
    /// Seed of the run (default: the scenario's `seed`, else 1).
    #[arg(long, value_name = "N", conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// Write the JSON summary to FILE (`-`: stdout, instead of the report).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the event trace to FILE (`-`: stdout, instead of the report).
    ///
    /// One line per event: `seconds.micros kind details`.
    #[arg(long, value_name = "FILE", verbatim_doc_comment)]
    pub trace: Option<PathBuf>,
    /// Write a self-contained HTML page with SVG plots to FILE.
    ///
    /// Bytes served per node over time, the busiest holder's share of first reads per
    /// block under each spreading policy (the scenario re-run with nearest, uniform and
    /// load-aware), the read-time CDF, and outcome counts.
    #[arg(long, value_name = "FILE.html", verbatim_doc_comment)]
    pub report: Option<PathBuf>,
    /// Sweep seeds A, A+1, .., B-1 (`A..=B` includes B), checking invariants.
    ///
    /// Each seed draws random faults from the scenario's [sweep] table (printed before the
    /// run) and is checked for invariants: no wrong bytes, no false "absent" (nor an
    /// unavailable read reported as "not found"), every read terminates. Prints each
    /// failing seed with the command that replays it; exits 1 if any failed.
    /// --json/--trace/--report need a single seed (`--seeds N..=N`).
    #[arg(long, value_name = "A..B", value_parser = parse_seeds, verbatim_doc_comment)]
    pub seeds: Option<(u64, u64)>,
    /// No progress on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Parses `A..B` (half-open) or `A..=B` (inclusive) into a half-open range.
pub fn parse_seeds(v: &str) -> Result<(u64, u64), String> {
    let bad = || format!("expects A..B or A..=B with A < B, got `{v}`");
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

fn is_stdout(p: &Option<PathBuf>) -> bool {
    p.as_ref().is_some_and(|p| p.as_os_str() == "-")
}

impl Args {
    /// Parses the arguments after the program name. `Err` carries clap's error, whose
    /// kind tells help (print it, exit 0) from a usage error (exit 2).
    pub fn parse_from_args(args: &[String]) -> Result<Args, clap::Error> {
        let a =
            Args::try_parse_from(std::iter::once("sim".to_string()).chain(args.iter().cloned()))?;
        a.check_combinations()?;
        Ok(a)
    }

    /// The conflicts clap's declarations cannot express: per-run outputs with a multi-seed
    /// sweep, and two outputs both on stdout.
    fn check_combinations(&self) -> Result<(), clap::Error> {
        let conflict = |msg: String| Err(Args::command().error(ErrorKind::ArgumentConflict, msg));
        if let Some((a, b)) = self.seeds {
            if b - a > 1 {
                for (flag, set) in [
                    ("--json", self.json.is_some()),
                    ("--trace", self.trace.is_some()),
                    ("--report", self.report.is_some()),
                ] {
                    if set {
                        return conflict(format!(
                            "{flag} writes one run's output, but --seeds {a}..{b} runs {} seeds; \
                             give a single seed (--seeds N..=N) to get one seed's {flag}",
                            b - a
                        ));
                    }
                }
            }
        }
        if self.seeds.is_some() && self.stdout_taken() {
            return conflict(
                "a sweep prints its seeds on stdout; give --json/--trace a file name with --seeds"
                    .into(),
            );
        }
        if is_stdout(&self.json) && is_stdout(&self.trace) {
            return conflict("--json - and --trace - cannot both write to stdout".into());
        }
        if is_stdout(&self.report) {
            return conflict("--report needs a file name (`-` is not supported)".into());
        }
        Ok(())
    }

    /// Whether something other than the human report owns stdout.
    pub fn stdout_taken(&self) -> bool {
        is_stdout(&self.json) || is_stdout(&self.trace)
    }
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

/// The output files, created before the run so that an unwritable path is reported
/// before any time is spent.
#[derive(Default)]
pub struct Outputs {
    /// `--json FILE` (not `-`).
    pub json: Option<(PathBuf, File)>,
    /// `--trace FILE` (not `-`).
    pub trace: Option<(PathBuf, File)>,
    /// `--report FILE`.
    pub report: Option<(PathBuf, File)>,
}

impl Outputs {
    /// Creates every output file `args` names (exit status 3 and a message on failure).
    pub fn open(args: &Args) -> Result<Outputs, i32> {
        fn create(flag: &str, p: &Option<PathBuf>) -> Result<Option<(PathBuf, File)>, i32> {
            match p {
                Some(p) if p.as_os_str() != "-" => match File::create(p) {
                    Ok(f) => Ok(Some((p.clone(), f))),
                    Err(e) => {
                        eprintln!("sim: {flag}: cannot write {}: {e}", p.display());
                        Err(3)
                    }
                },
                _ => Ok(None),
            }
        }
        Ok(Outputs {
            json: create("--json", &args.json)?,
            trace: create("--trace", &args.trace)?,
            report: create("--report", &args.report)?,
        })
    }
}

fn write_out(out: Option<(PathBuf, File)>, text: &str) -> Result<(), i32> {
    let Some((path, mut f)) = out else {
        return Ok(());
    };
    f.write_all(text.as_bytes()).map_err(|e| {
        eprintln!("sim: cannot write {}: {e}", path.display());
        3
    })
}

/// Loads every scenario `scenario.compare` names (paths relative to `path`'s directory).
pub fn load_compared(path: &Path, scenario: &Scenario) -> Result<Vec<Scenario>, String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    scenario
        .compare
        .iter()
        .map(|other| {
            Scenario::load(&dir.join(other)).map_err(|e| {
                format!(
                    "{}: `compare` names a scenario that cannot be used: {e}",
                    path.display()
                )
            })
        })
        .collect()
}

/// Entry point; returns the exit status.
pub fn main(args: Vec<String>) -> i32 {
    let args = match Args::parse_from_args(&args) {
        Ok(a) => a,
        Err(e) => {
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => 2,
            };
            let _ = e.print();
            return code;
        }
    };
    let scenario = match Scenario::load(&args.scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sim: {e}");
            return 2;
        }
    };
    let compared = if args.seeds.is_none() {
        match load_compared(&args.scenario, &scenario) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("sim: {e}");
                return 2;
            }
        }
    } else {
        Vec::new()
    };
    let budget = Budget::default();
    let main_name = args.scenario.display().to_string();
    let names = std::iter::once(main_name)
        .chain(compared.iter().map(|s| format!("compare arm {}", s.name)));
    for (s, name) in std::iter::once(&scenario).chain(&compared).zip(names) {
        if let Err(e) = s.check_size(&budget, args.seeds.is_some()) {
            eprintln!("sim: {name}: {e}");
            return 2;
        }
    }
    let outputs = match Outputs::open(&args) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if let Some((a, b)) = args.seeds {
        return sweep::main(&scenario, &args, a, b, outputs);
    }
    let seed = args.seed.unwrap_or(scenario.seed);
    match run_once(&scenario, &compared, &args, seed, Vec::new(), outputs) {
        Ok(_) => 0,
        Err(code) => code,
    }
}

/// Runs one seed with the outputs `args` asks for (already opened in `outputs`), then the
/// `compared` arms with the same seed; returns the run.
pub fn run_once(
    scenario: &Scenario,
    compared: &[Scenario],
    args: &Args,
    seed: u64,
    extra_faults: Vec<crate::scenario::Fault>,
    mut outputs: Outputs,
) -> Result<world::RunResult, i32> {
    let trace: Option<Box<dyn Write>> = if is_stdout(&args.trace) {
        Some(Box::new(std::io::BufWriter::new(std::io::stdout())))
    } else {
        outputs
            .trace
            .take()
            .map(|(_, f)| Box::new(std::io::BufWriter::new(f)) as Box<dyn Write>)
    };
    let (progress, shown) = progress_bar(args.quiet);
    let mut result = world::run(
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
    write_out(outputs.json.take(), &(json.clone() + "\n"))?;
    let mut comparison = String::new();
    if !compared.is_empty() {
        let mut steps = Steps::new("compare", compared.len() as u64, args.quiet);
        let mut rows = Vec::new();
        for s in compared {
            steps.begin(&format!("arm {}", s.name));
            let r = world::run(
                s,
                RunOptions {
                    seed,
                    ..RunOptions::default()
                },
            );
            rows.push((s.clone(), r));
            steps.end();
        }
        steps.finish();
        // The main arm's row is the run above: the trace does not change its results.
        rows.push((scenario.clone(), result));
        comparison = report::comparison(&rows);
        result = rows.pop().expect("the main arm's row").1;
    }
    if is_stdout(&args.json) {
        println!("{json}");
    } else if !args.stdout_taken() && args.seeds.is_none() {
        print!("{}", report::text(scenario, &result));
        if !comparison.is_empty() {
            println!();
            print!("{comparison}");
        }
    }
    if outputs.report.is_some() {
        let variants = report::policy_variants(scenario, seed, &extra_faults, args.quiet);
        write_out(
            outputs.report.take(),
            &report::html(scenario, &result, &variants, &comparison),
        )?;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Args, clap::Error> {
        Args::parse_from_args(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn parses_every_flag() {
        let a = parse(&[
            "s.toml", "--seed", "7", "--json", "o.json", "--trace", "t.txt", "--report", "r.html",
            "--quiet",
        ])
        .unwrap();
        assert_eq!(a.scenario, PathBuf::from("s.toml"));
        assert_eq!(a.seed, Some(7));
        assert_eq!(a.json, Some("o.json".into()));
        assert_eq!(a.trace, Some("t.txt".into()));
        assert_eq!(a.report, Some("r.html".into()));
        assert!(a.quiet);
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
        let msg = |v: &[&str]| parse(v).unwrap_err().to_string();
        assert!(msg(&[]).contains("SCENARIO.toml"), "{}", msg(&[]));
        assert!(msg(&["a", "--bogus"]).contains("--bogus"));
        assert!(msg(&["a", "--seed"]).contains("--seed"));
        assert!(msg(&["a", "--seed", "x"]).contains("x"));
        assert!(msg(&["a", "--seed", "1", "--seeds", "1..2"]).contains("cannot be used with"));
        assert_eq!(
            parse(&["--help"]).unwrap_err().kind(),
            ErrorKind::DisplayHelp
        );
    }

    #[test]
    fn per_run_outputs_with_a_multi_seed_sweep_are_a_usage_error() {
        for flag in ["--json", "--trace", "--report"] {
            let e = parse(&["a", "--seeds", "1..3", flag, "o"]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ArgumentConflict);
            assert!(e.to_string().contains(flag), "{e}");
        }
        assert!(parse(&["a", "--seeds", "4..=4", "--json", "o", "--trace", "t"]).is_ok());
    }

    #[test]
    fn stdout_outputs_with_a_sweep_are_a_usage_error() {
        let e = parse(&["a", "--seeds", "2..=2", "--trace", "-"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ArgumentConflict);
        assert!(e.to_string().contains("file name"), "{e}");
    }

    #[test]
    fn two_outputs_on_stdout_are_a_usage_error() {
        let e = parse(&["a", "--json", "-", "--trace", "-"]).unwrap_err();
        assert!(e.to_string().contains("stdout"), "{e}");
        assert!(parse(&["a", "--trace", "-"]).unwrap().stdout_taken());
    }
}
