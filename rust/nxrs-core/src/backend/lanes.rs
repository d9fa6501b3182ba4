//! The hardware backend's slice kernels ([`Real`](crate::arith::Real)'s `add_row_products`,
//! `scaled_rows_sum` and `add_assign` for [`Native`]): with AVX2 where the CPU has it (detected
//! at run time), element by element otherwise.
//!
//! Each output element is a chain of products and sums over the rows, in the definition's
//! order. The vector loop runs up to 64 elements' chains at once (eight registers of eight
//! lanes, so eight independent chains hide the adds' latency; the last register masked to the
//! elements that exist) with the plain IEEE operations, and stores them only when none of the
//! results is a NaN: a NaN anywhere in a chain makes its result NaN,
//! and a result that is not a NaN is the same however it is computed (IEEE results are unique).
//! So only NaN results can differ from softf32's, and elements whose group has one are
//! recomputed one by one with [`Native`]'s operations, which give softf32's NaNs. AVX2 is the
//! only feature enabled: no FMA, so every product is rounded before its sum.

use super::Native;
use core::ops::Range;

/// What a chain computes for element `j` of `out` (`n` cells per row, row `k` at `k * n`).
#[derive(Clone, Copy, Debug)]
pub(super) enum Chain {
    /// `(((out[j] + rows[0][j] * a[0]) + rows[1][j] * a[1]) + ...)`
    RowProducts,
    /// `((a[0] * rows[0][j]) + a[1] * rows[1][j]) + ...`, from the first term.
    ScaledRows,
    /// `out[j] + rows[0][j]` (one row, `a` unused).
    Sum,
}

impl Chain {
    /// Element `j` with [`Native`]'s operations (softf32's NaN results).
    #[inline(always)]
    fn exact(self, out: Native, rows: &[Native], a: &[Native], n: usize, j: usize) -> Native {
        let x = |k: usize| rows[k * n + j];
        match self {
            Chain::RowProducts => (0..a.len()).fold(out, |acc, k| acc + x(k) * a[k]),
            Chain::ScaledRows => (1..a.len()).fold(a[0] * x(0), |acc, k| acc + a[k] * x(k)),
            Chain::Sum => out + x(0),
        }
    }

    /// Every element of `out` (`rows` holds `a.len()` rows of `out.len()` cells; one for
    /// [`Chain::Sum`]).
    #[inline(always)]
    pub(super) fn apply(self, out: &mut [Native], rows: &[Native], a: &[Native]) {
        let terms = match self {
            Chain::Sum => 1,
            Chain::RowProducts | Chain::ScaledRows => a.len(),
        };
        assert!(
            rows.len() >= terms * out.len(),
            "rows too short for the chains"
        );
        if matches!(self, Chain::ScaledRows) && a.is_empty() {
            return; // no first term: nothing is written (as the generic kernel)
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above); `rows` is long enough (asserted).
            return unsafe { avx2::apply(self, out, rows, a) };
        }
        self.elementwise(out, rows, a, 0..out.len());
    }

    /// Elements `range` one by one.
    #[inline(always)]
    fn elementwise(self, out: &mut [Native], rows: &[Native], a: &[Native], range: Range<usize>) {
        let n = out.len();
        for (j, o) in out.iter_mut().enumerate().take(range.end).skip(range.start) {
            *o = self.exact(*o, rows, a, n, j);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Chain, Native};
    use core::arch::x86_64::*;

    const LANES: usize = 8;
    /// Most registers whose chains run together: eight chains of adds (latency 3 to 4 cycles)
    /// keep both of a core's vector adders busy.
    const WIDE: usize = 8;

    /// Groups of `WIDE * LANES` elements, then one group of the (at most `WIDE`) registers left, the last of
    /// them partly filled (masked loads and stores) when `out.len()` is not a multiple of
    /// `LANES`. A narrow layer (10 outputs) is then two chains in flight, not one chain and two
    /// elements one by one.
    ///
    /// # Safety
    /// The CPU has AVX2, and `rows` holds `a.len()` rows (one for [`Chain::Sum`]) of
    /// `out.len()` cells.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn apply(chain: Chain, out: &mut [Native], rows: &[Native], a: &[Native]) {
        let n = out.len();
        let mut j = 0;
        while j + WIDE * LANES <= n {
            // SAFETY: elements j..j + WIDE * LANES exist; the caller's promise covers the rest.
            unsafe { group::<WIDE>(chain, out, rows, a, j) };
            j += WIDE * LANES;
        }
        // SAFETY: in each arm the registers cover elements j..n, the last one masked to them
        // (`j + (R - 1) * LANES < n` for the R chosen); the caller's promise covers the rest.
        unsafe {
            match (n - j).div_ceil(LANES) {
                0 => {}
                1 => group::<1>(chain, out, rows, a, j),
                2 => group::<2>(chain, out, rows, a, j),
                3 => group::<3>(chain, out, rows, a, j),
                4 => group::<4>(chain, out, rows, a, j),
                5 => group::<5>(chain, out, rows, a, j),
                6 => group::<6>(chain, out, rows, a, j),
                7 => group::<7>(chain, out, rows, a, j),
                _ => group::<WIDE>(chain, out, rows, a, j), // 57 to 63 elements
            }
        }
    }

    /// The chains of elements `j..(j + R * LANES).min(n)` (the last register masked to the
    /// elements that exist), stored unless one of them is a NaN, in which case those elements
    /// are recomputed one by one.
    ///
    /// # Safety
    /// As [`apply`], and `j + (R - 1) * LANES < out.len()`.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn group<const R: usize>(
        chain: Chain,
        out: &mut [Native],
        rows: &[Native],
        a: &[Native],
        j: usize,
    ) {
        let n = out.len();
        let end = (j + R * LANES).min(n);
        // The last register's lanes that hold elements (all of them unless at the end of `out`).
        let filled = (end - j - (R - 1) * LANES) as i32;
        let mask = _mm256_cmpgt_epi32(
            _mm256_set1_epi32(filled),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        );
        let out_ptr = out.as_mut_ptr().cast::<f32>();
        let rows_ptr = rows.as_ptr().cast::<f32>();
        // Every load and store below is sound because full registers hold elements below
        // `end <= n`, the last register reads and writes only its `filled` lanes, and row k's
        // elements lie at k * n + j... inside `rows` (the caller's promise).
        // SAFETY: `ptr` is `out`'s or a row's start, and register r of this group is inside
        // it (full) or masked to its elements (the last one), as said above.
        let load = |ptr: *const f32, r: usize| unsafe {
            if r + 1 == R {
                _mm256_maskload_ps(ptr.add(j + r * LANES), mask)
            } else {
                _mm256_loadu_ps(ptr.add(j + r * LANES))
            }
        };
        // SAFETY: row k (k < a.len(), or 0) starts at k * n inside `rows` (the caller's promise).
        let row = |k: usize, r: usize| unsafe { load(rows_ptr.add(k * n), r) };
        let mut acc = [_mm256_setzero_ps(); R];
        match chain {
            Chain::RowProducts => {
                for (r, acc) in acc.iter_mut().enumerate() {
                    *acc = load(out_ptr, r);
                }
                for (k, a) in a.iter().enumerate() {
                    let a = _mm256_set1_ps(a.0);
                    for (r, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm256_add_ps(*acc, _mm256_mul_ps(row(k, r), a));
                    }
                }
            }
            Chain::ScaledRows => {
                let a0 = _mm256_set1_ps(a[0].0);
                for (r, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_mul_ps(a0, row(0, r));
                }
                for (k, a) in a.iter().enumerate().skip(1) {
                    let a = _mm256_set1_ps(a.0);
                    for (r, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm256_add_ps(*acc, _mm256_mul_ps(a, row(k, r)));
                    }
                }
            }
            Chain::Sum => {
                for (r, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_add_ps(load(out_ptr, r), row(0, r));
                }
            }
        }
        // Lanes past the end (computed from zeros) are left out of the check.
        let nan = acc
            .iter()
            .enumerate()
            .fold(_mm256_setzero_ps(), |nan, (r, &x)| {
                let x_nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
                let x_nan = if r + 1 == R {
                    _mm256_and_ps(x_nan, _mm256_castsi256_ps(mask))
                } else {
                    x_nan
                };
                _mm256_or_ps(nan, x_nan)
            });
        if _mm256_movemask_ps(nan) == 0 {
            for (r, acc) in acc.iter().enumerate() {
                // SAFETY: register r's first element, j + r * LANES < n, is inside `out`.
                let ptr = unsafe { out_ptr.add(j + r * LANES) };
                if r + 1 == R {
                    // SAFETY: the mask limits the store to the `filled` elements inside `out`.
                    unsafe { _mm256_maskstore_ps(ptr, mask, *acc) };
                } else {
                    // SAFETY: a full register ends at or before `end <= n`.
                    unsafe { _mm256_storeu_ps(ptr, *acc) };
                }
            }
        } else {
            chain.elementwise(out, rows, a, j..end);
        }
    }
}
