//! How a `peerblock-node` command fails: [`NodeError`] and the process exit codes. The
//! lowest of the node's modules: every command and the identity files return it.

use crate::config::ConfigError;
use crate::manifest;

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: the operation failed (a block busy, unavailable, absent or invalid; a
/// server that stopped with an error; a command not available in this build).
pub const EXIT_FAILED: u8 = 1;
/// Exit code: a bad command line or configuration (clap uses 2 for its own usage errors
/// too). Nothing was served or written.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: a local I/O error (reading the input file, writing the store or the output
/// file, binding a socket).
pub const EXIT_IO: u8 = 3;
/// Exit code: interrupted by SIGINT or SIGTERM before the command finished (128 + 2, the
/// shell's convention for SIGINT). A `fetch` removed its temporary file; the output was
/// not touched.
pub const EXIT_INTERRUPTED: u8 = 130;

/// A failure of a `peerblock-node` command, with its exit code ([`NodeError::exit_code`]).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A flag's value breaks a rule.
    #[error("{flag}: {rule}")]
    Usage {
        /// The flag (`--listen`).
        flag: &'static str,
        /// The rule it breaks.
        rule: String,
    },
    /// The configuration (file or flag-fed part of it) is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Importing a file failed.
    #[error(transparent)]
    Import(#[from] manifest::ImportError),
    /// A local I/O error.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file, directory or address.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The operation failed (the message says how: the outcome class of a block, ...).
    #[error("{0}")]
    Failed(String),
    /// SIGINT or SIGTERM arrived before the command finished.
    #[error("interrupted: {0}")]
    Interrupted(String),
}

impl NodeError {
    /// The process exit code for this error (see the `EXIT_` constants).
    pub fn exit_code(&self) -> u8 {
        match self {
            NodeError::Usage { .. } | NodeError::Config(_) => EXIT_USAGE,
            NodeError::Import(manifest::ImportError::BlockSize(_)) => EXIT_USAGE,
            NodeError::Import(manifest::ImportError::TooManyBlocks { .. }) => EXIT_USAGE,
            NodeError::Import(_) | NodeError::Io { .. } => EXIT_IO,
            NodeError::Failed(_) => EXIT_FAILED,
            NodeError::Interrupted(_) => EXIT_INTERRUPTED,
        }
    }

    pub(crate) fn usage(flag: &'static str, rule: impl Into<String>) -> Self {
        NodeError::Usage {
            flag,
            rule: rule.into(),
        }
    }
}
