//! Stochastic gradient descent with momentum, as PyTorch's `SGD` (dampening 0, not Nesterov):
//! `g' = g + weight_decay * p` (coupled, when set and the tensor decays); `buf = momentum * buf
//! + g'`; `p = p - lr * buf`.

use super::{OptimizerConfig, StepScalars};
use crate::arith::Real;

pub(super) fn update<R: Real>(
    config: &OptimizerConfig,
    step: &StepScalars,
    decays: bool,
    p: &mut [R],
    g: &[R],
    buf: &mut [R],
) {
    let of = R::from_f32;
    let (lr, momentum, weight_decay) = (of(step.lr), of(config.momentum), of(config.weight_decay));
    let decays = decays && !config.weight_decay.is_zero();
    for ((p, &g), buf) in p.iter_mut().zip(g).zip(buf.iter_mut()) {
        let g = if decays { g + weight_decay * *p } else { g };
        *buf = momentum * *buf + g;
        *p = *p - lr * *buf;
    }
}
