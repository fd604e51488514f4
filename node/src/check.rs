//! `peerblock-node check`: verifies every chunk of a store — the manifest against the
//! chunk key, every block against the manifest, missing blocks, stale temporary files —
//! prints one line per chunk and a summary, and with `--repair` quarantines rotten files,
//! removes stale temporary files and (with `--seed`) fetches good copies of what is
//! rotten or missing from the cluster through the read engine, validated, as `fetch`
//! does.
//!
//! Exit status: 0 if the store is clean at the end (after repairs), 1 if damage remains.
//!
//! What counts as damage: a manifest (`<chunk>/0`) missing or failing the chunk key, a
//! block failing the manifest or missing, a stale temporary file. A store written without
//! manifests (`peerblock-node swarm`'s) has only unverifiable chunks and reports each as
//! missing its manifest. Quarantined copies (`.<i>.corrupt`) are reported but are not
//! damage (they are never served; delete them when you no longer want the evidence).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use peerblock_common::manifest::{self, check_stored, Damage, Manifest};
use peerblock_common::store::{self as pstore, FileStore, DEFAULT_MAX_BLOCK_SIZE};
use peerblock_core::client::placement_members;
use peerblock_core::read::ReadOutcome;
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};

use crate::config::{self, NodeConfig};
use crate::metrics::Metrics;
use crate::node::{CheckArgs, NodeError};
use crate::progress::Progress;
use crate::reader::{BlockSpec, PlacementDiscovery, Reader};

/// Everything `check` needs, validated.
#[derive(Clone, Debug)]
pub struct CheckPlan {
    /// The store directory (exists).
    pub store: PathBuf,
    /// Whether to repair (`--repair`).
    pub repair: bool,
    /// Nodes whose rosters introduce the cluster to re-fetch from (`--seed`, only with
    /// `--repair`).
    pub seeds: Vec<String>,
    /// The validated configuration (its client, read and roster tables apply to
    /// re-fetches).
    pub config: NodeConfig,
}

/// Validates `check`'s arguments: the store must be an existing directory (`check` never
/// creates one); `--seed` needs `--repair`.
pub fn plan_check(args: &CheckArgs) -> Result<CheckPlan, NodeError> {
    let config = match &args.config {
        Some(p) => NodeConfig::from_file(p)?,
        None => NodeConfig::default(),
    };
    if !args.store.is_dir() {
        return Err(NodeError::usage(
            "--store",
            format!("{} is not a directory", args.store.display()),
        ));
    }
    if !args.seeds.is_empty() && !args.repair {
        return Err(NodeError::usage(
            "--seed",
            "re-fetches damaged blocks while repairing: add --repair".to_owned(),
        ));
    }
    for seed in &args.seeds {
        crate::node::check_peer_addr("--seed", seed)?;
    }
    if !args.seeds.is_empty() {
        config
            .refresh_config(args.seeds.clone())
            .validate()
            .map_err(|e| config::refresh_error(&e))?;
    }
    Ok(CheckPlan {
        store: args.store.clone(),
        repair: args.repair,
        seeds: args.seeds.clone(),
        config,
    })
}

/// The state of a chunk's manifest.
#[derive(Clone, Debug)]
enum ManifestState {
    Sound(Arc<Manifest>),
    Missing,
    /// Fails the chunk key (or is unreadable).
    Rotten,
}

/// What is known about one chunk.
#[derive(Debug)]
struct ChunkCheck {
    key: ChunkKey,
    dir: PathBuf,
    manifest: ManifestState,
    /// The manifest's damage when first checked (reported even once repaired).
    manifest_damage: Option<Damage>,
    /// Block files present when the manifest is not sound (unverifiable).
    unverifiable: u64,
    /// Damaged blocks (1-based), with what was wrong, in index order.
    damaged: Vec<(u64, Damage)>,
    /// Block files past the manifest's last block (not part of the chunk).
    extra: Vec<u64>,
    /// Damaged files (0: the manifest) renamed to their quarantine name.
    quarantined: Vec<u64>,
    /// Damaged files (0: the manifest) replaced by a validated copy from the cluster.
    refetched: Vec<u64>,
    /// Quarantined copies found (`.<i>.corrupt`).
    old_quarantine: u64,
    /// Blocks verified sound.
    sound: u64,
}

impl ChunkCheck {
    /// Whether damage remains: a manifest not sound, or a damaged block not re-fetched.
    fn damaged_now(&self) -> bool {
        !matches!(self.manifest, ManifestState::Sound(_))
            || self
                .damaged
                .iter()
                .any(|(i, _)| !self.refetched.contains(i))
            || self.extra.iter().any(|i| !self.quarantined.contains(i))
    }

    fn line(&self) -> String {
        let fate = |index: u64| -> &'static str {
            match (
                self.quarantined.contains(&index),
                self.refetched.contains(&index),
            ) {
                (_, true) => " (repaired from the cluster)",
                (true, false) => " (quarantined)",
                (false, false) => "",
            }
        };
        let mut parts = Vec::new();
        if let Some(d) = self.manifest_damage {
            parts.push(format!("manifest {d}{}", fate(0)));
        }
        match &self.manifest {
            ManifestState::Sound(_) => {}
            _ if self.unverifiable > 0 => {
                parts.push(format!("{} blocks unverifiable", self.unverifiable))
            }
            _ => {}
        }
        for (i, d) in &self.damaged {
            parts.push(format!("block {i} {d}{}", fate(*i)));
        }
        for i in &self.extra {
            parts.push(format!("file {i} past the last block{}", fate(*i)));
        }
        let blocks = match &self.manifest {
            ManifestState::Sound(m) => format!("{} blocks", m.blocks()),
            _ => "? blocks".to_owned(),
        };
        let old = if self.old_quarantine > 0 {
            format!(", {} quarantined copies kept", self.old_quarantine)
        } else {
            String::new()
        };
        let state = if self.damaged_now() {
            "DAMAGED"
        } else if parts.is_empty() {
            "ok"
        } else {
            "repaired"
        };
        if parts.is_empty() {
            format!("{} {state}: {blocks}{old}", self.key)
        } else {
            format!("{} {state}: {blocks}: {}{old}", self.key, parts.join(", "))
        }
    }
}

/// The chunk directories of `store` (64 hex digits), sorted, and the bytes of their files.
fn chunk_dirs(store: &Path) -> std::io::Result<(Vec<(ChunkKey, PathBuf)>, u64)> {
    let mut chunks = Vec::new();
    let mut bytes = 0;
    for entry in std::fs::read_dir(store)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Ok(key) = ChunkKey::parse_hex(name.as_bytes()) else {
            continue;
        };
        if key.as_bytes().len() != blake3::OUT_LEN || key.to_string() != name {
            continue;
        }
        for f in std::fs::read_dir(entry.path())?.flatten() {
            bytes += f.metadata().map_or(0, |m| m.len());
        }
        chunks.push((key, entry.path()));
    }
    chunks.sort_by(|a, b| a.1.cmp(&b.1));
    Ok((chunks, bytes))
}

/// The block indexes present in a chunk directory (canonical decimal names) and the
/// number of quarantined copies.
fn present(dir: &Path) -> (Vec<u64>, u64) {
    let mut indexes = Vec::new();
    let mut quarantined = 0;
    for f in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = f.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".corrupt") {
            quarantined += 1;
        } else if let Ok(i) = name.parse::<u64>() {
            if i.to_string() == name {
                indexes.push(i);
            }
        }
    }
    indexes.sort_unstable();
    (indexes, quarantined)
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

impl ChunkCheck {
    /// The check of chunk `key` in `dir` before anything was looked at (`old_quarantine`
    /// quarantined files found there from earlier runs).
    fn new(key: ChunkKey, dir: PathBuf, old_quarantine: u64) -> ChunkCheck {
        ChunkCheck {
            key,
            dir,
            manifest: ManifestState::Missing,
            manifest_damage: None,
            unverifiable: 0,
            damaged: Vec::new(),
            extra: Vec::new(),
            quarantined: Vec::new(),
            refetched: Vec::new(),
            old_quarantine,
            sound: 0,
        }
    }
}

/// Checks one chunk (blocking); with `repair`, quarantines what is rotten.
fn check_chunk(key: ChunkKey, dir: PathBuf, repair: bool, progress: &mut Progress) -> ChunkCheck {
    let (indexes, old_quarantine) = present(&dir);
    let mut c = ChunkCheck::new(key, dir, old_quarantine);
    let manifest_file = c.dir.join("0");
    progress.inc(file_len(&manifest_file));
    c.manifest = match std::fs::read(&manifest_file) {
        Ok(bytes) if manifest::verify_manifest(&key, &bytes) => match Manifest::parse(&bytes) {
            Ok(m) => ManifestState::Sound(Arc::new(m)),
            Err(_) => ManifestState::Rotten,
        },
        Ok(_) => ManifestState::Rotten,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ManifestState::Missing,
        Err(_) => ManifestState::Rotten,
    };
    c.manifest_damage = match c.manifest {
        ManifestState::Sound(_) => None,
        ManifestState::Missing => Some(Damage::Missing),
        ManifestState::Rotten => Some(Damage::Rotten),
    };
    if matches!(c.manifest, ManifestState::Rotten) && repair {
        quarantine(&mut c, 0);
        c.manifest = ManifestState::Missing;
    }
    verify_blocks(&mut c, &indexes, repair, progress);
    c
}

/// Verifies the chunk's blocks against its manifest (if sound), recording damage and
/// quarantining rotten files when repairing.
fn verify_blocks(c: &mut ChunkCheck, indexes: &[u64], repair: bool, progress: &mut Progress) {
    let ManifestState::Sound(m) = c.manifest.clone() else {
        c.unverifiable = indexes.iter().filter(|&&i| i != 0).count() as u64;
        for &i in indexes.iter().filter(|&&i| i != 0) {
            progress.inc(file_len(&c.dir.join(i.to_string())));
        }
        return;
    };
    c.damaged.clear();
    c.extra.clear();
    c.sound = 0;
    for index in 1..=m.blocks() {
        let file = c.dir.join(index.to_string());
        let len = file_len(&file);
        match check_stored(&c.dir, &c.key, &m, index) {
            None => c.sound += 1,
            Some(d) => {
                c.damaged.push((index, d));
                if d == Damage::Rotten && repair {
                    quarantine(c, index);
                }
            }
        }
        progress.inc(len);
    }
    // Files past the manifest's last block are not part of the chunk: rotten.
    for &i in indexes.iter().filter(|&&i| i > m.blocks()) {
        c.extra.push(i);
        if repair {
            quarantine(c, i);
        }
    }
}

fn quarantine(c: &mut ChunkCheck, index: u64) {
    match pstore::quarantine_file(&c.dir, index) {
        Ok(to) => {
            tracing::warn!(file = %c.dir.join(index.to_string()).display(), quarantined = %to.display(), "check: rotten file quarantined");
            c.quarantined.push(index);
        }
        Err(e) => {
            tracing::warn!(file = %c.dir.join(index.to_string()).display(), error = %e, "check: quarantining a rotten file failed")
        }
    }
}

/// The scan: stale temporary files (removed when repairing) and every chunk.
fn scan(store: &Path, repair: bool) -> Result<(Vec<PathBuf>, bool, Vec<ChunkCheck>), NodeError> {
    let io = |what: &'static str, e: std::io::Error| NodeError::Io {
        what,
        path: store.display().to_string(),
        source: e,
    };
    let stale = pstore::stale_temps(store).map_err(|e| io("cannot scan", e))?;
    let mut removed = false;
    if repair && !stale.is_empty() {
        let gone = pstore::remove_stale_temps(store).map_err(|e| io("cannot clean", e))?;
        removed = gone.len() == stale.len();
    }
    let (chunks, bytes) = chunk_dirs(store).map_err(|e| io("cannot read", e))?;
    let mut progress = Progress::new(format!("check {}", store.display()), bytes);
    let checks = chunks
        .into_iter()
        .map(|(key, dir)| check_chunk(key, dir, repair, &mut progress))
        .collect();
    progress.finish();
    Ok((stale, removed, checks))
}

/// `check`: the scan, the repairs, a line per chunk on stdout and a summary; `Failed`
/// (exit 1) if damage remains.
pub async fn check(plan: CheckPlan) -> Result<(), NodeError> {
    let store = plan.store.clone();
    let repair = plan.repair;
    let (stale, removed, mut checks) = tokio::task::spawn_blocking(move || scan(&store, repair))
        .await
        .map_err(|e| NodeError::Failed(format!("the store scan did not complete: {e}")))??;
    if plan.repair && !plan.seeds.is_empty() && checks.iter().any(ChunkCheck::damaged_now) {
        refetch(&plan, &mut checks).await?;
    }
    let mut out = String::new();
    for path in &stale {
        let fate = if removed { "removed" } else { "stale" };
        out.push_str(&format!(
            "{}: temporary file of a process that is gone: {fate}\n",
            path.display()
        ));
    }
    for c in &checks {
        out.push_str(&c.line());
        out.push('\n');
    }
    let damaged = checks.iter().filter(|c| c.damaged_now()).count();
    let count = |f: &dyn Fn(&ChunkCheck) -> usize| checks.iter().map(f).sum::<usize>();
    let rotten = count(&|c| {
        c.damaged.iter().filter(|d| d.1 == Damage::Rotten).count()
            + c.extra.len()
            + usize::from(c.manifest_damage == Some(Damage::Rotten))
    });
    let missing = count(&|c| {
        c.damaged.iter().filter(|d| d.1 == Damage::Missing).count()
            + usize::from(c.manifest_damage == Some(Damage::Missing))
    });
    let sound = checks.iter().map(|c| c.sound).sum::<u64>();
    let quarantined = count(&|c| c.quarantined.len());
    let refetched = count(&|c| c.refetched.len());
    let stale_left = if removed { 0 } else { stale.len() };
    out.push_str(&format!(
        "checked {} chunks: {sound} blocks sound, {rotten} rotten, {missing} missing, {} stale temporary files; {quarantined} quarantined, {refetched} repaired from the cluster, {} stale files removed; {damaged} chunks still damaged\n",
        checks.len(),
        stale.len(),
        if removed { stale.len() } else { 0 },
    ));
    print!("{out}");
    if damaged > 0 || stale_left > 0 {
        let hint = if plan.repair && plan.seeds.is_empty() {
            " (add --seed ADDR to re-fetch damaged blocks from the cluster)"
        } else if !plan.repair {
            " (--repair quarantines rotten files and removes stale ones; with --seed it re-fetches)"
        } else {
            ""
        };
        return Err(NodeError::Failed(format!(
            "damage remains: {damaged} chunks, {stale_left} stale temporary files{hint}"
        )));
    }
    Ok(())
}

/// The reader re-fetches go through: the cluster learned from the seeds, as `fetch` does.
async fn reader(plan: &CheckPlan) -> Result<Reader, NodeError> {
    let clock = Clock::new(std::time::Instant::now());
    let client = crate::cmd::client(&plan.config, clock, Metrics::new(), None)?;
    let membership =
        crate::cmd::command_membership(&plan.config, "peerblock-check", "check.invalid:0")?;
    let mut read_config = plan.config.read_config();
    crate::cmd::learn_cluster(
        &client,
        &plan.seeds,
        &membership,
        read_config.max_retry_after,
    )
    .await?;
    let placeable = placement_members(&crate::cmd::lock(&membership)).len();
    if placeable == 0 {
        return Err(NodeError::Failed(format!(
            "unavailable: the seeds' rosters named no placeable member ({})",
            plan.seeds.join(", ")
        )));
    }
    read_config.close_group_size = read_config.close_group_size.min(placeable.max(1));
    let discovery = Arc::new(PlacementDiscovery::new(
        membership,
        read_config.close_group_size,
    ));
    Reader::new(
        client,
        discovery,
        read_config,
        crate::cmd::run_seed(b"check"),
    )
    .map_err(|e| NodeError::Failed(format!("read configuration: {e}")))
}

/// Reads block `index` of `key` through `reader`, validated (block 0 against the key,
/// block `i` against `manifest`).
async fn read_valid(
    reader: &Reader,
    key: ChunkKey,
    index: u64,
    manifest: Option<&Arc<Manifest>>,
) -> Option<peerblock_core::bytes::Bytes> {
    let check = manifest.cloned();
    let spec = BlockSpec {
        key: manifest::block_key(&key, index),
        path: BlockPath { key, index },
        expected: manifest.and_then(|m| m.block_len(index)),
        validator: check.map(|m| {
            Arc::new(move |b: &peerblock_core::bytes::Bytes| m.verify_block(index, b))
                as peerblock_common::client::Validator
        }),
        origin: None,
    };
    let r = reader.read(spec).await;
    match r.outcome {
        ReadOutcome::Found(b) | ReadOutcome::FoundAtOrigin(b) => {
            let valid = match manifest {
                None => manifest::verify_manifest(&key, &b),
                Some(m) => m.verify_block(index, &b),
            };
            valid.then_some(b)
        }
        other => {
            tracing::warn!(chunk = %key, index, outcome = other.name(), "check: re-fetch failed");
            None
        }
    }
}

/// Writes a validated block into the store (atomic, durable).
async fn put(
    store: &FileStore,
    key: ChunkKey,
    index: u64,
    bytes: peerblock_core::bytes::Bytes,
) -> bool {
    let path = BlockPath { key, index };
    match crate::source::put(store, path, bytes).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(%path, error = %e, "check: writing a re-fetched block failed");
            false
        }
    }
}

/// Re-fetches every damaged file of every damaged chunk from the cluster: a lost manifest
/// first (then the chunk's blocks are verified against it), then each damaged block.
async fn refetch(plan: &CheckPlan, checks: &mut [ChunkCheck]) -> Result<(), NodeError> {
    let reader = reader(plan).await?;
    let store = FileStore::with_cache(&plan.store, DEFAULT_MAX_BLOCK_SIZE, 0);
    for c in checks.iter_mut().filter(|c| c.damaged_now()) {
        if !matches!(c.manifest, ManifestState::Sound(_)) {
            let Some(bytes) = read_valid(&reader, c.key, 0, None).await else {
                continue;
            };
            let Ok(m) = Manifest::parse(&bytes) else {
                continue;
            };
            if !put(&store, c.key, 0, bytes).await {
                continue;
            }
            c.refetched.push(0);
            c.manifest = ManifestState::Sound(Arc::new(m));
            // Now the blocks can be verified.
            let dir = c.dir.clone();
            let (indexes, _) = present(&dir);
            let mut taken = std::mem::replace(c, ChunkCheck::new(c.key, dir.clone(), 0));
            let repair = plan.repair;
            taken = tokio::task::spawn_blocking(move || {
                let mut progress = Progress::new("check", 0);
                taken.unverifiable = 0;
                verify_blocks(&mut taken, &indexes, repair, &mut progress);
                taken
            })
            .await
            .map_err(|e| NodeError::Failed(format!("verifying a repaired chunk: {e}")))?;
            *c = taken;
        }
        let ManifestState::Sound(m) = c.manifest.clone() else {
            continue;
        };
        let wanted: Vec<u64> = c
            .damaged
            .iter()
            .map(|(i, _)| *i)
            .filter(|&i| !c.refetched.contains(&i))
            .collect();
        for index in wanted {
            if let Some(bytes) = read_valid(&reader, c.key, index, Some(&m)).await {
                if put(&store, c.key, index, bytes).await {
                    c.refetched.push(index);
                }
            }
        }
    }
    Ok(())
}
