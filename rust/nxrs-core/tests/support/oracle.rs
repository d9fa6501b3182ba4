//! The reference for softf32 `exp`, `ln`, `normal_cdf` (`Φ`) and `normal_pdf` (`φ`): a binary64
//! evaluation, rounded to binary32, except where that rounding cannot be trusted.
//!
//! The binary64 value `y` is within a few binary64 ulps of the true value:
//!
//! - `exp`, `ln`: the host's libm, within 1 ulp (glibc documents at most 1 ulp for `exp` and
//!   `log`; the implementations are about 0.52 ulp).
//! - `φ(x) = e^(-x²/2) / √(2π)`: `x²/2` is exact in binary64 (`x` has 24 bits), the host's `exp`
//!   adds 1 ulp, the constant (`FRAC_1_SQRT_2 * FRAC_2_SQRT_PI / 2`, two rounded constants and a
//!   rounded product) and the last product about 2 more.
//! - `Φ(x) = erfc(-x/√2) / 2`: the `libm` crate's `erfc`, FreeBSD's (fdlibm's) `s_erf.c`, whose
//!   rational approximations are good to `2^-57.9` or better, evaluated with a handful of
//!   roundings and, in the tails, two `exp` calls: a few ulps. The argument `-x/√2` is not a
//!   binary64 number, and `erfc` multiplies its relative error by up to `2 (x/√2)^2`, 200 at
//!   `x = -14`; so the product's rounding error (exact by FMA) and the constant's are carried as a
//!   second part `w_lo` of the argument and corrected for to first order,
//!   `erfc(w + w_lo) = erfc(w) - w_lo 2/√π e^(-w²)`, which leaves an error near `2^-100`.
//!
//! If `y` lies more than [`TOLERANCE_ULPS`] binary64 ulps from every binary32 rounding boundary
//! (the midpoint between two neighbouring binary32 values), the true value is on the same side of
//! it, and rounding `y` to binary32 gives the correctly rounded result. Otherwise the input is
//! *deferred*: the oracle says nothing, and the caller decides it in arbitrary precision
//! (`scripts/softf32_functions_mpmath.py`) or from the mpmath-checked hard-case list
//! (`tests/data/function_hard_cases.txt`). 64 ulps is a wide margin over those errors (the
//! largest seen for `Φ` against mpmath is 1.7 ulps, for `φ` 1.5; see the script); it defers only
//! about one input in 2^22.
#![allow(dead_code)] // each including file uses a different part
#![allow(clippy::float_arithmetic)] // the oracle is binary64 arithmetic, on purpose

use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI};

/// How close (in binary64 ulps of the result) to a binary32 rounding boundary a libm result may
/// be before the oracle refuses to decide.
pub const TOLERANCE_ULPS: f64 = 64.0;

/// The correctly rounded binary32 `e^x`, or `None` when `x` must be decided in higher precision.
/// NaN results follow softf32's (and x86's) convention: the NaN operand, quieted.
pub fn exp(x: u32) -> Option<u32> {
    let v = f32::from_bits(x);
    if v.is_nan() {
        return Some(x | 0x0040_0000);
    }
    round_guarded(f64::from(v).exp())
}

/// The correctly rounded binary32 `ln x`, or `None` when `x` must be decided in higher precision.
/// A negative operand (not -0) gives x86's default NaN `0xFFC00000`.
pub fn ln(x: u32) -> Option<u32> {
    let v = f32::from_bits(x);
    if v.is_nan() {
        return Some(x | 0x0040_0000);
    }
    if v < 0.0 {
        return Some(0xFFC0_0000);
    }
    round_guarded(f64::from(v).ln())
}

/// The correctly rounded binary32 `Φ(x)`, or `None` when `x` must be decided in higher precision.
pub fn normal_cdf(x: u32) -> Option<u32> {
    let v = f32::from_bits(x);
    if v.is_nan() {
        return Some(x | 0x0040_0000);
    }
    if v.is_infinite() {
        // Φ(-inf) = 0, Φ(+inf) = 1 (the argument correction below is for finite x).
        return Some(if v > 0.0 { 1f32 } else { 0f32 }.to_bits());
    }
    round_guarded(normal_cdf_f64(f64::from(v)))
}

/// `Φ(x) = erfc(w) / 2` with `w = -x/√2 = w_hi + w_lo`: `w_hi` the rounded product
/// `-x * FRAC_1_SQRT_2`, `w_lo` that product's rounding error (exact, by FMA) plus `x` times the
/// constant's own error (`1/√2 - c = (1/2 - c²) / (1/√2 + c)`, close enough with `2c` below).
/// The first-order correction leaves out `w_lo² |w| 2/√π e^(-w²)`, relatively below `2^-95`.
pub fn normal_cdf_f64(x: f64) -> f64 {
    let c = FRAC_1_SQRT_2;
    let c_error = c.mul_add(-c, 0.5) / (2.0 * c);
    let product = x * c;
    let w_hi = -product;
    let w_lo = -(x.mul_add(c, -product) + x * c_error);
    0.5 * (libm::erfc(w_hi) - w_lo * FRAC_2_SQRT_PI * (-w_hi * w_hi).exp())
}

/// The correctly rounded binary32 `φ(x)`, or `None` when `x` must be decided in higher precision.
pub fn normal_pdf(x: u32) -> Option<u32> {
    let v = f32::from_bits(x);
    if v.is_nan() {
        return Some(x | 0x0040_0000);
    }
    round_guarded(normal_pdf_f64(f64::from(v)))
}

/// `φ(x) = e^(-x²/2) / √(2π)`; `x²/2` is exact for a binary32 `x`.
pub fn normal_pdf_f64(x: f64) -> f64 {
    (-0.5 * x * x).exp() * (0.5 * FRAC_1_SQRT_2 * FRAC_2_SQRT_PI)
}

/// `y` rounded to binary32 (to nearest even), unless `y` is within [`TOLERANCE_ULPS`] of the
/// midpoint between the two binary32 values around it.
pub fn round_guarded(y: f64) -> Option<u32> {
    let rounded = y as f32;
    if !y.is_finite() || y == 0.0 {
        return Some(rounded.to_bits());
    }
    let a = y.abs();
    let f = rounded.abs();
    // The binary32 neighbours lo <= a < hi (2^128 stands for the value past f32::MAX).
    let next = |b: f32| {
        if b == f32::MAX {
            2f64.powi(128)
        } else {
            f64::from(f32::from_bits(b.to_bits() + 1))
        }
    };
    let (lo, hi) = if f.is_infinite() {
        (f64::from(f32::MAX), 2f64.powi(128))
    } else if f64::from(f) <= a {
        (f64::from(f), next(f))
    } else {
        (f64::from(f32::from_bits(f.to_bits() - 1)), f64::from(f))
    };
    let midpoint = lo + (hi - lo) / 2.0; // exact: both are binary32 values
    let ulp = f64::from_bits(a.to_bits() + 1) - a;
    if (a - midpoint).abs() <= TOLERANCE_ULPS * ulp {
        None
    } else {
        Some(rounded.to_bits())
    }
}

/// One line of `tests/data/function_hard_cases.txt`: `<op> <input hex> <expected hex>`.
pub struct HardCase {
    pub op: String,
    pub input: u32,
    pub expected: u32,
}

/// The hard cases: inputs the binary64 oracle defers, with results decided by mpmath.
pub fn hard_cases() -> Vec<HardCase> {
    include_str!("../data/function_hard_cases.txt")
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let hex = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            HardCase {
                op: fields[0].to_string(),
                input: hex(fields[1]),
                expected: hex(fields[2]),
            }
        })
        .collect()
}
