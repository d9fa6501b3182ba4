//! `nxrs.Trainer`: the core trainer behind a Python class, and `nxrs.Dataset`, data converted
//! once for it.

use crate::errors::{to_py, BusyError, ConfigError, InputError};
use crate::inputs::{self, count, AnyInt, AnyInts};
use crate::options::{build_config, config_dict, Options};
use crate::paths::path_arg;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArrayDyn};
use nxrs_core::backend::BackendChoice;
use nxrs_core::checkpoint;
use nxrs_core::config::TrainerConfig;
use nxrs_core::dataset::Dataset;
use nxrs_core::loss::{argmax, Loss};
use nxrs_core::mlp::Layer;
use nxrs_core::nxck::Format;
use nxrs_core::state::TrainState;

use nxrs_core::threads::{Threads, MAX_THREADS};
use nxrs_core::trainer::{BlockGradient, EpochReport, Event, Until};
use nxrs_core::{Trainer, F32};
use pyo3::exceptions::{PyRuntimeWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Longest stretch the GIL stays released while training, so that Ctrl-C is honoured promptly.
const CHUNK: Duration = Duration::from_millis(100);

pub(crate) fn float_of(x: F32) -> f64 {
    f64::from(f32::from_bits(x.to_bits()))
}

/// binary32 cells as native f32 values: the same bits (a copy, no arithmetic).
fn floats(cells: &[F32]) -> Vec<f32> {
    bytemuck::cast_slice(cells).to_vec()
}

/// What one call into the core's training loop did.
#[derive(Default)]
struct Chunk {
    /// The reports of the epochs that ended.
    epochs: Vec<EpochReport>,
    steps: u64,
    losses: Vec<F32>,
    reached: bool,
}

/// Bit-reproducible MLP training on softf32 (see the stubs, `_nxrs.pyi`, for the documentation).
///
/// Threads. The class is `frozen`: PyO3 never borrows it mutably, so no call fails with
/// "Already borrowed". The trainer sits behind an `RwLock` instead, under two rules that keep
/// it and the GIL from deadlocking: a thread holding the GIL only ever *tries* the lock (it
/// blocks on it only with the GIL released), and nothing holding the lock takes the GIL.
/// Training holds the write lock for one chunk of steps at a time ([`CHUNK`]), so a reader in
/// another thread (`steps`, `config`, `predict`, `to_bytes`, ...) waits at most one chunk and
/// sees the state between two steps. A call that changes the trainer also *claims* it for its
/// whole duration (`fit` for its whole run): a second such call from another thread meanwhile
/// is a `BusyError`, so nothing changes a run's state between its chunks, and a reader can
/// never make a writer fail.
#[pyclass(module = "nxrs", name = "Trainer", frozen)]
pub struct PyTrainer {
    inner: RwLock<Trainer>,
    owner: Mutex<Option<Owner>>,
}

/// The thread changing a trainer: in which call, and how deeply its claims nest (`fit` calls
/// `_run`, `restore` and `evaluate` on the same thread).
struct Owner {
    thread: ThreadId,
    call: &'static str,
    depth: usize,
}

/// A claim on a trainer ([`PyTrainer::claim`]), released when dropped. Changing the trainer
/// ([`PyTrainer::compute_mut`]) takes one, so only a claimed call can.
struct Claim<'a> {
    owner: &'a Mutex<Option<Owner>>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(o) = owner.as_mut() {
            o.depth -= 1;
            if o.depth == 0 {
                *owner = None;
            }
        }
    }
}

impl PyTrainer {
    /// A Python trainer computing with `backend` (None: "auto") on `threads` threads (None: the
    /// available cores).
    pub(crate) fn from_core(
        py: Python<'_>,
        mut inner: Trainer,
        backend: Option<&str>,
        threads: Option<AnyInt>,
    ) -> PyResult<PyTrainer> {
        let choice = backend_choice(backend)?;
        let warning = inner.choose_backend(choice).map_err(to_py)?;
        warn_fallback(py, warning)?;
        inner.set_threads(threads_of(threads)?);
        Ok(PyTrainer {
            inner: RwLock::new(inner),
            owner: Mutex::new(None),
        })
    }

    /// Claims the trainer for `call` (a method's name) on this thread until the claim is
    /// dropped: BusyError when another thread holds a claim. Claims nest on one thread.
    fn claim(&self, call: &'static str) -> PyResult<Claim<'_>> {
        let me = std::thread::current().id();
        // Held for a few instructions, never across Python or the trainer's lock.
        let mut owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
        match owner.as_mut() {
            None => {
                *owner = Some(Owner {
                    thread: me,
                    call,
                    depth: 1,
                })
            }
            Some(o) if o.thread == me => o.depth += 1,
            Some(o) => {
                return Err(BusyError::new_err(format!(
                    "Trainer.{call} cannot run now: another thread is in Trainer.{} on this \
                     trainer; call it after that returns (reading the trainer meanwhile is \
                     allowed)",
                    o.call
                )))
            }
        }
        Ok(Claim { owner: &self.owner })
    }

    /// `f` with shared access to the trainer: with the GIL held when the trainer is free, else
    /// after the chunk of steps in progress, waiting with the GIL released. For quick reads.
    fn read<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&Trainer) -> R + Send) -> R {
        match self.inner.try_read() {
            Ok(trainer) => f(&trainer),
            Err(TryLockError::Poisoned(poisoned)) => f(&poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => py.detach(|| f(&self.read_lock())),
        }
    }

    /// `f` with shared access to the trainer, the GIL released: for computations (predict,
    /// evaluate, save, ...).
    fn compute<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&Trainer) -> R + Send) -> R {
        py.detach(|| f(&self.read_lock()))
    }

    /// `f` with exclusive access to the trainer, the GIL released, under `claim`.
    fn compute_mut<R: Send>(
        &self,
        py: Python<'_>,
        _claim: &Claim<'_>,
        f: impl FnOnce(&mut Trainer) -> R + Send,
    ) -> R {
        py.detach(|| f(&mut self.write_lock()))
    }

    /// The read lock, blocking: only with the GIL released (see [`PyTrainer`]). A panic while
    /// training (a defect) leaves the lock poisoned; the state is then what it was when the
    /// panic happened, as it was before the lock, so poisoning is ignored.
    fn read_lock(&self) -> RwLockReadGuard<'_, Trainer> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The write lock, blocking: only with the GIL released (see [`PyTrainer::read_lock`]).
    fn write_lock(&self) -> RwLockWriteGuard<'_, Trainer> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The model's loss and its numbers of inputs and outputs (fixed for a trainer's lifetime).
    fn shape(&self, py: Python<'_>) -> (Loss, usize, usize) {
        self.read(py, |t| {
            (t.config().loss, t.mlp().inputs(), t.mlp().outputs())
        })
    }

    /// `(x, y)` as a data set for this model, every input rule checked.
    fn dataset(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<Dataset> {
        let (cells, shape) = inputs::features(x, 2)?;
        let (loss, _, outputs) = self.shape(py);
        let data = match loss {
            Loss::CrossEntropy => {
                let labels = inputs::labels(y, 1)?;
                Dataset::new(shape[1], outputs, cells, &labels)
            }
            Loss::Mse => {
                let ndims: &[usize] = if outputs == 1 { &[1, 2] } else { &[2] };
                let (values, tshape) = inputs::targets(y, ndims)?;
                let width = if tshape.len() == 1 { 1 } else { tshape[1] };
                Dataset::regression(shape[1], cells, width, values)
            }
        }
        .map_err(to_py)?;
        self.read(py, |t| t.check_data(&data)).map_err(to_py)?;
        Ok(data)
    }

    /// One sample `(x, y)` (1-D features; a label, or the targets) as a data set of one.
    fn sample(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<Dataset> {
        let (cells, _) = inputs::features(x, 1)?;
        let features = cells.len();
        let (loss, _, outputs) = self.shape(py);
        let data = match loss {
            Loss::CrossEntropy => {
                let label = inputs::labels(y, 0)?;
                Dataset::new(features, outputs, cells, &label)
            }
            Loss::Mse => {
                let ndims: &[usize] = if outputs == 1 { &[0, 1] } else { &[1] };
                let (values, _) = inputs::targets(y, ndims)?;
                let width = values.len();
                Dataset::regression(features, cells, width, values)
            }
        }
        .map_err(to_py)?;
        self.read(py, |t| t.check_data(&data)).map_err(to_py)?;
        Ok(data)
    }

    /// Features for inference: 2-D, the model's feature count, finite, not empty.
    fn features(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<(Vec<F32>, usize)> {
        let (cells, shape) = inputs::features(x, 2)?;
        let n = shape[0];
        let (_, inputs, _) = self.shape(py);
        // The dataset's checks (size, finiteness), with placeholder labels.
        let data = Dataset::new(shape[1], 1, cells, &vec![0u8; n]).map_err(to_py)?;
        if data.features() != inputs {
            return Err(InputError::new_err(format!(
                "samples have {} features, the model takes {inputs}",
                data.features(),
            )));
        }
        Ok((data.inputs().to_vec(), n))
    }

    /// The whole state as NXCK v2 bytes (`to_bytes`, pickling).
    fn encoded(&self, py: Python<'_>) -> PyResult<Vec<u8>> {
        self.compute(py, |t| checkpoint::encode(t, Format::V2))
            .map_err(to_py)
    }

    /// Trains on `data` until `until`, with the GIL released for at most `max_seconds` (or
    /// [`CHUNK`] when `signals`: then Ctrl-C is checked between chunks and the loop goes on
    /// until `until`), at most `max_steps` steps. Tallies every epoch. The trainer's lock is
    /// held for one chunk at a time; `claim` keeps other threads from changing it between them.
    #[allow(clippy::too_many_arguments)]
    fn train(
        &self,
        py: Python<'_>,
        claim: &Claim<'_>,
        data: &Dataset,
        until: Until,
        max_steps: Option<u64>,
        max_time: Duration,
        keep_losses: bool,
        signals: bool,
        stop_after_epoch: bool,
    ) -> PyResult<Chunk> {
        let mut total = Chunk::default();
        loop {
            let left = max_steps.map(|m| m - total.steps);
            if left == Some(0) {
                return Ok(total);
            }
            let chunk = self.chunk(
                py,
                claim,
                data,
                until,
                left,
                max_time,
                keep_losses,
                stop_after_epoch,
            )?;
            let epoch_ended = !chunk.epochs.is_empty();
            total.epochs.extend(chunk.epochs);
            total.steps += chunk.steps;
            total.losses.extend(chunk.losses);
            total.reached = chunk.reached;
            if chunk.reached || !signals || (stop_after_epoch && epoch_ended) {
                return Ok(total);
            }
            py.check_signals()?;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn chunk(
        &self,
        py: Python<'_>,
        claim: &Claim<'_>,
        data: &Dataset,
        until: Until,
        max_steps: Option<u64>,
        max_time: Duration,
        keep_losses: bool,
        stop_after_epoch: bool,
    ) -> PyResult<Chunk> {
        let start = Instant::now();
        self.compute_mut(py, claim, |inner| -> nxrs_core::error::Result<Chunk> {
            let mut out = Chunk::default();
            let mut stop_at_epoch_end = false;
            // Whether the run broke or reached `until`: `reached` below says which.
            let _ = inner.run(data, until, |t, event| match event {
                Event::Step(report) => {
                    out.steps += 1;
                    if keep_losses {
                        out.losses.push(report.loss);
                    }
                    // Every step of `run` is in the epoch structure: batch 0 after it means
                    // it ended its epoch, whose report is the next event.
                    let epoch_done = t.state().batch == 0;
                    let out_of_steps = max_steps.is_some_and(|m| out.steps >= m);
                    let epoch_stop = epoch_done && stop_after_epoch;
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
            out.reached = reached(inner, until);
            Ok(out)
        })
        .map_err(to_py)
    }
}

/// Calls `nxrs.interop.<function>`: the conversions to and from other libraries are Python
/// (they drive torch, onnx and safetensors), attached here as methods as `fit` is.
fn interop<'py>(
    py: Python<'py>,
    function: &str,
    args: impl pyo3::call::PyCallArgs<'py>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    py.import("nxrs.interop")?
        .getattr(function)?
        .call(args, kwargs)
}

/// The backend `name` (None: "auto") asks for: a ConfigError for an unknown name.
fn backend_choice(name: Option<&str>) -> PyResult<BackendChoice> {
    let name = name.unwrap_or("auto");
    BackendChoice::from_name(name).ok_or_else(|| {
        ConfigError::new_err(format!(
            "backend = {name:?} is not one of {:?}",
            BackendChoice::NAMES
        ))
    })
}

/// The RuntimeWarning naming the self-check's disagreement when "auto" fell back to softf32
/// because of one (the core's `choose_backend` says so; a ConfigError is its error, e.g. for
/// "hw" where the hardware path is unavailable).
fn warn_fallback(py: Python<'_>, warning: Option<&str>) -> PyResult<()> {
    if let Some(warning) = warning {
        let message = format!("{warning}; backend='auto' computes with softf32 ('soft')");
        let message = std::ffi::CString::new(message).expect("no NUL in the message");
        PyErr::warn(py, &py.get_type::<PyRuntimeWarning>(), &message, 1)?;
    }
    Ok(())
}

/// Arrays in tensor order (W1, b1, W2, b2, ...) as the layers of a model of `layers` layers,
/// bit for bit; `what` names them in the error when the count is wrong (shapes are checked by
/// the core, which knows the model).
fn layers_of(
    arrays: &[PyReadonlyArrayDyn<'_, f32>],
    layers: usize,
    what: &str,
) -> PyResult<Vec<Layer>> {
    if arrays.len() != 2 * layers {
        return Err(InputError::new_err(format!(
            "{what} of this model is {} arrays (W1, b1, ...), not {}",
            2 * layers,
            arrays.len()
        )));
    }
    Ok(arrays
        .chunks(2)
        .map(|pair| Layer {
            w: bits_of(pair[0].as_array().iter()),
            b: bits_of(pair[1].as_array().iter()),
        })
        .collect())
}

/// float32 values' bit patterns as cells (no arithmetic: NaN payloads and signed zeros kept).
fn bits_of<'a>(values: impl Iterator<Item = &'a f32>) -> Vec<F32> {
    values.map(|x| F32::from_bits(x.to_bits())).collect()
}

/// An epoch's report as `_run` returns it: `(epoch, mean step loss, accuracy, samples, whole)`.
fn epoch_tuple(end: &EpochReport) -> (i64, f64, Option<f64>, usize, bool) {
    let accuracy = end.correct.map(|c| accuracy(c, end.samples));
    (
        end.epoch,
        float_of(end.loss),
        accuracy,
        end.samples,
        end.whole,
    )
}

/// The threads `threads=` asks for (None: the available cores), or a ConfigError.
fn threads_of(threads: Option<AnyInt>) -> PyResult<Threads> {
    let count = match threads {
        None => Threads::available(),
        Some(n) => {
            let n = n.to_i64("threads", ConfigError::new_err)?;
            usize::try_from(n).map_err(|_| {
                ConfigError::new_err(format!("threads = {n} is outside 1..={MAX_THREADS}"))
            })?
        }
    };
    Threads::new(count).map_err(to_py)
}

/// `correct / samples` in binary64, as TRAINING.md section 10 defines accuracy: a reported
/// statistic of exact integer counts, not training arithmetic (which is all softf32).
#[allow(clippy::float_arithmetic)]
fn accuracy(correct: usize, samples: usize) -> f64 {
    correct as f64 / samples as f64
}

fn reached(trainer: &Trainer, until: Until) -> bool {
    match until {
        Until::Epoch(e) => trainer.state().epoch >= e,
        Until::Step(s) => trainer.state().step >= s,
    }
}

fn seconds(max_seconds: Option<f64>) -> PyResult<Duration> {
    match max_seconds {
        None => Ok(Duration::MAX),
        Some(s) => Duration::try_from_secs_f64(s)
            .map_err(|_| PyValueError::new_err(format!("max_seconds = {s} is not a duration"))),
    }
}

#[pymethods]
impl PyTrainer {
    #[new]
    #[pyo3(signature = (
        layers = None,
        *,
        seed = None,
        sizes = None,
        loss = None,
        math = None,
        init = None,
        optimizer = None,
        lr = None,
        beta1 = None,
        beta2 = None,
        eps = None,
        weight_decay = None,
        momentum = None,
        schedule = None,
        warmup_steps = None,
        total_steps = None,
        step_size = None,
        gamma = None,
        clip_norm = None,
        batch_size = None,
        grad_block = None,
        shuffle = None,
        drop_last = None,
        backend = None,
        threads = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        layers: Option<AnyInts>,
        seed: Option<AnyInt>,
        sizes: Option<AnyInts>,
        loss: Option<String>,
        math: Option<String>,
        init: Option<String>,
        optimizer: Option<String>,
        lr: Option<f64>,
        beta1: Option<f64>,
        beta2: Option<f64>,
        eps: Option<f64>,
        weight_decay: Option<f64>,
        momentum: Option<f64>,
        schedule: Option<String>,
        warmup_steps: Option<AnyInt>,
        total_steps: Option<AnyInt>,
        step_size: Option<AnyInt>,
        gamma: Option<f64>,
        clip_norm: Option<f64>,
        batch_size: Option<AnyInt>,
        grad_block: Option<AnyInt>,
        shuffle: Option<bool>,
        drop_last: Option<bool>,
        backend: Option<String>,
        threads: Option<AnyInt>,
    ) -> PyResult<Self> {
        let options = Options {
            seed,
            sizes,
            loss,
            math,
            init,
            optimizer,
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            momentum,
            schedule,
            warmup_steps,
            total_steps,
            step_size,
            gamma,
            clip_norm,
            batch_size,
            grad_block,
            shuffle,
            drop_last,
        };
        let config = build_config(layers, options)?;
        let trainer = Trainer::new(config).map_err(to_py)?;
        PyTrainer::from_core(py, trainer, backend.as_deref(), threads)
    }

    /// The seed program's model: `Trainer(seed=seed)`.
    #[classmethod]
    #[pyo3(
        signature = (seed = AnyInt::new(1), *, backend = None, threads = None),
        text_signature = "(seed=1, *, backend=None, threads=None)"
    )]
    fn seed_model(
        _cls: &Bound<'_, pyo3::types::PyType>,
        py: Python<'_>,
        seed: AnyInt,
        backend: Option<String>,
        threads: Option<AnyInt>,
    ) -> PyResult<Self> {
        let seed = seed.to_i64("seed", ConfigError::new_err)?;
        let config = TrainerConfig::seed_style(vec![6, 10, 4], seed);
        let trainer = Trainer::new(config).map_err(to_py)?;
        PyTrainer::from_core(py, trainer, backend.as_deref(), threads)
    }

    /// One optimiser step on one sample, outside the epoch structure; returns its loss.
    fn step(&self, py: Python<'_>, x: &Bound<'_, PyAny>, y: &Bound<'_, PyAny>) -> PyResult<f64> {
        let claim = self.claim("step")?;
        let data = self.sample(py, x, y)?;
        let loss = self
            .compute_mut(py, &claim, |t| t.step(&data, &[0]))
            .map_err(to_py)?;
        Ok(float_of(loss))
    }

    /// Trains until `epoch` epochs are complete (`epoch` at least 0).
    fn train_until(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
        epoch: AnyInt,
    ) -> PyResult<()> {
        let epoch = count(&epoch, "epoch", 0, InputError::new_err)?;
        let claim = self.claim("train_until")?;
        let data = self.dataset(py, x, y)?;
        self.train(
            py,
            &claim,
            &data,
            Until::Epoch(epoch),
            None,
            CHUNK,
            false,
            true,
            false,
        )?;
        Ok(())
    }

    /// `steps` optimiser steps in the epoch structure; their losses.
    fn train_steps(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
        steps: AnyInt,
    ) -> PyResult<Vec<f64>> {
        let steps = count(&steps, "steps", 0, InputError::new_err)?;
        let claim = self.claim("train_steps")?;
        let data = self.dataset(py, x, y)?;
        // Under the claim: no other thread moves the step counter until this call returns.
        let now = self.read(py, |t| t.state().step);
        let until = Until::Step(now.saturating_add(steps));
        let chunk = self.train(py, &claim, &data, until, None, CHUNK, true, true, false)?;
        Ok(chunk.losses.into_iter().map(float_of).collect())
    }

    /// Trains as `nxrs._fit.fit` describes.
    #[pyo3(signature = (
        x, y, epochs, *, validation_data = None, checkpoint = None, every = None,
        every_seconds = None, resume = true, progress = None, engine = "local", workers = None,
        ray_address = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn fit<'py>(
        slf: &Bound<'py, Self>,
        x: &Bound<'py, PyAny>,
        y: &Bound<'py, PyAny>,
        epochs: &Bound<'py, PyAny>,
        validation_data: Option<&Bound<'py, PyAny>>,
        checkpoint: Option<&Bound<'py, PyAny>>,
        every: Option<&Bound<'py, PyAny>>,
        every_seconds: Option<&Bound<'py, PyAny>>,
        resume: bool,
        progress: Option<&Bound<'py, PyAny>>,
        engine: &str,
        workers: Option<&Bound<'py, PyAny>>,
        ray_address: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        // The whole run is one claim: no other thread changes the trainer between its chunks
        // (reading it is allowed). `_fit.fit`'s own calls (`_run`, `restore`, ...) nest in it.
        let _claim = slf.get().claim("fit")?;
        let fit = py.import("nxrs._fit")?.getattr("fit")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("validation_data", validation_data)?;
        kwargs.set_item("checkpoint", checkpoint)?;
        kwargs.set_item("every", every)?;
        kwargs.set_item("every_seconds", every_seconds)?;
        kwargs.set_item("resume", resume)?;
        kwargs.set_item("progress", progress)?;
        kwargs.set_item("engine", engine)?;
        kwargs.set_item("workers", workers)?;
        kwargs.set_item("ray_address", ray_address)?;
        fit.call((slf, x, y, epochs), Some(&kwargs))
    }

    /// `(x, y)` converted and checked once, for `_run`.
    fn _dataset(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<PyDataset> {
        Ok(PyDataset {
            inner: self.dataset(py, x, y)?,
        })
    }

    /// Trains on `dataset` towards `epochs` complete epochs, returning after at most
    /// `max_steps` steps or about `max_seconds` (the GIL released meanwhile): `(epochs ended,
    /// steps done, last step loss)`, each ended epoch as `(epoch, mean step loss, accuracy,
    /// samples, whole)`. With `epoch_end`, it also returns at the end of an epoch.
    #[pyo3(signature = (dataset, epochs, max_steps = None, max_seconds = None, epoch_end = false))]
    fn _run<'py>(
        &self,
        py: Python<'py>,
        dataset: PyRef<'_, PyDataset>,
        epochs: AnyInt,
        max_steps: Option<AnyInt>,
        max_seconds: Option<f64>,
        epoch_end: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let epochs = count(&epochs, "epochs", 0, InputError::new_err)?;
        let max_steps = match &max_steps {
            Some(m) => Some(count(m, "max_steps", 1, InputError::new_err)? as u64),
            None => None,
        };
        let max_time = seconds(max_seconds)?;
        let claim = self.claim("_run")?;
        let data = &dataset.inner;
        let chunk = self.train(
            py,
            &claim,
            data,
            Until::Epoch(epochs),
            max_steps,
            max_time,
            true,
            false,
            epoch_end,
        )?;
        let ended = PyList::empty(py);
        for end in chunk.epochs {
            ended.append(epoch_tuple(&end))?;
        }
        let last = chunk.losses.last().map(|&l| float_of(l));
        (ended, chunk.steps, last).into_pyobject(py)
    }

    /// The gradient blocks of the batch the state is at: each block's sample indices into
    /// `dataset`, in order (data-parallel training, `nxrs.distributed`).
    fn _batch_blocks(
        &self,
        py: Python<'_>,
        dataset: PyRef<'_, PyDataset>,
    ) -> PyResult<Vec<Vec<usize>>> {
        let data = &dataset.inner;
        self.read(py, |t| t.batch_blocks(data)).map_err(to_py)
    }

    /// One gradient block at the current parameters, the GIL released: `(sums, losses,
    /// correct)`, the sums as float32 arrays in tensor order (W1, b1, W2, b2, ...).
    fn _block_gradient<'py>(
        &self,
        py: Python<'py>,
        dataset: PyRef<'_, PyDataset>,
        samples: Vec<usize>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let data = &dataset.inner;
        let (block, shapes) = self
            .compute(py, |t| {
                let shapes: Vec<(usize, usize)> = (0..t.mlp().layers())
                    .map(|l| t.mlp().weight_shape(l))
                    .collect();
                t.block_gradient(data, &samples)
                    .map(|block| (block, shapes))
            })
            .map_err(to_py)?;
        let sums = PyList::empty(py);
        for (layer, &(outputs, inputs)) in block.grads.iter().zip(&shapes) {
            sums.append(PyArray1::from_vec(py, floats(&layer.w)).reshape([outputs, inputs])?)?;
            sums.append(PyArray1::from_vec(py, floats(&layer.b)))?;
        }
        let losses = PyArray1::from_vec(py, floats(&block.losses));
        (sums, losses, block.correct).into_pyobject(py)
    }

    /// Replaces the weights and biases (float32 arrays in tensor order W1, b1, W2, b2, ...,
    /// taken bit for bit) and nothing else: a data-parallel worker following its driver.
    fn _set_params(
        &self,
        py: Python<'_>,
        arrays: Vec<PyReadonlyArrayDyn<'_, f32>>,
    ) -> PyResult<()> {
        let claim = self.claim("_set_params")?;
        let layers = self.read(py, |t| t.mlp().layers());
        let params = layers_of(&arrays, layers, "the parameters")?;
        self.compute_mut(py, &claim, |t| t.set_params(params))
            .map_err(to_py)
    }

    /// Takes the current batch's step from its blocks (`_block_gradient`'s results, in the
    /// order of `_batch_blocks`), as `_run` would: returns what `_run` returns for one step.
    fn _apply_blocks<'py>(
        &self,
        py: Python<'py>,
        dataset: PyRef<'_, PyDataset>,
        blocks: Vec<(
            Vec<PyReadonlyArrayDyn<'py, f32>>,
            PyReadonlyArray1<'py, f32>,
            usize,
        )>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let claim = self.claim("_apply_blocks")?;
        let layers = self.read(py, |t| t.mlp().layers());
        let blocks = blocks
            .iter()
            .map(|(sums, losses, correct)| {
                Ok(BlockGradient {
                    grads: layers_of(sums, layers, "a gradient block")?,
                    losses: bits_of(losses.as_array().iter()),
                    correct: *correct,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let data = &dataset.inner;
        let (step, end) = self
            .compute_mut(py, &claim, |t| t.apply_blocks(data, &blocks))
            .map_err(to_py)?;
        let ended = PyList::empty(py);
        if let Some(end) = end {
            ended.append(epoch_tuple(&end))?;
        }
        (ended, 1, float_of(step.loss)).into_pyobject(py)
    }

    /// The model's outputs: probabilities (cross-entropy) or values (mse), float32 (N, n_out).
    fn predict_proba<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, numpy::PyArray2<f32>>> {
        let (cells, n) = self.features(py, x)?;
        let (_, _, outputs) = self.shape(py);
        let out = self.compute(py, |t| t.predict(&cells)).map_err(to_py)?;
        PyArray1::from_vec(py, floats(&out)).reshape([n, outputs])
    }

    /// Class indices (int64, (N,)) for cross-entropy; the outputs for mse.
    fn predict<'py>(&self, py: Python<'py>, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let (cells, n) = self.features(py, x)?;
        let (loss, _, outputs) = self.shape(py);
        let (out, math) = self
            .compute(py, |t| t.predict(&cells).map(|out| (out, t.config().math)))
            .map_err(to_py)?;
        match loss {
            Loss::CrossEntropy => {
                let labels: Vec<i64> = out
                    .chunks(outputs)
                    .map(|p| argmax(math, p) as i64)
                    .collect();
                Ok(PyArray1::from_vec(py, labels).into_any())
            }
            Loss::Mse => Ok(PyArray1::from_vec(py, floats(&out))
                .reshape([n, outputs])?
                .into_any()),
        }
    }

    /// `(loss, accuracy)` on `(x, y)`; accuracy None for mse.
    fn evaluate(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<(f64, Option<f64>)> {
        let data = self.dataset(py, x, y)?;
        let e = self.compute(py, |t| t.evaluate(&data)).map_err(to_py)?;
        let accuracy = e.correct.map(|c| accuracy(c, e.samples));
        Ok((float_of(e.loss), accuracy))
    }

    /// Writes the whole training state to `path`, crash-safely.
    #[pyo3(signature = (path, *, format = "v2", metadata = None))]
    fn save(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
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
            checkpoint::save_with_metadata(t, &path, format, metadata)
        })
        .map_err(to_py)
    }

    /// A trainer rebuilt from a checkpoint, all checksums verified.
    #[classmethod]
    #[pyo3(signature = (path, *, backend = None, threads = None))]
    fn load(
        _cls: &Bound<'_, pyo3::types::PyType>,
        py: Python<'_>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
        backend: Option<String>,
        threads: Option<AnyInt>,
    ) -> PyResult<Self> {
        let inner = py.detach(|| checkpoint::load(&path)).map_err(to_py)?;
        PyTrainer::from_core(py, inner, backend.as_deref(), threads)
    }

    /// Replaces this trainer's whole state with the checkpoint's.
    fn restore(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
    ) -> PyResult<()> {
        let claim = self.claim("restore")?;
        self.compute_mut(py, &claim, |t| checkpoint::restore(t, &path))
            .map_err(to_py)
    }

    /// The seed program's state hash (`hstate`) of the weights.
    fn hash(&self, py: Python<'_>) -> u64 {
        self.read(py, Trainer::seed_hash)
    }

    /// A 64-bit hash of the whole state.
    fn state_hash(&self, py: Python<'_>) -> u64 {
        self.read(py, Trainer::state_hash)
    }

    /// Copies of every tensor of the state, by name, in checkpoint order.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // Copies made under the lock; the arrays are built after it is released.
        let tensors = self.read(py, |t| {
            let second = t.config().optimizer.kind.has_second_moments();
            let layout = TrainState::layout(t.mlp(), second);
            let cells = t.state().tensors().into_iter().map(floats);
            layout.into_iter().zip(cells).collect::<Vec<_>>()
        });
        let dict = PyDict::new(py);
        for ((name, shape), cells) in tensors {
            let array = PyArray1::from_vec(py, cells).reshape(shape)?;
            dict.set_item(name, array)?;
        }
        Ok(dict)
    }

    /// The whole state as the bytes of an NXCK v2 file (what `save` writes), for pickling and
    /// sending; `Trainer.from_bytes` reads them back.
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &self.encoded(py)?))
    }

    /// Pickling: `Trainer.from_bytes(self.to_bytes())`, the state and configuration bit for
    /// bit. The backend and threads are the unpickling process's defaults ("auto", its
    /// cores): they describe a machine, not the run, and change no bit.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let from_bytes = py.get_type::<PyTrainer>().getattr("from_bytes")?;
        let bytes = PyBytes::new(py, &slf.get().encoded(py)?);
        PyTuple::new(
            py,
            [from_bytes.into_any(), PyTuple::new(py, [bytes])?.into_any()],
        )
    }

    /// An independent trainer with the same state, configuration, backend and threads.
    fn __copy__(&self, py: Python<'_>) -> PyTrainer {
        let trainer = self.compute(py, Trainer::clone);
        PyTrainer {
            inner: RwLock::new(trainer),
            owner: Mutex::new(None),
        }
    }

    /// As `__copy__`: a trainer shares nothing with its copy.
    fn __deepcopy__(&self, py: Python<'_>, _memo: &Bound<'_, PyAny>) -> PyTrainer {
        self.__copy__(py)
    }

    /// A trainer rebuilt from checkpoint bytes (v1 or v2), every checksum verified.
    #[classmethod]
    #[pyo3(signature = (data, *, backend = None, threads = None))]
    fn from_bytes(
        _cls: &Bound<'_, pyo3::types::PyType>,
        py: Python<'_>,
        data: &[u8],
        backend: Option<String>,
        threads: Option<AnyInt>,
    ) -> PyResult<Self> {
        // `data` is an immutable `bytes` object this call holds: read without the GIL, its
        // tensors copied once, straight into the state.
        let inner = py.detach(|| checkpoint::decode(data)).map_err(to_py)?;
        PyTrainer::from_core(py, inner, backend.as_deref(), threads)
    }

    /// Restarts this trainer from the parameters `weights`, `[(W1, b1), (W2, b2), ...]`: the
    /// state of a new run (zero moments, counters 0) with these weights (`Trainer.from_weights`).
    fn _start_from(&self, py: Python<'_>, weights: &Bound<'_, PyAny>) -> PyResult<()> {
        let claim = self.claim("_start_from")?;
        let mut tensors = Vec::new();
        for (l, pair) in weights.try_iter()?.enumerate() {
            let (w, b): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?
                .extract()
                .map_err(|_| InputError::new_err(format!("weights[{l}] is not a pair (W, b)")))?;
            tensors.push(inputs::tensor(&w, &format!("W{}", l + 1), 2)?);
            tensors.push(inputs::tensor(&b, &format!("b{}", l + 1), 1)?);
        }
        self.compute_mut(py, &claim, |t| {
            let second = t.config().optimizer.kind.has_second_moments();
            let state = TrainState::starting_from(t.mlp(), tensors, second)?;
            t.set_state(state)
        })
        .map_err(to_py)
    }

    /// A `torch.nn.Sequential` with this model's weights (`nxrs.interop.to_torch`).
    #[pyo3(signature = (*, softmax = false))]
    fn to_torch<'py>(slf: &Bound<'py, Self>, softmax: bool) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = PyDict::new(slf.py());
        kwargs.set_item("softmax", softmax)?;
        interop(slf.py(), "to_torch", (slf,), Some(&kwargs))
    }

    /// Writes the weights (and optimiser moments) as safetensors (`nxrs.interop`).
    #[pyo3(signature = (path, *, moments = false))]
    fn save_safetensors<'py>(
        slf: &Bound<'py, Self>,
        path: &Bound<'py, PyAny>,
        moments: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = PyDict::new(slf.py());
        kwargs.set_item("moments", moments)?;
        interop(slf.py(), "save_safetensors", (slf, path), Some(&kwargs))
    }

    /// Exports inference as an ONNX model (`nxrs.interop.to_onnx`).
    #[pyo3(signature = (path, *, softmax = None))]
    fn to_onnx<'py>(
        slf: &Bound<'py, Self>,
        path: &Bound<'py, PyAny>,
        softmax: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = PyDict::new(slf.py());
        kwargs.set_item("softmax", softmax)?;
        interop(slf.py(), "to_onnx", (slf, path), Some(&kwargs))
    }

    /// A trainer starting from given weights (`nxrs.interop.from_weights`).
    #[classmethod]
    #[pyo3(signature = (weights, **config))]
    fn from_weights<'py>(
        _cls: &Bound<'py, pyo3::types::PyType>,
        weights: &Bound<'py, PyAny>,
        config: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        interop(weights.py(), "from_weights", (weights,), config)
    }

    /// A trainer starting from a torch module's weights (`nxrs.interop.from_torch`).
    #[classmethod]
    #[pyo3(signature = (module, **config))]
    fn from_torch<'py>(
        _cls: &Bound<'py, pyo3::types::PyType>,
        module: &Bound<'py, PyAny>,
        config: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        interop(module.py(), "from_torch", (module,), config)
    }

    /// A trainer starting from the weights of a safetensors file (`nxrs.interop`).
    #[classmethod]
    #[pyo3(signature = (path, **config))]
    fn from_safetensors<'py>(
        _cls: &Bound<'py, pyo3::types::PyType>,
        path: &Bound<'py, PyAny>,
        config: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        interop(path.py(), "from_safetensors", (path,), config)
    }

    /// The backend computing this trainer's steps, evaluations and predictions: "hw" or "soft".
    #[getter]
    fn backend(&self, py: Python<'_>) -> &'static str {
        self.read(py, |t| t.backend().name())
    }

    #[setter(backend)]
    fn set_backend(&self, py: Python<'_>, value: &str) -> PyResult<()> {
        let choice = backend_choice(Some(value))?;
        let claim = self.claim("backend")?;
        let warning = self
            .compute_mut(py, &claim, |t| t.choose_backend(choice))
            .map_err(to_py)?;
        warn_fallback(py, warning)
    }

    /// The threads training, evaluation and prediction use; set it to change them.
    #[getter]
    fn threads(&self, py: Python<'_>) -> usize {
        self.read(py, |t| t.threads().count())
    }

    #[setter(threads)]
    fn set_threads(&self, py: Python<'_>, value: AnyInt) -> PyResult<()> {
        let threads = threads_of(Some(value))?;
        let claim = self.claim("threads")?;
        self.compute_mut(py, &claim, |t| t.set_threads(threads));
        Ok(())
    }

    /// Completed epochs.
    #[getter]
    fn epoch(&self, py: Python<'_>) -> i64 {
        self.read(py, |t| t.state().epoch)
    }

    /// Batches of the current epoch already done.
    #[getter]
    fn batch(&self, py: Python<'_>) -> i64 {
        self.read(py, |t| t.state().batch)
    }

    /// Optimiser steps taken in total.
    #[getter]
    fn steps(&self, py: Python<'_>) -> i64 {
        self.read(py, |t| t.state().step)
    }

    #[getter]
    fn b1t(&self, py: Python<'_>) -> f64 {
        float_of(self.read(py, |t| t.state().b1t))
    }

    #[getter]
    fn b2t(&self, py: Python<'_>) -> f64 {
        float_of(self.read(py, |t| t.state().b2t))
    }

    /// Layer sizes, inputs first.
    #[getter]
    fn sizes(&self, py: Python<'_>) -> Vec<usize> {
        self.read(py, |t| t.mlp().sizes().to_vec())
    }

    /// The optimiser's hyperparameters as binary32 values.
    #[getter]
    fn hyperparameters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let named = self.read(py, |t| t.config().optimizer.named());
        let dict = PyDict::new(py);
        for (name, value) in named {
            dict.set_item(name, float_of(value))?;
        }
        Ok(dict)
    }

    /// The configuration, with TRAINING.md's keys.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let config = self.read(py, |t| t.config().clone());
        config_dict(py, &config, false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        self.read(py, |t| {
            format!(
                "Trainer(sizes={:?}, epoch={}, state_hash={:#018x})",
                t.mlp().sizes(),
                t.state().epoch,
                t.state_hash()
            )
        })
    }
}

/// Training data converted and checked once for a trainer (`Trainer._dataset`).
#[pyclass(module = "nxrs", name = "Dataset", frozen)]
pub struct PyDataset {
    inner: Dataset,
}

#[pymethods]
impl PyDataset {
    /// The data's FNV-1a fingerprint as 16 lowercase hex digits (features' bits, labels or
    /// targets, shapes).
    #[getter]
    fn fingerprint(&self) -> String {
        format!("{:016x}", self.inner.fingerprint())
    }

    /// Number of features per sample.
    #[getter]
    fn features(&self) -> usize {
        self.inner.features()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Dataset(samples={}, features={}, fingerprint={:016x})",
            self.inner.len(),
            self.inner.features(),
            self.inner.fingerprint()
        )
    }
}

/// Features (samples, features) and labels (samples,), as numpy arrays.
type Samples<'py> = (Bound<'py, numpy::PyArray2<f32>>, Bound<'py, PyArray1<i64>>);

/// The seed's synthetic dataset.
#[pyfunction]
#[pyo3(
    signature = (samples = AnyInt::new(8), features = AnyInt::new(6), classes = AnyInt::new(4)),
    text_signature = "(samples=8, features=6, classes=4)"
)]
pub fn seed_dataset(
    py: Python<'_>,
    samples: AnyInt,
    features: AnyInt,
    classes: AnyInt,
) -> PyResult<Samples<'_>> {
    let int = |n: AnyInt, name| n.to_i64(name, InputError::new_err);
    let data = Dataset::try_seed(
        int(samples, "samples")?,
        int(features, "features")?,
        int(classes, "classes")?,
    )
    .map_err(to_py)?;
    let x = floats(data.inputs());
    let y: Vec<i64> = match data.targets() {
        nxrs_core::dataset::Targets::Labels { labels, .. } => {
            labels.iter().map(|&l| l as i64).collect()
        }
        nxrs_core::dataset::Targets::Values { .. } => unreachable!("the seed's data has labels"),
    };
    let x = PyArray1::from_vec(py, x).reshape([data.len(), data.features()])?;
    Ok((x, PyArray1::from_vec(py, y)))
}

/// The permutation of `n` items drawn from the stream `(seed, domain, index)`
/// (`docs/TRAINING.md`, section 9); `domain` is "init", "shuffle" or "split".
#[pyfunction]
pub fn permutation(seed: AnyInt, domain: &str, index: AnyInt, n: AnyInt) -> PyResult<Vec<usize>> {
    use nxrs_core::rng::{Domain, Stream};
    let seed = seed.to_i64("seed", InputError::new_err)?;
    let index = count(&index, "index", 0, InputError::new_err)? as u64;
    let n = count(&n, "n", 0, InputError::new_err)?;
    let domain = match domain {
        "init" => Domain::Init,
        "shuffle" => Domain::Shuffle,
        "split" => Domain::Split,
        other => {
            return Err(PyValueError::new_err(format!(
                "domain {other:?} is not known (known: 'init', 'shuffle', 'split')"
            )))
        }
    };
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n <= nxrs_core::dataset::MAX_CELLS)
        .ok_or_else(|| {
            InputError::new_err(format!(
                "n = {n} is more than {} items",
                nxrs_core::dataset::MAX_CELLS
            ))
        })?;
    Ok(Stream::new(seed, domain, index).permutation(n))
}
