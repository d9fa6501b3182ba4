//! Adam, exactly as the seed's `adam1` applies it, and AdamW's decoupled weight decay in front.

use super::{Kind, OptimizerConfig, StepScalars};
use crate::arith::Real;
use crate::math::Math;
use crate::softf32::F32;

/// How many cells are updated together. Each step of the update is one loop over the group's
/// cells, which the compiler turns into vector instructions (8 cells per AVX2 instruction, so a
/// group keeps 8 independent chains of divisions in flight); the seed's square root runs its 16
/// Newton steps over the whole group. 64 was fastest of 16, 32, 64 and 128 in per-step timings
/// of the seed run and digits at batch 1 (2-core AMD EPYC VM, the runs of `benches/train.rs`);
/// the old groups of 8 copied through arrays compiled to 128-bit and scalar code.
const LANES: usize = 64;

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
    /// The coefficients of a tensor that `decays` (AdamW's decay applies to it) or not.
    fn new(config: &OptimizerConfig, step: &StepScalars, decays: bool) -> Coefficients<R> {
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
            decay: (config.kind == Kind::AdamW && decays).then(|| of(step.decay)),
        }
    }

    /// The update of `N` cells: every cell's own operations in the definition's order, each
    /// operation applied to all cells before the next (loops the compiler vectorises).
    #[inline(always)]
    fn lanes<const N: usize>(
        &self,
        math: Math,
        p: &mut [R; N],
        g: &[R; N],
        m: &mut [R; N],
        v: &mut [R; N],
    ) {
        let mut m_hat = [R::ZERO; N];
        let mut v_hat = [R::ZERO; N];
        for k in 0..N {
            m[k] = self.beta1 * m[k] + self.one_minus_beta1 * g[k];
        }
        for k in 0..N {
            v[k] = self.beta2 * v[k] + self.one_minus_beta2 * (g[k] * g[k]);
        }
        for k in 0..N {
            m_hat[k] = m[k] / self.bc1;
        }
        for k in 0..N {
            v_hat[k] = v[k] / self.bc2;
        }
        let root = math.sqrt_lanes(v_hat);
        if let Some(decay) = self.decay {
            for p in p.iter_mut() {
                *p = *p * decay;
            }
        }
        for k in 0..N {
            p[k] = p[k] - (self.lr * m_hat[k]) / (root[k] + self.eps);
        }
    }

    /// The new `p`, `m` and `v` of up to `N` cells (a short group is padded with zeros).
    #[inline(always)]
    fn group<const N: usize>(&self, math: Math, p: &[R], g: &[R], m: &[R], v: &[R]) -> Group<R, N> {
        let padded = |x: &[R]| {
            let mut lanes = [R::ZERO; N];
            lanes[..x.len()].copy_from_slice(x);
            lanes
        };
        let mut group = Group {
            len: p.len(),
            p: padded(p),
            m: padded(m),
            v: padded(v),
        };
        self.lanes(math, &mut group.p, &padded(g), &mut group.m, &mut group.v);
        group
    }
}

/// A group's updated cells, not yet stored.
struct Group<R, const N: usize> {
    len: usize,
    p: [R; N],
    m: [R; N],
    v: [R; N],
}

impl<R: Real, const N: usize> Group<R, N> {
    #[inline(always)]
    fn has_nan(&self) -> bool {
        let n = self.len;
        self.p[..n]
            .iter()
            .chain(&self.m[..n])
            .chain(&self.v[..n])
            .fold(false, |nan, x| nan | x.is_nan())
    }

    #[inline(always)]
    fn store(&self, p: &mut [R], m: &mut [R], v: &mut [R]) {
        let n = self.len;
        p.copy_from_slice(&self.p[..n]);
        m.copy_from_slice(&self.m[..n]);
        v.copy_from_slice(&self.v[..n]);
    }
}

/// The seed's `adam1` over one tensor (AdamW first multiplies `p` by `1 - lr * weight_decay`
/// when the tensor `decays`):
/// `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= (lr (m/bc1)) / (sqrt(v/bc2) + eps)`.
///
/// Cells go `LANES` at a time, the rest in one group of 8, 16, 32 or 64 (padded). Every
/// intermediate reaches `p`, `m` or `v` through `+ - * /` and the square root, which keep NaNs
/// (the seed's root replaces its result by 0 for a zero input, a choice made from the input
/// alone), so each group is first computed in [`Real::Fast`] and kept when none of its outputs
/// is a NaN; otherwise in `R`.
#[allow(clippy::too_many_arguments)] // the tensors and the step's scalars
pub(super) fn update<R: Real>(
    config: &OptimizerConfig,
    math: Math,
    step: &StepScalars,
    decays: bool,
    p: &mut [R],
    g: &[R],
    m: &mut [R],
    v: &mut [R],
) {
    let update = Update {
        fast: Coefficients::<R::Fast>::new(config, step, decays),
        exact: Coefficients::<R>::new(config, step, decays),
        math,
    };
    R::vectorized(
        #[inline(always)]
        || {
            let whole_groups = p.len() / LANES * LANES;
            let (whole, tail) = Cells { p, g, m, v }.split_at(whole_groups);
            update.groups::<LANES>(whole);
            // The rest as one group padded to a power of two from 8: a small tensor (a bias,
            // a layer of the seed's) does not pay for 64 lanes, which softf32 would compute
            // one by one, while the hardware keeps its lanes' divisions overlapping.
            match tail.p.len() {
                0..=8 => update.groups::<8>(tail),
                9..=16 => update.groups::<16>(tail),
                17..=32 => update.groups::<32>(tail),
                _ => update.groups::<LANES>(tail),
            }
        },
    );
}

/// One tensor's cells (or a run of them): parameters, gradient and moments.
struct Cells<'a, R> {
    p: &'a mut [R],
    g: &'a [R],
    m: &'a mut [R],
    v: &'a mut [R],
}

impl<'a, R> Cells<'a, R> {
    /// The first `at` cells and the rest.
    fn split_at(self, at: usize) -> (Cells<'a, R>, Cells<'a, R>) {
        let (p, p_rest) = self.p.split_at_mut(at);
        let (g, g_rest) = self.g.split_at(at);
        let (m, m_rest) = self.m.split_at_mut(at);
        let (v, v_rest) = self.v.split_at_mut(at);
        (
            Cells { p, g, m, v },
            Cells {
                p: p_rest,
                g: g_rest,
                m: m_rest,
                v: v_rest,
            },
        )
    }
}

/// One step's update in both arithmetics.
struct Update<R: Real> {
    fast: Coefficients<R::Fast>,
    exact: Coefficients<R>,
    math: Math,
}

impl<R: Real> Update<R> {
    /// The cells `N` at a time (the last group padded): each group computed in [`Real::Fast`],
    /// kept without a NaN, else recomputed from the untouched inputs with `R`'s NaN rule.
    #[inline(always)]
    fn groups<const N: usize>(&self, cells: Cells<'_, R>) {
        let groups = cells
            .p
            .chunks_mut(N)
            .zip(cells.g.chunks(N))
            .zip(cells.m.chunks_mut(N))
            .zip(cells.v.chunks_mut(N));
        for (((p, g), m), v) in groups {
            let view = bytemuck::cast_slice::<R, R::Fast>;
            let group = self
                .fast
                .group::<N>(self.math, view(p), view(g), view(m), view(v));
            if group.has_nan() {
                self.exact.group::<N>(self.math, p, g, m, v).store(p, m, v);
            } else {
                let view = bytemuck::cast_slice_mut::<R, R::Fast>;
                group.store(view(p), view(m), view(v));
            }
        }
    }
}
