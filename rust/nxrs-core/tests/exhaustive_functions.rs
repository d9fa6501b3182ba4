//! softf32 `exp`, `ln`, `normal_cdf` (`Φ`) and `normal_pdf` (`φ`) on all 2^32 inputs against
//! the binary64 oracle (`tests/support/oracle.rs`). Ignored by default (a few minutes per function
//! on two cores); run with
//!
//! ```text
//! cargo test -p nxrs-core --test exhaustive_functions -- --ignored
//! python3 scripts/softf32_functions_mpmath.py target/softf32-deferred-*.txt
//! ```
//!
//! Each test prints the inputs checked, the mismatches and the inputs the oracle deferred (its
//! binary64 result too close to a binary32 rounding boundary). The deferred inputs and softf32's
//! results for them go to `softf32-deferred-<op>.txt` in the target directory (or
//! `$NXRS_DEFERRED_DIR`), which the mpmath script decides at 256 bits.
//!
//! The hardware backend's `exp`, `Φ` and `φ` (binary64 with a rounding test, softf32's where the
//! test fails) are compared with softf32's on every input too: equal bits prove its error bound.
//!
//! The workspace's test profile is optimised but keeps overflow checks, so the run also shows
//! that no fixed-point intermediate overflows on any input.

#[path = "support/oracle.rs"]
mod oracle;

#[path = "support/all_inputs.rs"]
mod all_inputs;

use all_inputs::{for_all_u32, say};
use nxrs_core::arith::Real;
use nxrs_core::backend::{FpEnvGuard, Native};
use nxrs_core::softf32::F32;
use std::ops::RangeInclusive;

#[derive(Default)]
struct Tally {
    checked: u64,
    mismatches: Vec<(u32, u32, u32)>,
    deferred: Vec<(u32, u32)>,
}

/// Compares `soft` with `oracle` on every `u32`.
fn exhaustive(name: &str, soft: fn(F32) -> F32, oracle: fn(u32) -> Option<u32>) {
    let (mut tally, threads, elapsed) = for_all_u32(
        |block| {
            let mut tally = Tally::default();
            for x in block {
                let got = soft(F32::from_bits(x)).to_bits();
                match oracle(x) {
                    Some(want) => {
                        tally.checked += 1;
                        if want != got {
                            tally.mismatches.push((x, got, want));
                        }
                    }
                    None => tally.deferred.push((x, got)),
                }
            }
            tally
        },
        |total: &mut Tally, tally| {
            total.checked += tally.checked;
            total.mismatches.extend(tally.mismatches);
            total.deferred.extend(tally.deferred);
        },
    );
    tally.deferred.sort_unstable();
    tally.mismatches.sort_unstable();

    let dir = std::env::var_os("NXRS_DEFERRED_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target").into());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("softf32-deferred-{name}.txt"));
    let lines: String = tally
        .deferred
        .iter()
        .map(|(x, got)| format!("{name} {x:08x} {got:08x}\n"))
        .collect();
    std::fs::write(&path, lines).unwrap();

    say(&format!(
        "exhaustive {name}: 2^32 inputs in {:.1} s on {threads} threads: {} checked against \
         the binary64 oracle, {} mismatches, {} deferred to mpmath (written to {})",
        elapsed.as_secs_f64(),
        tally.checked,
        tally.mismatches.len(),
        tally.deferred.len(),
        path.display(),
    ));
    let listing: Vec<String> = tally
        .mismatches
        .iter()
        .take(20)
        .map(|(x, got, want)| format!("  {name}({x:08X}): softf32 {got:08X}, oracle {want:08X}"))
        .collect();
    assert!(
        tally.mismatches.is_empty(),
        "{name}: {} inputs differ, first ones:\n{}",
        tally.mismatches.len(),
        listing.join("\n")
    );
}

#[test]
#[ignore = "2^32 inputs: run with --ignored (see the header)"]
fn exp_all_inputs() {
    exhaustive("exp", F32::exp, oracle::exp);
}

#[test]
#[ignore = "2^32 inputs: run with --ignored (see the header)"]
fn ln_all_inputs() {
    exhaustive("ln", F32::ln, oracle::ln);
}

#[test]
#[ignore = "2^32 inputs: run with --ignored (see the header)"]
fn normal_cdf_all_inputs() {
    exhaustive("normal_cdf", F32::normal_cdf, oracle::normal_cdf);
}

#[test]
#[ignore = "2^32 inputs: run with --ignored (see the header)"]
fn normal_pdf_all_inputs() {
    exhaustive("normal_pdf", F32::normal_pdf, oracle::normal_pdf);
}

/// Runs `differing` on every block of `u32` inputs in the hardware backend's environment (the
/// block's inputs whose two results differ), reports how many differ from `reference`, and
/// asserts that none does.
fn none_differ(
    what: &str,
    reference: &str,
    differing: impl Fn(RangeInclusive<u32>) -> Vec<u32> + Sync,
) {
    let (mismatches, threads, elapsed) = for_all_u32(
        |block| {
            let _env = FpEnvGuard::new();
            differing(block)
        },
        |total: &mut Vec<u32>, block| total.extend(block),
    );
    say(&format!(
        "{what}: 2^32 inputs in {:.1} s on {threads} threads, {} differ from {reference}",
        elapsed.as_secs_f64(),
        mismatches.len()
    ));
    assert!(
        mismatches.is_empty(),
        "{what}: {:08X?}",
        &mismatches[..mismatches.len().min(20)]
    );
}

/// The hardware backend's `f` against softf32's `soft` on every `u32`.
fn hardware_agrees(name: &str, hardware: fn(Native) -> Native, soft: fn(F32) -> F32) {
    none_differ(&format!("hardware {name}"), "softf32", |block| {
        block
            .filter(|&x| {
                let got = hardware(Native(f32::from_bits(x))).to_f32();
                got.to_bits() != soft(F32::from_bits(x)).to_bits()
            })
            .collect()
    });
}

#[test]
#[ignore = "2^32 inputs: run with --ignored (see the header)"]
fn hardware_normal_cdf_all_inputs() {
    hardware_agrees("normal_cdf", Native::normal_cdf, F32::normal_cdf);
}

#[test]
#[ignore = "2^32 inputs: run with --ignored (see the header)"]
fn hardware_normal_pdf_all_inputs() {
    hardware_agrees("normal_pdf", Native::normal_pdf, F32::normal_pdf);
}

#[test]
#[ignore = "2^32 inputs: run with --ignored (see the header)"]
fn hardware_exp_all_inputs() {
    hardware_agrees("exp", Native::exp, F32::exp);
}

/// The hardware backend's slice functions (what GELU and the softmaxes call: several cells side
/// by side) against its one-cell functions, already compared with softf32 above, on every `u32`
/// and every chunk position (each block is a whole number of chunks, and the blocks of
/// 2^24 inputs are fed at offsets 0 and 1, so every input meets every lane and the one-by-one
/// rest).
fn slices_agree(name: &str, slice: fn(&[Native], &mut [Native]), one: fn(Native) -> Native) {
    let what = format!("hardware {name} slices");
    none_differ(&what, "the one-cell function", |block| {
        let x: Vec<Native> = block.map(|b| Native(f32::from_bits(b))).collect();
        let mut out = vec![Native(0.0); x.len()];
        let mut wrong = Vec::new();
        for skip in [0, 1] {
            slice(&x[skip..], &mut out[skip..]);
            for (&x, &y) in x[skip..].iter().zip(&out[skip..]) {
                if y.to_f32().to_bits() != one(x).to_f32().to_bits() {
                    wrong.push(x.to_f32().to_bits());
                }
            }
        }
        wrong
    });
}

#[test]
#[ignore = "2^32 inputs: run with --ignored (see the header)"]
fn hardware_slices_all_inputs() {
    slices_agree("normal_cdf", Native::normal_cdfs, Native::normal_cdf);
    slices_agree("normal_pdf", Native::normal_pdfs, Native::normal_pdf);
    slices_agree(
        "exp",
        |x, out| {
            out.copy_from_slice(x);
            Native::exps_in_place(out);
        },
        Native::exp,
    );
}
