//! The Python exception family, and the translation of core errors into it.
//!
//! ```text
//! NxrsError
//! ├── ConfigError          a trainer configuration that cannot be built
//! ├── InputError           a sample, label or dataset that does not fit the model
//! ├── BusyError            a trainer another thread is changing (its `fit`, `step`, ...)
//! └── CheckpointError      a checkpoint that cannot be loaded
//!     ├── BadMagicError            not an NXCK file
//!     ├── UnsupportedVersionError  a format version this build cannot read
//!     ├── LengthError              truncated, or longer than its header says
//!     ├── MismatchError            a checkpoint of a different model
//!     ├── HeaderError              a header field out of range or inconsistent
//!     └── ChecksumError            stored and computed checksums differ
//! ```
//! Operating-system failures are Python's own `OSError` subclasses (`FileNotFoundError`, ...)
//! with the path as `filename`.

use nxrs_core::Error;
use pyo3::exceptions::{PyException, PyOSError};
use pyo3::prelude::*;

pyo3::create_exception!(
    nxrs,
    NxrsError,
    PyException,
    "Base class of every error nxrs raises."
);
pyo3::create_exception!(
    nxrs,
    ConfigError,
    NxrsError,
    "A trainer configuration that cannot be built."
);
pyo3::create_exception!(
    nxrs,
    InputError,
    NxrsError,
    "A sample, label or dataset that does not fit the model."
);
pyo3::create_exception!(
    nxrs,
    BusyError,
    NxrsError,
    "A call that would change a trainer while another thread is changing it (its fit, step, \
     restore, ...); reading it meanwhile is allowed."
);
pyo3::create_exception!(
    nxrs,
    CheckpointError,
    NxrsError,
    "A checkpoint that cannot be loaded."
);
pyo3::create_exception!(
    nxrs,
    BadMagicError,
    CheckpointError,
    "The file is not an NXCK checkpoint."
);
pyo3::create_exception!(
    nxrs,
    UnsupportedVersionError,
    CheckpointError,
    "An NXCK format version this build cannot read."
);
pyo3::create_exception!(
    nxrs,
    LengthError,
    CheckpointError,
    "The file is truncated, or longer than its header says."
);
pyo3::create_exception!(
    nxrs,
    MismatchError,
    CheckpointError,
    "The checkpoint describes a different model."
);
pyo3::create_exception!(
    nxrs,
    HeaderError,
    CheckpointError,
    "A header field is out of range or inconsistent."
);
pyo3::create_exception!(
    nxrs,
    ChecksumError,
    CheckpointError,
    "Stored and computed checksums differ."
);

/// errno of an I/O error (POSIX and Windows' C runtime agree on 5).
const EIO: i32 = 5;

/// Converts a core error into its Python exception.
pub fn to_py(err: Error) -> PyErr {
    let message = err.to_string();
    match err {
        Error::Config(_) => ConfigError::new_err(message),
        Error::Input(_) => InputError::new_err(message),
        // OSError(errno, strerror, filename) picks the subclass (FileNotFoundError, ...) and
        // prints as "[Errno 2] opening: No such file or directory (os error 2): 'path'". The
        // filename is the path's str as os.fsdecode gives it (surrogateescape: no bytes lost).
        Error::Io { op, path, source } => {
            // Every Io error the core makes carries the OS's errno; EIO if one ever did not.
            let errno = source.raw_os_error().unwrap_or(EIO);
            let strerror = format!("{op}: {source}");
            PyOSError::new_err((errno, strerror, path.into_os_string()))
        }
        Error::NotRegularFile { op, path, kind } => {
            // EISDIR makes IsADirectoryError; the rest is a plain OSError(EINVAL).
            let strerror = format!("{op}: not a regular file ({kind})");
            PyOSError::new_err((kind.errno(), strerror, path.into_os_string()))
        }
        Error::BadMagic { .. } => BadMagicError::new_err(message),
        Error::UnsupportedVersion(_) => UnsupportedVersionError::new_err(message),
        Error::Length { .. } => LengthError::new_err(message),
        Error::Mismatch(_) => MismatchError::new_err(message),
        Error::Header(_) => HeaderError::new_err(message),
        Error::Checksum { .. } => ChecksumError::new_err(message),
    }
}
