//! Correctly rounded exponential, in integer fixed point.
//!
//! `e^x = 2^k * 2^(j/64) * e^r` with `m = 64k + j` the integer nearest `x * 64 / ln 2` and
//! `r = x - m * ln2/64`, `|r| <= ln2/128 < 2^-7.5`. The table gives `2^(j/64)` to 118 bits, a
//! degree-7 polynomial gives `e^r - 1` to within `2^-68.6` (mostly the truncation of `r` to Q70
//! and of two products), and their product, the significand of the result in `(0.99, 2)`, is
//! within `2^-67.3` of `2^(j/64) e^r`: `2^-44.3` of a result ulp. Rounding that approximation
//! once is correct unless `e^x` lies closer than that to a rounding boundary; no binary32 input
//! does (the hardest, `x = 0xC16912CD`, is `2^-28.7` ulp from one), which
//! `tests/exhaustive_functions.rs` checks on all 2^32 inputs.
//!
//! The fixed-point part, from an exponent in Q119 to a scaled significand ([`exp_q119`]), and the
//! rounding ([`round_scaled`]) also compute the normal distribution's functions (`normal.rs`),
//! whose exponents are fixed-point values rather than binary32 operands.

use super::fixed::{exp_q126, LN2_Q126};
use super::{round_pack, F32, QUIET_BIT, SIGN_BIT};

/// `2^(j/64)` in Q126 for `j` in `0..64` (all in `[1, 2)`), built at compile time.
const EXP2_TABLE: [u128; 64] = {
    let mut table = [0u128; 64];
    let mut j = 0;
    while j < 64 {
        // j * ln2/64 in Q126 (below ln 2, where exp_q126 is valid), in two parts so that
        // LN2_Q126 * j does not overflow.
        let j_ln2_64 = (LN2_Q126 >> 6) * j as u128 + (((LN2_Q126 & 63) * j as u128) >> 6);
        table[j] = exp_q126(j_ln2_64);
        j += 1;
    }
    table
};

/// `64 / ln 2` in Q58 (`2^64 / ln 2`); only picks `m`, so its last bits do not matter.
const INV_LN2_64_Q58: i128 = ((1u128 << 127) / (LN2_Q126 >> 63)) as i128;

/// `ln 2 / 64` in Q119 (`ln 2 * 2^113`).
const LN2_64_Q119: i128 = (LN2_Q126 >> 13) as i128;

/// `1/n!` in Q62 for `n` in `2..=7`: the coefficients of `(e^r - 1 - r) / r^2`. Index `i` holds
/// `1/(i+2)!`.
const INV_FACTORIAL_Q62: [i64; 6] = {
    let mut table = [0i64; 6];
    let mut factorial = 1i64;
    let mut n = 2;
    while n <= 7 {
        factorial *= n;
        table[n as usize - 2] = (1 << 62) / factorial;
        n += 1;
    }
    table
};

impl F32 {
    /// `e^x`, correctly rounded (to nearest, ties to even; no binary32 `e^x` is a tie).
    /// `exp(±0) = 1`, `exp(+inf) = +inf`, `exp(-inf) = +0`; results past the largest finite value
    /// overflow to `+inf` and small ones underflow gradually, through the subnormals to `+0`. A NaN
    /// operand comes back quieted.
    pub fn exp(self) -> F32 {
        // Specials and the ranges whose result needs no arithmetic.
        if self.is_nan() {
            return F32(self.0 | QUIET_BIT);
        }
        let negative = self.is_sign_negative();
        let magnitude = self.0 & !SIGN_BIT;
        if magnitude >= 0x4300_0000 {
            // |x| >= 128 (infinities included): e^x > 2^184 overflows, e^-x < 2^-184 is below half
            // the smallest subnormal.
            return if negative { F32::ZERO } else { F32::INFINITY };
        }
        if magnitude < 0x3300_0000 {
            // |x| < 2^-25: e^x lies strictly between 1 - 2^-25 and 1 + 2^-24, the midpoints
            // around 1, so it rounds to 1 (this covers zeros and subnormals).
            return F32::ONE;
        }
        let x_q48 = magnitude_q48(magnitude);
        let x_q48 = if negative { -x_q48 } else { x_q48 };
        let (k, significand) = exp_q119(i128::from(x_q48) << 71);
        round_scaled(k, significand)
    }
}

/// A magnitude `2^-25 <= |x| < 2^7` (its bits, sign cleared) in Q48: `|x| = sig * 2^(exp - 150)`
/// with `exp` in `102..=133`, so `|x|` is exact in Q48 and below `2^55`.
pub(super) fn magnitude_q48(magnitude: u32) -> i64 {
    debug_assert!((0x3300_0000..0x4300_0000).contains(&magnitude));
    let sig = i64::from((magnitude & 0x007F_FFFF) | 0x0080_0000);
    sig << ((magnitude >> 23) - 102)
}

/// `e^y` for `|y| < 2^7` given in Q119, as `(k, s)`: `e^y = 2^k * s * 2^-126` to within a relative
/// `2^-67.3`, with `s` in `(0.99, 2) * 2^126`. `y` is taken as exact: only the steps below add
/// error.
pub(super) fn exp_q119(y: i128) -> (i64, u128) {
    // Range reduction: m = round(y * 64/ln2) (|m| < 2^14; from y in Q48, which only moves m's
    // rounding point by 2^-40), then r = y - m * ln2/64 in Q119 (|y| and |m * ln2/64| stay below
    // 2^7, so 2^126), where the error of the constant times m stays below 2^-105.
    let m = (((y >> 71) * INV_LN2_64_Q58 + (1 << 105)) >> 106) as i64;
    let r_q119 = y - i128::from(m) * LN2_64_Q119;
    // |r| < 2^-7.5, so r in Q70 fits an i64 (truncating costs at most 2^-70).
    let r = (r_q119 >> 49) as i64;
    let (k, j) = (m >> 6, (m & 63) as usize);

    // Evaluation: e^r = 1 + r + r^2 q(r), q(r) = 1/2! + r/3! + ... + r^5/7!, leaving out
    // r^8/8! < 2^-75. Horner in Q62; q's rounding errors are scaled down by r^2 < 2^-15.
    let mut q = INV_FACTORIAL_Q62[5];
    for &c in INV_FACTORIAL_Q62[..5].iter().rev() {
        q = c + ((i128::from(q) * i128::from(r)) >> 70) as i64;
    }
    let r2 = ((i128::from(r) * i128::from(r)) >> 70) as i64; // Q70, below 2^55
    let exp_r_minus_1 = r + ((i128::from(r2) * i128::from(q)) >> 62) as i64; // Q70

    // 2^(j/64) * e^r = T + T * (e^r - 1) in Q126. The correction uses T's top 64 bits
    // (error < 2^-63 * 2^-7.5); it is below 2^126.5 in magnitude, so it fits an i128.
    let t = EXP2_TABLE[j];
    let correction = (i128::from((t >> 63) as u64) * i128::from(exp_r_minus_1)) >> 7;
    (k, (t as i128 + correction) as u128)
}

/// `2^k * s * 2^-126` for `s` in `(0.99, 2) * 2^126` (an [`exp_q119`] result), rounded once: 31
/// bits with the leading one at bit 30, the rest sticky, then round_pack's single rounding (which
/// shifts into the subnormals first and overflows to infinity).
pub(super) fn round_scaled(k: i64, significand: u128) -> F32 {
    let (shift, exp) = if significand >> 126 != 0 {
        (96, k + 127)
    } else {
        (95, k + 126)
    };
    let sticky = (significand & ((1 << shift) - 1) != 0) as u32;
    round_pack(false, exp as i32, (significand >> shift) as u32 | sticky)
}

#[cfg(test)]
mod tests {
    use super::super::fixed::{mul_q126, ONE_Q126};
    use super::*;

    fn f(bits: u32) -> F32 {
        F32::from_bits(bits)
    }

    #[test]
    fn table_entries() {
        assert_eq!(EXP2_TABLE[0], ONE_Q126);
        // 2^(32/64) = sqrt 2 = 0x1.6A09E667F3BCC908B2FB1366...
        assert_eq!(EXP2_TABLE[32] >> 62, 0x1_6A09_E667_F3BC_C908);
        // The square of the table's sqrt 2 is 2 to within a few units of 2^-118.
        let two = mul_q126(EXP2_TABLE[32], EXP2_TABLE[32]);
        assert!((2 * ONE_Q126).abs_diff(two) < 1 << 10);
    }

    #[test]
    fn specials() {
        assert_eq!(F32::ZERO.exp(), F32::ONE);
        assert_eq!(F32::NEG_ZERO.exp(), F32::ONE);
        assert_eq!(F32::INFINITY.exp(), F32::INFINITY);
        assert_eq!(F32::NEG_INFINITY.exp(), F32::ZERO);
        assert_eq!(f(0x7F80_0001).exp().to_bits(), 0x7FC0_0001);
        assert_eq!(f(0xFFC0_0000).exp().to_bits(), 0xFFC0_0000);
    }

    #[test]
    fn known_values() {
        assert_eq!(F32::ONE.exp().to_bits(), 0x402D_F854); // e
        assert_eq!(f(0xBF80_0000).exp().to_bits(), 0x3EBC_5AB2); // 1/e

        // Overflow threshold: 0x42B17217 (88.72283) is the largest x with a finite e^x.
        assert_eq!(f(0x42B1_7217).exp().to_bits(), 0x7F7F_FF84);
        assert_eq!(f(0x42B1_7218).exp(), F32::INFINITY);
        // Gradual underflow: e^-100 = 3.72e-44 is a subnormal (26.55 units of 2^-149); 0xC2CFF1B4
        // (-103.97208) is the last input whose e^x is above 2^-150 and so rounds up to 2^-149.
        assert_eq!(f(0xC2C8_0000).exp().to_bits(), 0x0000_001B);
        assert_eq!(f(0xC2CF_F1B4).exp().to_bits(), 0x0000_0001);
        assert_eq!(f(0xC2CF_F1B5).exp(), F32::ZERO);
    }
}
