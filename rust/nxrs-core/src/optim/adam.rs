//! Adam, exactly as the seed's `adam1` applies it, and AdamW's decoupled weight decay in front.

use super::{Kind, OptimizerConfig, StepScalars};
use crate::arith::Real;
use crate::math::Math;
use crate::softf32::F32;

/// How many cells share one run of the square root (4 was fastest of 2, 4, 8 and 16 in
/// bench/bench_train.py on a 2-core x86_64 VM for the seed's 16-step Newton root: 223 ms for the
/// seed run, against 350 ms one by one).
const LANES: usize = 4;

/// The bias-correction divisors of one step, `1 - beta1^t` and `1 - beta2^t`.
#[derive(Clone, Copy, Debug)]
pub struct BiasCorrection {
    pub bc1: F32,
    pub bc2: F32,
}

impl BiasCorrection {
    /// For optimisers without bias correction.
    pub const NONE: BiasCorrection = BiasCorrection {
        bc1: F32::ONE,
        bc2: F32::ONE,
    };

    /// Advances the running powers `beta1^t`, `beta2^t` by one step and returns the divisors.
    pub fn advance(config: &OptimizerConfig, b1t: &mut F32, b2t: &mut F32) -> BiasCorrection {
        *b1t = *b1t * config.beta1;
        *b2t = *b2t * config.beta2;
        BiasCorrection {
            bc1: F32::ONE - *b1t,
            bc2: F32::ONE - *b2t,
        }
    }
}

/// The seed's `adam1` over one tensor (AdamW first multiplies `p` by `1 - lr * weight_decay`):
/// `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= (lr (m/bc1)) / (sqrt(v/bc2) + eps)`.
pub(super) fn update<R: Real>(
    config: &OptimizerConfig,
    math: Math,
    step: &StepScalars,
    p: &mut [R],
    g: &[R],
    m: &mut [R],
    v: &mut [R],
) {
    let of = R::from_f32;
    let (beta1, beta2, eps, lr) = (
        of(config.beta1),
        of(config.beta2),
        of(config.eps),
        of(step.lr),
    );
    let one_minus_beta1 = of(F32::ONE - config.beta1);
    let one_minus_beta2 = of(F32::ONE - config.beta2);
    let (bc1, bc2) = (of(step.bias.bc1), of(step.bias.bc2));
    let decay = (config.kind == Kind::AdamW).then(|| of(step.decay));
    // Cells go through the square root LANES at a time; every cell's own operations and their
    // order are the definition's.
    let chunks = p
        .chunks_mut(LANES)
        .zip(g.chunks(LANES))
        .zip(m.chunks_mut(LANES))
        .zip(v.chunks_mut(LANES));
    for (((p, g), m), v) in chunks {
        let mut m_hat = [R::ZERO; LANES];
        let mut v_hat = [R::ONE; LANES]; // lanes past the tensor's end are ignored
        for k in 0..p.len() {
            m[k] = beta1 * m[k] + one_minus_beta1 * g[k];
            v[k] = beta2 * v[k] + one_minus_beta2 * (g[k] * g[k]);
            m_hat[k] = m[k] / bc1;
            v_hat[k] = v[k] / bc2;
        }
        let root = math.sqrt_lanes(v_hat);
        for k in 0..p.len() {
            if let Some(decay) = decay {
                p[k] = p[k] * decay;
            }
            p[k] = p[k] - (lr * m_hat[k]) / (root[k] + eps);
        }
    }
}
