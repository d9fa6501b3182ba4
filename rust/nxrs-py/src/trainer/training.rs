//! The training loop at the boundary: the core's bounded stretches with the GIL released and
//! Ctrl-C checked between them, and what one call of the loop did (`RunChunk`, its ended epochs as `EpochEnd`).

use super::{float_of, Claim, PyTrainer};
use crate::errors::to_py;
use nxrs_core::dataset::Dataset;
use nxrs_core::trainer::{Chunk, EpochReport, Limits, Until};
use nxrs_core::F32;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::time::Duration;

/// Longest stretch the GIL stays released while training, so that Ctrl-C is honoured promptly.
pub(crate) const CHUNK: Duration = Duration::from_millis(100);

/// An epoch that ended in a call of the training loop (`Trainer._run`, `_apply_blocks`).
#[pyclass(module = "nxrs._nxrs", name = "EpochEnd", frozen, get_all, eq)]
#[derive(PartialEq)]
pub struct PyEpochEnd {
    /// The epoch's index (0-based): `epoch + 1` epochs are complete after it.
    epoch: i64,
    /// The mean of its step losses (binary32, summed in order).
    loss: f64,
    /// Correct / samples seen (None for mse).
    accuracy: Option<f64>,
    /// The samples its steps saw.
    samples: usize,
    /// Whether the trainer ran every step of the epoch, from its first batch (not after a
    /// resume inside it).
    whole: bool,
}

impl From<&EpochReport> for PyEpochEnd {
    fn from(end: &EpochReport) -> PyEpochEnd {
        PyEpochEnd {
            epoch: end.epoch,
            loss: float_of(end.loss),
            accuracy: end.accuracy(),
            samples: end.samples,
            whole: end.whole,
        }
    }
}

#[pymethods]
impl PyEpochEnd {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "EpochEnd(epoch={}, loss={}, accuracy={}, samples={}, whole={})",
            self.epoch,
            self.loss.into_pyobject(py)?.repr()?,
            self.accuracy.into_pyobject(py)?.repr()?,
            self.samples,
            if self.whole { "True" } else { "False" }
        ))
    }
}

/// What one call of the training loop did: the epochs that ended (in order), the steps taken
/// and the last step's loss (None without a step). `Trainer._run` returns it, and so do
/// `_apply_blocks` (for its one step) and the Ray engine's `run`.
#[pyclass(module = "nxrs._nxrs", name = "RunChunk", frozen, get_all, eq)]
pub struct PyRunChunk {
    epochs: Vec<Py<PyEpochEnd>>,
    steps: u64,
    last_loss: Option<f64>,
}

/// Equal chunks hold equal values (as the tuples `_run` returned before), so a chunk computed
/// one way can be compared with one computed another (`tests/test_blocks.py`).
impl PartialEq for PyRunChunk {
    fn eq(&self, other: &PyRunChunk) -> bool {
        self.steps == other.steps
            && self.last_loss == other.last_loss
            && self.epochs.len() == other.epochs.len()
            && self
                .epochs
                .iter()
                .zip(&other.epochs)
                .all(|(a, b)| a.get() == b.get())
    }
}

impl PyRunChunk {
    pub(super) fn of(
        py: Python<'_>,
        epochs: &[EpochReport],
        steps: u64,
        last_loss: Option<F32>,
    ) -> PyResult<PyRunChunk> {
        Ok(PyRunChunk {
            epochs: epochs
                .iter()
                .map(|end| Py::new(py, PyEpochEnd::from(end)))
                .collect::<PyResult<_>>()?,
            steps,
            last_loss: last_loss.map(float_of),
        })
    }
}

#[pymethods]
impl PyRunChunk {
    /// A chunk made of its parts (a loop in Python that takes steps itself: the Ray engine).
    #[new]
    #[pyo3(signature = (*, epochs, steps, last_loss))]
    fn new(epochs: Vec<Py<PyEpochEnd>>, steps: u64, last_loss: Option<f64>) -> PyRunChunk {
        PyRunChunk {
            epochs,
            steps,
            last_loss,
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let epochs = self
            .epochs
            .iter()
            .map(|e| e.get().__repr__(py))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(format!(
            "RunChunk(epochs=[{}], steps={}, last_loss={})",
            epochs.join(", "),
            self.steps,
            self.last_loss.into_pyobject(py)?.repr()?
        ))
    }
}

/// How a call of the training loop runs: the core's limits, and whether the GIL is released
/// in chunks of [`CHUNK`] with Ctrl-C checked between them.
pub(super) struct Training {
    pub limits: Limits,
    /// Check Ctrl-C between chunks and go on until the limits end the run.
    pub signals: bool,
}

impl Training {
    /// Until `until`, in chunks of [`CHUNK`] with Ctrl-C checked between them.
    pub(super) fn interactive(until: Until, keep_losses: bool) -> Training {
        Training {
            limits: Limits {
                until,
                max_steps: None,
                max_time: CHUNK,
                keep_losses,
                stop_after_epoch: false,
            },
            signals: true,
        }
    }
}

impl PyTrainer {
    /// Trains on `data` as `training` says, tallying every epoch (the core decides where each
    /// chunk and the run stop). The trainer's lock is held for one chunk at a time; `claim`
    /// keeps other threads from changing it between them.
    pub(super) fn train(
        &self,
        py: Python<'_>,
        claim: &Claim<'_>,
        data: &Dataset,
        training: &Training,
    ) -> PyResult<Chunk> {
        let limits = &training.limits;
        let mut total = Chunk::default();
        loop {
            let chunk = self
                .compute_mut(py, claim, |t| t.run_chunk(data, limits, total.steps))
                .map_err(to_py)?;
            total.extend(chunk);
            if total.finished(limits) || !training.signals {
                return Ok(total);
            }
            py.check_signals()?;
        }
    }
}

/// `max_seconds` as a duration (None: no limit).
pub(super) fn seconds(max_seconds: Option<f64>) -> PyResult<Duration> {
    match max_seconds {
        None => Ok(Duration::MAX),
        Some(s) => Duration::try_from_secs_f64(s)
            .map_err(|_| PyValueError::new_err(format!("max_seconds = {s} is not a duration"))),
    }
}
