//! NXCK checkpoint files (specification: `docs/FORMAT.md`).
//!
//! The format layer knows names, shapes, scalars and a configuration record, not the trainer
//! (as safetensors' core knows no model): a [`Record`] is what a file holds, and
//! [`crate::checkpoint`] turns a trainer into one and back.
//!
//! - [`v1`]: the seed's layout: magic, buffer count, scalar count, the scalars, then the cells of
//!   every buffer; no names, sizes, version or checksum, so reading it needs the layout.
//! - [`v2`]: self-describing (a configuration record and a tensor table in a JSON header),
//!   checksummed, with 64-byte-aligned tensors that are read in place from a memory mapping.
//! - [`writer`]: how both are saved: a temporary file in the same directory, `fsync`, rename,
//!   directory `fsync`; a crash leaves the old file or the new one, never a torn one.
//! - [`mapped`]: a file's bytes, read or mapped, regular files only.

mod cells;
pub mod mapped;
mod payload;
pub mod v1;
pub mod v2;
pub mod writer;

use crate::error::{Error, Result};
use crate::softf32::F32;
use std::path::Path;

/// What a checkpoint holds, borrowed from the state it was made of.
#[derive(Clone, Debug)]
pub struct Record<'a> {
    /// The configuration as the text of a JSON object (v2 only; v1 has none).
    pub config: String,
    /// Named scalars, in order.
    pub scalars: Vec<(&'static str, i64)>,
    /// Named tensors with their shapes (row-major) and cells, in order.
    pub tensors: Vec<TensorRecord<'a>>,
    /// Free-form key/value strings (v2 only), e.g. the fingerprint of the data a run was
    /// trained on. Not part of the training state.
    pub metadata: Vec<(String, String)>,
}

/// One tensor of a [`Record`].
#[derive(Clone, Debug)]
pub struct TensorRecord<'a> {
    pub name: String,
    pub shape: Vec<usize>,
    pub cells: &'a [F32],
}

/// The four bytes every NXCK file starts with (`0x4b43584e` little-endian).
pub const MAGIC: [u8; 4] = *b"NXCK";

/// The layout of an NXCK file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    V1,
    V2,
}

/// Which format `bytes` (a file's beginning, at least 12 bytes of it for v2) are in.
///
/// Bytes 4..8 are v1's buffer count, or [`v2::VERSIONED_MARKER`], which no loadable v1 file
/// can have; a versioned file's version follows at 8..12. Errors: `BadMagic`, `Length` when
/// the bytes end before the format is known, `UnsupportedVersion` for versions other than 2.
pub fn detect(bytes: &[u8]) -> Result<Format> {
    let magic_part = &bytes[..bytes.len().min(4)];
    if magic_part != &MAGIC[..magic_part.len()] {
        return Err(Error::BadMagic {
            found: magic_part.to_vec(),
        });
    }
    let short = |expected: u64, what: &str| Error::Length {
        expected,
        actual: bytes.len() as u64,
        what: what.into(),
    };
    let word = |at: usize| cells::u32_at(bytes, at);
    if bytes.len() < 8 {
        return Err(short(8, "the file ends before its format can be told"));
    }
    if word(4) != v2::VERSIONED_MARKER {
        return Ok(Format::V1);
    }
    if bytes.len() < 12 {
        return Err(short(12, "the file ends before its format version"));
    }
    match word(8) {
        v2::VERSION => Ok(Format::V2),
        other => Err(Error::UnsupportedVersion(other)),
    }
}

/// The format of the file at `path`, from its first 12 bytes (all that is read).
pub fn format_of(path: &Path) -> Result<Format> {
    detect(&mapped::read_prefix(path, 12)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_tells_the_versions_apart() {
        let mut v2 = b"NXCK\xff\xff\xff\xff\x02\0\0\0".to_vec();
        assert_eq!(detect(&v2).unwrap(), Format::V2);
        assert_eq!(detect(b"NXCK\x0c\0\0\0").unwrap(), Format::V1);
        v2[8] = 3;
        assert!(matches!(detect(&v2), Err(Error::UnsupportedVersion(3))));
        assert!(matches!(detect(&v2[..10]), Err(Error::Length { .. })));
        assert!(matches!(detect(b"NXC"), Err(Error::Length { .. })));
        assert!(matches!(detect(b"PK\x03"), Err(Error::BadMagic { .. })));
        assert!(matches!(
            detect(b"PK\x03\x04zzzz"),
            Err(Error::BadMagic { .. })
        ));
    }
}
