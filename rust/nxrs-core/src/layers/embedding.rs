//! The tables of a sequence model (`docs/TRAINING.md` section 15.8): the token Embedding (ids to
//! rows of `E`), the PositionalEmbedding (rows of `P` added to each token), and the TiedHead
//! (logits against `E`), with their block gradients: one chain per table cell over the block's
//! samples, then tokens, in order. The token ids were checked when the data was bound (an
//! integer in `0..vocab`), so here an id is a row.

use super::conv::{Conv, Delta, Then, Weights};
use super::share::by_items;
use crate::arith::Real;
use crate::threads::Threads;

/// The row of `E` a token id names (its value, an integer checked in `0..vocab`).
fn row<R: Real>(id: R) -> usize {
    id.to_f32().to_i64_trunc() as usize
}

/// `y[t, :] = E[id_t, :]` for the `rows * T` ids `x` (`width` cells a row of `E`).
pub fn embed<R: Real>(table: &[R], width: usize, x: &[R], y: &mut [R]) {
    for (&id, y) in x.iter().zip(y.chunks_exact_mut(width)) {
        y.copy_from_slice(&table[row(id) * width..][..width]);
    }
}

/// `E`'s block gradient from the gradients `g` at the ids `x` (`rows * T` of them): each row's
/// chain over the tokens that read it, in order, from the first; `+0` for a row none reads. The
/// rows are shared out among the threads, each scanning every token for its own.
pub fn embed_backward<R: Real>(
    threads: &Threads,
    width: usize,
    x: &[R],
    g: &[R],
    g_table: &mut [R],
) {
    let vocab = g_table.len() / width;
    by_items(
        threads,
        (vocab, 1),
        x.len() * width / vocab.max(1),
        [(g_table, width)],
        |rows, [part]| {
            part.fill(R::ZERO);
            let mut seen = vec![false; rows.len()];
            for (&id, g) in x.iter().zip(g.chunks_exact(width)) {
                let v = row(id);
                if !rows.contains(&v) {
                    continue;
                }
                let k = v - rows.start;
                let out = &mut part[k * width..][..width];
                if core::mem::replace(&mut seen[k], true) {
                    for (out, &g) in out.iter_mut().zip(g) {
                        *out = *out + g;
                    }
                } else {
                    out.copy_from_slice(g);
                }
            }
        },
    );
}

/// `y[t, d] = x[t, d] + P[t, d]` (`x` the first operand) for sequences of `per_sample` cells.
pub fn add_positions<R: Real>(table: &[R], per_sample: usize, x: &[R], y: &mut [R]) {
    for (x, y) in x
        .chunks_exact(per_sample)
        .zip(y.chunks_exact_mut(per_sample))
    {
        for ((y, &x), &p) in y.iter_mut().zip(x).zip(table) {
            *y = x + p;
        }
    }
}

/// `P`'s block gradient from the output gradients `g` of `rows` sequences (`per_sample`
/// cells each): each cell's chain over the samples from the first; rows past the sequences'
/// tokens `+0`.
pub fn positions_backward<R: Real>(per_sample: usize, g: &[R], g_table: &mut [R]) {
    g_table.fill(R::ZERO);
    let mut samples = g.chunks_exact(per_sample);
    if let Some(first) = samples.next() {
        g_table[..per_sample].copy_from_slice(first);
    }
    for sample in samples {
        for (sum, &g) in g_table.iter_mut().zip(sample) {
            *sum = *sum + g;
        }
    }
}

/// The tied head's product, `z = x Eᵀ`: Dense without biases from the width to the vocabulary.
fn head(vocab: usize, width: usize) -> Conv {
    Conv::dense(width, vocab, false)
}

/// The logits `z` (`tokens x vocab`) of `tokens` rows `x` against `E`.
pub fn tied_forward<R: Real>(
    threads: &Threads,
    table: &[R],
    (vocab, width): (usize, usize),
    x: &[R],
    tokens: usize,
    z: &mut [R],
) {
    let mut unused = Vec::new();
    let weights = Weights::AsTheyAre(table);
    head(vocab, width).forward(
        threads,
        (weights, &[]),
        x,
        tokens,
        &mut unused,
        z,
        Then::Nothing,
    );
}

/// The tied head's backward pass: its own chain of `E`'s block gradient into `g_table`, and the
/// input gradients `gx` when wanted.
#[allow(clippy::too_many_arguments)] // the threads, the table and its sizes, in, out
pub fn tied_backward<R: Real>(
    threads: &Threads,
    table: &[R],
    (vocab, width): (usize, usize),
    (x, g): (&[R], &[R]),
    tokens: usize,
    gx: Option<&mut [R]>,
    g_table: &mut [R],
) {
    let head = head(vocab, width);
    head.block_gradient(threads, Delta::Given(g), (x, &[]), tokens, g_table, &mut []);
    if let Some(gx) = gx {
        head.input_gradient(threads, table, Delta::Given(g), tokens, gx);
    }
}
