//! softf32 against the host CPU on all 2^32 inputs of its one-operand operations: `sqrt`,
//! `to_i32_trunc`, `to_i32(NearestEven)` and `from_i32`. Each test spreads the inputs over all
//! cores (`std::thread::scope`) and prints its wall time.
//!
//! The references are in `tests/support/native.rs`: on x86_64, `sqrtss` (whose NaN bits softf32
//! must match) and, for the conversions, both Rust's `as` (with NaN and out-of-range inputs mapped
//! to `i32::MIN`, as softf32 and x86 do) and the CPU's `cvttss2si`, `cvtss2si` and `cvtsi2ss`.
#![allow(clippy::float_arithmetic)] // the reference results are computed with native f32

#[path = "support/native.rs"]
mod native;

#[path = "support/all_inputs.rs"]
mod all_inputs;

use all_inputs::{for_all_u32, say};
use nxrs_core::softf32::{IntRounding, F32};
use std::hint::black_box;

/// Checks `ok(x)` for every `u32` `x`, and reports the first few failing inputs through
/// `describe`.
fn exhaustive(name: &str, ok: impl Fn(u32) -> bool + Sync, describe: impl Fn(u32) -> String) {
    let ((count, mut examples), threads, elapsed) = for_all_u32(
        |block| {
            let mut count = 0u64;
            let mut examples = Vec::new();
            for x in block {
                if !ok(x) {
                    count += 1;
                    if examples.len() < 10 {
                        examples.push(x);
                    }
                }
            }
            (count, examples)
        },
        |total: &mut (u64, Vec<u32>), (count, examples)| {
            total.0 += count;
            total.1.extend(examples);
        },
    );
    say(&format!(
        "exhaustive {name}: 2^32 inputs in {:.1} s on {threads} threads, {count} mismatches",
        elapsed.as_secs_f64()
    ));
    examples.sort_unstable();
    examples.truncate(20);
    let listing: Vec<String> = examples.into_iter().map(describe).collect();
    assert!(
        count == 0,
        "{name}: {count} of 2^32 inputs differ, first ones:\n{}",
        listing.join("\n")
    );
}

#[test]
fn sqrt_all_inputs() {
    let soft = |a: u32| F32::from_bits(a).sqrt().to_bits();
    exhaustive(
        "sqrt",
        |a| native::same_result(native::sqrt(a), soft(a)),
        |a| {
            format!(
                "  sqrt({a:08X}): native {:08X}, softf32 {:08X}",
                native::sqrt(a),
                soft(a)
            )
        },
    );
}

/// Checks a float-to-`i32` conversion against two references: Rust's `as` (after `round`) with
/// NaN and out-of-range inputs mapped to `i32::MIN`, and the CPU's own conversion instruction.
fn check_to_i32(name: &str, round: fn(f32) -> f32, native: fn(u32) -> i32, soft: fn(F32) -> i32) {
    let via_as = |a: u32| native::to_i32_via_as(black_box(a), round);
    let actual = |a: u32| soft(F32::from_bits(a));
    exhaustive(
        name,
        |a| via_as(a) == actual(a) && native(a) == actual(a),
        |a| {
            let (e, n, s) = (via_as(a), native(a), actual(a));
            format!("  {name}({a:08X}): `as` gives {e:#X}, the CPU {n:#X}, softf32 {s:#X}")
        },
    );
}

#[test]
fn to_i32_trunc_all_inputs() {
    check_to_i32(
        "to_i32_trunc",
        |x| x,
        native::to_i32_trunc,
        F32::to_i32_trunc,
    );
}

#[test]
fn to_i32_nearest_even_all_inputs() {
    check_to_i32(
        "to_i32(NearestEven)",
        f32::round_ties_even,
        native::to_i32_nearest,
        |x| x.to_i32(IntRounding::NearestEven),
    );
}

#[test]
fn from_i32_all_inputs() {
    let via_as = |i: u32| (black_box(i as i32) as f32).to_bits();
    let actual = |i: u32| F32::from_i32(i as i32).to_bits();
    exhaustive(
        "from_i32",
        |i| via_as(i) == actual(i) && native::from_i32(i as i32) == actual(i),
        |i| {
            let (e, n, s) = (via_as(i), native::from_i32(i as i32), actual(i));
            format!(
                "  from_i32({:#X}): `as` gives {e:08X}, the CPU {n:08X}, softf32 {s:08X}",
                i as i32
            )
        },
    );
}
