//! A checkpoint file's bytes, memory-mapped read-only (or owned, for bytes that never were a
//! file: tests, fuzzing, network buffers).
//!
//! A mapping is only as immutable as the file under it. nxrs never writes into an existing
//! checkpoint (its writer renames a new file over the old name, and the mapping keeps the old
//! inode), so nxrs's own saves cannot change a mapped checkpoint. Another program that
//! truncates or rewrites the file in place can: the reader then sees the new bytes, or gets
//! `SIGBUS` for pages past a truncation. That is the contract of every mmap-based reader
//! (safetensors, numpy.memmap): don't rewrite checkpoints in place.

use crate::error::{Error, Result};
use std::fs::File;
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
    /// Maps the file at `path` read-only. An empty file is not mapped (zero-length mappings are
    /// an error on some systems).
    pub fn open(path: &Path) -> Result<FileBytes> {
        let io = |op, source| Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(|e| io("opening", e))?;
        let len = file
            .metadata()
            .map_err(|e| io("reading metadata of", e))?
            .len();
        if len == 0 {
            return Ok(FileBytes(Backing::Owned(Vec::new())));
        }
        // SAFETY: the mapping is read-only and private to this object; see the module
        // documentation for what happens if another program rewrites the file in place.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io("mapping", e))?;
        Ok(FileBytes(Backing::Mapped(map)))
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
