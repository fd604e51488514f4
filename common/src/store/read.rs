//! Reading blocks: the buffered read ([`FileStore::read_block`]) and the open file for a
//! zero-copy send ([`FileStore::open_block`]), each verified before it is served.

use std::fs::File;
use std::io::{self, Read as _};
use std::sync::atomic::Ordering;

use peerblock_core::bytes::Bytes;
use peerblock_core::server::SourceResult;
use peerblock_core::wire::BlockPath;

use crate::relay_cache::CacheRead;

use super::verify::{Check, Content};
use super::{FileId, FileStore, StoreRead, Verification};

/// An open block file for a zero-copy path: the file and its length, checked against the
/// store's `max_block_size` when opened.
#[derive(Debug)]
pub struct OpenBlock {
    /// The open block file, positioned at its start.
    pub file: File,
    /// The file's length when opened: the bytes to send.
    pub len: u64,
}

/// What [`FileStore::open_block`] found.
#[derive(Debug)]
pub enum Opened {
    /// The block file, open.
    File(OpenBlock),
    /// No such block (`Miss`).
    Missing,
    /// The file exists but cannot be served: unreadable, or above `max_block_size`
    /// (`Failed`; a warning was logged).
    Failed,
    /// The file failed verification and was quarantined (`Corrupt`; a warning was
    /// logged).
    Corrupt,
}

impl FileStore {
    /// Reads block `path` on the calling thread (blocking) and verifies it
    /// ([`read_block`](Self::read_block)): `Found`, `Miss` if its file does not exist,
    /// `Corrupt` if it was rotten (quarantined), `Failed` (with a warning) on any other I/O error or a
    /// file above `max_block_size`.
    pub fn get_blocking(&self, path: &BlockPath) -> SourceResult {
        self.read_block(path).into_source_result()
    }

    /// Reads block `path` on the calling thread (blocking) and verifies it the first time
    /// this file is read (module docs): `Missing` if its file does not exist, `Corrupt`
    /// (quarantined, with a warning) if it fails verification, `Failed` (with a warning)
    /// on any other I/O error or a file above `max_block_size`. The hot-block cache is not
    /// touched: a driver caches what is `Found`.
    pub fn read_block(&self, path: &BlockPath) -> StoreRead {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let file = self.file_of(path);
        let max = self.max_block_size;
        let read = (|| -> io::Result<Result<(Vec<u8>, FileId), u64>> {
            let f = std::fs::File::open(&file)?;
            let meta = f.metadata()?;
            let len = meta.len();
            if len > max {
                return Ok(Err(len));
            }
            // Read at most max + 1 bytes: a file that grew since `metadata` is caught too.
            let mut buf = Vec::with_capacity(len as usize);
            f.take(max + 1).read_to_end(&mut buf)?;
            if buf.len() as u64 > max {
                return Ok(Err(buf.len() as u64));
            }
            Ok(Ok((buf, FileId::of(&meta))))
        })();
        match read {
            Ok(Ok((buf, id))) => match self.check(path, id, Content::Bytes(&buf)) {
                Check::Verified => StoreRead::Found {
                    block: Bytes::from(buf),
                    verification: Verification::Verified,
                },
                Check::Unverifiable => StoreRead::Found {
                    block: Bytes::from(buf),
                    verification: Verification::Unverifiable,
                },
                Check::Corrupt => StoreRead::Corrupt,
            },
            Ok(Err(len)) => {
                tracing::warn!(file = %file.display(), len, max, "block file above the max block size: not served");
                StoreRead::Failed
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => match self.relay.as_deref() {
                Some(cache) => match cache.get(path) {
                    CacheRead::Found(block) => StoreRead::Found {
                        block,
                        verification: Verification::Verified,
                    },
                    CacheRead::Missing => StoreRead::Missing,
                },
                None => StoreRead::Missing,
            },
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "reading block file failed");
                StoreRead::Failed
            }
        }
    }

    /// Opens block `path`'s file for a zero-copy send: `Missing` if it does not exist,
    /// `Failed` (with a warning) on any other error or a file above `max_block_size`,
    /// `Corrupt` if it fails verification (quarantined). The file is read (hashed with
    /// positioned reads) only the first time this file identity is opened; after that it
    /// is opened and `fstat`ed, never read, here. The caller sends exactly `len` bytes; a file truncated under it
    /// makes the send end early, which the caller must treat as a failed response (close
    /// the connection), never pad.
    pub fn open_block(&self, path: &BlockPath) -> Opened {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let file = self.file_of(path);
        let opened = File::open(&file).and_then(|f| {
            let meta = f.metadata()?;
            // A directory (or any non-regular file) opens on Linux and has a length, but
            // sendfile cannot send it: answered 500 here rather than a 200 head whose body
            // never comes.
            if !meta.is_file() {
                return Err(io::Error::other("not a regular file"));
            }
            Ok((meta.len(), FileId::of(&meta), f))
        });
        match opened {
            Ok((len, id, f)) if len <= self.max_block_size => {
                match self.check(path, id, Content::File(&f, len)) {
                    Check::Corrupt => Opened::Corrupt,
                    Check::Verified | Check::Unverifiable => {
                        Opened::File(OpenBlock { file: f, len })
                    }
                }
            }
            Ok((len, _, _)) => {
                tracing::warn!(file = %file.display(), len, max = self.max_block_size, "block file above the max block size: not served");
                Opened::Failed
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match self.relay.as_deref().and_then(|c| c.open_block(path)) {
                    Some((file, len)) => Opened::File(OpenBlock { file, len }),
                    None => Opened::Missing,
                }
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "opening block file failed");
                Opened::Failed
            }
        }
    }
}
