//! Dense and convolution layers (`docs/TRAINING.md` sections 15.2-15.3): every output a chain
//! from its bias over a column of inputs, so a block's whole layer is one matrix product over
//! its columns (im2col) and its gradients two more. Dense is the convolution with one position
//! whose column is the sample itself.

use super::pool::{self, Pooled};
use super::share::{by_items, by_samples, shared, shared_columns};
use super::window::{add_into, copy_from, Window};
use crate::arith::matmul::{MatMul, Matrix, MatrixMut, Order, Start, PANEL};
use crate::arith::{cells, cells_mut, Real};
use crate::math::Math;
use crate::softf32::F32;
use crate::threads::Threads;

/// A convolution (or Dense: `window` of one position over `inputs x 1 x 1`, a 1 x 1 kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv {
    pub window: Window,
    pub out_channels: usize,
    /// Whether it has `b` (Dense may not: section 15.7; its passes are then given an empty
    /// `b`, and its chains start from +0).
    pub bias: bool,
}

impl Conv {
    /// Dense over `inputs` features, with biases or not.
    pub fn dense(inputs: usize, units: usize, bias: bool) -> Conv {
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
            bias,
        }
    }

    /// Whether the columns are the samples themselves (Dense), so no copy is made.
    pub(super) fn columns_are_inputs(&self) -> bool {
        self.window.positions() == 1 && self.window.column() == self.window.input_cells()
    }

    fn positions(&self) -> usize {
        self.window.positions()
    }

    /// Samples whose columns are laid out and multiplied together (see [`Conv::columns`]): one
    /// for large images, enough for products of some [`GROUP_POSITIONS`] positions for small
    /// ones (a product per sample of a few positions costs more to set up than to run), and
    /// one for a single position (the columns are then the samples' rows, as Dense's). A group
    /// touches at most [`GROUP_CELLS`] cells unless one sample does, so that a thread's working
    /// cells stay within a few samples' (section 15.1's limits), however few positions a wide
    /// layer has.
    fn group(&self) -> usize {
        match self.positions() {
            1 => 1,
            p => {
                let touched = p * (self.window.column() + self.out_channels);
                (GROUP_POSITIONS / p).min(GROUP_CELLS / touched).max(1)
            }
        }
    }

    /// The columns of `rows` samples (`rows x input cells`), column by column, in groups of
    /// `Conv::group` samples (the last group may have fewer): each group `column x (samples *
    /// positions)`, row `j` holding `col_t[j]` for the group's samples in order and their
    /// positions `t` in row-major order, padding as +0 (for one position, the columns one after
    /// the other).
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
        let runs = self.runs();
        // Only bits move: the samples are shared out among the threads.
        by_samples(
            threads,
            (rows, self.group()),
            (j * p, j * p),
            [(&mut cols[..], j * p)],
            |samples, [cols]| {
                let x = &x[samples.start * cells..samples.end * cells];
                self.gather(x, &runs, &mut vec![R::ZERO; self.padded_cells()], cols);
            },
        );
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

    /// Where the runs of cells lie in the padded input, worked out once per pass rather than
    /// once per run (a run is a few cells: 5 to 32 in the benchmarks' layers).
    fn runs(&self) -> Runs {
        let w = &self.window;
        let [kh, kw] = w.kernel;
        let (padded_h, padded_w) = (w.input[0] + 2 * w.padding[0], w.input[1] + 2 * w.padding[1]);
        let rows = (0..w.channels * w.input[0])
            .map(|r| {
                let (c, r) = (r / w.input[0], r % w.input[0]);
                (c * padded_h + r + w.padding[0]) * padded_w + w.padding[1]
            })
            .collect();
        let columns = (0..w.column())
            .map(|jj| {
                let (c, a, b) = (jj / (kh * kw), jj / kw % kh, jj % kw);
                (c * padded_h + a) * padded_w + b
            })
            .collect();
        Runs {
            rows,
            columns,
            row_step: w.stride[0] * padded_w,
        }
    }

    /// The columns of the samples `x` (whole groups, the last perhaps short) into `cols` (see
    /// [`Conv::columns`]), through the padded input (`padded`, its cells, their padding +0).
    fn gather<R: Real>(&self, x: &[R], runs: &Runs, padded: &mut [R], cols: &mut [R]) {
        let w = &self.window;
        let (cells, p, sw, out_w) = (w.input_cells(), w.positions(), w.stride[1], w.output[1]);
        let width = self.group() * w.column() * p;
        R::vectorized(
            #[inline(always)]
            || {
                for (x, cols) in x.chunks(self.group() * cells).zip(cols.chunks_mut(width)) {
                    let n = x.len() / cells;
                    for (s, sample) in x.chunks_exact(cells).enumerate() {
                        for (row, &at) in sample.chunks_exact(w.input[1]).zip(&runs.rows) {
                            copy_from(&mut padded[at..at + row.len()], row, 1);
                        }
                        for (col, &first) in cols.chunks_exact_mut(n * p).zip(&runs.columns) {
                            let col = col[s * p..(s + 1) * p].chunks_exact_mut(out_w);
                            for (th, col) in col.enumerate() {
                                let at = first + th * runs.row_step;
                                copy_from(col, &padded[at..], sw);
                            }
                        }
                    }
                }
            },
        );
    }

    /// Whether the forward pass of a block of `rows` samples keeps its columns for the weight
    /// gradient (a convolution with several positions): only if they fit in a core's cache
    /// ([`KEPT_COLUMNS`]). Larger ones would be written out to memory and read back, which costs
    /// more than gathering them again, in the cache, group by group.
    fn keeps_columns(&self, rows: usize) -> bool {
        rows * self.window.column() * self.positions() <= KEPT_COLUMNS
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
    /// `out_channels x column`, or `Wᵀ` for one position: [`Weights`]). The columns are left in `cols` for the weight gradient when
    /// they fit in the cache (`Conv::keeps_columns`; [`Conv::kept_columns`]). `then` names the layers above whose forward passes are applied to
    /// each part of the outputs while it is in the cache; `y` is then the last one's outputs.
    #[allow(clippy::too_many_arguments)] // the threads, the tensors, the inputs and outputs
    pub fn forward<R: Real>(
        &self,
        threads: &Threads,
        (weights, bias): (Weights<'_, R>, &[R]),
        x: &[R],
        rows: usize,
        cols: &mut Vec<F32>,
        y: &mut [R],
        then: Then<'_>,
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        if p == 1 {
            let cols = self.columns(threads, x, rows, cols);
            let a = Matrix::new(cols, rows, j);
            let b = match weights {
                Weights::Transposed(w_t) => Matrix::new(w_t, j, o),
                Weights::AsTheyAre(w) => Matrix::new(w, o, j).t(),
            };
            // Without biases (an empty `b`) the chains start from +0 (section 15.7).
            let start = if bias.is_empty() {
                Start::Zero
            } else {
                Start::Row(bias)
            };
            shared(threads, &mut y[..rows * o], start, a, b, Order::BA);
            match then {
                Then::Nothing => {}
                Then::Rectify(math) => math.rectify(&mut y[..rows * o]),
                Then::RectifyMaxPool(..) => unreachable!("Dense's outputs have no positions"),
            }
            return;
        }
        // Group by group, `z = b + W cols` with the columns column by column: both operands read
        // in place, and for one sample a group (large images) the outputs come channels first
        // as the layer gives them, with no transposing (a group of several is one product,
        // its outputs' runs of positions then copied to their samples). A few groups at a time,
        // so that each chunk's columns are still in the cache when the product reads them;
        // every output's chain is its own, whatever the group or chunk. The columns are kept for
        // the weight gradient only when the block's fit in the cache; larger ones are gathered
        // again there.
        let cells = self.window.input_cells();
        let Weights::AsTheyAre(weights) = weights else {
            unreachable!("a convolution of several positions reads its weights as they are")
        };
        let w = Matrix::new(weights, o, j);
        let runs = self.runs();
        let kept: &mut [R] = if self.keeps_columns(rows) {
            cells_mut(resized(cols, rows * j * p))
        } else {
            &mut []
        };
        let kept_width = if kept.is_empty() { 0 } else { j * p };
        let (math, pool, chosen): (_, _, &mut [u32]) = match then {
            Then::Nothing => (None, None, &mut []),
            Then::Rectify(math) => (Some(math), None, &mut []),
            Then::RectifyMaxPool(math, pool, chosen) => (Some(math), Some(pool), chosen),
        };
        // The outputs' cells per sample: this layer's, or the pooling's.
        let out = pool.map_or(o * p, |pool| pool.channels * pool.positions());
        by_samples(
            threads,
            (rows, self.group()),
            (p * j * o, p * (j + o)),
            [
                (&mut y[..rows * out], out),
                (
                    bytemuck::cast_slice_mut(chosen),
                    if pool.is_some() { out } else { 0 },
                ),
                (kept, kept_width),
            ],
            |samples, [y, chosen, kept]| {
                let mut padded = vec![R::ZERO; self.padded_cells()];
                let x = &x[samples.start * cells..samples.end * cells];
                let mut scratch = Vec::new();
                let cols = if kept.is_empty() {
                    scratch.resize(samples.len() * j * p, R::ZERO);
                    &mut scratch[..]
                } else {
                    kept
                };
                self.gather(x, &runs, &mut padded, cols);
                // Pooled, the layer's outputs are the chunk's scratch cells, not kept.
                let mut unpooled = vec![
                    R::ZERO;
                    if pool.is_some() {
                        y.len() / out * o * p
                    } else {
                        0
                    }
                ];
                let z_out = if pool.is_some() {
                    &mut unpooled[..]
                } else {
                    &mut *y
                };
                let group = self.group();
                let mut z = vec![R::ZERO; if group > 1 { group * o * p } else { 0 }];
                let product = |cols: &[R], z: &mut [R]| {
                    let n = cols.len() / j;
                    let (c, b) = (MatrixMut::new(z, o, n), Matrix::new(cols, j, n));
                    MatMul::new(c, Start::Column(bias), w, b, Order::AB).run();
                    if let Some(math) = math {
                        math.rectify(z);
                    }
                };
                for (cols, y) in cols
                    .chunks(group * j * p)
                    .zip(z_out.chunks_mut(group * o * p))
                {
                    if group == 1 {
                        product(cols, y);
                        continue;
                    }
                    let n = cols.len() / j;
                    product(cols, &mut z[..o * n]);
                    // Row `o` of the product holds channel `o` of each sample in turn.
                    for (c, z) in z[..o * n].chunks_exact(n).enumerate() {
                        for (s, z) in z.chunks_exact(p).enumerate() {
                            y[(s * o + c) * p..][..p].copy_from_slice(z);
                        }
                    }
                }
                if let Some(pool) = pool {
                    let rows = y.len() / out;
                    pool::max_forward(pool, &unpooled, rows, y, bytemuck::cast_slice_mut(chosen));
                }
            },
        );
    }

    /// The input gradient of `rows` samples from their output gradients `delta` (channels
    /// first, `rows x (out_channels * positions)`, given or made from the pooling's): column gradients
    /// `h_t[j] = Σ_o W[o, j] * δ[o, t]` from +0, then each input cell's sum from +0 over the
    /// positions whose window holds it, in order.
    pub fn input_gradient<R: Real>(
        &self,
        threads: &Threads,
        weights: &[R],
        delta: Delta<'_, R>,
        rows: usize,
        gx: &mut [R],
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        let cells = self.window.input_cells();
        if self.columns_are_inputs() {
            let Delta::Given(g) = delta else {
                unreachable!("Dense's outputs have no positions to pool")
            };
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
        // Column by column (`hᵀ = Wᵀ δ`, `column x positions` per sample, per group of
        // [`Conv::group`] samples): both operands are read where they lie (`Wᵀ`'s columns and
        // `δ`'s rows are contiguous; a group of several samples has its gradients' runs copied
        // together first), so the output gradients need no transposing, and each column's
        // gradients are contiguous for the additions into the cells.
        let w_t = Matrix::new(weights, o, j).t();
        let runs = self.runs();
        // A few groups at a time, so that each chunk's column gradients are still in the cache
        // when they are added up (one group's at a time, in cells of the chunk's own); each
        // sample's cells are its own.
        by_samples(
            threads,
            (rows, self.group()),
            (p * j * o, p * j),
            [(&mut gx[..rows * cells], cells)],
            |samples, [gx]| {
                let mut padded = vec![R::ZERO; self.padded_cells()];
                let group = self.group();
                let pooled = matches!(delta, Delta::Pooled(_));
                let mut d = vec![
                    R::ZERO;
                    if group > 1 || pooled {
                        group * o * p
                    } else {
                        0
                    }
                ];
                let (mut h, mut masked) = (vec![R::ZERO; group * j * p], Vec::new());
                let starts = samples.clone().step_by(group);
                for (first, gx) in starts.zip(gx.chunks_mut(group * cells)) {
                    let n = gx.len() / cells * p;
                    // Row `o`: channel `o` of each sample in turn.
                    let d = match delta {
                        Delta::Given(g) if group == 1 => &g[first * o * p..][..o * p],
                        Delta::Given(g) => {
                            for (c, d) in d[..o * n].chunks_exact_mut(n).enumerate() {
                                for (s, d) in (first..).zip(d.chunks_exact_mut(p)) {
                                    d.copy_from_slice(&g[(s * o + c) * p..][..p]);
                                }
                            }
                            &d[..o * n]
                        }
                        Delta::Pooled(pooled) => {
                            let d = &mut d[..o * n];
                            d.fill(R::ZERO);
                            for s in first..first + n / p {
                                let at = |c: usize, t: usize| c * n + (s - first) * p + t;
                                pooled.scatter(s, 0..o, &mut masked, d, at);
                            }
                            d
                        }
                    };
                    let h = &mut h[..j * n];
                    let c = MatrixMut::new(h, j, n);
                    MatMul::new(c, Start::Zero, w_t, Matrix::new(d, o, n), Order::AB).run();
                    for (s, gx) in gx.chunks_exact_mut(cells).enumerate() {
                        self.add_columns((h, n, s * p), &runs, &mut padded, gx);
                    }
                }
            },
        );
    }

    /// One sample's input gradient `gx` from its column gradients (`h`'s rows of `width`
    /// cells, the sample's `positions` of each from cell `first`):
    /// each cell's sum from +0 over the positions `t` whose window holds it, `t` in row-major
    /// order. A column index `j = (c, a, b)` (channel, kernel row, kernel column) sends each
    /// position's gradient to a different cell, and for a given cell a later position `t` is
    /// an earlier `(a, b)` (its window starts further on): so the columns are taken in reverse
    /// order. Their gradients are added into the padded input (`padded`, its cells; see
    /// [`Conv::padded_cells`]), the runs contiguous for a stride of 1 and added with vector
    /// instructions; the padding's sums are then dropped.
    fn add_columns<R: Real>(
        &self,
        (h, width, first): (&[R], usize, usize),
        runs: &Runs,
        padded: &mut [R],
        gx: &mut [R],
    ) {
        let w = &self.window;
        let (p, sw, out_w) = (w.positions(), w.stride[1], w.output[1]);
        R::vectorized(
            #[inline(always)]
            || {
                padded.fill(R::ZERO);
                let columns = h.chunks_exact(width).zip(&runs.columns);
                for (h, &start) in columns.rev() {
                    let h = &h[first..first + p];
                    for (th, h) in h.chunks_exact(out_w).enumerate() {
                        let at = start + th * runs.row_step;
                        add_into(&mut padded[at..], sw, h);
                    }
                }
                for (gx, &at) in gx.chunks_exact_mut(w.input[1]).zip(&runs.rows) {
                    copy_from(gx, &padded[at..], 1);
                }
            },
        );
    }

    /// The block gradients of `rows` samples from their output gradients `delta` and their
    /// inputs `x` (with the columns the forward pass kept, if it did: [`Conv::kept_columns`]):
    /// `gw[o, j]` the chain over the block's
    /// samples and positions in order of `δ[o, t] * col_t[j]` from the first term, `gb[o]` that
    /// of `δ[o, t]`.
    #[allow(clippy::too_many_arguments)] // the threads, both operands, both results
    pub fn block_gradient<R: Real>(
        &self,
        threads: &Threads,
        delta: Delta<'_, R>,
        (x, kept): (&[R], &[F32]),
        rows: usize,
        gw: &mut [R],
        gb: &mut [R],
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        if p > 1 {
            let kept = if self.keeps_columns(rows) {
                cells(&kept[..rows * j * p])
            } else {
                &[]
            };
            return self.block_gradient_by_samples(threads, delta, (x, kept), rows, gw, gb);
        }
        let Delta::Given(g) = delta else {
            unreachable!("Dense's outputs have no positions to pool")
        };
        let cols = self.kept_columns(x, rows, kept);
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
        if !gb.is_empty() {
            gb.copy_from_slice(&g[..o]);
            add_rows(&g[o..rows * o], gb);
        }
    }

    /// [`Conv::block_gradient`] over several positions, group by group ([`Conv::group`]):
    /// `gwᵀ` (`column x out_channels`) continued by `colsᵀ δᵀ` of each group (its columns kept
    /// or gathered again, its gradients transposed by position or made so from the pooling's,
    /// while they are in the cache), each chain
    /// starting where the group before left it. The channels are shared out among the threads, each
    /// channel's chains one thread's.
    #[allow(clippy::too_many_arguments)] // the threads, both operands, both results
    fn block_gradient_by_samples<R: Real>(
        &self,
        threads: &Threads,
        delta: Delta<'_, R>,
        (x, kept): (&[R], &[R]),
        rows: usize,
        gw: &mut [R],
        gb: &mut [R],
    ) {
        let (p, j, o) = (self.positions(), self.window.column(), self.out_channels);
        let cells = self.window.input_cells();
        let runs = self.runs();
        by_items(
            threads,
            (o, 1),
            rows * p * j,
            [(gw, j), (gb, 1)],
            |channels, [gw, gb]| {
                let q = channels.len();
                // One group's gradients of these channels by position (sample after sample), and
                // `gwᵀ`'s chains so far and after the group (the product reads the one and writes
                // the other).
                let group = self.group();
                let mut d = vec![R::ZERO; group * p * q];
                let (mut now, mut next) = (vec![R::ZERO; j * q], vec![R::ZERO; j * q]);
                // The group's columns: kept by the forward pass, or gathered again here.
                let (mut scratch, mut padded) = (Vec::new(), Vec::new());
                if kept.is_empty() {
                    scratch.resize(group * j * p, R::ZERO);
                    padded.resize(self.padded_cells(), R::ZERO);
                }
                let mut masked = Vec::new();
                for (k, x) in x[..rows * cells].chunks(group * cells).enumerate() {
                    let n = x.len() / cells * p;
                    let cols = if kept.is_empty() {
                        self.gather(x, &runs, &mut padded, &mut scratch[..j * n]);
                        &scratch[..j * n]
                    } else {
                        &kept[k * group * j * p..][..j * n]
                    };
                    for (s, d) in (k * group..).zip(d[..n * q].chunks_exact_mut(p * q)) {
                        match delta {
                            Delta::Given(g) => {
                                let g = &g[s * o * p..][..o * p];
                                transpose(&g[channels.start * p..channels.end * p], q, p, d);
                            }
                            Delta::Pooled(pooled) => {
                                d.fill(R::ZERO);
                                let at = |c: usize, t: usize| t * q + c;
                                pooled.scatter(s, channels.clone(), &mut masked, d, at);
                            }
                        }
                    }
                    let d = &d[..n * q];
                    let start = if k == 0 {
                        Start::FirstTerm
                    } else {
                        Start::Matrix(&now)
                    };
                    let c = MatrixMut::new(&mut next, j, q);
                    let a = Matrix::new(cols, j, n);
                    MatMul::new(c, start, a, Matrix::new(d, n, q), Order::BA).run();
                    core::mem::swap(&mut now, &mut next);
                    if k == 0 {
                        gb.copy_from_slice(&d[..q]);
                        add_rows(&d[q..], gb);
                    } else {
                        add_rows(d, gb);
                    }
                }
                transpose(&now, j, q, gw);
            },
        );
    }
}

/// A convolution's weights as its forward pass reads them.
#[derive(Clone, Copy, Debug)]
pub enum Weights<'a, R> {
    /// `W`, `out_channels x column`: the product's `A`, read in place, with several positions;
    /// with one, its `B`, packed by every thread in every product.
    AsTheyAre(&'a [R]),
    /// `Wᵀ`, `column x out_channels`, of a layer of one position (Dense): the product's `B`,
    /// read in place, as a network's passes give it ([`super::transposed`]).
    Transposed(&'a [R]),
}

/// A convolution's output gradients `δ` (channels first, sample after sample).
#[derive(Clone, Copy, Debug)]
pub enum Delta<'a, R> {
    /// As the layer above gives them.
    Given(&'a [R]),
    /// Made sample by sample where they are used, in the cache, from the max pooling above
    /// whose forward pass (and the ReLU's between) this layer's took over (`Pooled::scatter`).
    Pooled(Pooled<'a, R>),
}

/// The layers above a convolution whose forward passes its own applies ([`Conv::forward`]).
#[derive(Debug)]
pub enum Then<'a> {
    Nothing,
    /// A ReLU with this `math`.
    Rectify(Math),
    /// A ReLU, then max pooling with these windows (each window's chosen cell written to the
    /// cells given, as [`pool::max_forward`] does).
    RectifyMaxPool(Math, &'a Window, &'a mut [u32]),
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

/// Most columns' cells a forward pass keeps for the weight gradient ([`Conv::keeps_columns`]):
/// 1 MiB, about a core's L2 cache.
const KEPT_COLUMNS: usize = 1 << 18;

/// Positions a product of [`Conv::group`]'s samples gets at least, where a sample has fewer.
const GROUP_POSITIONS: usize = 128;

/// Most cells (columns and outputs) a group of several samples touches ([`Conv::group`]): 4 MiB,
/// far above the groups of the layers that gain from grouping.
const GROUP_CELLS: usize = 1 << 20;

/// The first `n` cells of `v`, grown if needed (cells reused from pass to pass).
pub(super) fn resized(v: &mut Vec<F32>, n: usize) -> &mut [F32] {
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

/// Where the runs of a convolution's cells lie in its padded input ([`Conv::runs`]).
struct Runs {
    /// Each input row's first cell (rows of all channels in order).
    rows: Vec<usize>,
    /// Each column index's first cell for output row 0: `output[1]` cells, `stride[1]` apart.
    columns: Vec<usize>,
    /// How much further each next output row's run starts.
    row_step: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The weight gradient from gathered-again columns is the one from kept columns, bit for
    /// bit, whatever the group or the threads (the forward pass keeps them only for small
    /// blocks, so the two ways are chosen by size).
    #[test]
    fn columns_gathered_again_give_the_kept_columns_gradients() {
        for (input, kernel, stride, padding) in [
            ([5, 7], [3, 2], [2, 1], [1, 1]),
            ([1, 40], [1, 5], [1, 2], [0, 1]),
            ([12, 12], [3, 3], [1, 1], [1, 1]),
        ] {
            let window = Window::new("c", 2, input, kernel, stride, padding).unwrap();
            let conv = Conv {
                window,
                out_channels: 3,
                bias: true,
            };
            let (rows, cells) = (5, window.input_cells());
            let (p, j, o) = (conv.positions(), window.column(), 3);
            // Exact binary32 values of both signs, and some long sums' rounding.
            let value = |i: usize| F32::from_i64(((i * 37) % 23) as i64 - 11) / F32::from_i64(7);
            let x: Vec<F32> = (0..rows * cells).map(value).collect();
            let g: Vec<F32> = (0..rows * o * p).map(|i| value(i + 5)).collect();
            for threads in [Threads::ONE, Threads::splitting_everything(3).unwrap()] {
                let mut kept = Vec::new();
                let cols = conv.columns(&threads, &x, rows, &mut kept).to_vec();
                let gradients = |kept: &[F32]| {
                    let (mut gw, mut gb) = (vec![F32::ZERO; o * j], vec![F32::ZERO; o]);
                    conv.block_gradient_by_samples(
                        &threads,
                        Delta::Given(&g),
                        (&x, kept),
                        rows,
                        &mut gw,
                        &mut gb,
                    );
                    let bits = |v: &[F32]| v.iter().map(|c| c.to_bits()).collect::<Vec<_>>();
                    (bits(&gw), bits(&gb))
                };
                assert_eq!(gradients(&cols), gradients(&[]), "{input:?} {kernel:?}");
            }
        }
    }
}
