//! `cos(π k / n)` for integers `0 <= k <= n`, in integer fixed point, rounded once to binary32:
//! the cosine learning-rate decay's factor (`docs/TRAINING.md`, section 6). No float operation
//! is involved, so every machine gives the same bits.
//!
//! `x = k/n` is folded into `[0, 1/2]` (`cos(π(1 - x)) = -cos(πx)`), then computed as
//! `cos(πx)` for `x <= 1/4` or as `sin(π(1/2 - x))` above, so the series' argument `θ` is at
//! most `π/4`. `x` in Q126 is truncated once, `θ = x * π` once more (with the Q126 `π` of
//! `fixed.rs`), and each term of the series once: the result `C` is within about `2^-117` of
//! the cosine (below `2^-110` with a wide margin), which is `2^-48` of a binary32 ulp for the
//! smallest nonzero value (`sin(π/2^64)`, about `2^-62.3`, for `n < 2^63`). Rounding `C` once is
//! the correctly rounded cosine unless the cosine lies within that distance of a point half way
//! between two binary32 values; the only rational cosines (`0`, `±1/2`, `±1`) are binary32
//! values, and `tests/test_cosine_schedule.py` checks the result against a correctly rounded
//! one (mpmath) on every `k` of many `n`.

use super::fixed::{div_shift, mul_q126, ONE_Q126, PI_Q126};
use super::{round_pack, F32};

impl F32 {
    /// `cos(π k / n)` rounded to nearest (ties to even) from its Q126 approximation; `+0` at
    /// `k / n = 1/2`. For `1 <= n < 2^63` and `k <= n` (the cosine decay's step counts).
    pub fn cos_pi_ratio(k: u64, n: u64) -> F32 {
        debug_assert!(n >= 1 && k <= n && n <= i64::MAX as u64);
        let (k, n) = (u128::from(k), u128::from(n));
        let (negative, j) = if 2 * k > n { (true, n - k) } else { (false, k) };
        let c = if 4 * j <= n {
            series(theta(j, n), Series::Cosine)
        } else {
            series(theta(n - 2 * j, 2 * n), Series::Sine)
        };
        round_q126(negative, c)
    }
}

/// `π * num / den` in Q126 (`num / den` truncated to Q126, then the product truncated), for
/// `num / den <= 1/4` and `den < 2^64`.
fn theta(num: u128, den: u128) -> u128 {
    mul_q126(div_shift(num, den, 126), PI_Q126)
}

/// Which Taylor series [`series`] sums.
#[derive(Clone, Copy)]
enum Series {
    /// `1 - θ²/2! + θ⁴/4! - ...`
    Cosine,
    /// `θ - θ³/3! + θ⁵/5! - ...`
    Sine,
}

/// The series at `θ <= π/4` in Q126, summed until its terms vanish: each term is the one before
/// times `θ²` (truncated), divided by the next two factorial factors (truncated). The terms
/// alternate and decrease, so the partial sums stay between 0 and 1.
fn series(theta: u128, which: Series) -> u128 {
    let theta2 = mul_q126(theta, theta);
    let (mut term, mut m) = match which {
        Series::Cosine => (ONE_Q126, 0u128), // θ^m / m!
        Series::Sine => (theta, 1),
    };
    let mut sum = 0u128;
    let mut add = true;
    while term != 0 {
        sum = if add { sum + term } else { sum - term };
        term = mul_q126(term, theta2) / ((m + 1) * (m + 2));
        m += 2;
        add = !add;
    }
    sum
}

/// A Q126 value in `[0, 1]` (`c * 2^-126`), negated when `negative`, rounded once to binary32:
/// 31 bits from the leading one, the rest sticky, then `round_pack`'s rounding.
fn round_q126(negative: bool, c: u128) -> F32 {
    if c == 0 {
        return F32::ZERO;
    }
    let leading_zeros = c.leading_zeros();
    let normalized = c << leading_zeros; // the leading one at bit 127
    let sticky = (normalized & ((1 << 97) - 1) != 0) as u32;
    let sig = (normalized >> 97) as u32 | sticky;
    // A leading one at bit 127 - z is 2^(1 - z): biased exponent 128 - z.
    round_pack(negative, 128 - leading_zeros as i32, sig)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(k: u64, n: u64) -> u32 {
        F32::cos_pi_ratio(k, n).to_bits()
    }

    #[test]
    fn exact_values() {
        // cos 0 = 1, cos π = -1, cos π/2 = +0, cos π/3 = 1/2, cos 2π/3 = -1/2.
        for n in [1u64, 2, 3, 6, 1 << 40, (1 << 62) + 6] {
            assert_eq!(bits(0, n), 0x3F80_0000, "n = {n}");
            assert_eq!(bits(n, n), 0xBF80_0000, "n = {n}");
            if n % 2 == 0 {
                assert_eq!(bits(n / 2, n), 0, "n = {n}");
            }
            if n % 3 == 0 {
                assert_eq!(bits(n / 3, n), 0x3F00_0000, "n = {n}");
                assert_eq!(bits(2 * n / 3, n), 0xBF00_0000, "n = {n}");
            }
        }
    }

    #[test]
    fn known_roundings() {
        // Correctly rounded binary32 values (mpmath, 50 digits, then numpy.float32):
        // cos(π/4) = 0.70710677 (0x3F3504F3), cos(π/8) = 0x3F6C835E, cos(3π/8) = 0x3EC3EF15,
        // cos(π/6) = 0x3F5DB3D7; the smallest values: cos(π(2^61 - 1)/2^62) = sin(π/2^62)
        // = 0x21490FDB, cos(π(2^62 - 1)/(2^63 - 1)) = sin(π/(2^64 - 2)) = 0x20490FDB.
        assert_eq!(bits(1, 4), 0x3F35_04F3);
        assert_eq!(bits(1, 8), 0x3F6C_835E);
        assert_eq!(bits(3, 8), 0x3EC3_EF15);
        assert_eq!(bits(1, 6), 0x3F5D_B3D7);
        assert_eq!(bits(7, 8), 0xBF6C_835E);
        assert_eq!(bits((1 << 61) - 1, 1 << 62), 0x2149_0FDB);
        assert_eq!(bits((1 << 62) - 1, (1 << 63) - 1), 0x2049_0FDB);
        assert_eq!(bits(5, (1 << 63) - 1), 0x3F80_0000);
        assert_eq!(bits((1 << 63) - 2, (1 << 63) - 1), 0xBF80_0000);
    }

    #[test]
    fn decreasing_from_one_to_minus_one() {
        let n = 1000;
        let values: Vec<F32> = (0..=n).map(|k| F32::cos_pi_ratio(k, n)).collect();
        for pair in values.windows(2) {
            assert!(pair[1].ieee_le(pair[0]), "{pair:?}");
        }
        for k in (0..=n).filter(|&k| 2 * k != n) {
            // cos(π(n - k)/n) = -cos(πk/n), bit for bit (the fold is exact; +0 at k = n/2).
            assert_eq!(values[k as usize], -values[(n - k) as usize], "k = {k}");
        }
    }
}
