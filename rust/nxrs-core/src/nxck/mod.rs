//! NXCK checkpoint files.
//!
//! Format v1 is the seed's layout: magic, buffer count, scalar count, the scalars, then the
//! cells of every buffer; no sizes, version or checksum, so reading it needs the model's layout.

pub mod v1;

use crate::error::{Error, Result};
use std::path::Path;

/// The four bytes every NXCK file starts with (`0x4b43584e` little-endian).
pub const MAGIC: [u8; 4] = *b"NXCK";

/// Reads a whole file, naming the path in the error.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        op: "reading",
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `bytes` to `path` with one `write` call (the seed issued one per 4 bytes).
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|source| Error::Io {
        op: "writing",
        path: path.to_path_buf(),
        source,
    })
}
