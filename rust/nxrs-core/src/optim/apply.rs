//! The optimiser step over a whole model: every parameter tensor updated from its gradient, the
//! cells shared out among threads.

use super::{OptimizerConfig, StepScalars};
use crate::arith::{cells, cells_mut, Real};
use crate::math::Math;
use crate::params::Layer;
use crate::softf32::F32;
use crate::threads::{ranges, split, Threads};

/// An optimiser update's work per cell, in multiply-adds, for sharing cells out among threads.
const CELL_WORK: usize = 16;

impl OptimizerConfig {
    /// Updates every tensor of `params` (`W1, b1, W2, ...`) from the same tensor of `grads`
    /// with this step's scalars, in `R`: [`OptimizerConfig::update`] on each, its moments in
    /// `m` and `v` (`v` empty for SGD, which keeps no second moments), with weight decay for
    /// the tensors `decayed` marks (per layer, its two tensors: `Model::decayed_tensors`). Every tensor's cells are
    /// cut into the same number of parts, part `p` of each tensor going to thread `p`: a cell's
    /// update reads only its own values, so the cut changes no bit.
    #[allow(clippy::too_many_arguments)] // the tensors, the step's scalars and the threads
    pub fn apply<R: Real>(
        &self,
        math: Math,
        scalars: &StepScalars,
        decayed: &[[bool; 2]],
        grads: &[Layer],
        params: &mut [Layer],
        m: &mut [Layer],
        v: &mut [Layer],
        threads: &Threads,
    ) {
        let parameters = grads.iter().map(|g| g.w.len() + g.b.len()).sum();
        let count = threads.parts(parameters, CELL_WORK);
        let threads = if count > 1 {
            threads
        } else {
            &Threads::ONE // too little work for any thread but this one
        };
        let mut second_moments = v.iter_mut();
        let layers = grads.iter().zip(params).zip(m).zip(decayed);
        let tensors = layers.flat_map(|(((grad, p), m), &[decays_w, decays_b])| {
            let (vw, vb): (&mut [F32], &mut [F32]) = match second_moments.next() {
                Some(v) => (&mut v.w, &mut v.b),
                None => (&mut [], &mut []),
            };
            [
                (&mut p.w[..], &grad.w[..], &mut m.w[..], vw, decays_w),
                (&mut p.b[..], &grad.b[..], &mut m.b[..], vb, decays_b),
            ]
        });
        let parts = tensors.flat_map(|(p, g, m, v, decays)| {
            let ranges = ranges(p.len(), count);
            let v_width = usize::from(!v.is_empty()); // SGD keeps no second moments
            split(p, ranges.clone(), 1)
                .zip(split(g, ranges.clone(), 1))
                .zip(split(m, ranges.clone(), 1))
                .zip(split(v, ranges, v_width))
                .map(move |(((p, g), m), v)| (p, g, m, v, decays))
        });
        threads.run(parts, |(p, g, m, v, decays)| {
            let _env = R::environment();
            self.update::<R>(
                math,
                scalars,
                decays,
                cells_mut(p),
                cells(g),
                cells_mut(m),
                cells_mut(v),
            );
        });
    }
}
