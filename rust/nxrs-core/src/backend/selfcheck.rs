//! The hardware self-check: [`hardware`] runs every operation of [`Native`] and its slice
//! kernels on a fixed set of hard cases ([`self_check_cases`]) once per process, under the
//! guard, and allows the hardware path only if every result is softf32's.

#![allow(clippy::float_arithmetic)] // `Faulty` computes in native binary32 on purpose

use super::fpenv::{FpEnvGuard, GUARDED_TARGET};
use super::isa::Isa;
use super::native::Native;
use crate::arith::matmul::{MatMul, Matrix, MatrixMut, Order, Start};
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

/// A matrix product's operands for the kernel checks: `a` (`m x k`), `b` (`k x n`) and a start
/// row (`n` cells), as bit patterns.
#[derive(Clone, Debug)]
pub struct ProductCase {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Vec<u32>,
    pub b: Vec<u32>,
    pub row: Vec<u32>,
}

/// What [`ProductCase::outputs`] computes, in order (for messages).
pub const PRODUCT_OUTPUTS: [&str; 11] = [
    "+0 + A*B",
    "+0 + B*A",
    "row + A*B",
    "row + B*A",
    "column + A*B",
    "column + B*A",
    "matrix + A*B",
    "matrix + B*A",
    "A*B from the first term",
    "B*A from the first term",
    "row += B's first row",
];

impl ProductCase {
    /// The product with every start and operand order (from the first term only when `k > 0`),
    /// then `add_assign` of `b`'s first row onto the start row, computed in `R` by the kernels
    /// `R` runs, or by the definition one element at a time: the results as bits.
    pub fn outputs<R: Real>(&self, by_definition: bool) -> Vec<Vec<u32>> {
        let cells = |bits: &[u32]| -> Vec<R> {
            bits.iter()
                .map(|&b| R::from_f32(F32::from_bits(b)))
                .collect()
        };
        let bits =
            |cells: &[R]| -> Vec<u32> { cells.iter().map(|c| c.to_f32().to_bits()).collect() };
        let (a, b, row) = (cells(&self.a), cells(&self.b), cells(&self.row));
        let (m, n, k) = (self.m, self.n, self.k);
        // A start column and matrix from the row's cells (each row of the matrix shifted by one
        // more).
        let column: Vec<R> = (0..m).map(|i| row[i % n]).collect();
        let matrix: Vec<R> = (0..m * n).map(|e| row[(e + e / n) % n]).collect();
        let mut results = Vec::with_capacity(PRODUCT_OUTPUTS.len());
        let starts = [
            Start::Zero,
            Start::Row(&row),
            Start::Column(&column),
            Start::Matrix(&matrix),
            Start::FirstTerm,
        ];
        for start in starts {
            if matches!(start, Start::FirstTerm) && k == 0 {
                continue;
            }
            for order in [Order::AB, Order::BA] {
                // Cells the product must overwrite, not read.
                let mut c = vec![R::from_f32(F32::from_bits(0x7FC0_0ACE)); m * n];
                let mm = MatMul::new(
                    MatrixMut::new(&mut c, m, n),
                    start,
                    Matrix::new(&a, m, k),
                    Matrix::new(&b, k, n),
                    order,
                );
                if by_definition {
                    mm.by_elements();
                } else {
                    mm.run();
                }
                results.push(bits(&c));
            }
        }
        let mut sum = row.clone();
        if k > 0 {
            if by_definition {
                for (s, &x) in sum.iter_mut().zip(&b) {
                    *s = *s + x;
                }
            } else {
                R::add_assign(&mut sum, &b[..n]);
            }
        }
        results.push(bits(&sum));
        results
    }
}

/// The products the self-check runs: the self-check's operands (mostly special values) in short
/// chains, whose results are often not NaN, and ordinary values with some zeros and subnormals
/// in chains longer than a cache block, in shapes with edge tiles for every path's tile size.
pub fn product_cases(cases: &[(Op, u32, u32)]) -> Vec<ProductCase> {
    let special: Vec<u32> = cases.iter().flat_map(|&(_, a, b)| [a, b]).collect();
    let mut s: u64 = 0x6E78_7273_6D6D_5F31;
    let mut ordinary = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let x = (s >> 32) as u32;
        match x % 16 {
            0 => x & 0x8000_0000,                                     // a signed zero
            1 => x & 0x8000_FFFF,                                     // a subnormal
            _ => (0x3A00_0000 + x % 0x0A00_0000) | (x & 0x8000_0000), // 2^-11 .. 2^9
        }
    };
    let mut from_special = special.iter().copied().cycle();
    let mut products = Vec::new();
    for (m, n, k, values) in [
        (13, 37, 1, 0),
        (9, 70, 2, 0),
        (17, 33, 3, 0),
        (13, 37, 300, 1),
        (1, 5, 517, 1),
    ] {
        let mut next = || {
            if values == 0 {
                from_special.next().unwrap_or(0)
            } else {
                ordinary()
            }
        };
        products.push(ProductCase {
            m,
            n,
            k,
            a: (0..m * k).map(|_| next()).collect(),
            b: (0..k * n).map(|_| next()).collect(),
            row: (0..n).map(|_| next()).collect(),
        });
    }
    products
}

/// The matrix product (every start and operand order, on the path in use) and `add_assign` on
/// [`product_cases`]: their results must be the definition's in softf32 bit for bit. Returns
/// the first disagreement.
pub fn check_kernels<R: Real>(cases: &[(Op, u32, u32)]) -> Result<(), String> {
    for (p, case) in product_cases(cases).iter().enumerate() {
        let (got, want) = (case.outputs::<R>(false), case.outputs::<F32>(true));
        for (name, (got, want)) in PRODUCT_OUTPUTS.iter().zip(got.iter().zip(&want)) {
            if let Some(e) = (0..got.len()).find(|&e| got[e] != want[e]) {
                return Err(format!(
                    "the matrix product {name} ({} x {} x {}, product {p}) gave {:#010x} in \
                     hardware, {:#010x} in softf32 at element {e}",
                    case.m, case.k, case.n, got[e], want[e]
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
    /// [`ISA_VARIABLE`](super::ISA_VARIABLE) names no path this CPU has.
    Isa(String),
}

impl Unavailable {
    pub fn message(&self) -> &str {
        match self {
            Unavailable::Target(m) | Unavailable::SelfCheck(m) | Unavailable::Isa(m) => m,
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
    if let Err(why) = Isa::active() {
        return Err(Unavailable::Isa(why.to_owned()));
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
            err.starts_with("the matrix product +0 + A*B (13 x 1 x 37, product 0) gave"),
            "{err}"
        );
    }
}
