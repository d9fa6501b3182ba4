//! Path arguments, as the `os` module takes them.

use pyo3::prelude::*;
use std::path::PathBuf;

/// A path given as `str`, `bytes` or an `os.PathLike` of either. PyO3's own `PathBuf`
/// extraction refuses `bytes`; `os.fsdecode` turns them into the `str` that stands for the same
/// bytes (surrogateescape on unix), which PyO3 encodes back into exactly those bytes. So every
/// path the OS accepts, UTF-8 or not, reaches the core unchanged.
pub(crate) fn path_arg(obj: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    let os = PyModule::import(obj.py(), "os")?;
    os.call_method1("fsdecode", (obj,))?.extract()
}
