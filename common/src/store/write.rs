//! Writing blocks: the atomic, durable [`FileStore::put_blocking`] and the directory
//! `fsync`s it and other writers rely on.

use std::fs::File;
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use peerblock_core::wire::BlockPath;

use super::{FileStore, StoreError};

/// Makes temporary file names unique within the process (with the pid across processes).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl FileStore {
    /// Stores block `path` atomically on the calling thread (blocking): a temporary file
    /// in the chunk directory, `fsync`, rename, `fsync` of the chunk directory (and of the
    /// root when the chunk directory is new), so a block acknowledged survives a crash. A block above `max_block_size` is refused
    /// ([`StoreError::TooLarge`]). The cache is not touched (a driver that wants the
    /// stored block hot calls [`cache_insert`](Self::cache_insert)); an async runtime runs
    /// this off its reactor (the tokio driver on `spawn_blocking`).
    pub fn put_blocking(&self, path: &BlockPath, bytes: &[u8]) -> Result<(), StoreError> {
        let file = self.file_of(path);
        let len = bytes.len() as u64;
        if len > self.max_block_size {
            return Err(StoreError::TooLarge {
                path: file,
                len,
                max: self.max_block_size,
            });
        }
        let dir = self.chunk_dir(path);
        let new_dir = !dir.is_dir();
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::Write {
            path: dir.clone(),
            source,
        })?;
        if new_dir {
            // The new chunk directory's entry in the root must survive a crash too.
            sync_dir(&self.root).map_err(|source| StoreError::Write {
                path: self.root.to_path_buf(),
                source,
            })?;
        }
        let temp = dir.join(format!(
            ".{}.tmp.{}.{}",
            path.index,
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut f = std::fs::File::create(&temp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&temp, &file)?;
            // The rename is durable only once the directory is.
            sync_dir(&dir)
        })();
        written.map_err(|source| {
            let _ = std::fs::remove_file(&temp);
            StoreError::Write {
                path: file.clone(),
                source,
            }
        })
    }
}

/// `fsync`s directory `dir`, making the entries created or renamed in it durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `fsync`s the directory holding `path` (`.` for a bare file name), so that a file
/// created, linked or renamed there survives a crash.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    sync_dir(dir)
}
