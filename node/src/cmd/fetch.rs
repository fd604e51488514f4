//! `peerblock-node fetch`: a whole file by its chunk key (manifest, then every block into
//! a part file) or an object from the origin, written where the plan says.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use peerblock_core::client::{placement_members, Ending};
use peerblock_core::read::ReadOutcome;
use peerblock_core::time::Clock;
use peerblock_core::wire::{BlockPath, ChunkKey};
use tokio::task::JoinSet;

use crate::client::{Client, Fetched, OutcomeClass, Peer};
use crate::manifest::{self, Manifest};
use crate::metrics::Metrics;
use crate::node::{FetchPlan, NodeError};
use crate::progress::Progress;
use crate::reader::{BlockSpec, PeerOrigin, PlacementDiscovery, Reader};

use super::*;

/// `fetch`: reads the manifest and every block through the read engine, validated, and
/// writes the file through a temporary file of its own (see [`PartFile`]). Prints one line
/// per peer on stdout (`ADDR N bytes K blocks I invalid R refused A absent F failed`);
/// each failed block's outcome class goes to stderr. SIGINT or SIGTERM stops it at once,
/// removing the temporary file ([`NodeError::Interrupted`]).
pub async fn fetch(plan: FetchPlan) -> Result<(), NodeError> {
    let stop = Stop::install();
    tokio::select! {
        r = fetch_file(plan) => r,
        () = stop.wait() => Err(NodeError::Interrupted(
            "the temporary file was removed, the output left as it was".to_owned(),
        )),
    }
}

async fn fetch_file(plan: FetchPlan) -> Result<(), NodeError> {
    let clock = Clock::new(std::time::Instant::now());
    let metrics = Metrics::new();
    let client = client(&plan.config, clock, metrics, plan.bind)?;
    let membership = command_membership(&plan.config, FETCH_SELF_ID, "fetch.invalid:0")?;
    let mut read_config = plan.config.read_config();
    learn_cluster(
        &client,
        &plan.seeds,
        &membership,
        read_config.max_retry_after,
    )
    .await?;
    let known = lock(&membership).len();
    if known == 0 {
        return Err(NodeError::Failed(format!(
            "unavailable: the seeds' rosters named no member ({})",
            plan.seeds.join(", ")
        )));
    }
    tracing::info!(members = known, "cluster learned");
    // A cluster smaller than the configured close group has every placeable member in
    // it: a block's close group is the whole cluster, so the read can conclude Absent
    // once they all said 404 (it never can with a close group larger than the cluster).
    let placeable = placement_members(&lock(&membership)).len();
    read_config.close_group_size = read_config.close_group_size.min(placeable.max(1));
    let discovery = Arc::new(PlacementDiscovery::new(
        membership.clone(),
        read_config.close_group_size,
    ));
    let tally: Arc<Mutex<BTreeMap<String, PeerTally>>> = Arc::default();
    let observer_tally = tally.clone();
    // The status of the last `502 + X-DART-Upstream-Status` a relay answered: the origin
    // refused the URL's credential (the relay is not to blame).
    let upstream_refused: Arc<Mutex<Option<u16>>> = Arc::default();
    let observer_refused = upstream_refused.clone();
    let observer: crate::reader::GetObserver = Arc::new(move |peer: &Peer, f: &Fetched| {
        if let Some(Ending::UpstreamRefused { status }) = &f.ending {
            *observer_refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(*status);
        }
        let mut t = observer_tally.lock().unwrap_or_else(|e| e.into_inner());
        let e = t.entry(peer.addr.clone()).or_default();
        match f.class {
            OutcomeClass::Ok => {
                e.ok += 1;
                e.bytes += f.bytes().map_or(0, |b| b.len() as u64);
            }
            OutcomeClass::Invalid => e.invalid += 1,
            OutcomeClass::Busy => e.refused += 1,
            OutcomeClass::Absent => e.absent += 1,
            OutcomeClass::Unavailable => e.failed += 1,
            OutcomeClass::Cancelled => {}
        }
    });
    if let Some(object) = &plan.object {
        let parts = ObjectFetch {
            client,
            discovery,
            read_config,
            tally,
            observer,
            upstream_refused,
            clock,
        };
        return fetch_object(&plan, object, parts).await;
    }
    // With an origin the read's last resort is a validated GET from it (its bytes are
    // reported on its own line), and every GET names it so holders relay for us.
    let origin = match &plan.origin {
        Some(url) => {
            read_config.origin = true;
            let origin = PeerOrigin::new(client.clone(), url)
                .ok_or_else(|| {
                    NodeError::usage("--origin", format!("{url:?} is not http://HOST:PORT"))
                })?
                .with_observer(observer.clone());
            Some(origin)
        }
        None => None,
    };
    let mut reader = Reader::new(client, discovery, read_config, run_seed(b"fetch"))
        .map_err(|e| NodeError::Failed(format!("read configuration: {e}")))?
        .with_observer(observer);
    if let Some(origin) = origin {
        reader = reader.with_origin(Arc::new(origin));
    }
    let reader = Arc::new(reader);
    let origin_url: Option<Arc<str>> = plan.origin.as_deref().map(Arc::from);
    let manifest = match read_manifest(&reader, &plan.chunk, origin_url.clone()).await {
        Ok(m) => Arc::new(m),
        Err(e) => {
            print_tally(&tally);
            return Err(e);
        }
    };
    let result = read_blocks(&reader, &plan, manifest.clone(), origin_url).await;
    print_tally(&tally);
    result
}

/// Reads the manifest (block 0) through the read engine like any block: each copy is
/// checked against the chunk key as it arrives, so a holder whose copy is bad is never
/// asked again and the read goes on to the next holder.
async fn read_manifest(
    reader: &Reader,
    chunk: &ChunkKey,
    origin: Option<Arc<str>>,
) -> Result<Manifest, NodeError> {
    let key = *chunk;
    let spec = BlockSpec {
        key: manifest::block_key(chunk, 0),
        path: BlockPath {
            key: *chunk,
            index: 0,
        },
        expected: None,
        validator: Some(Arc::new(move |b| manifest::verify_manifest(&key, b))),
        origin,
    };
    let r = reader.read(spec).await;
    let bytes = match &r.outcome {
        ReadOutcome::Found(b) | ReadOutcome::FoundAtOrigin(b) => b.clone(),
        ReadOutcome::Invalid => {
            return Err(NodeError::Failed(format!(
                "manifest of {chunk}: invalid ({} copies failed validation against the key, no holder had a valid one)",
                r.stats.invalid
            )))
        }
        other => {
            return Err(NodeError::Failed(format!(
                "manifest of {chunk}: {}",
                other.name()
            )))
        }
    };
    Manifest::parse(&bytes).map_err(|e| NodeError::Failed(format!("manifest of {chunk}: {e}")))
}

/// The temporary file one fetch writes: `.NAME.<pid>.<n>.part` beside the output, created
/// exclusively (never shared with another fetch, never an existing file), removed when
/// dropped unless [`persist`](Self::persist)ed: an error, SIGINT or SIGTERM leaves no
/// partial file behind.
struct PartFile {
    path: std::path::PathBuf,
    file: Arc<std::fs::File>,
    kept: bool,
}

impl PartFile {
    /// The prefix of every temporary name for `output` (`.NAME.`).
    fn prefix(output: &Path) -> std::ffi::OsString {
        let mut prefix = std::ffi::OsString::from(".");
        prefix.push(output.file_name().unwrap_or_default());
        prefix.push(".");
        prefix
    }

    /// Creates a new temporary file for `output`, `size` bytes long.
    fn create(output: &Path, size: u64) -> Result<PartFile, NodeError> {
        let pid = std::process::id();
        let mut n = run_seed(b"part") as u32;
        for _ in 0..64 {
            let mut name = Self::prefix(output);
            name.push(format!("{pid}.{n}.part"));
            let path = output.with_file_name(name);
            match std::fs::OpenOptions::new()
                .write(true)
                .read(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => {
                    let part = PartFile {
                        path,
                        file: Arc::new(file),
                        kept: false,
                    };
                    part.file
                        .set_len(size)
                        .map_err(|e| io_err("cannot size", part.path.display(), e))?;
                    return Ok(part);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n = n.wrapping_add(1),
                Err(e) => return Err(io_err("cannot create", path.display(), e)),
            }
        }
        Err(NodeError::Failed(format!(
            "cannot find a free temporary name beside {}",
            output.display()
        )))
    }

    /// Removes temporary files of `output` left by fetches that are no longer running
    /// (killed with SIGKILL, or a crash): `.NAME.<pid>.<n>.part` whose pid is not a live
    /// process. Returns how many were removed.
    fn remove_stale(output: &Path) -> usize {
        let dir = match output.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => p.to_owned(),
            None => std::path::PathBuf::from("."),
        };
        let prefix = Self::prefix(output);
        let prefix = prefix.to_string_lossy();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Some(rest) = name
                .strip_prefix(prefix.as_ref())
                .and_then(|r| r.strip_suffix(".part"))
            else {
                continue;
            };
            let Some((pid, n)) = rest.split_once('.') else {
                continue;
            };
            let (Ok(pid), Ok(_)) = (pid.parse::<u32>(), n.parse::<u32>()) else {
                continue;
            };
            if peerblock_common::store::pid_alive(pid) {
                continue;
            }
            if std::fs::remove_file(entry.path()).is_ok() {
                tracing::info!(file = %entry.path().display(), "removed a stale temporary file of an ended fetch");
                removed += 1;
            }
        }
        removed
    }

    /// Reads the whole file back and checks every block against `manifest`: what is on
    /// disk is what was validated (a write that went wrong, a file truncated under us).
    fn verify(&self, manifest: &Manifest) -> Result<(), String> {
        use std::os::unix::fs::FileExt;
        let len = self.file.metadata().map_err(|e| e.to_string())?.len();
        if len != manifest.size {
            return Err(format!("{len} bytes on disk, {} expected", manifest.size));
        }
        let mut buf = vec![0u8; manifest.block_size.min(manifest.size.max(1)) as usize];
        for index in 1..=manifest.blocks() {
            let want = manifest.block_len(index).expect("index in range") as usize;
            let block = &mut buf[..want];
            self.file
                .read_exact_at(block, (index - 1) * manifest.block_size)
                .map_err(|e| format!("reading block {index} back: {e}"))?;
            if !manifest.verify_block(index, block) {
                return Err(format!("block {index} on disk does not match its hash"));
            }
        }
        Ok(())
    }

    /// Reads the whole file back: its length must be `size` and, with `hash`, its
    /// SHA-256 or BLAKE3 must be `hash`'s.
    fn verify_hash(&self, size: u64, hash: Option<&crate::node::FileHash>) -> Result<(), String> {
        use crate::node::FileHash;
        use sha2::Digest;
        use std::os::unix::fs::FileExt;
        let len = self.file.metadata().map_err(|e| e.to_string())?.len();
        if len != size {
            return Err(format!("{len} bytes on disk, {size} expected"));
        }
        let Some(hash) = hash else {
            return Ok(());
        };
        let mut sha = sha2::Sha256::new();
        let mut b3 = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut offset = 0u64;
        while offset < size {
            let n = (size - offset).min(buf.len() as u64) as usize;
            self.file
                .read_exact_at(&mut buf[..n], offset)
                .map_err(|e| format!("reading the file back: {e}"))?;
            match hash {
                FileHash::Sha256(_) => sha.update(&buf[..n]),
                FileHash::Blake3(_) => {
                    b3.update(&buf[..n]);
                }
            }
            offset += n as u64;
        }
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let (name, got, want) = match hash {
            FileHash::Sha256(want) => ("SHA-256", sha.finalize().to_vec(), want),
            FileHash::Blake3(want) => ("BLAKE3", b3.finalize().as_bytes().to_vec(), want),
        };
        if got != want {
            return Err(format!(
                "the file's {name} is {}, {} was expected",
                hex(&got),
                hex(want)
            ));
        }
        Ok(())
    }

    /// Makes the file the output: checks that the output is still a regular file or
    /// missing, `fsync`s the file, renames it over the output and `fsync`s the directory.
    fn persist(mut self, output: &Path) -> Result<(), NodeError> {
        crate::node::check_output(output)?;
        self.file
            .sync_all()
            .map_err(|e| io_err("cannot sync", self.path.display(), e))?;
        std::fs::rename(&self.path, output)
            .map_err(|e| io_err("cannot rename into place", output.display(), e))?;
        self.kept = true;
        let _ = peerblock_common::store::sync_parent(output);
        Ok(())
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

async fn read_blocks(
    reader: &Arc<Reader>,
    plan: &FetchPlan,
    manifest: Arc<Manifest>,
    origin: Option<Arc<str>>,
) -> Result<(), NodeError> {
    let stale = PartFile::remove_stale(&plan.output);
    if stale > 0 {
        eprintln!(
            "removed {stale} temporary file(s) of earlier fetches of {} that did not finish",
            plan.output.display()
        );
    }
    let part = PartFile::create(&plan.output, manifest.size)?;
    let file = part.file.clone();
    let mut progress = Progress::new(format!("fetch {}", plan.chunk), manifest.size);
    let mut failed: Vec<(u64, &'static str)> = Vec::new();
    let mut tasks = JoinSet::new();
    let mut next = 1u64;
    let blocks = manifest.blocks();
    let mut write_error = None;
    loop {
        while tasks.len() < plan.parallel && next <= blocks {
            let index = next;
            next += 1;
            let (reader, manifest, file) = (reader.clone(), manifest.clone(), file.clone());
            let (chunk, origin) = (plan.chunk, origin.clone());
            tasks.spawn(async move {
                let expected = manifest.block_len(index);
                let check = manifest.clone();
                let spec = BlockSpec {
                    key: manifest::block_key(&chunk, index),
                    path: BlockPath { key: chunk, index },
                    expected,
                    validator: Some(Arc::new(move |b| check.verify_block(index, b))),
                    origin,
                };
                let r = reader.read(spec).await;
                let written =
                    write_found(&r.outcome, &file, (index - 1) * manifest.block_size).await;
                (index, r.outcome.name(), written)
            });
        }
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        let (index, outcome, written) =
            joined.map_err(|e| NodeError::Failed(format!("a block read task failed: {e}")))?;
        match written {
            Some(Ok(n)) => progress.inc(n),
            Some(Err(e)) => {
                write_error.get_or_insert(e);
            }
            None => failed.push((index, outcome)),
        }
    }
    progress.finish();
    if let Some(e) = write_error {
        return Err(io_err("cannot write", part.path.display(), e));
    }
    if !failed.is_empty() {
        return Err(NodeError::Failed(format!(
            "{} of {blocks} blocks not read: {}",
            failed.len(),
            failed_summary(&mut failed)
        )));
    }
    // Reading the file back and the fsync and rename are blocking file work: off the
    // runtime's threads (a current-thread runtime too). Dropped mid-way (SIGINT), the
    // task's `PartFile` is dropped with its result, removing the temporary file.
    let check = manifest.clone();
    let (part, verified) = tokio::task::spawn_blocking(move || {
        let verified = part.verify(&check);
        (part, verified)
    })
    .await
    .map_err(|e| NodeError::Failed(format!("verifying the written file failed: {e}")))?;
    if let Err(e) = verified {
        return Err(NodeError::Failed(format!(
            "{}: the written file failed verification ({e}); the output was not touched",
            part.path.display()
        )));
    }
    let output = plan.output.clone();
    tokio::task::spawn_blocking(move || part.persist(&output))
        .await
        .map_err(|e| NodeError::Failed(format!("moving the file into place failed: {e}")))??;
    eprintln!(
        "fetched {} bytes in {blocks} blocks to {} (every block verified on disk)",
        manifest.size,
        plan.output.display()
    );
    Ok(())
}

/// What `fetch URL` starts from once the cluster is known.
struct ObjectFetch {
    client: Client,
    discovery: Arc<PlacementDiscovery>,
    read_config: peerblock_core::read::ReadConfig,
    tally: Arc<Mutex<BTreeMap<String, PeerTally>>>,
    observer: crate::reader::GetObserver,
    upstream_refused: Arc<Mutex<Option<u16>>>,
    clock: Clock,
}

/// Writes a found block at `offset` of `file` off the runtime's threads: `Some` with the
/// bytes written or the error, `None` when the read found nothing.
async fn write_found(
    outcome: &ReadOutcome,
    file: &Arc<std::fs::File>,
    offset: u64,
) -> Option<std::io::Result<u64>> {
    let (ReadOutcome::Found(b) | ReadOutcome::FoundAtOrigin(b)) = outcome else {
        return None;
    };
    let (b, file) = (b.clone(), file.clone());
    let w = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        file.write_all_at(&b, offset).map(|()| b.len() as u64)
    })
    .await;
    Some(w.unwrap_or_else(|e| Err(std::io::Error::other(e))))
}

/// Prints each failed block (`block I: OUTCOME`, in index order) and returns the failures
/// counted by outcome (`"2 unavailable, 1 absent"`).
fn failed_summary(failed: &mut [(u64, &'static str)]) -> String {
    failed.sort_unstable();
    for (index, outcome) in failed.iter() {
        eprintln!("block {index}: {outcome}");
    }
    let mut classes: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, o) in failed.iter() {
        *classes.entry(o).or_default() += 1;
    }
    let summary: Vec<String> = classes.iter().map(|(o, n)| format!("{n} {o}")).collect();
    summary.join(", ")
}

/// `fetch URL`: probes the object's identity (size and validator) with `Range:
/// bytes=0-0`, derives its chunk key, reads every block through the cluster (each GET
/// names the URL with its identity fragment, so a holder that misses relays for us), the
/// origin itself as each read's last resort, checks every block's length and, with
/// `--sha256`/`--blake3`, the whole file before it is moved into place. Prints the
/// per-peer lines and the origin's (`origin HOST:PORT N bytes K blocks`).
async fn fetch_object(
    plan: &FetchPlan,
    object: &crate::node::ObjectPlan,
    parts: ObjectFetch,
) -> Result<(), NodeError> {
    use crate::origin::{ObjectClient, ObjectOrigin, OriginProblem};
    use peerblock_common::object::{ObjectIdentity, Scheme};
    let ObjectFetch {
        client,
        discovery,
        mut read_config,
        tally,
        observer,
        upstream_refused,
        clock,
    } = parts;
    let url = &object.url;
    let tls = match (url.scheme, &object.origin_ca) {
        (Scheme::Http, None) => None,
        (_, ca) => Some(
            crate::origin::tls_config(ca.as_deref())
                .map_err(|e| NodeError::usage("--origin-ca", e))?,
        ),
    };
    let origin_client =
        ObjectClient::new(plan.config.client_config(), clock, tls).with_local_ip(plan.bind);
    let shown = url.authority();
    let (size, validator) = crate::origin::probe(&origin_client, url)
        .await
        .map_err(|p| object_error(&shown, &p))?;
    let identity = ObjectIdentity::new(url.clone(), size, validator, object.block_size)
        .map_err(|e| NodeError::Failed(format!("{shown}: {e}")))?;
    let key = identity.key();
    let blocks = identity.blocks();
    let header: Arc<str> = Arc::from(identity.origin_header());
    eprintln!(
        "object {} bytes, validator {}, {blocks} blocks of {} bytes, key {key}",
        size,
        if identity.validator.is_empty() {
            "none (only the size shows a change)"
        } else {
            identity.validator.as_str()
        },
        identity.block_size
    );
    let identity = Arc::new(identity);
    let origin = ObjectOrigin::new(origin_client, identity.clone());
    read_config.origin = true;
    let reader = Reader::new(client, discovery, read_config, run_seed(b"fetch"))
        .map_err(|e| NodeError::Failed(format!("read configuration: {e}")))?
        .with_observer(observer)
        .with_origin(Arc::new(origin.clone()));
    let reader = Arc::new(reader);
    let result = read_object(&reader, plan, object, &identity, header, &origin).await;
    print_tally(&tally);
    say(&format!(
        "origin {shown} {} bytes {} blocks",
        origin.bytes(),
        origin.blocks()
    ));
    result.map_err(|e| {
        // A refusal a relay passed on names the origin's status (the relay is not blamed).
        let refused = *upstream_refused.lock().unwrap_or_else(|e| e.into_inner());
        match (e, refused, origin.problem()) {
            (NodeError::Failed(msg), Some(status), p)
                if !p.as_ref().is_some_and(OriginProblem::is_fatal) =>
            {
                NodeError::Failed(format!("{shown}: origin refused ({status}); {msg}"))
            }
            (e, _, _) => e,
        }
    })
}

/// The command's error for an origin problem at `shown`: `unavailable: ...` when the
/// origin could not be reached, otherwise the problem by name.
fn object_error(shown: &str, problem: &crate::origin::OriginProblem) -> NodeError {
    use crate::origin::OriginProblem;
    match problem {
        OriginProblem::Unavailable(_) => {
            NodeError::Failed(format!("unavailable: {shown}: {problem}"))
        }
        _ => NodeError::Failed(format!("{shown}: {problem}")),
    }
}

async fn read_object(
    reader: &Arc<Reader>,
    plan: &FetchPlan,
    object: &crate::node::ObjectPlan,
    identity: &Arc<peerblock_common::object::ObjectIdentity>,
    header: Arc<str>,
    origin: &crate::origin::ObjectOrigin,
) -> Result<(), NodeError> {
    let stale = PartFile::remove_stale(&plan.output);
    if stale > 0 {
        eprintln!(
            "removed {stale} temporary file(s) of earlier fetches of {} that did not finish",
            plan.output.display()
        );
    }
    let shown = identity.url.authority();
    let part = PartFile::create(&plan.output, identity.size)?;
    let file = part.file.clone();
    let key = identity.key();
    let blocks = identity.blocks();
    let mut progress = Progress::new(format!("fetch {shown}"), identity.size);
    let mut failed: Vec<(u64, &'static str)> = Vec::new();
    let mut tasks = JoinSet::new();
    let mut next = 0u64;
    let mut write_error = None;
    loop {
        // The object changed, or cannot be read by ranges: stop at once.
        if let Some(problem) = origin.problem().filter(|p| p.is_fatal()) {
            tasks.abort_all();
            progress.finish();
            return Err(NodeError::Failed(format!(
                "{shown}: {problem}; nothing was written at {}",
                plan.output.display()
            )));
        }
        while tasks.len() < plan.parallel && next < blocks {
            let index = next;
            next += 1;
            let (reader, file, header) = (reader.clone(), file.clone(), header.clone());
            let (start, len) = identity.block_range(index).expect("index below blocks");
            tasks.spawn(async move {
                let spec = BlockSpec {
                    key: manifest::block_key(&key, index),
                    path: BlockPath { key, index },
                    expected: Some(len),
                    validator: None,
                    origin: Some(header),
                };
                let r = reader.read(spec).await;
                let written = write_found(&r.outcome, &file, start).await;
                (index, r.outcome.name(), written)
            });
        }
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        let (index, outcome, written) =
            joined.map_err(|e| NodeError::Failed(format!("a block read task failed: {e}")))?;
        match written {
            Some(Ok(n)) => progress.inc(n),
            Some(Err(e)) => {
                write_error.get_or_insert(e);
            }
            None => failed.push((index, outcome)),
        }
    }
    progress.finish();
    if let Some(e) = write_error {
        return Err(io_err("cannot write", part.path.display(), e));
    }
    if !failed.is_empty() {
        let why = origin
            .problem()
            .map_or_else(String::new, |p| format!(" ({p})"));
        return Err(NodeError::Failed(format!(
            "{} of {blocks} blocks not read: {}{why}; nothing was written at {}",
            failed.len(),
            failed_summary(&mut failed),
            plan.output.display()
        )));
    }
    let hash = object.hash.clone();
    let size = identity.size;
    let (part, verified) = tokio::task::spawn_blocking(move || {
        let verified = part.verify_hash(size, hash.as_ref());
        (part, verified)
    })
    .await
    .map_err(|e| NodeError::Failed(format!("verifying the written file failed: {e}")))?;
    if let Err(e) = verified {
        return Err(NodeError::Failed(format!(
            "{e}; nothing was written at {}",
            plan.output.display()
        )));
    }
    let output = plan.output.clone();
    tokio::task::spawn_blocking(move || part.persist(&output))
        .await
        .map_err(|e| NodeError::Failed(format!("moving the file into place failed: {e}")))??;
    let checked = match &object.hash {
        Some(crate::node::FileHash::Sha256(_)) => {
            "every block's length and the file's SHA-256 checked"
        }
        Some(crate::node::FileHash::Blake3(_)) => {
            "every block's length and the file's BLAKE3 checked"
        }
        None => "only block lengths checked: no --sha256/--blake3 given",
    };
    eprintln!(
        "fetched {size} bytes in {blocks} blocks to {} ({checked})",
        plan.output.display()
    );
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file of its own (`fsync`, rename): the
/// output is the old file or the whole new one, never a part.
pub(super) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), NodeError> {
    use std::os::unix::fs::FileExt;
    let part = PartFile::create(path, bytes.len() as u64)?;
    part.file
        .write_all_at(bytes, 0)
        .map_err(|e| io_err("cannot write", part.path.display(), e))?;
    part.persist(path)
}
