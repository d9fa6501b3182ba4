//! The hardware backend's `exp`, `Φ` and `φ` (the softmax's and GELU's functions): softf32's
//! correctly rounded results ([`F32::exp`], [`F32::normal_cdf`], [`F32::normal_pdf`]), computed
//! first in binary64 and kept when a rounding test proves them, else by softf32's integer
//! algorithm.
//!
//! softf32's fixed-point evaluations cost about as much as a hundred binary32 operations each,
//! and a GELU calls them for every cell in both passes. Here `e^x` is the binary64 `e^y` below of
//! `y = x` (exact), and `Φ` and `φ` follow softf32's formula (`Q(t) = Φ(-t) = e^y` with
//! `y = ln M(t0) - ln √(2π) + (ln M(t) - ln M(t0)) - t²/2` from softf32's table of the Mills
//! ratio `M`, its Taylor polynomials cut at degree 6 of 9: [`USED_DEGREE`], and
//! `φ(t) = e^(-t²/2 - ln √(2π))`) in binary64, with a relative error below `2^-44` (the table's
//! values rounded to binary64, `2^-53` each; `t²` exact; the sum `y`, up to 105 in magnitude,
//! within `2^-45.8` with the terms left out; `e^y`'s reduction and degree-11 polynomial within
//! `2^-47`).
//! The value `v` is then rounded to binary32 at `v (1 - 2^-36)` and `v (1 + 2^-36)`: when both
//! round alike, no rounding boundary lies between them, so the exact value (well inside) rounds
//! the same, to softf32's result. Otherwise (one value in 2^11 or so, and the specials, and the
//! ranges whose result needs no arithmetic) softf32's own function gives it.
//! `tests/exhaustive_functions.rs` checks every binary32 input against softf32's.
//!
//! Binary64 `+ - *` and the conversions are IEEE operations, the same on every CPU in the
//! backend's environment (round to nearest, no flushing: [`super::FpEnvGuard`]), and no `exp`
//! of a library takes part.

#![allow(clippy::float_arithmetic)] // binary64 evaluation is this module's point

use crate::softf32::normal::{
    Node as SoftNode, CDF_LAST_BELOW_ONE, CDF_LAST_NONZERO, NODES, NODE_BITS, PDF_LAST_NONZERO,
    TAIL as SOFT_TAIL,
};
use crate::softf32::F32;

/// Smallest magnitude (as bits) the binary64 paths take: `2^-25` (softf32's `Φ` is `1/2` below).
const SMALLEST: u32 = 0x3300_0000;

/// The rounding test's relative margin, far above the evaluation's error (`2^-44`).
const MARGIN: f64 = 1.0 / (1u64 << 36) as f64;

/// `ln √(2π)` to nearest binary64 (`0.91893853320467274178...`).
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_7;

/// The degree of the polynomial in `h` here: softf32's Taylor coefficients `b_n` of `ln M` at
/// the nodes are below `2.2e-4` for `n = 6` and `5.3e-5` for `n = 7` (both largest at node 0;
/// `n = 8`: `6.4e-6`; computed with mpmath at 40 digits), so for `|h| <= 1/32` the terms left out,
/// from `n = 7` on, add below `2^-49.1` to the error of `y` (`2^-45.8` in all, see the
/// module's documentation).
const USED_DEGREE: usize = 6;

/// softf32's tail table ([`SOFT_TAIL`]: offsets in Q119, coefficients in Q63) in binary64,
/// each value rounded once, at compile time (the scalings by powers of two are exact). Node `i`'s
/// row holds `ln M(t0) - ln √(2π)` and then the Taylor coefficients `b_1 ..= b_6` of `ln M` at
/// `t0` ([`USED_DEGREE`]). Padded with zero rows to [`ROWS`], a power of two, so an index masked
/// to it needs no bounds check.
static TAIL: [Coefficients; ROWS] = {
    let mut table = [[0.0; USED_DEGREE + 1]; ROWS];
    let mut i = 0;
    while i < NODES {
        let SoftNode { offset, slopes } = &SOFT_TAIL[i];
        table[i][0] = *offset as f64 / (1u128 << 119) as f64;
        let mut n = 0;
        while n < USED_DEGREE {
            table[i][n + 1] = slopes[n] as f64 / (1u64 << 63) as f64;
            n += 1;
        }
        i += 1;
    }
    table
};

/// One node's row of [`TAIL`].
type Coefficients = [f64; USED_DEGREE + 1];

/// The table's rows: the nodes, padded to a power of two.
const ROWS: usize = NODES.next_power_of_two();

/// `e^y` of every lane, for `-105 <= y <= 89`, relative error below `2^-47`: `y = k ln 2 + r`
/// with `k` the nearest integer to `y / ln 2` (fdlibm's split of `ln 2`, whose high part times
/// `k` is exact) and `|r| <= 0.3466`, then `2^k` times the Taylor polynomial of `e^r` to degree
/// 11 (the next term is below `2^-47.5`).
///
/// Each step runs over every lane before the next ([`LANES`] side by side; one for a single
/// value): a lane's chain of about 30 dependent operations, run one lane after another, left the
/// slice functions waiting on its latency (Zen 3, AVX2: 7.3 ns per `Φ`, 3.5 per `φ`).
#[inline(always)]
fn exp<const N: usize>(y: &[f64; N]) -> [f64; N] {
    const LOG2_E: f64 = core::f64::consts::LOG2_E;
    const LN2_HI: f64 = 6.931_471_803_691_238e-1; // 0x3FE62E42FEE00000
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10; // 0x3DEA39EF35793C76
    /// Adding and subtracting 1.5 * 2^52 rounds to an integer (to nearest), for |x| < 2^51.
    const ROUND: f64 = 6_755_399_441_055_744.0;
    let (mut shifted, mut r) = ([0.0; N], [0.0; N]);
    for ((shifted, r), &y) in shifted.iter_mut().zip(&mut r).zip(y) {
        *shifted = y * LOG2_E + ROUND;
        let k = *shifted - ROUND;
        *r = (y - k * LN2_HI) - k * LN2_LO;
    }
    // 1/n! for n = 11 down to 1 (each to nearest binary64).
    const INVERSE_FACTORIALS: [f64; 11] = [
        2.505_210_838_544_172e-8,
        2.755_731_922_398_589e-7,
        2.755_731_922_398_589_3e-6,
        2.480_158_730_158_73e-5,
        1.984_126_984_126_984e-4,
        1.388_888_888_888_889e-3,
        8.333_333_333_333_333e-3,
        4.166_666_666_666_666_4e-2,
        1.666_666_666_666_666_6e-1,
        0.5,
        1.0,
    ];
    let mut p = [INVERSE_FACTORIALS[0]; N];
    for &c in &INVERSE_FACTORIALS[1..] {
        for (p, &r) in p.iter_mut().zip(&r) {
            *p = *p * r + c;
        }
    }
    for ((p, &r), &shifted) in p.iter_mut().zip(&r).zip(&shifted) {
        // 2^k, a normal binary64 for -152 <= k <= 129: `shifted`'s significand is 2^51 + k, so
        // its low 11 bits plus 1023 are k + 1023, the biased exponent.
        let scale = f64::from_bits(shifted.to_bits().wrapping_add(1023) << 52);
        *p = (*p * r + 1.0) * scale;
    }
    p
}

/// softf32's node for `2^-25 <= t <= 14.2` (its row of [`TAIL`]) and `h = t - t0` (exact).
/// Branch-free, so that a loop over lanes vectorises; any other `t` gives some row, whose result
/// the caller drops.
#[inline(always)]
fn tail_node(t: f64) -> (usize, f64) {
    let nodes = f64::from(1u32 << NODE_BITS);
    // The nearest node, halves up as softf32: `floor(t * 16 + 0.5)`, in binary64 operations
    // only (a float-to-integer conversion per lane would not vectorise): `y + 2^52 - 2^52` is
    // `y` rounded to an integer (`y` and every step exact below `2^52`), less 1 if that rounded
    // up.
    const TWO_52: f64 = (1u64 << 52) as f64;
    let y = t * nodes + 0.5;
    let rounded = (y + TWO_52) - TWO_52;
    let node = rounded - if rounded > y { 1.0 } else { 0.0 };
    // `node + 2^52` holds the node's number in its low significand bits.
    let i = (node + TWO_52).to_bits() as usize & (ROWS - 1);
    (i, t - node / nodes)
}

/// The exponent `y` of `Q(t) = Φ(-t) = e^y` for `2^-25 <= t <= 14.2`, within `2^-45.8` (see the
/// module's documentation), of every lane, from `t`, its node's row (`rows[n]` holds the lanes'
/// coefficient `n`) and `h`: the polynomial in `h`, each step over every lane as in [`exp`].
#[inline(always)]
fn tail_exponent<const N: usize>(t: &[f64; N], rows: &Rows<N>, h: &[f64; N]) -> [f64; N] {
    let mut p = rows[USED_DEGREE];
    for row in rows[1..USED_DEGREE].iter().rev() {
        for ((p, &b), &h) in p.iter_mut().zip(row).zip(h) {
            *p = b + *p * h;
        }
    }
    for (((p, &b), &h), &t) in p.iter_mut().zip(&rows[0]).zip(h).zip(t) {
        *p = (b + *p * h) - 0.5 * (t * t);
    }
    p
}

/// `N` lanes' rows of [`TAIL`], transposed: `rows[n][l]` is lane `l`'s coefficient `n`.
type Rows<const N: usize> = [[f64; N]; USED_DEGREE + 1];

/// `Q(t)` for one `t` ([`tail_exponent`]).
#[inline(always)]
fn tail(t: f64) -> f64 {
    let (i, h) = tail_node(t);
    exp(&tail_exponent(&[t], &TAIL[i].map(|b| [b]), &[h]))[0]
}

/// `v` rounded to binary32 if the rounding test proves it softf32's (see the module's
/// documentation).
#[inline(always)]
fn proven(v: f64) -> Option<f32> {
    let margin = v * MARGIN;
    let (low, high) = ((v - margin) as f32, (v + margin) as f32);
    (low.to_bits() == high.to_bits()).then_some(low)
}

/// Cells the slice functions take at a time: what the binary64 paths compute side by side.
/// Four AVX-512 registers of binary64 lanes (eight of AVX2), so that independent polynomial
/// chains overlap, and [`normal_cdfs`]'s table rows, copied by scalar stores, are mostly written
/// back before the vector loads read them (measured on Zen 4, AVX-512: 16 and 64 lanes are
/// slower; on Zen 3, AVX2, with each step over every lane: 16, 32 and 64 within 10%).
const LANES: usize = 32;

/// `out[i] = Φ(x[i])` ([`normal_cdf`]), the binary64 paths of [`LANES`] cells side by side
/// (loops over lanes without branches, which the compiler vectorises), the cells the rounding
/// test leaves one by one.
#[inline(always)]
pub fn normal_cdfs(x: &[f32], out: &mut [f32]) {
    let (whole, rest) = x.split_at(x.len() / LANES * LANES);
    // Each chunk overwrites what it reads: set to zero once, not per chunk.
    let mut rows = [[0.0; LANES]; USED_DEGREE + 1];
    for (x, out) in whole.chunks_exact(LANES).zip(out.chunks_exact_mut(LANES)) {
        let x: &[f32; LANES] = x.try_into().expect("a whole chunk");
        let mut t = [0.0; LANES];
        let mut inside = [false; LANES];
        for ((t, inside), &x) in t.iter_mut().zip(&mut inside).zip(x) {
            let (magnitude, negative) = split(x);
            let last = if negative {
                CDF_LAST_NONZERO
            } else {
                CDF_LAST_BELOW_ONE
            };
            *inside = (SMALLEST..=last).contains(&magnitude);
            *t = magnitude_f64(magnitude);
        }
        let mut node = [0; LANES];
        let mut h = [0.0; LANES];
        for ((node, h), &t) in node.iter_mut().zip(&mut h).zip(&t) {
            (*node, *h) = tail_node(t);
        }
        // The lanes' rows, transposed by plain loads and stores: the compiler would otherwise
        // load each coefficient with a vector gather, several times slower here.
        for (l, &i) in node.iter().enumerate() {
            for (n, &b) in TAIL[i].iter().enumerate() {
                rows[n][l] = b;
            }
        }
        let mut v = exp(&tail_exponent(&t, &rows, &h));
        for (v, &x) in v.iter_mut().zip(x) {
            if !split(x).1 {
                *v = 1.0 - *v;
            }
        }
        finish(x, v, inside, out, normal_cdf_soft);
    }
    for (&x, out) in rest.iter().zip(&mut out[whole.len()..]) {
        *out = normal_cdf(x);
    }
}

/// `x[i] = e^x[i]` ([`exp_f32`]) in place, as [`normal_cdfs`].
#[inline(always)]
pub fn exps_in_place(x: &mut [f32]) {
    let whole = x.len() / LANES * LANES;
    let (whole, rest) = x.split_at_mut(whole);
    for x in whole.chunks_exact_mut(LANES) {
        let input: [f32; LANES] = (*x).try_into().expect("a whole chunk");
        let inside = input.map(|x| (EXP_FIRST..=EXP_LAST).contains(&x));
        finish(&input, exp(&input.map(f64::from)), inside, x, exp_soft);
    }
    for x in rest {
        *x = exp_f32(*x);
    }
}

/// `out[i] = φ(x[i])` ([`normal_pdf`]), as [`normal_cdfs`].
#[inline(always)]
pub fn normal_pdfs(x: &[f32], out: &mut [f32]) {
    let (whole, rest) = x.split_at(x.len() / LANES * LANES);
    for (x, out) in whole.chunks_exact(LANES).zip(out.chunks_exact_mut(LANES)) {
        let x: &[f32; LANES] = x.try_into().expect("a whole chunk");
        let mut y = [0.0; LANES];
        let mut inside = [false; LANES];
        for ((y, inside), &x) in y.iter_mut().zip(&mut inside).zip(x) {
            let magnitude = split(x).0;
            *inside = (SMALLEST..=PDF_LAST_NONZERO).contains(&magnitude);
            *y = pdf_exponent(magnitude_f64(magnitude));
        }
        finish(x, exp(&y), inside, out, normal_pdf_soft);
    }
    for (&x, out) in rest.iter().zip(&mut out[whole.len()..]) {
        *out = normal_pdf(x);
    }
}

/// The lanes' results: `v` rounded where `inside` and the rounding test proves it, else `soft`.
/// Lanes outside may hold any value (an infinity or NaN of a magnitude out of range included):
/// their `v` is computed without a trap (the environment masks every exception) and dropped.
#[inline(always)]
fn finish(
    x: &[f32; LANES],
    v: [f64; LANES],
    inside: [bool; LANES],
    out: &mut [f32],
    soft: fn(f32) -> f32,
) {
    let mut rounded = [0.0f32; LANES];
    let mut proven = [false; LANES];
    for (((rounded, proven), &v), &inside) in
        rounded.iter_mut().zip(&mut proven).zip(&v).zip(&inside)
    {
        let margin = v * MARGIN;
        let (low, high) = ((v - margin) as f32, (v + margin) as f32);
        *rounded = low;
        *proven = inside & (low.to_bits() == high.to_bits());
    }
    // Nearly always every lane is proven: one test, one copy.
    if proven.iter().fold(true, |all, &p| all & p) {
        out.copy_from_slice(&rounded);
        return;
    }
    for (l, out) in out.iter_mut().enumerate() {
        *out = if proven[l] { rounded[l] } else { soft(x[l]) };
    }
}

/// `x`'s magnitude (as bits) and whether its sign bit is set.
#[inline(always)]
fn split(x: f32) -> (u32, bool) {
    let bits = x.to_bits();
    let magnitude = bits & !F32::NEG_ZERO.to_bits();
    (magnitude, bits != magnitude)
}

/// The binary32 value with these bits, in binary64 (exact).
#[inline(always)]
fn magnitude_f64(magnitude: u32) -> f64 {
    f64::from(f32::from_bits(magnitude))
}

/// `φ(t) = e^y` with `y = -t²/2 - ln √(2π)` (`t²` exact, `y` within `2^-46`).
#[inline(always)]
fn pdf_exponent(t: f64) -> f64 {
    -0.5 * (t * t) - LN_SQRT_2PI
}

/// softf32's `Φ` on a hardware value's bits.
fn normal_cdf_soft(x: f32) -> f32 {
    f32::from_bits(F32::from_bits(x.to_bits()).normal_cdf().to_bits())
}

/// softf32's `φ` on a hardware value's bits.
fn normal_pdf_soft(x: f32) -> f32 {
    f32::from_bits(F32::from_bits(x.to_bits()).normal_pdf().to_bits())
}

/// The smallest and largest `x` of the binary64 path of `e^x`: below, `e^x` rounds to +0 or the
/// smallest subnormal; above, it overflows.
const EXP_FIRST: f32 = -104.0;
const EXP_LAST: f32 = 89.0;

/// `e^x`, softf32's bits ([`F32::exp`]).
#[inline]
pub fn exp_f32(x: f32) -> f32 {
    if (EXP_FIRST..=EXP_LAST).contains(&x) {
        if let Some(e) = proven(exp(&[f64::from(x)])[0]) {
            return e;
        }
    }
    exp_soft(x)
}

/// softf32's `e^x` on a hardware value's bits.
fn exp_soft(x: f32) -> f32 {
    f32::from_bits(F32::from_bits(x.to_bits()).exp().to_bits())
}

/// `Φ(x)`, softf32's bits ([`F32::normal_cdf`]).
#[inline]
pub fn normal_cdf(x: f32) -> f32 {
    let (magnitude, negative) = split(x);
    let last = if negative {
        CDF_LAST_NONZERO
    } else {
        CDF_LAST_BELOW_ONE
    };
    if (SMALLEST..=last).contains(&magnitude) {
        let q = tail(magnitude_f64(magnitude));
        if let Some(phi) = proven(if negative { q } else { 1.0 - q }) {
            return phi;
        }
    }
    normal_cdf_soft(x)
}

/// `φ(x)`, softf32's bits ([`F32::normal_pdf`]).
#[inline]
pub fn normal_pdf(x: f32) -> f32 {
    let magnitude = split(x).0;
    if (SMALLEST..=PDF_LAST_NONZERO).contains(&magnitude) {
        if let Some(phi) = proven(exp(&[pdf_exponent(magnitude_f64(magnitude))])[0]) {
            return phi;
        }
    }
    normal_pdf_soft(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Taylor terms the binary64 path leaves out (softf32's `b_7 ..= b_9` at `|h| = 1/32`)
    /// stay below `2^-49` at every node, as [`USED_DEGREE`]'s documentation says (softf32's own
    /// polynomial leaves out below `2^-70` beyond them).
    #[test]
    fn the_terms_left_out_are_below_2_to_the_minus_49() {
        let h: f64 = 1.0 / 32.0;
        for (i, node) in SOFT_TAIL.iter().enumerate() {
            let left_out: f64 = node.slopes[USED_DEGREE..]
                .iter()
                .zip(USED_DEGREE as i32 + 1..)
                .map(|(&b, n)| (b as f64 / (1u64 << 63) as f64).abs() * h.powi(n))
                .sum();
            assert!(left_out < 2f64.powi(-49), "node {i}: {left_out:e}");
        }
    }

    /// A spread of inputs (every 997th bit pattern, both signs) against softf32's, one by one
    /// and as slices.
    #[test]
    fn agree_with_softf32() {
        let _env = super::super::FpEnvGuard::new();
        for bits in (0..=u32::MAX).step_by(997) {
            let x = f32::from_bits(bits);
            let soft = F32::from_bits(bits);
            assert_eq!(
                normal_cdf(x).to_bits(),
                soft.normal_cdf().to_bits(),
                "Φ({bits:#010x})"
            );
            assert_eq!(
                exp_f32(x).to_bits(),
                soft.exp().to_bits(),
                "exp({bits:#010x})"
            );
            assert_eq!(
                normal_pdf(x).to_bits(),
                soft.normal_pdf().to_bits(),
                "φ({bits:#010x})"
            );
        }
        let x: Vec<f32> = (0..=u32::MAX).step_by(997).map(f32::from_bits).collect();
        let (mut cdf, mut pdf) = (vec![0.0; x.len()], vec![0.0; x.len()]);
        normal_cdfs(&x, &mut cdf);
        normal_pdfs(&x, &mut pdf);
        let mut exps = x.clone();
        exps_in_place(&mut exps);
        for (((&x, cdf), pdf), e) in x.iter().zip(cdf).zip(pdf).zip(exps) {
            assert_eq!(cdf.to_bits(), normal_cdf(x).to_bits(), "Φ({x:e})");
            assert_eq!(pdf.to_bits(), normal_pdf(x).to_bits(), "φ({x:e})");
            assert_eq!(e.to_bits(), exp_f32(x).to_bits(), "exp({x:e})");
        }
    }
}
