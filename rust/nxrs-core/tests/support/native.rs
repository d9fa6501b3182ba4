//! The host CPU's own binary32 arithmetic: the reference softf32 is checked and benchmarked
//! against (`tests/differential.rs`, `tests/exhaustive.rs`, `benches/softf32.rs`).
//!
//! On x86_64 each operation is one SSE instruction in inline assembly. That fixes the operand
//! order: `addss a, b` returns `a` (quieted) when both operands are NaN, the convention softf32
//! follows, whereas the compiler may swap the operands of a plain `a + b` (addition and
//! multiplication are commutative to it), which changes which NaN comes back. The assembly is also
//! opaque to the optimiser, so it can neither constant-fold nor vectorise these operations. Rust
//! leaves MXCSR at its power-on value: round to nearest even, no flush-to-zero, no
//! denormals-are-zero.
//!
//! On other targets these are plain Rust operations, whose NaN bit patterns Rust does not specify:
//! [`NAN_BITS_EXACT`] is then false and callers compare NaN results as a class.
#![allow(dead_code)] // each including file uses a different part

/// Whether NaN results of these functions have the x86 SSE bit patterns softf32 produces.
pub const NAN_BITS_EXACT: bool = cfg!(target_arch = "x86_64");

#[cfg(target_arch = "x86_64")]
macro_rules! sse_binary {
    ($name:ident, $insn:literal) => {
        #[inline]
        pub fn $name(a: u32, b: u32) -> u32 {
            let mut x = f32::from_bits(a);
            // SAFETY: one scalar SSE instruction on registers; SSE is part of the x86_64 baseline.
            unsafe {
                core::arch::asm!(
                    concat!($insn, " {x}, {y}"),
                    x = inout(xmm_reg) x,
                    y = in(xmm_reg) f32::from_bits(b),
                    options(pure, nomem, nostack),
                );
            }
            x.to_bits()
        }
    };
}

#[cfg(target_arch = "x86_64")]
sse_binary!(add, "addss");
#[cfg(target_arch = "x86_64")]
sse_binary!(sub, "subss");
#[cfg(target_arch = "x86_64")]
sse_binary!(mul, "mulss");
#[cfg(target_arch = "x86_64")]
sse_binary!(div, "divss");

/// `sqrtss`: a NaN operand comes back quieted, a negative one gives the default NaN `0xFFC00000`.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn sqrt(a: u32) -> u32 {
    let mut x = f32::from_bits(a);
    // SAFETY: one scalar SSE instruction on a register; SSE is part of the x86_64 baseline.
    unsafe {
        core::arch::asm!(
            "sqrtss {x}, {x}",
            x = inout(xmm_reg) x,
            options(pure, nomem, nostack),
        );
    }
    x.to_bits()
}

/// `cvttss2si` (`truncate`) or `cvtss2si` (MXCSR's rounding: nearest even). NaN and
/// out-of-range values give `i32::MIN`, x86's "integer indefinite".
#[cfg(target_arch = "x86_64")]
#[inline]
fn cvt_f32_to_i32(x: f32, truncate: bool) -> i32 {
    let out: i32;
    // SAFETY: one scalar SSE instruction on registers; SSE is part of the x86_64 baseline.
    unsafe {
        if truncate {
            core::arch::asm!("cvttss2si {out:e}, {x}", out = lateout(reg) out, x = in(xmm_reg) x,
                options(pure, nomem, nostack));
        } else {
            core::arch::asm!("cvtss2si {out:e}, {x}", out = lateout(reg) out, x = in(xmm_reg) x,
                options(pure, nomem, nostack));
        }
    }
    out
}

/// `cvtsi2ss`: rounds to nearest even (MXCSR).
#[cfg(target_arch = "x86_64")]
#[inline]
fn cvt_i32_to_f32(i: i32) -> f32 {
    let out: f32;
    // SAFETY: one scalar SSE instruction on registers; SSE is part of the x86_64 baseline.
    unsafe {
        // cvtsi2ss keeps the destination's upper lanes: clearing it first breaks the dependency
        // on whatever the register held before.
        core::arch::asm!("xorps {out}, {out}", "cvtsi2ss {out}, {i:e}", out = out(xmm_reg) out,
            i = in(reg) i, options(pure, nomem, nostack));
    }
    out
}

/// x86's truncating `f32 -> i32` on bits (elsewhere the `as`-derived equivalent).
pub fn to_i32_trunc(a: u32) -> i32 {
    #[cfg(target_arch = "x86_64")]
    return cvt_f32_to_i32(f32::from_bits(a), true);
    #[cfg(not(target_arch = "x86_64"))]
    return to_i32_via_as(a, |x| x);
}

/// x86's nearest-even `f32 -> i32` on bits (elsewhere the `as`-derived equivalent).
pub fn to_i32_nearest(a: u32) -> i32 {
    #[cfg(target_arch = "x86_64")]
    return cvt_f32_to_i32(f32::from_bits(a), false);
    #[cfg(not(target_arch = "x86_64"))]
    return to_i32_via_as(a, f32::round_ties_even);
}

/// `i32 -> f32` as bits, one instruction on x86 (elsewhere `as`).
pub fn from_i32(i: i32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    return cvt_i32_to_f32(i).to_bits();
    #[cfg(not(target_arch = "x86_64"))]
    return (std::hint::black_box(i) as f32).to_bits();
}

#[cfg(not(target_arch = "x86_64"))]
mod portable {
    use std::hint::black_box;

    pub fn add(a: u32, b: u32) -> u32 {
        (black_box(f32::from_bits(a)) + black_box(f32::from_bits(b))).to_bits()
    }
    pub fn sub(a: u32, b: u32) -> u32 {
        (black_box(f32::from_bits(a)) - black_box(f32::from_bits(b))).to_bits()
    }
    pub fn mul(a: u32, b: u32) -> u32 {
        (black_box(f32::from_bits(a)) * black_box(f32::from_bits(b))).to_bits()
    }
    pub fn div(a: u32, b: u32) -> u32 {
        (black_box(f32::from_bits(a)) / black_box(f32::from_bits(b))).to_bits()
    }
    pub fn sqrt(a: u32) -> u32 {
        black_box(f32::from_bits(a)).sqrt().to_bits()
    }
}
#[cfg(not(target_arch = "x86_64"))]
pub use portable::*;

/// Whether softf32's result `actual` counts as equal to the native `expected`: bit for bit, except
/// that NaNs only need to both be NaN where [`NAN_BITS_EXACT`] is false.
pub fn same_result(expected: u32, actual: u32) -> bool {
    let is_nan = |bits: u32| f32::from_bits(bits).is_nan();
    expected == actual || (!NAN_BITS_EXACT && is_nan(expected) && is_nan(actual))
}

/// `i32` conversion as softf32 (and x86 `cvttss2si`/`cvtss2si`) defines it, derived from Rust's
/// saturating `as`: NaN and values outside the `i32` range give `i32::MIN`. `round` is applied
/// first (identity for truncation, `round_ties_even` for nearest).
pub fn to_i32_via_as(a: u32, round: fn(f32) -> f32) -> i32 {
    let x = round(f32::from_bits(a));
    // 2^31 is exact in f32; every f32 of that magnitude is an integer, so this is the range test.
    if x.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// The `i64` counterpart of [`to_i32_via_as`].
pub fn to_i64_via_as(a: u32, round: fn(f32) -> f32) -> i64 {
    let x = round(f32::from_bits(a));
    if x.is_nan() || !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&x) {
        i64::MIN
    } else {
        x as i64
    }
}
