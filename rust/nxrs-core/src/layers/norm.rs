//! BatchNorm and LayerNorm (`docs/TRAINING.md` sections 15.2, 15.3 and 15.6). Both normalise a
//! group of `n` values in a fixed order: BatchNorm a channel's values over the block's samples
//! and positions, LayerNorm one sample's cells. The group's arithmetic is written once; a layer
//! says which cells form its groups, in their order.

use super::share::{by_items, by_samples, of};
use crate::arith::Real;
use crate::threads::Threads;
use core::ops::Range;

/// A group's cells: `at(k)` is the index of its `k`-th value (`k < n`) in the block's cells.
#[derive(Clone, Copy)]
struct Group<F: Fn(usize) -> usize> {
    n: usize,
    at: F,
}

impl<F: Fn(usize) -> usize> Group<F> {
    /// `Σ f(k)` over the group in order, from the first term.
    fn sum<R: Real>(&self, f: impl Fn(usize) -> R) -> R {
        (1..self.n).fold(f(0), |acc, k| acc + f(k))
    }

    /// The batch statistics: `μ`, and the sum `Σ (x - μ) * (x - μ)` both variances divide.
    fn statistics<R: Real>(&self, x: &[R]) -> (R, R) {
        let mean = self.sum(|k| x[(self.at)(k)]) / R::from_i64(self.n as i64);
        let squares = self.sum(|k| {
            let d = x[(self.at)(k)] - mean;
            d * d
        });
        (mean, squares)
    }

    /// Normalises the group: `x̂ = (x - μ) / r` with `r = sqrt(σ² + eps)`, written to `xhat`;
    /// returns `(μ, the sum of squares, r)`.
    fn normalize<R: Real>(&self, x: &[R], eps: R, xhat: &mut [R]) -> (R, R, R) {
        let (mean, squares) = self.statistics(x);
        let r = (squares / R::from_i64(self.n as i64) + eps).sqrt();
        for k in 0..self.n {
            let i = (self.at)(k);
            xhat[i] = (x[i] - mean) / r;
        }
        (mean, squares, r)
    }

    /// The input gradient through the normalisation: with `d = g * gamma` (given),
    /// `A = Σ d / n`, `M = Σ d * x̂ / n`, `gx = ((d - A) - (x̂ * M)) / r`.
    fn input_gradient<R: Real>(&self, d: &[R], xhat: &[R], r: R, gx: &mut [R]) {
        let count = R::from_i64(self.n as i64);
        let a = self.sum(|k| d[(self.at)(k)]) / count;
        let m = self.sum(|k| {
            let i = (self.at)(k);
            d[i] * xhat[i]
        }) / count;
        for k in 0..self.n {
            let i = (self.at)(k);
            gx[i] = ((d[i] - a) - (xhat[i] * m)) / r;
        }
    }
}

/// A BatchNorm layer over `channels x positions` cells per sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchNorm<R> {
    pub channels: usize,
    pub positions: usize,
    pub momentum: R,
    pub eps: R,
}

/// The parameters and running statistics of a BatchNorm layer, one value per channel.
pub struct BatchNormTensors<'a, R> {
    pub gamma: &'a [R],
    pub beta: &'a [R],
    pub mean: &'a [R],
    pub var: &'a [R],
}

impl<R: Real> BatchNorm<R> {
    fn group(&self, c: usize, rows: usize) -> Group<impl Fn(usize) -> usize> {
        let (channels, p) = (self.channels, self.positions);
        Group {
            n: rows * p,
            at: move |k| (k / p * channels + c) * p + k % p,
        }
    }

    /// Training mode over a block of `rows` samples: `y`, `xhat` and each channel's `r`, and
    /// the block's statistics for the running averages (`μ` per channel, then the unbiased
    /// variance per channel; see [`BatchNorm::update_running`]).
    #[allow(clippy::too_many_arguments)] // the input, what the backward pass keeps, the outputs
    pub fn forward_train(
        &self,
        (gamma, beta): (&[R], &[R]),
        x: &[R],
        rows: usize,
        xhat: &mut [R],
        r: &mut [R],
        statistics: &mut [R],
        y: &mut [R],
    ) {
        let (means, variances) = statistics[..2 * self.channels].split_at_mut(self.channels);
        for (c, r) in r[..self.channels].iter_mut().enumerate() {
            let group = self.group(c, rows);
            let (mean, squares, rc) = group.normalize(x, self.eps, xhat);
            *r = rc;
            for k in 0..group.n {
                let i = (group.at)(k);
                y[i] = (gamma[c] * xhat[i]) + beta[c];
            }
            means[c] = mean;
            // n = 1 has no unbiased variance; the update skips such a block (below).
            variances[c] = squares / R::from_i64(group.n.max(2) as i64 - 1);
        }
    }

    /// The running averages' update by a block of `rows` samples whose statistics
    /// [`BatchNorm::forward_train`] gave; none when the block has one value per channel.
    /// Updates happen once per block, in block order.
    pub fn update_running(&self, rows: usize, statistics: &[R], mean: &mut [R], var: &mut [R]) {
        if rows * self.positions < 2 {
            return;
        }
        let keep = R::ONE - self.momentum;
        let (means, variances) = statistics[..2 * self.channels].split_at(self.channels);
        for c in 0..self.channels {
            mean[c] = (keep * mean[c]) + (self.momentum * means[c]);
            var[c] = (keep * var[c]) + (self.momentum * variances[c]);
        }
    }

    /// Evaluation mode: the running statistics normalise, `sqrt` once per channel.
    pub fn forward_eval(&self, t: BatchNormTensors<'_, R>, x: &[R], rows: usize, y: &mut [R]) {
        for c in 0..self.channels {
            let r = (t.var[c] + self.eps).sqrt();
            let group = self.group(c, rows);
            for k in 0..group.n {
                let i = (group.at)(k);
                y[i] = (t.gamma[c] * ((x[i] - t.mean[c]) / r)) + t.beta[c];
            }
        }
    }
}

/// A LayerNorm over each sample's `cells`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerNorm<R> {
    pub cells: usize,
    pub eps: R,
    /// Whether it has `beta` (section 15.7: without, its passes are given an empty `beta`
    /// and `y = gamma * x̂`, the product alone).
    pub bias: bool,
}

impl<R: Real> LayerNorm<R> {
    fn group(&self, s: usize) -> Group<impl Fn(usize) -> usize> {
        let n = self.cells;
        Group {
            n,
            at: move |k| s * n + k,
        }
    }

    /// `y`, `xhat` and each sample's `r` (the same in both modes), from `(gamma, beta)` (`beta`
    /// empty without biases), the samples shared out among the threads.
    #[allow(clippy::too_many_arguments)] // the threads, the parameters, the input, the outputs
    pub fn forward(
        &self,
        threads: &Threads,
        params: (&[R], &[R]),
        x: &[R],
        rows: usize,
        xhat: &mut [R],
        r: &mut [R],
        y: &mut [R],
    ) {
        let n = self.cells;
        by_samples(
            threads,
            (rows, 1),
            (6 * n, 3 * n),
            [
                (&mut xhat[..rows * n], n),
                (&mut r[..rows], 1),
                (&mut y[..rows * n], n),
            ],
            |samples, [xhat, r, y]| {
                self.forward_samples(params, of(x, &samples, n), xhat, r, y);
            },
        );
    }

    /// [`LayerNorm::forward`] of the samples `r` has room for.
    fn forward_samples(
        &self,
        (gamma, beta): (&[R], &[R]),
        x: &[R],
        xhat: &mut [R],
        r: &mut [R],
        y: &mut [R],
    ) {
        for (s, r) in r.iter_mut().enumerate() {
            *r = self.group(s).normalize(x, self.eps, xhat).2;
            let cells = s * self.cells..(s + 1) * self.cells;
            let scaled = y[cells.clone()].iter_mut().zip(&xhat[cells]).zip(gamma);
            if beta.is_empty() {
                for ((y, &xhat), &gamma) in scaled {
                    *y = gamma * xhat;
                }
            } else {
                for (((y, &xhat), &gamma), &beta) in scaled.zip(beta) {
                    *y = (gamma * xhat) + beta;
                }
            }
        }
    }

    /// The block gradients of `gamma` and `beta` of cells `cells` (`beta`'s empty without
    /// biases): each cell's chain over the samples in order, from the first term.
    fn parameter_gradients(
        &self,
        (g, xhat): (&[R], &[R]),
        rows: usize,
        cells: Range<usize>,
        g_gamma: &mut [R],
        g_beta: &mut [R],
    ) {
        let n = self.cells;
        // Cell k of the range in sample s.
        let at = |s: usize, k: usize| s * n + cells.start + k;
        chains_over_samples(g_gamma, rows, |s, k| g[at(s, k)] * xhat[at(s, k)]);
        chains_over_samples(g_beta, rows, |s, k| g[at(s, k)]);
    }
}

/// `out[k] = (t(0, k) + t(1, k)) + ...` over `rows` samples: each cell's chain over the samples
/// in order, from the first term ([`Group::sum`]'s order). The samples run in the outer loop and
/// the cells in the inner one, so the terms are read row by row and the chains advance side by
/// side. Nothing to do for an empty `out`.
fn chains_over_samples<R: Real>(out: &mut [R], rows: usize, t: impl Fn(usize, usize) -> R) {
    for (k, out) in out.iter_mut().enumerate() {
        *out = t(0, k);
    }
    for s in 1..rows {
        for (k, out) in out.iter_mut().enumerate() {
            *out = *out + t(s, k);
        }
    }
}

/// A normalisation's backward pass: the block gradients of `gamma` and `beta` and the input
/// gradient, from the output gradient `g` and what the forward pass kept (`x̂` and each
/// group's `r`). `d` is scratch of `g`'s length. The threads may share the work out; no result
/// depends on them.
pub trait Normalization<R: Real> {
    #[allow(clippy::too_many_arguments)] // the layer's own state, what its forward pass kept, and the outputs
    fn backward(
        &self,
        threads: &Threads,
        gamma: &[R],
        g: &[R],
        kept: (&[R], &[R]),
        rows: usize,
        d: &mut [R],
        grads: (&mut [R], &mut [R]),
        gx: &mut [R],
    );
}

impl<R: Real> Normalization<R> for BatchNorm<R> {
    /// The block gradients of `gamma` and `beta` and the input gradient, from the output
    /// gradient `g` and the forward pass's `xhat` and `r`. `d` is scratch of `g`'s length.
    fn backward(
        &self,
        _threads: &Threads,
        gamma: &[R],
        g: &[R],
        (xhat, r): (&[R], &[R]),
        rows: usize,
        d: &mut [R],
        grads: (&mut [R], &mut [R]),
        gx: &mut [R],
    ) {
        let (g_gamma, g_beta) = grads;
        for c in 0..self.channels {
            let group = self.group(c, rows);
            g_beta[c] = group.sum(|k| g[(group.at)(k)]);
            g_gamma[c] = group.sum(|k| {
                let i = (group.at)(k);
                g[i] * xhat[i]
            });
            for k in 0..group.n {
                let i = (group.at)(k);
                d[i] = g[i] * gamma[c];
            }
            group.input_gradient(d, xhat, r[c], gx);
        }
    }
}

impl<R: Real> Normalization<R> for LayerNorm<R> {
    /// The block gradients of `gamma` and `beta` (chains over the samples, from the first; no
    /// `beta`'s without biases), the cells shared out among the threads, and the input
    /// gradient, the samples shared out. `d` is scratch of `g`'s length.
    fn backward(
        &self,
        threads: &Threads,
        gamma: &[R],
        g: &[R],
        (xhat, r): (&[R], &[R]),
        rows: usize,
        d: &mut [R],
        grads: (&mut [R], &mut [R]),
        gx: &mut [R],
    ) {
        let (g_gamma, g_beta) = grads;
        let n = self.cells;
        let beta_width = usize::from(!g_beta.is_empty());
        by_items(
            threads,
            (n, 1),
            2 * rows,
            [
                (&mut g_gamma[..n], 1),
                (&mut g_beta[..n * beta_width], beta_width),
            ],
            |cells, [g_gamma, g_beta]| {
                self.parameter_gradients((g, xhat), rows, cells, g_gamma, g_beta);
            },
        );
        by_samples(
            threads,
            (rows, 1),
            (6 * n, 4 * n),
            [(&mut d[..rows * n], n), (&mut gx[..rows * n], n)],
            |samples, [d, gx]| {
                let (g, xhat) = (of(g, &samples, n), of(xhat, &samples, n));
                for (s, &r) in r[samples].iter().enumerate() {
                    let cells = s * n..(s + 1) * n;
                    for ((d, &g), &gamma) in d[cells.clone()].iter_mut().zip(&g[cells]).zip(gamma) {
                        *d = g * gamma;
                    }
                    self.group(s).input_gradient(d, xhat, r, gx);
                }
            },
        );
    }
}
