//! Max and average pooling (`docs/TRAINING.md` sections 15.2-15.3), per channel over windows
//! without padding.

use super::window::Window;
use crate::arith::Real;

/// The outputs of max pooling `rows` samples (channels first), and each output's chosen cell
/// (its index in the sample) for the backward pass: the first maximum by IEEE `>`, or the
/// window's first NaN.
pub fn max_forward<R: Real>(w: &Window, x: &[R], rows: usize, y: &mut [R], chosen: &mut [u32]) {
    let (cells, p) = (w.input_cells(), w.positions());
    for s in 0..rows {
        let sample = &x[s * cells..][..cells];
        for c in 0..w.channels {
            for t in 0..p {
                let mut best: Option<usize> = None;
                w.for_each_cell(c, t, |_, cell| {
                    // Pooling has no padding: every cell is in the input.
                    let i = cell.expect("pooling windows lie inside the input");
                    best = Some(match best {
                        Some(b) if !takes_over(sample[i], sample[b]) => b,
                        _ => i,
                    });
                });
                let b = best.expect("a window has at least one cell");
                let out = (s * w.channels + c) * p + t;
                y[out] = sample[b];
                chosen[out] = u32::try_from(b).expect("a sample has at most 2^24 cells");
            }
        }
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
    for s in 0..rows {
        let sample = &x[s * cells..][..cells];
        for c in 0..w.channels {
            for t in 0..p {
                let mut sum: Option<R> = None;
                w.for_each_cell(c, t, |_, cell| {
                    let v = sample[cell.expect("pooling windows lie inside the input")];
                    sum = Some(sum.map_or(v, |acc| acc + v));
                });
                y[(s * w.channels + c) * p + t] = sum.expect("a window has a cell") / count;
            }
        }
    }
}

/// The input gradient of average pooling: each window's `g / f32(cells)` added to each of its
/// cells, from +0, windows in order.
pub fn avg_backward<R: Real>(w: &Window, g: &[R], rows: usize, gx: &mut [R]) {
    let (cells, p) = (w.input_cells(), w.positions());
    let count = R::from_i64(w.window_cells() as i64);
    gx[..rows * cells].fill(R::ZERO);
    for s in 0..rows {
        let sample = &mut gx[s * cells..][..cells];
        for c in 0..w.channels {
            for t in 0..p {
                let share = g[(s * w.channels + c) * p + t] / count;
                w.for_each_cell(c, t, |_, cell| {
                    let i = cell.expect("pooling windows lie inside the input");
                    sample[i] = sample[i] + share;
                });
            }
        }
    }
}
