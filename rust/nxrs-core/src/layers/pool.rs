//! Max and average pooling (`docs/TRAINING.md` sections 15.2-15.3), per channel over windows
//! without padding.

use super::window::Window;
use crate::arith::Real;
use crate::softf32::F32;

/// The outputs of max pooling `rows` samples (channels first), and each output's chosen cell
/// (its index in the sample) for the backward pass: the first maximum by IEEE `>`, or the
/// window's first NaN.
pub fn max_forward<R: Real>(w: &Window, x: &[R], rows: usize, y: &mut [R], chosen: &mut [u32]) {
    debug_assert_eq!(w.padding, [0, 0], "pooling has no padding");
    let (cells, p) = (w.input_cells(), w.positions());
    let ([height, width], [_, out_w]) = (w.input, w.output);
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
            let mut row = vec![R::ZERO; out_w];
            // An output row at a time, each window cell (row-major) compared across the row's
            // windows: lanes over the windows, each window's comparisons in its cells' order.
            for (th, (m, best)) in y
                .chunks_exact_mut(out_w)
                .zip(chosen.chunks_exact_mut(out_w))
                .enumerate()
            {
                let top = th * sh * width;
                R::vectorized(
                    #[inline(always)]
                    || {
                        for (tw, (m, best)) in m.iter_mut().zip(best.iter_mut()).enumerate() {
                            *m = plane[top + tw * sw];
                            *best = (offset + top + tw * sw) as u32;
                        }
                        for a in 0..kh {
                            for b in usize::from(a == 0)..kw {
                                let first = top + a * width + b;
                                // The row's cells at this place of their windows, gathered
                                // first so that the comparisons below run on contiguous lanes.
                                let cells = plane[first..].iter().step_by(sw);
                                for (v, &x) in row.iter_mut().zip(cells) {
                                    *v = x;
                                }
                                for (tw, ((m, best), &v)) in
                                    m.iter_mut().zip(best.iter_mut()).zip(&row).enumerate()
                                {
                                    // Selected with masks, not a branch: on real data which
                                    // cell wins is as good as random.
                                    let keep = u32::from(takes_over(v, *m)).wrapping_neg();
                                    let at = (offset + first + tw * sw) as u32;
                                    *best = (*best & !keep) | (at & keep);
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
