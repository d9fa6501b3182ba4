//! Adam, exactly as the seed's `adam1` applies it, and AdamW's decoupled weight decay in front.

use super::{Kind, OptimizerConfig, StepScalars};
use crate::arith::Real;
use crate::math::Math;
use crate::softf32::F32;

/// How many cells share one run of the square root (4 was fastest of 2, 4, 8 and 16 in
/// bench/bench_train.py on a 2-core x86_64 VM for the seed's 16-step Newton root: 223 ms for the
/// seed run, against 350 ms one by one).
const LANES: usize = 8;

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

/// One step's Adam coefficients, in the arithmetic `R`.
#[derive(Clone, Copy)]
struct Coefficients<R> {
    beta1: R,
    beta2: R,
    one_minus_beta1: R,
    one_minus_beta2: R,
    bc1: R,
    bc2: R,
    lr: R,
    eps: R,
    /// AdamW's `1 - lr * weight_decay`.
    decay: Option<R>,
}

impl<R: Real> Coefficients<R> {
    fn new(config: &OptimizerConfig, step: &StepScalars) -> Coefficients<R> {
        let of = R::from_f32;
        Coefficients {
            beta1: of(config.beta1),
            beta2: of(config.beta2),
            one_minus_beta1: of(F32::ONE - config.beta1),
            one_minus_beta2: of(F32::ONE - config.beta2),
            bc1: of(step.bias.bc1),
            bc2: of(step.bias.bc2),
            lr: of(step.lr),
            eps: of(config.eps),
            decay: (config.kind == Kind::AdamW).then(|| of(step.decay)),
        }
    }

    /// The update of `LANES` cells: every cell's own operations in the definition's order, the
    /// square roots of all lanes together.
    #[inline(always)]
    fn lanes(
        &self,
        math: Math,
        p: &mut [R; LANES],
        g: &[R; LANES],
        m: &mut [R; LANES],
        v: &mut [R; LANES],
    ) {
        let mut m_hat = [R::ZERO; LANES];
        let mut v_hat = [R::ZERO; LANES];
        for k in 0..LANES {
            m[k] = self.beta1 * m[k] + self.one_minus_beta1 * g[k];
            v[k] = self.beta2 * v[k] + self.one_minus_beta2 * (g[k] * g[k]);
            m_hat[k] = m[k] / self.bc1;
            v_hat[k] = v[k] / self.bc2;
        }
        let root = math.sqrt_lanes(v_hat);
        for k in 0..LANES {
            if let Some(decay) = self.decay {
                p[k] = p[k] * decay;
            }
            p[k] = p[k] - (self.lr * m_hat[k]) / (root[k] + self.eps);
        }
    }
}

/// The seed's `adam1` over one tensor (AdamW first multiplies `p` by `1 - lr * weight_decay`):
/// `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= (lr (m/bc1)) / (sqrt(v/bc2) + eps)`.
///
/// Cells go `LANES` at a time. Every intermediate reaches `p`, `m` or `v` through `+ - * /`
/// and the square root, which keep NaNs (the seed's root replaces its result by 0 for a zero
/// input, a choice made from the input alone), so each group is first computed in
/// [`Real::Fast`] and kept when none of its outputs is a NaN; otherwise in `R`. A short last
/// group is padded.
pub(super) fn update<R: Real>(
    config: &OptimizerConfig,
    math: Math,
    step: &StepScalars,
    p: &mut [R],
    g: &[R],
    m: &mut [R],
    v: &mut [R],
) {
    let exact = Coefficients::<R>::new(config, step);
    let fast = Coefficients::<R::Fast>::new(config, step);
    R::vectorized(
        #[inline(always)]
        || {
            let mut p_groups = p.chunks_exact_mut(LANES);
            let mut g_groups = g.chunks_exact(LANES);
            let mut m_groups = m.chunks_exact_mut(LANES);
            let mut v_groups = v.chunks_exact_mut(LANES);
            for (((p, g), m), v) in (&mut p_groups)
                .zip(&mut g_groups)
                .zip(&mut m_groups)
                .zip(&mut v_groups)
            {
                let group = |x: &[R]| -> [R; LANES] { x.try_into().expect("a whole group") };
                let (mut pl, gl, mut ml, mut vl) = (group(p), group(g), group(m), group(v));
                let cast = bytemuck::cast::<[R; LANES], [R::Fast; LANES]>;
                let (mut pf, gf, mut mf, mut vf) = (cast(pl), cast(gl), cast(ml), cast(vl));
                fast.lanes(math, &mut pf, &gf, &mut mf, &mut vf);
                let nan = pf
                    .iter()
                    .chain(&mf)
                    .chain(&vf)
                    .fold(false, |nan, x| nan | x.is_nan());
                if !nan {
                    let back = bytemuck::cast::<[R::Fast; LANES], [R; LANES]>;
                    p.copy_from_slice(&back(pf));
                    m.copy_from_slice(&back(mf));
                    v.copy_from_slice(&back(vf));
                    continue;
                }
                exact.lanes(math, &mut pl, &gl, &mut ml, &mut vl);
                p.copy_from_slice(&pl);
                m.copy_from_slice(&ml);
                v.copy_from_slice(&vl);
            }
            // The last cells, padded to a group.
            let (p, g) = (p_groups.into_remainder(), g_groups.remainder());
            let (m, v) = (m_groups.into_remainder(), v_groups.into_remainder());
            let n = p.len();
            let padded = |x: &[R]| {
                let mut lanes = [R::ZERO; LANES];
                lanes[..n].copy_from_slice(x);
                lanes
            };
            let (mut pl, gl, mut ml, mut vl) = (padded(p), padded(g), padded(m), padded(v));
            exact.lanes(math, &mut pl, &gl, &mut ml, &mut vl);
            p.copy_from_slice(&pl[..n]);
            m.copy_from_slice(&ml[..n]);
            v.copy_from_slice(&vl[..n]);
        },
    );
}
