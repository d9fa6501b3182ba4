//! BatchNorm and LayerNorm (`docs/TRAINING.md` sections 15.2, 15.3 and 15.6). Both normalise a
//! group of `n` values in a fixed order: BatchNorm a channel's values over the block's samples
//! and positions, LayerNorm one sample's cells. The group's arithmetic is written once; a layer
//! says which cells form its groups, in their order. Several groups are normalised side by
//! side (eight at a time): each group's sums are chains of their own, in their own order, and
//! advancing together they do not wait on one another's latency.

use super::share::{by_items, by_samples, of};
use crate::arith::Real;
use crate::threads::Threads;
use core::ops::Range;

/// How many groups a pass normalises side by side (at most).
const SIDE_BY_SIDE: usize = 8;

/// The groups `0 ..< total` in runs of [`SIDE_BY_SIDE`], in order.
fn runs(total: usize) -> impl Iterator<Item = Range<usize>> {
    (0..total)
        .step_by(SIDE_BY_SIDE)
        .map(move |first| first..total.min(first + SIDE_BY_SIDE))
}

/// A value per group of a run ([`Groups`]).
type PerGroup<R> = [R; SIDE_BY_SIDE];

/// A run of groups, normalised side by side: `at(j, k)` is the index of group `j`'s `k`-th
/// value (`j < count <= SIDE_BY_SIDE`, `k < n`) in the block's cells.
#[derive(Clone, Copy)]
struct Groups<F: Fn(usize, usize) -> usize> {
    n: usize,
    count: usize,
    at: F,
}

/// What normalising a run of groups gives, group `j`'s at `j`: `μ`, the sum of squares
/// `Σ (x - μ) * (x - μ)` both variances divide, and `r = sqrt(σ² + eps)`.
struct Statistics<R> {
    mean: PerGroup<R>,
    squares: PerGroup<R>,
    r: PerGroup<R>,
}

impl<F: Fn(usize, usize) -> usize> Groups<F> {
    /// `Σ f(j, i)` over each group `j`'s indices `i` in order, from the first term ([`chains`]).
    fn sums<R: Real>(&self, f: impl Fn(usize, usize) -> R) -> PerGroup<R> {
        let mut out = [R::ZERO; SIDE_BY_SIDE];
        chains(&mut out[..self.count], self.n, |k, j| f(j, (self.at)(j, k)));
        out
    }

    /// `n` as a value.
    fn size<R: Real>(&self) -> R {
        R::from_i64(self.n as i64)
    }

    /// Normalises every group: `x̂ = (x - μ) / r`, written to `xhat`.
    fn normalize<R: Real>(&self, x: &[R], eps: R, xhat: &mut [R]) -> Statistics<R> {
        let size = self.size::<R>();
        let mut mean = self.sums(|_, i| x[i]);
        for mean in &mut mean[..self.count] {
            *mean = *mean / size;
        }
        let squares = self.sums(|j, i| {
            let d = x[i] - mean[j];
            d * d
        });
        let mut r = [R::ZERO; SIDE_BY_SIDE];
        for j in 0..self.count {
            r[j] = (squares[j] / size + eps).sqrt();
            for k in 0..self.n {
                let i = (self.at)(j, k);
                xhat[i] = (x[i] - mean[j]) / r[j];
            }
        }
        Statistics { mean, squares, r }
    }

    /// The input gradient through the normalisation (group `j`'s `r` at `r[j]`): with
    /// `d = g * gamma` (given), `A = Σ d / n`, `M = Σ d * x̂ / n`, `gx = ((d - A) - (x̂ * M)) / r`.
    fn input_gradient<R: Real>(&self, d: &[R], xhat: &[R], r: &[R], gx: &mut [R]) {
        let size = self.size::<R>();
        let a = self.sums(|_, i| d[i]);
        let m = self.sums(|_, i| d[i] * xhat[i]);
        for j in 0..self.count {
            let (a, m) = (a[j] / size, m[j] / size);
            for k in 0..self.n {
                let i = (self.at)(j, k);
                gx[i] = ((d[i] - a) - (xhat[i] * m)) / r[j];
            }
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
    /// The channels `run` over a block of `rows` samples.
    fn groups(&self, run: &Range<usize>, rows: usize) -> Groups<impl Fn(usize, usize) -> usize> {
        let (channels, p, first) = (self.channels, self.positions, run.start);
        Groups {
            n: rows * p,
            count: run.len(),
            at: move |j, k| (k / p * channels + first + j) * p + k % p,
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
        for run in runs(self.channels) {
            let groups = self.groups(&run, rows);
            let normalized = groups.normalize(x, self.eps, xhat);
            for (j, c) in run.enumerate() {
                r[c] = normalized.r[j];
                for k in 0..groups.n {
                    let i = (groups.at)(j, k);
                    y[i] = (gamma[c] * xhat[i]) + beta[c];
                }
                means[c] = normalized.mean[j];
                // n = 1 has no unbiased variance; the update skips such a block (below).
                variances[c] = normalized.squares[j] / R::from_i64(groups.n.max(2) as i64 - 1);
            }
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
            let group = self.groups(&(c..c + 1), rows);
            for k in 0..group.n {
                let i = (group.at)(0, k);
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
    /// The samples `run` (of those a pass was given).
    fn groups(&self, run: &Range<usize>) -> Groups<impl Fn(usize, usize) -> usize> {
        let (n, first) = (self.cells, run.start);
        Groups {
            n,
            count: run.len(),
            at: move |j, k| (first + j) * n + k,
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
        for run in runs(r.len()) {
            let normalized = self.groups(&run).normalize(x, self.eps, xhat);
            r[run.clone()].copy_from_slice(&normalized.r[..run.len()]);
            let cells = run.start * self.cells..run.end * self.cells;
            let rows = y[cells.clone()]
                .chunks_exact_mut(self.cells)
                .zip(xhat[cells].chunks_exact(self.cells));
            for (y, xhat) in rows {
                let scaled = y.iter_mut().zip(xhat).zip(gamma);
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
        chains(g_gamma, rows, |s, k| g[at(s, k)] * xhat[at(s, k)]);
        chains(g_beta, rows, |s, k| g[at(s, k)]);
    }
}

/// `out[j] = (t(0, j) + t(1, j)) + ...` over `terms` terms: each chain's terms in order, from
/// the first. The terms run in the outer loop and the chains in the inner one, so the chains
/// advance side by side. Nothing to do for an empty `out`.
fn chains<R: Real>(out: &mut [R], terms: usize, t: impl Fn(usize, usize) -> R) {
    for (j, out) in out.iter_mut().enumerate() {
        *out = t(0, j);
    }
    for k in 1..terms {
        for (j, out) in out.iter_mut().enumerate() {
            *out = *out + t(k, j);
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
        for run in runs(self.channels) {
            let groups = self.groups(&run, rows);
            let sums = groups.sums(|_, i| g[i]);
            let products = groups.sums(|_, i| g[i] * xhat[i]);
            for (j, c) in run.clone().enumerate() {
                g_beta[c] = sums[j];
                g_gamma[c] = products[j];
                for k in 0..groups.n {
                    let i = (groups.at)(j, k);
                    d[i] = g[i] * gamma[c];
                }
            }
            groups.input_gradient(d, xhat, &r[run], gx);
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
                let (g, xhat, r) = (of(g, &samples, n), of(xhat, &samples, n), &r[samples]);
                for (d, g) in d.chunks_exact_mut(n).zip(g.chunks_exact(n)) {
                    for ((d, &g), &gamma) in d.iter_mut().zip(g).zip(gamma) {
                        *d = g * gamma;
                    }
                }
                for run in runs(r.len()) {
                    self.groups(&run).input_gradient(d, xhat, &r[run], gx);
                }
            },
        );
    }
}
