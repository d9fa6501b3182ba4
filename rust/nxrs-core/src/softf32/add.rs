//! Addition and subtraction.

use super::{propagate_nan, round_pack, shift_right_jam32, F32, MAX_FINITE_EXP};

/// `a + b`, correctly rounded.
impl core::ops::Add for F32 {
    type Output = F32;
    fn add(self, rhs: F32) -> F32 {
        add_signed(self, rhs)
    }
}

/// `a - b`, correctly rounded: the sum with `b` negated (a NaN `b` keeps its sign, as on x86,
/// because the negation is applied only to non-NaN operands).
impl core::ops::Sub for F32 {
    type Output = F32;
    fn sub(self, rhs: F32) -> F32 {
        let negated = if rhs.is_nan() { rhs } else { -rhs };
        add_signed(self, negated)
    }
}

fn add_signed(a: F32, b: F32) -> F32 {
    // Specials.
    if a.is_nan() || b.is_nan() {
        return propagate_nan(a, b);
    }
    if a.is_infinite() || b.is_infinite() {
        if a.is_infinite() && b.is_infinite() && a != b {
            return F32::DEFAULT_NAN; // inf - inf
        }
        return if a.is_infinite() { a } else { b };
    }
    if a.is_zero() && b.is_zero() {
        // Only -0 + -0 is -0 when rounding to nearest.
        return F32(a.0 & b.0);
    }
    if b.is_zero() {
        return a;
    }
    if a.is_zero() {
        return b;
    }

    // Order by magnitude, so the result takes the larger operand's sign and exponent.
    let (big, small) = if a.abs().0 >= b.abs().0 {
        (a, b)
    } else {
        (b, a)
    };
    let (big_exp, big_sig) = unpack_for_add(big);
    let (small_exp, small_sig) = unpack_for_add(small);

    // Align the smaller significand; bits shifted out stay visible as the sticky bit.
    let small_sig = shift_right_jam32(small_sig, (big_exp - small_exp) as u32);

    let negative = big.is_sign_negative();
    if big.is_sign_negative() == small.is_sign_negative() {
        let sum = big_sig + small_sig;
        if sum >= 1 << 31 {
            // Carry out of the hidden bit: one more exponent.
            return round_pack(negative, big_exp + 1, shift_right_jam32(sum, 1));
        }
        return round_pack(negative, big_exp, sum);
    }

    let difference = big_sig - small_sig;
    if difference == 0 {
        return F32::ZERO; // x - x is +0 when rounding to nearest.
    }
    // Cancellation: renormalise, but stop at exponent 1 (the result is then subnormal). Only an
    // exact difference (exponents at most one apart) can need more than one bit of shift, so no
    // sticky bit is ever shifted up into the rounding bits.
    let shift = (difference.leading_zeros() as i32 - 1).min(big_exp - 1);
    debug_assert!(big_exp <= MAX_FINITE_EXP);
    round_pack(negative, big_exp - shift, difference << shift)
}

/// Exponent and significand of a finite nonzero value in the internal convention (hidden bit at
/// bit 30, seven guard bits). A subnormal is given exponent 1 and no hidden bit, which is its true
/// scale, so both kinds align by the exponent difference alone.
fn unpack_for_add(x: F32) -> (i32, u32) {
    match x.biased_exp() {
        0 => (1, x.frac() << 7),
        exp => (exp, (x.frac() | super::HIDDEN_BIT) << 7),
    }
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
