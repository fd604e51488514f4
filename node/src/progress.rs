//! Progress display for the command line: a bar on a terminal, plain lines otherwise.
//!
//! `import` and `fetch` report bytes done against a known total. On a terminal (stderr is
//! a TTY) an `indicatif` bar redraws in place; otherwise (a log file, a pipe, CI) one
//! plain line is written to stderr per [`LINE_STEP_PERCENT`] of progress, so logs stay
//! short and grep-able. Nothing is written to stdout, which carries results (the chunk
//! key) only.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Plain-line mode writes one line per this many percent of the total.
pub const LINE_STEP_PERCENT: u64 = 10;

/// Totals below this many bytes show no progress at all: they finish before a human
/// could read it.
pub const MIN_BYTES_FOR_PROGRESS: u64 = 8 * 1024 * 1024;

enum Mode {
    Hidden,
    Bar(ProgressBar),
    Lines { next_percent: u64 },
}

/// One progress display over `total` bytes.
pub struct Progress {
    label: String,
    total: u64,
    done: u64,
    mode: Mode,
}

impl Progress {
    /// A display for `label` over `total` bytes: a bar if stderr is a terminal, lines
    /// otherwise, nothing for totals below [`MIN_BYTES_FOR_PROGRESS`].
    pub fn new(label: impl Into<String>, total: u64) -> Progress {
        Self::with_mode(label, total, std::io::stderr().is_terminal())
    }

    /// As [`Progress::new`] with the terminal test decided by the caller.
    pub fn with_mode(label: impl Into<String>, total: u64, terminal: bool) -> Progress {
        let label = label.into();
        let mode = if total < MIN_BYTES_FOR_PROGRESS {
            Mode::Hidden
        } else if terminal {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .expect("the template is valid")
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_message(label.clone());
            Mode::Bar(bar)
        } else {
            Mode::Lines {
                next_percent: LINE_STEP_PERCENT,
            }
        };
        Progress {
            label,
            total,
            done: 0,
            mode,
        }
    }

    /// Records that `done` bytes of the total are done (monotonic; smaller values are
    /// ignored).
    pub fn set(&mut self, done: u64) {
        if done <= self.done {
            return;
        }
        self.done = done.min(self.total);
        match &mut self.mode {
            Mode::Hidden => {}
            Mode::Bar(bar) => bar.set_position(self.done),
            Mode::Lines { next_percent } => {
                let percent = self.done * 100 / self.total.max(1);
                if percent >= *next_percent {
                    eprintln!(
                        "{}: {percent}% ({} of {} bytes)",
                        self.label, self.done, self.total
                    );
                    *next_percent = (percent / LINE_STEP_PERCENT + 1) * LINE_STEP_PERCENT;
                }
            }
        }
    }

    /// Adds `n` bytes done.
    pub fn inc(&mut self, n: u64) {
        self.set(self.done.saturating_add(n));
    }

    /// Ends the display (clears the bar; lines need no ending).
    pub fn finish(self) {
        if let Mode::Bar(bar) = self.mode {
            bar.finish_and_clear();
        }
    }
}
