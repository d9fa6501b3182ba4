//! Matrix transposition of stored cells: the forward pass's transposed weights and the block
//! records' gradients output by output are copies of other tensors in another order. Only bit
//! patterns move (no arithmetic), so any instructions may do it.

use crate::softf32::F32;

/// Side of the square tiles moved at once.
const TILE: usize = 8;

/// `dst[j * rows + i] = src[i * columns + j]`: the `rows x columns` matrix `src`, row-major,
/// transposed into `dst`.
///
/// # Panics
/// If either slice is shorter than `rows * columns`.
pub fn transpose(src: &[F32], rows: usize, columns: usize, dst: &mut [F32]) {
    let (src, dst) = (&src[..rows * columns], &mut dst[..rows * columns]);
    let (tiled_rows, tiled_columns) = (rows / TILE * TILE, columns / TILE * TILE);
    if !vector_tiles(src, rows, columns, dst, tiled_rows, tiled_columns) {
        for i0 in (0..tiled_rows).step_by(TILE) {
            for j0 in (0..tiled_columns).step_by(TILE) {
                for i in i0..i0 + TILE {
                    for j in j0..j0 + TILE {
                        dst[j * rows + i] = src[i * columns + j];
                    }
                }
            }
        }
    }
    transpose_edges(src, rows, columns, dst, tiled_rows, tiled_columns);
}

/// The whole tiles with vector shuffles, where the CPU has them; false if it did nothing.
#[allow(unused_variables)] // on targets without a vector path
fn vector_tiles(
    src: &[F32],
    rows: usize,
    columns: usize,
    dst: &mut [F32],
    tiled_rows: usize,
    tiled_columns: usize,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked just above).
        unsafe { avx::tiles(src, rows, columns, dst, tiled_rows, tiled_columns) };
        return true;
    }
    false
}

/// The cells outside the whole tiles: the last `rows % TILE` rows and `columns % TILE` columns.
fn transpose_edges(
    src: &[F32],
    rows: usize,
    columns: usize,
    dst: &mut [F32],
    tiled_rows: usize,
    tiled_columns: usize,
) {
    for i in 0..rows {
        let first = if i < tiled_rows { tiled_columns } else { 0 };
        for j in first..columns {
            dst[j * rows + i] = src[i * columns + j];
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use super::TILE;
    use crate::softf32::F32;
    use std::arch::x86_64::*;

    /// The whole 8 x 8 tiles: eight rows loaded into registers, transposed by the usual
    /// unpack / shuffle / lane-permute network, stored as eight columns. Shuffles move bits
    /// unchanged (NaN payloads included).
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn tiles(
        src: &[F32],
        rows: usize,
        columns: usize,
        dst: &mut [F32],
        tiled_rows: usize,
        tiled_columns: usize,
    ) {
        for i0 in (0..tiled_rows).step_by(TILE) {
            for j0 in (0..tiled_columns).step_by(TILE) {
                let r: [__m256; TILE] = std::array::from_fn(|k| {
                    let row = &src[(i0 + k) * columns + j0..][..TILE];
                    // SAFETY: `row` holds 8 cells of 4 bytes; unaligned load.
                    unsafe { _mm256_loadu_ps(row.as_ptr().cast()) }
                });
                let t = [
                    _mm256_unpacklo_ps(r[0], r[1]),
                    _mm256_unpackhi_ps(r[0], r[1]),
                    _mm256_unpacklo_ps(r[2], r[3]),
                    _mm256_unpackhi_ps(r[2], r[3]),
                    _mm256_unpacklo_ps(r[4], r[5]),
                    _mm256_unpackhi_ps(r[4], r[5]),
                    _mm256_unpacklo_ps(r[6], r[7]),
                    _mm256_unpackhi_ps(r[6], r[7]),
                ];
                let u = [
                    _mm256_shuffle_ps::<0x44>(t[0], t[2]),
                    _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
                    _mm256_shuffle_ps::<0x44>(t[1], t[3]),
                    _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
                    _mm256_shuffle_ps::<0x44>(t[4], t[6]),
                    _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
                    _mm256_shuffle_ps::<0x44>(t[5], t[7]),
                    _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
                ];
                let columns_out = [
                    _mm256_permute2f128_ps::<0x20>(u[0], u[4]),
                    _mm256_permute2f128_ps::<0x20>(u[1], u[5]),
                    _mm256_permute2f128_ps::<0x20>(u[2], u[6]),
                    _mm256_permute2f128_ps::<0x20>(u[3], u[7]),
                    _mm256_permute2f128_ps::<0x31>(u[0], u[4]),
                    _mm256_permute2f128_ps::<0x31>(u[1], u[5]),
                    _mm256_permute2f128_ps::<0x31>(u[2], u[6]),
                    _mm256_permute2f128_ps::<0x31>(u[3], u[7]),
                ];
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
        for rows in 0..=19 {
            for columns in 0..=19 {
                // Distinct bit patterns, NaNs among them (shuffles must not touch payloads).
                let src: Vec<F32> = (0..rows * columns)
                    .map(|k| F32::from_bits(0x7F80_0001u32.wrapping_add(k as u32 * 0x0101_0101)))
                    .collect();
                let mut dst = vec![F32::ZERO; rows * columns];
                transpose(&src, rows, columns, &mut dst);
                for i in 0..rows {
                    for j in 0..columns {
                        assert_eq!(
                            dst[j * rows + i].to_bits(),
                            src[i * columns + j].to_bits(),
                            "{rows} x {columns} at ({i}, {j})"
                        );
                    }
                }
            }
        }
    }
}
