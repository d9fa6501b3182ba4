//! Python bindings for nxrs-core: the `nxrs._nxrs` extension module.
use pyo3::prelude::*;

#[pymodule]
mod _nxrs {}
