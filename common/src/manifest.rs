//! Content addressing with BLAKE3: importing a file as blocks, the manifest that lists
//! them, and the checks a reader applies to every block it receives.
//!
//! ## Store layout
//!
//! A file imported with chunk key `K` (64 lower-case hex digits, `ChunkKey`'s `Display`)
//! lives in `<store>/<K>/`: the manifest in `<store>/<K>/0`, block `i` (1 ≤ i ≤ n) of the
//! file in `<store>/<K>/<i>` (decimal, no leading zeros). This is the layout the file
//! store serves (`GET /peer/v1/block/<K>/<i>`).
//!
//! ## Manifest format (version 1)
//!
//! ASCII text, every line ending in `\n`, nothing else:
//!
//! ```text
//! peerblock-manifest 1
//! size <file size in bytes, decimal>
//! block-size <block size in bytes, decimal>
//! blocks <number of blocks, decimal>
//! <BLAKE3 of block 1, 64 lower-case hex digits>
//! ...
//! <BLAKE3 of block n>
//! ```
//!
//! Numbers are decimal without sign or leading zeros (`0` itself is allowed for `size`
//! and `blocks`). `blocks` is `ceil(size / block-size)`: every block is `block-size` bytes
//! except the last, which holds the rest. An empty file is allowed: `size 0`, `blocks 0`,
//! no hash lines. [`Manifest::parse`] accepts exactly this form and nothing else (at most
//! [`MAX_MANIFEST_BYTES`]), so one file has one manifest.
//!
//! ## Where the chunk key comes from
//!
//! The chunk key is the BLAKE3 hash (32 bytes) of the manifest's bytes. Block 0 (the
//! manifest) therefore validates against the key itself ([`verify_manifest`]), and every
//! other block against its hash in the manifest ([`Manifest::verify_block`]): a reader
//! that knows only the key can check every byte it receives.
//!
//! ## Placement key of a block
//!
//! Reads look a block's holders up by [`block_key`]: BLAKE3 of the ASCII tag
//! [`BLOCK_KEY_TAG`] (`peerblock-block-key-v1` and a NUL), one byte holding the chunk
//! key's length, the chunk key's bytes, and the block index as 8 bytes big-endian. The
//! tag separates this use of BLAKE3 from the others (chunk keys, node ids); the length
//! byte keeps (key, index) pairs from colliding.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use peerblock_core::placement::Key;
use peerblock_core::wire::ChunkKey;

/// The manifest's first line, with its version.
pub const MANIFEST_HEADER: &str = "peerblock-manifest 1";

/// Default block size for `import`: 1 MiB.
pub const DEFAULT_BLOCK_SIZE: u64 = 1024 * 1024;

/// Largest block size: 64 MiB, the client's default body cap and the size core's relay
/// index bound assumes (`MAX_BLOCK_SIZE_FOR_DEFAULT_INDEX`).
pub const MAX_BLOCK_SIZE: u64 = 64 * 1024 * 1024;

/// Most blocks one manifest lists: 65 536 (64 GiB at the default block size, 4 TiB at
/// the largest), so a manifest stays below [`MAX_MANIFEST_BYTES`].
pub const MAX_MANIFEST_BLOCKS: u64 = 65_536;

/// Largest manifest accepted: the four header lines (at most 107 bytes with 20-digit
/// numbers, rounded up to 128) plus 65 bytes per block line; about 4.1 MiB, readable as
/// one block.
pub const MAX_MANIFEST_BYTES: usize = 128 + 65 * MAX_MANIFEST_BLOCKS as usize;

/// Domain-separation tag of [`block_key`].
pub const BLOCK_KEY_TAG: &[u8] = b"peerblock-block-key-v1\0";

/// A file's manifest: its size, block size and the BLAKE3 hash of every block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The file's size in bytes.
    pub size: u64,
    /// Every block's size but the last (1 to [`MAX_BLOCK_SIZE`]).
    pub block_size: u64,
    /// BLAKE3 of block `i` at position `i - 1`.
    pub hashes: Vec<[u8; 32]>,
}

/// A manifest that does not parse: which line and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// Larger than [`MAX_MANIFEST_BYTES`].
    #[error("manifest is {0} bytes, above the {MAX_MANIFEST_BYTES}-byte bound")]
    TooLarge(usize),
    /// Not valid text or not the expected line.
    #[error("manifest line {line}: {problem}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        problem: String,
    },
    /// The header numbers disagree with each other or with the bounds.
    #[error("manifest: {0}")]
    Inconsistent(String),
}

/// Why a block size is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockSizeError {
    /// Zero.
    #[error("block size is zero: must be 1 to {MAX_BLOCK_SIZE} bytes")]
    Zero,
    /// Above [`MAX_BLOCK_SIZE`].
    #[error("block size {0} is above the maximum of {MAX_BLOCK_SIZE} bytes (64 MiB)")]
    TooLarge(u64),
}

/// Checks a block size: 1 to [`MAX_BLOCK_SIZE`].
pub fn check_block_size(block_size: u64) -> Result<(), BlockSizeError> {
    match block_size {
        0 => Err(BlockSizeError::Zero),
        n if n > MAX_BLOCK_SIZE => Err(BlockSizeError::TooLarge(n)),
        _ => Ok(()),
    }
}

/// Number of blocks a file of `size` bytes has at `block_size` (non-zero).
pub fn block_count(size: u64, block_size: u64) -> u64 {
    size.div_ceil(block_size)
}

fn hex32(bytes: &[u8; 32]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(64);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn parse_number(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical {
        text.parse().ok()
    } else {
        None
    }
}

fn parse_hash(text: &str) -> Option<[u8; 32]> {
    let b = text.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (digit(b[2 * i])? << 4) | digit(b[2 * i + 1])?;
    }
    Some(out)
}

impl Manifest {
    /// Number of blocks (not counting the manifest itself).
    pub fn blocks(&self) -> u64 {
        self.hashes.len() as u64
    }

    /// The exact length of block `index` (1-based), or `None` past the last block.
    pub fn block_len(&self, index: u64) -> Option<u64> {
        if index == 0 || index > self.blocks() {
            return None;
        }
        Some(if index == self.blocks() {
            self.size - self.block_size * (index - 1)
        } else {
            self.block_size
        })
    }

    /// The manifest's bytes, in the one canonical form [`Manifest::parse`] accepts.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "{MANIFEST_HEADER}\nsize {}\nblock-size {}\nblocks {}\n",
            self.size,
            self.block_size,
            self.hashes.len()
        );
        for h in &self.hashes {
            out.push_str(&hex32(h));
            out.push('\n');
        }
        out.into_bytes()
    }

    /// The chunk key of this manifest: BLAKE3 of [`Manifest::to_bytes`].
    pub fn chunk_key(&self) -> ChunkKey {
        ChunkKey::from_array(*blake3::hash(&self.to_bytes()).as_bytes())
    }

    /// Parses a manifest strictly (see the module docs); the error names the line and
    /// what was wrong.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge(bytes.len()));
        }
        let text = std::str::from_utf8(bytes).map_err(|e| ManifestError::Line {
            line: bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1,
            problem: "not UTF-8 text".to_owned(),
        })?;
        let Some(body) = text.strip_suffix('\n') else {
            return Err(ManifestError::Line {
                line: text.lines().count().max(1),
                problem: "the last line does not end with a newline".to_owned(),
            });
        };
        let mut lines = body.split('\n').enumerate().map(|(i, l)| (i + 1, l));
        let mut next = |what: &str| {
            lines
                .next()
                .ok_or_else(|| ManifestError::Inconsistent(format!("ends before {what}")))
        };
        let (n, header) = next("the header line")?;
        if header != MANIFEST_HEADER {
            return Err(ManifestError::Line {
                line: n,
                problem: format!("expected {MANIFEST_HEADER:?}, found {:?}", shorten(header)),
            });
        }
        let mut field = |name: &str| -> Result<u64, ManifestError> {
            let (n, line) = next(&format!("the `{name}` line"))?;
            let value = line
                .strip_prefix(name)
                .and_then(|r| r.strip_prefix(' '))
                .ok_or_else(|| ManifestError::Line {
                    line: n,
                    problem: format!("expected `{name} <number>`, found {:?}", shorten(line)),
                })?;
            parse_number(value).ok_or_else(|| ManifestError::Line {
                line: n,
                problem: format!(
                    "`{name}` is not a decimal number without leading zeros: {:?}",
                    shorten(value)
                ),
            })
        };
        let size = field("size")?;
        let block_size = field("block-size")?;
        let blocks = field("blocks")?;
        check_block_size(block_size).map_err(|e| ManifestError::Inconsistent(e.to_string()))?;
        if blocks > MAX_MANIFEST_BLOCKS {
            return Err(ManifestError::Inconsistent(format!(
                "{blocks} blocks, above the bound of {MAX_MANIFEST_BLOCKS}"
            )));
        }
        if blocks != block_count(size, block_size) {
            return Err(ManifestError::Inconsistent(format!(
                "`blocks {blocks}` but size {size} at block size {block_size} makes {} blocks",
                block_count(size, block_size)
            )));
        }
        let mut hashes = Vec::with_capacity(blocks as usize);
        for (n, line) in lines.by_ref() {
            if hashes.len() as u64 == blocks {
                return Err(ManifestError::Line {
                    line: n,
                    problem: format!("more than the {blocks} block hash lines announced"),
                });
            }
            let h = parse_hash(line).ok_or_else(|| ManifestError::Line {
                line: n,
                problem: format!(
                    "expected a block hash of 64 lower-case hex digits, found {:?}",
                    shorten(line)
                ),
            })?;
            hashes.push(h);
        }
        if (hashes.len() as u64) < blocks {
            return Err(ManifestError::Inconsistent(format!(
                "announces {blocks} blocks but lists {} hashes",
                hashes.len()
            )));
        }
        Ok(Manifest {
            size,
            block_size,
            hashes,
        })
    }

    /// Whether `bytes` is block `index` (1-based) of this file: its exact length and its
    /// BLAKE3 hash match.
    pub fn verify_block(&self, index: u64, bytes: &[u8]) -> bool {
        match self.block_len(index) {
            Some(len) if len == bytes.len() as u64 => {
                *blake3::hash(bytes).as_bytes() == self.hashes[(index - 1) as usize]
            }
            _ => false,
        }
    }
}

/// At most 80 characters of a line, for error messages.
fn shorten(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Whether `bytes` is the manifest of `chunk` (its BLAKE3 hash is the key).
pub fn verify_manifest(chunk: &ChunkKey, bytes: &[u8]) -> bool {
    chunk.as_bytes() == blake3::hash(bytes).as_bytes()
}

/// The placement key of block `index` of `chunk` (see the module docs): where reads look
/// its holders up.
pub fn block_key(chunk: &ChunkKey, index: u64) -> Key {
    let key = chunk.as_bytes();
    let mut h = blake3::Hasher::new();
    h.update(BLOCK_KEY_TAG);
    h.update(&[key.len() as u8]);
    h.update(key);
    h.update(&index.to_be_bytes());
    Key(*h.finalize().as_bytes())
}

/// The directory holding `chunk`'s manifest and blocks in `store`.
pub fn chunk_dir(store: &Path, chunk: &ChunkKey) -> PathBuf {
    store.join(chunk.to_string())
}

/// What [`import`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportReport {
    /// The file's chunk key (BLAKE3 of its manifest).
    pub chunk: ChunkKey,
    /// Blocks written (not counting the manifest).
    pub blocks: u64,
    /// File bytes imported.
    pub bytes: u64,
    /// Whether the store already held this chunk (its directory existed): then only
    /// what [`repaired`](Self::repaired) lists was written.
    pub already_present: bool,
    /// The files of a chunk already present that were missing or failed verification and
    /// were replaced by the imported copy (index 0 is the manifest), in index order.
    pub repaired: Vec<Repaired>,
}

/// One file an import over a chunk already present replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repaired {
    /// The block index (0: the manifest).
    pub index: u64,
    /// What was wrong with the copy in the store.
    pub was: Damage,
}

/// What was wrong with a stored block file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// No such file.
    Missing,
    /// Its bytes fail verification (the manifest against the chunk key, a block against
    /// the manifest), or it could not be read.
    Rotten,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Damage::Missing => "missing",
            Damage::Rotten => "rotten",
        })
    }
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The block size is out of range.
    #[error(transparent)]
    BlockSize(#[from] BlockSizeError),
    /// The file has more blocks than a manifest may list.
    #[error("{path}: {size} bytes at block size {block_size} make more than {MAX_MANIFEST_BLOCKS} blocks; use a larger --block-size")]
    TooManyBlocks {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The block size.
        block_size: u64,
    },
    /// Reading the file or writing the store failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The file changed size while it was imported.
    #[error("{path} changed while it was imported (expected {expected} bytes, read {read})")]
    Changed {
        /// The file.
        path: PathBuf,
        /// Size at the start.
        expected: u64,
        /// Bytes read.
        read: u64,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ImportError + 'a {
    move |source| ImportError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// Imports `file` into `store` at `block_size` (see [`import_with_progress`]).
pub fn import(file: &Path, store: &Path, block_size: u64) -> Result<ImportReport, ImportError> {
    import_with_progress(file, store, block_size, |_| {})
}

/// Imports `file` into `store`: splits it into blocks of `block_size`, writes each block
/// and the manifest under `<store>/<chunk-hex>/`, and returns the chunk key.
///
/// Streams: one block is in memory at a time. Atomic: everything is written into a
/// temporary directory `<store>/.import-<pid>-<n>` first, which is renamed to
/// `<store>/<chunk-hex>` once complete, so a reader never sees a partial chunk. Durable:
/// every block file, the manifest and the temporary directory are `fsync`ed before the
/// rename, the store directory after it.
///
/// If the chunk's directory is already in the store, what is there is verified (the
/// manifest against the chunk key, every block against the manifest): each missing or
/// rotten file is replaced by the imported copy (one atomic rename each, then an `fsync`
/// of the chunk directory) and listed in [`ImportReport::repaired`]; the rest is kept.
/// `progress` is called with the file bytes done after every block. Blocking: call it
/// from `spawn_blocking` in async code.
pub fn import_with_progress(
    file: &Path,
    store: &Path,
    block_size: u64,
    mut progress: impl FnMut(u64),
) -> Result<ImportReport, ImportError> {
    check_block_size(block_size)?;
    let mut input = File::open(file).map_err(io_err("cannot open", file))?;
    let size = input.metadata().map_err(io_err("cannot stat", file))?.len();
    if block_count(size, block_size) > MAX_MANIFEST_BLOCKS {
        return Err(ImportError::TooManyBlocks {
            path: file.to_owned(),
            size,
            block_size,
        });
    }
    fs::create_dir_all(store).map_err(io_err("cannot create store directory", store))?;
    let tmp = temp_dir(store)?;
    let result = write_chunk(&mut input, file, &tmp, size, block_size, &mut progress);
    let manifest = match result {
        Ok(m) => m,
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    let chunk = manifest.chunk_key();
    let dest = chunk_dir(store, &chunk);
    let blocks = manifest.blocks();
    let mut already_present = dest.is_dir();
    let mut repaired = Vec::new();
    if !already_present {
        match fs::rename(&tmp, &dest) {
            Ok(()) => sync_dir(store).map_err(io_err("cannot sync", store))?,
            // A concurrent import of the same content may have won the rename.
            Err(_) if dest.is_dir() => already_present = true,
            Err(e) => {
                let _ = fs::remove_dir_all(&tmp);
                return Err(ImportError::Io {
                    what: "cannot move the imported chunk into place at",
                    path: dest,
                    source: e,
                });
            }
        }
    }
    if already_present {
        let result = repair_chunk(&tmp, &dest, &chunk, &manifest);
        let _ = fs::remove_dir_all(&tmp);
        repaired = result?;
    }
    Ok(ImportReport {
        chunk,
        blocks,
        bytes: size,
        already_present,
        repaired,
    })
}

/// Checks stored file `index` of chunk `chunk` (bytes of block 0 against the key, block
/// `i` against `manifest`): `None` if it is sound.
pub fn check_stored(
    dir: &Path,
    chunk: &ChunkKey,
    manifest: &Manifest,
    index: u64,
) -> Option<Damage> {
    match fs::read(dir.join(index.to_string())) {
        Ok(bytes) => {
            let sound = if index == 0 {
                verify_manifest(chunk, &bytes)
            } else {
                manifest.verify_block(index, &bytes)
            };
            (!sound).then_some(Damage::Rotten)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(Damage::Missing),
        Err(_) => Some(Damage::Rotten),
    }
}

/// Replaces every missing or rotten file of the chunk in `dest` by its verified copy in
/// `fresh` (a complete import of the same chunk).
fn repair_chunk(
    fresh: &Path,
    dest: &Path,
    chunk: &ChunkKey,
    manifest: &Manifest,
) -> Result<Vec<Repaired>, ImportError> {
    let mut repaired = Vec::new();
    for index in 0..=manifest.blocks() {
        let Some(was) = check_stored(dest, chunk, manifest, index) else {
            continue;
        };
        let to = dest.join(index.to_string());
        fs::rename(fresh.join(index.to_string()), &to)
            .map_err(io_err("cannot replace a damaged block file at", &to))?;
        repaired.push(Repaired { index, was });
    }
    if !repaired.is_empty() {
        sync_dir(dest).map_err(io_err("cannot sync", dest))?;
    }
    Ok(repaired)
}

/// `fsync`s directory `dir` (its new and renamed entries become durable).
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn temp_dir(store: &Path) -> Result<PathBuf, ImportError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = store.join(format!(".import-{}-{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err("cannot create a temporary directory in", store)(e)),
        }
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ImportError> {
    let mut f = File::create(path).map_err(io_err("cannot create", path))?;
    f.write_all(bytes).map_err(io_err("cannot write", path))?;
    f.sync_all().map_err(io_err("cannot sync", path))
}

fn write_chunk(
    input: &mut File,
    file: &Path,
    tmp: &Path,
    size: u64,
    block_size: u64,
    progress: &mut impl FnMut(u64),
) -> Result<Manifest, ImportError> {
    let blocks = block_count(size, block_size);
    let mut buf = vec![0u8; block_size.min(size.max(1)) as usize];
    let mut hashes = Vec::with_capacity(blocks as usize);
    let mut done = 0u64;
    for index in 1..=blocks {
        let want = block_size.min(size - done) as usize;
        let block = &mut buf[..want];
        input.read_exact(block).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                ImportError::Changed {
                    path: file.to_owned(),
                    expected: size,
                    read: done,
                }
            } else {
                io_err("cannot read", file)(e)
            }
        })?;
        hashes.push(*blake3::hash(block).as_bytes());
        write_file(&tmp.join(index.to_string()), block)?;
        done += want as u64;
        progress(done);
    }
    let mut probe = [0u8; 1];
    if input
        .read(&mut probe)
        .map_err(io_err("cannot read", file))?
        != 0
    {
        return Err(ImportError::Changed {
            path: file.to_owned(),
            expected: size,
            read: size + 1,
        });
    }
    let manifest = Manifest {
        size,
        block_size,
        hashes,
    };
    write_file(&tmp.join("0"), &manifest.to_bytes())?;
    sync_dir(tmp).map_err(io_err("cannot sync", tmp))?;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "peerblock-manifest-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        p
    }

    fn file_of(dir: &Path) -> (PathBuf, Vec<u8>) {
        let data: Vec<u8> = (0..3500u32).map(|i| (i * 13 % 253) as u8).collect();
        let f = dir.join("in.bin");
        fs::write(&f, &data).unwrap();
        (f, data)
    }

    #[test]
    fn reimport_over_a_sound_chunk_repairs_nothing() {
        let dir = scratch("sound");
        let (f, _) = file_of(&dir);
        let store = dir.join("s");
        let first = import(&f, &store, 1000).unwrap();
        assert!(!first.already_present && first.repaired.is_empty());
        let again = import(&f, &store, 1000).unwrap();
        assert!(again.already_present);
        assert!(again.repaired.is_empty());
        let leftovers: Vec<_> = fs::read_dir(&store)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn reimport_replaces_rotten_and_missing_blocks_and_keeps_the_rest() {
        let dir = scratch("rot");
        let (f, data) = file_of(&dir);
        let store = dir.join("s");
        let r = import(&f, &store, 1000).unwrap();
        let chunk = chunk_dir(&store, &r.chunk);
        let mut b2 = fs::read(chunk.join("2")).unwrap();
        b2[5] ^= 1;
        fs::write(chunk.join("2"), b2).unwrap();
        fs::remove_file(chunk.join("4")).unwrap();
        let again = import(&f, &store, 1000).unwrap();
        assert_eq!(
            again.repaired,
            vec![
                Repaired {
                    index: 2,
                    was: Damage::Rotten
                },
                Repaired {
                    index: 4,
                    was: Damage::Missing
                }
            ]
        );
        assert_eq!(fs::read(chunk.join("2")).unwrap(), &data[1000..2000]);
        assert_eq!(fs::read(chunk.join("4")).unwrap(), &data[3000..]);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn reimport_restores_a_lost_or_rotten_manifest() {
        let dir = scratch("lost");
        let (f, _) = file_of(&dir);
        let store = dir.join("s");
        let r = import(&f, &store, 1000).unwrap();
        let chunk = chunk_dir(&store, &r.chunk);
        let manifest = fs::read(chunk.join("0")).unwrap();
        fs::remove_file(chunk.join("0")).unwrap();
        let again = import(&f, &store, 1000).unwrap();
        assert_eq!(again.repaired.len(), 1);
        assert_eq!(again.repaired[0].index, 0);
        assert_eq!(again.repaired[0].was, Damage::Missing);
        assert_eq!(fs::read(chunk.join("0")).unwrap(), manifest);
        let mut rotten = manifest.clone();
        rotten[30] ^= 1;
        fs::write(chunk.join("0"), rotten).unwrap();
        let third = import(&f, &store, 1000).unwrap();
        assert_eq!(third.repaired[0].was, Damage::Rotten);
        assert!(verify_manifest(
            &r.chunk,
            &fs::read(chunk.join("0")).unwrap()
        ));
        let _ = fs::remove_dir_all(&dir);
    }
}
