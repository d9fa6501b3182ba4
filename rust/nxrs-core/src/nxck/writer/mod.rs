//! Crash-safe replacement of a file: after a crash or `SIGKILL` at any instant, the target is
//! either its complete old contents or the complete new ones.
//!
//! A save (of either version) never writes into the target. It
//! 1. sweeps leftover temporary files of dead writers from the target's directory,
//! 2. creates a new temporary file *in the target's directory* (same filesystem, so step 4 is a
//!    rename, not a copy) with a name that cannot be mistaken for a checkpoint,
//! 3. writes the whole file into it and `fsync`s it (data durable before it gets the name); the
//!    order of the writes inside it does not matter, since nothing sees it before step 4 (v2's
//!    head, which holds the tensors' checksums, is written last),
//! 4. renames it over the target (atomic: readers see the old file or the new one), and
//! 5. `fsync`s the directory (the rename itself durable) before returning.
//!
//! A process that has the old target open or memory-mapped keeps its own inode: the rename only
//! moves the name, so the old bytes stay intact for it until it closes them.
//!
//! Only when `write_atomically` has returned is the new file durable; a checkpoint manager must
//! delete older checkpoints (or move any "latest" pointer) only after that.

//! The three concerns live apart: this module replaces the file, `writeback` streams the bytes
//! and starts their disk writes early, `temp` names, creates and sweeps the temporary files.

mod temp;
mod writeback;

pub use temp::{is_temp_file_name, sweep_temp_files, STALE_AFTER};

use super::payload::Payload;
use crate::error::{Error, Result};
use std::fs::{self, File};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;
use temp::TempFile;
use writeback::Writeback;

/// How the temporary file gets its bytes. Both give identical files; the switch exists so the
/// two can be benchmarked against each other. Both write everything after the head first, in
/// order, starting the disk writes every 8 MiB on Linux, while the tensors' CRC-32Cs are
/// computed on a second thread; then the head (prelude and header), which carries them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteStrategy {
    /// `write` calls of up to 8 MiB straight from the state's memory (on little-endian hosts;
    /// small pieces go through a 1 MiB `BufWriter`). The default: faster in our measurement
    /// (see FORMAT.md).
    #[default]
    Buffered,
    /// `set_len` the temporary file, map it writable, copy the pieces in, `msync`.
    Mapped,
}

/// Replaces `target` with `payload`'s bytes, crash-safely (see the module documentation).
pub(crate) fn write_atomically(
    target: &Path,
    payload: &Payload<'_>,
    strategy: WriteStrategy,
) -> Result<()> {
    let dir = parent_dir(target);
    let Some(file_name) = target.file_name() else {
        // "dir/.." or "/": rename could not put a file there either.
        return Err(io_error(
            "saving to",
            target,
            std::io::Error::from_raw_os_error(libc::EISDIR),
        ));
    };
    // Any name the OS accepts (on unix, any bytes). The temporary file's name only repeats
    // the target's for people who look at the directory: bytes that are not UTF-8 appear
    // there as U+FFFD, so temporary names are always UTF-8.
    let target_name = file_name.to_string_lossy();
    // Leftovers of killed saves; a failure to sweep must not fail the save.
    let _ = sweep_temp_files(dir);

    let (mut temp, file) = TempFile::create(dir, &target_name, strategy)?;
    match strategy {
        WriteStrategy::Buffered => write_buffered(&file, payload),
        WriteStrategy::Mapped => write_mapped(&file, payload),
    }
    .map_err(|e| io_error("writing", &temp.path, e))?;
    file.sync_all()
        .map_err(|e| io_error("syncing", &temp.path, e))?;
    drop(file);

    fs::rename(&temp.path, target)
        .map_err(|e| io_error("renaming a temporary file to", target, e))?;
    temp.renamed = true;
    sync_dir(dir)
}

/// Runs `write_body` (which writes everything after the head) while the tensors' CRC-32Cs are
/// computed on a second thread, and returns the head's bytes, which carry them. Both threads
/// only read the state's memory; the CRCs take about a third of the time of copying the same
/// bytes into the page cache, so they are hidden behind it.
///
/// The head is written after the body: the temporary file is invisible until it is renamed,
/// and it is only renamed after the `fsync`, so the order of writes inside it does not matter.
fn with_checksums(
    payload: &Payload<'_>,
    write_body: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<Vec<u8>> {
    if !payload.needs_checksums() {
        write_body()?;
        return Ok(payload.head(&[]));
    }
    let cells = payload.cells();
    let (body, crcs) = std::thread::scope(|s| {
        let crcs = s.spawn(|| Payload::checksums(&cells));
        let body = write_body();
        let crcs = crcs
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (body, crcs)
    });
    body?;
    Ok(payload.head(&crcs))
}

/// Seeks past the head, streams the body through a 1 MiB buffer (tensors bypass it on
/// little-endian hosts), then writes the head at offset 0.
fn write_buffered(file: &File, payload: &Payload<'_>) -> std::io::Result<()> {
    let head = with_checksums(payload, || {
        let start = payload.head_len() as u64;
        let mut sink = file;
        sink.seek(SeekFrom::Start(start))?;
        let mut out = BufWriter::with_capacity(1 << 20, Writeback::new(sink, file, start));
        payload.write_body_to(&mut out)?;
        out.flush()
    })?;
    let mut file = file;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&head)
}

/// Sizes the file, maps it writable, copies the body in, then the head, and `msync`s.
fn write_mapped(file: &File, payload: &Payload<'_>) -> std::io::Result<()> {
    let len = payload.len();
    file.set_len(len)?;
    if len == 0 {
        return Ok(());
    }
    // SAFETY: the file was just created by us with `create_new` under a unique name that no
    // other nxrs process opens; nothing else resizes it while the mapping lives.
    let mut map = unsafe { memmap2::MmapMut::map_mut(file)? };
    let start = payload.head_len();
    let (head_part, body) = map.split_at_mut(start);
    let head = with_checksums(payload, || {
        let mut out = Writeback::new(body, file, start as u64);
        payload.write_body_to(&mut out)
    })?;
    head_part.copy_from_slice(&head);
    map.flush()
}

/// `fsync` of a directory, which makes a rename in it durable (POSIX; a no-op elsewhere, where
/// directories cannot be opened as files).
fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error("syncing directory", dir, e))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// The directory a path's file lives in (`.` for a bare file name).
pub(super) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The error of an operating-system call on `path`.
pub(super) fn io_error(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}
