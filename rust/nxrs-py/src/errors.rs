//! The Python exception family, and the translation of core errors into it.
//!
//! ```text
//! NxrsError
//! ├── ConfigError          a setting that cannot be used (also a ValueError)
//! ├── InputError           a sample, label or dataset that does not fit the model (also a ValueError)
//! ├── BusyError            a trainer another thread is changing (its `fit`, `step`, ...)
//! ├── MismatchError        a checkpoint or run directory of another run (model, configuration
//! │                        or data)
//! └── CheckpointError      a checkpoint that cannot be read
//!     ├── BadMagicError            not an NXCK file
//!     ├── UnsupportedVersionError  a format version this build cannot read
//!     ├── LengthError              truncated, or longer than its header says
//!     ├── HeaderError              a header field out of range or inconsistent
//!     └── ChecksumError            stored and computed checksums differ
//! ```
//! Operating-system failures are Python's own `OSError` subclasses (`FileNotFoundError`, ...)
//! with the path as `filename`.
//!
//! `MismatchError` is not a `CheckpointError`: the file (or directory) is sound but belongs to
//! another run, which code catching unreadable checkpoints (to skip or replace them) must not
//! swallow; data that does not fit a run is an `InputError`.
//!
//! `ConfigError` and `InputError` are `ValueError`s too: a bad value is what `ValueError` means
//! in Python, and code written `except ValueError` (scikit-learn's conventions, nxrs's own
//! checks before they raised these) keeps catching them.

use nxrs_core::Error;
use pyo3::exceptions::{PyException, PyOSError, PyValueError};
use pyo3::prelude::*;

/// `pyo3::create_exception!` for an exception with a second base class, a builtin exception
/// `$also` (a class statement `class $name($base, $also)` in module `$module`). pyo3's macro takes
/// one base; this one builds the class by calling `type(name, bases, namespace)`, in safe code.
macro_rules! create_exception_also {
    ($module: ident, $name: ident, $base: ty, $also: ty, $doc: expr) => {
        #[repr(transparent)]
        #[doc = $doc]
        pub struct $name(pyo3::PyAny);

        pyo3::impl_exception_boilerplate!($name);
        pyo3::pyobject_native_type_named!($name);

        // SAFETY: `type_object_raw` returns a type object, an exception class (a subclass of
        // BaseException, whose layout `$name` wraps), kept alive for the interpreter's lifetime
        // by the once-lock, exactly as `pyo3::create_exception!`'s implementation does.
        unsafe impl pyo3::type_object::PyTypeInfo for $name {
            #[inline]
            fn type_object_raw(py: pyo3::Python<'_>) -> *mut pyo3::ffi::PyTypeObject {
                use pyo3::sync::PyOnceLock;
                use pyo3::types::{PyDict, PyTuple, PyType};
                static TYPE_OBJECT: PyOnceLock<pyo3::Py<PyType>> = PyOnceLock::new();
                TYPE_OBJECT
                    .get_or_init(py, || {
                        let make = || -> pyo3::PyResult<pyo3::Py<PyType>> {
                            let bases =
                                PyTuple::new(py, [py.get_type::<$base>(), py.get_type::<$also>()])?;
                            let namespace = PyDict::new(py);
                            namespace.set_item("__module__", stringify!($module))?;
                            namespace.set_item("__doc__", $doc)?;
                            let class = py.get_type::<PyType>().call1((
                                stringify!($name),
                                bases,
                                namespace,
                            ))?;
                            Ok(class.cast_into::<PyType>()?.unbind())
                        };
                        make().expect("Failed to initialize new exception type.")
                    })
                    .as_ptr()
                    .cast()
            }
        }

        impl $name {
            #[doc(hidden)]
            pub const _PYO3_DEF: pyo3::impl_::pymodule::AddTypeToModule<Self> =
                pyo3::impl_::pymodule::AddTypeToModule::new();

            #[allow(dead_code)]
            #[doc(hidden)]
            pub const _PYO3_INTROSPECTION_ID: &'static str =
                concat!(stringify!($module), stringify!($name));
        }
    };
}

pyo3::create_exception!(
    nxrs,
    NxrsError,
    PyException,
    "Base class of every error nxrs raises."
);
create_exception_also!(
    nxrs,
    ConfigError,
    NxrsError,
    PyValueError,
    "A setting that cannot be used: a trainer configuration that cannot be built, or another \
     parameter's value out of its range or of the wrong type. Also a ValueError."
);
create_exception_also!(
    nxrs,
    InputError,
    NxrsError,
    PyValueError,
    "A sample, label or dataset that does not fit the model. Also a ValueError."
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
    MismatchError,
    NxrsError,
    "A checkpoint or run directory of another run: another model, configuration or data than \
     the trainer and data given. Not a CheckpointError: the file itself is sound."
);
pyo3::create_exception!(
    nxrs,
    CheckpointError,
    NxrsError,
    "A checkpoint that cannot be read."
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
