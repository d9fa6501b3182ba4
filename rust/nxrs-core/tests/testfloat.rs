//! softf32 against the Berkeley TestFloat 3e level-1 vectors for binary32.
//!
//! The vectors are `*.txt.gz` files in `$NXRS_TESTFLOAT_DIR`, or else in `shared/testfloat` beside
//! the workspace root (its README gives the line formats). They are read in place, gzip and all.
//! When the folder is missing the tests fail if `CI` is set, and otherwise print why they skipped.
//! Each test prints how many vectors it checked.
//!
//! Every result must match bit for bit, NaNs included: TestFloat computed the expected values with
//! SoftFloat 3e's 8086-SSE specialisation, whose NaN rules are x86 SSE's and softf32's (first NaN
//! operand quieted, default NaN `0xFFC00000`, `0x80000000` for NaN or out-of-range float-to-int),
//! and every line of every file passes with exact NaN comparison.
//!
//! The FLAGS column (IEEE exception flags) is parsed for well-formedness but not checked: softf32
//! does not model exception flags.

use nxrs_core::softf32::{IntRounding, F32};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

/// Writes a line to stderr directly: libtest swallows `eprintln!` output of a passing test.
fn say(line: &str) {
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{line}\n").as_bytes());
}

/// The vectors' folder, or `None` (after saying so on stderr) when it is absent outside CI.
fn vectors_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("NXRS_TESTFLOAT_DIR") {
        Some(dir) => PathBuf::from(dir),
        // CARGO_MANIFEST_DIR is <workspace>/rust/nxrs-core; the folder is <workspace>/../shared.
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testfloat"),
    };
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "TestFloat vectors not found at {} (set NXRS_TESTFLOAT_DIR); CI must run them",
        dir.display()
    );
    say(&format!(
        "SKIPPED: TestFloat vectors not found at {} (set NXRS_TESTFLOAT_DIR to run them)",
        dir.display()
    ));
    None
}

/// Checks every line of `<name>.txt.gz`. A line is `operands... expected FLAGS`, all hex;
/// `operand_count` says how many operands come before the expected result. `compute` maps the
/// operands to softf32's result as bits (an integer as its two's complement, a predicate as 0/1).
fn check_file(name: &str, operand_count: usize, compute: impl Fn(&[u32]) -> u32) {
    let Some(dir) = vectors_dir() else { return };
    let path = dir.join(format!("{name}.txt.gz"));
    let file = std::fs::File::open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let reader = BufReader::new(flate2::read::GzDecoder::new(file));

    let mut checked = 0usize;
    let mut failures = Vec::new();
    let mut fields = Vec::with_capacity(operand_count + 2);
    for (index, line) in reader.lines().enumerate() {
        let line = line.unwrap_or_else(|e| panic!("{}: read error: {e}", path.display()));
        fields.clear();
        for field in line.split_ascii_whitespace() {
            let value = u32::from_str_radix(field, 16)
                .unwrap_or_else(|e| panic!("{name} line {}: {field:?}: {e}", index + 1));
            fields.push(value);
        }
        assert_eq!(
            fields.len(),
            operand_count + 2,
            "{name} line {}: expected {} fields: {line:?}",
            index + 1,
            operand_count + 2
        );
        let expected = fields[operand_count];
        let actual = compute(&fields[..operand_count]);
        checked += 1;
        if actual != expected {
            failures.push(format!(
                "  line {}: {line}  -> softf32 gave {actual:08X}",
                index + 1
            ));
        }
    }
    say(&format!(
        "testfloat {name}: {checked} vectors checked, {} failed",
        failures.len()
    ));
    assert!(checked > 0, "{} has no vectors", path.display());
    assert!(
        failures.is_empty(),
        "{name}: {} of {checked} vectors failed (line: operands expected flags):\n{}",
        failures.len(),
        failures[..failures.len().min(30)].join("\n")
    );
}

fn f(bits: u32) -> F32 {
    F32::from_bits(bits)
}

#[test]
fn f32_add() {
    check_file("f32_add", 2, |v| (f(v[0]) + f(v[1])).to_bits());
}

#[test]
fn f32_sub() {
    check_file("f32_sub", 2, |v| (f(v[0]) - f(v[1])).to_bits());
}

#[test]
fn f32_mul() {
    check_file("f32_mul", 2, |v| (f(v[0]) * f(v[1])).to_bits());
}

#[test]
fn f32_div() {
    check_file("f32_div", 2, |v| (f(v[0]) / f(v[1])).to_bits());
}

#[test]
fn f32_sqrt() {
    check_file("f32_sqrt", 1, |v| f(v[0]).sqrt().to_bits());
}

#[test]
fn f32_eq() {
    check_file("f32_eq", 2, |v| u32::from(f(v[0]).ieee_eq(f(v[1]))));
}

#[test]
fn f32_le() {
    check_file("f32_le", 2, |v| u32::from(f(v[0]).ieee_le(f(v[1]))));
}

#[test]
fn f32_lt() {
    check_file("f32_lt", 2, |v| u32::from(f(v[0]).ieee_lt(f(v[1]))));
}

#[test]
fn i32_to_f32() {
    check_file("i32_to_f32", 1, |v| F32::from_i32(v[0] as i32).to_bits());
}

#[test]
fn f32_to_i32() {
    check_file("f32_to_i32", 1, |v| {
        f(v[0]).to_i32(IntRounding::NearestEven) as u32
    });
}

#[test]
fn f32_to_i32_r_min_mag() {
    check_file("f32_to_i32_r_minMag", 1, |v| f(v[0]).to_i32_trunc() as u32);
}
