//! `softf32`: IEEE 754 binary32 arithmetic done with integer operations only.
//!
//! A value is an [`F32`], a wrapper over the `u32` bit pattern. Every operation rounds to nearest,
//! ties to even, keeps subnormals (no flush to zero), overflows to infinity, and follows the x86 SSE
//! conventions for NaN results (see [`F32::DEFAULT_NAN`]), so results match what an x86_64 CPU
//! computes with its default control word, on every CPU and under every compiler flag.
//!
//! The layout follows Berkeley SoftFloat 3: each operation unpacks its operands, deals with the
//! special cases, computes an exact-enough significand with guard bits, and hands it to the one
//! shared `round_pack` step.
//!
//! # Internal significand convention
//! Between the operation and `round_pack`, a finite result is `sig * 2^(exp - 127 - 30)`: the
//! significand carries the hidden bit at bit 30 and seven guard bits (6..0) below the 23 fraction
//! bits; bit 0 is "sticky" (ORed with everything shifted out). A subnormal result has `exp == 1`
//! and bit 30 clear, so `((exp - 1) << 23) + (sig >> 7)` packs normals and subnormals alike.

mod add;
mod compare;
mod convert;
mod cos_pi;
mod div;
mod exp;
mod fixed;
mod log;
mod mul;
pub(crate) mod normal;
mod sqrt;

pub use convert::IntRounding;

/// An IEEE 754 binary32 value, stored as its bit pattern.
///
/// `==` on `F32` compares bit patterns (so `-0 != +0` and a NaN equals itself); the IEEE
/// comparisons are [`F32::ieee_eq`], [`F32::ieee_lt`] and [`F32::ieee_le`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F32(u32);

// SAFETY: F32 is `#[repr(transparent)]` over u32: no padding, every bit pattern is a valid
// value, and all-zero bits are `F32::ZERO`. (Checkpoints view cells as bytes and allocate
// zeroed tensors through these.)
unsafe impl bytemuck::Zeroable for F32 {}
// SAFETY: as above; F32 is also `Copy` and `'static`.
unsafe impl bytemuck::Pod for F32 {}

/// The value for people and messages: Rust's shortest form that reads back as the same binary32
/// (`0.01`, `1.0`, `1e-45`, `inf`, `NaN`), as a user writes a setting. (`{:?}` shows the bits.)
impl core::fmt::Display for F32 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", f32::from_bits(self.0))
    }
}

const SIGN_BIT: u32 = 0x8000_0000;
const EXP_MASK: u32 = 0x7F80_0000;
const FRAC_MASK: u32 = 0x007F_FFFF;
const HIDDEN_BIT: u32 = 0x0080_0000;
const QUIET_BIT: u32 = 0x0040_0000;
/// Largest biased exponent of a finite value.
const MAX_FINITE_EXP: i32 = 0xFE;

impl F32 {
    pub const ZERO: F32 = F32(0);
    pub const NEG_ZERO: F32 = F32(SIGN_BIT);
    pub const ONE: F32 = F32(0x3F80_0000);
    pub const INFINITY: F32 = F32(EXP_MASK);
    pub const NEG_INFINITY: F32 = F32(SIGN_BIT | EXP_MASK);
    /// The smallest positive normal value, `2^-126` (as `f32::MIN_POSITIVE`).
    pub const MIN_POSITIVE: F32 = F32(HIDDEN_BIT);
    /// The largest finite value (as `f32::MAX`).
    pub const MAX: F32 = F32(EXP_MASK - 1);
    /// The NaN an invalid operation returns (`0 * inf`, `inf - inf`, `sqrt(-1)`, ...): x86 SSE's
    /// "real indefinite", negative sign and quiet bit set. Berkeley SoftFloat's 8086-SSE build
    /// gives the same; other conventions (ARM, RISC-V, compiler-builtins) give `0x7FC00000`.
    pub const DEFAULT_NAN: F32 = F32(0xFFC0_0000);

    pub const fn from_bits(bits: u32) -> F32 {
        F32(bits)
    }

    pub const fn to_bits(self) -> u32 {
        self.0
    }

    pub const fn is_nan(self) -> bool {
        self.0 & !SIGN_BIT > EXP_MASK
    }

    pub const fn is_infinite(self) -> bool {
        self.0 & !SIGN_BIT == EXP_MASK
    }

    /// Neither NaN nor infinite.
    pub const fn is_finite(self) -> bool {
        self.0 & EXP_MASK != EXP_MASK
    }

    pub const fn is_zero(self) -> bool {
        self.0 & !SIGN_BIT == 0
    }

    pub const fn is_sign_negative(self) -> bool {
        self.0 & SIGN_BIT != 0
    }

    /// Clears the sign bit (of NaNs too), as IEEE `abs` does.
    pub const fn abs(self) -> F32 {
        F32(self.0 & !SIGN_BIT)
    }

    const fn biased_exp(self) -> i32 {
        ((self.0 & EXP_MASK) >> 23) as i32
    }

    const fn frac(self) -> u32 {
        self.0 & FRAC_MASK
    }
}

/// `-x` flips the sign bit (of NaNs too), as IEEE `negate` does.
impl core::ops::Neg for F32 {
    type Output = F32;
    fn neg(self) -> F32 {
        F32(self.0 ^ SIGN_BIT)
    }
}

/// A finite, nonzero operand's magnitude split into biased exponent and a 24-bit significand with the
/// hidden bit at bit 23: `value = sig * 2^(exp - 150)`. Subnormals are normalised, which gives
/// them an exponent below 1.
struct Unpacked {
    exp: i32,
    sig: u32,
}

impl Unpacked {
    /// Unpacks a finite nonzero value (the callers have handled zeros, infinities and NaNs).
    fn normalized(x: F32) -> Unpacked {
        let (exp, sig) = match x.biased_exp() {
            0 => {
                // Subnormal: shift the leading one up to the hidden-bit position.
                let shift = x.frac().leading_zeros() as i32 - 8;
                (1 - shift, x.frac() << shift)
            }
            exp => (exp, x.frac() | HIDDEN_BIT),
        };
        Unpacked { exp, sig }
    }
}

/// Shifts right by `dist`, ORing every bit shifted out into bit 0 ("jamming") so that rounding
/// still sees that the value was inexact.
const fn shift_right_jam32(sig: u32, dist: u32) -> u32 {
    if dist == 0 {
        sig
    } else if dist < 32 {
        (sig >> dist) | ((sig << (32 - dist)) != 0) as u32
    } else {
        (sig != 0) as u32
    }
}

/// [`shift_right_jam32`] for 64-bit intermediate results (products, quotients, integers).
const fn shift_right_jam64(sig: u64, dist: u32) -> u64 {
    if dist == 0 {
        sig
    } else if dist < 64 {
        (sig >> dist) | ((sig << (64 - dist)) != 0) as u64
    } else {
        (sig != 0) as u64
    }
}

/// Rounds a result to nearest, ties to even, and packs it; the one exit of every operation.
///
/// `sig` and `exp` follow the module's internal convention (hidden bit at bit 30, seven guard
/// bits). An `exp` below 1 is a result below the normal range: it is shifted into subnormal
/// position first (rounding once, after the shift, as IEEE requires). A result that rounds past
/// the largest finite value becomes infinity.
fn round_pack(negative: bool, exp: i32, sig: u32) -> F32 {
    let sign = if negative { SIGN_BIT } else { 0 };
    let (exp, sig) = if exp < 1 {
        (1, shift_right_jam32(sig, (1 - exp) as u32))
    } else {
        (exp, sig)
    };
    if exp > MAX_FINITE_EXP + 1 {
        return F32(sign | EXP_MASK);
    }
    round_pack_in_range(sign, exp, sig)
}

/// [`round_pack`] for a result whose exponent is already in `1..=MAX_FINITE_EXP + 1` (no shift
/// into subnormal position, no certain overflow), with the sign given as the sign bit: the
/// rounding step alone, for the operations (addition) that always produce such an exponent.
fn round_pack_in_range(sign: u32, exp: i32, sig: u32) -> F32 {
    debug_assert!((1..=MAX_FINITE_EXP + 1).contains(&exp) && sign & !SIGN_BIT == 0);
    let guard = sig & 0x7F;
    let mut rounded = (sig + 0x40) >> 7;
    if guard == 0x40 {
        // Exactly half way: round to the even neighbour.
        rounded &= !1;
    }
    // Adding the significand (hidden bit included) to the exponent field lets a rounding carry
    // (0xFFFFFF + 1) and a subnormal that rounds up to the smallest normal move the exponent.
    let magnitude = (((exp - 1) as u32) << 23) + rounded;
    if magnitude >= EXP_MASK {
        return F32(sign | EXP_MASK);
    }
    F32(sign | magnitude)
}

/// The NaN result of a binary operation with at least one NaN operand: the first NaN operand,
/// quieted (x86 SSE and SoftFloat 8086-SSE do the same).
const fn propagate_nan(a: F32, b: F32) -> F32 {
    let nan = if a.is_nan() { a } else { b };
    F32(nan.0 | QUIET_BIT)
}

impl F32 {
    /// The NaN that `+ - * /` return for operands `a`, `b` when their result is a NaN, and
    /// `sqrt` for `a` when called as `nan_result(a, a)`: the first NaN operand, quieted, or the
    /// default NaN for an invalid operation. Selects only, no branches, so a vectorised backend
    /// can apply it lane by lane.
    #[inline(always)]
    pub const fn nan_result(a: F32, b: F32) -> F32 {
        let nan = if a.is_nan() {
            a.0
        } else if b.is_nan() {
            b.0
        } else {
            F32::DEFAULT_NAN.0
        };
        F32(nan | QUIET_BIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_pack_carries_into_the_exponent() {
        // 0x1.FFFFFF8p0 (all ones then a half) rounds up to 2.0.
        assert_eq!(round_pack(false, 127, 0x7FFF_FFC0).to_bits(), 0x4000_0000);
    }

    #[test]
    fn round_pack_ties_to_even() {
        // 1 + 2^-24 is exactly half an ulp above 1: stays at the even neighbour 1.0.
        assert_eq!(round_pack(false, 127, 0x4000_0040).to_bits(), 0x3F80_0000);
        // 1 + 3*2^-24 is half an ulp above an odd significand: rounds up.
        assert_eq!(round_pack(false, 127, 0x4000_00C0).to_bits(), 0x3F80_0002);
    }

    #[test]
    fn round_pack_subnormal_rounds_up_to_min_normal() {
        // 0x7FFFFF.8 units of 2^-149 is half way to 2^-126: ties to even gives the min normal.
        assert_eq!(round_pack(false, 1, 0x3FFF_FFC0).to_bits(), 0x0080_0000);
    }

    #[test]
    fn round_pack_overflows_to_infinity() {
        assert_eq!(round_pack(true, 0xFE, 0x7FFF_FFFF), F32::NEG_INFINITY);
        assert_eq!(round_pack(false, 400, 0x4000_0000), F32::INFINITY);
    }

    #[test]
    fn is_finite_matches_the_hardware_classification() {
        let cases = [
            0,
            0x8000_0000,
            1,
            0x007F_FFFF,
            0x0080_0000,
            0x3F80_0000,
            0x7F7F_FFFF,
            0xFF7F_FFFF,
            0x7F80_0000,
            0xFF80_0000,
            0x7F80_0001,
            0x7FC0_0000,
            0xFFC0_0000,
            0xFFFF_FFFF,
        ];
        for bits in cases {
            assert_eq!(
                F32::from_bits(bits).is_finite(),
                f32::from_bits(bits).is_finite(),
                "{bits:#010x}"
            );
        }
    }

    #[test]
    fn shift_right_jam_keeps_sticky() {
        assert_eq!(shift_right_jam32(0b1001, 3), 0b1 | 1);
        assert_eq!(shift_right_jam32(0b1000, 3), 0b1);
        assert_eq!(shift_right_jam32(1, 40), 1);
        assert_eq!(shift_right_jam64(0, 70), 0);
    }
}
