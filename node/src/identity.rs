//! The node's identity on disk: its Ed25519 key file and the sequence number of its
//! signed record (docs/security.md, key management).
//!
//! - **Key file**: 64 hex digits (the secret seed) and a newline, created on first start
//!   with owner-only permissions (0600, created exclusively, so two nodes starting on one
//!   store cannot both write it), written to a temporary file that is `fsync`ed and then
//!   linked into place, so a failed first start (a full disk) leaves no key file at all;
//!   an empty key file left by an older version is replaced. A key file readable by group
//!   or others is refused, as
//!   ssh refuses one. The seed is drawn from the operating system's randomness
//!   (`getrandom`), never from core.
//! - **Sequence file** (`KEYFILE.seq`): the last sequence number this node signed. Each
//!   start signs with `max(last + 1, seconds since the Unix epoch)`, so the record a
//!   restarted node announces always replaces the one before, even if the sequence file
//!   was lost (as long as the clock did not go back further than the downtime).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use peerblock_core::roster::record::unhex;
use peerblock_core::roster::NodeKey;

use crate::error::NodeError;

/// `key` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create a new key file (64 hex digits of a secret seed drawn from the OS, owner-only
    /// permissions, never overwriting a file) and print its public key and the id it
    /// certifies. A node creates its own on first start; use this for an authority key.
    New {
        /// The key file to create.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Print a key file's public key (`authority_key` for the nodes' config, when it is
    /// the authority's) and the id it certifies.
    Show {
        /// The key file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Sign an epoch with the authority's key: prints the `[roster]` lines `epoch` and
    /// `epoch_signature` for the nodes' config. Nodes configured with the key's public
    /// key as `authority_key` adopt the epoch from any peer that serves it.
    SignEpoch {
        /// The authority's key file.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The epoch to sign (1 to 2^64-1).
        #[arg(value_name = "EPOCH", value_parser = clap::value_parser!(u64).range(1..))]
        epoch: u64,
    },
    /// Admit a node to an admitted cluster (`[roster] membership = "admitted"`): signs the
    /// node's public key with the authority's key and prints the `[roster] admission` line
    /// for that node's config. The node serves the certificate with its record; nodes
    /// place only members whose certificate their `authority_key` verifies.
    Admit {
        /// The authority's key file.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The node's public key (64 hex digits, `key show` prints it) or its key file.
        #[arg(value_name = "PUBLIC_KEY|KEY_FILE")]
        node: String,
    },
}

/// The default key file's name inside the store directory.
pub const DEFAULT_KEY_FILE: &str = "node.key";

fn io(what: &'static str, path: &Path, source: std::io::Error) -> NodeError {
    NodeError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// Reads the key at `path`, or creates it (owner-only) if the file does not exist.
/// Returns the key and whether it was created. An empty key file (what a first start on
/// a full disk left before key files were written atomically) holds no key that was
/// ever used: it is replaced, with a warning.
pub fn load_or_create_key(path: &Path) -> Result<(NodeKey, bool), NodeError> {
    let read = match std::fs::read_to_string(path) {
        Ok(text) if text.is_empty() => {
            tracing::warn!(file = %path.display(), "the key file is empty (an interrupted first start): creating a new key");
            std::fs::remove_file(path).map_err(|e| io("cannot remove empty key file", path, e))?;
            Err(std::io::Error::from(std::io::ErrorKind::NotFound))
        }
        other => other,
    };
    match read {
        Ok(text) => Ok((parse_key_file(path, &text)?, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| {
                NodeError::Failed(format!("cannot draw a key from the OS randomness: {e}"))
            })?;
            let key = NodeKey::from_seed(&seed);
            write_new(path, format!("{}\n", hex(&key.seed())).as_bytes())?;
            Ok((key, true))
        }
        Err(e) => Err(io("cannot read key file", path, e)),
    }
}

/// Creates a new key file at `path` (owner-only, never over an existing file).
pub fn create_key(path: &Path) -> Result<NodeKey, NodeError> {
    match load_or_create_key(path)? {
        (key, true) => Ok(key),
        (_, false) => Err(NodeError::Failed(format!(
            "key file {} already exists (remove it first to replace the key)",
            path.display()
        ))),
    }
}

/// Reads an existing key file (refused if others can read it).
pub fn read_key(path: &Path) -> Result<NodeKey, NodeError> {
    let text = std::fs::read_to_string(path).map_err(|e| io("cannot read key file", path, e))?;
    parse_key_file(path, &text)
}

/// `key new`, `key show`, `key sign-epoch` and `key admit`: what they print on stdout.
pub fn key_command(cmd: &KeyCommand) -> Result<String, NodeError> {
    Ok(match cmd {
        KeyCommand::New { file } => describe(&create_key(file)?),
        KeyCommand::Show { file } => describe(&read_key(file)?),
        KeyCommand::SignEpoch { key, epoch } => {
            let k = read_key(key)?;
            let sig = peerblock_core::roster::record::sign_epoch(&k, *epoch);
            format!(
                "# [roster] lines for nodes with authority_key = \"{}\"\nepoch = {epoch}\nepoch_signature = \"{}\"\n",
                hex(&k.public()),
                hex(&sig)
            )
        }
        KeyCommand::Admit { key, node } => {
            let authority = read_key(key)?;
            let public = match peerblock_core::roster::record::unhex::<32>(node.as_bytes()) {
                Some(p) => p,
                None => read_key(Path::new(node))?.public(),
            };
            // The policy check is core's test of a valid, non-weak Ed25519 public key.
            let policy = peerblock_core::roster::MembershipPolicy {
                authority: Some(public),
                ..Default::default()
            };
            if policy.validate().is_err() {
                return Err(NodeError::usage(
                    "PUBLIC_KEY",
                    format!("{node:?} is not an Ed25519 public key"),
                ));
            }
            let cert = peerblock_core::roster::record::sign_admission(&authority, &public);
            format!(
                "# [roster] line for the node {} (public key {}), in a cluster with authority_key = \"{}\"\nadmission = \"{}\"\n",
                peerblock_core::roster::record::id_for_key(&public),
                hex(&public),
                hex(&authority.public()),
                hex(&cert)
            )
        }
    })
}

fn describe(k: &NodeKey) -> String {
    format!(
        "public_key = \"{}\"\nid = \"{}\"\n",
        hex(&k.public()),
        k.id()
    )
}

fn parse_key_file(path: &Path, text: &str) -> Result<NodeKey, NodeError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|e| io("cannot read key file", path, e))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(NodeError::Failed(format!(
                "key file {} is readable by others (mode {:o}): chmod 600 it",
                path.display(),
                mode & 0o777
            )));
        }
    }
    let seed = unhex::<32>(text.trim().as_bytes()).ok_or_else(|| {
        NodeError::Failed(format!(
            "key file {} does not hold 64 hex digits",
            path.display()
        ))
    })?;
    Ok(NodeKey::from_seed(&seed))
}

/// A temporary name beside `path` for this process: `.NAME.<pid>.tmp`.
fn temp_beside(path: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// Creates `path` exclusively with owner-only permissions holding exactly `bytes`, or
/// nothing at all: the bytes go to a temporary file beside it (owner-only, `fsync`ed),
/// which is then hard-linked to `path` (failing if `path` exists: two nodes starting on
/// one store cannot both write it) and removed. A full disk or a crash leaves no
/// half-written key file (a 0-byte `node.key` made every later start fail).
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), NodeError> {
    let temp = temp_beside(path);
    let _ = std::fs::remove_file(&temp); // a leftover of this pid's earlier life
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options
        .open(&temp)
        .map_err(|e| io("cannot create key file", path, e))
        .and_then(|mut f| {
            f.write_all(bytes)
                .and_then(|()| f.sync_all())
                .map_err(|e| io("cannot write key file", path, e))
        })
        .and_then(|()| {
            std::fs::hard_link(&temp, path).map_err(|e| io("cannot create key file", path, e))
        });
    let _ = std::fs::remove_file(&temp);
    written?;
    let _ = peerblock_common::store::sync_parent(path);
    Ok(())
}

/// The sequence file beside a key file.
pub fn seq_path(key_file: &Path) -> PathBuf {
    let mut name = key_file.as_os_str().to_owned();
    name.push(".seq");
    PathBuf::from(name)
}

/// The next sequence number to sign with (see the module docs), recorded in the sequence
/// file before it is returned.
pub fn next_seq(key_file: &Path) -> Result<u64, NodeError> {
    let path = seq_path(key_file);
    let last = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u64>().unwrap_or(0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io("cannot read sequence file", &path, e)),
    };
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let seq = last.saturating_add(1).max(clock);
    // Temporary file, fsync, rename: a crash leaves the old number or the new one.
    let temp = temp_beside(&path);
    let written = std::fs::File::create(&temp)
        .and_then(|mut f| {
            f.write_all(format!("{seq}\n").as_bytes())
                .and_then(|()| f.sync_all())
        })
        .and_then(|()| std::fs::rename(&temp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(io("cannot write sequence file", &path, e));
    }
    let _ = peerblock_common::store::sync_parent(&path);
    Ok(seq)
}

fn hex(bytes: &[u8]) -> String {
    peerblock_core::roster::record::hex(bytes)
}
