//! Correctly rounded square root.

use super::{round_pack, Unpacked, F32, QUIET_BIT};

impl F32 {
    /// The square root, correctly rounded. `sqrt(-0) = -0`; a negative nonzero operand gives
    /// [`F32::DEFAULT_NAN`]; a NaN operand comes back quieted.
    pub fn sqrt(self) -> F32 {
        if self.is_nan() {
            return F32(self.0 | QUIET_BIT);
        }
        if self.is_zero() {
            return self;
        }
        if self.is_sign_negative() {
            return F32::DEFAULT_NAN;
        }
        if self.is_infinite() {
            return self;
        }

        // value = sig * 2^(exp - 150). Scale the significand up by 37 or 38 bits so that the
        // remaining power of two is even and the radicand lies in [2^60, 2^62): its integer square
        // root then has its leading one at bit 30, as round_pack wants.
        let x = Unpacked::normalized(self);
        let scale = if (x.exp - 150 - 37) % 2 == 0 { 37 } else { 38 };
        let (root, remainder) = isqrt_rem(u64::from(x.sig) << scale);
        // A nonzero remainder means the root was not exact: the discarded fraction is sticky.
        let sticky = (remainder != 0) as u64;
        let exp = (x.exp - 150 - scale).div_euclid(2) + 157;
        round_pack(false, exp, (root | sticky) as u32)
    }
}

/// `(floor(sqrt(n)), n - floor(sqrt(n))^2)` by the digit-by-digit method, one root bit per step.
/// Written here rather than taken from `u64::isqrt` so that the integer-only promise does not
/// depend on how the standard library chooses to compute it.
fn isqrt_rem(n: u64) -> (u64, u64) {
    let mut remainder = n;
    let mut root = 0u64;
    let mut bit = 1u64 << 62; // the largest power of four a u64 holds
    while bit > n {
        bit >>= 2;
    }
    while bit != 0 {
        if remainder >= root + bit {
            remainder -= root + bit;
            root = (root >> 1) + bit;
        } else {
            root >>= 1;
        }
        bit >>= 2;
    }
    (root, remainder)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(bits: u32) -> F32 {
        F32::from_bits(bits)
    }

    #[test]
    fn isqrt_rem_small_values() {
        for n in 0..10_000u64 {
            let (r, rem) = isqrt_rem(n);
            assert!(r * r <= n && (r + 1) * (r + 1) > n, "n={n}");
            assert_eq!(rem, n - r * r);
        }
        assert_eq!(
            isqrt_rem(u64::MAX),
            (u64::from(u32::MAX), 2 * u64::from(u32::MAX))
        );
    }

    #[test]
    fn perfect_squares() {
        assert_eq!(f(0x4080_0000).sqrt().to_bits(), 0x4000_0000); // sqrt 4 = 2
        assert_eq!(f(0x4110_0000).sqrt().to_bits(), 0x4040_0000); // sqrt 9 = 3
        assert_eq!(F32::ONE.sqrt(), F32::ONE);
    }

    #[test]
    fn irrational_and_subnormal() {
        assert_eq!(f(0x4000_0000).sqrt().to_bits(), 0x3FB5_04F3); // sqrt 2
        assert_eq!(f(0x0000_0001).sqrt().to_bits(), 0x1A35_04F3); // sqrt(2^-149) = 2^-74.5
    }

    #[test]
    fn specials() {
        assert_eq!(F32::NEG_ZERO.sqrt(), F32::NEG_ZERO);
        assert_eq!(f(0xBF80_0000).sqrt(), F32::DEFAULT_NAN);
        assert_eq!(F32::INFINITY.sqrt(), F32::INFINITY);
        assert_eq!(f(0x7F80_0001).sqrt().to_bits(), 0x7FC0_0001);
    }
}
