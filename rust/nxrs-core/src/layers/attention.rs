//! Causal self-attention (`docs/TRAINING.md` section 15.8): the fused query/key/value
//! projection and the output projection as Dense layers without biases over every token, and
//! between them each head's causal softmax, sample by sample. Every sum runs over the key
//! positions `j <= i` only, in order, so a later position contributes nothing (not a `+0`, not a
//! NaN), and every value is one thread's: the threads share out whole samples.

use super::conv::{Conv, Delta, Then, Weights};
use super::share::by_samples;
use crate::arith::matmul::{MatMul, Matrix, MatrixMut, Order, Start};
use crate::arith::{cells, cells_mut, Real};
use crate::math::Math;
use crate::softf32::F32;
use crate::threads::Threads;

/// A causal self-attention layer over sequences of `tokens` tokens of `width` cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attention {
    pub heads: usize,
    pub tokens: usize,
    pub width: usize,
}

/// What the forward pass keeps for the backward pass: `qkv` (`T x 3D` per sample), each head's
/// probabilities (`H x T x T` per sample, row `i` filled up to `i`) and the heads' outputs
/// before the output projection (`T x D` per sample).
#[derive(Clone, Debug, Default)]
pub struct Kept {
    qkv: Vec<F32>,
    p: Vec<F32>,
    o: Vec<F32>,
}

/// About how many multiply-adds one score's `exp` costs (how samples are weighed).
const EXP_WORK: usize = 16;

impl Attention {
    /// `h`, the head width.
    fn head(&self) -> usize {
        self.width / self.heads
    }

    /// `c = 1 / sqrt(f32(h))`, two correctly rounded operations.
    fn scale<R: Real>(&self) -> R {
        R::ONE / R::from_i64(self.head() as i64).sqrt()
    }

    /// `qkv = x Wqkvᵀ`, Dense without biases over every token.
    fn qkv_projection(&self) -> Conv {
        Conv::dense(self.width, 3 * self.width, false)
    }

    /// `y = o Woᵀ`, Dense without biases over every token.
    fn out_projection(&self) -> Conv {
        Conv::dense(self.width, self.width, false)
    }

    /// A sample's multiply-adds, roughly, and the cells it touches: how samples are shared out.
    fn work(&self) -> (usize, usize) {
        let (t, d) = (self.tokens, self.width);
        (
            t * t * (d + self.heads * EXP_WORK),
            t * (5 * d + self.heads * t),
        )
    }

    /// The outputs `y` of `rows` sequences `x`, keeping what the backward pass reads.
    #[allow(clippy::too_many_arguments)] // the threads and setting, both matrices, in and out
    pub fn forward<R: Real>(
        &self,
        threads: &Threads,
        math: Math,
        (wqkv, wo): (&[R], &[R]),
        x: &[R],
        rows: usize,
        kept: &mut Kept,
        y: &mut [R],
    ) {
        let (t, d, hh) = (self.tokens, self.width, self.heads);
        let tokens = rows * t;
        let qkv = cells_mut::<R>(super::conv::resized(&mut kept.qkv, tokens * 3 * d));
        let mut unused = Vec::new();
        let (projection, none) = (self.qkv_projection(), &[][..]);
        let weights = Weights::AsTheyAre(wqkv);
        projection.forward(
            threads,
            (weights, none),
            x,
            tokens,
            &mut unused,
            qkv,
            Then::Nothing,
        );
        let qkv = cells::<R>(&kept.qkv[..tokens * 3 * d]);
        let p = cells_mut::<R>(super::conv::resized(&mut kept.p, rows * hh * t * t));
        let o = cells_mut::<R>(super::conv::resized(&mut kept.o, tokens * d));
        by_samples(
            threads,
            (rows, 1),
            self.work(),
            [(p, hh * t * t), (o, t * d)],
            |samples, [p, o]| {
                let qkv = &qkv[samples.start * t * 3 * d..samples.end * t * 3 * d];
                let per_sample = qkv.chunks_exact(t * 3 * d);
                let outputs = p
                    .chunks_exact_mut(hh * t * t)
                    .zip(o.chunks_exact_mut(t * d));
                let mut exps = Vec::with_capacity(t * (t + 1) / 2);
                for (qkv, (p, o)) in per_sample.zip(outputs) {
                    self.attend(math, qkv, p, o, &mut exps);
                }
            },
        );
        let o = cells::<R>(&kept.o[..tokens * d]);
        let weights = Weights::AsTheyAre(wo);
        let output = self.out_projection();
        output.forward(
            threads,
            (weights, none),
            o,
            tokens,
            &mut unused,
            y,
            Then::Nothing,
        );
    }

    /// One sample's heads: from its `qkv`, the probabilities `p` and the outputs `o`. The
    /// scores and the outputs are matrix products ([`causal`]); `p`'s cells past a row's query
    /// position are `+0`. `exps` is scratch.
    fn attend<R: Real>(&self, math: Math, qkv: &[R], p: &mut [R], o: &mut [R], exps: &mut Vec<R>) {
        let (t, d, h) = (self.tokens, self.width, self.head());
        let c = self.scale::<R>();
        for a in 0..self.heads {
            let [q, k, v] = self.parts(qkv, a);
            let p = &mut p[a * t * t..][..t * t];
            // Every score, the masked ones too (each is a chain of its own, not kept).
            let scores = MatrixMut::new(p, t, t);
            MatMul::new(scores, Start::Zero, q, k.t(), Order::AB).run();
            // Every row's shifted scores `c s - m` one after another in `exps`, and their
            // exponentials in one call: a row's own would leave most of its cells to the
            // functions' one-value path (they take several cells at a time).
            exps.clear();
            for (i, row) in p.chunks_exact_mut(t).enumerate() {
                let (row, masked) = row.split_at_mut(i + 1);
                masked.fill(R::ZERO);
                for s in row.iter_mut() {
                    *s = *s * c;
                }
                // The maximum by the "ieee" rule: the first wins ties, a NaN only as `s_0`.
                let m = row[1..]
                    .iter()
                    .fold(row[0], |m, &s| if m.ieee_lt(s) { s } else { m });
                exps.extend(row.iter().map(|&s| s - m));
            }
            math.exps_in_place(exps);
            let mut rest = &exps[..];
            for (i, row) in p.chunks_exact_mut(t).enumerate() {
                let (e, after) = rest.split_at(i + 1);
                rest = after;
                let z = e.iter().fold(R::ZERO, |z, &e| z + e);
                for (p, &e) in row.iter_mut().zip(e) {
                    *p = e / z;
                }
            }
            let p = Matrix::new(p, t, t);
            let o = MatrixMut::strided(&mut o[a * h..], t, h, d);
            causal(o, p, v, Keys::UpToRow);
        }
    }

    /// Head `a`'s `q`, `k` and `v` (`T x h` each) in a sample's `qkv`.
    fn parts<'q, R: Real>(&self, qkv: &'q [R], a: usize) -> [Matrix<'q, R>; 3] {
        let (t, d, h) = (self.tokens, self.width, self.head());
        core::array::from_fn(|part| Matrix::strided(&qkv[part * d + a * h..], t, h, 3 * d, 1))
    }

    /// The backward pass of `rows` sequences after [`Attention::forward`] of `x` (`kept` as it
    /// left it): from the output gradients `g`, the input gradients `gx` (when wanted) and
    /// both matrices' block gradients.
    #[allow(clippy::too_many_arguments)] // the threads, the matrices, what was kept, the results
    pub fn backward<R: Real>(
        &self,
        threads: &Threads,
        (wqkv, wo): (&[R], &[R]),
        (x, g): (&[R], &[R]),
        rows: usize,
        kept: &Kept,
        gx: Option<&mut [R]>,
        (g_wqkv, g_wo): (&mut [R], &mut [R]),
    ) {
        let (t, d, hh) = (self.tokens, self.width, self.heads);
        let tokens = rows * t;
        let (qkv, p, o) = (
            cells::<R>(&kept.qkv[..tokens * 3 * d]),
            cells::<R>(&kept.p[..rows * hh * t * t]),
            cells::<R>(&kept.o[..tokens * d]),
        );
        let output = self.out_projection();
        output.block_gradient(threads, Delta::Given(g), (o, &[]), tokens, g_wo, &mut []);
        let mut go = vec![R::ZERO; tokens * d];
        output.input_gradient(threads, wo, Delta::Given(g), tokens, &mut go);
        let mut dqkv = vec![R::ZERO; tokens * 3 * d];
        by_samples(
            threads,
            (rows, 1),
            self.work(),
            [(&mut dqkv[..], t * 3 * d)],
            |samples, [dqkv]| {
                let (first, last) = (samples.start, samples.end);
                let qkv = qkv[first * t * 3 * d..last * t * 3 * d].chunks_exact(t * 3 * d);
                let p = p[first * hh * t * t..last * hh * t * t].chunks_exact(hh * t * t);
                let go = go[first * t * d..last * t * d].chunks_exact(t * d);
                for (((qkv, p), go), dqkv) in
                    qkv.zip(p).zip(go).zip(dqkv.chunks_exact_mut(t * 3 * d))
                {
                    self.attend_backward(qkv, p, go, dqkv);
                }
            },
        );
        let projection = self.qkv_projection();
        projection.block_gradient(
            threads,
            Delta::Given(&dqkv),
            (x, &[]),
            tokens,
            g_wqkv,
            &mut [],
        );
        if let Some(gx) = gx {
            projection.input_gradient(threads, wqkv, Delta::Given(&dqkv), tokens, gx);
        }
    }

    /// One sample's heads backwards: from `qkv`, the probabilities `p` and the gradients `go` at
    /// the heads' outputs, the gradients `dqkv` at `qkv`. Every sum but `r_i` is a matrix
    /// product ([`causal`]; `p`'s and `ds`'s cells past a row's query position are `+0`).
    fn attend_backward<R: Real>(&self, qkv: &[R], p: &[R], go: &[R], dqkv: &mut [R]) {
        let (t, d, h) = (self.tokens, self.width, self.head());
        let c = self.scale::<R>();
        let (mut dp, mut ds) = (vec![R::ZERO; t * t], vec![R::ZERO; t * t]);
        for a in 0..self.heads {
            let [q, k, v] = self.parts(qkv, a);
            let go = Matrix::strided(&go[a * h..], t, h, d, 1);
            let p = &p[a * t * t..][..t * t];
            // Every `dp`, the masked ones too (each a chain of its own, not read).
            let all = MatrixMut::new(&mut dp, t, t);
            MatMul::new(all, Start::Zero, go, v.t(), Order::AB).run();
            for ((p, dp), ds) in p
                .chunks_exact(t)
                .zip(dp.chunks_exact(t))
                .zip(ds.chunks_exact_mut(t))
                .enumerate()
                .map(|(i, ((p, dp), ds))| ((&p[..=i], &dp[..=i]), ds))
            {
                let r = p.iter().zip(dp).fold(R::ZERO, |r, (&p, &dp)| r + p * dp);
                let (row, masked) = ds.split_at_mut(p.len());
                for ((ds, &p), &dp) in row.iter_mut().zip(p).zip(dp) {
                    *ds = (p * (dp - r)) * c;
                }
                masked.fill(R::ZERO);
            }
            let (p, ds) = (Matrix::new(p, t, t), Matrix::new(&ds, t, t));
            let products = [
                (ds, k, Keys::UpToRow),
                (ds.t(), q, Keys::FromRow),
                (p.t(), go, Keys::FromRow),
            ];
            for (part, (terms, b, keys)) in products.into_iter().enumerate() {
                let out = MatrixMut::strided(&mut dqkv[part * d + a * h..], t, h, 3 * d);
                causal(out, terms, b, keys);
            }
        }
    }
}

/// Which terms of row `i`'s chains a causal product sums: `k <= i` (a query's keys) or `k >= i`
/// (a key's queries).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keys {
    UpToRow,
    FromRow,
}

/// `c[i][e] = Σ_k a[i][k] * b[k][e]` from +0, `k` in order over the terms `keys` allows, given
/// `a` square with `+0` in the cells it does not. The whole product gives those bits when `b`
/// is finite: a left-out term is then `+0 * b = ±0`, which leaves every chain as it is (a
/// chain from +0 is never `-0`, and `x + ±0` is `x` for every other `x`, NaNs keeping their
/// payloads); an infinite or NaN `b` would make it a NaN. Such a `b` takes the definition's
/// loop, the terms in range only.
fn causal<R: Real>(c: MatrixMut<'_, R>, a: Matrix<'_, R>, b: Matrix<'_, R>, keys: Keys) {
    let (n, width) = b.shape();
    let finite = (0..n).all(|k| (0..width).all(|e| b.at(k, e).to_f32().is_finite()));
    let product = MatMul::new(c, Start::Zero, a, b, Order::AB);
    if finite {
        return product.run();
    }
    product.by_elements_over(|i| match keys {
        Keys::UpToRow => 0..i + 1,
        Keys::FromRow => i..n,
    });
}
