//! Division.

use super::{propagate_nan, round_pack, Unpacked, F32, SIGN_BIT};

/// `a / b`, correctly rounded. `x / 0` is a signed infinity for nonzero `x`.
impl core::ops::Div for F32 {
    type Output = F32;
    fn div(self, rhs: F32) -> F32 {
        let sign = (self.0 ^ rhs.0) & SIGN_BIT;
        if self.is_nan() || rhs.is_nan() {
            return propagate_nan(self, rhs);
        }
        if self.is_infinite() {
            if rhs.is_infinite() {
                return F32::DEFAULT_NAN; // inf / inf
            }
            return F32(sign | F32::INFINITY.0);
        }
        if rhs.is_infinite() {
            return F32(sign);
        }
        if rhs.is_zero() {
            if self.is_zero() {
                return F32::DEFAULT_NAN; // 0 / 0
            }
            return F32(sign | F32::INFINITY.0);
        }
        if self.is_zero() {
            return F32(sign);
        }

        let a = Unpacked::normalized(self);
        let b = Unpacked::normalized(rhs);
        // Scale the dividend so the quotient has its leading one at bit 30 (31 bits: 24 of
        // significand and 7 guard bits); a nonzero remainder becomes the sticky bit.
        let (shift, exp) = if a.sig >= b.sig {
            (30, a.exp - b.exp + 127)
        } else {
            (31, a.exp - b.exp + 126)
        };
        let dividend = u64::from(a.sig) << shift;
        let divisor = u64::from(b.sig);
        let quotient = (dividend / divisor) as u32;
        let sticky = (dividend % divisor != 0) as u32;
        round_pack(sign != 0, exp, quotient | sticky)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(bits: u32) -> F32 {
        F32::from_bits(bits)
    }

    #[test]
    fn exact_and_inexact_quotients() {
        assert_eq!((f(0x40C0_0000) / f(0x4000_0000)).to_bits(), 0x4040_0000); // 6 / 2 = 3
        assert_eq!((F32::ONE / f(0x4040_0000)).to_bits(), 0x3EAA_AAAB); // 1/3
    }

    #[test]
    fn specials() {
        assert_eq!((F32::ONE / F32::NEG_ZERO), F32::NEG_INFINITY);
        assert_eq!((F32::ZERO / F32::ZERO), F32::DEFAULT_NAN);
        assert_eq!((F32::INFINITY / F32::INFINITY), F32::DEFAULT_NAN);
        assert_eq!((F32::ONE / F32::NEG_INFINITY), F32::NEG_ZERO);
    }

    #[test]
    fn subnormal_quotient() {
        // 2^-126 / 4 = 2^-128.
        assert_eq!((f(0x0080_0000) / f(0x4080_0000)).to_bits(), 0x0020_0000);
    }
}
