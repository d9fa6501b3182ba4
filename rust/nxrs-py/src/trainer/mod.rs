//! `nxrs._nxrs._Trainer`: the core trainer behind a Python class (`nxrs.Trainer`, in
//! `python/nxrs/_trainer.py`, subclasses it and adds what is orchestration: `fit`, the
//! conversions of `nxrs.interop`, pickling and copying).
//!
//! This module holds the class, its locks and claims, and its one `#[pymethods]` block, the
//! list of what Python sees; the methods' bodies live by concern in [`datasets`] (data
//! converted for a trainer), [`training`] (the GIL-chunked loop), [`parallel`] (data-parallel
//! primitives), [`inference`] and [`persistence`] (checkpoints, bytes, copies).

mod datasets;
mod inference;
mod parallel;
mod persistence;
mod training;

pub(crate) use training::CHUNK;

pub use datasets::{_data_digest, permutation, seed_dataset, PyDataset};
use nxrs_core::samples::Rows;
pub use training::{PyEpochEnd, PyRunChunk};

use crate::checkpoint::PyCheckpoint;
use crate::errors::{to_py, BusyError, ConfigError, InputError};
use crate::inputs::{count, AnyInt};
use crate::options::{config_dict, trainer_options};
use crate::paths::path_arg;
use crate::snapshot::PySnapshot;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn};
use nxrs_core::backend::{self, BackendChoice, Isa};
use nxrs_core::checkpoint::Snapshot;
use nxrs_core::config::{Family, TrainerConfig, Value};
use nxrs_core::digest;
use nxrs_core::state::TrainState;
use nxrs_core::threads::{Threads, MAX_THREADS};
use nxrs_core::trainer::Limits;
use nxrs_core::trainer::Until;
use nxrs_core::{Trainer, F32};
use parallel::BlockArrays;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use pyo3::exceptions::PyRuntimeWarning;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple, PyType};
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread::ThreadId;
use training::{seconds, Training};

pub(crate) fn float_of(x: F32) -> f64 {
    f64::from(f32::from_bits(x.to_bits()))
}

/// binary32 cells as native f32 values: the same bits (a copy, no arithmetic).
fn floats(cells: &[F32]) -> Vec<f32> {
    bytemuck::cast_slice(cells).to_vec()
}

/// Bit-reproducible MLP training on softf32: the compiled part of `nxrs.Trainer` (which
/// documents it, in `python/nxrs/_trainer.py`).
///
/// Subclassing. `nxrs.Trainer` is a Python subclass adding no slots (`__slots__ = ()`), so
/// the methods here are its own methods, called without a Python layer in between. The
/// class methods that build a trainer (`load`, `from_bytes`, `seed_model`, `_from_checkpoint`,
/// `_copy`) give an instance of the class they are called on ([`PyTrainer::into_instance`]).
///
/// Threads. The class is `frozen`: PyO3 never borrows it mutably, so no call fails with
/// "Already borrowed". The trainer sits behind an `RwLock` instead, under two rules that keep
/// it and the GIL from deadlocking: a thread holding the GIL only ever *tries* the lock (it
/// blocks on it only with the GIL released), and nothing holding the lock takes the GIL.
/// Training holds the write lock for one chunk of steps at a time (`training::CHUNK`) and then
/// hands it to the threads waiting for it (a fair unlock: the training thread cannot take it
/// back first), so a reader in another thread (`steps`, `config`, `predict`, `to_bytes`, ...)
/// waits at most one chunk and sees the state between two steps. A call that changes the trainer also *claims*
/// it for its whole duration (`fit` for its whole run, through [`PyClaim`]): a second such
/// call from another thread meanwhile is a `BusyError`, so nothing changes a run's state
/// between its chunks, and a reader can never make a writer fail.
#[pyclass(module = "nxrs._nxrs", name = "_Trainer", frozen, subclass)]
pub struct PyTrainer {
    inner: RwLock<Trainer>,
    owner: Mutex<Option<Owner>>,
}

/// The thread changing a trainer: in which call, and how deeply its claims nest (`fit` calls
/// `_run`, `restore` and `evaluate` on the same thread).
struct Owner {
    thread: ThreadId,
    /// A method's name; a call implemented in Python (`fit`) names itself.
    call: Cow<'static, str>,
    depth: usize,
}

/// A claim on a trainer ([`PyTrainer::claim`]), released when dropped. Changing the trainer
/// ([`PyTrainer::compute_mut`]) takes one, so only a claimed call can.
struct Claim<'a> {
    owner: &'a Mutex<Option<Owner>>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        release(self.owner);
    }
}

/// Ends one claim of the thread holding `owner`'s claims.
fn release(owner: &Mutex<Option<Owner>>) {
    let mut owner = owner.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(o) = owner.as_mut() {
        o.depth -= 1;
        if o.depth == 0 {
            *owner = None;
        }
    }
}

/// A claim held by Python code for a call implemented in Python (`with trainer._claim("fit"):`
/// in `nxrs.Trainer.fit`), released on leaving the `with` block (or when collected).
#[pyclass(module = "nxrs._nxrs", name = "_Claim", frozen)]
pub struct PyClaim {
    trainer: Py<PyTrainer>,
    held: AtomicBool,
}

impl PyClaim {
    fn end(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            release(&self.trainer.get().owner);
        }
    }
}

impl Drop for PyClaim {
    fn drop(&mut self) {
        self.end();
    }
}

#[pymethods]
impl PyClaim {
    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) {
        self.end();
    }
}

impl PyTrainer {
    fn wrap(inner: Trainer) -> PyTrainer {
        PyTrainer {
            inner: RwLock::new(inner),
            owner: Mutex::new(None),
        }
    }

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
        Ok(PyTrainer::wrap(inner))
    }

    /// This trainer as a new object of class `cls`: this class, or a subclass of it defined
    /// in Python (`nxrs.Trainer`). PyO3 allocates objects of the `#[pyclass]` itself only
    /// (outside `#[new]`), so a subclass's instance is made by assigning `__class__`, which
    /// CPython allows between classes of one layout (a subclass adding no slots) and checks
    /// (TypeError otherwise).
    fn into_instance<'py>(self, cls: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyTrainer>> {
        let py = cls.py();
        let object = Bound::new(py, self)?;
        if !cls.is(py.get_type::<PyTrainer>()) {
            object.setattr(intern!(py, "__class__"), cls)?;
        }
        Ok(object)
    }

    /// Claims the trainer for `call` (a method's name) on this thread until the claim is
    /// dropped: BusyError when another thread holds a claim. Claims nest on one thread.
    fn claim(&self, call: &'static str) -> PyResult<Claim<'_>> {
        self.acquire(Cow::Borrowed(call))?;
        Ok(Claim { owner: &self.owner })
    }

    /// Takes one claim for `call` (see [`PyTrainer::claim`]); [`release`] ends it.
    fn acquire(&self, call: Cow<'static, str>) -> PyResult<()> {
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
        Ok(())
    }

    /// `f` with shared access to the trainer: with the GIL held when the trainer is free, else
    /// after the chunk of steps in progress, waiting with the GIL released. For quick reads.
    fn read<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&Trainer) -> R + Send) -> R {
        match self.inner.try_read() {
            Some(trainer) => f(&trainer),
            None => py.detach(|| f(&self.read_lock())),
        }
    }

    /// `f` with shared access to the trainer, the GIL released: for computations (predict,
    /// evaluate, save, ...).
    fn compute<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&Trainer) -> R + Send) -> R {
        py.detach(|| f(&self.read_lock()))
    }

    /// `f` with exclusive access to the trainer, the GIL released, under `claim`; the lock is
    /// then handed to the threads waiting for it (see [`PyTrainer`]).
    fn compute_mut<R: Send>(
        &self,
        py: Python<'_>,
        _claim: &Claim<'_>,
        f: impl FnOnce(&mut Trainer) -> R + Send,
    ) -> R {
        py.detach(|| {
            let mut trainer = self.inner.write();
            let out = f(&mut trainer);
            RwLockWriteGuard::unlock_fair(trainer);
            out
        })
    }

    /// The read lock, blocking: only with the GIL released (see [`PyTrainer`]). A panic while
    /// training (a defect) releases the lock with the state as it was when the panic happened.
    fn read_lock(&self) -> RwLockReadGuard<'_, Trainer> {
        self.inner.read()
    }
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

/// The vector instructions the hardware backend computes with in this process: "avx512",
/// "avx2" or "portable" (the widest the CPU has, or the environment variable `NXRS_ISA`'s
/// choice), or None where the hardware backend is unavailable.
#[pyfunction]
pub fn hardware_isa() -> Option<&'static str> {
    backend::hardware().ok()?;
    Isa::active().ok().map(Isa::name)
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

/// What Python sees of `_Trainer`: each method's signature and a one-line body (a read of
/// the trainer, or a call into the module of its concern).
#[pymethods]
impl PyTrainer {
    /// `Trainer(layers=None, **options)`: every keyword but `backend` and `threads` is a setting
    /// of the configuration schema (`nxrs.config_schema()`); the signature lists them for
    /// `help` and `inspect.signature` (a test checks it against the schema).
    #[new]
    #[pyo3(
        signature = (layers = None, **options),
        text_signature = "(layers=None, *, seed=None, sizes=None, loss=None, math=None, \
            init=None, optimizer=None, lr=None, beta1=None, beta2=None, eps=None, \
            weight_decay=None, decay_params=None, momentum=None, schedule=None, \
            warmup_steps=None, total_steps=None, step_size=None, gamma=None, min_lr=None, \
            clip_norm=None, batch_size=None, grad_block=None, shuffle=None, drop_last=None, \
            backend=None, threads=None)"
    )]
    fn new(
        py: Python<'_>,
        layers: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let options = trainer_options(layers, options)?;
        let trainer = Trainer::new(options.config).map_err(to_py)?;
        PyTrainer::from_core(py, trainer, options.backend.as_deref(), options.threads)
    }

    /// The seed program's model: `Trainer(seed=seed)`.
    #[classmethod]
    #[pyo3(
        signature = (seed = None, *, backend = None, threads = None),
        text_signature = "(seed=1, *, backend=None, threads=None)"
    )]
    fn seed_model<'py>(
        cls: &Bound<'py, PyType>,
        py: Python<'py>,
        seed: Option<AnyInt>,
        backend: Option<String>,
        threads: Option<AnyInt>,
    ) -> PyResult<Bound<'py, PyTrainer>> {
        let seed = seed.map(|s| s.to_i64("seed", ConfigError::new_err));
        let given: Vec<_> = seed
            .transpose()?
            .map(|s| ("seed", Value::Int(s)))
            .into_iter()
            .collect();
        let config = TrainerConfig::from_settings(Family::SeedModel, &given).map_err(to_py)?;
        let trainer = Trainer::new(config).map_err(to_py)?;
        PyTrainer::from_core(py, trainer, backend.as_deref(), threads)?.into_instance(cls)
    }

    // --- training (the loop: training.rs) --------------------------------------------

    /// One optimiser step on one sample, outside the epoch structure; returns its loss.
    fn step(&self, py: Python<'_>, x: &Bound<'_, PyAny>, y: &Bound<'_, PyAny>) -> PyResult<f64> {
        let claim = self.claim("step")?;
        let data = self.dataset(py, x, y, Rows::One)?;
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
        let data = self.dataset(py, x, y, Rows::Many)?;
        let limits = Training::interactive(Until::Epoch(epoch), false);
        self.train(py, &claim, &data, &limits)?;
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
        let data = self.dataset(py, x, y, Rows::Many)?;
        // Under the claim: no other thread moves the step counter until this call returns.
        let now = self.read(py, |t| t.state().step);
        let limits = Training::interactive(Until::Step(now.saturating_add(steps)), true);
        let chunk = self.train(py, &claim, &data, &limits)?;
        Ok(chunk.losses.into_iter().map(float_of).collect())
    }

    /// Claims the trainer for `call`, a method implemented in Python (`fit`), until the
    /// returned context manager exits: BusyError while another thread changes the trainer.
    fn _claim(slf: &Bound<'_, Self>, call: String) -> PyResult<PyClaim> {
        slf.get().acquire(Cow::Owned(call))?;
        Ok(PyClaim {
            trainer: slf.clone().unbind(),
            held: AtomicBool::new(true),
        })
    }

    /// `(x, y)` converted and checked once, for `_run`.
    fn _dataset(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<PyDataset> {
        Ok(PyDataset {
            inner: self.dataset(py, x, y, Rows::Many)?,
        })
    }

    /// A token stream (1-D integer ids) as a data set of this sequence model's windows
    /// (docs/TRAINING.md section 15.8), checked once, for `_run` and `_stream_windows`.
    fn _stream(&self, py: Python<'_>, tokens: &Bound<'_, PyAny>) -> PyResult<PyDataset> {
        let ids = crate::inputs::labels(tokens, 1)?;
        let inner = self
            .read(py, |t| {
                let model = t.model();
                if !model.per_token() {
                    return Err(nxrs_core::Error::Input(
                        "a token stream trains a model whose output is a sequence scored token \
                         by token (such as nxrs.layers.gpt's)"
                            .into(),
                    ));
                }
                let data = nxrs_core::dataset::Dataset::token_stream(
                    &ids,
                    model.inputs(),
                    model.classes(),
                )?;
                t.check_data(&data)?;
                Ok(data)
            })
            .map_err(to_py)?;
        Ok(PyDataset { inner })
    }

    /// `count` windows of the token stream `dataset`, drawn from the stream of `part` (0 the
    /// training stream's, 1 the validation stream's), as a data set: the same at every call.
    fn _stream_windows(
        &self,
        py: Python<'_>,
        dataset: PyRef<'_, PyDataset>,
        count_: AnyInt,
        part: AnyInt,
    ) -> PyResult<PyDataset> {
        let n = count(&count_, "count", 1, InputError::new_err)? as usize;
        let part = count(&part, "part", 0, InputError::new_err)? as u64;
        let data = &dataset.inner;
        let inner = self
            .read(py, |t| t.stream_windows(data, n, part))
            .map_err(to_py)?;
        Ok(PyDataset { inner })
    }

    /// `(loss, accuracy)` on a data set (`_dataset`'s or `_stream_windows`'); accuracy None
    /// for mse.
    fn _evaluate(
        &self,
        py: Python<'_>,
        dataset: PyRef<'_, PyDataset>,
    ) -> PyResult<(f64, Option<f64>)> {
        let data = &dataset.inner;
        let e = self.compute(py, |t| t.evaluate(data)).map_err(to_py)?;
        Ok((float_of(e.loss), e.accuracy()))
    }

    /// Trains on `dataset` towards `epochs` complete epochs (or, a token stream, towards `steps`
    /// steps in all), returning after at most `max_steps` steps or about `max_seconds` (the GIL
    /// released meanwhile), or with `epoch_end` at the end of an epoch: what it did, as a
    /// `RunChunk`.
    #[pyo3(signature = (dataset, epochs, max_steps = None, max_seconds = None, epoch_end = false, steps = None))]
    #[allow(clippy::too_many_arguments)] // Python's keywords
    fn _run(
        &self,
        py: Python<'_>,
        dataset: PyRef<'_, PyDataset>,
        epochs: AnyInt,
        max_steps: Option<AnyInt>,
        max_seconds: Option<f64>,
        epoch_end: bool,
        steps: Option<AnyInt>,
    ) -> PyResult<PyRunChunk> {
        let epochs = count(&epochs, "epochs", 0, InputError::new_err)?;
        let until = match &steps {
            Some(steps) => Until::Step(count(steps, "steps", 0, InputError::new_err)?),
            None => Until::Epoch(epochs),
        };
        let max_steps = match &max_steps {
            Some(m) => Some(count(m, "max_steps", 1, InputError::new_err)? as u64),
            None => None,
        };
        let limits = Training {
            limits: Limits {
                until,
                max_steps,
                max_time: seconds(max_seconds)?,
                keep_losses: true,
                stop_after_epoch: epoch_end,
            },
            signals: false,
        };
        let claim = self.claim("_run")?;
        let chunk = self.train(py, &claim, &dataset.inner, &limits)?;
        PyRunChunk::of(py, &chunk.epochs, chunk.steps, chunk.losses.last().copied())
    }

    // --- data parallel (parallel.rs) ----------------------------------------------------

    /// The gradient blocks of the batch the state is at: each block's sample indices into
    /// `dataset`, in order (data-parallel training, `nxrs.distributed`).
    fn _batch_blocks(
        &self,
        py: Python<'_>,
        dataset: PyRef<'_, PyDataset>,
    ) -> PyResult<Vec<Vec<usize>>> {
        self.batch_blocks(py, &dataset.inner)
    }

    /// One gradient block at the current parameters, the GIL released, its first sample at
    /// position `first_sample` of its batch: `(sums, losses, correct, statistics)`, the sums as
    /// float32 arrays in tensor order (W1, b1, W2, b2, ...), the statistics the block's
    /// BatchNorm layers' (section 15.2).
    #[pyo3(signature = (dataset, samples, first_sample = 0))]
    fn _block_gradient<'py>(
        &self,
        py: Python<'py>,
        dataset: PyRef<'_, PyDataset>,
        samples: Vec<usize>,
        first_sample: usize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        self.block_gradient(py, &dataset.inner, samples, first_sample)
    }

    /// The parameters as float32 arrays in tensor order (W1, b1, W2, b2, ...): what a
    /// data-parallel worker needs of its driver's state.
    fn _params<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let tensors = self.read(py, |t| {
            let specs = t.model().param_specs().into_iter().flatten();
            let cells = t.state().tensors().into_iter().map(floats);
            specs.zip(cells).collect::<Vec<_>>()
        });
        tensors
            .into_iter()
            .map(|((_, shape), cells)| Ok(PyArray1::from_vec(py, cells).reshape(shape)?.into_any()))
            .collect()
    }

    /// Replaces the weights and biases (float32 arrays in tensor order W1, b1, W2, b2, ...,
    /// taken bit for bit) and the step count, nothing else: a data-parallel worker following
    /// its driver.
    #[pyo3(signature = (arrays, step = 0))]
    fn _set_params(
        &self,
        py: Python<'_>,
        arrays: Vec<PyReadonlyArrayDyn<'_, f32>>,
        step: i64,
    ) -> PyResult<()> {
        self.replace_params(py, arrays, step)
    }

    /// Takes the current batch's step from its blocks (`_block_gradient`'s results, in the
    /// order of `_batch_blocks`), as `_run` would: the `RunChunk` of that one step.
    fn _apply_blocks<'py>(
        &self,
        py: Python<'py>,
        dataset: PyRef<'_, PyDataset>,
        blocks: Vec<BlockArrays<'py>>,
    ) -> PyResult<PyRunChunk> {
        self.apply_blocks(py, &dataset.inner, blocks)
    }

    // --- inference (inference.rs) -------------------------------------------------------

    /// The model's outputs: probabilities (cross-entropy) or values (mse), float32 (N, n_out);
    /// a sequence model's (N, T, classes).
    fn predict_proba<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.outputs(py, x)
    }

    /// Class indices (int64, (N,), a sequence model's (N, T)) for cross-entropy; the outputs
    /// for mse.
    fn predict<'py>(&self, py: Python<'py>, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.predictions(py, x)
    }

    /// The prompt's token ids followed by `max_new_tokens` generated ones (int64), each drawn
    /// from the model's next-token distribution (docs/TRAINING.md section 15.9).
    #[pyo3(
        signature = (prompt, max_new_tokens, *, temperature = 1.0, top_k = None, seed = AnyInt::new(0)),
        text_signature = "(self, /, prompt, max_new_tokens, *, temperature=1.0, top_k=None, seed=0)"
    )]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt: &Bound<'py, PyAny>,
        max_new_tokens: AnyInt,
        temperature: f64,
        top_k: Option<AnyInt>,
        seed: AnyInt,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        self.generated(py, prompt, max_new_tokens, temperature, top_k, seed)
    }

    /// `(loss, accuracy)` on `(x, y)`; accuracy None for mse.
    fn evaluate(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<(f64, Option<f64>)> {
        self.loss_on(py, x, y)
    }

    // --- persistence (persistence.rs) ---------------------------------------------------

    /// Writes the whole training state to `path`, crash-safely.
    #[pyo3(signature = (path, *, format = "v2", metadata = None))]
    fn save(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
        format: &str,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.save_to(py, &path, format, metadata)
    }

    /// A trainer rebuilt from a checkpoint, all checksums verified.
    #[classmethod]
    #[pyo3(signature = (path, *, backend = None, threads = None))]
    fn load<'py>(
        cls: &Bound<'py, PyType>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
        backend: Option<String>,
        threads: Option<AnyInt>,
    ) -> PyResult<Bound<'py, PyTrainer>> {
        persistence::load(cls, &path, backend.as_deref(), threads)
    }

    /// Replaces this trainer's whole state with the checkpoint's.
    fn restore(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
    ) -> PyResult<()> {
        self.restore_from(py, &path)
    }

    /// The whole state as the bytes of an NXCK v2 file (what `save` writes), for pickling and
    /// sending; `Trainer.from_bytes` reads them back.
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.encoded(py)
    }

    /// A copy of the whole state (no working memory), taken with the GIL released, for a save
    /// in the background (`fit(async_save=True)`; `nxrs._nxrs._Snapshot`): a new one, or
    /// `into` refilled in its own memory (returned).
    #[pyo3(signature = (into = None))]
    fn _snapshot<'py>(
        &self,
        py: Python<'py>,
        into: Option<Bound<'py, PySnapshot>>,
    ) -> PyResult<Bound<'py, PySnapshot>> {
        match into {
            None => Bound::new(py, PySnapshot::new(self.compute(py, Snapshot::of))),
            Some(snapshot) => {
                let target = snapshot.get();
                py.detach(|| target.lock().refill(&self.read_lock()));
                Ok(snapshot)
            }
        }
    }

    /// A trainer rebuilt from checkpoint bytes (v1 or v2), every checksum verified.
    #[classmethod]
    #[pyo3(signature = (data, *, backend = None, threads = None))]
    fn from_bytes<'py>(
        cls: &Bound<'py, PyType>,
        data: &[u8],
        backend: Option<String>,
        threads: Option<AnyInt>,
    ) -> PyResult<Bound<'py, PyTrainer>> {
        persistence::from_bytes(cls, data, backend.as_deref(), threads)
    }

    /// A trainer holding an open checkpoint's configuration and state (`Checkpoint.to_trainer`).
    #[classmethod]
    fn _from_checkpoint<'py>(
        cls: &Bound<'py, PyType>,
        checkpoint: PyRef<'_, PyCheckpoint>,
    ) -> PyResult<Bound<'py, PyTrainer>> {
        persistence::from_checkpoint(cls, &checkpoint)
    }

    /// An independent trainer with the same state, configuration, backend and threads, of
    /// this one's class (`copy.copy`, `copy.deepcopy`).
    fn _copy<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTrainer>> {
        PyTrainer::duplicate(slf)
    }

    /// Restarts this trainer from the parameters `params`, the state's tensors in its order
    /// (`W1, b1, W2, b2, ...`; a layer model's by its tensor names), and the BatchNorm running
    /// statistics `buffers`, `[mean{n}, var{n}, ...]`, when given: the state of a new run (zero
    /// moments, counters 0) with these tensors (`Trainer.from_weights`,
    /// `nxrs.interop.from_torch`).
    #[pyo3(signature = (params, buffers = None))]
    fn _start_from(
        &self,
        py: Python<'_>,
        params: &Bound<'_, PyAny>,
        buffers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.start_from(py, params, buffers)
    }

    // --- reading the state ----------------------------------------------------------------

    /// The seed program's state hash (`hstate`) of the weights.
    fn hash(&self, py: Python<'_>) -> u64 {
        self.read(py, Trainer::seed_hash)
    }

    /// A 64-bit hash of the whole state.
    fn state_hash(&self, py: Python<'_>) -> u64 {
        self.read(py, Trainer::state_hash)
    }

    /// The SHA-256 digest (64 hex digits) of the whole state and the configuration
    /// (`docs/TRAINING.md` section 16): what a run's transcript records.
    fn state_digest(&self, py: Python<'_>) -> String {
        // A pass over the whole state: computed with the GIL released, so that another
        // thread (training, a background save) is not held up by it.
        digest::hex(&self.compute(py, Trainer::state_digest))
    }

    /// The SHA-256 digest (64 hex digits) of the configuration alone.
    fn config_digest(&self, py: Python<'_>) -> String {
        digest::hex(&self.read(py, |t| digest::config_digest(t.config())))
    }

    /// Copies of every tensor of the state, by name, in checkpoint order.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // Copies made under the lock; the arrays are built after it is released.
        let tensors = self.read(py, |t| {
            let second = t.config().optimizer.kind.has_second_moments();
            let layout = TrainState::layout(t.model(), second);
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

    /// Batches (optimiser steps) in one epoch of `samples` samples: the core's rule, for the
    /// plans `fit` writes and the progress it shows.
    fn _batches_per_epoch(&self, py: Python<'_>, samples: usize) -> usize {
        self.read(py, |t| t.config().batches_per_epoch(samples))
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

    /// Layer sizes, inputs first; for layer objects, the cells per sample at every layer
    /// boundary (the input's, then each layer's output's).
    #[getter]
    fn sizes(&self, py: Python<'_>) -> Vec<usize> {
        self.read(py, |t| t.model().sizes())
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

    /// The learning rate of the next step (section 6's `lr_t` at `t = steps`).
    #[getter]
    fn scheduled_lr(&self, py: Python<'_>) -> f64 {
        float_of(self.read(py, |t| {
            let config = t.config();
            config
                .schedule
                .rate(config.optimizer.lr, t.state().step as u64)
        }))
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
                t.model().sizes(),
                t.state().epoch,
                t.state_hash()
            )
        })
    }
}
