//! Conversions between integers and binary32.

use super::{round_pack, shift_right_jam64, F32, HIDDEN_BIT, QUIET_BIT, SIGN_BIT};

/// How a float-to-integer conversion treats a fraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntRounding {
    /// Toward zero (C's cast; the seed's `f32_int`).
    TowardZero,
    /// To nearest, ties to even (IEEE `convertToIntegerTiesToEven`).
    NearestEven,
}

impl F32 {
    /// The `i32`, correctly rounded (to nearest, ties to even).
    pub fn from_i32(x: i32) -> F32 {
        F32::from_i64(i64::from(x))
    }

    /// The `i64`, correctly rounded (to nearest, ties to even).
    pub fn from_i64(x: i64) -> F32 {
        if x == 0 {
            return F32::ZERO;
        }
        let magnitude = x.unsigned_abs();
        // Put the leading one at bit 63, then keep 31 bits (leading one at bit 30) plus sticky.
        let leading_zeros = magnitude.leading_zeros();
        let sig = shift_right_jam64(magnitude << leading_zeros, 33) as u32;
        round_pack(x < 0, 190 - leading_zeros as i32, sig)
    }

    /// The binary64 value with these bits, rounded to nearest even (as x86 `cvtsd2ss`: a NaN
    /// keeps its sign and the top 22 bits of its payload, quieted). This is how hyperparameters
    /// given as Python floats become binary32 without any native float operation.
    pub fn from_f64_bits(bits: u64) -> F32 {
        let negative = bits >> 63 != 0;
        let sign = if negative { SIGN_BIT } else { 0 };
        let exp = ((bits >> 52) & 0x7FF) as i32;
        let frac = bits & ((1 << 52) - 1);
        if exp == 0x7FF {
            return if frac == 0 {
                F32(sign | F32::INFINITY.0)
            } else {
                F32(sign | F32::INFINITY.0 | QUIET_BIT | (frac >> 29) as u32)
            };
        }
        if exp == 0 && frac == 0 {
            return F32(sign);
        }
        // value = sig * 2^(exp - 1075) with the leading one at bit 52 (binary64 subnormals,
        // exponent field 0, are far below the binary32 range and round to zero).
        let (exp, sig) = if exp == 0 {
            (1, frac)
        } else {
            (exp, frac | 1 << 52)
        };
        // Keep 31 bits (leading one at bit 30) plus sticky: value = sig31 * 2^(exp - 896 - 157).
        round_pack(negative, exp - 896, shift_right_jam64(sig, 22) as u32)
    }

    /// Truncates toward zero to an `i32`: the seed's `f32_int`. NaN and values outside the `i32`
    /// range give `i32::MIN`, x86's "integer indefinite" (what `cvttss2si` returns).
    pub fn to_i32_trunc(self) -> i32 {
        self.to_i32(IntRounding::TowardZero)
    }

    /// Truncates toward zero to an `i64`. NaN and out-of-range values give `i64::MIN`.
    pub fn to_i64_trunc(self) -> i64 {
        self.to_i64(IntRounding::TowardZero)
    }

    /// The integer `k` in `0..bound` whose binary32 value has these very bits (so not `-0`),
    /// if there is one; `bound` at most `2^24`, so every such `k` is a binary32 value. Read
    /// from the bits alone: what `F32::from_i64(x.to_i64_trunc()) == x` (bits) with the range
    /// check decides, without the conversions (a token stream of a million ids is checked at
    /// every `fit`).
    pub fn to_index(self, bound: u32) -> Option<u32> {
        debug_assert!(bound <= 1 << 24);
        if self.0 == 0 {
            return (bound > 0).then_some(0);
        }
        let exp = self.biased_exp();
        // Negative (-0 too), below one (a fraction), or at least 2^24 (beyond `bound`; inf and
        // NaN too).
        if self.0 & SIGN_BIT != 0 || !(127..127 + 24).contains(&exp) {
            return None;
        }
        let sig = self.frac() | HIDDEN_BIT;
        let shift = (150 - exp) as u32; // 0..=23: the bits below the units
        let k = sig >> shift;
        (sig & ((1 << shift) - 1) == 0 && k < bound).then_some(k)
    }

    /// Converts to `i32` with the given rounding. NaN and out-of-range values give `i32::MIN`.
    pub fn to_i32(self, rounding: IntRounding) -> i32 {
        self.to_int(32, rounding) as i32
    }

    /// Converts to `i64` with the given rounding. NaN and out-of-range values give `i64::MIN`.
    pub fn to_i64(self, rounding: IntRounding) -> i64 {
        self.to_int(64, rounding)
    }

    /// Converts to a signed integer of `width` bits (32 or 64), returned sign-extended in an i64.
    fn to_int(self, width: u32, rounding: IntRounding) -> i64 {
        let indefinite = i64::MIN >> (64 - width);
        if self.is_nan() {
            return indefinite;
        }
        let exp = self.biased_exp();
        let sig = if exp == 0 {
            self.frac()
        } else {
            self.frac() | HIDDEN_BIT
        };
        // value = sig * 2^(exp - 150); the unbiased exponent of the leading bit is exp - 127.
        if exp - 127 >= width as i32 - 1 {
            // |value| >= 2^(width-1): only -2^(width-1) fits, and that is the indefinite pattern.
            return indefinite;
        }
        let magnitude = if exp >= 150 {
            // An integer already (at most 2^62 here): exact.
            u64::from(sig) << (exp - 150)
        } else {
            let shift = (150 - exp) as u32;
            if shift > 32 {
                0 // |value| < 2^-8: the fraction is below one half, so every mode gives 0.
            } else {
                let integer = u64::from(sig) >> shift;
                let fraction = u64::from(sig) & ((1 << shift) - 1);
                let half = 1 << (shift - 1);
                let round_up = match rounding {
                    IntRounding::TowardZero => false,
                    IntRounding::NearestEven => {
                        fraction > half || (fraction == half && integer & 1 == 1)
                    }
                };
                integer + u64::from(round_up)
            }
        };
        // magnitude < 2^(width-1) here, so the negation and the cast cannot overflow.
        if self.0 & SIGN_BIT != 0 {
            -(magnitude as i64)
        } else {
            magnitude as i64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `to_index` against its definition by conversions, on a spread of bit patterns and on
    /// every integer near the bounds tried, with its neighbours.
    #[test]
    fn to_index_is_the_conversions_check() {
        let by_conversions = |x: F32, bound: u32| {
            let k = x.to_i64_trunc();
            (F32::from_i64(k) == x && (0..i64::from(bound)).contains(&k)).then_some(k as u32)
        };
        let mut inputs: Vec<F32> = (0..=u32::MAX).step_by(4093).map(F32::from_bits).collect();
        for k in (0..70_000).chain((1 << 24) - 70_000..(1 << 24) + 10) {
            let x = F32::from_i64(k);
            let bits = x.to_bits();
            inputs.extend([
                x,
                F32::from_bits(bits + 1),
                F32::from_bits(bits.wrapping_sub(1)),
            ]);
            inputs.push(F32::from_bits(bits | SIGN_BIT));
        }
        inputs.extend([
            F32::NEG_ZERO,
            F32::INFINITY,
            F32::DEFAULT_NAN,
            F32::from_bits(1),
        ]);
        for bound in [0, 1, 65, 70_000, (1 << 24) - 1, 1 << 24] {
            for &x in &inputs {
                assert_eq!(
                    x.to_index(bound),
                    by_conversions(x, bound),
                    "{:#010x} in 0..{bound}",
                    x.to_bits()
                );
            }
        }
    }

    #[test]
    fn from_int_rounds_to_nearest_even() {
        assert_eq!(F32::from_i32(1).to_bits(), 0x3F80_0000);
        assert_eq!(F32::from_i32(-6).to_bits(), 0xC0C0_0000);
        // 2^24 + 1 is a tie between 2^24 and 2^24 + 2: even is 2^24.
        assert_eq!(F32::from_i32(16_777_217).to_bits(), 0x4B80_0000);
        assert_eq!(F32::from_i32(16_777_219).to_bits(), 0x4B80_0002);
        assert_eq!(F32::from_i32(i32::MIN).to_bits(), 0xCF00_0000);
        assert_eq!(F32::from_i64(i64::MIN).to_bits(), 0xDF00_0000);
        assert_eq!(F32::from_i64(i64::MAX).to_bits(), 0x5F00_0000);
    }

    #[test]
    fn from_f64_bits_rounds_to_nearest_even() {
        let f = |x: u64| F32::from_f64_bits(x).to_bits();
        assert_eq!(f(0x3FF0_0000_0000_0000), 0x3F80_0000); // 1.0
        assert_eq!(f(0x3F84_7AE1_47AE_147B), 0x3C23_D70A); // 0.01
        assert_eq!(f(0x3E45_798E_E230_8C3A), 0x322B_CC77); // 1e-8
        assert_eq!(f(0x36A0_0000_0000_0000), 0x0000_0001); // 2^-149
        assert_eq!(f(0x3690_0000_0000_0000), 0x0000_0000); // 2^-150: tie, to even 0
        assert_eq!(f(0x47EF_FFFF_F000_0000), 0x7F80_0000); // rounds past f32::MAX
        assert_eq!(f(0xFFF8_0000_0000_0001), 0xFFC0_0000); // NaN payload's low bits dropped
        assert_eq!(f(0x8000_0000_0000_0000), 0x8000_0000); // -0
    }

    #[test]
    fn truncation() {
        assert_eq!(F32::from_bits(0x3FF0_0000).to_i32_trunc(), 1); // 1.875
        assert_eq!(F32::from_bits(0xBFF0_0000).to_i32_trunc(), -1);
        assert_eq!(F32::from_bits(0x0000_0001).to_i32_trunc(), 0);
        assert_eq!(F32::from_bits(0xCF00_0000).to_i32_trunc(), i32::MIN); // -2^31 fits
        assert_eq!(F32::from_bits(0x4F00_0000).to_i32_trunc(), i32::MIN); // 2^31 does not
        assert_eq!(F32::DEFAULT_NAN.to_i64_trunc(), i64::MIN);
        assert_eq!(
            F32::from_bits(0x5EFF_FFFF).to_i64_trunc(),
            0x7FFF_FF80_0000_0000
        );
    }

    #[test]
    fn nearest_even() {
        let r = IntRounding::NearestEven;
        assert_eq!(F32::from_bits(0x3F00_0000).to_i32(r), 0); // 0.5
        assert_eq!(F32::from_bits(0x3FC0_0000).to_i32(r), 2); // 1.5
        assert_eq!(F32::from_bits(0x4020_0000).to_i32(r), 2); // 2.5
        assert_eq!(F32::from_bits(0xBF40_0000).to_i32(r), -1); // -0.75
    }
}
