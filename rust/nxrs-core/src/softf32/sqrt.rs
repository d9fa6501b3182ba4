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
        let (root, remainder) = root_rem(u64::from(x.sig) << scale);
        // A nonzero remainder means the root was not exact: the discarded fraction is sticky.
        let sticky = (remainder != 0) as u64;
        let exp = (x.exp - 150 - scale).div_euclid(2) + 157;
        round_pack(false, exp, (root | sticky) as u32)
    }
}

/// First guesses of `1/sqrt(u)` for `u` in `[1/4, 1)`, as Q15 fixed point (`y = Y * 2^-15`).
/// Entry `i` is for the interval `[k, k + 1) * 2^-9` with `k = i + 128` (the top nine bits of
/// `u`), and holds the value at its midpoint, `2^15 / sqrt((2k + 1) * 2^-10)`, rounded down. Over
/// the interval its relative error is below `1/(4k) <= 2^-9` (plus `2^-15` for rounding down).
const RSQRT_GUESS: [u16; 384] = {
    let mut table = [0u16; 384];
    let mut i = 0;
    while i < 384 {
        let k = (i + 128) as u64;
        table[i] = digit_by_digit_isqrt((1 << 40) / (2 * k + 1)) as u16;
        i += 1;
    }
    table
};

/// `floor(sqrt(n))` or one less, for `n` in `[2^60, 2^62)` with its 30 low bits clear, with
/// multiplications only (a test checks the bound for every `n` that `sqrt` can pass).
///
/// With `u = n * 2^-62` in `[1/4, 1)`, held as `a = n >> 30` (exact: the callers' `n` has its 30
/// low bits clear) so that `u = a * 2^-32`:
/// 1. a table gives `y0 ~ 1/sqrt(u)`, relative error `e0` with `|e0| <= 2^-9`;
/// 2. one Newton step for the reciprocal square root, `y1 = y0 * (3 - u * y0^2) / 2`, has
///    relative error `-(3/2) e0^2 - (1/2) e0^3`, so about `-2^-17.4`, never positive;
/// 3. `s1 = u * y1 ~ sqrt(u)` has the same error, and the Newton step for the square root
///    itself, `s2 = s1 + y1 * (u - s1^2) / 2`, brings it to `-(3/2) e1^2`, about `-2^-34`;
/// 4. the root `sqrt(n) = sqrt(u) * 2^31` is then known to within one unit below (every rounding
///    above is downward too).
///
/// Every fixed-point value below stays under 2^64 (noted where it is close).
fn root_guess(n: u64) -> u64 {
    debug_assert!((1 << 60..1 << 62).contains(&n) && n & ((1 << 30) - 1) == 0);
    let a = n >> 30; // u in Q32, in [2^30, 2^32)
    let y0 = u64::from(RSQRT_GUESS[(a >> 23) as usize - 128]); // Q15, below 2^16

    // t = u * y0^2 in Q32 (a * y0^2 < 2^32 * 2^32), close to 1; rounded up, so that y1 below is
    // rounded down.
    let t = (a * (y0 * y0)).div_ceil(1 << 30);
    // y1 in Q31: Q15 * Q32 = Q47 (below 2^50), down 16 bits, halved. y1 <= 1/sqrt(u) <= 2.
    let y1 = (y0 * ((3 << 32) - t)) >> 17;
    // s1 = u * y1 in Q32: Q32 * Q31 = Q63 (a < 2^32 and y1 <= 2^32, so below 2^64), down 31.
    let s1 = (a * y1) >> 31;
    // u - s1^2 in Q64, never negative because s1 <= sqrt(u).
    let residual = (a << 32) - s1 * s1;
    // s2 = s1 + y1 * residual / 2, in Q32: Q31 * Q64 = Q95, down 63.
    let correction = (u128::from(y1) * u128::from(residual)) >> 64;
    let s2 = s1 + correction as u64;
    // sqrt(n) = sqrt(u) * 2^31.
    s2 >> 1
}

/// `(floor(sqrt(n)), n - floor(sqrt(n))^2)` for `n` in `[2^60, 2^62)` with its 30 low bits clear:
/// [`root_guess`] is the root or one below it, and the exact remainder `n - r^2` tells which.
/// (Without a branch: which one it is varies from input to input, so a branch would be
/// mispredicted often.)
fn root_rem(n: u64) -> (u64, u64) {
    let guess = root_guess(n);
    // The guess is not above the root, so this does not wrap; both terms are below 2^62.
    let remainder = n - guess * guess;
    // (guess + 1)^2 <= n exactly when the remainder exceeds 2 * guess.
    let step = u64::from(remainder > 2 * guess);
    let root = guess + step;
    let remainder = remainder - step * (2 * guess + 1);
    debug_assert!(remainder <= 2 * root, "root_guess was more than one below");
    (root, remainder)
}

/// `floor(sqrt(n))` by the digit-by-digit method, one root bit per step: slow, and plain enough to
/// check by eye. It builds [`RSQRT_GUESS`] at compile time and is the reference in the tests.
const fn digit_by_digit_isqrt(n: u64) -> u64 {
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
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(bits: u32) -> F32 {
        F32::from_bits(bits)
    }

    #[test]
    fn digit_by_digit_small_values() {
        for n in 0..10_000u64 {
            let r = digit_by_digit_isqrt(n);
            assert!(r * r <= n && (r + 1) * (r + 1) > n, "n={n}");
        }
        assert_eq!(digit_by_digit_isqrt(u64::MAX), u64::from(u32::MAX));
    }

    /// Every radicand `sqrt` can pass: each 24-bit significand, shifted by 37 and by 38.
    #[test]
    fn root_rem_exact_for_every_significand() {
        for sig in 1u64 << 23..1 << 24 {
            for scale in [37, 38] {
                let n = sig << scale;
                let root = digit_by_digit_isqrt(n);
                let guess = root_guess(n);
                assert!(
                    guess == root || guess + 1 == root,
                    "n={n:#x}: {guess} vs {root}"
                );
                assert_eq!(root_rem(n), (root, n - root * root), "n={n:#x}");
            }
        }
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
