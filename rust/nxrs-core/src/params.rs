//! A model's parameter tensors, two per layer that has any (`W b` or `gamma beta`), and anything
//! shaped like them: gradients, optimiser moments.

use crate::arith::Real;
use crate::softf32::F32;

/// One layer's parameters (or anything shaped like them: gradients, optimiser moments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer<R = F32> {
    /// `outputs x inputs`, row-major (or `gamma`).
    pub w: Vec<R>,
    /// (Or `beta`.)
    pub b: Vec<R>,
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
