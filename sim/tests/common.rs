//! Helpers shared by the simulator's integration tests.
#![allow(dead_code)]

use std::cell::RefCell;
use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;

use sim::scenario::Scenario;
use sim::world::{self, RunOptions, RunResult};

/// A shipped scenario file by name.
pub fn shipped(name: &str) -> Scenario {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "scenarios", name]
        .iter()
        .collect();
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `s` with `seed`.
pub fn run(s: &Scenario, seed: u64) -> RunResult {
    world::run(
        s,
        RunOptions {
            seed,
            ..RunOptions::default()
        },
    )
}

/// A trace sink the test can read back.
#[derive(Clone, Default)]
pub struct Captured(pub Rc<RefCell<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `s` with `seed`, capturing the trace bytes.
pub fn run_traced(s: &Scenario, seed: u64) -> (RunResult, Vec<u8>) {
    let sink = Captured::default();
    let r = world::run(
        s,
        RunOptions {
            seed,
            trace: Some(Box::new(sink.clone())),
            ..RunOptions::default()
        },
    );
    let bytes = sink.0.borrow().clone();
    (r, bytes)
}
