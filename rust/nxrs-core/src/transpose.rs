//! Matrix transposition of stored cells: the forward pass's transposed weights and the block
//! records' gradients output by output are copies of other tensors in another order. Only bit
//! patterns move (no arithmetic), so any instructions may do it.

use crate::softf32::F32;

/// Side of the square tiles moved at once.
const TILE: usize = 8;

/// Rows of the source taken at a time (a multiple of `TILE`): the band's tiles go column of
/// tiles by column of tiles, so that a tile's eight stores continue the eight rows of the
/// destination the one before wrote (eight streams, not one per column of the source, which
/// for 1024-cell rows of the destination all fall in the same sets of the L1 cache), and the
/// source's cells the next column of tiles reads are still in the L1 cache. Three to four
/// times faster on a convolution's 1024 x 32 and 32 x 1024 planes.
const BAND: usize = 128;

/// `dst[j * rows + i] = src[i * columns + j]`: the `rows x columns` matrix `src`, row-major,
/// transposed into `dst`.
///
/// # Panics
/// If either slice is shorter than `rows * columns`.
pub fn transpose(src: &[F32], rows: usize, columns: usize, dst: &mut [F32]) {
    transpose_by(src, rows, columns, dst, true);
}

/// [`transpose`], with vector shuffles where the CPU has them if `vectors`.
fn transpose_by(src: &[F32], rows: usize, columns: usize, dst: &mut [F32], vectors: bool) {
    let (src, dst) = (&src[..rows * columns], &mut dst[..rows * columns]);
    let shape = Shape {
        rows,
        columns,
        tiled_rows: rows / TILE * TILE,
        tiled_columns: columns / TILE * TILE,
    };
    if !(vectors && vector_tiles(src, dst, shape)) {
        // The tiles in the order `vector_tiles` takes them (see `BAND`).
        for band in (0..shape.tiled_rows).step_by(BAND) {
            for j0 in (0..shape.tiled_columns).step_by(TILE) {
                for i0 in (band..shape.tiled_rows.min(band + BAND)).step_by(TILE) {
                    for i in i0..i0 + TILE {
                        for j in j0..j0 + TILE {
                            dst[j * rows + i] = src[i * columns + j];
                        }
                    }
                }
            }
        }
    }
    // The cells outside the whole tiles: the last `rows % TILE` rows and `columns % TILE`
    // columns.
    for i in 0..rows {
        let first = if i < shape.tiled_rows {
            shape.tiled_columns
        } else {
            0
        };
        for j in first..columns {
            dst[j * rows + i] = src[i * columns + j];
        }
    }
}

/// The matrix's size, and the part of it that whole tiles cover.
#[derive(Clone, Copy)]
struct Shape {
    rows: usize,
    columns: usize,
    tiled_rows: usize,
    tiled_columns: usize,
}

/// The whole tiles with vector shuffles, where the CPU has them; false if it did nothing.
#[allow(unused_variables)] // on targets without a vector path
fn vector_tiles(src: &[F32], dst: &mut [F32], shape: Shape) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked just above).
        unsafe { avx::tiles(src, dst, shape) };
        return true;
    }
    false
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use super::{Shape, BAND, TILE};
    use crate::softf32::F32;
    use std::arch::x86_64::*;

    /// The whole 8 x 8 tiles: eight rows loaded into registers, transposed by the usual
    /// unpack / shuffle / lane-permute network, stored as eight columns. Shuffles move bits
    /// unchanged (NaN payloads included).
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn tiles(src: &[F32], dst: &mut [F32], shape: Shape) {
        let Shape { rows, columns, .. } = shape;
        for (band, j0) in (0..shape.tiled_rows).step_by(BAND).flat_map(|band| {
            (0..shape.tiled_columns)
                .step_by(TILE)
                .map(move |j0| (band, j0))
        }) {
            for i0 in (band..shape.tiled_rows.min(band + BAND)).step_by(TILE) {
                let r: [__m256; TILE] = std::array::from_fn(|k| {
                    let row = &src[(i0 + k) * columns + j0..][..TILE];
                    // SAFETY: `row` holds 8 cells of 4 bytes; unaligned load.
                    unsafe { _mm256_loadu_ps(row.as_ptr().cast()) }
                });
                // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves
                // exchanged: register k ends up holding column k.
                let t: [__m256; TILE] = std::array::from_fn(|k| {
                    let (a, b) = (r[k & !1], r[k | 1]);
                    if k % 2 == 0 {
                        _mm256_unpacklo_ps(a, b)
                    } else {
                        _mm256_unpackhi_ps(a, b)
                    }
                });
                let u: [__m256; TILE] = std::array::from_fn(|k| {
                    let (a, b) = (t[k / 4 * 4 + k % 4 / 2], t[k / 4 * 4 + k % 4 / 2 + 2]);
                    if k % 2 == 0 {
                        _mm256_shuffle_ps::<0x44>(a, b)
                    } else {
                        _mm256_shuffle_ps::<0xEE>(a, b)
                    }
                });
                let columns_out: [__m256; TILE] = std::array::from_fn(|k| {
                    let (a, b) = (u[k % 4], u[k % 4 + 4]);
                    if k < 4 {
                        _mm256_permute2f128_ps::<0x20>(a, b)
                    } else {
                        _mm256_permute2f128_ps::<0x31>(a, b)
                    }
                });
                for (k, column) in columns_out.into_iter().enumerate() {
                    let out = &mut dst[(j0 + k) * rows + i0..][..TILE];
                    // SAFETY: `out` holds 8 cells of 4 bytes; unaligned store.
                    unsafe { _mm256_storeu_ps(out.as_mut_ptr().cast(), column) };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_the_definition_for_every_shape() {
        // Every shape up to 19 x 19, and some over several bands of rows (`BAND`).
        let bands = [127, 128, 129, 263].into_iter().flat_map(|rows| {
            [1, 8, 13, 24]
                .into_iter()
                .flat_map(move |columns| [(rows, columns), (columns, rows)])
        });
        let shapes = (0..=19).flat_map(|rows| (0..=19).map(move |columns| (rows, columns)));
        for (rows, columns) in shapes.chain(bands) {
            // Distinct bit patterns, NaNs among them (shuffles must not touch payloads).
            let src: Vec<F32> = (0..rows * columns)
                .map(|k| {
                    F32::from_bits(
                        0x7F80_0001u32.wrapping_add((k as u32).wrapping_mul(0x0101_0101)),
                    )
                })
                .collect();
            for vectors in [false, true] {
                let mut dst = vec![F32::ZERO; rows * columns];
                transpose_by(&src, rows, columns, &mut dst, vectors);
                for i in 0..rows {
                    for j in 0..columns {
                        assert_eq!(
                            dst[j * rows + i].to_bits(),
                            src[i * columns + j].to_bits(),
                            "{rows} x {columns} at ({i}, {j}), vectors: {vectors}"
                        );
                    }
                }
            }
        }
    }
}
