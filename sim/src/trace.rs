//! The event trace: one line per simulated event, and a digest of all of them.
//!
//! Every line goes through the digest whether or not `--trace FILE` was given, so the JSON
//! summary's `trace_digest` pins the whole run: two runs with the same scenario and seed
//! must produce the same digest (and, with `--trace`, byte-identical files). The digest is
//! 64-bit FNV-1a: cheap, stable across platforms, and plenty to detect divergence (it is
//! not meant to resist anyone constructing collisions).

use std::fmt::{self, Write as _};
use std::io::Write;

use peerblock_core::time::Instant;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Collects trace lines into a digest and, optionally, a sink.
pub struct Trace {
    digest: u64,
    lines: u64,
    line: String,
    sink: Option<Box<dyn Write>>,
    error: Option<std::io::Error>,
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trace")
            .field("digest", &self.digest())
            .field("lines", &self.lines)
            .finish()
    }
}

impl Default for Trace {
    fn default() -> Self {
        Trace::new(None)
    }
}

impl Trace {
    /// A trace that digests lines and writes them to `sink` if given.
    pub fn new(sink: Option<Box<dyn Write>>) -> Self {
        Trace {
            digest: FNV_OFFSET,
            lines: 0,
            line: String::with_capacity(128),
            sink,
            error: None,
        }
    }

    /// Records one event: `time kind details`.
    pub fn event(&mut self, now: Instant, kind: &str, details: fmt::Arguments<'_>) {
        self.line.clear();
        let d = now.since_epoch();
        let _ = writeln!(
            self.line,
            "{}.{:06} {kind} {details}",
            d.as_secs(),
            d.subsec_micros()
        );
        for b in self.line.bytes() {
            self.digest ^= u64::from(b);
            self.digest = self.digest.wrapping_mul(FNV_PRIME);
        }
        self.lines += 1;
        if let Some(sink) = self.sink.as_mut() {
            if self.error.is_none() {
                if let Err(e) = sink.write_all(self.line.as_bytes()) {
                    self.error = Some(e);
                }
            }
        }
    }

    /// The digest of every line so far, as 16 hex digits.
    pub fn digest(&self) -> String {
        format!("{:016x}", self.digest)
    }

    /// Lines recorded.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Flushes the sink and reports the first write error, if any.
    pub fn finish(&mut self) -> std::io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if let Some(sink) = self.sink.as_mut() {
            sink.flush()?;
        }
        Ok(())
    }
}

/// Records a trace line: `trace!(trace, now, "kind", "fmt", args..)`.
#[macro_export]
macro_rules! trace {
    ($t:expr, $now:expr, $kind:expr, $($arg:tt)*) => {
        $t.event($now, $kind, format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_depends_on_every_byte() {
        let mut a = Trace::default();
        let mut b = Trace::default();
        a.event(Instant::from_millis(5), "get", format_args!("r=1 n=2"));
        b.event(Instant::from_millis(5), "get", format_args!("r=1 n=3"));
        assert_ne!(a.digest(), b.digest());
        let mut c = Trace::default();
        c.event(Instant::from_millis(5), "get", format_args!("r=1 n=2"));
        assert_eq!(a.digest(), c.digest());
    }
}
