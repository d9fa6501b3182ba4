//! `nxrs.Trainer`: the core trainer behind a Python class.

use crate::errors::{to_py, InputError};
use crate::paths::path_arg;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use nxrs_core::adam::AdamConfig;
use nxrs_core::dataset::Dataset;
use nxrs_core::nxck;
use nxrs_core::{Trainer, TrainerConfig, F32};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

/// Steps run between two checks for Ctrl-C while training with the GIL released.
const STEPS_PER_SIGNAL_CHECK: usize = 4096;

fn f32_of(x: f64) -> F32 {
    F32::from_f64_bits(x.to_bits())
}

pub(crate) fn float_of(x: F32) -> f64 {
    f64::from(f32::from_bits(x.to_bits()))
}

/// binary32 cells as native f32 values: the same bits (a copy, no arithmetic).
fn floats(cells: &[F32]) -> Vec<f32> {
    bytemuck::cast_slice(cells).to_vec()
}

/// The cells of a float32 array of any layout (strided views included), in logical order.
fn cells<'a>(x: impl IntoIterator<Item = &'a f32>) -> Vec<F32> {
    x.into_iter().map(|v| F32::from_bits(v.to_bits())).collect()
}

fn label(y: i64, classes: usize) -> PyResult<usize> {
    usize::try_from(y)
        .ok()
        .filter(|&l| l < classes)
        .ok_or_else(|| InputError::new_err(format!("label {y} is outside 0..{classes}")))
}

/// Bit-reproducible MLP training with Adam, on softf32.
#[pyclass(module = "nxrs", name = "Trainer")]
pub struct PyTrainer {
    inner: Trainer,
}

impl PyTrainer {
    pub(crate) fn from_core(inner: Trainer) -> PyTrainer {
        PyTrainer { inner }
    }
}

#[pymethods]
impl PyTrainer {
    #[new]
    #[pyo3(signature = (seed = 1, *, sizes = vec![6, 10, 4], lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8))]
    fn new(
        seed: i64,
        sizes: Vec<usize>,
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
    ) -> PyResult<Self> {
        let config = TrainerConfig {
            sizes,
            adam: AdamConfig {
                lr: f32_of(lr),
                beta1: f32_of(beta1),
                beta2: f32_of(beta2),
                eps: f32_of(eps),
            },
        };
        let inner = Trainer::new(&config, seed).map_err(to_py)?;
        Ok(PyTrainer { inner })
    }

    /// One Adam step on one sample; returns the sample's loss before the update.
    fn step(&mut self, py: Python<'_>, x: PyReadonlyArray1<'_, f32>, y: i64) -> PyResult<f64> {
        let x = cells(x.as_array());
        let y = label(y, self.inner.mlp().classes())?;
        let inner = &mut self.inner;
        let loss = py.detach(|| inner.step(&x, y)).map_err(to_py)?;
        Ok(float_of(loss))
    }

    /// Trains whole epochs over (x, y), every sample in order, until `epoch` epochs are done.
    fn train_until(
        &mut self,
        py: Python<'_>,
        x: PyReadonlyArray2<'_, f32>,
        y: PyReadonlyArray1<'_, i64>,
        epoch: i64,
    ) -> PyResult<()> {
        let classes = self.inner.mlp().classes();
        let labels = y
            .as_array()
            .iter()
            .map(|&l| label(l, classes))
            .collect::<PyResult<Vec<_>>>()?;
        let data = Dataset::new(x.shape()[1], cells(x.as_array()), labels).map_err(to_py)?;
        // Whole epochs in chunks, with the GIL released; Ctrl-C is honoured between chunks.
        let epochs_per_chunk = (STEPS_PER_SIGNAL_CHECK / data.len().max(1)).max(1) as i64;
        while self.inner.state().epoch < epoch {
            let target = epoch.min(self.inner.state().epoch.saturating_add(epochs_per_chunk));
            let inner = &mut self.inner;
            py.detach(|| inner.train_until(&data, target))
                .map_err(to_py)?;
            py.check_signals()?;
        }
        Ok(())
    }

    /// Writes the whole training state to `path`, crash-safely: a temporary file in the same
    /// directory, fsync, rename over `path`, fsync of the directory. "v2" (the default) is the
    /// self-describing, checksummed format; "v1" is the seed program's layout.
    #[pyo3(signature = (path, *, format = "v2"))]
    fn save(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
        format: &str,
    ) -> PyResult<()> {
        let save = match format {
            "v1" => nxck::v1::save,
            "v2" => nxck::v2::save,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown checkpoint format {other:?} (known: 'v1', 'v2')"
                )))
            }
        };
        let inner = &self.inner;
        py.detach(|| save(inner, &path)).map_err(to_py)
    }

    /// A trainer rebuilt from a checkpoint, all checksums verified. A v2 file carries its own
    /// configuration; a v1 file has none and is read as the seed model with the default
    /// hyperparameters (for another model, build the trainer and call `restore`).
    #[classmethod]
    fn load(
        _cls: &Bound<'_, pyo3::types::PyType>,
        py: Python<'_>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
    ) -> PyResult<Self> {
        let inner = py.detach(|| nxck::load_trainer(&path)).map_err(to_py)?;
        Ok(PyTrainer { inner })
    }

    /// Replaces this trainer's whole state with the checkpoint's (v1 or v2; a v2 file must hold
    /// this trainer's configuration). On any error nothing changes.
    fn restore(
        &mut self,
        py: Python<'_>,
        #[pyo3(from_py_with = path_arg)] path: PathBuf,
    ) -> PyResult<()> {
        let inner = &mut self.inner;
        py.detach(|| nxck::restore(inner, &path)).map_err(to_py)
    }

    /// The seed program's state hash (`hstate`) of the weights.
    fn hash(&self) -> u64 {
        self.inner.seed_hash()
    }

    /// A 64-bit hash of the whole state: weights, Adam moments, epoch and bias-correction powers.
    fn state_hash(&self) -> u64 {
        self.inner.state_hash()
    }

    /// Copies of every tensor of the state, by name, in checkpoint order.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        let state = self.inner.state();
        let shapes = nxck::model_tensors(self.inner.mlp());
        for ((name, cells), (_, shape)) in state.tensors().into_iter().zip(shapes) {
            // Weight matrices (and their moments) come out as (outputs, inputs).
            let array = PyArray1::from_vec(py, floats(cells)).reshape(shape)?;
            dict.set_item(name, array)?;
        }
        Ok(dict)
    }

    /// Completed epochs.
    #[getter]
    fn epoch(&self) -> i64 {
        self.inner.state().epoch
    }

    /// `beta1^t` after `t` steps (a running product, as the seed keeps it).
    #[getter]
    fn b1t(&self) -> f64 {
        float_of(self.inner.state().b1t)
    }

    /// `beta2^t` after `t` steps.
    #[getter]
    fn b2t(&self) -> f64 {
        float_of(self.inner.state().b2t)
    }

    /// Layer sizes, inputs first.
    #[getter]
    fn sizes(&self) -> Vec<usize> {
        self.inner.mlp().sizes().to_vec()
    }

    /// Adam's hyperparameters as binary32 values: lr, beta1, beta2, eps.
    #[getter]
    fn hyperparameters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (name, value) in self.inner.config().adam.named() {
            dict.set_item(name, float_of(value))?;
        }
        Ok(dict)
    }

    fn __repr__(&self) -> String {
        format!(
            "Trainer(sizes={:?}, epoch={}, state_hash={:#018x})",
            self.inner.mlp().sizes(),
            self.inner.state().epoch,
            self.inner.state_hash()
        )
    }
}

/// Features (samples, features) and labels (samples,), as numpy arrays.
type Samples<'py> = (Bound<'py, numpy::PyArray2<f32>>, Bound<'py, PyArray1<i64>>);

/// The seed's synthetic dataset as (x float32 (samples, features), y int64 (samples,)).
#[pyfunction]
#[pyo3(signature = (samples = 8, features = 6, classes = 4))]
pub fn seed_dataset(
    py: Python<'_>,
    samples: usize,
    features: usize,
    classes: usize,
) -> PyResult<Samples<'_>> {
    if features == 0 || classes == 0 {
        return Err(InputError::new_err("features and classes must be positive"));
    }
    let data = Dataset::seed(samples, features, classes);
    let x = floats(data.inputs());
    let y: Vec<i64> = data.labels().iter().map(|&l| l as i64).collect();
    let x = PyArray1::from_vec(py, x).reshape([samples, features])?;
    Ok((x, PyArray1::from_vec(py, y)))
}
