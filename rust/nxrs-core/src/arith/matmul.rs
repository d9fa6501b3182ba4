//! The matrix product the passes of a layer are made of: `C = start + A B`, every element of
//! `C` a chain of products and sums over `k` in order (`docs/TRAINING.md`, section 5):
//!
//! ```text
//! C[i][j] = ((start[i][j] + t(i, 0)) + t(i, 1)) + ...      (start: +0, a row or column such
//!                                                           as a bias, or a matrix)
//! C[i][j] = (t(i, 0) + t(i, 1)) + ...                       (from the first term)
//! t(i, k) = A[i][k] * B[k][j]   or   B[k][j] * A[i][k]      (the definition's operand order)
//! ```
//!
//! A layer's pre-activations are `bias + inputs x weightsᵀ`, the gradient passed down is
//! `0 + δ x weights`, and a block's weight gradients are `δᵀ x inputs` from the first term.
//!
//! [`blocked`] computes it the way fast matrix products do (the five loops of BLIS around a
//! register tile), with one difference that keeps every bit: a block of `k` never starts from
//! zero. The tile's accumulators are loaded with the partial results of the blocks before it
//! (or the start), so every element's chain runs over `k` in order whatever the block sizes, and
//! lanes run over `j` only, never along a chain. Products and sums are separate IEEE operations
//! (no fused multiply-add), so every result that is not a NaN is the definition's: IEEE results
//! are unique, whatever the lanes and the operand order of a product. A NaN anywhere in a chain
//! makes its result a NaN; those elements are recomputed one by one in the exact arithmetic
//! ([`MatMul::element`]), which gives softf32's NaN for the definition's operand order.
//!
//! Operands are strided views ([`Matrix`]): a transposed matrix, a block of rows or an image's
//! patches are read where they lie. `B`'s cache blocks are read in place when its rows' cells are
//! contiguous (only a last partial panel of columns packed) and copied into packed panels
//! otherwise (the tile's operands, contiguous, padded with zeros); `A` is read in place when its
//! rows' cells or its columns' cells are contiguous and packed otherwise; small products (the
//! seed's) skip packing altogether.

use super::Real;
use crate::softf32::F32;
use core::ops::Range;
use std::cell::Cell;

/// A read-only matrix over stored cells: element `(i, j)` at `data[i * row_stride + j *
/// col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a, R> {
    data: &'a [R],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a, R: Copy> Matrix<'a, R> {
    /// The row-major `rows x cols` matrix at the start of `data`.
    ///
    /// # Panics
    /// If `data` is shorter than `rows * cols`.
    pub fn new(data: &'a [R], rows: usize, cols: usize) -> Matrix<'a, R> {
        Matrix::strided(data, rows, cols, cols, 1)
    }

    /// The `rows x cols` matrix with element `(i, j)` at `data[i * row_stride + j * col_stride]`.
    ///
    /// # Panics
    /// If an element lies outside `data` (the one check of a view's bounds: the kernels index
    /// only inside the views they are given).
    pub fn strided(
        data: &'a [R],
        rows: usize,
        cols: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Matrix<'a, R> {
        assert!(
            fits(data.len(), rows, cols, row_stride, col_stride),
            "a {rows} x {cols} matrix with strides ({row_stride}, {col_stride}) does not fit \
             in {} cells",
            data.len()
        );
        Matrix {
            data,
            rows,
            cols,
            row_stride,
            col_stride,
        }
    }

    /// The transposed matrix (the same cells).
    pub fn t(self) -> Matrix<'a, R> {
        Matrix {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// Rows `range` of the matrix.
    ///
    /// # Panics
    /// If `range` is not inside `0..rows`.
    pub fn rows(self, range: Range<usize>) -> Matrix<'a, R> {
        assert!(range.start <= range.end && range.end <= self.rows);
        let data = if range.is_empty() {
            &self.data[..0]
        } else {
            &self.data[range.start * self.row_stride..]
        };
        Matrix {
            data,
            rows: range.len(),
            ..self
        }
    }

    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Element `(i, j)`.
    #[inline(always)]
    pub fn at(&self, i: usize, j: usize) -> R {
        self.data[i * self.row_stride + j * self.col_stride]
    }
}

/// Whether a `rows x cols` matrix with these strides lies inside `len` cells (no overflow).
fn fits(len: usize, rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let last = (rows - 1)
        .checked_mul(row_stride)
        .zip((cols - 1).checked_mul(col_stride))
        .and_then(|(r, c)| r.checked_add(c));
    last.is_some_and(|last| last < len)
}

/// The matrix a product writes: `rows x cols`, element `(i, j)` at `data[i * row_stride + j]`
/// (each row's cells contiguous, for the tile's vector stores).
#[derive(Debug)]
pub struct MatrixMut<'a, R> {
    data: &'a mut [R],
    rows: usize,
    cols: usize,
    row_stride: usize,
}

impl<'a, R: Copy> MatrixMut<'a, R> {
    /// The row-major `rows x cols` matrix at the start of `data`.
    ///
    /// # Panics
    /// If `data` is shorter than `rows * cols`.
    pub fn new(data: &'a mut [R], rows: usize, cols: usize) -> MatrixMut<'a, R> {
        MatrixMut::strided(data, rows, cols, cols)
    }

    /// Rows of `cols` cells starting `row_stride` cells apart.
    ///
    /// # Panics
    /// If an element lies outside `data`, or rows overlap (`row_stride < cols`, two rows).
    pub fn strided(
        data: &'a mut [R],
        rows: usize,
        cols: usize,
        row_stride: usize,
    ) -> MatrixMut<'a, R> {
        assert!(
            fits(data.len(), rows, cols, row_stride, 1) && (rows < 2 || row_stride >= cols),
            "a {rows} x {cols} output with row stride {row_stride} does not fit in {} cells",
            data.len()
        );
        MatrixMut {
            data,
            rows,
            cols,
            row_stride,
        }
    }

    #[inline(always)]
    fn index(&self, i: usize, j: usize) -> usize {
        i * self.row_stride + j
    }
}

/// What each element's chain starts from.
#[derive(Clone, Copy, Debug)]
pub enum Start<'a, R> {
    /// `+0`: the chain is `((+0 + t0) + t1) + ...` (so a lone `-0` term gives `+0`).
    Zero,
    /// `row[j]` for every element of column `j` (a layer's biases, outputs by row).
    Row(&'a [R]),
    /// `column[i]` for every element of row `i` (a layer's biases, outputs by column).
    Column(&'a [R]),
    /// `matrix[i * cols + j]` (`C`'s shape, row-major): chains continued from where an earlier
    /// product left them (a weight gradient's chains over a block's samples, sample by sample).
    Matrix(&'a [R]),
    /// The first term: `(t0 + t1) + ...`.
    FirstTerm,
}

/// The operand order of each product (a NaN result carries its first NaN operand's payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// `A[i][k] * B[k][j]`
    AB,
    /// `B[k][j] * A[i][k]`
    BA,
}

/// One product `C = start + A B` (see the module's documentation), its shapes checked.
#[derive(Debug)]
pub struct MatMul<'a, R> {
    c: MatrixMut<'a, R>,
    start: Start<'a, R>,
    a: Matrix<'a, R>,
    b: Matrix<'a, R>,
    order: Order,
}

impl<'a, R: Real> MatMul<'a, R> {
    /// The product writing `c` (`m x n`) from `a` (`m x k`) and `b` (`k x n`).
    ///
    /// # Panics
    /// If the shapes disagree, a start row is not `n` long, or a chain from the first term has
    /// no term (`k = 0`).
    pub fn new(
        c: MatrixMut<'a, R>,
        start: Start<'a, R>,
        a: Matrix<'a, R>,
        b: Matrix<'a, R>,
        order: Order,
    ) -> MatMul<'a, R> {
        assert!(
            a.rows == c.rows && b.cols == c.cols && a.cols == b.rows,
            "cannot multiply {:?} by {:?} into {} x {}",
            a.shape(),
            b.shape(),
            c.rows,
            c.cols
        );
        match start {
            Start::Row(row) => assert_eq!(row.len(), c.cols, "start row length"),
            Start::Column(column) => assert_eq!(column.len(), c.rows, "start column length"),
            Start::Matrix(m) => assert_eq!(m.len(), c.rows * c.cols, "start matrix size"),
            Start::FirstTerm => assert!(a.cols > 0, "a chain from its first term needs a term"),
            Start::Zero => {}
        }
        MatMul {
            c,
            start,
            a,
            b,
            order,
        }
    }

    /// Computes the product in `R`: a small one row by row without packing (where packing
    /// panels would cost more than it saves), a larger one by the fastest kernel `R` has
    /// ([`Real::matmul`]). Either gives the definition's bits ([`MatMul::by_elements`]).
    pub fn run(self) {
        if self.c.rows * self.c.cols * self.a.cols <= SMALL {
            self.by_rows();
        } else {
            R::matmul(self);
        }
    }

    /// A small product without packing: each row of `C` advanced one step of its chains at a
    /// time across all its columns (lanes over `j` where `B`'s rows are contiguous), in `R`'s
    /// fast arithmetic, then its NaN results recomputed.
    fn by_rows(mut self) {
        let (m, n, k) = (self.c.rows, self.c.cols, self.a.cols);
        let (a, b, start) = (&self.a, &self.b, self.start);
        let fast = |x: R| R::Fast::from_f32(x.to_f32());
        for i in 0..m {
            let row: &mut [R::Fast] = bytemuck::cast_slice_mut(c_row(&mut self.c, i));
            R::vectorized(
                #[inline(always)]
                || {
                    let first = match start {
                        Start::Zero => {
                            row.fill(R::Fast::ZERO);
                            0
                        }
                        Start::Row(start) => {
                            for (c, &x) in row.iter_mut().zip(start) {
                                *c = fast(x);
                            }
                            0
                        }
                        Start::Column(start) => {
                            row.fill(fast(start[i]));
                            0
                        }
                        Start::Matrix(start) => {
                            for (c, &x) in row.iter_mut().zip(&start[i * n..]) {
                                *c = fast(x);
                            }
                            0
                        }
                        Start::FirstTerm => {
                            let x = fast(a.at(i, 0));
                            for (j, c) in row.iter_mut().enumerate() {
                                *c = x * fast(b.at(0, j));
                            }
                            1
                        }
                    };
                    for kk in first..k {
                        let x = fast(a.at(i, kk));
                        if b.col_stride == 1 {
                            let b_row: &[R] = &b.data[kk * b.row_stride..][..n];
                            for (c, &y) in row.iter_mut().zip(b_row) {
                                *c = *c + x * fast(y);
                            }
                        } else {
                            for (j, c) in row.iter_mut().enumerate() {
                                *c = *c + x * fast(b.at(kk, j));
                            }
                        }
                    }
                },
            );
        }
        recompute_nans(&mut self);
    }

    /// Element `(i, j)` by the definition, one operation at a time in `R` (the reference the
    /// blocked kernels are checked against, and how they recompute their NaN results).
    pub fn element(&self, i: usize, j: usize) -> R {
        self.element_over(i, j, 0..self.a.cols)
    }

    /// Element `(i, j)`'s chain over the terms `terms` only, in order, from its start.
    fn element_over(&self, i: usize, j: usize, terms: Range<usize>) -> R {
        let term = |k: usize| {
            let (a, b) = (self.a.at(i, k), self.b.at(k, j));
            match self.order {
                Order::AB => a * b,
                Order::BA => b * a,
            }
        };
        let (init, rest) = match self.start {
            Start::Zero => (R::ZERO, terms),
            Start::Row(row) => (row[j], terms),
            Start::Column(column) => (column[i], terms),
            Start::Matrix(m) => (m[i * self.c.cols + j], terms),
            Start::FirstTerm => (term(terms.start), terms.start + 1..terms.end),
        };
        rest.fold(init, |acc, k| acc + term(k))
    }

    /// Every element `(i, j)` by its chain over the terms `terms(i)` only, in order: a product
    /// some of whose terms are left out (causal attention's later positions), one operation at
    /// a time in `R`.
    pub fn by_elements_over(self, terms: impl Fn(usize) -> Range<usize>) {
        for i in 0..self.c.rows {
            for j in 0..self.c.cols {
                let x = self.element_over(i, j, terms(i));
                let at = self.c.index(i, j);
                self.c.data[at] = x;
            }
        }
    }

    /// Every element by [`MatMul::element`]: the plain triple loop.
    pub fn by_elements(self) {
        for i in 0..self.c.rows {
            for j in 0..self.c.cols {
                let x = self.element(i, j);
                let at = self.c.index(i, j);
                self.c.data[at] = x;
            }
        }
    }
}

/// A register of `LANES` binary32 values in one arithmetic: what the tile computes with.
///
/// # Safety
/// `load` and `store` access `LANES` cells from the pointer, `splat` one; implementations for
/// CPU features are only used where the CPU has them (their constructors are `unsafe`).
pub trait Vector: Copy {
    const LANES: usize;
    /// A value to initialise registers with (overwritten before it is used).
    const ZERO: Self;

    /// The `LANES` cells from `p` (unaligned).
    ///
    /// # Safety
    /// `p` is valid for reading `LANES` cells.
    unsafe fn load(p: *const u32) -> Self;

    /// The cell at `p` in every lane.
    ///
    /// # Safety
    /// `p` is valid for reading one cell.
    unsafe fn splat(p: *const u32) -> Self;

    /// Writes the lanes to the `LANES` cells from `p` (unaligned).
    ///
    /// # Safety
    /// `p` is valid for writing `LANES` cells.
    unsafe fn store(self, p: *mut u32);

    /// Lane-wise IEEE sum (any NaN for a NaN result).
    fn add(self, rhs: Self) -> Self;

    /// Lane-wise IEEE product (any NaN for a NaN result).
    fn mul(self, rhs: Self) -> Self;

    /// Whether any lane is a NaN.
    fn has_nan(self) -> bool;
}

/// `N` values of arithmetic `R` in an array: the portable register (the compiler vectorises
/// what the target allows; softf32's are integer code).
#[derive(Clone, Copy, Debug)]
pub struct Lanes<R, const N: usize>([R; N]);

impl<R: Real, const N: usize> Vector for Lanes<R, N> {
    const LANES: usize = N;
    const ZERO: Self = Lanes([R::ZERO; N]);

    #[inline(always)]
    unsafe fn load(p: *const u32) -> Self {
        // SAFETY: the caller's promise; `R` has the layout of a cell (bytemuck::Pod, 4 bytes).
        Lanes(unsafe { p.cast::<[R; N]>().read_unaligned() })
    }

    #[inline(always)]
    unsafe fn splat(p: *const u32) -> Self {
        // SAFETY: as `load`, one cell.
        Lanes([unsafe { p.cast::<R>().read_unaligned() }; N])
    }

    #[inline(always)]
    unsafe fn store(self, p: *mut u32) {
        // SAFETY: the caller's promise.
        unsafe { p.cast::<[R; N]>().write_unaligned(self.0) }
    }

    #[inline(always)]
    fn add(mut self, rhs: Self) -> Self {
        for (x, &y) in self.0.iter_mut().zip(&rhs.0) {
            *x = *x + y;
        }
        self
    }

    #[inline(always)]
    fn mul(mut self, rhs: Self) -> Self {
        for (x, &y) in self.0.iter_mut().zip(&rhs.0) {
            *x = *x * y;
        }
        self
    }

    #[inline(always)]
    fn has_nan(self) -> bool {
        self.0.iter().fold(false, |nan, x| nan | x.is_nan())
    }
}

/// Columns of `B` every path reads in place when its rows' cells are contiguous and its columns
/// a multiple of this (the widest register tile's, AVX-512's 2 x 16; AVX2's 16 and the portable
/// 8 divide it): otherwise a last partial panel of columns is packed, for every block of `k`.
pub const PANEL: usize = 32;

/// Most multiply-adds of a product computed element by element (the seed's 6-10-4 layers one
/// sample at a time, for instance): below this, packing and tiles cost more than they save.
const SMALL: usize = 1024;

/// Cache blocks: `KC` steps of the chains per pass over a tile (a `KC x NR` panel of `B` stays
/// in the L1 cache while the tiles of a row of `A`'s panels pass), `MC` rows of `A` packed at a
/// time (in L2), `NC` columns of `B` packed at a time (in L3). Multiples of every tile size.
const KC: usize = 256;
/// The most steps per block when `B`'s panels are read in place (each step's cells on a line of
/// their own, or two).
const KC_IN_PLACE: usize = 128;
const MC: usize = 144;
const NC: usize = 3072;
/// Most cells of a register tile (the edge tiles' buffer).
const MAX_TILE: usize = 16 * 32;

thread_local! {
    /// Each thread's packed panels of `A` and `B`, kept between products.
    static PACKED: Cell<(Vec<u32>, Vec<u32>)> = const { Cell::new((Vec::new(), Vec::new())) };
    /// Each thread's start row padded to whole tiles, kept between products.
    static START: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
}

/// `mm` by the blocked algorithm, register tiles of `MR` rows by `NV` vectors of `V`, then its
/// NaN results recomputed in `R`. `V` computes the values of `R` (any NaN for a NaN).
///
/// # Safety
/// The CPU has the features `V` needs.
#[inline(always)]
pub unsafe fn blocked<R: Real, V: Vector, const MR: usize, const NV: usize>(mm: MatMul<'_, R>) {
    let nr = NV * V::LANES;
    assert!(MR * nr <= MAX_TILE && MC.is_multiple_of(MR) && NC.is_multiple_of(nr));
    let mut mm = mm;
    let (m, n, k) = (mm.c.rows, mm.c.cols, mm.a.cols);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // No block of `k`: every chain is its start (`MatMul::new` refuses a first term).
        match mm.start {
            Start::Zero => (0..m).for_each(|i| c_row(&mut mm.c, i).fill(R::ZERO)),
            Start::Row(row) => (0..m).for_each(|i| c_row(&mut mm.c, i).copy_from_slice(row)),
            Start::Column(column) => (0..m).for_each(|i| c_row(&mut mm.c, i).fill(column[i])),
            Start::Matrix(start) => {
                (0..m).for_each(|i| c_row(&mut mm.c, i).copy_from_slice(&start[i * n..][..n]));
            }
            Start::FirstTerm => {}
        }
        return;
    }
    // The chains that start from a value start from it in the registers of the first block of
    // `k` (`start`, a row padded with zeros to whole tiles; +0 for `Start::Zero`), later blocks
    // from `C`, where the blocks before left them. Not from `C` filled with the start first: that
    // would write and read back all of `C` once more.
    let (mut packed_a, mut packed_b) = PACKED.take();
    let mut start = START.take();
    // Whether a tile stored a NaN: a chain's NaN stays one to its end (a NaN operand gives a
    // NaN), so without one no result is a NaN and `C` need not be scanned again.
    let mut stored_nan = false;
    start.clear();
    match mm.start {
        Start::Zero => start.resize(n.next_multiple_of(nr), 0),
        Start::Row(row) => {
            start.extend(row.iter().map(|v| v.to_f32().to_bits()));
            start.resize(n.next_multiple_of(nr), 0);
        }
        // Padded to whole tiles of rows (an edge tile's rows past `C` start from +0 too).
        Start::Column(column) => {
            start.extend(column.iter().map(|v| v.to_f32().to_bits()));
            start.resize(m.next_multiple_of(MR), 0);
        }
        // The matrix is `C`'s first contents: every block then continues the chains from `C`.
        Start::Matrix(matrix) => {
            for i in 0..m {
                c_row(&mut mm.c, i).copy_from_slice(&matrix[i * n..][..n]);
            }
        }
        Start::FirstTerm => {}
    }
    // The buffers are taken out of the thread's slots rather than used inside a closure: the
    // loops below must be compiled into the caller, with its vector instructions.
    for j0 in (0..n).step_by(NC) {
        let cols = j0..(j0 + NC).min(n);
        // The chains cut into blocks of equal length (at most KC): a short last block would
        // load and store every tile of C for a few steps.
        // B's whole panels are read where they lie when its rows' cells are contiguous (a step
        // of a panel is `nr` cells in a row), only a last partial panel packed (padded with
        // zeros); otherwise every panel is packed. In place, a panel's steps lie a row apart,
        // on lines of their own: shorter blocks keep them in the L1 cache.
        let in_place = mm.b.col_stride == 1;
        let most = if in_place { KC_IN_PLACE } else { KC };
        let kc = k.div_ceil(k.div_ceil(most).max(1)).max(1);
        let whole = if in_place {
            cols.start + (cols.len() / nr) * nr
        } else {
            cols.start
        };
        for p0 in (0..k).step_by(kc) {
            let depth = p0..(p0 + kc).min(k);
            pack(&mm.b.t(), whole..cols.end, depth.clone(), nr, &mut packed_b);
            let b = PanelsB {
                packed: &packed_b,
                first_packed: whole,
                cells: bytemuck::cast_slice(mm.b.data),
                row_stride: mm.b.row_stride,
                first_step: depth.start,
            };
            for i0 in (0..m).step_by(MC) {
                let rows = i0..(i0 + MC).min(m);
                // A's cells are read where they lie when its rows' cells are contiguous (the
                // tile broadcasts one cell of each of its rows per step) or its columns' are
                // (a transposed matrix, such as the output gradients of a weight gradient: a
                // tile's step is then `MR` cells in a row, the packed panel's layout with
                // another stride); otherwise packed.
                let a = if mm.a.col_stride == 1 {
                    PanelsA::Rows {
                        cells: bytemuck::cast_slice(mm.a.data),
                        row_stride: mm.a.row_stride,
                        first_step: depth.start,
                    }
                } else if mm.a.row_stride == 1 {
                    PanelsA::Columns {
                        cells: bytemuck::cast_slice(mm.a.data),
                        col_stride: mm.a.col_stride,
                        first_step: depth.start,
                    }
                } else {
                    pack(&mm.a, rows.clone(), depth.clone(), MR, &mut packed_a);
                    PanelsA::Packed(&packed_a)
                };
                let init = match mm.start {
                    _ if p0 > 0 => Init::Load,
                    Start::Matrix(_) => Init::Load,
                    Start::FirstTerm => Init::FirstTerm,
                    Start::Zero | Start::Row(_) => Init::Start(&start),
                    Start::Column(_) => Init::Column(&start),
                };
                let panels = Panels {
                    a,
                    b,
                    depth: depth.len(),
                    init,
                };
                // SAFETY: the caller's promise; the panels hold the blocks packed above.
                stored_nan |=
                    unsafe { panels.tiles::<R, V, MR, NV>(&mut mm.c, rows, cols.clone()) };
            }
        }
    }
    PACKED.set((packed_a, packed_b));
    START.set(start);
    if stored_nan {
        recompute_nans(&mut mm);
    }
}

/// Row `i` of `c`.
fn c_row<'c, R: Copy>(c: &'c mut MatrixMut<'_, R>, i: usize) -> &'c mut [R] {
    let at = c.index(i, 0);
    &mut c.data[at..at + c.cols]
}

/// Recomputes in `R` the elements whose chain gave a NaN (see the module's documentation).
/// Inlined, so that the scan is compiled with the caller's vector instructions.
#[inline(always)]
fn recompute_nans<R: Real>(mm: &mut MatMul<'_, R>) {
    for i in 0..mm.c.rows {
        // Rows without a NaN (nearly all) are passed over by a scan without a branch, which
        // the compiler vectorises: a branch per cell would cost as much as a short chain.
        let nan = c_row(&mut mm.c, i)
            .iter()
            .fold(false, |nan, x| nan | x.is_nan());
        if !nan {
            continue;
        }
        for j in 0..mm.c.cols {
            let at = mm.c.index(i, j);
            if mm.c.data[at].is_nan() {
                mm.c.data[at] = mm.element(i, j);
            }
        }
    }
}

/// Packs rows `rows` x columns `depth` of `x` into panels of `width` rows (zero rows pad the
/// last): panel `q` holds, for each column in order, its `width` cells, so the tile reads one
/// contiguous run per step of the chain. `A`'s blocks are packed as they are, `B`'s transposed
/// (its columns are the panels' rows).
fn pack<R: Real>(
    x: &Matrix<'_, R>,
    rows: Range<usize>,
    depth: Range<usize>,
    width: usize,
    out: &mut Vec<u32>,
) {
    let (panels, kc) = (rows.len().div_ceil(width), depth.len());
    // Every cell is written below (padding included): no need to clear what is kept.
    out.resize(panels * kc * width, 0);
    for (q, panel) in out[..panels * kc * width]
        .chunks_exact_mut(kc * width)
        .enumerate()
    {
        let first = rows.start + q * width;
        let filled = width.min(rows.end - first);
        if x.row_stride == 1 {
            // Each step of the panel is a contiguous run of cells.
            for (k, dst) in depth.clone().zip(panel.chunks_exact_mut(width)) {
                let at = first + k * x.col_stride;
                put(&mut dst[..filled], &x.data[at..at + filled]);
            }
        } else {
            // Row by row, each read along itself (contiguous when `col_stride` is 1).
            for r in 0..filled {
                let at = (first + r) * x.row_stride + depth.start * x.col_stride;
                let dst = panel.iter_mut().skip(r).step_by(width);
                if x.col_stride == 1 {
                    put_each(dst, &x.data[at..at + kc]);
                } else {
                    let cells = (0..kc).map(|kk| x.data[at + kk * x.col_stride]);
                    for (d, v) in dst.zip(cells) {
                        *d = v.to_f32().to_bits();
                    }
                }
            }
        }
        if filled < width {
            for step in panel.chunks_exact_mut(width) {
                step[filled..].fill(0);
            }
        }
    }
}

/// `dst[i] = bits(src[i])`.
#[inline(always)]
fn put<R: Real>(dst: &mut [u32], src: &[R]) {
    put_each(dst.iter_mut(), src);
}

/// The bits of `src`'s cells into `dst`'s, in order.
#[inline(always)]
fn put_each<'d, R: Real>(dst: impl Iterator<Item = &'d mut u32>, src: &[R]) {
    for (d, &v) in dst.zip(src) {
        *d = v.to_f32().to_bits();
    }
}

/// The panels of one block: `A`'s rows by `MR`, `B`'s columns by `NR` (packed), `depth` steps
/// of the chains, and what the tiles' accumulators start from.
struct Panels<'p> {
    a: PanelsA<'p>,
    b: PanelsB<'p>,
    depth: usize,
    init: Init<'p>,
}

/// What a block's accumulators start from.
#[derive(Clone, Copy)]
enum Init<'p> {
    /// `C`: the chains' partial results from the blocks of `k` before.
    Load,
    /// The block holds the chains' first terms, and they start from them.
    FirstTerm,
    /// The block holds the chains' first terms, and column `j`'s start from `start[j]` (every
    /// column of the tiles, padded with zeros).
    Start(&'p [u32]),
    /// The block holds the chains' first terms, and row `i`'s start from `start[i]` (every row
    /// of the tiles, padded with zeros).
    Column(&'p [u32]),
}

/// Where a block's panels of `B` are read from: the columns from `first_packed` on packed by
/// `NR` (from the block's first step), those before it in place (all of `B`'s cells, rows
/// `row_stride` apart, each row's cells contiguous; the block's steps from row `first_step`).
#[derive(Clone, Copy)]
struct PanelsB<'p> {
    packed: &'p [u32],
    first_packed: usize,
    cells: &'p [u32],
    row_stride: usize,
    first_step: usize,
}

/// Where a block's rows of `A` are read from.
enum PanelsA<'p> {
    /// Packed by `MR` rows (the block's rows only, from its first).
    Packed(&'p [u32]),
    /// All of `A`'s cells, rows `row_stride` apart, each row's cells contiguous; the block's
    /// steps start at column `first_step`.
    Rows {
        cells: &'p [u32],
        row_stride: usize,
        first_step: usize,
    },
    /// All of `A`'s cells, columns `col_stride` apart, each column's cells contiguous; the
    /// block's steps start at column `first_step`.
    Columns {
        cells: &'p [u32],
        col_stride: usize,
        first_step: usize,
    },
}

impl Panels<'_> {
    /// The tiles of rows `rows` x columns `cols` of `c`, from the panels. Returns whether a
    /// tile stored a NaN.
    ///
    /// # Safety
    /// The CPU has `V`'s features; the panels hold the rows and columns given.
    #[inline(always)]
    unsafe fn tiles<R: Real, V: Vector, const MR: usize, const NV: usize>(
        &self,
        c: &mut MatrixMut<'_, R>,
        rows: Range<usize>,
        cols: Range<usize>,
    ) -> bool {
        let mut stored_nan = false;
        let nr = NV * V::LANES;
        let kc = self.depth;
        let ldc = c.row_stride;
        let c_ptr = c.data.as_mut_ptr().cast::<u32>();
        for j in cols.clone().step_by(nr) {
            // The panel's first cell and the distance between its steps.
            let b = if j < self.b.first_packed {
                let at = self.b.first_step * self.b.row_stride + j;
                let len = (kc - 1) * self.b.row_stride + nr;
                TileB {
                    cells: self.b.cells[at..at + len].as_ptr(),
                    step: self.b.row_stride,
                }
            } else {
                let p = (j - self.b.first_packed) / nr;
                TileB {
                    cells: self.b.packed[p * kc * nr..][..kc * nr].as_ptr(),
                    step: nr,
                }
            };
            for (q, i) in rows.clone().step_by(MR).enumerate() {
                let (height, width) = (MR.min(rows.end - i), nr.min(cols.end - j));
                // Each tile row's first cell in `A` and the distance between its steps. Rows
                // past the end of `A` (an edge tile) read its last row again; their results
                // are not kept.
                let (a, step) = match self.a {
                    PanelsA::Packed(cells) => {
                        let panel = cells[q * kc * MR..][..kc * MR].as_ptr();
                        // SAFETY: r < MR is inside the panel's first step.
                        (core::array::from_fn(|r| unsafe { panel.add(r) }), MR)
                    }
                    PanelsA::Rows {
                        cells,
                        row_stride,
                        first_step,
                    } => {
                        let row = |r: usize| {
                            let at = (i + r.min(height - 1)) * row_stride + first_step;
                            cells[at..at + kc].as_ptr()
                        };
                        (core::array::from_fn(row), 1)
                    }
                    PanelsA::Columns {
                        cells,
                        col_stride,
                        first_step,
                    } => {
                        let at = first_step * col_stride + i;
                        let len = (kc - 1) * col_stride + height;
                        let first = cells[at..at + len].as_ptr();
                        // SAFETY: r.min(height - 1) < height is inside each step's cells.
                        let row = |r: usize| unsafe { first.add(r.min(height - 1)) };
                        (core::array::from_fn(row), col_stride)
                    }
                };
                let a = TileA { rows: a, step };
                // The start row's cells of the tile's columns (whole tiles: padded).
                let start = match self.init {
                    Init::Start(row) => row[j..j + nr].as_ptr(),
                    Init::Column(column) => column[i..i + MR].as_ptr(),
                    Init::Load | Init::FirstTerm => core::ptr::null(),
                };
                if height == MR && width == nr {
                    // SAFETY: the tile's rows i..i + MR and columns j..j + nr are inside `c`
                    // (checked just above), whose rows are `ldc` cells apart.
                    stored_nan |= unsafe {
                        self.tile::<V, MR, NV>(&a, &b, start, c_ptr.add(c.index(i, j)), ldc)
                    };
                } else {
                    // An edge tile: computed in a buffer of whole tiles, then its cells copied.
                    let mut buf = [0u32; MAX_TILE];
                    if matches!(self.init, Init::Load) {
                        for r in 0..height {
                            let at = c.index(i + r, j);
                            for (d, v) in buf[r * nr..][..width].iter_mut().zip(&c.data[at..]) {
                                *d = v.to_f32().to_bits();
                            }
                        }
                    }
                    // SAFETY: `buf` holds MR rows of `nr` cells (`MR * nr <= MAX_TILE`).
                    // (Its rows and columns past `C` may be NaNs too: then `C` is only scanned.)
                    stored_nan |=
                        unsafe { self.tile::<V, MR, NV>(&a, &b, start, buf.as_mut_ptr(), nr) };
                    for r in 0..height {
                        let at = c.index(i + r, j);
                        for (d, &v) in c.data[at..at + width].iter_mut().zip(&buf[r * nr..]) {
                            *d = R::from_f32(F32::from_bits(v));
                        }
                    }
                }
            }
        }
        stored_nan
    }

    /// One register tile: `MR x NV` vectors of accumulators, loaded from `c` (or the first
    /// terms, or the start row), the block's `depth` steps of every chain added in order, stored
    /// back to `c`. Returns whether a stored cell is a NaN.
    ///
    /// # Safety
    /// The CPU has `V`'s features; `a`'s rows hold `depth` steps and `b`'s `depth` steps hold
    /// `NV * LANES` cells each; `c` is valid for `MR` rows of `NV * LANES` cells, `ldc` cells apart;
    /// with [`Init::Start`], `start` is valid for `NV * LANES` cells, with [`Init::Column`] for
    /// `MR`.
    #[inline(always)]
    unsafe fn tile<V: Vector, const MR: usize, const NV: usize>(
        &self,
        a: &TileA<MR>,
        b: &TileB,
        start: *const u32,
        c: *mut u32,
        ldc: usize,
    ) -> bool {
        let (b, ldb) = (b.cells, b.step);
        // No closures here: each would be a function of its own, compiled without the caller's
        // vector instructions. Every access below is inside the panels or the tile: step k's
        // cells are a.rows[r] + k * a.step (r < MR) and b.cells + k * b.step + (0..nr) (k <
        // depth), and C's tile is MR rows of nr cells, `ldc` apart (the caller's promise).
        let mut acc = [[V::ZERO; NV]; MR];
        let mut bk = [V::ZERO; NV];
        let from = if let Init::Start(_) = self.init {
            for (v, bv) in bk.iter_mut().enumerate() {
                // SAFETY: the start row's tile (the caller's promise).
                *bv = unsafe { V::load(start.add(v * V::LANES)) };
            }
            for acc in acc.iter_mut() {
                *acc = bk;
            }
            0
        } else if let Init::Column(_) = self.init {
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: the start column's tile (the caller's promise).
                *acc = [unsafe { V::splat(start.add(r)) }; NV];
            }
            0
        } else if let Init::FirstTerm = self.init {
            for (v, bv) in bk.iter_mut().enumerate() {
                // SAFETY: step 0 of `b` (see above).
                *bv = unsafe { V::load(b.add(v * V::LANES)) };
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: step 0 of `a`.
                let ar = unsafe { V::splat(a.rows[r]) };
                for (acc, &bv) in acc.iter_mut().zip(&bk) {
                    *acc = ar.mul(bv);
                }
            }
            1
        } else {
            for (r, acc) in acc.iter_mut().enumerate() {
                for (v, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: row r of the tile.
                    *acc = unsafe { V::load(c.add(r * ldc + v * V::LANES)) };
                }
            }
            0
        };
        for k in from..self.depth {
            for (v, bv) in bk.iter_mut().enumerate() {
                // SAFETY: step k of `b`.
                *bv = unsafe { V::load(b.add(k * ldb + v * V::LANES)) };
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: step k of `a`.
                let ar = unsafe { V::splat(a.rows[r].add(k * a.step)) };
                for (acc, &bv) in acc.iter_mut().zip(&bk) {
                    *acc = acc.add(ar.mul(bv));
                }
            }
        }
        let mut stored_nan = false;
        for (r, acc) in acc.iter().enumerate() {
            for (v, &x) in acc.iter().enumerate() {
                // SAFETY: row r of the tile.
                unsafe { x.store(c.add(r * ldc + v * V::LANES)) };
                stored_nan |= x.has_nan();
            }
        }
        stored_nan
    }
}

/// A tile's panel of `B`: its first step's first cell, and the distance between its steps (each
/// step's `NR` cells contiguous).
struct TileB {
    cells: *const u32,
    step: usize,
}

/// A tile's rows of `A`: the first cell of each, and the distance between a row's steps.
struct TileA<const MR: usize> {
    rows: [*const u32; MR],
    step: usize,
}

/// The portable kernel: [`blocked`] with [`Lanes`] of `R`'s fast arithmetic (any CPU).
#[inline(always)]
pub fn portable<R: Real>(mm: MatMul<'_, R>) {
    // SAFETY: `Lanes` needs no CPU feature.
    unsafe { blocked::<R, Lanes<R::Fast, 8>, 4, 1>(mm) }
}
