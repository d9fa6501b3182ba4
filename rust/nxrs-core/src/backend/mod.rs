//! The hardware-float backend: [`Native`], the CPU's own binary32 arithmetic behind [`Real`],
//! verified to give softf32's bits (`docs/TRAINING.md`, section 14).
//!
//! Three things make hardware `+ - * /` and `sqrt` give the same bits as [`F32`]:
//!
//! - **The operations are IEEE's.** Each is a single binary32 operation rounded to nearest even
//!   (Rust never contracts `a * b + c` into a fused multiply-add, and `f32::sqrt` is the
//!   correctly rounded square root), so every result that is not a NaN is unique.
//! - **NaN results are softf32's.** Which NaN comes back depends on the CPU (x86 returns the
//!   negative default NaN `0xFFC00000`, AArch64 the positive `0x7FC00000`) and, when both
//!   operands are NaNs, on the operand order the compiler chose (`a + b` may become `b + a`).
//!   So a NaN result is replaced by softf32's NaN for the same operands ([`F32::nan_result`]):
//!   selects on bit patterns, no branch, so loops of these operations still vectorise.
//! - **The floating-point environment is the default one** while the hardware computes: a
//!   [`FpEnvGuard`] sets round-to-nearest and clears flush-to-zero and denormals-are-zero
//!   (which another library in the process can turn on), and restores the register afterwards.
//!
//! [`hardware`] checks all of that once per process on a fixed set of hard cases
//! ([`self_check_cases`]) before the hardware path is used; any disagreement disables it.

#![allow(clippy::float_arithmetic)] // this module is the hardware backend: native binary32 is its point

mod lanes;

use crate::arith::Real;
use crate::softf32::F32;
use core::ops::{Add, Div, Mul, Neg, Sub};
use lanes::Chain;
use std::hint::black_box;
use std::sync::OnceLock;

/// Defines a hardware binary32 type: `+ - * /` and `sqrt` by the CPU, their result passed
/// through `result` (given the operands and the CPU's result; `sqrt` passes its operand twice),
/// negation by the sign bit, `==` on bit patterns, and the rest of [`Real`] from `extra`.
macro_rules! hardware_float {
    (
        $(#[$doc:meta])*
        $name:ident, fast: $fast:ty,
        result: |$a:ident, $b:ident, $r:ident| $result:expr,
        extra: { $($extra:item)* }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        #[repr(transparent)]
        pub struct $name(pub f32);

        // SAFETY: `#[repr(transparent)]` over f32: no padding, every bit pattern is a valid
        // value, and all-zero bits are +0; the type is `Copy` and `'static`.
        unsafe impl bytemuck::Zeroable for $name {}
        // SAFETY: as above.
        unsafe impl bytemuck::Pod for $name {}

        impl PartialEq for $name {
            fn eq(&self, other: &$name) -> bool {
                self.0.to_bits() == other.0.to_bits()
            }
        }

        impl $name {
            /// The operation's result as this type.
            #[inline(always)]
            fn result($a: $name, $b: $name, $r: f32) -> $name {
                $name($result)
            }
        }

        hardware_float!(@binary $name, Add, add, +);
        hardware_float!(@binary $name, Sub, sub, -);
        hardware_float!(@binary $name, Mul, mul, *);
        hardware_float!(@binary $name, Div, div, /);

        impl Neg for $name {
            type Output = $name;

            /// Flips the sign bit (of NaNs too), as softf32 does.
            #[inline(always)]
            fn neg(self) -> $name {
                $name(f32::from_bits(self.0.to_bits() ^ 0x8000_0000))
            }
        }

        impl Real for $name {
            const ZERO: $name = $name(0.0);
            const ONE: $name = $name(1.0);
            type Fast = $fast;
            type Environment = FpEnvGuard;

            #[inline(always)]
            fn environment() -> FpEnvGuard {
                FpEnvGuard::new()
            }

            #[inline(always)]
            fn from_f32(x: F32) -> $name {
                $name(f32::from_bits(x.to_bits()))
            }

            #[inline(always)]
            fn to_f32(self) -> F32 {
                F32::from_bits(self.0.to_bits())
            }

            #[inline(always)]
            fn is_nan(self) -> bool {
                self.0.is_nan()
            }

            #[inline(always)]
            fn sqrt(self) -> $name {
                $name::result(self, self, self.0.sqrt())
            }

            #[inline(always)]
            fn vectorized<T>(f: impl FnOnce() -> T) -> T {
                vector_call(f)
            }

            #[inline(always)]
            fn ieee_le(self, rhs: $name) -> bool {
                self.0 <= rhs.0
            }

            #[inline(always)]
            fn ieee_lt(self, rhs: $name) -> bool {
                self.0 < rhs.0
            }

            $($extra)*
        }
    };
    (@binary $name:ident, $trait:ident, $method:ident, $op:tt) => {
        impl $trait for $name {
            type Output = $name;

            #[inline(always)]
            fn $method(self, rhs: $name) -> $name {
                $name::result(self, rhs, self.0 $op rhs.0)
            }
        }
    };
}

hardware_float! {
    /// A binary32 value computed by the CPU's floating-point unit. Same layout as [`F32`] (both
    /// are `#[repr(transparent)]` over 32 bits), so tensors stored as `F32` are viewed as
    /// `Native` with `bytemuck` and no copy. `==` compares bit patterns, as on `F32`. A NaN
    /// result is softf32's NaN for the same operands ([`F32::nan_result`]).
    Native, fast: Unchecked,
    result: |a, b, r| if r.is_nan() {
        f32::from_bits(F32::nan_result(a.to_f32(), b.to_f32()).to_bits())
    } else {
        r
    },
    extra: {
        #[inline(always)]
        fn add_row_products(out: &mut [Native], rows: &[Native], a: &[Native]) {
            Chain::RowProducts.apply(out, rows, a);
        }

        #[inline(always)]
        fn scaled_rows_sum(out: &mut [Native], a: &[Native], rows: &[Native]) {
            Chain::ScaledRows.apply(out, rows, a);
        }

        #[inline(always)]
        fn add_assign(acc: &mut [Native], x: &[Native]) {
            let n = acc.len().min(x.len());
            Chain::Sum.apply(&mut acc[..n], &x[..n], &[]);
        }
    }
}

hardware_float! {
    /// The CPU's binary32 arithmetic without [`Native`]'s NaN rule: [`Native`]'s
    /// [`Real::Fast`], for kernels that check their outputs for NaNs and recompute with
    /// [`Native`] when they find one. Same layout as [`F32`].
    Unchecked, fast: Unchecked,
    result: |_a, _b, r| r,
    extra: {}
}

/// Calls `f` inside a function compiled for AVX-512 or AVX2 when the CPU has them (detected at
/// run time; the detection is cached by std), so the slice kernels inlined into `f` use 16 or 8
/// lanes instead of SSE2's 4. Only these features are enabled, never FMA: every operation stays
/// a separate multiply or add (Rust does not contract them; the features only widen the lanes).
/// On AArch64, NEON is part of the baseline and `f` runs as it is.
#[inline(always)]
fn vector_call<T>(f: impl FnOnce() -> T) -> T {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { with_avx512(f) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { with_avx2(f) };
        }
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn with_avx2<T>(f: impl FnOnce() -> T) -> T {
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn with_avx512<T>(f: impl FnOnce() -> T) -> T {
    f()
}

/// Whether this target has a floating-point environment guard (x86_64 and AArch64).
pub const GUARDED_TARGET: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// Saves the thread's floating-point control register, sets IEEE's default environment (round to
/// nearest even, subnormals kept, exceptions masked) and restores the saved value when dropped.
///
/// x86_64: MXCSR, clearing FTZ (bit 15), DAZ (bit 6) and the rounding control (bits 13-14) and
/// setting the six exception masks (bits 7-12). AArch64: FPCR, clearing FZ (bit 24), the rounding
/// mode (bits 22-23), FIZ and AH (bits 0-1, FEAT_AFP) and the trap enables (bits 8-12, 15). On
/// other targets it does nothing (and the hardware path is not available).
#[derive(Debug)]
#[must_use = "the environment is restored when the guard is dropped"]
pub struct FpEnvGuard {
    #[allow(dead_code)] // read on the guarded targets only
    saved: u64,
}

impl FpEnvGuard {
    /// Sets the default environment on this thread until the guard is dropped.
    #[inline]
    pub fn new() -> FpEnvGuard {
        let saved = read_control();
        write_control(default_control(saved));
        FpEnvGuard { saved }
    }
}

impl Default for FpEnvGuard {
    fn default() -> FpEnvGuard {
        FpEnvGuard::new()
    }
}

impl Drop for FpEnvGuard {
    #[inline]
    fn drop(&mut self) {
        write_control(self.saved);
    }
}

/// The thread's floating-point control register (MXCSR or FPCR; 0 elsewhere).
pub fn read_control() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let mut csr: u32 = 0;
        // SAFETY: stmxcsr stores the 32-bit MXCSR to the pointed-to local (SSE is baseline).
        unsafe {
            core::arch::asm!("stmxcsr [{p}]", p = in(reg) &mut csr, options(nostack, preserves_flags));
        }
        u64::from(csr)
    }
    #[cfg(target_arch = "aarch64")]
    {
        let fpcr: u64;
        // SAFETY: reading FPCR is allowed at EL0 and has no side effects.
        unsafe {
            core::arch::asm!("mrs {r}, fpcr", r = out(reg) fpcr, options(nomem, nostack, preserves_flags));
        }
        fpcr
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        0
    }
}

/// `value` with the default environment's bits (see [`FpEnvGuard`]).
pub fn default_control(value: u64) -> u64 {
    if cfg!(target_arch = "x86_64") {
        const FTZ: u64 = 1 << 15;
        const DAZ: u64 = 1 << 6;
        const ROUNDING: u64 = 0b11 << 13;
        const MASKS: u64 = 0b11_1111 << 7;
        (value & !(FTZ | DAZ | ROUNDING)) | MASKS
    } else if cfg!(target_arch = "aarch64") {
        const FZ: u64 = 1 << 24;
        const RMODE: u64 = 0b11 << 22;
        const FIZ_AH: u64 = 0b11;
        const TRAPS: u64 = (0b1_1111 << 8) | (1 << 15);
        value & !(FZ | RMODE | FIZ_AH | TRAPS)
    } else {
        value
    }
}

/// Sets the thread's floating-point control register to `value`'s writable bits (nothing on
/// other targets). The other bits are dropped: on x86_64 `ldmxcsr` faults on a value with a
/// reserved bit set, so only the bits the CPU reports as writable (its MXCSR_MASK) are
/// loaded; on AArch64 only FPCR's defined fields are written (the rest are RES0). Any value is
/// therefore safe to pass, whatever it came from.
///
/// The hardware path keeps its own environment with [`FpEnvGuard`]; this is public so that
/// tests can put the thread in the environment another library might leave (FTZ/DAZ on).
pub fn write_control(value: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        // Truncating drops bits 32-63, which MXCSR does not have.
        let csr = value as u32 & mxcsr_writable();
        // SAFETY: ldmxcsr loads MXCSR from the local, which has no bit outside MXCSR_MASK set
        // (masked just above), so it cannot fault.
        unsafe {
            core::arch::asm!("ldmxcsr [{p}]", p = in(reg) &csr, options(nostack, readonly, preserves_flags));
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let fpcr = value & FPCR_DEFINED;
        // SAFETY: writing FPCR is allowed at EL0; it only changes floating-point behaviour, and
        // the value sets none of its RES0 bits (masked just above).
        unsafe {
            core::arch::asm!("msr fpcr, {r}", r = in(reg) fpcr, options(nostack, preserves_flags));
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = value;
    }
}

/// FPCR's defined fields (Arm ARM, FPCR): FIZ, AH, NEP (bits 0-2), the trap enables IOE-IXE
/// (8-12), and IDE, Len, FZ16, Stride, RMode, FZ, DN, AHP (15-26). The other bits are RES0.
#[cfg(target_arch = "aarch64")]
const FPCR_DEFINED: u64 = 0b111 | (0b1_1111 << 8) | (0xFFF << 15);

/// The MXCSR bits this CPU lets software set: its MXCSR_MASK, which FXSAVE stores at byte 28 of
/// its area (Intel SDM vol. 1, 11.6.6; 0 there means the default 0xFFBF, the first SSE CPUs
/// without DAZ). Read once per process.
#[cfg(target_arch = "x86_64")]
fn mxcsr_writable() -> u32 {
    static MASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MASK.get_or_init(|| {
        /// FXSAVE's 512-byte area, which must be 16-byte aligned.
        #[repr(C, align(16))]
        struct Area([u8; 512]);
        let mut area = Area([0; 512]);
        // SAFETY: fxsave stores 512 bytes to the pointed-to area, which is 512 bytes long and
        // 16-byte aligned (`Area`); every x86_64 CPU has FXSAVE (the architecture requires FXSR).
        unsafe {
            core::arch::asm!("fxsave [{p}]", p = in(reg) area.0.as_mut_ptr(), options(nostack, preserves_flags));
        }
        let mask = u32::from_le_bytes([area.0[28], area.0[29], area.0[30], area.0[31]]);
        if mask == 0 {
            0xFFBF
        } else {
            mask
        }
    })
}

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

/// Which arithmetic a trainer computes with. Not part of a run's configuration or state: both
/// give the same bits, so a run checkpointed under one resumes under the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Backend {
    /// softf32, integer operations: the definition, on every target.
    #[default]
    Soft,
    /// [`Native`] under an [`FpEnvGuard`], where [`hardware`] allows it.
    Hw,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Soft => "soft",
            Backend::Hw => "hw",
        }
    }
}

/// What a user asks for: a backend, or `Auto` (the hardware where [`hardware`] allows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum BackendChoice {
    #[default]
    Auto,
    Hw,
    Soft,
}

/// A resolved choice: the backend, and the self-check's failure when `Auto` fell back to soft
/// because of it (to show as a warning; a target without a guard falls back silently).
pub type Resolved = (Backend, Option<&'static str>);

impl BackendChoice {
    pub const NAMES: [&'static str; 3] = ["auto", "hw", "soft"];

    pub fn from_name(name: &str) -> Option<BackendChoice> {
        match name {
            "auto" => Some(BackendChoice::Auto),
            "hw" => Some(BackendChoice::Hw),
            "soft" => Some(BackendChoice::Soft),
            _ => None,
        }
    }

    /// The backend this choice gives in this process. `Hw` where the hardware is not available
    /// is an `Error::Config` saying why.
    pub fn resolve(self) -> crate::Result<Resolved> {
        self.resolve_with(hardware())
    }

    /// [`BackendChoice::resolve`] given the hardware's availability.
    pub fn resolve_with(
        self,
        hardware: Result<(), &'static Unavailable>,
    ) -> crate::Result<Resolved> {
        match (self, hardware) {
            (BackendChoice::Soft, _) => Ok((Backend::Soft, None)),
            (BackendChoice::Hw | BackendChoice::Auto, Ok(())) => Ok((Backend::Hw, None)),
            (BackendChoice::Hw, Err(why)) => Err(crate::Error::Config(format!(
                "backend='hw' is not available: {}",
                why.message()
            ))),
            (BackendChoice::Auto, Err(Unavailable::Target(_))) => Ok((Backend::Soft, None)),
            (BackendChoice::Auto, Err(why @ Unavailable::SelfCheck(_))) => {
                Ok((Backend::Soft, Some(why.message())))
            }
        }
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

    #[test]
    fn auto_falls_back_to_soft_with_the_reason() {
        static FAILED: Unavailable = Unavailable::SelfCheck(String::new());
        let failed = Err(&FAILED);
        assert_eq!(
            BackendChoice::Auto.resolve_with(failed).unwrap(),
            (Backend::Soft, Some(""))
        );
        assert!(matches!(
            BackendChoice::Hw.resolve_with(failed),
            Err(crate::Error::Config(m)) if m.starts_with("backend='hw' is not available")
        ));
        assert_eq!(
            BackendChoice::Soft.resolve_with(failed).unwrap(),
            (Backend::Soft, None)
        );
        assert_eq!(
            BackendChoice::Auto.resolve_with(Ok(())).unwrap(),
            (Backend::Hw, None)
        );
    }

    /// A value with reserved bits set (which would make `ldmxcsr` fault: SIGSEGV) is written
    /// without them: the register reads back as the value's writable part.
    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn reserved_bits_are_never_written() {
        // The bits this CPU reserves (on x86_64 they depend on the CPU: AMD's bit 17, MM, is
        // writable where it exists), and bits 32-63, which MXCSR does not have.
        #[cfg(target_arch = "x86_64")]
        let reserved = !u64::from(mxcsr_writable());
        #[cfg(target_arch = "aarch64")]
        let reserved = !FPCR_DEFINED;
        assert_ne!(
            reserved & 0xFFFF_FFFF,
            0,
            "reserved bits inside the register"
        );
        let before = read_control();
        write_control(before | reserved);
        let after = read_control();
        write_control(before);
        assert_eq!(after, before);
        assert_eq!(read_control(), before);
        #[cfg(target_arch = "x86_64")]
        {
            // The mask keeps every documented mode bit: flags, masks, rounding, FTZ (and DAZ,
            // which the guard's test sets too), and never bits 32-63.
            assert_eq!(mxcsr_writable() & 0xFFFF, 0xFFFF);
            assert_eq!(reserved >> 32, 0xFFFF_FFFF);
        }
    }

    #[test]
    fn the_guard_clears_flush_to_zero_and_restores_the_register() {
        if !GUARDED_TARGET {
            return;
        }
        let before = read_control();
        let flushing = if cfg!(target_arch = "x86_64") {
            before | (1 << 15) | (1 << 6)
        } else {
            before | (1 << 24)
        };
        write_control(flushing);
        // The operands pass through black_box where they are used, so that the compiler (which
        // assumes the default environment) cannot compute the product once for both places.
        let product = || {
            let tiny = black_box(Native(f32::from_bits(0x0080_0000)));
            black_box(tiny * black_box(Native(0.5))).0.to_bits()
        };
        // With flush-to-zero the product of the smallest normal and 1/2 is 0.
        let flushed = product();
        // MXCSR's status flags (bits 0-5) record what the multiplications raised.
        let flags: u64 = if cfg!(target_arch = "x86_64") {
            0x3F
        } else {
            0
        };
        let flushing = read_control();
        let kept = {
            let _env = FpEnvGuard::new();
            assert_eq!(read_control() & !flags, default_control(flushing) & !flags);
            product()
        };
        assert_eq!(read_control(), flushing);
        write_control(before);
        assert_eq!(flushed, 0);
        assert_eq!(kept, 0x0040_0000);
    }
}
