//! Addition and subtraction.
//!
//! One path serves every pair of finite operands (zeros and subnormals included), in SoftFloat's
//! steps: unpack, order by magnitude, align, add or subtract magnitudes, normalise, round and
//! pack. It has no branch on the operands' signs, on which one is larger or on how far apart
//! their exponents are: those pick with selects and masks instead. With random signs, a branch
//! between adding and subtracting magnitudes is mispredicted half the time; and a body without
//! data-dependent branches is one the compiler vectorises when a loop adds whole slices (four
//! lanes with x86-64's baseline SSE2), which is where most of the speed over SoftFloat comes from
//! (see `benches/softf32.rs`). Only NaN and infinity operands, and an exactly zero result, leave
//! the path.

use super::{propagate_nan, round_pack_in_range, EXP_MASK, F32, FRAC_MASK, HIDDEN_BIT, SIGN_BIT};

/// `a + b`, correctly rounded.
impl core::ops::Add for F32 {
    type Output = F32;
    #[inline]
    fn add(self, rhs: F32) -> F32 {
        add_signed(self, rhs)
    }
}

/// `a - b`, correctly rounded: the sum with `b` negated (a NaN `b` keeps its sign, as on x86,
/// because the negation is applied only to non-NaN operands).
impl core::ops::Sub for F32 {
    type Output = F32;
    #[inline]
    fn sub(self, rhs: F32) -> F32 {
        let negated = if rhs.is_nan() { rhs } else { -rhs };
        add_signed(self, negated)
    }
}

#[inline(always)]
fn add_signed(a: F32, b: F32) -> F32 {
    // Non-short-circuit `|`: one well-predicted branch for both operands.
    if (a.0 & EXP_MASK == EXP_MASK) | (b.0 & EXP_MASK == EXP_MASK) {
        return add_nonfinite(a, b);
    }

    // Order by magnitude, so the result takes the larger operand's sign and exponent. The
    // magnitudes (sign bit clear) compare as i32: x86-64's baseline SSE2 has signed vector
    // compares only, which matters when a slice loop vectorises.
    let (a_mag, b_mag) = ((a.0 & !SIGN_BIT) as i32, (b.0 & !SIGN_BIT) as i32);
    let sign = if a_mag >= b_mag { a.0 } else { b.0 } & SIGN_BIT;
    let (big, small) = (a_mag.max(b_mag) as u32, a_mag.min(b_mag) as u32);

    // Unpack.
    let (big_exp, big_sig) = unpack_for_add(big);
    let (small_exp, small_sig) = unpack_for_add(small);

    // Align the smaller significand; bits shifted out stay visible as the sticky bit.
    let small_sig = shift_right_jam_branchless(small_sig, (big_exp - small_exp).min(31) as u32);

    // Add or subtract magnitudes: `subtract` is all ones when the signs differ, and
    // `(x ^ subtract) - subtract` is then `-x` (two's complement), else `x`.
    let subtract = 0u32.wrapping_sub((a.0 ^ b.0) >> 31);
    let sum = big_sig.wrapping_add((small_sig ^ subtract).wrapping_sub(subtract));
    if sum == 0 {
        // x - x is +0 when rounding to nearest, and only -0 + -0 is -0.
        return F32(a.0 & b.0 & SIGN_BIT);
    }

    // Normalise: bring the leading one to bit 30. A carry out of the hidden bit (leading one at
    // bit 31) is a shift of -1, one more exponent, jamming the bit shifted out; a cancellation
    // shifts left, but stops at exponent 1 (the result is then subnormal). Only an exact
    // difference (exponents at most one apart) can need more than one bit of left shift, so no
    // sticky bit is ever shifted up into the rounding bits.
    let shift = (sum.leading_zeros() as i32 - 1).min(big_exp - 1);
    let sig = if shift < 0 {
        (sum >> 1) | (sum & 1)
    } else {
        sum << shift.max(0)
    };

    // Round and pack: the exponent is now between 1 and MAX_FINITE_EXP + 1 (a carry out of the
    // largest binade), which is the range `round_pack_in_range` takes.
    round_pack_in_range(sign, big_exp - shift, sig)
}

/// The sum when an operand is a NaN or an infinity.
#[cold]
fn add_nonfinite(a: F32, b: F32) -> F32 {
    if a.is_nan() || b.is_nan() {
        return propagate_nan(a, b);
    }
    if a.is_infinite() && b.is_infinite() && a != b {
        return F32::DEFAULT_NAN; // inf - inf
    }
    if a.is_infinite() {
        a
    } else {
        b
    }
}

/// Exponent and significand of a finite magnitude (sign bit clear) in the internal convention
/// (hidden bit at bit 30, seven guard bits). A subnormal or zero is given exponent 1 and no hidden
/// bit, which is its true scale, so all finite values align by the exponent difference alone.
#[inline(always)]
fn unpack_for_add(magnitude: u32) -> (i32, u32) {
    let exp = (magnitude >> 23) as i32;
    let hidden = if exp == 0 { 0 } else { HIDDEN_BIT };
    (exp.max(1), ((magnitude & FRAC_MASK) | hidden) << 7)
}

/// `shift_right_jam32` without its branches on the distance, for a distance of at most 31 (the
/// caller clamps it: for a significand below 2^31, any larger distance leaves only the sticky
/// bit, as 31 does).
#[inline(always)]
fn shift_right_jam_branchless(sig: u32, dist: u32) -> u32 {
    (sig >> dist) | (sig & ((1 << dist) - 1) != 0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(bits: u32) -> F32 {
        F32::from_bits(bits)
    }

    #[test]
    fn one_plus_one_is_two() {
        assert_eq!((F32::ONE + F32::ONE).to_bits(), 0x4000_0000);
    }

    #[test]
    fn signed_zeros() {
        assert_eq!((F32::NEG_ZERO + F32::NEG_ZERO), F32::NEG_ZERO);
        assert_eq!((F32::NEG_ZERO + F32::ZERO), F32::ZERO);
        assert_eq!((F32::ONE - F32::ONE), F32::ZERO);
        assert_eq!((F32::ZERO - F32::ZERO), F32::ZERO);
        assert_eq!((F32::NEG_ZERO - F32::ZERO), F32::NEG_ZERO);
    }

    #[test]
    fn infinities() {
        assert_eq!((F32::INFINITY - F32::INFINITY), F32::DEFAULT_NAN);
        assert_eq!((F32::INFINITY + f(0x3F80_0000)), F32::INFINITY);
        assert_eq!((f(0x7F7F_FFFF) + f(0x7F7F_FFFF)), F32::INFINITY);
    }

    #[test]
    fn subnormals_add_exactly() {
        assert_eq!((f(1) + f(1)).to_bits(), 2);
        assert_eq!((f(0x007F_FFFF) + f(1)).to_bits(), 0x0080_0000);
        assert_eq!((f(0x0080_0000) - f(1)).to_bits(), 0x007F_FFFF);
    }

    #[test]
    fn nan_propagates_first_operand_quieted() {
        assert_eq!((f(0x7F80_0001) + f(0xFFC0_0002)).to_bits(), 0x7FC0_0001);
        assert_eq!((F32::ONE - f(0x7FC0_0005)).to_bits(), 0x7FC0_0005);
    }
}
