//! Inference and evaluation: the model's outputs, its predictions, its loss on data. Each
//! reads the trainer (with the GIL released) and changes nothing.

use super::{float_of, floats, PyTrainer};
use crate::errors::to_py;
use numpy::{PyArray1, PyArrayMethods};
use nxrs_core::loss::{argmax, Loss};
use nxrs_core::samples::Rows;
use pyo3::prelude::*;

impl PyTrainer {
    /// `predict_proba`: probabilities (cross-entropy) or values (mse), float32 (N, n_out), or
    /// a sequence model's (N, T, classes).
    pub(super) fn outputs<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (cells, n) = self.features(py, x)?;
        let (per_token, per_sample, classes) = self.scored(py);
        let out = self.compute(py, |t| t.predict(&cells)).map_err(to_py)?;
        let out = PyArray1::from_vec(py, floats(&out));
        Ok(match per_token {
            false => out.reshape([n, classes])?.into_any(),
            true => out.reshape([n, per_sample, classes])?.into_any(),
        })
    }

    /// `predict`: class indices (int64, (N,), or a sequence model's (N, T)) for cross-entropy;
    /// the outputs for mse.
    pub(super) fn predictions<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (cells, n) = self.features(py, x)?;
        let (loss, _, outputs) = self.shape(py);
        let (per_token, per_sample, classes) = self.scored(py);
        let (out, math) = self
            .compute(py, |t| t.predict(&cells).map(|out| (out, t.config().math)))
            .map_err(to_py)?;
        match loss {
            Loss::CrossEntropy => {
                let labels: Vec<i64> = out
                    .chunks(classes)
                    .map(|p| argmax(math, p) as i64)
                    .collect();
                let labels = PyArray1::from_vec(py, labels);
                Ok(match per_token {
                    false => labels.into_any(),
                    true => labels.reshape([n, per_sample])?.into_any(),
                })
            }
            Loss::Mse => Ok(PyArray1::from_vec(py, floats(&out))
                .reshape([n, outputs])?
                .into_any()),
        }
    }

    /// Whether the model scores its outputs token by token, the labels a sample is scored by
    /// (a sequence model's one per token, else one) and the outputs each scores.
    fn scored(&self, py: Python<'_>) -> (bool, usize, usize) {
        self.read(py, |t| {
            let model = t.model();
            (
                model.per_token(),
                model.labels_per_sample(),
                model.classes(),
            )
        })
    }

    /// `evaluate`: `(loss, accuracy)` on `(x, y)`; accuracy None for mse.
    pub(super) fn loss_on(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<(f64, Option<f64>)> {
        let data = self.dataset(py, x, y, Rows::Many)?;
        let e = self.compute(py, |t| t.evaluate(&data)).map_err(to_py)?;
        Ok((float_of(e.loss), e.accuracy()))
    }
}
