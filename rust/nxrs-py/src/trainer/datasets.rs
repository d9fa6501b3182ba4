//! Data for a trainer: `(x, y)` converted and checked once (`nxrs.Dataset`), one sample, the
//! features of inference, and the seed's data set and permutations.

use super::{floats, PyTrainer};
use crate::errors::{to_py, InputError};
use crate::inputs::{self, count, AnyInt};
use numpy::{PyArray1, PyArrayMethods};
use nxrs_core::dataset::Dataset;
use nxrs_core::digest;
use nxrs_core::loss::Loss;
use nxrs_core::samples::{check_inference_features, Rows};
use nxrs_core::F32;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Training data converted and checked once for a trainer (`Trainer._dataset`).
#[pyclass(module = "nxrs", name = "Dataset", frozen)]
pub struct PyDataset {
    pub(super) inner: Dataset,
}

#[pymethods]
impl PyDataset {
    /// The data's FNV-1a fingerprint as 16 lowercase hex digits (features' bits, labels or
    /// targets, shapes).
    #[getter]
    fn fingerprint(&self) -> String {
        format!("{:016x}", self.inner.fingerprint())
    }

    /// The SHA-256 digest (64 hex digits) of the data as nxrs trains on it
    /// (`docs/TRAINING.md` section 16).
    #[getter]
    fn digest(&self) -> String {
        digest::hex(&digest::data_part_digest(&self.inner))
    }

    /// Number of features per sample.
    #[getter]
    fn features(&self) -> usize {
        self.inner.features()
    }

    /// Whether this is a token stream's windows (`Trainer._stream`).
    #[getter]
    fn is_stream(&self) -> bool {
        self.inner.is_stream()
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

/// The digest of a run's data (64 hex digits) from its parts: the training data, and the
/// validation and test data when the run has them (`docs/TRAINING.md` section 16).
#[pyfunction]
#[pyo3(signature = (train, validation = None, test = None))]
pub fn _data_digest(
    train: PyRef<'_, PyDataset>,
    validation: Option<PyRef<'_, PyDataset>>,
    test: Option<PyRef<'_, PyDataset>>,
) -> String {
    let part = |d: &PyDataset| digest::data_part_digest(&d.inner);
    digest::hex(&digest::data_digest(&[
        Some(part(&train)),
        validation.as_deref().map(part),
        test.as_deref().map(part),
    ]))
}

impl PyTrainer {
    /// The model's loss and its numbers of inputs and outputs (fixed for a trainer's lifetime).
    pub(super) fn shape(&self, py: Python<'_>) -> (Loss, usize, usize) {
        self.read(py, |t| {
            (t.config().loss, t.model().inputs(), t.model().outputs())
        })
    }

    /// `(x, y)` as a data set for this model, every input rule checked (the shapes by the
    /// core's `Rows`, the values by its `Dataset`).
    pub(super) fn dataset(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
        rows: Rows,
    ) -> PyResult<Dataset> {
        let (cells, features) = self.samples(py, x, rows)?;
        let (loss, target_ndims, label_ndim) = self.read(py, |t| {
            let model = t.model();
            (
                t.config().loss,
                rows.target_ndims(model),
                rows.label_ndim(model),
            )
        });
        let (classes, per_sample) =
            self.read(py, |t| (t.model().classes(), t.model().labels_per_sample()));
        let data = match loss {
            Loss::CrossEntropy => {
                let labels = inputs::labels(y, label_ndim)?;
                Dataset::with_labels(features, classes, cells, &labels, per_sample)
            }
            Loss::Mse => {
                let (values, shape) = inputs::targets(y, &target_ndims)?;
                Dataset::regression(features, cells, rows.targets_per_sample(&shape), values)
            }
        }
        .map_err(to_py)?;
        self.read(py, |t| t.check_data(&data)).map_err(to_py)?;
        Ok(data)
    }

    /// Samples' cells read by the core's rules for `rows`: the cells and the features per
    /// sample.
    fn samples(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        rows: Rows,
    ) -> PyResult<(Vec<F32>, usize)> {
        let (ndims, ids) = self.read(py, |t| {
            (rows.feature_ndims(t.model()), t.model().tokens().is_some())
        });
        let (cells, shape) = inputs::features(x, &ndims, ids)?;
        let features = self
            .read(py, |t| rows.features_per_sample(t.model(), &shape))
            .map_err(to_py)?;
        Ok((cells, features))
    }

    /// Features for inference: a batch of samples (flat or shaped), the model's feature count,
    /// finite, not empty.
    pub(super) fn features(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
    ) -> PyResult<(Vec<F32>, usize)> {
        let (cells, features) = self.samples(py, x, Rows::Many)?;
        let n = cells.len().checked_div(features).unwrap_or(0);
        // The dataset's checks (size, finiteness), with placeholder labels.
        let data = Dataset::new(features, 1, cells, &vec![0u8; n]).map_err(to_py)?;
        self.read(py, |t| {
            check_inference_features(t.model(), data.features())?;
            t.model().check_token_ids(data.inputs(), false)
        })
        .map_err(to_py)?;
        Ok((data.inputs().to_vec(), n))
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
