//! How a layer's work is shared out among a trainer's threads, for every layer: by samples
//! ([`by_samples`]: each sample's results are its own), or by the rows or the columns of a
//! matrix product ([`shared`], [`shared_columns`]: each element's chain is its own). Every
//! value is computed by one thread with its own operations in order, so the number of threads
//! changes no bit; parts below a thread's worth of work stay on one.

use crate::arith::matmul::{MatMul, Matrix, MatrixMut, Order, Start};
use crate::arith::Real;
use crate::threads::{ranges, split, Threads};
use core::ops::Range;

/// `c = start + a b` (`c` row-major, `a`'s rows by `b`'s columns) with `c`'s rows shared out
/// among `threads`: every element's chain is still one thread's, in order, so the bits are the
/// same for any count (parts below a thread's worth of work stay on one).
pub(super) fn shared<R: Real>(
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
pub(super) fn shared_columns<R: Real>(
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

/// Runs `task(items, buffers)` once per part of the `items` (contiguous ranges of whole groups of
/// `group` items, in order; the last group may be short), the parts shared out among `threads`:
/// `buffers` are the part's cells of each buffer (its width cells per item). `work` is an item's
/// multiply-adds or so. What a task computes for an item must depend on nothing but the item
/// (and its group, which does not depend on the threads): then the threads change no bit.
pub(super) fn by_items<R: Real, const N: usize>(
    threads: &Threads,
    (items, group): (usize, usize),
    work: usize,
    buffers: [(&mut [R], usize); N],
    task: impl Fn(Range<usize>, [&mut [R]; N]) + Sync,
) {
    let parts = threads.parts(items.div_ceil(group), work * group);
    // The parts' items: whole groups (the last group may be short).
    let ranges = move || {
        ranges(items.div_ceil(group), parts)
            .map(move |r| r.start * group..(r.end * group).min(items))
    };
    let mut parts_of = buffers.map(|(cells, width)| split(cells, ranges(), width));
    let tasks = ranges().map(move |range| {
        let cells = parts_of
            .each_mut()
            .map(|part| part.next().unwrap_or_default());
        (range, cells)
    });
    threads.run(tasks, |(range, cells)| {
        let _env = R::environment();
        task(range, cells);
    });
}

/// [`by_items`] over `rows` samples, each part's samples given to `task` in chunks of a few
/// whole groups, so that what a chunk writes is still in the cache when it is read back: `work`
/// is a sample's multiply-adds (how the samples are shared out) and the cells it touches (how
/// many make a chunk). Every sample's results are its own, and the groups do not depend on the
/// threads, so neither the chunks nor the threads change a bit.
pub(super) fn by_samples<R: Real, const N: usize>(
    threads: &Threads,
    (rows, group): (usize, usize),
    (work, touched): (usize, usize),
    buffers: [(&mut [R], usize); N],
    task: impl Fn(Range<usize>, [&mut [R]; N]) + Sync,
) {
    let chunk = (CHUNK_CELLS / touched.max(1))
        .max(1)
        .next_multiple_of(group);
    let widths = buffers.each_ref().map(|&(_, width)| width);
    by_items(threads, (rows, group), work, buffers, |range, mut cells| {
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

/// The cells of samples `r` in `v` (`width` each): a part's share of an input.
pub(super) fn of<'v, T>(v: &'v [T], r: &Range<usize>, width: usize) -> &'v [T] {
    &v[r.start * width..r.end * width]
}
