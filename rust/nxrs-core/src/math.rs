//! The seed program's own elementary functions, reproduced operation for operation.
//!
//! These are not the correctly rounded functions of a math library: they are the seed's
//! algorithms (its series, its constants built by division, its Newton loop), because every bit
//! of a training run depends on them. [`F32::sqrt`] is the correctly rounded square root.

use crate::softf32::F32;
use std::sync::LazyLock;

/// The seed builds its constants with divisions at run time; they are computed once here.
struct Constants {
    log2e: F32,
    ln2: F32,
    half: F32,
    two: F32,
}

static CONSTANTS: LazyLock<Constants> = LazyLock::new(|| Constants {
    log2e: F32::from_i32(1_442_695) / F32::from_i32(1_000_000),
    ln2: F32::from_i32(693_147) / F32::from_i32(1_000_000),
    half: F32::ONE / F32::from_i32(2),
    two: F32::from_i32(2),
});

/// The seed's `f32_le(x, y)`: `x - y` is negative or zero (see [`F32::le_by_sign_of_difference`]).
pub fn seed_le(x: F32, y: F32) -> bool {
    x.le_by_sign_of_difference(y)
}

/// The seed's `f32_sqrt`: 16 Newton steps `y = (y + x/y) / 2` from `y = x`; `±0` gives `+0`.
/// Not correctly rounded, and for small `x` not converged: it is what the seed's Adam uses.
pub fn seed_sqrt(x: F32) -> F32 {
    if x.is_zero() {
        return F32::ZERO;
    }
    let mut y = x;
    for _ in 0..16 {
        y = (y + x / y) / CONSTANTS.two;
    }
    y
}

/// [`seed_sqrt`] of `N` values at once, bit for bit the same per value. Each lane runs exactly
/// the seed's sequence of operations; the Newton steps are only interleaved across lanes, so the
/// CPU overlaps independent divisions instead of waiting on one dependency chain at a time.
pub fn seed_sqrt_lanes<const N: usize>(x: [F32; N]) -> [F32; N] {
    let mut y = x;
    for _ in 0..16 {
        for (y, &x) in y.iter_mut().zip(&x) {
            *y = (*y + x / *y) / CONSTANTS.two;
        }
    }
    for (y, &x) in y.iter_mut().zip(&x) {
        if x.is_zero() {
            *y = F32::ZERO;
        }
    }
    y
}

/// The seed's `f32_exp`: `x = n ln2 + r` with `n` the nearest integer to `x log2e` (rounded half
/// away from zero by adding ±1/2 and truncating), `e^r` by an 8-term Taylor series, and `2^n`
/// built from exponent bits (0 below the normal range; `n` above it is clamped to 127).
///
/// The seed's `f32_int` truncates toward zero; where `x log2e ± 1/2` is NaN or beyond the i64
/// range, nxrs takes x86's 64-bit `cvttss2si` answer, `i64::MIN`, so the result is 0.
pub fn seed_exp(x: F32) -> F32 {
    let c = &*CONSTANTS;
    let t = x * c.log2e;
    let n = if seed_le(F32::ZERO, t) {
        (t + c.half).to_i64_trunc()
    } else {
        (t - c.half).to_i64_trunc()
    };
    let r = (t - F32::from_i64(n)) * c.ln2;
    let mut sum = F32::ONE;
    let mut term = F32::ONE;
    for k in 1..=8 {
        term = (term * r) / F32::from_i32(k);
        sum = sum + term;
    }
    let biased = n.saturating_add(127);
    if biased <= 0 {
        return F32::ZERO;
    }
    let biased = biased.min(254) as u32;
    sum * F32::from_bits(biased << 23)
}

/// The seed's `f32_log`: `x = 2^e m` with `m` in [1, 2) read from the bit pattern (the sign bit is
/// ignored, as in the seed), `ln m = 2 atanh(u)`, `u = (m-1)/(m+1)`, by a 7-term series after
/// the first, then `e ln2 + 2 atanh(u)`.
pub fn seed_log(x: F32) -> F32 {
    let c = &*CONSTANTS;
    let bits = x.to_bits();
    let e = ((bits >> 23) & 0xFF) as i32 - 127;
    let m = F32::from_bits((bits & 0x007F_FFFF) | 0x3F80_0000);
    let u = (m - F32::ONE) / (m + F32::ONE);
    let u2 = u * u;
    let mut term = u;
    let mut sum = u;
    for k in 1..=7 {
        term = term * u2;
        sum = sum + term / F32::from_i32(2 * k + 1);
    }
    F32::from_i32(e) * c.ln2 + c.two * sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqrt_of_perfect_squares_and_zero() {
        assert_eq!(seed_sqrt(F32::from_i32(4)), F32::from_i32(2));
        assert_eq!(seed_sqrt(F32::NEG_ZERO), F32::ZERO);
    }

    #[test]
    fn sqrt_lanes_equal_one_at_a_time() {
        // Zeros, subnormals, tiny and huge values, non-converging inputs, NaN and infinities.
        let bits = [
            0x0000_0000u32,
            0x8000_0000,
            0x0000_0001,
            0x0012_3456,
            0x3F80_0000,
            0x4080_0000,
            0x2F80_0000,
            0x7F7F_FFFF,
            0x7FC0_0000,
            0x7F80_0000,
            0xBF80_0000,
            0x3A83_126F,
        ];
        let x = bits.map(F32::from_bits);
        assert_eq!(seed_sqrt_lanes(x), x.map(seed_sqrt));
    }

    #[test]
    fn exp_and_log_at_their_fixed_points() {
        assert_eq!(seed_exp(F32::ZERO), F32::ONE);
        assert_eq!(seed_log(F32::ONE), F32::ZERO);
        // Far below the range: the power of two underflows to 0 by the seed's rule.
        assert_eq!(seed_exp(F32::from_i32(-200)), F32::ZERO);
        assert_eq!(seed_exp(F32::DEFAULT_NAN), F32::ZERO);
    }
}
