//! Reading the files the gateway is configured with: registry files, the
//! certificate files a registry names, the listener's certificate, key and
//! client CA.
//!
//! Every read is bounded in size and only of a regular file: a FIFO, a
//! device or a directory is refused from its metadata, before it is opened
//! (opening a FIFO with no writer blocks). The readers that run on the
//! runtime ([`read`]) do so on the blocking pool, bounded in time: a file
//! on a hung mount fails its read instead of freezing every call, and is not
//! read again while the earlier read still hangs. [`Stamp`] says whether a
//! file may have changed, so an unchanged file is not read again at every
//! poll.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// How large a file may be, and how long reading it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    pub max_bytes: u64,
    pub timeout: Duration,
}

/// `--max-file-bytes`: far above any registry (a ConfigMap holds at most
/// 1 MiB) or CA bundle.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// `--file-read-timeout`.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for FileLimits {
    fn default() -> Self {
        FileLimits {
            max_bytes: DEFAULT_MAX_BYTES,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// Why a file was not read; each names the file.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum FileError {
    #[error("{}: not a regular file (a {kind}); refusing to read it", .path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{}: {size} bytes, over the limit of {limit} bytes (--max-file-bytes)", .path.display())]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error("{}: not read within {} ms (--file-read-timeout); a hung mount?", .path.display(), .timeout.as_millis())]
    TimedOut { path: PathBuf, timeout: Duration },
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
}

impl FileError {
    fn io(path: &Path, source: std::io::Error) -> FileError {
        FileError::Io {
            path: path.to_path_buf(),
            source: Arc::new(source),
        }
    }

    /// Whether the file does not exist (a registry file not written yet).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, FileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// What a file's metadata said when it was read: a file whose stamp is the
/// same has not been replaced or written since (inode, size, times).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    device: u64,
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
    changed: (i64, i64),
}

impl Stamp {
    fn of(metadata: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            device: metadata.dev(),
            inode: metadata.ino(),
            len: metadata.len(),
            modified: metadata.modified().ok(),
            changed: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }
}

/// The kind of a file that is not a regular one, for the error.
fn kind(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "directory"
    } else if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "device"
    } else {
        "special file"
    }
}

/// Reads `path` if its stamp is not `unless` (then `Ok(None)`), on the
/// calling thread: blocking, use it off the runtime (the registry's plans
/// run on the blocking pool).
pub(crate) fn read_sync(
    path: &Path,
    max_bytes: u64,
    unless: Option<Stamp>,
) -> Result<Option<(Vec<u8>, Stamp)>, FileError> {
    // Through symlinks, as opening does (the kubelet's `..data` swap).
    let metadata = std::fs::metadata(path).map_err(|e| FileError::io(path, e))?;
    if !metadata.is_file() {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind(metadata.file_type()),
        });
    }
    let stamp = Stamp::of(&metadata);
    if unless == Some(stamp) {
        return Ok(None);
    }
    let too_large = |size| FileError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit: max_bytes,
    };
    if metadata.len() > max_bytes {
        return Err(too_large(metadata.len()));
    }
    let file = std::fs::File::open(path).map_err(|e| FileError::io(path, e))?;
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    // One byte over the limit tells a file that grew since its metadata.
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| FileError::io(path, e))?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(Some((bytes, stamp)))
}

/// The stamp of `path` (its metadata, through symlinks), looked up as
/// [`read`] reads: off the worker thread, within `limits.timeout`.
pub(crate) async fn stamp(path: &Path, limits: FileLimits) -> Result<Stamp, FileError> {
    off_thread(path, limits, |p| {
        std::fs::metadata(p)
            .map(|m| Stamp::of(&m))
            .map_err(|e| FileError::io(p, e))
    })
    .await
}

/// [`read_sync`] on the blocking pool, within `limits.timeout`.
pub(crate) async fn read(
    path: &Path,
    limits: FileLimits,
    unless: Option<Stamp>,
) -> Result<Option<(Vec<u8>, Stamp)>, FileError> {
    off_thread(path, limits, move |p| {
        read_sync(p, limits.max_bytes, unless)
    })
    .await
}

/// The paths whose look-up has not returned yet.
fn reading() -> &'static Mutex<HashSet<PathBuf>> {
    static READING: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    READING.get_or_init(Default::default)
}

/// Runs `look` on `path` on the blocking pool, within `limits.timeout`.
/// While an earlier look-up of the same path has not returned (a hung
/// mount), fails at once rather than tying up another thread.
async fn off_thread<T: Send + 'static>(
    path: &Path,
    limits: FileLimits,
    look: impl FnOnce(&Path) -> Result<T, FileError> + Send + 'static,
) -> Result<T, FileError> {
    let timed_out = || FileError::TimedOut {
        path: path.to_path_buf(),
        timeout: limits.timeout,
    };
    if !reading()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path.to_path_buf())
    {
        return Err(timed_out());
    }
    let owned = path.to_path_buf();
    let blocking = tokio::task::spawn_blocking(move || {
        let found = look(&owned);
        reading()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&owned);
        found
    });
    match tokio::time::timeout(limits.timeout, blocking).await {
        Ok(Ok(found)) => found,
        // The runtime is shutting down.
        Ok(Err(_)) => Err(FileError::io(
            path,
            std::io::Error::other("the look-up was cancelled"),
        )),
        Err(_) => Err(timed_out()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_regular_files_within_the_limit_are_read_and_only_when_changed() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, "plugins: []\n").expect("write");
        let limits = FileLimits {
            max_bytes: 16,
            timeout: Duration::from_secs(2),
        };
        let (bytes, stamp) = read(&file, limits, None).await.expect("read").expect("new");
        assert_eq!(bytes, b"plugins: []\n");
        assert!(
            read(&file, limits, Some(stamp))
                .await
                .expect("read")
                .is_none()
        );
        std::fs::write(&file, "plugins: [] \n").expect("write");
        assert!(
            read(&file, limits, Some(stamp))
                .await
                .expect("read")
                .is_some()
        );

        std::fs::write(&file, "x".repeat(17)).expect("write");
        let e = read(&file, limits, None).await.expect_err("too large");
        assert!(
            e.to_string()
                .contains("17 bytes, over the limit of 16 bytes"),
            "{e}"
        );

        let e = read(dir.path(), limits, None)
            .await
            .expect_err("a directory");
        assert!(
            e.to_string().contains("not a regular file (a directory)"),
            "{e}"
        );

        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let started = tokio::time::Instant::now();
        let e = read(&fifo, limits, None).await.expect_err("a FIFO");
        assert!(e.to_string().contains("not a regular file (a FIFO)"), "{e}");
        assert!(e.to_string().contains("fifo"), "names the file: {e}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused without opening it"
        );
    }
}
