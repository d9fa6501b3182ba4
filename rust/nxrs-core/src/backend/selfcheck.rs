//! The hardware self-check: [`hardware`] runs every operation of [`Native`] and its slice
//! kernels on a fixed set of hard cases ([`self_check_cases`]) once per process, under the
//! guard, and allows the hardware path only if every result is softf32's.

#![allow(clippy::float_arithmetic)] // `Faulty` computes in native binary32 on purpose

use super::fpenv::{FpEnvGuard, GUARDED_TARGET};
use super::native::Native;
use crate::arith::Real;
use crate::softf32::F32;
use core::ops::{Add, Div, Mul, Neg, Sub};
use std::hint::black_box;
use std::sync::OnceLock;

/// One operation of the self-check, on bit patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Sqrt,
    Neg,
    Le,
    Lt,
}

impl Op {
    pub const ALL: [Op; 8] = [
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Sqrt,
        Op::Neg,
        Op::Le,
        Op::Lt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Sub => "sub",
            Op::Mul => "mul",
            Op::Div => "div",
            Op::Sqrt => "sqrt",
            Op::Neg => "neg",
            Op::Le => "le",
            Op::Lt => "lt",
        }
    }

    /// The result of `self` on `a` (and `b`) in arithmetic `R`, as bits (comparisons as 0/1).
    /// The operands pass through `black_box` so that the compiler cannot fold the operation.
    pub fn eval<R: Real>(self, a: u32, b: u32) -> u32 {
        let x = black_box(R::from_f32(F32::from_bits(a)));
        let y = black_box(R::from_f32(F32::from_bits(b)));
        let bits = |r: R| black_box(r).to_f32().to_bits();
        match self {
            Op::Add => bits(x + y),
            Op::Sub => bits(x - y),
            Op::Mul => bits(x * y),
            Op::Div => bits(x / y),
            Op::Sqrt => bits(x.sqrt()),
            Op::Neg => bits(-x),
            Op::Le => u32::from(black_box(x.ieee_le(y))),
            Op::Lt => u32::from(black_box(x.ieee_lt(y))),
        }
    }
}

/// Operands of the self-check: every class and the edges between them (TestFloat's boundary
/// patterns), plus values whose sums, products and quotients are ties or land in the subnormals.
const SPECIAL: [u32; 34] = [
    0x0000_0000, // +0
    0x0000_0001, // smallest subnormal
    0x0000_0002,
    0x0000_0003,
    0x003F_FFFF,
    0x0040_0000,
    0x007F_FFFF, // largest subnormal
    0x0080_0000, // smallest normal
    0x0080_0001,
    0x00FF_FFFF,
    0x0100_0000,
    0x1F80_0000, // 2^-64: squares underflow
    0x2000_0001,
    0x3380_0000, // 2^-24: half an ulp of 1
    0x3380_0001,
    0x33FF_FFFF,
    0x3F00_0000, // 0.5
    0x3F7F_FFFF,
    0x3F80_0000, // 1
    0x3F80_0001,
    0x3FC0_0000, // 1.5
    0x3FFF_FFFF,
    0x4040_0000, // 3
    0x4B00_0000, // 2^23
    0x4B7F_FFFF,
    0x5F80_0000, // 2^64: squares overflow
    0x7EFF_FFFF,
    0x7F00_0000,
    0x7F7F_FFFF, // largest finite
    0x7F80_0000, // infinity
    0x7F80_0001, // signalling NaN
    0x7FA0_0000, // signalling NaN, other payload
    0x7FC0_0000, // quiet NaN (numpy's nan)
    0x7FD2_3456, // quiet NaN with a payload
];

/// The self-check's cases: every operation on every pair of a fixed list of operands (every class and TestFloat-style boundaries) and their
/// negations (including `0xFFC00000`, the default NaN), plus structured pseudo-random pairs
/// (sparse and dense significands, near and far exponents), about 45,000 in all.
pub fn self_check_cases() -> Vec<(Op, u32, u32)> {
    let operands: Vec<u32> = SPECIAL.iter().flat_map(|&x| [x, x ^ 0x8000_0000]).collect();
    let mut cases = Vec::new();
    for op in Op::ALL {
        for &a in &operands {
            for &b in &operands {
                cases.push((op, a, b));
            }
        }
    }
    // A fixed xorshift stream: pairs near each other's exponent (cancellation, ties) or apart.
    let mut s: u64 = 0x6E78_7273_6877_5F31;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 32) as u32
    };
    for k in 0..2048u32 {
        let op = Op::ALL[(k % 8) as usize];
        let a = next();
        let frac = match next() % 3 {
            0 => next() & 0x007F_FFFF,
            1 => 1 << (next() % 23),
            _ => 0x007F_FFFF ^ (1 << (next() % 23)),
        };
        let exp_a = (a >> 23) & 0xFF;
        let exp_b = match next() % 4 {
            0 => exp_a,
            1 => exp_a.saturating_sub(next() % 30),
            2 => (exp_a + next() % 30).min(0xFF),
            _ => next() & 0xFF,
        };
        let b = (next() & 0x8000_0000) | (exp_b << 23) | frac;
        cases.push((op, a, b));
    }
    cases
}

/// Runs `cases` through `R` and through softf32; the first disagreement, named.
pub fn check<R: Real>(cases: &[(Op, u32, u32)]) -> Result<(), String> {
    for &(op, a, b) in cases {
        let (got, want) = (op.eval::<R>(a, b), op.eval::<F32>(a, b));
        if got != want {
            let operands = match op {
                Op::Sqrt | Op::Neg => format!("{a:#010x}"),
                _ => format!("{a:#010x}, {b:#010x}"),
            };
            return Err(format!(
                "{}({operands}) gave {got:#010x} in hardware, {want:#010x} in softf32",
                op.name()
            ));
        }
    }
    Ok(())
}

/// The slice kernels' results for `out`, `rows` (`a.len()` rows of `out.len()` cells) and the
/// row scalars `a`, computed in `R`, as bits: `add_row_products`, `scaled_rows_sum`, and
/// `add_assign` of the first row.
pub fn kernel_outputs<R: Real>(out: &[u32], rows: &[u32], a: &[u32]) -> [Vec<u32>; 3] {
    let cells_of = |bits: &[u32]| -> Vec<R> {
        bits.iter()
            .map(|&b| R::from_f32(F32::from_bits(b)))
            .collect()
    };
    let bits_of =
        |cells: Vec<R>| -> Vec<u32> { cells.iter().map(|c| c.to_f32().to_bits()).collect() };
    let (rows, a) = (cells_of(rows), cells_of(a));
    let mut results = [cells_of(out), cells_of(out), cells_of(out)];
    R::add_row_products(&mut results[0], &rows, &a);
    R::scaled_rows_sum(&mut results[1], &a, &rows);
    R::add_assign(&mut results[2], &rows);
    results.map(bits_of)
}

/// The slice kernels on the self-check's operands, laid out as vectors of lengths that reach
/// every vector path (a group of 64 elements, then registers the last of which is partly
/// filled): their results must be softf32's bit for bit. Returns the first disagreement.
pub fn check_kernels<R: Real>(cases: &[(Op, u32, u32)]) -> Result<(), String> {
    const NAMES: [&str; 3] = ["add_row_products", "scaled_rows_sum", "add_assign"];
    let values: Vec<u32> = cases.iter().flat_map(|&(_, a, b)| [a, b]).collect();
    for n in [75, 13] {
        for (w, window) in values.chunks_exact(3 * n + 2).enumerate() {
            let (out, rest) = window.split_at(n);
            let (rows, a) = rest.split_at(2 * n);
            let (got, want) = (
                kernel_outputs::<R>(out, rows, a),
                kernel_outputs::<F32>(out, rows, a),
            );
            if let Some(k) = (0..3).find(|&k| got[k] != want[k]) {
                let j = (0..n).find(|&j| got[k][j] != want[k][j]).unwrap_or(0);
                return Err(format!(
                    "{} on {n} elements (operands from self-check value {}) gave {:#010x} in \
                     hardware, {:#010x} in softf32 at element {j}",
                    NAMES[k],
                    w * (3 * n + 2),
                    got[k][j],
                    want[k][j]
                ));
            }
        }
    }
    Ok(())
}

/// Why the hardware path is not available.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// This target has no floating-point environment guard.
    Target(String),
    /// The self-check found a disagreement with softf32 (the message names the case).
    SelfCheck(String),
}

impl Unavailable {
    pub fn message(&self) -> &str {
        match self {
            Unavailable::Target(m) | Unavailable::SelfCheck(m) => m,
        }
    }
}

/// Environment variable that makes the self-check report a disagreement on its first case (for
/// testing the fallback in a child process); the value is ignored.
pub const FAULT_VARIABLE: &str = "NXRS_TEST_HW_SELFCHECK_FAULT";

/// Whether this process may train on the hardware: the target has a guard and the self-check
/// (run once, the first time this is asked, under the guard) agreed with softf32 on every case.
pub fn hardware() -> Result<(), &'static Unavailable> {
    static STATUS: OnceLock<Result<(), Unavailable>> = OnceLock::new();
    STATUS.get_or_init(probe).as_ref().map(|_| ())
}

fn probe() -> Result<(), Unavailable> {
    if !GUARDED_TARGET {
        return Err(Unavailable::Target(format!(
            "the hardware backend needs x86_64 or aarch64 (a floating-point environment guard); \
             this is {}",
            std::env::consts::ARCH
        )));
    }
    let cases = self_check_cases();
    let result = if std::env::var_os(FAULT_VARIABLE).is_some() {
        check::<Faulty>(&cases)
    } else {
        let _env = FpEnvGuard::new();
        check::<Native>(&cases).and_then(|()| check_kernels::<Native>(&cases))
    };
    result.map_err(|case| {
        Unavailable::SelfCheck(format!(
            "the hardware self-check disagreed with softf32: {case}"
        ))
    })
}

/// [`Native`] with one wrong bit in `+`'s result (the self-check's first case is `0 + 0`):
/// stands in for a CPU that disagrees, for the fallback test ([`FAULT_VARIABLE`]).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[repr(transparent)]
struct Faulty(Native);

// SAFETY: `#[repr(transparent)]` over Native, which is Pod.
unsafe impl bytemuck::Zeroable for Faulty {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for Faulty {}

/// `bits` with the bits of `mask` flipped.
fn flip(bits: u32, mask: u32) -> u32 {
    bits ^ mask
}

macro_rules! faulty_binary {
    ($trait:ident, $method:ident, $flip:expr) => {
        impl $trait for Faulty {
            type Output = Faulty;
            fn $method(self, rhs: Faulty) -> Faulty {
                let r = $trait::$method(self.0, rhs.0);
                Faulty(Native(f32::from_bits(flip(r.0.to_bits(), $flip))))
            }
        }
    };
}

faulty_binary!(Add, add, 1);
faulty_binary!(Sub, sub, 0);
faulty_binary!(Mul, mul, 0);
faulty_binary!(Div, div, 0);

impl Neg for Faulty {
    type Output = Faulty;
    fn neg(self) -> Faulty {
        Faulty(-self.0)
    }
}

impl Real for Faulty {
    const ZERO: Faulty = Faulty(Native::ZERO);
    const ONE: Faulty = Faulty(Native::ONE);
    type Fast = Faulty;
    type Environment = ();

    fn environment() {}

    fn from_f32(x: F32) -> Faulty {
        Faulty(Native::from_f32(x))
    }

    fn to_f32(self) -> F32 {
        self.0.to_f32()
    }

    fn sqrt(self) -> Faulty {
        Faulty(self.0.sqrt())
    }

    fn ieee_le(self, rhs: Faulty) -> bool {
        self.0.ieee_le(rhs.0)
    }

    fn ieee_lt(self, rhs: Faulty) -> bool {
        self.0.ieee_lt(rhs.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_self_check_passes_here() {
        if GUARDED_TARGET {
            assert_eq!(hardware(), Ok(()));
        }
    }

    #[test]
    fn a_disagreeing_arithmetic_is_caught_and_named() {
        let err = check::<Faulty>(&self_check_cases()).unwrap_err();
        assert_eq!(
            err,
            "add(0x00000000, 0x00000000) gave 0x00000001 in hardware, 0x00000000 in softf32"
        );
        let err = check_kernels::<Faulty>(&self_check_cases()).unwrap_err();
        assert!(
            err.contains(" on 75 elements (operands from self-check value 0)"),
            "{err}"
        );
    }
}
