//! Compile-time fixed-point arithmetic that builds the constants and tables of [`F32::exp`] and
//! [`F32::ln`] from integers alone: `ln 2`, `2^(j/64)` and `ln c` for the reduction constants `c`.
//! Nothing here runs at run time, and no host float or hand-copied digit string is involved.
//!
//! Values are unsigned Q126 (`v * 2^-126` in a `u128`), which holds `[0, 4)`. Every operation
//! truncates, so each result is at most a few hundred units of `2^-126` (about `2^-118`) below the
//! true value: far below the `2^-64` the run-time code needs.
//!
//! [`F32::exp`]: super::F32::exp
//! [`F32::ln`]: super::F32::ln

/// One in Q126.
pub(super) const ONE_Q126: u128 = 1 << 126;

/// `floor(a * b * 2^-126)` for Q126 operands whose product is below 4: the 256-bit product from
/// four 64-bit partial products, then its bits 126..253.
pub(super) const fn mul_q126(a: u128, b: u128) -> u128 {
    let (a1, a0) = (a >> 64, a & (u64::MAX as u128));
    let (b1, b0) = (b >> 64, b & (u64::MAX as u128));
    let (middle, middle_carry) = (a1 * b0).overflowing_add(a0 * b1);
    let (low, low_carry) = (a0 * b0).overflowing_add(middle << 64);
    let high = a1 * b1 + (middle >> 64) + ((middle_carry as u128) << 64) + low_carry as u128;
    (high << 2) | (low >> 126)
}

/// `floor(n / d * 2^126)` for `n < d < 2^64`, by long division (one quotient bit per step).
pub(super) const fn div_q126(n: u128, d: u128) -> u128 {
    let mut remainder = n;
    let mut quotient = 0u128;
    let mut i = 0;
    while i < 126 {
        remainder <<= 1;
        quotient <<= 1;
        if remainder >= d {
            remainder -= d;
            quotient |= 1;
        }
        i += 1;
    }
    quotient
}

/// `ln((d + n) / (d - n)) = 2 atanh(n / d)` in Q126, for `0 <= n <= d / 3` and `d < 2^64`: the
/// series `2 (z + z^3/3 + z^5/5 + ...)` with `z = n/d`, summed until its terms vanish (each is at
/// most `z^2 <= 1/9` of the one before).
pub(super) const fn ln_ratio_q126(n: u128, d: u128) -> u128 {
    let z = div_q126(n, d);
    let z2 = mul_q126(z, z);
    let mut power = z; // z^(2k+1)
    let mut sum = 0u128;
    let mut k = 0u128;
    while power != 0 {
        sum += power / (2 * k + 1);
        power = mul_q126(power, z2);
        k += 1;
    }
    2 * sum
}

/// `ln 2 = 2 atanh(1/3)` in Q126.
pub(super) const LN2_Q126: u128 = ln_ratio_q126(1, 3);

/// `e^y` in Q126 for `0 <= y < ln 2` (so the result is below 2), by its Taylor series summed
/// until the terms vanish.
pub(super) const fn exp_q126(y: u128) -> u128 {
    let mut term = ONE_Q126; // y^n / n!
    let mut sum = ONE_Q126;
    let mut n = 1u128;
    while term != 0 {
        term = mul_q126(term, y) / n;
        sum += term;
        n += 1;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln2_matches_its_known_binary_expansion() {
        // ln 2 = 0x0.B17217F7D1CF79ABC9E3B39803F2F6AF..., the x87 `fldln2` constant's digits.
        assert_eq!(LN2_Q126 >> 62, 0xB172_17F7_D1CF_79AB);
        assert_eq!((LN2_Q126 >> 30) & 0xFFFF_FFFF, 0xC9E3_B398);
    }

    #[test]
    fn exp_of_ln2_is_two() {
        // e^(ln 2) = 2, to within the truncation errors of both (a few hundred units of 2^-126).
        let two = exp_q126(LN2_Q126 - 1);
        assert!((2 * ONE_Q126).abs_diff(two) < 1 << 12, "{two:#x}");
    }

    #[test]
    fn mul_and_div_round_trip() {
        let third = div_q126(1, 3);
        assert_eq!(third, (ONE_Q126 - 1) / 3);
        let product = mul_q126(3 * third, 3 * third);
        assert!(ONE_Q126 - product < 8);
        assert_eq!(mul_q126(3 << 125, 2 << 126), 3 << 126); // 1.5 * 2 = 3
    }
}
