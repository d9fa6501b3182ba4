//! The sliding windows of convolutions and pooling (`docs/TRAINING.md` section 15.1): one
//! geometry for 1-D and 2-D, a 1-D layer being a 2-D one of height 1 (its windows, columns and
//! positions come out in the same order).

use crate::arith::Real;
use crate::error::{Error, Result};

/// A gather table's entry for a padding cell (no sample has that many cells).
pub const PADDING: u32 = u32::MAX;

/// Where a layer's windows lie over one sample's `channels x height x width` input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub channels: usize,
    /// `[height, width]` of the input, the kernel, the stride, the padding and the output.
    pub input: [usize; 2],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub output: [usize; 2],
}

impl Window {
    /// The windows of `kernel` moved by `stride` over `input` padded by `padding`; the one check
    /// of every size a window layer is given (`what` names the layer in the error).
    pub fn new(
        what: &str,
        channels: usize,
        input: [usize; 2],
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> Result<Window> {
        let mut output = [0; 2];
        for d in 0..2 {
            let (n, k, s, q) = (input[d], kernel[d], stride[d], padding[d]);
            // The sizes as the layer was given them, one at a time: a 1-D layer's windows
            // have a height of 1 that its user never wrote.
            for (name, size) in [("kernel_size", k), ("stride", s)] {
                if size == 0 {
                    return Err(Error::Config(format!(
                        "{what}: kernel sizes and strides must be >= 1, got {name} 0"
                    )));
                }
            }
            if q >= k {
                return Err(Error::Config(format!(
                    "{what}: padding {q} must be smaller than the kernel size {k} (a window of \
                     padding only sees no input)"
                )));
            }
            // n + 2q >= k, in arithmetic that cannot overflow (a model file may give any size).
            let Some(padded) = q.checked_mul(2).and_then(|twice| twice.checked_add(n)) else {
                return Err(Error::Config(format!(
                    "{what}: padding {q} is too large (the padded input would have more than \
                     2^64 cells)"
                )));
            };
            if padded < k {
                return Err(Error::Config(format!(
                    "{what}: kernel size {k} is longer than its padded input ({n} + 2 x {q})"
                )));
            }
            output[d] = (padded - k) / s + 1;
        }
        Ok(Window {
            channels,
            input,
            kernel,
            stride,
            padding,
            output,
        })
    }

    /// Output positions per channel.
    pub fn positions(&self) -> usize {
        self.output[0] * self.output[1]
    }

    /// Cells of one sample's input.
    pub fn input_cells(&self) -> usize {
        self.channels * self.input[0] * self.input[1]
    }

    /// Cells of one channel's window.
    pub fn window_cells(&self) -> usize {
        self.kernel[0] * self.kernel[1]
    }

    /// The length of a convolution's column (`channels x window cells`).
    pub fn column(&self) -> usize {
        self.channels * self.window_cells()
    }

    /// Every output position's column as indices into the sample's cells: `positions x
    /// column` entries (position after position; within a column, channel after channel and
    /// each window's cells in row-major order), [`PADDING`] for padding. Average pooling sums
    /// through it instead of walking the windows cell by cell.
    pub fn gather_table(&self) -> Vec<u32> {
        let kk = self.window_cells();
        let mut table = vec![PADDING; self.positions() * self.column()];
        for (t, column) in table.chunks_exact_mut(self.column()).enumerate() {
            for c in 0..self.channels {
                self.for_each_cell(c, t, |k, cell| {
                    if let Some(i) = cell {
                        // A sample has at most 2^24 cells (the shape limit).
                        column[c * kk + k] = i as u32;
                    }
                });
            }
        }
        table
    }

    /// Calls `f(k, cell)` for the cells of channel `c`'s window at output position `t`, `k`
    /// counting them in row-major order and `cell` the input cell's index in the sample, or
    /// `None` for padding.
    #[inline]
    fn for_each_cell(&self, c: usize, t: usize, mut f: impl FnMut(usize, Option<usize>)) {
        let [th, tw] = [t / self.output[1], t % self.output[1]];
        let [h, w] = self.input;
        let plane = c * h * w;
        for kh in 0..self.kernel[0] {
            // The padded row, shifted back to the input's rows (padding lies outside 0..h).
            let row = (th * self.stride[0] + kh).checked_sub(self.padding[0]);
            for kw in 0..self.kernel[1] {
                let col = (tw * self.stride[1] + kw).checked_sub(self.padding[1]);
                let cell = match (row, col) {
                    (Some(r), Some(c)) if r < h && c < w => Some(plane + r * w + c),
                    _ => None,
                };
                f(kh * self.kernel[1] + kw, cell);
            }
        }
    }
}

/// `to[i] = from[i * stride]` for every cell of `to`: a loop the compiler vectorises, not a call
/// to `memcpy` per run (the runs are a few cells).
#[inline(always)]
pub fn copy_from<R: Real>(to: &mut [R], from: &[R], stride: usize) {
    match stride {
        1 => {
            for (to, &from) in to.iter_mut().zip(from) {
                *to = from;
            }
        }
        // Every other cell (the usual stride of pooling), read as the low halves of 8-byte
        // pairs: loads and narrowings the compiler vectorises (a strided load it does not).
        2 if !to.is_empty() => {
            let last = to.len() - 1;
            let pairs: &[u8] = bytemuck::cast_slice(&from[..2 * last]);
            let to_bits: &mut [u32] = bytemuck::cast_slice_mut(&mut to[..last]);
            for (to, pair) in to_bits.iter_mut().zip(pairs.chunks_exact(8)) {
                *to = u64::from_le_bytes(pair.try_into().expect("8 bytes")) as u32;
            }
            to[last] = from[2 * last];
        }
        _ => {
            for (to, &from) in to.iter_mut().zip(from.iter().step_by(stride)) {
                *to = from;
            }
        }
    }
}

/// `to[i * stride] = to[i * stride] + from[i]` for every cell of `from` (a loop, as
/// [`copy_from`]).
#[inline(always)]
pub fn add_into<R: Real>(to: &mut [R], stride: usize, from: &[R]) {
    if stride == 1 {
        for (to, &from) in to.iter_mut().zip(from) {
            *to = *to + from;
        }
    } else if stride == 2 && !from.is_empty() {
        // A constant stride, and bounds the compiler can see (no iterator stepping per cell).
        let to = &mut to[..2 * from.len() - 1];
        for (i, &from) in from.iter().enumerate() {
            to[2 * i] = to[2 * i] + from;
        }
    } else {
        for (to, &from) in to.iter_mut().step_by(stride).zip(from) {
            *to = *to + from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sizes_follow_pytorch() {
        // floor((40 + 2 - 5) / 2) + 1 = 19, the first layer of MNIST-1D's ConvBase.
        let w = Window::new("c", 1, [1, 40], [1, 5], [1, 2], [0, 1]).unwrap();
        assert_eq!(w.output, [1, 19]);
        // A last window that does not fit is dropped: floor((7 - 2) / 2) + 1 = 3.
        let w = Window::new("p", 2, [7, 7], [2, 2], [2, 2], [0, 0]).unwrap();
        assert_eq!(w.output, [3, 3]);
    }

    #[test]
    fn refuses_windows_that_see_no_input() {
        let err = Window::new("conv", 1, [1, 9], [1, 3], [1, 1], [0, 3]).unwrap_err();
        assert!(
            err.to_string().contains("padding 3 must be smaller"),
            "{err}"
        );
        let err = Window::new("conv", 1, [1, 2], [1, 5], [1, 1], [0, 1]).unwrap_err();
        assert!(
            err.to_string().contains("longer than its padded input"),
            "{err}"
        );
    }

    #[test]
    fn cells_run_row_major_with_padding_outside() {
        let w = Window::new("c", 2, [2, 3], [2, 2], [1, 1], [1, 1]).unwrap();
        let mut seen = Vec::new();
        w.for_each_cell(1, 0, |k, cell| seen.push((k, cell)));
        // Position (0, 0) of channel 1 covers padded rows -1..1 and columns -1..1.
        assert_eq!(seen, [(0, None), (1, None), (2, None), (3, Some(6))]);
    }
}
