//! The standard normal distribution's CDF `Φ` and density `φ`, correctly rounded, in integer
//! fixed point: the special functions of the exact GELU, `x Φ(x)`, and of its derivative.
//!
//! Both are exponentials. `φ(x) = e^y` with `y = -x²/2 - ln √(2π)`. For `t >= 0` the upper tail
//! `Q(t) = Φ(-t) = 1 - Φ(t)` is `φ(t) M(t)`, `M` the Mills ratio, so `Q(t) = e^y` with
//! `y = -t²/2 - ln √(2π) + ln M(t)`. `t²` is exact in fixed point (`t` has 24 significant bits)
//! and `ln M` is smooth and slowly varying (from `ln √(π/2)` at 0 to about `-ln t`), so a table
//! at the nodes `t0 = i/16` gives `ln M(t0) - ln √(2π)` and the Taylor coefficients of
//! `ln M(t0 + h) - ln M(t0)` up to degree 9, `|h| <= 1/32`. The exponent then goes through
//! [`F32::exp`]'s fixed-point `e^y` and one rounding: `Φ(x) = Q(-x)` for `x < 0` and
//! `1 - Q(x)` for `x > 0`, which lies in `[1/2, 1)`, where `Q`'s absolute error is what counts.
//!
//! Accuracy: the polynomial leaves out at most `2^-70` of `ln M`; its coefficients (rounded to
//! Q63) and Horner steps add below `2^-67.4`, their errors scaled down by `|h| <= 2^-5` in the
//! last product; the table's `ln M(t0) - ln √(2π)` is good to `2^-100`. So `y` is within `2^-67.2`,
//! and with `e^y`'s `2^-67.3`, `Q(t)` is within a relative `2^-66.2` before rounding: `2^-42.2` of
//! a result ulp (`1 - Q`: `2^-43.2`; `φ`, whose `y` is exact but for `ln √(2π)`'s `2^-119`:
//! `2^-43.3`). Rounding once is correct unless the exact value lies closer than that to a
//! rounding boundary; no binary32 input's does (the hardest, `Φ(0x33A06C99)`, just above
//! `1/2 + 2^-25`, is `2^-34.0` ulp from one; `φ(0x3E48A98A)` `2^-28.8` ulp), which
//! `tests/exhaustive_functions.rs` checks on all 2^32 inputs.
//!
//! The tables are built at compile time from integers: the Mills ratio by Laplace's continued
//! fraction at the last node, then Taylor steps down to 0; the Taylor coefficients of `ln M` from
//! those of the hazard rate `1/M`; `π` by Machin's formula (`fixed.rs`).

use super::exp::{exp_q119, magnitude_q48, round_scaled};
use super::fixed::{
    div_q112, ln_q112, ln_ratio_q126, mul_q112, LN2_Q126, ONE_Q112, ONE_Q126, PI_Q126,
};
use super::{round_pack, F32, QUIET_BIT, SIGN_BIT};

/// `1/2`, `Φ(0)`.
const HALF: F32 = F32(0x3F00_0000);

/// The largest `|x|` (as bits) of a negative `x` whose `Φ(x)` is not rounded to `+0`:
/// `Φ(-14.170185) > 2^-150`, half the smallest subnormal, and `Φ(-14.170186)` is below it.
pub(crate) const CDF_LAST_NONZERO: u32 = 0x4162_B914;

/// The largest positive `x` (as bits) whose `Φ(x)` is not rounded to 1: `1 - Φ(5.4199829)` is at
/// least `2^-25`, half an ulp below 1, and `1 - Φ(5.4199834)` is below it.
pub(crate) const CDF_LAST_BELOW_ONE: u32 = 0x40AD_7080;

/// The largest `|x|` (as bits) whose `φ(x)` is not rounded to `+0`: `φ(14.356401) > 2^-150`.
pub(crate) const PDF_LAST_NONZERO: u32 = 0x4165_B3D2;

/// `ln √(2π) = (3 ln 2 - ln(4/π)) / 2` in Q126, with `ln(4/π) = 2 atanh((4 - π) / (4 + π))`
/// from `π` and `4` in Q124 (so that `4 + π` stays below `2^127`).
const LN_SQRT_2PI_Q126: u128 = {
    let (four, pi) = (1u128 << 126, PI_Q126 >> 2);
    (3 * LN2_Q126 - ln_ratio_q126(four - pi, four + pi)) / 2
};

/// The same in Q119, the exponents' format.
const LN_SQRT_2PI_Q119: i128 = (LN_SQRT_2PI_Q126 >> 7) as i128;

/// The nodes are `t0 = i / 2^NODE_BITS`.
pub(crate) const NODE_BITS: u32 = 4;

/// Nodes `i` in `0..NODES`: `t0` up to 14.1875, the node nearest the largest `t` in use
/// (14.170185, [`CDF_LAST_NONZERO`]).
pub(crate) const NODES: usize = 228;

/// Degree of the polynomial in `h = t - t0` for `ln M(t) - ln M(t0)`.
pub(crate) const DEGREE: usize = 9;

/// One node of the tail table.
pub(crate) struct Node {
    /// `ln M(t0) - ln √(2π)` in Q119.
    pub(crate) offset: i128,
    /// The Taylor coefficients `b_1 ..= b_9` of `ln M` at `t0` in Q63 (all below 0.8 in
    /// magnitude), index `n - 1` holding `b_n`.
    pub(crate) slopes: [i64; DEGREE],
}

/// `M(i / 16)` in Q112 for every node. `M` satisfies `M' = tM - 1` (from `Q' = -φ`,
/// `φ' = -tφ`), whose other solutions grow like `e^(t²/2)`: stepping it towards larger `t`
/// would amplify every error, stepping towards 0 shrinks them. So the last node's value comes
/// from the continued fraction, and each node's from the one above it by a Taylor step.
const MILLS_Q112: [i128; NODES] = {
    let mut mills = [0i128; NODES];
    let mut i = NODES - 1;
    mills[i] = mills_continued_fraction(i);
    while i > 0 {
        mills[i - 1] = mills_step_down(i, mills[i]);
        i -= 1;
    }
    mills
};

/// `M(t) = 1/(t + 1/(t + 2/(t + 3/(t + ...))))` (Laplace's continued fraction) at `t = i / 16`,
/// 40 levels deep, which at the last node (`t = 14.19`) is within `2^-160` of `M`.
const fn mills_continued_fraction(i: usize) -> i128 {
    let t = (i as i128) << (112 - NODE_BITS);
    let mut denominator = t;
    let mut level = 40;
    while level > 0 {
        denominator = t + div_q112(level * ONE_Q112, denominator);
        level -= 1;
    }
    div_q112(ONE_Q112, denominator)
}

/// `M((i - 1) / 16)` from `M(i / 16)` by the Taylor series of `M` at `t0 = i / 16`, step
/// `-1/16`. From `M' = tM - 1` its coefficients are `a_1 = t0 a_0 - 1` and
/// `(n + 1) a_{n+1} = t0 a_n + a_{n-1}`, all below 1.3 in magnitude, so the terms
/// `a_n / 16^n` fall below `2^-112` by `n = 28`.
const fn mills_step_down(i: usize, mills: i128) -> i128 {
    let i = i as i128;
    let (mut previous, mut current) = (mills, ((i * mills) >> NODE_BITS) - ONE_Q112);
    let mut sum = mills - (current >> NODE_BITS);
    let mut n = 1;
    while n < 28 {
        let next = (((i * current) >> NODE_BITS) + previous) / (n + 1);
        (previous, current) = (current, next);
        n += 1;
        let term = current >> (NODE_BITS * n as u32);
        sum = if n % 2 == 0 { sum + term } else { sum - term };
    }
    sum
}

/// The table entry of node `i` from `M(t0)`. `ln M` has derivative `M'/M = t - v` with
/// `v = 1/M` the hazard rate, which satisfies `v' = v² - tv`. So `v`'s Taylor coefficients at
/// `t0` follow from `(n + 1) v_{n+1} = Σ_{k<=n} v_k v_{n-k} - t0 v_n - v_{n-1}`, and those of
/// `ln M` are `b_1 = t0 - v_0`, `b_2 = (1 - v_1)/2` and `b_{n+1} = -v_n/(n + 1)`.
const fn node(i: usize, mills: i128) -> Node {
    let t0 = (i as i128) << (112 - NODE_BITS);
    let mut v = [0i128; DEGREE];
    v[0] = div_q112(ONE_Q112, mills);
    let mut n = 0;
    while n + 1 < DEGREE {
        let mut sum = -mul_q112(t0, v[n]);
        if n > 0 {
            sum -= v[n - 1];
        }
        let mut k = 0;
        while k <= n {
            sum += mul_q112(v[k], v[n - k]);
            k += 1;
        }
        v[n + 1] = sum / (n as i128 + 1);
        n += 1;
    }

    let mut slopes = [0i64; DEGREE];
    let mut n = 0;
    while n < DEGREE {
        let b = match n {
            0 => t0 - v[0],
            1 => (ONE_Q112 - v[1]) / 2,
            _ => -v[n] / (n as i128 + 1),
        };
        slopes[n] = ((b + (1 << 48)) >> 49) as i64; // Q112 to Q63, to nearest
        n += 1;
    }
    Node {
        offset: (ln_q112(mills) << 7) - LN_SQRT_2PI_Q119,
        slopes,
    }
}

/// The tail table, built at compile time.
pub(crate) static TAIL: [Node; NODES] = {
    let mut table = [const {
        Node {
            offset: 0,
            slopes: [0; DEGREE],
        }
    }; NODES];
    let mut i = 0;
    while i < NODES {
        table[i] = node(i, MILLS_Q112[i]);
        i += 1;
    }
    table
};

/// `t²/2` in Q119 for `t` in Q48 below 16 (exact: below `2^126`).
fn half_square_q119(t: i64) -> i128 {
    (i128::from(t) * i128::from(t)) << 22
}

/// `Q(t) = Φ(-t)` for `2^-25 <= t <= 14.2` given in Q48, as [`exp_q119`]'s `(k, s)`.
fn upper_tail(t: i64) -> (i64, u128) {
    // The nearest node (halves rounded up) and h = t - t0, exact: |h| <= 2^-5, Q67.
    let i = ((t + (1 << 43)) >> 44) as usize;
    let h = (t - ((i as i64) << 44)) << 19;
    let node = &TAIL[i];

    // ln M(t) - ln M(t0) = h (b_1 + h (b_2 + ... + h b_9)), Horner in Q63 (every partial sum
    // stays below 0.83 in magnitude), the last product in Q119.
    let mut p = node.slopes[DEGREE - 1];
    for &b in node.slopes[..DEGREE - 1].iter().rev() {
        p = b + ((i128::from(p) * i128::from(h)) >> 67) as i64;
    }
    let ln_mills = (i128::from(p) * i128::from(h)) >> 11;
    exp_q119(node.offset + ln_mills - half_square_q119(t))
}

impl F32 {
    /// `Φ(x)`, the standard normal distribution function `(1 + erf(x/√2)) / 2`, correctly rounded
    /// (to nearest, ties to even; no binary32 `Φ(x)` is a tie). `Φ(±0) = 1/2`, `Φ(-inf) = +0`,
    /// `Φ(+inf) = 1`; `Φ(x)` is `+0` below `x = -14.170186`, a subnormal below `-13.0`, and 1
    /// above `x = 5.4199829`. A NaN operand comes back quieted.
    pub fn normal_cdf(self) -> F32 {
        // Specials and the ranges whose result needs no arithmetic.
        if self.is_nan() {
            return F32(self.0 | QUIET_BIT);
        }
        let negative = self.is_sign_negative();
        let magnitude = self.0 & !SIGN_BIT;
        if magnitude < 0x3300_0000 {
            // |x| < 2^-25: Φ(x) = 1/2 + x/√(2π) + O(x³) is within 0.4 * 2^-25 of 1/2, inside
            // the midpoints 1/2 - 2^-26 and 1/2 + 2^-25 around it (zeros and subnormals too).
            return HALF;
        }
        if negative && magnitude > CDF_LAST_NONZERO {
            return F32::ZERO; // -inf too
        }
        if !negative && magnitude > CDF_LAST_BELOW_ONE {
            return F32::ONE; // +inf too
        }

        let (k, significand) = upper_tail(magnitude_q48(magnitude));
        if negative {
            return round_scaled(k, significand);
        }
        // Φ(x) = 1 - Q(x) with Q(x) in [2^-25, 1/2), so k is in -26..=-1 and the difference in
        // (1/2, 1) has its leading one at bit 125 of Q126. value = (p >> 95) * 2^-31, which is
        // round_pack's sig * 2^(126 - 157).
        let p = ONE_Q126 - (significand >> -k);
        let sticky = (p & ((1 << 95) - 1) != 0) as u32;
        round_pack(false, 126, (p >> 95) as u32 | sticky)
    }

    /// `φ(x) = e^(-x²/2) / √(2π)`, the standard normal density, correctly rounded (to nearest,
    /// ties to even). `φ(±0) = 0.3989423`, `φ(±inf) = +0`; `φ(x)` is a subnormal for `|x|`
    /// above 13.15 and `+0` from `|x| = 14.356402` up. A NaN operand comes back quieted.
    pub fn normal_pdf(self) -> F32 {
        if self.is_nan() {
            return F32(self.0 | QUIET_BIT);
        }
        let magnitude = self.0 & !SIGN_BIT;
        if magnitude > PDF_LAST_NONZERO {
            return F32::ZERO; // ±inf too
        }
        // |x| < 2^-25 counts as 0: x²/2 < 2^-51 moves φ(x) by less than 2^-27 ulp, and φ(0) is
        // 0.12 ulp from a rounding boundary.
        let t = if magnitude < 0x3300_0000 {
            0
        } else {
            magnitude_q48(magnitude)
        };
        let (k, significand) = exp_q119(-half_square_q119(t) - LN_SQRT_2PI_Q119);
        round_scaled(k, significand)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(bits: u32) -> F32 {
        F32::from_bits(bits)
    }

    #[test]
    fn constants() {
        // ln √(2π) = 0.9189385332046727417803297364... = 0x0.EB3F8E4325F5A53494BC9001... (mpmath).
        assert_eq!(LN_SQRT_2PI_Q126 >> 62, 0xEB3F_8E43_25F5_A534);
        // M(0) = √(π/2) = 0x1.40D931FF627059657CA41FAE722C... (mpmath): the continued fraction
        // at 14.19 and 227 Taylor steps down agree with the closed form to within 2^-104.
        assert!((MILLS_Q112[0] - 0x1_40D9_31FF_6270_5965_7CA4_1FAE_722C).abs() < 1 << 8);
        // At 0, ln M(0) - ln √(2π) = ln(1/2) (within 2^-103, in Q119), and the slope of ln M is
        // -1/M(0) = -√(2/π) = -0x0.662114CF50D94234... (mpmath).
        assert!((TAIL[0].offset + 0x58_B90B_FBE8_E7BC_D5E4_F1D9_CC01_F97B).abs() < 1 << 16);
        assert!((TAIL[0].slopes[0] + 0x6621_14CF_50D9_4234).abs() <= 1);
    }

    #[test]
    fn specials() {
        assert_eq!(F32::ZERO.normal_cdf(), HALF);
        assert_eq!(F32::NEG_ZERO.normal_cdf(), HALF);
        assert_eq!(F32::INFINITY.normal_cdf(), F32::ONE);
        assert_eq!(F32::NEG_INFINITY.normal_cdf(), F32::ZERO);
        assert_eq!(f(0x7F80_0001).normal_cdf().to_bits(), 0x7FC0_0001);
        assert_eq!(f(0xFFC0_0000).normal_cdf().to_bits(), 0xFFC0_0000);
        assert_eq!(F32::INFINITY.normal_pdf(), F32::ZERO);
        assert_eq!(F32::NEG_INFINITY.normal_pdf(), F32::ZERO);
        assert_eq!(f(0xFF80_0001).normal_pdf().to_bits(), 0xFFC0_0001);
    }

    /// Correctly rounded values from mpmath (`ncdf`, `npdf` at 200 bits).
    #[test]
    fn known_values() {
        let cdf = [
            (0x3F80_0000, 0x3F57_625F), // Φ(1) = 0.8413447461
            (0xBF80_0000, 0x3E22_7686), // Φ(-1) = 0.1586552539
            (0x3DCC_CCCD, 0x3F0A_3228), // Φ(0.1) = 0.5398278379
            (0xC100_0000, 0x2633_4E96), // Φ(-8) = 6.220960574e-16
            (0xC150_0000, 0x0042_9C2A), // Φ(-13) = 6.1171644e-39, a subnormal
            (0xB300_0000, 0x3F00_0000), // Φ(-2^-25) = 0.4999999881
            (0x3300_0000, 0x3F00_0000), // Φ(2^-25) = 0.5000000119
            (0xC162_B914, 0x0000_0001), // the last Φ(x) above half the smallest subnormal
            (0xC162_B915, 0x0000_0000),
            (0x40AD_7080, 0x3F7F_FFFF), // the last Φ(x) below 1 - 2^-25
            (0x40AD_7081, 0x3F80_0000),
        ];
        for (x, want) in cdf {
            assert_eq!(f(x).normal_cdf().to_bits(), want, "Φ({x:#010x})");
        }
        let pdf = [
            (0x3F80_0000, 0x3E77_C72C), // φ(1) = 0.2419707245
            (0xC000_0000, 0x3D5D_25A2), // φ(-2) = 0.05399096651
            (0xC150_0000, 0x01D9_BFB2), // φ(-13) = 7.998827757e-38
            (0x0000_0001, 0x3ECC_422A), // φ(2^-149) = φ(0) = 0.3989422804
            (0x4165_B3D2, 0x0000_0001), // the last φ(x) above half the smallest subnormal
            (0x4165_B3D3, 0x0000_0000),
        ];
        for (x, want) in pdf {
            assert_eq!(f(x).normal_pdf().to_bits(), want, "φ({x:#010x})");
        }
    }
}
