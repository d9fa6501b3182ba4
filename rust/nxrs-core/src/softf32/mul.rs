//! Multiplication.

use super::{propagate_nan, round_pack, shift_right_jam64, Unpacked, F32, SIGN_BIT};

/// `a * b`, correctly rounded.
impl core::ops::Mul for F32 {
    type Output = F32;
    fn mul(self, rhs: F32) -> F32 {
        let sign = (self.0 ^ rhs.0) & SIGN_BIT;
        if self.is_nan() || rhs.is_nan() {
            return propagate_nan(self, rhs);
        }
        if self.is_infinite() || rhs.is_infinite() {
            if self.is_zero() || rhs.is_zero() {
                return F32::DEFAULT_NAN; // 0 * inf
            }
            return F32(sign | F32::INFINITY.0);
        }
        if self.is_zero() || rhs.is_zero() {
            return F32(sign);
        }

        let a = Unpacked::normalized(self);
        let b = Unpacked::normalized(rhs);
        // Two 24-bit significands give a 47- or 48-bit product, exact in 64 bits.
        let product = u64::from(a.sig) * u64::from(b.sig);
        // Bring the leading one to bit 30, jamming the rest into the sticky bit.
        let (shift, exp) = if product >= 1 << 47 {
            (17, a.exp + b.exp - 126)
        } else {
            (16, a.exp + b.exp - 127)
        };
        round_pack(sign != 0, exp, shift_right_jam64(product, shift) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(bits: u32) -> F32 {
        F32::from_bits(bits)
    }

    #[test]
    fn small_products() {
        assert_eq!((f(0x4040_0000) * f(0x4000_0000)).to_bits(), 0x40C0_0000); // 3 * 2 = 6
        assert_eq!((f(0xBF80_0000) * F32::ZERO), F32::NEG_ZERO);
        assert_eq!((F32::ZERO * F32::INFINITY), F32::DEFAULT_NAN);
    }

    #[test]
    fn underflow_to_subnormal_and_zero() {
        // 2^-126 * 2^-1 = 2^-127, a subnormal.
        assert_eq!((f(0x0080_0000) * f(0x3F00_0000)).to_bits(), 0x0040_0000);
        // min subnormal * 0.5 is a tie between 0 and the min subnormal: rounds to even 0.
        assert_eq!((f(0x0000_0001) * f(0x3F00_0000)).to_bits(), 0);
        // min subnormal * 0.75 rounds up to the min subnormal.
        assert_eq!((f(0x0000_0001) * f(0x3F40_0000)).to_bits(), 1);
    }

    #[test]
    fn overflow_to_infinity() {
        assert_eq!((f(0x7F7F_FFFF) * f(0xC000_0000)), F32::NEG_INFINITY);
    }
}
