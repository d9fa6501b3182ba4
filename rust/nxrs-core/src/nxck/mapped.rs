//! A checkpoint file's bytes: read into memory, or memory-mapped read-only (zero-copy views),
//! or owned bytes that never were a file (tests, fuzzing, network buffers). Every file is
//! opened by [`open_for_reading`], which accepts regular files only.
//!
//! A mapping is only as immutable as the file under it. nxrs never writes into an existing
//! checkpoint (its writer renames a new file over the old name, and the mapping keeps the old
//! inode), so nxrs's own saves cannot change a mapped checkpoint. Another program that
//! truncates or rewrites the file in place (`shutil.copyfile`, `cp`, `open(path, "wb")`) can:
//! the reader then sees the new bytes, or the process is killed by `SIGBUS` when it touches a
//! page past a truncation. That is the contract of every mmap-based reader (numpy.memmap,
//! safetensors). To avoid it, replace checkpoints instead of rewriting them: write a new file
//! and rename it over the old one, as nxrs's saves do. Loading a trainer copies every byte
//! anyway, so it reads the file (straight into the trainer's tensors:
//! [`crate::nxck::v2::direct`]) and is immune; only zero-copy views ([`FileBytes::map`]) take
//! the risk.

use crate::error::{Error, FileKind, Result};
use std::fs::{File, FileType, OpenOptions};
use std::io::Read;
use std::ops::Deref;
use std::path::Path;

/// The bytes of a whole file.
#[derive(Debug)]
pub struct FileBytes(Backing);

#[derive(Debug)]
enum Backing {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl FileBytes {
    /// Maps the regular file at `path` read-only (see the module documentation for what a
    /// program that rewrites the file in place does to the mapping). An empty file is not
    /// mapped (zero-length mappings are an error on some systems).
    pub fn map(path: &Path) -> Result<FileBytes> {
        let (file, len) = open_for_reading(path)?;
        if len == 0 {
            return Ok(FileBytes(Backing::Owned(Vec::new())));
        }
        // SAFETY: the mapping is read-only and private to this object; see the module
        // documentation for what happens if another program rewrites the file in place.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io("mapping", path, e))?;
        Ok(FileBytes(Backing::Mapped(map)))
    }

    /// Reads the whole regular file at `path` into memory. The buffer is sized from the file's
    /// metadata, never from a number in the file; a file whose length changes while it is read
    /// (rewritten in place by another program) is an `Error::Length`.
    pub fn read(path: &Path) -> Result<FileBytes> {
        let (file, len) = open_for_reading(path)?;
        let bytes = read_up_to(file, path, len.saturating_add(1))?;
        if bytes.len() as u64 != len {
            return Err(changed_length(len, bytes.len() as u64));
        }
        Ok(FileBytes(Backing::Owned(bytes)))
    }

    /// Bytes that are already in memory.
    pub fn from_vec(bytes: Vec<u8>) -> FileBytes {
        FileBytes(Backing::Owned(bytes))
    }

    /// Whether the bytes are a file mapping (zero-copy views point into the page cache).
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Backing::Mapped(_))
    }
}

impl Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// The error for a file that was `expected` bytes long when opened and turned out `actual`
/// bytes long (or at least or at most that) while it was read: rewritten in place by another
/// program.
pub(crate) fn changed_length(expected: u64, actual: u64) -> Error {
    Error::Length {
        expected,
        actual,
        what: "the file changed length while it was read (rewritten in place?)".into(),
    }
}

/// The first (at most) `n` bytes of the regular file at `path`.
pub fn read_prefix(path: &Path, n: usize) -> Result<Vec<u8>> {
    let (file, _) = open_for_reading(path)?;
    read_up_to(file, path, n as u64)
}

fn read_up_to(file: File, path: &Path, limit: u64) -> Result<Vec<u8>> {
    // The capacity is a hint bounded by what the file's metadata said (or the caller's `n`).
    let mut bytes = Vec::with_capacity(usize::try_from(limit).unwrap_or(usize::MAX).min(1 << 30));
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| io("reading", path, e))?;
    Ok(bytes)
}

/// Opens the regular file at `path` for reading; returns it and its length. The one place
/// checkpoint files are opened for reading.
///
/// Anything else is refused (`Error::NotRegularFile`) before it is opened: opening a FIFO
/// blocks until a writer appears, and reading a device may never end. The type is checked on
/// the path first (`stat`), so nothing but a regular file is ever opened, and then again on
/// the opened file (`fstat`), in case the path was replaced in between; on unix the open is
/// non-blocking (`O_NONBLOCK`), so even such a swap to a FIFO cannot hang it. (For a regular
/// file `O_NONBLOCK` changes nothing.)
pub fn open_for_reading(path: &Path) -> Result<(File, u64)> {
    let check = |file_type: FileType| match kind_of(file_type) {
        None => Ok(()),
        Some(kind) => Err(Error::NotRegularFile {
            op: "opening",
            path: path.to_path_buf(),
            kind,
        }),
    };
    let before = std::fs::metadata(path).map_err(|e| io("opening", path, e))?;
    check(before.file_type())?;
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| io("opening", path, e))?;
    let opened = file
        .metadata()
        .map_err(|e| io("reading metadata of", path, e))?;
    check(opened.file_type())?;
    Ok((file, opened.len()))
}

/// `None` for a regular file, else what it is.
fn kind_of(file_type: FileType) -> Option<FileKind> {
    if file_type.is_file() {
        return None;
    }
    if file_type.is_dir() {
        return Some(FileKind::Directory);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return Some(FileKind::Fifo);
        }
        if file_type.is_socket() {
            return Some(FileKind::Socket);
        }
        if file_type.is_char_device() {
            return Some(FileKind::CharDevice);
        }
        if file_type.is_block_device() {
            return Some(FileKind::BlockDevice);
        }
    }
    Some(FileKind::Other)
}

fn io(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        for (path, expected) in [
            (dir.path(), FileKind::Directory),
            (fifo.as_path(), FileKind::Fifo),
            (Path::new("/dev/null"), FileKind::CharDevice),
        ] {
            for result in [
                FileBytes::read(path).map(drop),
                FileBytes::map(path).map(drop),
                read_prefix(path, 12).map(drop),
            ] {
                match result {
                    Err(Error::NotRegularFile { kind, .. }) => assert_eq!(kind, expected),
                    other => panic!("{}: {other:?}", path.display()),
                }
            }
        }
        let file = dir.path().join("f");
        std::fs::write(&file, b"0123456789abcdef").unwrap();
        assert_eq!(&*FileBytes::read(&file).unwrap(), b"0123456789abcdef");
        assert_eq!(read_prefix(&file, 12).unwrap(), b"0123456789ab");
    }
}
