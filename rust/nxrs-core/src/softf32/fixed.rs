//! Fixed-point arithmetic that builds the constants and tables of [`F32::exp`], [`F32::ln`],
//! [`F32::normal_cdf`] and [`F32::normal_pdf`] at compile time from integers alone: `ln 2`, `π`,
//! `2^(j/64)`, `ln c` for the reduction constants `c`, and the normal tail's table; no host float
//! or hand-copied digit string is involved. [`F32::cos_pi_ratio`] also runs its products and
//! quotients at run time, once per step of a cosine learning-rate decay.
//!
//! Values are unsigned Q126 (`v * 2^-126` in a `u128`), which holds `[0, 4)`, or, where a table
//! needs signs and magnitudes up to `2^15` (the normal tail's), signed Q112 (`v * 2^-112` in an
//! `i128`). Every operation truncates, so each result is at most a few hundred units of its last
//! place (about `2^-118` or `2^-104`) from the true value: far below the `2^-64` the run-time code
//! needs.
//!
//! [`F32::exp`]: super::F32::exp
//! [`F32::ln`]: super::F32::ln
//! [`F32::normal_cdf`]: super::F32::normal_cdf
//! [`F32::normal_pdf`]: super::F32::normal_pdf
//! [`F32::cos_pi_ratio`]: super::F32::cos_pi_ratio

/// One in Q126.
pub(super) const ONE_Q126: u128 = 1 << 126;

/// `floor(a * b * 2^-shift)` for `0 < shift < 128` and a result below `2^128`: the 256-bit
/// product from four 64-bit partial products, then its bits `shift..shift + 127`.
pub(super) const fn mul_shift(a: u128, b: u128, shift: u32) -> u128 {
    let (a1, a0) = (a >> 64, a & (u64::MAX as u128));
    let (b1, b0) = (b >> 64, b & (u64::MAX as u128));
    let (middle, middle_carry) = (a1 * b0).overflowing_add(a0 * b1);
    let (low, low_carry) = (a0 * b0).overflowing_add(middle << 64);
    let high = a1 * b1 + (middle >> 64) + ((middle_carry as u128) << 64) + low_carry as u128;
    (high << (128 - shift)) | (low >> shift)
}

/// `floor(a * b * 2^-126)` for Q126 operands whose product is below 4.
pub(super) const fn mul_q126(a: u128, b: u128) -> u128 {
    mul_shift(a, b, 126)
}

/// `floor(n / d * 2^shift)` for `0 < d < 2^127` and a result below `2^128`: the integer part,
/// then one quotient bit per step (long division; the remainder stays below `d`, so doubling it
/// cannot overflow).
pub(super) const fn div_shift(n: u128, d: u128, shift: u32) -> u128 {
    let mut quotient = n / d;
    let mut remainder = n % d;
    let mut i = 0;
    while i < shift {
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

/// `ln((d + n) / (d - n)) = 2 atanh(n / d)` in Q126, for `0 <= n <= d / 3` and `d < 2^127`: the
/// series `2 (z + z^3/3 + z^5/5 + ...)` with `z = n/d`, summed until its terms vanish (each is at
/// most `z^2 <= 1/9` of the one before).
pub(super) const fn ln_ratio_q126(n: u128, d: u128) -> u128 {
    let z = div_shift(n, d, 126);
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

/// `atan(1/q)` in Q126 for an integer `q >= 2`: the series `1/q - 1/(3 q^3) + 1/(5 q^5) - ...`,
/// summed until its terms vanish (alternating and decreasing, so the partial sums stay positive).
const fn atan_inv_q126(q: u128) -> u128 {
    let mut power = ONE_Q126 / q; // q^-(2k+1)
    let mut sum = 0u128;
    let mut k = 0u128;
    while power != 0 {
        let term = power / (2 * k + 1);
        sum = if k.is_multiple_of(2) {
            sum + term
        } else {
            sum - term
        };
        power /= q * q;
        k += 1;
    }
    sum
}

/// `π = 16 atan(1/5) - 4 atan(1/239)` (Machin's formula) in Q126.
pub(super) const PI_Q126: u128 = 16 * atan_inv_q126(5) - 4 * atan_inv_q126(239);

/// One in signed Q112.
pub(super) const ONE_Q112: i128 = 1 << 112;

/// `a * b` in signed Q112 (truncated toward zero), for a product below `2^15` in magnitude.
pub(super) const fn mul_q112(a: i128, b: i128) -> i128 {
    let magnitude = mul_shift(a.unsigned_abs(), b.unsigned_abs(), 112) as i128;
    if (a < 0) != (b < 0) {
        -magnitude
    } else {
        magnitude
    }
}

/// `a / b` in Q112 for positive Q112 operands (`b` below `2^15`, the quotient too).
pub(super) const fn div_q112(a: i128, b: i128) -> i128 {
    div_shift(a as u128, b as u128, 112) as i128
}

/// `ln v` in signed Q112 for a positive Q112 `v` below `2^13`: `v = 2^e w` with `w` in `[1, 2)`,
/// and `ln w = 2 atanh((w - 1) / (w + 1))`, whose argument is at most `1/3`.
pub(super) const fn ln_q112(v: i128) -> i128 {
    let e = 127 - v.leading_zeros() as i128 - 112;
    let power = 1i128 << (112 + e); // 2^e in Q112
    let ln_w = ln_ratio_q126((v - power) as u128, (v + power) as u128) >> 14;
    e * (LN2_Q126 >> 14) as i128 + ln_w as i128
}

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
    fn pi_matches_its_known_binary_expansion() {
        // π/4 = 0x0.C90FDAA22168C234C4C6628B80DC1CD1..., the x87 `fldpi` constant's digits and on.
        assert_eq!(PI_Q126 >> 64, 0xC90F_DAA2_2168_C234);
        assert_eq!((PI_Q126 >> 32) & 0xFFFF_FFFF, 0xC4C6_628B);
    }

    #[test]
    fn signed_q112_operations() {
        let three = 3 * ONE_Q112;
        assert_eq!(mul_q112(-three, ONE_Q112 / 2), -three / 2);
        assert_eq!(mul_q112(-three, -three), 9 * ONE_Q112);
        assert_eq!(div_q112(ONE_Q112, 4 * ONE_Q112), ONE_Q112 / 4);
        // ln(1/2) = -ln 2 and ln 1 = 0, both within a few units of 2^-112.
        assert!((ln_q112(ONE_Q112 / 2) + (LN2_Q126 >> 14) as i128).abs() < 16);
        assert_eq!(ln_q112(ONE_Q112), 0);
    }

    #[test]
    fn mul_and_div_round_trip() {
        let third = div_shift(1, 3, 126);
        assert_eq!(third, (ONE_Q126 - 1) / 3);
        let product = mul_q126(3 * third, 3 * third);
        assert!(ONE_Q126 - product < 8);
        assert_eq!(mul_q126(3 << 125, 2 << 126), 3 << 126); // 1.5 * 2 = 3
    }
}
