//! Python bindings for nxrs-core: the `nxrs._nxrs` extension module. Translation only: every
//! computation lives in nxrs-core, and every orchestration in the `nxrs` Python package, which
//! builds on this module (this module imports nothing from it).

mod checkpoint;
mod errors;
mod inputs;
mod options;
mod paths;
mod snapshot;
mod softf32;
mod trainer;

use pyo3::pymodule;

#[pymodule]
mod _nxrs {
    use pyo3::prelude::*;

    #[pymodule_export]
    use crate::checkpoint::{checkpoint_format, clip, sweep_temp_files, PyCheckpoint};
    #[pymodule_export]
    use crate::errors::{
        BadMagicError, BusyError, CheckpointError, ChecksumError, ConfigError, HeaderError,
        InputError, LengthError, MismatchError, NxrsError, UnsupportedVersionError,
    };
    #[pymodule_export]
    use crate::options::{_config_differences, _layer_table, config_schema};
    #[pymodule_export]
    use crate::snapshot::PySnapshot;
    #[pymodule_export]
    use crate::softf32::{
        f32_binary, f32_compare, f32_cos_pi, f32_from_i64, f32_to_i32, f32_to_i64, f32_unary,
    };
    #[pymodule_export]
    use crate::trainer::{
        _data_digest, hardware_isa, permutation, seed_dataset, PyClaim, PyDataset, PyEpochEnd,
        PyRunChunk, PyTrainer,
    };

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        crate::checkpoint::register_mapping(m)?;
        // The longest stretch training holds the GIL released (`fit`'s chunks use it too).
        m.add("_CHUNK_SECONDS", crate::trainer::CHUNK.as_secs_f64())?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))
    }
}
