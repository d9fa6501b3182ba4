//! softf32 against the host CPU's native binary32 arithmetic on many millions of operands.
//!
//! The reference is `tests/support/native.rs`: on x86_64, SSE instructions with a fixed operand
//! order, whose results (NaN bit patterns included) softf32 must reproduce exactly. Operands come
//! from a generator that aims at every class and at the hard cases of rounding (see
//! [`Gen::operand`] and [`Gen::pair`]).
//!
//! The seed is `$NXRS_SEED` if set (decimal or 0x-hex), else a fixed one when `CI` is set, else
//! the clock. It is printed at the start and in every failure message: rerun a failure with
//! `NXRS_SEED=<seed> cargo test -p nxrs-core --test differential`.
#![allow(clippy::float_arithmetic)] // the reference results are computed with native f32

#[path = "support/native.rs"]
mod native;

use nxrs_core::softf32::{IntRounding, F32};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::hint::black_box;
use std::sync::OnceLock;

/// Operand pairs per binary operation (each test also checks these counts were reached).
const PAIRS: u64 = 12_000_000;
/// Operands per unary operation and per conversion direction.
const SINGLES: u64 = 12_000_000;
/// The seed when `CI` is set and `NXRS_SEED` is not.
const CI_SEED: u64 = 0x6E78_7273_5F66_3332; // "nxrs_f32"

/// Writes a line to stderr directly: libtest swallows `eprintln!` output of a passing test.
fn say(line: &str) {
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{line}\n").as_bytes());
}

fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let (seed, origin) = if let Ok(text) = std::env::var("NXRS_SEED") {
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            let seed = parsed.unwrap_or_else(|e| panic!("NXRS_SEED={text:?}: {e}"));
            (seed, "NXRS_SEED")
        } else if std::env::var_os("CI").is_some() {
            (CI_SEED, "fixed, CI")
        } else {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            (now.expect("clock before 1970").as_nanos() as u64, "clock")
        };
        say(&format!(
            "differential: seed {seed:#x} ({origin}); reproduce with NXRS_SEED={seed:#x}"
        ));
        seed
    })
}

/// Random softf32 test operands, as bit patterns.
struct Gen(Xoshiro256PlusPlus);

const SIGN: u32 = 0x8000_0000;
const EXP_MASK: u32 = 0x7F80_0000;
const FRAC: u32 = 0x007F_FFFF;
const QUIET: u32 = 0x0040_0000;

impl Gen {
    /// Each test draws its own stream, so that tests do not depend on the order they run in.
    fn new(stream: &str) -> Gen {
        let stream = stream.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
        });
        Gen(Xoshiro256PlusPlus::seed_from_u64(seed() ^ stream))
    }

    fn bits(&mut self) -> u32 {
        self.0.next_u32()
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u32) -> u32 {
        ((u64::from(self.bits()) * u64::from(n)) >> 32) as u32
    }

    fn sign(&mut self) -> u32 {
        self.bits() & SIGN
    }

    /// A 23-bit fraction of a random shape: uniform, sparse (one to three bits: products and
    /// quotients of such significands are often exact or exact ties), nearly all ones (rounding
    /// carries), or small (trailing bits only).
    fn frac(&mut self) -> u32 {
        match self.below(4) {
            0 => self.bits() & FRAC,
            1 => self.sparse(),
            2 => FRAC ^ self.sparse(),
            _ => (self.bits() & FRAC) >> self.below(23),
        }
    }

    fn sparse(&mut self) -> u32 {
        let count = 1 + self.below(3);
        (0..count).fold(0, |f, _| f | (1 << self.below(23)))
    }

    /// A value `sign * 1.frac * 2^(exp - 127)`, rounded down into the subnormals when `exp < 1`
    /// and clamped to the largest finite binade when `exp > 254`.
    fn scaled(sign: u32, exp: i32, frac: u32) -> u32 {
        if exp >= 1 {
            sign | ((exp.min(254) as u32) << 23) | frac
        } else {
            let shift = (1 - exp).min(31) as u32;
            sign | ((frac | 0x0080_0000) >> shift)
        }
    }

    /// A normal value with a biased exponent in `lo..=hi`.
    fn normal_in(&mut self, lo: u32, hi: u32) -> u32 {
        let exp = lo + self.below(hi - lo + 1);
        self.sign() | (exp << 23) | self.frac()
    }

    /// One operand from every class: zeros, infinities, subnormals (min, max, random), values
    /// around the min normal and the max finite, quiet and signalling NaNs with payloads, powers
    /// of two, small integers, random normals with shaped fractions, and raw random bits.
    fn operand(&mut self) -> u32 {
        let sign = self.sign();
        match self.below(20) {
            0 => sign,
            1 => sign | EXP_MASK,
            2 => {
                let sub = match self.below(3) {
                    0 => 1,
                    1 => FRAC,
                    _ => (self.frac() >> self.below(23)).max(1),
                };
                sign | sub
            }
            3 => sign | (0x0080_0000 + self.below(64)).wrapping_sub(32),
            4 => sign | (0x7F7F_FFFF - self.below(64)),
            5 => sign | (0xFD + self.below(2)) << 23 | self.frac(),
            6 => {
                let payload = self.bits() & (QUIET - 1);
                if self.below(2) == 0 {
                    sign | EXP_MASK | QUIET | payload // quiet NaN
                } else {
                    sign | EXP_MASK | payload.max(1) // signalling NaN
                }
            }
            7 => {
                let exp = self.below(278) as i32 - 22; // 2^-149 ..= 2^127
                Gen::scaled(sign, exp, 0)
            }
            8 => sign | (self.below(1 << 12) as f32).to_bits(),
            9..=15 => self.normal_in(1, 254),
            _ => self.bits(),
        }
    }

    /// An operand pair for a binary operation, in random order. Besides independent operands:
    /// close exponents (cancellation in subtraction), exponents 23 to 26 binades apart (`a` plus a
    /// half-ulp or less: exact ties and sticky bits), exponents whose product or quotient lands
    /// around the subnormal range or past the max finite, neighbours and negations (comparisons,
    /// `x - x`), and exact multiples (exact quotients).
    fn pair(&mut self) -> (u32, u32) {
        let (a, b) = match self.below(16) {
            0..=5 => (self.operand(), self.operand()),
            6 | 7 => {
                let a = self.normal_in(3, 252);
                let exp = ((a >> 23) & 0xFF) as i32 + self.below(5) as i32 - 2;
                let b = Gen::scaled(self.sign(), exp, self.frac());
                (a, b)
            }
            8 | 9 => {
                let a = self.normal_in(1, 254);
                let exp = ((a >> 23) & 0xFF) as i32 - 23 - self.below(4) as i32;
                let frac = if self.below(2) == 0 { 0 } else { self.frac() };
                (a, Gen::scaled(self.sign(), exp, frac))
            }
            10 | 11 => {
                // Product exponent ea + eb - 127, quotient exponent ea - eb + 127: aim either at
                // -26..=2 (subnormal results, underflow to zero) or at 252..=258 (overflow).
                let a = self.normal_in(1, 254);
                let ea = ((a >> 23) & 0xFF) as i32;
                let target = if self.below(2) == 0 {
                    self.below(29) as i32 - 26
                } else {
                    252 + self.below(7) as i32
                };
                let eb = if self.below(2) == 0 {
                    target - ea + 127
                } else {
                    ea - target + 127
                };
                let b = if (-30..=254).contains(&eb) {
                    Gen::scaled(self.sign(), eb, self.frac())
                } else {
                    self.operand()
                };
                (a, b)
            }
            12 | 13 => {
                let a = self.operand();
                let b = match self.below(4) {
                    0 => a,
                    1 => a ^ SIGN,
                    2 => a.wrapping_add(self.below(5)).wrapping_sub(2),
                    _ => (a ^ SIGN).wrapping_add(self.below(5)).wrapping_sub(2),
                };
                (a, b)
            }
            _ => {
                let b = self.operand();
                let k = (1 + self.below(1 << 10)) as f32;
                (f32::from_bits(native::mul(b, k.to_bits())).to_bits(), b)
            }
        };
        if self.below(2) == 0 {
            (a, b)
        } else {
            (b, a)
        }
    }

    /// Operands for float-to-int conversion: every class, plus values in the integer range
    /// (`2^0 ..= 2^65`: exact ties `x.5`, and both sides of 2^31 and 2^63).
    fn int_operand(&mut self) -> u32 {
        match self.below(4) {
            0 => self.operand(),
            1 => {
                let (exp, sign) = (
                    if self.below(2) == 0 {
                        127 + 31
                    } else {
                        127 + 63
                    },
                    self.sign(),
                );
                (sign | exp << 23)
                    .wrapping_add(self.below(9))
                    .wrapping_sub(4)
            }
            _ => self.normal_in(127 - 2, 127 + 65),
        }
    }

    /// Integers of every magnitude, and the extremes.
    fn int64(&mut self) -> i64 {
        match self.below(16) {
            0 => [i64::MIN, i64::MAX, 0, -1][self.below(4) as usize],
            _ => {
                (self.0.next_u64() >> self.below(64)) as i64
                    * if self.below(2) == 0 { 1 } else { -1 }
            }
        }
    }
}

/// Collects mismatches; the report lists the first few with operands and both results in hex.
struct Check {
    name: &'static str,
    checked: u64,
    mismatches: u64,
    shown: Vec<String>,
}

impl Check {
    fn new(name: &'static str) -> Check {
        Check {
            name,
            checked: 0,
            mismatches: 0,
            shown: Vec::new(),
        }
    }

    /// Counts one case; `describe` (operands, expected, actual) is only called for a mismatch.
    fn case(&mut self, ok: bool, describe: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.mismatches += 1;
            if self.shown.len() < 20 {
                self.shown.push(describe());
            }
        }
    }

    fn finish(self, at_least: u64) {
        say(&format!(
            "differential {}: {} cases checked, {} mismatches",
            self.name, self.checked, self.mismatches
        ));
        assert!(
            self.mismatches == 0,
            "{}: {} of {} cases differ from native (seed {:#x}; NXRS_SEED={:#x} reproduces):\n{}",
            self.name,
            self.mismatches,
            self.checked,
            seed(),
            seed(),
            self.shown.join("\n")
        );
        assert!(self.checked >= at_least, "{}: too few cases", self.name);
    }
}

fn check_binary(name: &'static str, soft: fn(F32, F32) -> F32, native: fn(u32, u32) -> u32) {
    let mut gen = Gen::new(name);
    let mut check = Check::new(name);
    for _ in 0..PAIRS {
        let (a, b) = gen.pair();
        let expected = native(a, b);
        let actual = soft(F32::from_bits(a), F32::from_bits(b)).to_bits();
        check.case(native::same_result(expected, actual), || {
            format!("  {name}({a:08X}, {b:08X}): native {expected:08X}, softf32 {actual:08X}")
        });
    }
    check.finish(PAIRS);
}

#[test]
fn add() {
    check_binary("add", |a, b| a + b, native::add);
}

#[test]
fn sub() {
    check_binary("sub", |a, b| a - b, native::sub);
}

#[test]
fn mul() {
    check_binary("mul", |a, b| a * b, native::mul);
}

#[test]
fn div() {
    check_binary("div", |a, b| a / b, native::div);
}

#[test]
fn sqrt() {
    let mut gen = Gen::new("sqrt");
    let mut check = Check::new("sqrt");
    for _ in 0..SINGLES {
        let a = gen.operand();
        // Mostly non-negative operands: a negative one only gives the default NaN.
        let a = if gen.below(8) == 0 { a } else { a & !SIGN };
        let expected = native::sqrt(a);
        let actual = F32::from_bits(a).sqrt().to_bits();
        check.case(native::same_result(expected, actual), || {
            format!("  sqrt({a:08X}): native {expected:08X}, softf32 {actual:08X}")
        });
    }
    check.finish(SINGLES);
}

#[test]
fn float_to_int() {
    let mut gen = Gen::new("float_to_int");
    let mut check = Check::new("float_to_int");
    let trunc: fn(f32) -> f32 = |x| x; // `as` truncates by itself
    let nearest: fn(f32) -> f32 = f32::round_ties_even;
    for _ in 0..SINGLES {
        let a = black_box(gen.int_operand());
        let x = F32::from_bits(a);
        let results = [
            (
                "to_i32_trunc",
                native::to_i32_via_as(a, trunc).into(),
                x.to_i32_trunc().into(),
            ),
            (
                "to_i32(NearestEven)",
                native::to_i32_via_as(a, nearest).into(),
                x.to_i32(IntRounding::NearestEven).into(),
            ),
            (
                "to_i32_trunc vs cvttss2si",
                native::to_i32_trunc(a).into(),
                x.to_i32_trunc().into(),
            ),
            (
                "to_i32(NearestEven) vs cvtss2si",
                native::to_i32_nearest(a).into(),
                x.to_i32(IntRounding::NearestEven).into(),
            ),
            (
                "to_i64_trunc",
                native::to_i64_via_as(a, trunc),
                x.to_i64_trunc(),
            ),
            (
                "to_i64(NearestEven)",
                native::to_i64_via_as(a, nearest),
                x.to_i64(IntRounding::NearestEven),
            ),
        ];
        for (op, expected, actual) in results {
            let expected: i64 = expected;
            check.case(expected == actual, || {
                format!("  {op}({a:08X}): expected {expected:#X}, softf32 {actual:#X}")
            });
        }
    }
    check.finish(6 * SINGLES);
}

#[test]
fn int_to_float() {
    let mut gen = Gen::new("int_to_float");
    let mut check = Check::new("int_to_float");
    for _ in 0..SINGLES {
        let i = black_box(gen.int64());
        let expected = (i as f32).to_bits();
        let actual = F32::from_i64(i).to_bits();
        check.case(expected == actual, || {
            format!("  from_i64({i:#X}): native {expected:08X}, softf32 {actual:08X}")
        });
        let i = i as i32;
        let (via_as, via_cpu) = ((i as f32).to_bits(), native::from_i32(i));
        let actual = F32::from_i32(i).to_bits();
        check.case(via_as == actual && via_cpu == actual, || {
            format!(
                "  from_i32({i:#X}): `as` {via_as:08X}, CPU {via_cpu:08X}, softf32 {actual:08X}"
            )
        });
    }
    check.finish(2 * SINGLES);
}

#[test]
fn comparisons() {
    let mut gen = Gen::new("comparisons");
    let mut check = Check::new("comparisons");
    for _ in 0..PAIRS {
        let (a, b) = gen.pair();
        let (x, y) = (black_box(f32::from_bits(a)), black_box(f32::from_bits(b)));
        let (p, q) = (F32::from_bits(a), F32::from_bits(b));
        // The seed's `le`: the sign of the native difference, or a zero difference.
        let difference = native::sub(a, b);
        let sign_le = difference & SIGN != 0 || difference & !SIGN == 0;
        let results = [
            ("ieee_lt", x < y, p.ieee_lt(q)),
            ("ieee_le", x <= y, p.ieee_le(q)),
            ("ieee_eq", x == y, p.ieee_eq(q)),
            (
                "le_by_sign_of_difference",
                sign_le,
                p.le_by_sign_of_difference(q),
            ),
        ];
        for (op, expected, actual) in results {
            check.case(expected == actual, || {
                format!("  {op}({a:08X}, {b:08X}): native {expected}, softf32 {actual}")
            });
        }
    }
    check.finish(4 * PAIRS);
}

/// The hardware backend ([`Native`], under its environment guard) against softf32 on every
/// `Real` operation: `+ - * /` and the comparisons on [`PAIRS`] structured pairs, `sqrt` and
/// negation on their first operands. Bits must be equal, NaNs included: `Native` recomputes NaN
/// results in softf32, so this holds whatever NaN the CPU returns (the tests above show that
/// x86 SSE itself returns softf32's NaNs when the operand order is the instruction's).
#[test]
fn native_backend() {
    use nxrs_core::backend::{FpEnvGuard, Op};
    if !nxrs_core::backend::GUARDED_TARGET {
        say("native_backend: skipped, no floating-point environment guard on this target");
        return;
    }
    let _env = FpEnvGuard::new();
    let mut gen = Gen::new("native_backend");
    let mut check = Check::new("native_backend");
    for _ in 0..PAIRS {
        let (a, b) = gen.pair();
        for op in Op::ALL {
            let hw = op.eval::<nxrs_core::backend::Native>(a, b);
            let soft = op.eval::<F32>(a, b);
            check.case(hw == soft, || {
                format!(
                    "  {}({a:08X}, {b:08X}): Native {hw:08X}, softf32 {soft:08X}",
                    op.name()
                )
            });
        }
    }
    check.finish(PAIRS * Op::ALL.len() as u64);
}
