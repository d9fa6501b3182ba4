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

use super::payload::Payload;
use crate::error::{Error, Result};
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

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

/// A temporary file not modified for this long is taken as abandoned even when its writer's
/// liveness cannot be checked (another host, pid reuse).
pub const STALE_AFTER: Duration = Duration::from_secs(60 * 60);

/// The marker in every temporary file's name: `.<target>.nxck-tmp.<host>.<pid>.<random>`.
const TEMP_MARKER: &str = ".nxck-tmp.";

/// At most this many bytes of the target's name go into a temporary name (NAME_MAX is 255).
const MAX_NAME_IN_TEMP: usize = 128;

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

/// Bytes between two requests to start writing back what was written (Linux).
const WRITEBACK_CHUNK: u64 = 8 << 20;

/// Sequential writes into `sink` (the file, or a writable mapping of it), which stands for the
/// file from byte `pos` on, in calls of at most [`WRITEBACK_CHUNK`] bytes. On Linux, each
/// completed chunk is handed to the kernel's writeback at once
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which starts the disk writes without waiting for
/// them), so that the disk works while the next chunks are copied and the final `fsync` finds
/// most of the data written already. Elsewhere the chunks are only writes.
struct Writeback<'f, W> {
    sink: W,
    file: &'f File,
    /// The file position of the next byte.
    pos: u64,
    /// Start of the bytes not yet handed to writeback.
    unsent: u64,
}

impl<'f, W: Write> Writeback<'f, W> {
    fn new(sink: W, file: &'f File, pos: u64) -> Writeback<'f, W> {
        Writeback {
            sink,
            file,
            pos,
            unsent: pos,
        }
    }
}

impl<W: Write> Write for Writeback<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = WRITEBACK_CHUNK - (self.pos - self.unsent);
        let n = buf.len().min(room as usize);
        let written = self.sink.write(&buf[..n])?;
        self.pos += written as u64;
        if self.pos - self.unsent >= WRITEBACK_CHUNK {
            start_writeback(self.file, self.unsent, self.pos - self.unsent);
            self.unsent = self.pos;
        }
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sink.flush()
    }
}

/// Asks the kernel to start writing `len` bytes of `file` at `offset` to the disk, without
/// waiting (Linux; nothing elsewhere). Only a hint: the `fsync` after the last write is what
/// makes the file durable, so a failure here is ignored (`fsync` reports any I/O error).
fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (offset.try_into(), len.try_into()) else {
            return;
        };
        // SAFETY: a plain system call on an open file descriptor; it reads no user memory.
        let _ = unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len);
    }
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
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A temporary file that removes itself unless it was renamed into place.
struct TempFile {
    path: PathBuf,
    renamed: bool,
}

impl TempFile {
    fn create(dir: &Path, target_name: &str, strategy: WriteStrategy) -> Result<(TempFile, File)> {
        let mut options = OpenOptions::new();
        // A writable mapping needs a file opened for reading too.
        options
            .write(true)
            .read(strategy == WriteStrategy::Mapped)
            .create_new(true);
        let mut last_error = None;
        for _ in 0..8 {
            let path = dir.join(TempName::new(target_name).to_string());
            match options.open(&path) {
                Ok(file) => {
                    let temp = TempFile {
                        path,
                        renamed: false,
                    };
                    return Ok((temp, file));
                }
                // Another writer drew the same random name: draw again.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_error = Some(e),
                Err(e) => return Err(io_error("creating temporary file", &path, e)),
            }
        }
        let e = last_error.expect("the loop ran");
        Err(io_error("creating temporary file in", dir, e))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The parts of a temporary file's name, `.<target>.nxck-tmp.<host>.<pid>.<random>`:
/// `<host>` 8 lowercase hex digits (CRC-32C of the host name), `<pid>` decimal, `<random>` 16
/// lowercase hex digits. The leading dot hides it; the marker and suffix never end in a
/// checkpoint's extension.
#[derive(Debug, PartialEq, Eq)]
struct TempName {
    target: String,
    host: u32,
    pid: u32,
    random: u64,
}

impl TempName {
    fn new(target_name: &str) -> TempName {
        let mut cut = target_name.len().min(MAX_NAME_IN_TEMP);
        while !target_name.is_char_boundary(cut) {
            cut -= 1;
        }
        TempName {
            target: target_name[..cut].to_string(),
            host: host_tag(),
            pid: std::process::id(),
            random: random_u64(),
        }
    }

    fn parse(name: &str) -> Option<TempName> {
        let rest = name.strip_prefix('.')?;
        let (target, suffix) = rest.rsplit_once(TEMP_MARKER)?;
        let mut parts = suffix.split('.');
        let (host, pid, random) = (parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        let decimal = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
        if parts.next().is_some() || !hex(host, 8) || !hex(random, 16) || !decimal {
            return None;
        }
        Some(TempName {
            target: target.to_string(),
            host: u32::from_str_radix(host, 16).ok()?,
            pid: pid.parse().ok()?,
            random: u64::from_str_radix(random, 16).ok()?,
        })
    }
}

impl std::fmt::Display for TempName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let TempName {
            target,
            host,
            pid,
            random,
        } = self;
        write!(f, ".{target}{TEMP_MARKER}{host:08x}.{pid}.{random:016x}")
    }
}

/// Whether `name` is the name of one of nxrs's temporary files (never a checkpoint).
pub fn is_temp_file_name(name: &str) -> bool {
    TempName::parse(name).is_some()
}

/// Removes the temporary files in `dir` left by saves that cannot finish any more, and returns
/// their paths. A temporary file is removed when
/// - it was written on this host (same host tag) by a process that no longer exists
///   (`kill(pid, 0)` fails with `ESRCH`; unix only), or
/// - it has not been modified for [`STALE_AFTER`] (the rule for files of other hosts on a
///   shared filesystem, for reused pids, and on non-unix systems).
///
/// Files of live writers, including other threads of this process, are left alone, and so is
/// every file whose name is not a temporary name.
pub fn sweep_temp_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = fs::read_dir(dir).map_err(|e| io_error("reading directory", dir, e))?;
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let Some(temp) = entry.file_name().to_str().and_then(TempName::parse) else {
            continue;
        };
        let writer_gone = temp.host == host_tag() && !process_alive(temp.pid);
        let stale = || {
            let modified = entry.metadata().and_then(|m| m.modified()).ok();
            modified.is_some_and(|t| t.elapsed().is_ok_and(|age| age >= STALE_AFTER))
        };
        if (writer_gone || stale()) && is_file(&entry) {
            let path = entry.path();
            match fs::remove_file(&path) {
                Ok(()) => removed.push(path),
                // Another sweeper was faster.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("removing stale temporary file", &path, e)),
            }
        }
    }
    Ok(removed)
}

fn is_file(entry: &fs::DirEntry) -> bool {
    entry.file_type().is_ok_and(|t| t.is_file())
}

/// Whether a process with this id exists (on unix; elsewhere liveness is unknown: `true`).
fn process_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        if pid <= 0 {
            // kill(0, ..) and kill(-n, ..) address process groups, not a process.
            return false;
        }
        // SAFETY: signal 0 performs only the existence and permission checks; nothing is sent.
        let rc = unsafe { libc::kill(pid, 0) };
        rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// CRC-32C of this machine's host name: tells temporary files of this host from those of
/// other hosts sharing the directory, whose pids mean nothing here.
fn host_tag() -> u32 {
    crc32c::crc32c(host_name().as_bytes())
}

fn host_name() -> String {
    #[cfg(unix)]
    {
        let mut buf = [0u8; 256];
        // SAFETY: the pointer and length describe `buf`, which outlives the call.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        if rc == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            return String::from_utf8_lossy(&buf[..end]).into_owned();
        }
        String::new()
    }
    #[cfg(not(unix))]
    {
        std::env::var("COMPUTERNAME").unwrap_or_default()
    }
}

/// 64 unpredictable-enough bits for a temporary name: std's per-instance random hash keys,
/// mixed with the clock and a counter (no RNG dependency needed; uniqueness is enforced by
/// `create_new` anyway).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

fn io_error(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_round_trip_and_are_recognised() {
        let name = TempName::new("ckpt.v2.nxck");
        let text = name.to_string();
        assert!(text.starts_with(".ckpt.v2.nxck.nxck-tmp."));
        assert_eq!(TempName::parse(&text), Some(name));
        assert!(is_temp_file_name(&text));
        for other in [
            "ckpt.nxck",
            ".ckpt.nxck",
            ".a.nxck-tmp.0000000g.1.0123456789abcdef",
            ".a.nxck-tmp.00000000..0123456789abcdef",
            ".a.nxck-tmp.00000000.1.0123456789abcde",
            ".a.nxck-tmp.00000000.1.0123456789abcdef.x",
            "a.nxck-tmp.00000000.1.0123456789abcdef",
        ] {
            assert!(!is_temp_file_name(other), "{other}");
        }
    }

    #[test]
    fn long_target_names_are_cut_on_a_char_boundary() {
        let long = "é".repeat(200);
        let name = TempName::new(&long).to_string();
        assert!(name.len() < 255, "{}", name.len());
        assert!(is_temp_file_name(&name));
    }

    #[test]
    fn this_process_is_alive() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(0));
    }
}
