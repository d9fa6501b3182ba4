//! Causal self-attention (`docs/TRAINING.md` section 15.8): the fused query/key/value
//! projection and the output projection as Dense layers without biases over every token, and
//! between them each head's causal softmax, sample by sample. Every sum runs over the key
//! positions `j <= i` only, in order, so a later position contributes nothing (not a `+0`, not a
//! NaN), and every value is one thread's: the threads share out whole samples.

use super::conv::{Conv, Delta, Then, Weights};
use super::share::by_samples;
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
                for (qkv, (p, o)) in per_sample.zip(outputs) {
                    self.attend(math, qkv, p, o);
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

    /// One sample's heads: from its `qkv`, the probabilities `p` and the outputs `o`.
    fn attend<R: Real>(&self, math: Math, qkv: &[R], p: &mut [R], o: &mut [R]) {
        let (t, d, h) = (self.tokens, self.width, self.head());
        let c = self.scale::<R>();
        let at = |i: usize, part: usize, a: usize| i * 3 * d + part * d + a * h;
        for a in 0..self.heads {
            for i in 0..t {
                let q = &qkv[at(i, 0, a)..][..h];
                let row = &mut p[(a * t + i) * t..][..=i];
                for (j, s) in row.iter_mut().enumerate() {
                    let k = &qkv[at(j, 1, a)..][..h];
                    let dot = q.iter().zip(k).fold(R::ZERO, |acc, (&q, &k)| acc + q * k);
                    *s = dot * c;
                }
                // The maximum by the "ieee" rule: the first wins ties, a NaN only as `s_0`.
                let m = row[1..]
                    .iter()
                    .fold(row[0], |m, &s| if m.ieee_lt(s) { s } else { m });
                let mut z = R::ZERO;
                for s in row.iter_mut() {
                    *s = math.exp(*s - m);
                    z = z + *s;
                }
                for s in row.iter_mut() {
                    *s = *s / z;
                }
                for (e, out) in o[i * d + a * h..][..h].iter_mut().enumerate() {
                    let v = |j: usize| qkv[at(j, 2, a) + e];
                    *out = row
                        .iter()
                        .enumerate()
                        .fold(R::ZERO, |acc, (j, &p)| acc + p * v(j));
                }
            }
        }
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
    /// the heads' outputs, the gradients `dqkv` at `qkv`.
    fn attend_backward<R: Real>(&self, qkv: &[R], p: &[R], go: &[R], dqkv: &mut [R]) {
        let (t, d, h) = (self.tokens, self.width, self.head());
        let c = self.scale::<R>();
        let at = |i: usize, part: usize, a: usize| i * 3 * d + part * d + a * h;
        let mut ds = vec![R::ZERO; t * t];
        for a in 0..self.heads {
            let p = |i: usize, j: usize| p[(a * t + i) * t + j];
            let go = |i: usize, e: usize| go[i * d + a * h + e];
            for i in 0..t {
                let row = &mut ds[i * t..][..=i];
                let mut r = R::ZERO;
                for (j, ds) in row.iter_mut().enumerate() {
                    let v = &qkv[at(j, 2, a)..][..h];
                    let dp = v
                        .iter()
                        .enumerate()
                        .fold(R::ZERO, |acc, (e, &v)| acc + go(i, e) * v);
                    *ds = dp;
                    r = r + p(i, j) * dp;
                }
                for (j, ds) in row.iter_mut().enumerate() {
                    *ds = (p(i, j) * (*ds - r)) * c;
                }
            }
            for j in 0..t {
                for e in 0..h {
                    let (q, k) = (
                        |i: usize| qkv[at(i, 0, a) + e],
                        |i: usize| qkv[at(i, 1, a) + e],
                    );
                    // Queries see keys j <= i; a key is seen by queries i >= j.
                    let dq = (0..=j).fold(R::ZERO, |acc, i| acc + ds[j * t + i] * k(i));
                    let dk = (j..t).fold(R::ZERO, |acc, i| acc + ds[i * t + j] * q(i));
                    let dv = (j..t).fold(R::ZERO, |acc, i| acc + p(i, j) * go(i, e));
                    dqkv[at(j, 0, a) + e] = dq;
                    dqkv[at(j, 1, a) + e] = dk;
                    dqkv[at(j, 2, a) + e] = dv;
                }
            }
        }
    }
}
