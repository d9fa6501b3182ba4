//! Max and average pooling (`docs/TRAINING.md` sections 15.2-15.3), per channel over windows
//! without padding.

use super::window::{copy_from, Window};
use crate::arith::Real;
use crate::math::Math;
use crate::softf32::F32;
use core::ops::Range;

/// The outputs of max pooling `rows` samples (channels first), and each output's chosen cell
/// (its index in the sample) for the backward pass: the first maximum by IEEE `>`, or the
/// window's first NaN.
pub fn max_forward<R: Real>(w: &Window, x: &[R], rows: usize, y: &mut [R], chosen: &mut [u32]) {
    debug_assert_eq!(w.padding, [0, 0], "pooling has no padding");
    let (cells, p) = (w.input_cells(), w.positions());
    let ([height, width], [out_h, out_w]) = (w.input, w.output);
    let ([kh, kw], [sh, sw]) = (w.kernel, w.stride);
    // Each window's first cell in its plane (row-major windows); a sample has at most 2^24
    // cells, so indices fit in u32.
    let first: Vec<u32> = (0..out_h)
        .flat_map(|th| (0..out_w).map(move |tw| (th * sh * width + tw * sw) as u32))
        .collect();
    // One cell of every window of a plane, gathered so that the comparisons run on contiguous
    // lanes.
    let mut gathered = vec![R::ZERO; p];
    // The windows are walked where they lie (no padding: every cell of a window is in the
    // input), cells in row-major order from the window's first: a whole plane's windows at a
    // time, lanes over the windows (long runs of lanes, not one output row's few), each
    // window's comparisons in its cells' order.
    for (sample, (y, chosen)) in x[..rows * cells].chunks_exact(cells).zip(
        y.chunks_exact_mut(w.channels * p)
            .zip(chosen.chunks_exact_mut(w.channels * p)),
    ) {
        let planes = sample.chunks_exact(height * width).enumerate();
        for ((c, plane), (m, best)) in
            planes.zip(y.chunks_exact_mut(p).zip(chosen.chunks_exact_mut(p)))
        {
            // The chosen cell's index in the sample.
            let offset = (c * height * width) as u32;
            R::vectorized(
                #[inline(always)]
                || {
                    for a in 0..kh {
                        for b in 0..kw {
                            let shift = a * width + b;
                            for (th, v) in gathered.chunks_exact_mut(out_w).enumerate() {
                                copy_from(v, &plane[th * sh * width + shift..], sw);
                            }
                            let shift = offset + shift as u32;
                            if a == 0 && b == 0 {
                                m.copy_from_slice(&gathered);
                                for (best, &f) in best.iter_mut().zip(&first) {
                                    *best = f + shift;
                                }
                                continue;
                            }
                            for ((m, best), (&v, &f)) in m
                                .iter_mut()
                                .zip(best.iter_mut())
                                .zip(gathered.iter().zip(&first))
                            {
                                // Selected with masks, not a branch: on real data which cell
                                // wins is as good as random.
                                let keep = u32::from(takes_over(v, *m)).wrapping_neg();
                                *best = (*best & !keep) | ((f + shift) & keep);
                                let bits = |x: R| x.to_f32().to_bits();
                                let m_bits = (bits(*m) & !keep) | (bits(v) & keep);
                                *m = R::from_f32(F32::from_bits(m_bits));
                            }
                        }
                    }
                },
            );
        }
    }
}

/// Every window's cells (indices into a sample, row-major), from the window's gather table:
/// pooling has no padding, so every entry is a cell.
struct Windows {
    table: Vec<u32>,
    column: usize,
    per_channel: usize,
}

impl Windows {
    fn of(w: &Window) -> Windows {
        Windows {
            table: w.gather_table(),
            column: w.column(),
            per_channel: w.window_cells(),
        }
    }

    /// Channel `c`'s window at output position `t`.
    fn cells(&self, c: usize, t: usize) -> &[u32] {
        &self.table[t * self.column + c * self.per_channel..][..self.per_channel]
    }
}

/// Whether `v`, later in the window, replaces the maximum so far `m`.
fn takes_over<R: Real>(v: R, m: R) -> bool {
    m.ieee_lt(v) | (v.is_nan() & !m.is_nan())
}

/// The input gradient of max pooling: each window's `g` added (from +0, windows in order) to its
/// chosen cell. With `rectify`, `(math, y)` with `y` the outputs, then a ReLU's derivative below:
/// `+0` where the input is not positive by [`Math::le`] ([`Pooled::scatter`]).
pub fn max_backward<R: Real>(
    w: &Window,
    g: &[R],
    chosen: &[u32],
    rows: usize,
    gx: &mut [R],
    rectify: Option<(Math, &[R])>,
) {
    let (cells, outputs, plane) = (
        w.input_cells(),
        w.channels * w.positions(),
        w.input[0] * w.input[1],
    );
    let mut masked = Vec::new();
    for s in 0..rows {
        let sample = &mut gx[s * cells..][..cells];
        // Cleared sample by sample, just before its sums (in the cache), not all at first.
        sample.fill(R::ZERO);
        if let Some((math, y)) = rectify {
            let pooled = Pooled {
                window: w,
                math,
                g,
                y,
                chosen,
            };
            pooled.scatter(s, 0..w.channels, &mut masked, sample, |c, t| c * plane + t);
            continue;
        }
        let (chosen, g) = (
            &chosen[s * outputs..][..outputs],
            &g[s * outputs..][..outputs],
        );
        for (&i, &g) in chosen.iter().zip(g) {
            sample[i as usize] = sample[i as usize] + g;
        }
    }
}

/// What max pooling's backward pass reads when it applies the derivative of a ReLU below it
/// (the ReLU's outputs are the pooling's inputs): for [`max_backward`], and for a convolution
/// below the ReLU that makes its output gradients from these, where it uses them.
#[derive(Clone, Copy, Debug)]
pub struct Pooled<'a, R> {
    pub window: &'a Window,
    pub math: Math,
    /// The pooling's output gradients, its outputs and each window's chosen cell.
    pub g: &'a [R],
    pub y: &'a [R],
    pub chosen: &'a [u32],
}

impl<R: Real> Pooled<'_, R> {
    /// Sample `s`'s gradients of `channels` added into `out` (+0 before) where `at(c, t)` says
    /// (`c` counted from `channels.start`, `t` the position in its plane): each window's `g`,
    /// +0 where its output is not positive (`masked`: cells to reuse), added to its chosen cell,
    /// windows in order. A chosen cell's input is its window's output (the same bits), so this
    /// is the ReLU's derivative of max pooling's sums: a cell whose input is not positive gets
    /// +0 throughout, and the cells no window chose are +0 either way.
    pub fn scatter(
        &self,
        s: usize,
        channels: Range<usize>,
        masked: &mut Vec<R>,
        out: &mut [R],
        at: impl Fn(usize, usize) -> usize,
    ) {
        let w = self.window;
        let (windows, plane) = (w.positions(), w.input[0] * w.input[1]);
        let first = (s * w.channels + channels.start) * windows;
        let n = channels.len() * windows;
        masked.resize(n, R::ZERO);
        let (g, y) = (&self.g[first..first + n], &self.y[first..first + n]);
        self.math.copy_where_positive(y, g, masked);
        let chosen = self.chosen[first..first + n].chunks_exact(windows);
        for ((c, chosen), g) in chosen.enumerate().zip(masked.chunks_exact(windows)) {
            // A chosen cell's index in the sample, less its plane's first.
            let plane_first = (channels.start + c) * plane;
            for (&i, &g) in chosen.iter().zip(g) {
                let cell = &mut out[at(c, i as usize - plane_first)];
                *cell = *cell + g;
            }
        }
    }
}

/// The outputs of average pooling: each window's sum from its first cell over `f32(cells)`.
pub fn avg_forward<R: Real>(w: &Window, x: &[R], rows: usize, y: &mut [R]) {
    let (cells, p) = (w.input_cells(), w.positions());
    let count = R::from_i64(w.window_cells() as i64);
    let windows = Windows::of(w);
    for s in 0..rows {
        let sample = &x[s * cells..][..cells];
        for c in 0..w.channels {
            for t in 0..p {
                let window = windows.cells(c, t);
                let first = sample[window[0] as usize];
                let sum = window[1..]
                    .iter()
                    .fold(first, |acc, &i| acc + sample[i as usize]);
                y[(s * w.channels + c) * p + t] = sum / count;
            }
        }
    }
}

/// The input gradient of average pooling: each window's `g / f32(cells)` added to each of its
/// cells, from +0, windows in order.
pub fn avg_backward<R: Real>(w: &Window, g: &[R], rows: usize, gx: &mut [R]) {
    let (cells, p) = (w.input_cells(), w.positions());
    let count = R::from_i64(w.window_cells() as i64);
    let windows = Windows::of(w);
    gx[..rows * cells].fill(R::ZERO);
    for s in 0..rows {
        let sample = &mut gx[s * cells..][..cells];
        for c in 0..w.channels {
            for t in 0..p {
                let share = g[(s * w.channels + c) * p + t] / count;
                for &i in windows.cells(c, t) {
                    sample[i as usize] = sample[i as usize] + share;
                }
            }
        }
    }
}
