//! `peerblock-node get`: one block, validated, written to a file or stdout.

use std::io::Write;
use std::sync::Arc;

use peerblock_core::client::BlockRequest;
use peerblock_core::time::Clock;
use peerblock_core::wire::BlockPath;

use crate::client::{GetOptions, Peer};
use crate::manifest::{self};
use crate::metrics::Metrics;
use crate::node::{GetPlan, NodeError};

use super::fetch::write_file;
use super::*;

/// `get`: one exchange for one block; the body to the output (or stdout), the outcome
/// class on failure. Block 0 of a file's chunk key (its manifest) is validated against
/// the key; other blocks only against `--expected` (their hashes are in the manifest).
pub async fn get(plan: GetPlan) -> Result<(), NodeError> {
    let clock = Clock::new(std::time::Instant::now());
    let client = client(&plan.config, clock, Metrics::new(), None)?;
    let peer = Peer::from_addr(plan.peer.clone());
    let block = BlockRequest {
        path: BlockPath {
            key: plan.chunk,
            index: plan.index,
        },
        origin: plan.origin.as_deref(),
        hop: peerblock_core::wire::Hop(plan.hop),
    };
    // A manifest (block 0 of a 32-byte chunk key) is checked against its key: `get`
    // never hands out a manifest that is not the chunk's.
    let chunk = plan.chunk;
    let validator: Option<crate::client::Validator> =
        (plan.index == 0 && chunk.as_bytes().len() == 32).then(|| {
            Arc::new(move |b: &peerblock_core::bytes::Bytes| manifest::verify_manifest(&chunk, b))
                as crate::client::Validator
        });
    let options = GetOptions {
        expected: plan.expected,
        validator,
        ..GetOptions::default()
    };
    let fetched = client.fetch_block(&peer, block, options).await;
    let Some(bytes) = fetched.bytes() else {
        return Err(NodeError::Failed(format!(
            "{} block {}/{}: {}",
            plan.peer,
            plan.chunk,
            plan.index,
            fetched.describe()
        )));
    };
    match &plan.output {
        Some(path) => write_file(path, bytes)?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes)
                .and_then(|()| out.flush())
                .map_err(|e| io_err("cannot write", "stdout", e))?;
        }
    }
    eprintln!(
        "{} bytes from {} in {:.1} ms",
        bytes.len(),
        plan.peer,
        fetched.elapsed.as_secs_f64() * 1e3
    );
    Ok(())
}
