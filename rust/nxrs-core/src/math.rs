//! The elementary functions of the two arithmetic settings (`docs/TRAINING.md`, section 2).
//!
//! - [`Math::Seed`]: the seed program's own functions, reproduced operation for operation: its
//!   Taylor `exp`, series `log`, 16-step Newton `sqrt` and sign-of-difference `le`. They are not
//!   correctly rounded; every bit of the seed's run depends on them.
//! - [`Math::Ieee`]: correctly rounded `exp`, `log` and `sqrt` ([`F32::exp`], [`F32::ln`],
//!   [`F32::sqrt`]) and IEEE `<=`.
//!
//! The seed's functions are written over [`Real`] from its basic operations, so every backend
//! runs the same sequence of them. The correctly rounded `exp` and `log` are softf32's integer
//! algorithms on the bit pattern; every backend gives their bits (the hardware backend reaches
//! `exp`'s by way of binary64 where a rounding test proves them: [`Real::exp`]).

use crate::arith::Real;
use crate::softf32::F32;
use std::sync::LazyLock;

crate::names::names! {
    /// Which elementary functions a run uses; recorded in every checkpoint.
    pub enum Math {
        Seed = "seed",
        Ieee = "ieee",
    }
}

impl Math {
    pub fn exp<R: Real>(self, x: R) -> R {
        match self {
            Math::Seed => seed_exp(x),
            Math::Ieee => x.exp(),
        }
    }

    /// `x[i] = exp(x[i])` for every `i`, in place ([`Math::exp`]; the correctly rounded one
    /// several cells at a time where the backend can).
    pub fn exps_in_place<R: Real>(self, x: &mut [R]) {
        match self {
            Math::Seed => x.iter_mut().for_each(|x| *x = seed_exp(*x)),
            Math::Ieee => R::exps_in_place(x),
        }
    }

    pub fn log<R: Real>(self, x: R) -> R {
        match self {
            Math::Seed => seed_log(x),
            Math::Ieee => R::from_f32(x.to_f32().ln()),
        }
    }

    /// The square roots of `N` values (lanes let the seed's Newton loop overlap its divisions).
    #[inline(always)]
    pub fn sqrt_lanes<R: Real, const N: usize>(self, x: [R; N]) -> [R; N] {
        match self {
            Math::Seed => seed_sqrt_lanes(x),
            Math::Ieee => x.map(R::sqrt),
        }
    }

    /// The comparison of ReLU, its derivative and the softmax maximum.
    pub fn le<R: Real>(self, x: R, y: R) -> bool {
        match self {
            Math::Seed => seed_le(x, y),
            Math::Ieee => x.ieee_le(y),
        }
    }

    /// ReLU's rule over a slice: `x[i] = +0` where `z[i] <= 0` by [`Math::le`], else `x[i]`
    /// unchanged (ReLU itself when `x` holds `z`; its derivative when `x` holds the gradient).
    /// The choice is a mask on the bits, not a branch: the signs of pre-activations are as good
    /// as random, and a loop without branches vectorises.
    pub fn zero_where_not_positive<R: Real>(self, z: &[R], x: &mut [R]) {
        R::vectorized(
            #[inline(always)]
            || match self {
                Math::Seed => zero_where(z, x, |z| seed_le(z, R::ZERO)),
                Math::Ieee => zero_where(z, x, |z| z.ieee_le(R::ZERO)),
            },
        );
    }

    /// ReLU in place: `x[i] = +0` where `x[i] <= 0` by [`Math::le`] (a layer's outputs rectified
    /// where it writes them, while they are in the cache: the same bits as ReLU's own pass).
    pub fn rectify<R: Real>(self, x: &mut [R]) {
        R::vectorized(
            #[inline(always)]
            || match self {
                Math::Seed => rectify(x, |z| seed_le(z, R::ZERO)),
                Math::Ieee => rectify(x, |z| z.ieee_le(R::ZERO)),
            },
        );
    }

    /// [`Math::zero_where_not_positive`] of a copy of `from` into `to`, in one pass over the
    /// cells (a layer's ReLU and its derivative: a copy first would be one more pass).
    pub fn copy_where_positive<R: Real>(self, z: &[R], from: &[R], to: &mut [R]) {
        R::vectorized(
            #[inline(always)]
            || match self {
                Math::Seed => copy_where(z, from, to, |z| seed_le(z, R::ZERO)),
                Math::Ieee => copy_where(z, from, to, |z| z.ieee_le(R::ZERO)),
            },
        );
    }
}

/// `x[i] = +0` where `not_positive(z[i])`.
#[inline(always)]
fn zero_where<R: Real>(z: &[R], x: &mut [R], not_positive: impl Fn(R) -> bool) {
    for (x, &z) in x.iter_mut().zip(z) {
        *x = masked(*x, z, &not_positive);
    }
}

/// `x[i] = +0` where `not_positive(x[i])`.
#[inline(always)]
fn rectify<R: Real>(x: &mut [R], not_positive: impl Fn(R) -> bool) {
    for x in x {
        *x = masked(*x, *x, &not_positive);
    }
}

/// `to[i] = from[i]`, or `+0` where `not_positive(z[i])`.
#[inline(always)]
fn copy_where<R: Real>(z: &[R], from: &[R], to: &mut [R], not_positive: impl Fn(R) -> bool) {
    for ((to, &from), &z) in to.iter_mut().zip(from).zip(z) {
        *to = masked(from, z, &not_positive);
    }
}

/// `x`, or `+0` if `not_positive(z)`: a mask on the bits (see [`Math::zero_where_not_positive`]).
#[inline(always)]
fn masked<R: Real>(x: R, z: R, not_positive: impl Fn(R) -> bool) -> R {
    let keep = u32::from(!not_positive(z)).wrapping_neg();
    R::from_f32(F32::from_bits(x.to_f32().to_bits() & keep))
}

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
/// The difference is computed in `R`, which gives softf32's bits (NaNs included).
pub fn seed_le<R: Real>(x: R, y: R) -> bool {
    (x - y).to_f32().is_sign_negative_or_zero()
}

/// The seed's `f32_sqrt`: 16 Newton steps `y = (y + x/y) / 2` from `y = x`; `±0` gives `+0`.
/// Not correctly rounded, and for small `x` not converged: it is what the seed's Adam uses.
pub fn seed_sqrt<R: Real>(x: R) -> R {
    if x.to_f32().is_zero() {
        return R::ZERO;
    }
    let two = R::from_f32(CONSTANTS.two);
    let mut y = x;
    for _ in 0..16 {
        y = (y + x / y) / two;
    }
    y
}

/// [`seed_sqrt`] of `N` values at once, bit for bit the same per value. Each lane runs exactly
/// the seed's sequence of operations; the Newton steps are only interleaved across lanes, so the
/// CPU overlaps independent divisions instead of waiting on one dependency chain at a time.
/// Every intermediate reaches the result through `+`, `*` and `/`, which keep NaNs, except
/// where the result is replaced by 0 (chosen from the input alone), so [`Real::Fast`] may
/// compute it (see `optim::adam`).
///
/// The seed's halving `s / 2` is computed as `s * 0.5`, the same bits for every `s`: both are the
/// correctly rounded value of the same real number (subnormal results included), infinities
/// stay infinities, and a NaN `s` gives `s` quieted (the first NaN operand) either way; a
/// multiplication is several times cheaper than a division. `sqrt_lanes_equal_one_at_a_time` and
/// `halving_by_multiplication_is_division_by_two` check it.
#[inline(always)]
pub fn seed_sqrt_lanes<R: Real, const N: usize>(x: [R; N]) -> [R; N] {
    let half = R::from_f32(CONSTANTS.half);
    let mut y = x;
    for _ in 0..16 {
        for (y, &x) in y.iter_mut().zip(&x) {
            *y = (*y + x / *y) * half;
        }
    }
    for (y, &x) in y.iter_mut().zip(&x) {
        if x.to_f32().is_zero() {
            *y = R::ZERO;
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
pub fn seed_exp<R: Real>(x: R) -> R {
    let c = &*CONSTANTS;
    let t = x * R::from_f32(c.log2e);
    let half = R::from_f32(c.half);
    let rounded = if seed_le(R::ZERO, t) {
        t + half
    } else {
        t - half
    };
    let n = rounded.to_f32().to_i64_trunc();
    let r = (t - R::from_i64(n)) * R::from_f32(c.ln2);
    let mut sum = R::ONE;
    let mut term = R::ONE;
    for k in 1..=8 {
        term = (term * r) / R::from_i64(k);
        sum = sum + term;
    }
    let biased = n.saturating_add(127);
    if biased <= 0 {
        return R::ZERO;
    }
    let biased = biased.min(254) as u32;
    sum * R::from_f32(F32::from_bits(biased << 23))
}

/// The seed's `f32_log`: `x = 2^e m` with `m` in [1, 2) read from the bit pattern (the sign bit is
/// ignored, as in the seed), `ln m = 2 atanh(u)`, `u = (m-1)/(m+1)`, by a 7-term series after
/// the first, then `e ln2 + 2 atanh(u)`.
pub fn seed_log<R: Real>(x: R) -> R {
    let c = &*CONSTANTS;
    let bits = x.to_f32().to_bits();
    let e = i64::from((bits >> 23) & 0xFF) - 127;
    let m = R::from_f32(F32::from_bits((bits & 0x007F_FFFF) | 0x3F80_0000));
    let u = (m - R::ONE) / (m + R::ONE);
    let u2 = u * u;
    let mut term = u;
    let mut sum = u;
    for k in 1..=7 {
        term = term * u2;
        sum = sum + term / R::from_i64(2 * k + 1);
    }
    R::from_i64(e) * R::from_f32(c.ln2) + R::from_f32(c.two) * sum
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
    fn zeroing_by_mask_follows_le() {
        let z = [
            0x0000_0000u32,
            0x8000_0000,
            0x0000_0001,
            0x8000_0001,
            0x3F80_0000,
            0xBF80_0000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0xFFC0_0000,
            0x7F80_0001,
        ]
        .map(F32::from_bits);
        let x = F32::from_bits(0x4049_0FDB);
        for math in Math::ALL {
            let mut masked = [x; 11];
            math.zero_where_not_positive(&z, &mut masked);
            for (&got, &z) in masked.iter().zip(&z) {
                let want = if math.le(z, F32::ZERO) { F32::ZERO } else { x };
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{math:?} at z = {:08X}",
                    z.to_bits()
                );
            }
        }
    }

    #[test]
    fn halving_by_multiplication_is_division_by_two() {
        // Every exponent and sign, with a spread of significands (NaNs, subnormals and the
        // values whose halves round included): 2^32 / 509 patterns.
        let (half, two) = (CONSTANTS.half, CONSTANTS.two);
        assert_eq!(half.to_bits(), 0x3F00_0000);
        for bits in (0..=u32::MAX)
            .step_by(509)
            .chain([1, 3, 0x0080_0001, 0x7F80_0001])
        {
            let s = F32::from_bits(bits);
            assert_eq!((s * half).to_bits(), (s / two).to_bits(), "{bits:08X}");
        }
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
