//! Dense and convolution layers (`docs/TRAINING.md` sections 15.2-15.3): every output a chain
//! from its bias over a column of inputs, so a block's whole layer is one matrix product over
//! its columns (im2col) and its gradients two more. Dense is the convolution with one position
//! whose column is the sample itself.

use super::window::{Window, PADDING};
use crate::arith::matmul::{MatMul, Matrix, MatrixMut, Order, Start};
use crate::arith::{cells, cells_mut, Real};
use crate::softf32::F32;
use crate::threads::{ranges, split, Threads};

/// A convolution (or Dense: `window` of one position over `inputs x 1 x 1`, a 1 x 1 kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv {
    pub window: Window,
    pub out_channels: usize,
}

impl Conv {
    /// Dense over `inputs` features.
    pub fn dense(inputs: usize, units: usize) -> Conv {
        let window = Window {
            channels: inputs,
            input: [1, 1],
            kernel: [1, 1],
            stride: [1, 1],
            padding: [0, 0],
            output: [1, 1],
        };
        Conv {
            window,
            out_channels: units,
        }
    }

    /// Whether the columns are the samples themselves (Dense), so no copy is made.
    fn columns_are_inputs(&self) -> bool {
        self.window.positions() == 1 && self.window.column() == self.window.input_cells()
    }

    fn positions(&self) -> usize {
        self.window.positions()
    }

    /// The columns of `rows` samples (`rows x input cells`): `(rows * positions) x column`,
    /// sample after sample, positions in row-major order, padding as +0.
    pub fn columns<'a, R: Real>(
        &self,
        threads: &Threads,
        x: &'a [R],
        rows: usize,
        cols: &'a mut Vec<F32>,
    ) -> &'a [R] {
        if self.columns_are_inputs() {
            return &x[..rows * self.window.input_cells()];
        }
        let (p, j) = (self.positions(), self.window.column());
        let cells = self.window.input_cells();
        let table = self.window.gather_table();
        let cols: &mut [R] = cells_mut(resized(cols, rows * p * j));
        // Only bits move: the samples are shared out among the threads.
        let parts = threads.parts(rows, p * j);
        let tasks = split(&x[..rows * cells], ranges(rows, parts), cells).zip(split(
            &mut cols[..],
            ranges(rows, parts),
            p * j,
        ));
        threads.run(tasks, |(x, cols)| {
            for (sample, cols) in x.chunks_exact(cells).zip(cols.chunks_exact_mut(p * j)) {
                for (col, &i) in cols.iter_mut().zip(&table) {
                    *col = if i == PADDING {
                        R::ZERO
                    } else {
                        sample[i as usize]
                    };
                }
            }
        });
        cols
    }

    /// The columns [`Conv::columns`] gave for `x`, with `cols` as it left them.
    pub fn kept_columns<'a, R: Real>(&self, x: &'a [R], rows: usize, cols: &'a [F32]) -> &'a [R] {
        if self.columns_are_inputs() {
            &x[..rows * self.window.input_cells()]
        } else {
            cells(&cols[..rows * self.positions() * self.window.column()])
        }
    }

    /// The outputs of `rows` samples, channels first (`rows x (out_channels * positions)`):
    /// `z[o, t] = b[o] + Σ_j W[o, j] * col_t[j]`, from the bias (`weights` row-major
    /// `out_channels x column`). `scratch` holds the product position by position.
    #[allow(clippy::too_many_arguments)] // the threads, the weights, the columns, the outputs
    pub fn forward<R: Real>(
        &self,
        threads: &Threads,
        weights: &[R],
        bias: &[R],
        cols: &[R],
        rows: usize,
        scratch: &mut Vec<F32>,
        y: &mut [R],
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        let product = |c: &mut [R]| {
            let a = Matrix::new(cols, rows * p, j);
            let b = Matrix::new(weights, o, j).t();
            shared(threads, c, Start::Row(bias), a, b, Order::BA);
        };
        if p == 1 {
            product(&mut y[..rows * o]);
        } else {
            let scratch: &mut [R] = cells_mut(resized(scratch, rows * p * o));
            product(scratch);
            for s in 0..rows {
                transpose(
                    &scratch[s * p * o..][..p * o],
                    p,
                    o,
                    &mut y[s * o * p..][..o * p],
                );
            }
        }
    }

    /// The output gradients `g` (channels first, `rows x (out_channels * positions)`) position by
    /// position: `(rows * positions) x out_channels`, what both gradients read (`g` itself for
    /// Dense).
    pub fn by_position<'a, R: Real>(
        &self,
        g: &'a [R],
        rows: usize,
        into: &'a mut Vec<F32>,
    ) -> &'a [R] {
        let (p, o) = (self.positions(), self.out_channels);
        if p == 1 {
            return &g[..rows * o];
        }
        let into: &mut [R] = cells_mut(resized(into, rows * p * o));
        for s in 0..rows {
            transpose(
                &g[s * o * p..][..o * p],
                o,
                p,
                &mut into[s * p * o..][..p * o],
            );
        }
        into
    }

    /// The input gradient of `rows` samples from their output gradients `d` by position
    /// ([`Conv::by_position`]): column gradients `h_t[j] = Σ_o W[o, j] * δ[o, t]` from +0, then
    /// each input cell's sum from +0 over the positions whose window holds it, in order.
    pub fn input_gradient<R: Real>(
        &self,
        threads: &Threads,
        weights: &[R],
        d: &[R],
        rows: usize,
        scratch: &mut Vec<F32>,
        gx: &mut [R],
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        let cells = self.window.input_cells();
        let product = |c: &mut [R]| {
            let (a, b) = (Matrix::new(d, rows * p, o), Matrix::new(weights, o, j));
            shared(threads, c, Start::Zero, a, b, Order::BA);
        };
        if self.columns_are_inputs() {
            // Each cell's one term added to +0 is the term itself: the chain starts from +0, so
            // it is never -0.
            product(&mut gx[..rows * cells]);
            return;
        }
        let scratch: &mut [R] = cells_mut(resized(scratch, rows * p * j));
        product(scratch);
        // Each cell's sum from +0 over the positions whose window holds it, in order: the
        // table is walked position by position.
        let table = self.window.gather_table();
        // Each sample's cells are its own: the samples are shared out among the threads.
        let parts = threads.parts(rows, p * j);
        let tasks = split(&mut gx[..rows * cells], ranges(rows, parts), cells).zip(split(
            &scratch[..],
            ranges(rows, parts),
            p * j,
        ));
        threads.run(tasks, |(gx, scratch)| {
            let _env = R::environment();
            gx.fill(R::ZERO);
            for (sample, h) in gx.chunks_exact_mut(cells).zip(scratch.chunks_exact(p * j)) {
                for (&i, &h) in table.iter().zip(h) {
                    if i != PADDING {
                        sample[i as usize] = sample[i as usize] + h;
                    }
                }
            }
        });
    }

    /// The block gradients of `rows` samples: `gw[o, j]` the chain over the block's samples and
    /// positions in order of `δ[o, t] * col_t[j]` from the first term, `gb[o]` that of `δ[o, t]`.
    #[allow(clippy::too_many_arguments)] // the threads, both operands, both results
    pub fn block_gradient<R: Real>(
        &self,
        threads: &Threads,
        d: &[R],
        cols: &[R],
        rows: usize,
        gw: &mut [R],
        gb: &mut [R],
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        let n = rows * p;
        let (a, b) = (Matrix::new(d, n, o).t(), Matrix::new(cols, n, j));
        shared(threads, gw, Start::FirstTerm, a, b, Order::AB);
        gb.copy_from_slice(&d[..o]);
        for r in 1..n {
            R::add_assign(gb, &d[r * o..][..o]);
        }
    }
}

/// `c = start + a b` (`c` row-major, `a`'s rows by `b`'s columns) with `c`'s rows shared out
/// among `threads`: every element's chain is still one thread's, in order, so the bits are the
/// same for any count (parts below a thread's worth of work stay on one).
fn shared<R: Real>(
    threads: &Threads,
    c: &mut [R],
    start: Start<'_, R>,
    a: Matrix<'_, R>,
    b: Matrix<'_, R>,
    order: Order,
) {
    let ((rows, k), (_, cols)) = (a.shape(), b.shape());
    let parts = threads.parts(rows, k * cols);
    let tasks = ranges(rows, parts).zip(split(&mut c[..rows * cols], ranges(rows, parts), cols));
    threads.run(tasks, |(range, c)| {
        let _env = R::environment();
        let part = MatrixMut::new(c, range.len(), cols);
        MatMul::new(part, start, a.rows(range), b, order).run();
    });
}

/// The first `n` cells of `v`, grown if needed (scratch reused from pass to pass).
fn resized(v: &mut Vec<F32>, n: usize) -> &mut [F32] {
    if v.len() < n {
        v.resize(n, F32::ZERO);
    }
    &mut v[..n]
}

/// `to = fromᵀ` for a row-major `rows x cols` matrix (bit patterns only: any backend's values).
fn transpose<R: Real>(from: &[R], rows: usize, cols: usize, to: &mut [R]) {
    crate::transpose::transpose(
        bytemuck::cast_slice(from),
        rows,
        cols,
        bytemuck::cast_slice_mut(to),
    );
}
