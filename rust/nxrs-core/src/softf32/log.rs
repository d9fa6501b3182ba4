//! Correctly rounded natural logarithm, in integer fixed point.
//!
//! `x = 2^e * m` with `m` in `[0.75, 1.5)`, so that `x` near 1 (from either side) has `e = 0`.
//! A table picks `c ~ 1/m` (one of 193, with `c = 1` exactly around `m = 1`) such that
//! `r = m * c - 1` is exact and `|r| < 2^-8.5`; then `ln x = e * ln2 - ln c + ln(1 + r)`, with
//! `ln(1 + r) = r + r * p(r)` and `p` a degree-7 polynomial. `r` is exact and `p` good to
//! `2^-69`, so `ln(1 + r)` is known to a relative `2^-69` however small it is (this is the whole
//! result when `e = 0` and `c = 1`, as small as `2^-24`); otherwise `|ln x| > 2^-9.1`, `|r|` is
//! below `2^-8.5` and the table terms are off by less than `2^-100`, so the relative error stays
//! below `2^-68.6`: `2^-44.6` of a result ulp. Rounding that approximation once is correct unless
//! `ln x` lies closer than that to a rounding boundary; no binary32 input does (the hardest,
//! `x = 0x65D890D3`, is `2^-34.0` ulp from one), which `tests/exhaustive_functions.rs` checks on
//! all 2^32 inputs.

use super::fixed::{ln_ratio_q126, LN2_Q126};
use super::{round_pack, Unpacked, F32, QUIET_BIT};

/// `c * 2^14` for the cells `i` in `192..=384` (index `i - 192`): `round(2^22 / i)`, close to
/// `1/m` for `m` in `[i - 1/2, i + 1/2) / 256`. Entry 64 (`i = 256`) is exactly `2^14` (`c = 1`).
const RECIP: [i64; 193] = {
    let mut table = [0i64; 193];
    let mut idx = 0;
    while idx < 193 {
        let i = idx as i64 + 192;
        table[idx] = ((1 << 23) / i + 1) / 2;
        idx += 1;
    }
    table
};

/// `ln c` in Q108 for the `c` of [`RECIP`]: `ln(C / 2^14) = ±2 atanh(|C - 2^14| / (C + 2^14))`,
/// computed in Q126 at compile time.
const LN_RECIP_Q108: [i128; 193] = {
    let mut table = [0i128; 193];
    let mut idx = 0;
    while idx < 193 {
        let c = RECIP[idx] as i128;
        let ln = ln_ratio_q126((c - (1 << 14)).unsigned_abs(), (c + (1 << 14)) as u128);
        let ln = (ln >> 18) as i128;
        table[idx] = if c < 1 << 14 { -ln } else { ln };
        idx += 1;
    }
    table
};

/// `ln 2` in Q108.
const LN2_Q108: i128 = (LN2_Q126 >> 18) as i128;

/// `(-1)^n / (n + 1)` in Q63 for `n` in `1..=7` (index `n - 1`): `ln(1 + r) = r + r * p(r)` with
/// `p(r) = -r/2 + r^2/3 - ... - r^7/8`, leaving out `r^8/9 < 2^-71`.
const LOG1P_Q63: [i64; 7] = {
    let mut table = [0i64; 7];
    let mut n = 1;
    while n <= 7 {
        let c = ((1i128 << 63) / (n + 1)) as i64;
        table[n as usize - 1] = if n % 2 == 1 { -c } else { c };
        n += 1;
    }
    table
};

impl F32 {
    /// The natural logarithm, correctly rounded (to nearest, ties to even; the only exact result
    /// is `ln 1 = +0`). `ln(±0) = -inf`, `ln(+inf) = +inf`, a negative operand (`-inf` too) gives
    /// [`F32::DEFAULT_NAN`], and a NaN operand comes back quieted. Subnormal operands are exact
    /// inputs like any other (`ln(2^-149) = -103.28`).
    pub fn ln(self) -> F32 {
        // Specials.
        if self.is_nan() {
            return F32(self.0 | QUIET_BIT);
        }
        if self.is_zero() {
            return F32::NEG_INFINITY;
        }
        if self.is_sign_negative() {
            return F32::DEFAULT_NAN;
        }
        if self.is_infinite() {
            return self;
        }
        if self == F32::ONE {
            return F32::ZERO;
        }

        // Unpack: x = sig * 2^(exp - 150) = 2^e * m, m = M * 2^-24 in [0.75, 1.5).
        let x = Unpacked::normalized(self);
        let (e, m) = if x.sig >= 0x00C0_0000 {
            (x.exp - 126, i64::from(x.sig))
        } else {
            (x.exp - 127, i64::from(x.sig) << 1)
        };

        // Range reduction: the cell of m to the nearest 1/256, and r = m * c - 1, exact in units
        // of 2^-38 (M * C has at most 39 bits). |r| < 2^-8.5 (half a cell, times c <= 4/3, plus
        // C's rounding).
        let idx = ((m + (1 << 15)) >> 16) as usize - 192;
        let r_38 = m * RECIP[idx] - (1 << 38);
        let r = r_38 << 32; // Q70, below 2^61.5

        // Evaluation: p(r) by Horner in Q63, then ln(1 + r) = r + r * p(r) in Q108 (r exact, so
        // the result keeps p's relative accuracy, even for tiny r).
        let mut q = LOG1P_Q63[6];
        for &c in LOG1P_Q63[..6].iter().rev() {
            q = c + ((i128::from(q) * i128::from(r)) >> 70) as i64;
        }
        let p = ((i128::from(q) * i128::from(r)) >> 63) as i64; // Q70
        let log1p = (i128::from(r_38) << 70) + i128::from(r_38) * i128::from(p);
        let sum = i128::from(e) * LN2_Q108 - LN_RECIP_Q108[idx] + log1p;

        // Round: the leading one to bit 30, the rest sticky; |ln x| >= 2^-24.5 keeps the leading
        // one above bit 83, so the shift is positive.
        let magnitude = sum.unsigned_abs();
        let shift = 127 - magnitude.leading_zeros() - 30;
        let sticky = (magnitude & ((1 << shift) - 1) != 0) as u32;
        // value = magnitude * 2^-108 = sig * 2^(shift - 108) = sig * 2^(exp - 157).
        round_pack(
            sum < 0,
            shift as i32 + 49,
            (magnitude >> shift) as u32 | sticky,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(bits: u32) -> F32 {
        F32::from_bits(bits)
    }

    #[test]
    fn tables() {
        assert_eq!(RECIP[64], 1 << 14);
        assert_eq!(LN_RECIP_Q108[64], 0);
        assert_eq!(LOG1P_Q63[0], -(1 << 62));
        // c = 2^22/192 and 2^22/384 rounded: 21845.33 -> 21845, 10922.67 -> 10923.
        assert_eq!((RECIP[0], RECIP[192]), (21845, 10923));
    }

    #[test]
    fn specials() {
        assert_eq!(F32::ZERO.ln(), F32::NEG_INFINITY);
        assert_eq!(F32::NEG_ZERO.ln(), F32::NEG_INFINITY);
        assert_eq!(F32::INFINITY.ln(), F32::INFINITY);
        assert_eq!(F32::NEG_INFINITY.ln(), F32::DEFAULT_NAN);
        assert_eq!(f(0xBF80_0000).ln(), F32::DEFAULT_NAN);
        assert_eq!(f(0x8000_0001).ln(), F32::DEFAULT_NAN);
        assert_eq!(F32::ONE.ln(), F32::ZERO);
        assert_eq!(f(0x7F80_0001).ln().to_bits(), 0x7FC0_0001);
        assert_eq!(f(0xFF80_0001).ln().to_bits(), 0xFFC0_0001);
    }

    #[test]
    fn known_values() {
        assert_eq!(f(0x4000_0000).ln().to_bits(), 0x3F31_7218); // ln 2
        assert_eq!(f(0x402D_F854).ln().to_bits(), 0x3F7F_FFFF); // ln(e rounded down)
        assert_eq!(f(0x3F7F_FFFF).ln().to_bits(), 0xB380_0000); // ln(1 - 2^-24)
        assert_eq!(f(0x3F80_0001).ln().to_bits(), 0x33FF_FFFF); // ln(1 + 2^-23)
        assert_eq!(f(0x0000_0001).ln().to_bits(), 0xC2CE_8ED0); // ln(2^-149)
        assert_eq!(f(0x7F7F_FFFF).ln().to_bits(), 0x42B1_7218); // ln(FLT_MAX)
        assert_eq!(f(0x4120_0000).ln().to_bits(), 0x4013_5D8E); // ln 10
    }
}
