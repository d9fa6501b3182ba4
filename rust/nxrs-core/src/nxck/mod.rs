//! NXCK checkpoint files (specification: `docs/FORMAT.md`).
//!
//! - [`v1`]: the seed's layout: magic, buffer count, scalar count, the scalars, then the cells of
//!   every buffer; no sizes, version or checksum, so reading it needs the model's layout.
//! - [`v2`]: self-describing (the trainer's configuration and a tensor table in a JSON header),
//!   checksummed, with 64-byte-aligned tensors that are read in place from a memory mapping.
//! - [`writer`]: how both are saved: a temporary file in the same directory, `fsync`, rename,
//!   directory `fsync`; a crash leaves the old file or the new one, never a torn one.
//!
//! [`load_trainer`] and [`restore`] read either version, telling them apart with [`detect`].

mod cells;
pub mod mapped;
mod payload;
pub(crate) mod tensors;
pub mod v1;
pub mod v2;
pub mod writer;

use crate::error::{Error, Result};
use crate::trainer::{Trainer, TrainerConfig};
use mapped::FileBytes;
use std::path::Path;
use v2::{Checkpoint, Verify};

pub use tensors::model_tensors;

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
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
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

/// A trainer rebuilt from a checkpoint of either version, all checksums verified. A v2 file
/// gives its own configuration; a v1 file has none and is read as the seed model
/// ([`TrainerConfig::seed_model`]).
///
/// The file is read into memory, not mapped: loading copies every byte anyway, and a copy
/// cannot be changed under the reader by another program rewriting the file in place.
pub fn load_trainer(path: &Path) -> Result<Trainer> {
    let bytes = FileBytes::read(path)?;
    match detect(&bytes)? {
        Format::V1 => {
            let mut trainer = Trainer::new(&TrainerConfig::seed_model(), 1)?;
            let state = v1::decode(&bytes, trainer.state())?;
            trainer.set_state(state)?;
            Ok(trainer)
        }
        Format::V2 => {
            // Verified while copied: the same checks as `Verify::Full`, in one pass.
            Checkpoint::from_bytes(bytes, Verify::HeaderOnly)?.to_trainer(Verify::Full)
        }
    }
}

/// Replaces the trainer's state with a checkpoint's (either version, all checksums verified).
/// A v2 file must hold the trainer's configuration (`Error::Mismatch` otherwise). On any error
/// the trainer is unchanged. The file is read into memory, as by [`load_trainer`].
pub fn restore(trainer: &mut Trainer, path: &Path) -> Result<()> {
    let bytes = FileBytes::read(path)?;
    let state = match detect(&bytes)? {
        Format::V1 => v1::decode(&bytes, trainer.state())?,
        Format::V2 => {
            let checkpoint = Checkpoint::from_bytes(bytes, Verify::HeaderOnly)?;
            let state = checkpoint.to_state_verified()?;
            check_same_config(checkpoint.config(), &trainer.config())?;
            state
        }
    };
    trainer.set_state(state)
}

/// An error of building something from a configuration read from a file. A configuration
/// nxrs cannot build (`Error::Config`) is then a defect of the file, not of the caller's
/// arguments: it becomes `Error::Header`, which says so. Every use of a file's configuration
/// goes through here.
pub(crate) fn from_file_config(err: Error) -> Error {
    match err {
        Error::Config(m) => Error::Header(format!("the file's configuration is invalid: {m}")),
        other => other,
    }
}

fn check_same_config(file: &TrainerConfig, trainer: &TrainerConfig) -> Result<()> {
    if file == trainer {
        return Ok(());
    }
    let describe = |c: &TrainerConfig| {
        let a = &c.adam;
        format!(
            "sizes {:?}, Adam bits lr {:#010x} beta1 {:#010x} beta2 {:#010x} eps {:#010x}",
            c.sizes,
            a.lr.to_bits(),
            a.beta1.to_bits(),
            a.beta2.to_bits(),
            a.eps.to_bits()
        )
    };
    Err(Error::Mismatch(format!(
        "the file was written by a trainer with {}, this trainer has {}",
        describe(file),
        describe(trainer)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_error_from_a_file_is_a_header_error() {
        let err = from_file_config(Error::Config("lr is NaN".into()));
        assert!(
            matches!(&err, Error::Header(m) if m == "the file's configuration is invalid: lr is NaN"),
            "{err}"
        );
        assert!(matches!(
            from_file_config(Error::Input("x".into())),
            Error::Input(_)
        ));
    }

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
