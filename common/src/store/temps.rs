//! Stale temporary files (module docs, "Stale temporary files"): the names a killed writer
//! leaves, whether their process is still alive, and their removal.

use std::io;
use std::path::{Path, PathBuf};

/// Whether process `pid` is alive, by `/proc/<pid>`. Without a `/proc` (another OS, a
/// container without it) every process is taken as alive, so nothing is removed.
pub fn pid_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return true;
    }
    pid == std::process::id() || proc.join(pid.to_string()).exists()
}

/// The pid in a temporary name the store or an import writes: `.import-<pid>-<n>` (a
/// directory in the store root) or `.<index>.tmp.<pid>.<n>` (a file in a chunk directory).
pub fn temp_owner(name: &str) -> Option<u32> {
    if let Some(rest) = name.strip_prefix(".import-") {
        let (pid, n) = rest.split_once('-')?;
        n.parse::<u64>().ok()?;
        return pid.parse().ok();
    }
    let rest = name.strip_prefix('.')?;
    let mut parts = rest.split('.');
    let (index, tmp, pid, n) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || tmp != "tmp" {
        return None;
    }
    index.parse::<u64>().ok()?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// The temporary files and directories under `root` left by processes that are gone
/// (`.import-<pid>-<n>` directories in the root, `.<index>.tmp.<pid>.<n>` files in chunk
/// directories, their pid not a live process): what [`remove_stale_temps`] removes. A
/// missing root has none.
pub fn stale_temps(root: &Path) -> io::Result<Vec<PathBuf>> {
    let mut stale = Vec::new();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(stale),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let kind = entry.file_type()?;
        if name.starts_with(".import-") {
            if temp_owner(name).is_some_and(|pid| !pid_alive(pid)) {
                stale.push(entry.path());
            }
            continue;
        }
        if !kind.is_dir() || name.starts_with('.') {
            continue;
        }
        for inner in std::fs::read_dir(entry.path())? {
            let inner = inner?;
            let n = inner.file_name();
            let Some(n) = n.to_str() else { continue };
            if n.contains(".tmp.") && temp_owner(n).is_some_and(|pid| !pid_alive(pid)) {
                stale.push(inner.path());
            }
        }
    }
    stale.sort();
    Ok(stale)
}

/// Removes what [`stale_temps`] finds (a killed import's `.import-*` directory can hold
/// gigabytes), logging each removal; returns the paths removed. Errors on single entries
/// are logged and skipped.
pub fn remove_stale_temps(root: &Path) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for path in stale_temps(root)? {
        let gone = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match gone {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed a stale temporary file of a process that is gone");
                removed.push(path);
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "removing a stale temporary file failed")
            }
        }
    }
    Ok(removed)
}
