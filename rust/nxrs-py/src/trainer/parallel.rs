//! Data-parallel primitives (`nxrs.distributed`): the current batch's gradient blocks, one
//! block's sums, a worker following its driver's parameters, and the step taken from blocks.

use super::training::PyRunChunk;
use super::{floats, PyTrainer};
use crate::errors::{to_py, InputError};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArrayDyn};
use nxrs_core::dataset::Dataset;
use nxrs_core::params::Layer;
use nxrs_core::trainer::BlockGradient;
use nxrs_core::F32;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// A gradient block as Python passes it back: the sums (W1, b1, ...), each sample's loss, the
/// samples classified correctly, and the block's BatchNorm statistics.
pub(super) type BlockArrays<'py> = (
    Vec<PyReadonlyArrayDyn<'py, f32>>,
    PyReadonlyArray1<'py, f32>,
    usize,
    Vec<PyReadonlyArray1<'py, f32>>,
);

impl PyTrainer {
    /// `_batch_blocks`: each gradient block's sample indices into `data`, in order.
    pub(super) fn batch_blocks(&self, py: Python<'_>, data: &Dataset) -> PyResult<Vec<Vec<usize>>> {
        self.read(py, |t| t.batch_blocks(data)).map_err(to_py)
    }

    /// `_block_gradient`: one block at the current parameters, the GIL released; the block
    /// starts at position `first_sample` of its batch.
    pub(super) fn block_gradient<'py>(
        &self,
        py: Python<'py>,
        data: &Dataset,
        samples: Vec<usize>,
        first_sample: usize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (block, shapes) = self
            .compute(py, |t| {
                let shapes: Vec<Vec<usize>> = t
                    .model()
                    .param_specs()
                    .into_iter()
                    .flatten()
                    .map(|(_, shape)| shape)
                    .collect();
                t.block_gradient(data, &samples, first_sample)
                    .map(|block| (block, shapes))
            })
            .map_err(to_py)?;
        let sums = PyList::empty(py);
        for (tensor, shape) in block.grads.iter().flat_map(Layer::tensors).zip(shapes) {
            sums.append(PyArray1::from_vec(py, floats(tensor)).reshape(shape)?)?;
        }
        let losses = PyArray1::from_vec(py, floats(&block.losses));
        let statistics = PyList::empty(py);
        for s in &block.statistics {
            statistics.append(PyArray1::from_vec(py, floats(s)))?;
        }
        (sums, losses, block.correct, statistics).into_pyobject(py)
    }

    /// `_set_params`: the weights and biases and the step count replaced (bit for bit),
    /// nothing else.
    pub(super) fn replace_params(
        &self,
        py: Python<'_>,
        arrays: Vec<PyReadonlyArrayDyn<'_, f32>>,
        step: i64,
    ) -> PyResult<()> {
        let claim = self.claim("_set_params")?;
        let layers = self.read(py, |t| tensors_per_layer(t.model()));
        let params = layers_of(&arrays, &layers, "the parameters")?;
        self.compute_mut(py, &claim, |t| t.set_params(params, step))
            .map_err(to_py)
    }

    /// `_apply_blocks`: the current batch's step from its blocks, as `_run` takes it.
    pub(super) fn apply_blocks(
        &self,
        py: Python<'_>,
        data: &Dataset,
        blocks: Vec<BlockArrays<'_>>,
    ) -> PyResult<PyRunChunk> {
        let claim = self.claim("_apply_blocks")?;
        let layers = self.read(py, |t| tensors_per_layer(t.model()));
        let blocks = blocks
            .iter()
            .map(|(sums, losses, correct, statistics)| {
                Ok(BlockGradient {
                    grads: layers_of(sums, &layers, "a gradient block")?,
                    losses: bits_of(losses.as_array().iter()),
                    correct: *correct,
                    statistics: statistics
                        .iter()
                        .map(|s| bits_of(s.as_array().iter()))
                        .collect(),
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let (step, end) = self
            .compute_mut(py, &claim, |t| t.apply_blocks(data, &blocks))
            .map_err(to_py)?;
        let ended: Vec<_> = end.into_iter().collect();
        PyRunChunk::of(py, &ended, 1, Some(step.loss))
    }
}

/// How many parameter tensors each layer with parameters has (2, or 1 without biases).
fn tensors_per_layer(model: &nxrs_core::model::Model) -> Vec<usize> {
    model.param_specs().iter().map(Vec::len).collect()
}

/// Arrays in tensor order (W1, b1, W2, b2, ...) as the layers of a model whose layers have
/// `layers` tensors each, bit for bit; `what` names them in the error when the count is wrong
/// (shapes are checked by the core, which knows the model).
fn layers_of(
    arrays: &[PyReadonlyArrayDyn<'_, f32>],
    layers: &[usize],
    what: &str,
) -> PyResult<Vec<Layer>> {
    let count: usize = layers.iter().sum();
    if arrays.len() != count {
        return Err(InputError::new_err(format!(
            "{what} of this model is {count} arrays (W1, b1, ...), not {}",
            arrays.len()
        )));
    }
    let mut arrays = arrays.iter().map(|a| bits_of(a.as_array().iter()));
    Ok(layers
        .iter()
        .map(|&n| Layer {
            w: arrays.next().unwrap_or_default(),
            b: if n == 2 {
                arrays.next().unwrap_or_default()
            } else {
                Vec::new()
            },
        })
        .collect())
}

/// float32 values' bit patterns as cells (no arithmetic: NaN payloads and signed zeros kept).
fn bits_of<'a>(values: impl Iterator<Item = &'a f32>) -> Vec<F32> {
    values.map(|x| F32::from_bits(x.to_bits())).collect()
}
