//! Progress of work made of steps (compare arms, `--report`'s policy re-runs, sweep seeds)
//! on stderr: "label k/N: what (ETA 12 s)". On a terminal one line is redrawn in place;
//! otherwise each step starts a plain line, so a log shows where a long run is. Nothing is
//! printed with `--quiet`.

use std::io::IsTerminal;
use std::time::Instant;

/// A counter of steps with an estimated time to finish.
pub struct Steps {
    label: &'static str,
    total: u64,
    done: u64,
    start: Instant,
    quiet: bool,
    terminal: bool,
    drawn: bool,
}

impl Steps {
    /// Progress over `total` steps named `label` (e.g. "seed"); silent when `quiet`.
    pub fn new(label: &'static str, total: u64, quiet: bool) -> Self {
        Steps {
            label,
            total,
            done: 0,
            start: Instant::now(),
            quiet,
            terminal: std::io::stderr().is_terminal(),
            drawn: false,
        }
    }

    /// The line shown when step `done + 1` begins, doing `what`, `elapsed` seconds after
    /// the first step began.
    pub fn line(&self, what: &str, elapsed: f64) -> String {
        let k = self.done + 1;
        let eta = if self.done == 0 {
            String::new()
        } else {
            let left = elapsed / self.done as f64 * (self.total - self.done) as f64;
            format!(" (ETA {})", human_secs(left))
        };
        format!("{} {k}/{}: {what}{eta}", self.label, self.total)
    }

    /// Announces the next step.
    pub fn begin(&mut self, what: &str) {
        if self.quiet {
            return;
        }
        let line = self.line(what, self.start.elapsed().as_secs_f64());
        if self.terminal {
            eprint!("\r\x1b[2K{line}");
            self.drawn = true;
        } else {
            eprintln!("{line}");
        }
    }

    /// Marks the current step done.
    pub fn end(&mut self) {
        self.done = (self.done + 1).min(self.total);
    }

    /// Clears a redrawn line.
    pub fn finish(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
            self.drawn = false;
        }
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `12 s`, `3 min 5 s`, `2 h 4 min`.
pub fn human_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_steps_and_estimates_the_rest_from_the_pace_so_far() {
        let mut s = Steps::new("seed", 10, true);
        assert_eq!(s.line("seed 1", 0.0), "seed 1/10: seed 1");
        s.end();
        s.end();
        // Two steps took 20 s: eight more take 80 s.
        assert_eq!(s.line("seed 3", 20.0), "seed 3/10: seed 3 (ETA 1 min 20 s)");
    }

    #[test]
    fn durations_read_as_a_person_would_say_them() {
        assert_eq!(human_secs(7.4), "7 s");
        assert_eq!(human_secs(125.0), "2 min 5 s");
        assert_eq!(human_secs(7440.0), "2 h 4 min");
    }
}
