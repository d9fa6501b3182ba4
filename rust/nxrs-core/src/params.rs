//! A model's parameter tensors, two per layer that has any (`W b` or `gamma beta`; the second
//! empty in a layer without biases), and anything shaped like them: gradients, optimiser moments.

use crate::arith::Real;
use crate::softf32::F32;

/// One layer's parameters (or anything shaped like them: gradients, optimiser moments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer<R = F32> {
    /// `outputs x inputs`, row-major (or `gamma`).
    pub w: Vec<R>,
    /// (Or `beta`.) Empty in a layer without biases (section 15.7): no tensor of the state.
    pub b: Vec<R>,
}

impl<R> Layer<R> {
    /// The layer's tensors in the state's order: `w`, then `b` when the layer has biases.
    pub fn tensors(&self) -> impl Iterator<Item = &[R]> {
        [&self.w[..], &self.b[..]]
            .into_iter()
            .enumerate()
            .filter(|(k, t)| *k == 0 || !t.is_empty())
            .map(|(_, t)| t)
    }

    /// [`Layer::tensors`], to write: a layer without biases is one whose `b` is empty here.
    pub fn tensors_mut(&mut self) -> impl Iterator<Item = &mut Vec<R>> {
        let has_b = !self.b.is_empty();
        [Some(&mut self.w), has_b.then_some(&mut self.b)]
            .into_iter()
            .flatten()
    }
}

/// `n` zeros (+0). Where +0 is the all-zero bit pattern (binary32, so every `Real` nxrs has),
/// the allocation is zeroed (`calloc`): a large one is fresh pages that cost nothing until
/// first written, where `vec![R::ZERO; n]` writes every cell (`R` not being a primitive that
/// `vec!` knows to `calloc`). A trainer's transposed weights are such zeros until its first
/// step, so a trainer built from a loaded state does not write a third of its size for them.
pub(crate) fn zeros<R: Real>(n: usize) -> Vec<R> {
    if bytemuck::bytes_of(&R::ZERO).iter().all(|&b| b == 0) {
        bytemuck::zeroed_vec(n)
    } else {
        vec![R::ZERO; n]
    }
}
