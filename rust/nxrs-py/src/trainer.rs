//! `nxrs.Trainer`: the core trainer behind a Python class.

use crate::errors::{to_py, ConfigError, InputError};
use crate::inputs::{self, AnyInt};
use crate::paths::path_arg;
use numpy::{PyArray1, PyArrayMethods};
use nxrs_core::adam::AdamConfig;
use nxrs_core::dataset::Dataset;
use nxrs_core::mlp::layer_sizes;
use nxrs_core::nxck;
use nxrs_core::{Trainer, TrainerConfig, F32};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

/// Steps run between two checks for Ctrl-C while training with the GIL released.
const STEPS_PER_SIGNAL_CHECK: usize = 4096;

pub(crate) fn float_of(x: F32) -> f64 {
    f64::from(f32::from_bits(x.to_bits()))
}

/// binary32 cells as native f32 values: the same bits (a copy, no arithmetic).
fn floats(cells: &[F32]) -> Vec<f32> {
    bytemuck::cast_slice(cells).to_vec()
}

/// Bit-reproducible MLP training with Adam, on softf32. Hyperparameters are rounded to binary32,
/// then checked: lr and eps finite, positive and normal, beta1 and beta2 in [0, 1) (ConfigError).
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
    // Written out: the defaults of AnyInt parameters would show as `...`.
    #[pyo3(
        text_signature = "(seed=1, *, sizes=[6, 10, 4], lr=0.01, beta1=0.9, beta2=0.999, eps=1e-08)"
    )]
    #[pyo3(signature = (
        seed = AnyInt::new(1),
        *,
        sizes = vec![AnyInt::new(6), AnyInt::new(10), AnyInt::new(4)],
        lr = 0.01,
        beta1 = 0.9,
        beta2 = 0.999,
        eps = 1e-8,
    ))]
    fn new(
        seed: AnyInt,
        sizes: Vec<AnyInt>,
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
    ) -> PyResult<Self> {
        let seed = seed.to_i64("seed", ConfigError::new_err)?;
        let sizes = sizes
            .iter()
            .enumerate()
            .map(|(k, n)| n.to_i64(&format!("sizes[{k}]"), ConfigError::new_err))
            .collect::<PyResult<Vec<i64>>>()?;
        let config = TrainerConfig {
            sizes: layer_sizes(&sizes).map_err(to_py)?,
            adam: AdamConfig::from_f64(lr, beta1, beta2, eps).map_err(to_py)?,
        };
        let inner = Trainer::new(&config, seed).map_err(to_py)?;
        Ok(PyTrainer { inner })
    }

    /// One Adam step on one sample; returns the sample's loss before the update. x and y follow
    /// the rules of train_until (1-D features, one integer label).
    fn step(
        &mut self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<f64> {
        let (x, _) = inputs::features(x, 1)?;
        let y = inputs::labels(y, 0)?[0]; // a 0-d array holds one value
        let inner = &mut self.inner;
        let loss = py.detach(|| inner.step(&x, y)).map_err(to_py)?;
        Ok(float_of(loss))
    }

    /// Trains whole epochs over (x, y), every sample in order, until `epoch` epochs are done.
    /// x: float32, or float64 rounded to float32 by numpy; y: any integer dtype, exactly; lists
    /// through numpy.asarray. InputError for other dtypes, shapes, NaN/inf, labels out of range.
    fn train_until(
        &mut self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
        epoch: AnyInt,
    ) -> PyResult<()> {
        let epoch = epoch.to_i64("epoch", InputError::new_err)?;
        let (x, shape) = inputs::features(x, 2)?;
        let y = inputs::labels(y, 1)?;
        let classes = self.inner.mlp().classes();
        let data = Dataset::new(shape[1], classes, x, &y).map_err(to_py)?;
        // Whole epochs in chunks, with the GIL released; Ctrl-C is honoured between chunks.
        let epochs_per_chunk = (STEPS_PER_SIGNAL_CHECK / data.len()).max(1) as i64;
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

/// The seed's synthetic dataset as (x float32 (samples, features), y int64 (samples,)). Sizes at
/// least 1, samples * features at most 2**28 (InputError).
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
    // Labels are below classes <= 2^63 - 1: they fit in i64.
    let y: Vec<i64> = data.labels().iter().map(|&l| l as i64).collect();
    let x = PyArray1::from_vec(py, x).reshape([data.len(), data.features()])?;
    Ok((x, PyArray1::from_vec(py, y)))
}
