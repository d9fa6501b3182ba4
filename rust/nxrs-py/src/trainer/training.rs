//! The training loop at the boundary: steps in chunks with the GIL released, and what one call
//! of the loop did (`RunChunk`, its ended epochs as `EpochEnd`).

use super::{float_of, Claim, PyTrainer};
use crate::errors::to_py;
use nxrs_core::dataset::Dataset;
use nxrs_core::trainer::{EpochReport, Event, Until};
use nxrs_core::F32;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

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

/// What one call into the core's training loop did.
#[derive(Default)]
pub(super) struct Chunk {
    /// The reports of the epochs that ended.
    pub epochs: Vec<EpochReport>,
    pub steps: u64,
    pub losses: Vec<F32>,
    pub reached: bool,
}

/// When a call of the training loop returns.
pub(super) struct Limits {
    pub until: Until,
    /// At most this many steps.
    pub max_steps: Option<u64>,
    /// The GIL released for at most this long at a time.
    pub max_time: Duration,
    /// Keep every step's loss (else only the count).
    pub keep_losses: bool,
    /// Check Ctrl-C between chunks of [`CHUNK`] and go on until `until`.
    pub signals: bool,
    /// Also return at the end of an epoch.
    pub stop_after_epoch: bool,
}

impl Limits {
    /// Until `until`, in chunks of [`CHUNK`] with Ctrl-C checked between them.
    pub(super) fn interactive(until: Until, keep_losses: bool) -> Limits {
        Limits {
            until,
            max_steps: None,
            max_time: CHUNK,
            keep_losses,
            signals: true,
            stop_after_epoch: false,
        }
    }
}

impl PyTrainer {
    /// Trains on `data` within `limits`, tallying every epoch. The trainer's lock is held for
    /// one chunk at a time; `claim` keeps other threads from changing it between them.
    pub(super) fn train(
        &self,
        py: Python<'_>,
        claim: &Claim<'_>,
        data: &Dataset,
        limits: &Limits,
    ) -> PyResult<Chunk> {
        let mut total = Chunk::default();
        loop {
            let left = limits.max_steps.map(|m| m - total.steps);
            if left == Some(0) {
                return Ok(total);
            }
            let chunk = self.chunk(py, claim, data, limits, left)?;
            let epoch_ended = !chunk.epochs.is_empty();
            total.epochs.extend(chunk.epochs);
            total.steps += chunk.steps;
            total.losses.extend(chunk.losses);
            total.reached = chunk.reached;
            if chunk.reached || !limits.signals || (limits.stop_after_epoch && epoch_ended) {
                return Ok(total);
            }
            py.check_signals()?;
        }
    }

    /// One stretch of steps with the GIL released, at most `max_steps` of them.
    fn chunk(
        &self,
        py: Python<'_>,
        claim: &Claim<'_>,
        data: &Dataset,
        limits: &Limits,
        max_steps: Option<u64>,
    ) -> PyResult<Chunk> {
        let start = Instant::now();
        let (until, max_time) = (limits.until, limits.max_time);
        self.compute_mut(py, claim, |inner| -> nxrs_core::error::Result<Chunk> {
            let mut out = Chunk::default();
            let mut stop_at_epoch_end = false;
            // Whether the run broke or reached `until`: `reached` below says which.
            let _ = inner.run(data, until, |t, event| match event {
                Event::Step(report) => {
                    out.steps += 1;
                    if limits.keep_losses {
                        out.losses.push(report.loss);
                    }
                    // Every step of `run` is in the epoch structure: batch 0 after it means
                    // it ended its epoch, whose report is the next event.
                    let epoch_done = t.state().batch == 0;
                    let out_of_steps = max_steps.is_some_and(|m| out.steps >= m);
                    let epoch_stop = epoch_done && limits.stop_after_epoch;
                    if out_of_steps || epoch_stop || start.elapsed() >= max_time {
                        if epoch_done {
                            stop_at_epoch_end = true;
                            return ControlFlow::Continue(());
                        }
                        return ControlFlow::Break(());
                    }
                    ControlFlow::Continue(())
                }
                Event::EpochEnd(end) => {
                    out.epochs.push(*end);
                    if stop_at_epoch_end {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                }
            })?;
            out.reached = until.reached(inner.state());
            Ok(out)
        })
        .map_err(to_py)
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
