//! softf32 `exp`, `ln`, `normal_cdf` (`Φ`) and `normal_pdf` (`φ`) on a few million inputs against
//! the binary64 oracle (`tests/support/oracle.rs`), plus every special and boundary input and the
//! mpmath-decided hard cases (`tests/data/function_hard_cases.txt`). The all-2^32 version is
//! `tests/exhaustive_functions.rs`.

#[path = "support/oracle.rs"]
mod oracle;

use nxrs_core::softf32::F32;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Random inputs per function (half any bit pattern, half from the range that needs arithmetic).
const RANDOM: usize = 2_000_000;

/// Writes a line to stderr directly: libtest swallows `eprintln!` output of a passing test.
fn say(line: &str) {
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{line}\n").as_bytes());
}

/// Checks `soft` against `oracle` on `inputs`; returns how many the oracle deferred (those are
/// covered by the hard-case list instead).
fn check(
    name: &str,
    soft: fn(F32) -> F32,
    oracle: fn(u32) -> Option<u32>,
    inputs: &[u32],
) -> usize {
    let mut deferred = 0;
    let mut failures = Vec::new();
    for &x in inputs {
        let got = soft(F32::from_bits(x)).to_bits();
        match oracle(x) {
            Some(want) if want != got => failures.push(format!("{x:08X}: {got:08X} != {want:08X}")),
            Some(_) => {}
            None => deferred += 1,
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} inputs wrong (softf32 != oracle):\n{}",
        failures.len(),
        inputs.len(),
        failures[..failures.len().min(20)].join("\n")
    );
    say(&format!(
        "{name}: {} inputs, {deferred} deferred by the oracle",
        inputs.len()
    ));
    deferred
}

/// `count` inputs on each side of each of `centres` (as bit patterns, both signs).
fn around(centres: &[u32], count: u32) -> Vec<u32> {
    let mut inputs = Vec::new();
    for &c in centres {
        for bits in c.saturating_sub(count)..=c.saturating_add(count) {
            inputs.extend([bits, bits ^ 0x8000_0000]);
        }
    }
    inputs
}

/// Special values and the edges of every class: zeros, subnormals, the smallest normals, one,
/// the largest finite values, infinities, NaNs.
#[rustfmt::skip]
const SPECIALS: [u32; 16] = [
    0x0000_0000, 0x0000_0001, 0x0000_0002, 0x007F_FFFF, 0x0080_0000, 0x0080_0001, 0x3F7F_FFFF,
    0x3F80_0000, 0x3F80_0001, 0x7F7F_FFFF, 0x7F80_0000, 0x7F80_0001, 0x7FBF_FFFF, 0x7FC0_0000,
    0x7FFF_FFFF, 0x4000_0000,
];

fn random_inputs(seed: u64, range: std::ops::Range<u32>) -> Vec<u32> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..RANDOM)
        .map(|i| {
            let r = rng.next_u32();
            if i % 2 == 0 {
                r
            } else {
                range.start + r % (range.end - range.start)
            }
        })
        .collect()
}

#[test]
fn exp_matches_the_oracle() {
    // Random: any pattern, and |x| in [2^-26, 128) with either sign.
    let mut inputs: Vec<u32> = random_inputs(0xE4B0, 0x3280_0000..0x4300_0000)
        .into_iter()
        .enumerate()
        .map(|(i, x)| if i % 4 == 1 { x | 0x8000_0000 } else { x })
        .collect();
    // Boundaries: the |x| < 2^-25 shortcut (0x33000000), the |x| >= 128 one (0x43000000), the
    // overflow threshold (0x42B17218), the subnormal range (e^x < 2^-126 below 0xC2AEAC50) and
    // the last input that does not underflow to zero (0xC2CFF1B4); both signs of each.
    let edges = [
        0x3300_0000,
        0x4300_0000,
        0x42B1_7218,
        0x42AE_AC50,
        0x42CF_F1B4,
    ];
    inputs.extend(around(&edges, 4096));
    inputs.extend(around(&SPECIALS, 64));
    check("exp", F32::exp, oracle::exp, &inputs);
}

#[test]
fn ln_matches_the_oracle() {
    // Random: any pattern, and positive finite values.
    let mut inputs = random_inputs(0x106, 0x0000_0001..0x7F80_0000);
    // Boundaries: around 1 (the c = 1 cell, and 1 - 2^-24 where the exponent changes), both ends
    // of the m in [0.75, 1.5) split (0x3FC00000 and 0x3F400000), every power of two, and the
    // subnormal edges.
    inputs.extend(around(&[0x3F80_0000, 0x3FC0_0000, 0x3F40_0000], 1 << 16));
    let powers: Vec<u32> = (1..255)
        .map(|e| e << 23)
        .chain((0..23).map(|s| 1 << s))
        .collect();
    inputs.extend(around(&powers, 16));
    inputs.extend(around(&SPECIALS, 64));
    check("ln", F32::ln, oracle::ln, &inputs);
}

#[test]
fn normal_cdf_matches_the_oracle() {
    // Random: any pattern, and |x| in [2^-26, 16) with either sign (Φ's arithmetic runs for
    // 2^-25 <= |x| <= 14.17).
    let mut inputs: Vec<u32> = random_inputs(0xCDF, 0x3280_0000..0x4180_0000)
        .into_iter()
        .enumerate()
        .map(|(i, x)| if i % 4 == 1 { x | 0x8000_0000 } else { x })
        .collect();
    // Boundaries: the |x| < 2^-25 shortcut (0x33000000), the last x whose Φ is not +0
    // (-14.170185, 0xC162B914) or not 1 (5.4199829, 0x40AD7080), subnormal results (Φ(x) near
    // 2^-126 at -12.95, 0xC14F3302), and the tail table's nodes i/16 (the halves between them
    // too), where the polynomial changes; both signs of each.
    let mut edges = vec![0x3300_0000, 0x4162_B914, 0x40AD_7080, 0x414F_3302];
    // half / 32: the bits of `half` as a binary32, exponent lowered by 5.
    edges.extend((1..=454u16).map(|half| f32::from(half).to_bits() - (5 << 23)));
    inputs.extend(around(&edges, 256));
    inputs.extend(around(&SPECIALS, 64));
    check("normal_cdf", F32::normal_cdf, oracle::normal_cdf, &inputs);
}

#[test]
fn normal_pdf_matches_the_oracle() {
    // Random: any pattern, and |x| in [2^-26, 16) with either sign.
    let mut inputs: Vec<u32> = random_inputs(0x9DF, 0x3280_0000..0x4180_0000)
        .into_iter()
        .enumerate()
        .map(|(i, x)| if i % 4 == 1 { x | 0x8000_0000 } else { x })
        .collect();
    // Boundaries: the |x| < 2^-25 shortcut, the last x whose φ is not +0 (14.356401,
    // 0x4165B3D2) and subnormal results (φ(x) near 2^-126 at 13.15, 0x415258CE).
    inputs.extend(around(&[0x3300_0000, 0x4165_B3D2, 0x4152_58CE], 4096));
    inputs.extend(around(&SPECIALS, 64));
    check("normal_pdf", F32::normal_pdf, oracle::normal_pdf, &inputs);
}

#[test]
fn hard_cases_decided_by_mpmath() {
    let cases = oracle::hard_cases();
    let mut failures = Vec::new();
    for case in &cases {
        let x = F32::from_bits(case.input);
        let got = match case.op.as_str() {
            "exp" => x.exp(),
            "ln" => x.ln(),
            "normal_cdf" => x.normal_cdf(),
            "normal_pdf" => x.normal_pdf(),
            op => panic!("unknown op {op:?} in the hard-case list"),
        };
        if got.to_bits() != case.expected {
            failures.push(format!(
                "{}({:08X}) = {:08X}, mpmath says {:08X}",
                case.op,
                case.input,
                got.to_bits(),
                case.expected
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    say(&format!("hard cases: {} checked", cases.len()));
}
