//! Max and average pooling (`docs/TRAINING.md` sections 15.2-15.3), per channel over windows
//! without padding.

use super::window::Window;
use crate::arith::Real;

/// The outputs of max pooling `rows` samples (channels first), and each output's chosen cell
/// (its index in the sample) for the backward pass: the first maximum by IEEE `>`, or the
/// window's first NaN.
pub fn max_forward<R: Real>(w: &Window, x: &[R], rows: usize, y: &mut [R], chosen: &mut [u32]) {
    debug_assert_eq!(w.padding, [0, 0], "pooling has no padding");
    let (cells, p) = (w.input_cells(), w.positions());
    let ([height, width], [out_h, out_w]) = (w.input, w.output);
    let ([kh, kw], [sh, sw]) = (w.kernel, w.stride);
    // The windows are walked where they lie (no padding: every cell of a window is in the
    // input), cells in row-major order from the window's first.
    for (sample, (y, chosen)) in x[..rows * cells].chunks_exact(cells).zip(
        y.chunks_exact_mut(w.channels * p)
            .zip(chosen.chunks_exact_mut(w.channels * p)),
    ) {
        let planes = sample.chunks_exact(height * width).enumerate();
        for ((c, plane), (y, chosen)) in
            planes.zip(y.chunks_exact_mut(p).zip(chosen.chunks_exact_mut(p)))
        {
            // The chosen cell's index in the sample (a sample has at most 2^24 cells).
            let offset = c * height * width;
            for th in 0..out_h {
                for tw in 0..out_w {
                    let first = th * sh * width + tw * sw;
                    let (mut best, mut m) = (first, plane[first]);
                    for a in 0..kh {
                        let row = first + a * width;
                        for (b, &v) in plane[row..row + kw].iter().enumerate() {
                            if (a, b) != (0, 0) && takes_over(v, m) {
                                (best, m) = (row + b, v);
                            }
                        }
                    }
                    y[th * out_w + tw] = m;
                    chosen[th * out_w + tw] = (offset + best) as u32;
                }
            }
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
    m.ieee_lt(v) || (v.is_nan() && !m.is_nan())
}

/// The input gradient of max pooling: each window's `g` added (from +0, windows in order) to its
/// chosen cell.
pub fn max_backward<R: Real>(w: &Window, g: &[R], chosen: &[u32], rows: usize, gx: &mut [R]) {
    let (cells, outputs) = (w.input_cells(), w.channels * w.positions());
    gx[..rows * cells].fill(R::ZERO);
    for s in 0..rows {
        let sample = &mut gx[s * cells..][..cells];
        for out in s * outputs..(s + 1) * outputs {
            let i = chosen[out] as usize;
            sample[i] = sample[i] + g[out];
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
