//! A trainer's state to and from checkpoints: files, bytes, an open `Checkpoint`, copies, and
//! the start of a run from given weights.

use super::PyTrainer;
use crate::checkpoint::PyCheckpoint;
use crate::errors::{to_py, ConfigError};
use crate::inputs::{self, AnyInt};
use nxrs_core::checkpoint;
use nxrs_core::nxck::Format;
use nxrs_core::state::TrainState;
use nxrs_core::Trainer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};
use std::path::Path;

impl PyTrainer {
    /// The whole state as NXCK v2 bytes (`to_bytes`, pickling).
    pub(super) fn encoded<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self
            .compute(py, |t| checkpoint::encode(t, Format::V2))
            .map_err(to_py)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// `save`: the whole state to `path` as `format` ("v1", "v2") with string `metadata`.
    pub(super) fn save_to(
        &self,
        py: Python<'_>,
        path: &Path,
        format: &str,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let format = match format {
            "v1" => Format::V1,
            "v2" => Format::V2,
            other => {
                return Err(ConfigError::new_err(format!(
                    "unknown checkpoint format {other:?} (known: 'v1', 'v2')"
                )))
            }
        };
        let metadata: Vec<(String, String)> = match metadata {
            None => Vec::new(),
            Some(m) => m
                .call_method0("items")?
                .try_iter()?
                .map(|item| item?.extract::<(String, String)>())
                .collect::<PyResult<_>>()?,
        };
        self.compute(py, |t| {
            checkpoint::save_with_metadata(t, path, format, metadata)
        })
        .map_err(to_py)
    }

    /// `restore`: this trainer's whole state replaced with the checkpoint's.
    pub(super) fn restore_from(&self, py: Python<'_>, path: &Path) -> PyResult<()> {
        let claim = self.claim("restore")?;
        self.compute_mut(py, &claim, |t| checkpoint::restore(t, path))
            .map_err(to_py)
    }

    /// An independent trainer with the same state, configuration, backend and threads, of
    /// this one's class.
    pub(super) fn duplicate<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTrainer>> {
        let trainer = slf.get().compute(slf.py(), Trainer::clone);
        PyTrainer::wrap(trainer).into_instance(&slf.get_type())
    }

    /// `_start_from`: the state of a new run (zero moments, counters 0) with the parameters
    /// `params`, the state's tensors in its order (`W1 b1 W2 b2 ...`, a layer model's by its
    /// tensor names: `gamma2 beta2`, a layer without biases its one tensor), and the running
    /// statistics `buffers`, `[mean2, var2, ...]`, when given (else a fresh run's). The core
    /// checks the counts, shapes and values.
    pub(super) fn start_from(
        &self,
        py: Python<'_>,
        params: &Bound<'_, PyAny>,
        buffers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let claim = self.claim("_start_from")?;
        // Each array is read with the name and number of dimensions the core gives it.
        let model = self.read(py, |t| t.model().clone());
        let tensors = params
            .try_iter()?
            .enumerate()
            .map(|(k, array)| {
                let (name, ndim) = TrainState::starting_param(&model, k);
                inputs::tensor(&array?, &name, ndim)
            })
            .collect::<PyResult<Vec<_>>>()?;
        let buffers = match buffers {
            None => None,
            Some(given) => Some(
                given
                    .try_iter()?
                    .enumerate()
                    .map(|(k, array)| {
                        let (name, ndim) = TrainState::starting_buffer(&model, k);
                        inputs::tensor(&array?, &name, ndim)
                    })
                    .collect::<PyResult<Vec<_>>>()?,
            ),
        };
        self.compute_mut(py, &claim, |t| {
            let second = t.config().optimizer.kind.has_second_moments();
            let state = TrainState::starting_from(t.model(), tensors, buffers, second)?;
            t.set_state(state)
        })
        .map_err(to_py)
    }
}

/// `Trainer.load`: a trainer of class `cls` rebuilt from the checkpoint at `path`.
pub(super) fn load<'py>(
    cls: &Bound<'py, PyType>,
    path: &Path,
    backend: Option<&str>,
    threads: Option<AnyInt>,
) -> PyResult<Bound<'py, PyTrainer>> {
    rebuilt(cls, || checkpoint::load(path), backend, threads)
}

/// `Trainer.from_bytes`: a trainer of class `cls` rebuilt from checkpoint bytes. `data` is an
/// immutable `bytes` object the call holds: read without the GIL, its tensors copied once,
/// straight into the state.
pub(super) fn from_bytes<'py>(
    cls: &Bound<'py, PyType>,
    data: &[u8],
    backend: Option<&str>,
    threads: Option<AnyInt>,
) -> PyResult<Bound<'py, PyTrainer>> {
    rebuilt(cls, || checkpoint::decode(data), backend, threads)
}

/// A trainer of class `cls` on `backend` and `threads`, from `read` run without the GIL.
fn rebuilt<'py>(
    cls: &Bound<'py, PyType>,
    read: impl FnOnce() -> nxrs_core::error::Result<Trainer> + Send,
    backend: Option<&str>,
    threads: Option<AnyInt>,
) -> PyResult<Bound<'py, PyTrainer>> {
    let py = cls.py();
    let inner = py.detach(read).map_err(to_py)?;
    PyTrainer::from_core(py, inner, backend, threads)?.into_instance(cls)
}

/// `Checkpoint.to_trainer`: a trainer of class `cls` holding the open checkpoint's
/// configuration and state (a copy). A checkpoint opened with `verify=False` has its tensors'
/// checksums checked now: a trainer never starts from unverified bytes.
pub(super) fn from_checkpoint<'py>(
    cls: &Bound<'py, PyType>,
    ck: &PyCheckpoint,
) -> PyResult<Bound<'py, PyTrainer>> {
    let py = cls.py();
    let trainer = ck.trainer(py)?;
    PyTrainer::from_core(py, trainer, None, None)?.into_instance(cls)
}
