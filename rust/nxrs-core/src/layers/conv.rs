//! Dense and convolution layers (`docs/TRAINING.md` sections 15.2-15.3): every output a chain
//! from its bias over a column of inputs, so a block's whole layer is one matrix product over
//! its columns (im2col) and its gradients two more. Dense is the convolution with one position
//! whose column is the sample itself.

use super::window::Window;
use crate::arith::matmul::{MatMul, Matrix, MatrixMut, Order, Start, PANEL};
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

    /// The columns of `rows` samples (`rows x input cells`), column by column: `rows x (column
    /// x positions)`, for each sample row `j` holding `col_t[j]` for the positions `t` in
    /// row-major order, padding as +0 (for one position, the columns one after the other).
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
        let cols: &mut [R] = cells_mut(resized(cols, rows * j * p));
        // Only bits move: the samples are shared out among the threads.
        let parts = threads.parts(rows, j * p);
        let tasks = split(&x[..rows * cells], ranges(rows, parts), cells).zip(split(
            &mut cols[..],
            ranges(rows, parts),
            j * p,
        ));
        threads.run(tasks, |(x, cols)| {
            self.gather(x, &mut vec![R::ZERO; self.padded_cells()], cols);
        });
        cols
    }

    /// Cells of one sample's padded input (`channels x (height + 2 * padding[0]) x (width + 2 *
    /// padding[1])`), where every window lies whole: the columns are gathered from it and their
    /// gradients added up in it, each output row's cells of a column one run (contiguous for a
    /// stride of 1), with no edge to cut it short.
    fn padded_cells(&self) -> usize {
        let w = &self.window;
        w.channels * (w.input[0] + 2 * w.padding[0]) * (w.input[1] + 2 * w.padding[1])
    }

    /// Where input row `r` (rows of all channels in order) starts in the padded input.
    fn padded_row(&self, r: usize) -> usize {
        let w = &self.window;
        let (c, r) = (r / w.input[0], r % w.input[0]);
        let (padded_h, padded_w) = (w.input[0] + 2 * w.padding[0], w.input[1] + 2 * w.padding[1]);
        (c * padded_h + r + w.padding[0]) * padded_w + w.padding[1]
    }

    /// Where the run of column index `jj`'s cells for output row `th` starts in the padded
    /// input: `output[1]` cells, `stride[1]` apart.
    fn run_start(&self, jj: usize, th: usize) -> usize {
        let w = &self.window;
        let [kh, kw] = w.kernel;
        let (c, a, b) = (jj / (kh * kw), jj / kw % kh, jj % kw);
        let (padded_h, padded_w) = (w.input[0] + 2 * w.padding[0], w.input[1] + 2 * w.padding[1]);
        (c * padded_h + th * w.stride[0] + a) * padded_w + b
    }

    /// The columns of the samples `x` into `cols` (column by column), through the padded input
    /// (`padded`, its cells, their padding +0).
    fn gather<R: Real>(&self, x: &[R], padded: &mut [R], cols: &mut [R]) {
        let w = &self.window;
        let (cells, p, sw, out_w) = (w.input_cells(), w.positions(), w.stride[1], w.output[1]);
        for (sample, cols) in x
            .chunks_exact(cells)
            .zip(cols.chunks_exact_mut(w.column() * p))
        {
            for (r, row) in sample.chunks_exact(w.input[1]).enumerate() {
                let at = self.padded_row(r);
                padded[at..at + row.len()].copy_from_slice(row);
            }
            for (jj, col) in cols.chunks_exact_mut(p).enumerate() {
                for (th, col) in col.chunks_exact_mut(out_w).enumerate() {
                    let at = self.run_start(jj, th);
                    if sw == 1 {
                        col.copy_from_slice(&padded[at..at + out_w]);
                    } else {
                        for (col, &x) in col.iter_mut().zip(padded[at..].iter().step_by(sw)) {
                            *col = x;
                        }
                    }
                }
            }
        }
    }

    /// The columns [`Conv::columns`] gave for `x`, with `cols` as it left them.
    pub fn kept_columns<'a, R: Real>(&self, x: &'a [R], rows: usize, cols: &'a [F32]) -> &'a [R] {
        if self.columns_are_inputs() {
            &x[..rows * self.window.input_cells()]
        } else {
            cells(&cols[..rows * self.positions() * self.window.column()])
        }
    }

    /// The outputs of `rows` samples `x`, channels first (`rows x (out_channels * positions)`):
    /// `z[o, t] = b[o] + Σ_j W[o, j] * col_t[j]`, from the bias (`weights` row-major
    /// `out_channels x column`). The columns are left in `cols` ([`Conv::kept_columns`], for
    /// the weight gradient).
    pub fn forward<R: Real>(
        &self,
        threads: &Threads,
        (weights, bias): (&[R], &[R]),
        x: &[R],
        rows: usize,
        cols: &mut Vec<F32>,
        y: &mut [R],
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        if p == 1 {
            let cols = self.columns(threads, x, rows, cols);
            let a = Matrix::new(cols, rows, j);
            let b = Matrix::new(weights, o, j).t();
            shared(
                threads,
                &mut y[..rows * o],
                Start::Row(bias),
                a,
                b,
                Order::BA,
            );
            return;
        }
        // Sample by sample, `z = b + W cols` with the columns column by column: both operands
        // read in place, and the outputs come channels first as the layer gives them, with no
        // transposing. A few samples at a time, so that each chunk's columns are still in the
        // cache when the product reads them; every output's chain is its own, whatever the
        // chunk. The columns of the whole block are kept all the same, for the weight gradient.
        let cells = self.window.input_cells();
        let w = Matrix::new(weights, o, j);
        let cols: &mut [R] = cells_mut(resized(cols, rows * j * p));
        by_samples(
            threads,
            rows,
            (p * j * o, p * (j + o)),
            [(&mut cols[..], j * p), (&mut y[..rows * o * p], o * p)],
            |samples, [cols, y]| {
                let mut padded = vec![R::ZERO; self.padded_cells()];
                self.gather(
                    &x[samples.start * cells..samples.end * cells],
                    &mut padded,
                    cols,
                );
                for (cols, y) in cols.chunks_exact(j * p).zip(y.chunks_exact_mut(o * p)) {
                    let c = MatrixMut::new(y, o, p);
                    let b = Matrix::new(cols, j, p);
                    MatMul::new(c, Start::Column(bias), w, b, Order::AB).run();
                }
            },
        );
    }

    /// The input gradient of `rows` samples from their output gradients `g`, channels first
    /// (`rows x (out_channels * positions)`, as the layer above gives them): column gradients
    /// `h_t[j] = Σ_o W[o, j] * δ[o, t]` from +0, then each input cell's sum from +0 over the
    /// positions whose window holds it, in order.
    pub fn input_gradient<R: Real>(
        &self,
        threads: &Threads,
        weights: &[R],
        g: &[R],
        rows: usize,
        scratch: &mut Vec<F32>,
        gx: &mut [R],
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        let cells = self.window.input_cells();
        if self.columns_are_inputs() {
            // Each cell's one term added to +0 is the term itself: the chain starts from +0, so
            // it is never -0.
            let a = Matrix::new(g, rows, o);
            let b = Matrix::new(weights, o, j);
            shared(
                threads,
                &mut gx[..rows * cells],
                Start::Zero,
                a,
                b,
                Order::BA,
            );
            return;
        }
        // Column by column (`hᵀ = Wᵀ δ`, `column x positions` per sample): both operands are
        // read where they lie (`Wᵀ`'s columns and `δ`'s rows are contiguous), so the output
        // gradients need no transposing, and each column's gradients are contiguous for the
        // additions into the cells.
        let w_t = Matrix::new(weights, o, j).t();
        let scratch: &mut [R] = cells_mut(resized(scratch, rows * j * p));
        // Sample by sample (a few at a time, so that each chunk's column gradients are still in
        // the cache when they are added up); each sample's cells are its own.
        by_samples(
            threads,
            rows,
            (p * j * o, p * j),
            [(&mut scratch[..], j * p), (&mut gx[..rows * cells], cells)],
            |samples, [scratch, gx]| {
                let mut padded = vec![R::ZERO; self.padded_cells()];
                for ((s, h), gx) in samples
                    .zip(scratch.chunks_exact_mut(j * p))
                    .zip(gx.chunks_exact_mut(cells))
                {
                    let d = Matrix::new(&g[s * o * p..(s + 1) * o * p], o, p);
                    let c = MatrixMut::new(h, j, p);
                    MatMul::new(c, Start::Zero, w_t, d, Order::AB).run();
                    self.add_columns(h, &mut padded, gx);
                }
            },
        );
    }

    /// One sample's input gradient `gx` from its column gradients `h` (`column x positions`):
    /// each cell's sum from +0 over the positions `t` whose window holds it, `t` in row-major
    /// order. A column index `j = (c, a, b)` (channel, kernel row, kernel column) sends each
    /// position's gradient to a different cell, and for a given cell a later position `t` is
    /// an earlier `(a, b)` (its window starts further on): so the columns are taken in reverse
    /// order. Their gradients are added into the padded input (`padded`, its cells; see
    /// [`Conv::padded_cells`]), the runs contiguous for a stride of 1 and added with vector
    /// instructions; the padding's sums are then dropped.
    fn add_columns<R: Real>(&self, h: &[R], padded: &mut [R], gx: &mut [R]) {
        let w = &self.window;
        let (sw, out_w) = (w.stride[1], w.output[1]);
        padded.fill(R::ZERO);
        for (jj, h) in h.chunks_exact(w.positions()).enumerate().rev() {
            for (th, h) in h.chunks_exact(out_w).enumerate() {
                let at = self.run_start(jj, th);
                if sw == 1 {
                    R::add_assign(&mut padded[at..at + out_w], h);
                } else {
                    for (cell, &h) in padded[at..].iter_mut().step_by(sw).zip(h) {
                        *cell = *cell + h;
                    }
                }
            }
        }
        for (r, gx) in gx.chunks_exact_mut(w.input[1]).enumerate() {
            let at = self.padded_row(r);
            gx.copy_from_slice(&padded[at..at + gx.len()]);
        }
    }

    /// The block gradients of `rows` samples from their output gradients `g` (channels first)
    /// and columns `cols` ([`Conv::kept_columns`]): `gw[o, j]` the chain over the block's
    /// samples and positions in order of `δ[o, t] * col_t[j]` from the first term, `gb[o]` that
    /// of `δ[o, t]`.
    #[allow(clippy::too_many_arguments)] // the threads, both operands, both results
    pub fn block_gradient<R: Real>(
        &self,
        threads: &Threads,
        g: &[R],
        cols: &[R],
        rows: usize,
        gw: &mut [R],
        gb: &mut [R],
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        if p > 1 {
            return self.block_gradient_by_samples(threads, g, cols, rows, gw, gb);
        }
        // One position (Dense): the gradients and columns are `rows x out_channels` and `rows
        // x column`, row-major; the chains run over the rows.
        let (d_t, cols) = (Matrix::new(g, rows, o).t(), Matrix::new(cols, rows, j));
        if j.is_multiple_of(PANEL) || !o.is_multiple_of(PANEL) {
            shared_columns(threads, gw, d_t, cols, Order::AB);
        } else {
            // A column of a width no tile divides would be packed in the product for every
            // block of the chains; the channels are not: gwᵀ = colsᵀ δ reads both operands
            // where they lie. The same chains, the operands of each product swapped back by
            // the order (a NaN's payload is the definition's).
            let mut gw_t = vec![R::ZERO; j * o];
            shared(
                threads,
                &mut gw_t,
                Start::FirstTerm,
                cols.t(),
                Matrix::new(g, rows, o),
                Order::BA,
            );
            transpose(&gw_t, j, o, gw);
        }
        gb.copy_from_slice(&g[..o]);
        add_rows(&g[o..rows * o], gb);
    }

    /// [`Conv::block_gradient`] over several positions, sample by sample: `gwᵀ` (`column x
    /// out_channels`) continued by `colsᵀ δᵀ` of each sample (its columns in place, its
    /// gradients transposed by position while they are in the cache), each chain starting
    /// where the sample before left it. The channels are shared out among the threads, each
    /// channel's chains one thread's.
    #[allow(clippy::too_many_arguments)] // the threads, both operands, both results
    fn block_gradient_by_samples<R: Real>(
        &self,
        threads: &Threads,
        g: &[R],
        cols: &[R],
        rows: usize,
        gw: &mut [R],
        gb: &mut [R],
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        let parts = threads.parts(o, rows * p * j);
        let tasks = ranges(o, parts)
            .zip(split(gw, ranges(o, parts), j))
            .zip(split(gb, ranges(o, parts), 1));
        threads.run(tasks, |((channels, gw), gb)| {
            let _env = R::environment();
            let q = channels.len();
            // One sample's gradients of these channels by position, and `gwᵀ`'s chains so far
            // and after the sample (the product reads the one and writes the other).
            let mut d = vec![R::ZERO; p * q];
            let (mut now, mut next) = (vec![R::ZERO; j * q], vec![R::ZERO; j * q]);
            for s in 0..rows {
                let g = &g[s * o * p..(s + 1) * o * p];
                transpose(&g[channels.start * p..channels.end * p], q, p, &mut d);
                let a = Matrix::new(&cols[s * j * p..(s + 1) * j * p], j, p);
                let start = if s == 0 {
                    Start::FirstTerm
                } else {
                    Start::Matrix(&now)
                };
                let c = MatrixMut::new(&mut next, j, q);
                MatMul::new(c, start, a, Matrix::new(&d, p, q), Order::BA).run();
                core::mem::swap(&mut now, &mut next);
                if s == 0 {
                    gb.copy_from_slice(&d[..q]);
                    add_rows(&d[q..], gb);
                } else {
                    add_rows(&d, gb);
                }
            }
            transpose(&now, j, q, gw);
        });
    }
}

/// `acc[c] = acc[c] + row[c]` for each row of `rows` (rows of `acc.len()` cells) in order: one
/// vectorised pass, lanes over the columns (the channels of a bias gradient), each column's
/// chain over the rows in order — not a call per row (2^17 rows of 32 cells for a first
/// convolution over a block of 128 32 x 32 images).
fn add_rows<R: Real>(rows: &[R], acc: &mut [R]) {
    R::vectorized(
        #[inline(always)]
        || {
            for row in rows.chunks_exact(acc.len()) {
                for (acc, &x) in acc.iter_mut().zip(row) {
                    *acc = *acc + x;
                }
            }
        },
    );
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

/// `c = a b` from the first term with `c`'s columns shared out among `threads`, for the weight
/// gradients: their long chains run over the block's positions, and `b` (the columns) is the
/// large operand, which each part then packs only its own columns of (split by rows, every
/// part would pack all of it). Every element's chain is still one thread's, in order.
fn shared_columns<R: Real>(
    threads: &Threads,
    c: &mut [R],
    a: Matrix<'_, R>,
    b: Matrix<'_, R>,
    order: Order,
) {
    let ((rows, k), (_, cols)) = (a.shape(), b.shape());
    let parts = threads.parts(cols, k * rows);
    if parts == 1 {
        return shared(threads, c, Start::FirstTerm, a, b, order);
    }
    // Each part's columns in a buffer of its own (a part's cells of `c` are not contiguous),
    // copied into `c` after.
    let mut out: Vec<Vec<R>> = ranges(cols, parts)
        .map(|r| vec![R::ZERO; rows * r.len()])
        .collect();
    threads.run(ranges(cols, parts).zip(out.iter_mut()), |(range, out)| {
        let _env = R::environment();
        let part = MatrixMut::new(out, rows, range.len());
        MatMul::new(part, Start::FirstTerm, a, b.t().rows(range).t(), order).run();
    });
    for (range, out) in ranges(cols, parts).zip(&out) {
        for (i, row) in out.chunks_exact(range.len()).enumerate() {
            c[i * cols + range.start..][..range.len()].copy_from_slice(row);
        }
    }
}

/// Most cells a chunk of samples gives [`by_samples`]' task at a time: about a quarter of a
/// core's L2 cache, so that what a product writes is still there when it is read back.
const CHUNK_CELLS: usize = 1 << 15;

/// Runs `task(samples, buffers)` over the `rows` samples in chunks of a few (contiguous, in
/// order), the chunks shared out among `threads`: `buffers` are the chunk's cells of each buffer
/// (its width cells per sample). `work` is a sample's multiply-adds (how the samples are shared
/// out) and the cells it touches (how many make a chunk). Every sample's results are its own,
/// so neither the chunks nor the threads change a bit.
fn by_samples<R: Real, const N: usize>(
    threads: &Threads,
    rows: usize,
    (work, touched): (usize, usize),
    buffers: [(&mut [R], usize); N],
    task: impl Fn(core::ops::Range<usize>, [&mut [R]; N]) + Sync,
) {
    let chunk = (CHUNK_CELLS / touched.max(1)).max(1);
    let parts = threads.parts(rows, work);
    let widths = buffers.each_ref().map(|&(_, width)| width);
    let mut parts_of = buffers.map(|(cells, width)| split(cells, ranges(rows, parts), width));
    let tasks = ranges(rows, parts).map(move |range| {
        let cells = parts_of
            .each_mut()
            .map(|part| part.next().unwrap_or_default());
        (range, cells)
    });
    threads.run(tasks, |(range, mut cells)| {
        let _env = R::environment();
        for start in range.clone().step_by(chunk) {
            let samples = start..(start + chunk).min(range.end);
            // Each buffer's cells of the chunk, cut off its part's front.
            let now = core::array::from_fn(|b| {
                let (now, rest) =
                    core::mem::take(&mut cells[b]).split_at_mut(samples.len() * widths[b]);
                cells[b] = rest;
                now
            });
            task(samples, now);
        }
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
