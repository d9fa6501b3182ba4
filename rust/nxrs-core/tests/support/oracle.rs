//! The reference for softf32 `exp` and `ln`: the host's binary64 `exp`/`ln` (libm), rounded to
//! binary32, except where that rounding cannot be trusted.
//!
//! libm's binary64 result `y` is within 1 ulp (of binary64) of the true value (glibc documents
//! at most 1 ulp for `exp` and `log`; the implementations are about 0.52 ulp). If `y` lies more
//! than [`TOLERANCE_ULPS`] binary64 ulps from every binary32 rounding boundary (the midpoint
//! between two neighbouring binary32 values), the true value is on the same side of it, and
//! rounding `y` to binary32 gives the correctly rounded result. Otherwise the input is *deferred*:
//! the oracle says nothing, and the caller decides it in arbitrary precision
//! (`scripts/softf32_exp_log_mpmath.py`) or from the mpmath-checked hard-case list
//! (`tests/data/exp_log_hard_cases.txt`). 64 ulps is a wide margin over libm's error; it defers
//! only about one input in 2^22.
#![allow(dead_code)] // each including file uses a different part
#![allow(clippy::float_arithmetic)] // the oracle is binary64 arithmetic, on purpose

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

/// One line of `tests/data/exp_log_hard_cases.txt`: `<op> <input hex> <expected hex>`.
pub struct HardCase {
    pub op: String,
    pub input: u32,
    pub expected: u32,
}

/// The hard cases: inputs the binary64 oracle defers, with results decided by mpmath.
pub fn hard_cases() -> Vec<HardCase> {
    include_str!("../data/exp_log_hard_cases.txt")
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
