//! Nanoseconds per operation of softf32 beside the CPU's native f32 and Berkeley SoftFloat 3e.
//!
//! `cargo bench -p nxrs-core --bench softf32` benches native and softf32. To add the SoftFloat
//! column (the C library through the `softfloat-sys` crate, 8086-SSE specialisation, rounding to
//! nearest even), build with the `nxrs_softfloat` cfg, which needs cmake and a C compiler:
//!
//! ```text
//! RUSTFLAGS="--cfg nxrs_softfloat" cargo bench -p nxrs-core --bench softf32
//! ```
//!
//! How SoftFloat is built: `softfloat-sys` 0.1.4 compiles it with the `cc` crate (CMake only runs
//! in its `c99` dependency, for a program that prints C type sizes, so no CMake build type
//! applies). `cc` takes the optimisation level from the Cargo profile, so under `cargo bench`
//! (release settings) the flags are `-O3 -ffunction-sections -fdata-sections -fPIC -m64
//! -march=x86-64` plus the crate's `-DINLINE_LEVEL=5 -DSOFTFLOAT_FAST_INT64
//! -DSOFTFLOAT_FAST_DIV32TO16 -DSOFTFLOAT_FAST_DIV64TO32 -DSOFTFLOAT_ROUND_ODD`, and `$CFLAGS`
//! if set (appended). See them with `CC_ENABLE_DEBUG_OUTPUT=1` in the environment of the build:
//! the commands are then in `target/release/build/softfloat-sys-*/output`. Each SoftFloat
//! operation is an FFI call that cannot be inlined, as for any user of the C library.
//!
//! Every implementation runs over the same arrays of 4096 operands (fixed seed): normal values
//! within 2^±20 of one, random signs (`sqrt` and `ln` take their magnitudes), values spread over
//! `[-87.5, 88.5]` for `exp` (no overflow or underflow), over `[-14, 5.4]` for the normal CDF and
//! density and GELU (every one computed, none a shortcut), and random `i32`s of every magnitude
//! for `from_i32`. Before timing, the bench checks that all implementations give the same bits on
//! those arrays, except for the functions, whose native column is not correctly rounded
//! everywhere, so the bench prints how many results differ from softf32's instead: `exp` and `ln`
//! against the C library's `expf`/`logf` (through Rust's `f32::exp`/`f32::ln`); `normal_cdf` (`Φ`)
//! against `(1 + erff(x/√2)) / 2` with the `libm` crate's `erff` (musl's), and `gelu` against
//! `x` times that (PyTorch's exact GELU formula); `normal_pdf` (`φ`) against
//! `expf(-x²/2) / √(2π)`. Criterion measures each (op,
//! implementation); then an `Instant`-timed loop over the same kernels prints a table of ns/op
//! and the ratios softf32/SoftFloat and softf32/native, which criterion does not print. The table
//! times the implementations of an op in turn, many short rounds each, and keeps each one's
//! fastest round: on a shared machine, load then hits all columns alike instead of skewing a
//! ratio (timing each implementation in one block let a busy moment make one column 1.6x slow).
//!
//! "native" is one scalar SSE instruction per operation (inline assembly, see
//! `tests/support/native.rs`), so it is neither vectorised nor folded away; SoftFloat is called
//! through the FFI, one call per operation, as any user of the C library does.
#![allow(clippy::float_arithmetic)] // the native column is native f32 arithmetic, on purpose
#![allow(unexpected_cfgs)] // `nxrs_softfloat` comes from RUSTFLAGS (see Cargo.toml)

#[path = "../tests/support/native.rs"]
mod native;

use criterion::{Criterion, Throughput};
use nxrs_core::arith::Real;
use nxrs_core::softf32::F32;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::hint::black_box;
use std::time::{Duration, Instant};

const LEN: usize = 4096;

/// One implementation of one operation over whole arrays: `out[i] = op(a[i], b[i])` (unary
/// operations ignore `b`). The per-element operation is inlined into the loop; the indirection
/// is once per array.
type Kernel = Box<dyn Fn(&[u32], &[u32], &mut [u32])>;

fn kernel(op: impl Fn(u32, u32) -> u32 + 'static) -> Kernel {
    Box::new(move |a, b, out| {
        for ((x, y), o) in a.iter().zip(b).zip(out.iter_mut()) {
            *o = op(*x, *y);
        }
    })
}

fn soft(bits: u32) -> F32 {
    F32::from_bits(bits)
}

/// The implementations compared, in column order.
fn implementations() -> Vec<&'static str> {
    let mut names = vec!["native", "softf32"];
    if cfg!(nxrs_softfloat) {
        names.push("SoftFloat");
    }
    names
}

#[cfg(nxrs_softfloat)]
mod softfloat {
    use softfloat_sys::float32_t;

    pub fn set_rounding_to_nearest_even() {
        // SAFETY: writes SoftFloat's (thread-local) rounding mode.
        unsafe {
            softfloat_sys::softfloat_roundingMode_write_helper(
                softfloat_sys::softfloat_round_near_even,
            )
        };
    }

    fn f(v: u32) -> float32_t {
        float32_t { v }
    }

    // SAFETY (all): SoftFloat's functions are pure functions of their by-value arguments.
    pub fn add(a: u32, b: u32) -> u32 {
        unsafe { softfloat_sys::f32_add(f(a), f(b)).v }
    }
    pub fn sub(a: u32, b: u32) -> u32 {
        unsafe { softfloat_sys::f32_sub(f(a), f(b)).v }
    }
    pub fn mul(a: u32, b: u32) -> u32 {
        unsafe { softfloat_sys::f32_mul(f(a), f(b)).v }
    }
    pub fn div(a: u32, b: u32) -> u32 {
        unsafe { softfloat_sys::f32_div(f(a), f(b)).v }
    }
    pub fn sqrt(a: u32) -> u32 {
        unsafe { softfloat_sys::f32_sqrt(f(a)).v }
    }
    pub fn from_i32(i: u32) -> u32 {
        unsafe { softfloat_sys::i32_to_f32(i as i32).v }
    }
    pub fn to_i32_trunc(a: u32) -> u32 {
        unsafe { softfloat_sys::f32_to_i32_r_minMag(f(a), false) as i32 as u32 }
    }
}

/// Which operand arrays an operation reads.
#[derive(Clone, Copy, PartialEq)]
enum Input {
    Floats,
    Ints,
    ExpArgs,
    NormalArgs,
}

/// Operation name, which operand arrays it reads, its kernels in [`implementations`] order, and
/// whether they must all give the same bits.
struct Op {
    name: &'static str,
    input: Input,
    kernels: Vec<Kernel>,
    must_agree: bool,
}

fn ops() -> Vec<Op> {
    let op = |name, input, kernels| Op {
        name,
        input,
        kernels,
        must_agree: true,
    };
    #[allow(unused_mut)]
    let mut ops = vec![
        op(
            "add",
            Input::Floats,
            vec![
                kernel(native::add),
                kernel(|a, b| (soft(a) + soft(b)).to_bits()),
            ],
        ),
        op(
            "sub",
            Input::Floats,
            vec![
                kernel(native::sub),
                kernel(|a, b| (soft(a) - soft(b)).to_bits()),
            ],
        ),
        op(
            "mul",
            Input::Floats,
            vec![
                kernel(native::mul),
                kernel(|a, b| (soft(a) * soft(b)).to_bits()),
            ],
        ),
        op(
            "div",
            Input::Floats,
            vec![
                kernel(native::div),
                kernel(|a, b| (soft(a) / soft(b)).to_bits()),
            ],
        ),
        op(
            "sqrt",
            Input::Floats,
            vec![
                kernel(|a, _| native::sqrt(a & 0x7FFF_FFFF)),
                kernel(|a, _| soft(a).abs().sqrt().to_bits()),
            ],
        ),
        op(
            "from_i32",
            Input::Ints,
            vec![
                kernel(|i, _| native::from_i32(i as i32)),
                kernel(|i, _| F32::from_i32(i as i32).to_bits()),
            ],
        ),
        op(
            "to_i32_trunc",
            Input::Floats,
            vec![
                kernel(|a, _| native::to_i32_trunc(a) as u32),
                kernel(|a, _| soft(a).to_i32_trunc() as u32),
            ],
        ),
    ];
    #[cfg(nxrs_softfloat)]
    {
        // SoftFloat has no exp or log: those two ops (at the end) get no third column.
        let extra: [Kernel; 7] = [
            kernel(softfloat::add),
            kernel(softfloat::sub),
            kernel(softfloat::mul),
            kernel(softfloat::div),
            kernel(|a, _| softfloat::sqrt(a & 0x7FFF_FFFF)),
            kernel(|i, _| softfloat::from_i32(i)),
            kernel(|a, _| softfloat::to_i32_trunc(a)),
        ];
        for (op, k) in ops.iter_mut().zip(extra) {
            op.kernels.push(k);
        }
    }
    // exp and ln against the C library's expf and logf (not correctly rounded everywhere).
    ops.push(Op {
        name: "exp",
        input: Input::ExpArgs,
        kernels: vec![
            kernel(|a, _| f32::from_bits(a).exp().to_bits()),
            kernel(|a, _| soft(a).exp().to_bits()),
        ],
        must_agree: false,
    });
    ops.push(Op {
        name: "ln",
        input: Input::Floats,
        kernels: vec![
            kernel(|a, _| f32::from_bits(a & 0x7FFF_FFFF).ln().to_bits()),
            kernel(|a, _| soft(a).abs().ln().to_bits()),
        ],
        must_agree: false,
    });
    // Φ, φ and GELU against single-precision formulas (not correctly rounded).
    let native_cdf = |x: f32| 0.5 * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2));
    ops.push(Op {
        name: "normal_cdf",
        input: Input::NormalArgs,
        kernels: vec![
            kernel(move |a, _| native_cdf(f32::from_bits(a)).to_bits()),
            kernel(|a, _| soft(a).normal_cdf().to_bits()),
        ],
        must_agree: false,
    });
    ops.push(Op {
        name: "normal_pdf",
        input: Input::NormalArgs,
        kernels: vec![
            kernel(|a, _| {
                let x = f32::from_bits(a);
                ((-0.5 * x * x).exp() * 0.398_942_3).to_bits()
            }),
            kernel(|a, _| soft(a).normal_pdf().to_bits()),
        ],
        must_agree: false,
    });
    ops.push(Op {
        name: "gelu",
        input: Input::NormalArgs,
        kernels: vec![
            kernel(move |a, _| {
                let x = f32::from_bits(a);
                (x * native_cdf(x)).to_bits()
            }),
            kernel(|a, _| soft(a).gelu().to_bits()),
        ],
        must_agree: false,
    });
    ops
}

/// The operand arrays: floats `a` and `b`, integers, and arguments for `exp` and for the normal
/// distribution's functions.
struct Operands {
    a: Vec<u32>,
    b: Vec<u32>,
    ints: Vec<u32>,
    exp_args: Vec<u32>,
    normal_args: Vec<u32>,
}

impl Operands {
    fn of(&self, op: &Op) -> (&[u32], &[u32]) {
        match op.input {
            Input::Floats => (&self.a, &self.b),
            Input::Ints => (&self.ints, &self.b),
            Input::ExpArgs => (&self.exp_args, &self.b),
            Input::NormalArgs => (&self.normal_args, &self.b),
        }
    }
}

fn operands() -> Operands {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x05EE_DF32);
    let mut normal = || {
        let r = rng.next_u64();
        let exp = 127 - 20 + (r % 41) as u32;
        ((r >> 32) as u32 & 0x807F_FFFF) | exp << 23
    };
    let a = (0..LEN).map(|_| normal()).collect();
    let b = (0..LEN).map(|_| normal()).collect();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x05EE_D132);
    let ints = (0..LEN)
        .map(|_| {
            let r = rng.next_u64();
            (r as u32) >> (r >> 59) // every magnitude from 2^0 to 2^32
        })
        .collect();
    let uniform = |seed: u64, low: f64, high: f64| -> Vec<u32> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        (0..LEN)
            .map(|_| ((rng.next_u64() >> 11) as f64 * 2f64.powi(-53) * (high - low) + low) as f32)
            .map(f32::to_bits)
            .collect()
    };
    let exp_args = uniform(0x05EE_DE4B, -87.5, 88.5);
    let normal_args = uniform(0x05EE_DCDF, -14.0, 5.4);
    Operands {
        a,
        b,
        ints,
        exp_args,
        normal_args,
    }
}

fn main() {
    #[cfg(nxrs_softfloat)]
    softfloat::set_rounding_to_nearest_even();
    let names = implementations();
    let ops = ops();
    let operands = operands();

    // The implementations must agree bit for bit on these arrays, or the timings compare
    // different work.
    for op in &ops {
        let (x, y) = operands.of(op);
        let results: Vec<Vec<u32>> = op
            .kernels
            .iter()
            .map(|k| {
                let mut out = vec![0; LEN];
                k(x, y, &mut out);
                out
            })
            .collect();
        for (name, result) in names.iter().zip(&results) {
            let differ = result
                .iter()
                .zip(&results[0])
                .filter(|(x, y)| x != y)
                .count();
            if op.must_agree {
                assert!(differ == 0, "{}: {name} differs from native", op.name);
            } else if differ > 0 {
                println!(
                    "{}: {name} differs from native on {differ} of {LEN} operands",
                    op.name
                );
            }
        }
    }

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mut out = vec![0u32; LEN];
    for op in &ops {
        let (x, y) = operands.of(op);
        let mut group = criterion.benchmark_group(op.name);
        group.throughput(Throughput::Elements(LEN as u64));
        for (name, k) in names.iter().zip(&op.kernels) {
            group.bench_function(*name, |bencher| {
                bencher.iter(|| k(black_box(x), black_box(y), black_box(&mut out)));
            });
        }
        group.finish();
    }
    criterion.final_summary();

    // Only under `cargo bench` (which passes --bench), not when `cargo test` runs the bench once.
    if std::env::args().any(|arg| arg == "--bench") {
        ratio_table(&names, &ops, &operands);
    }
}

/// Times every kernel with `Instant` (the fastest of 200 rounds of 8 passes over the arrays,
/// the implementations of an op taking turns round by round) and prints ns per operation and the
/// ratios.
fn ratio_table(names: &[&str], ops: &[Op], operands: &Operands) {
    const ROUNDS: usize = 200;
    const PASSES: usize = 8;
    let mut out = vec![0u32; LEN];
    let mut time = |kernels: &[Kernel], x: &[u32], y: &[u32]| {
        let mut best = vec![f64::INFINITY; kernels.len()];
        for _ in 0..ROUNDS {
            for (k, best) in kernels.iter().zip(&mut best) {
                let start = Instant::now();
                for _ in 0..PASSES {
                    k(black_box(x), black_box(y), black_box(&mut out));
                }
                let ns = start.elapsed().as_secs_f64() * 1e9 / (PASSES * LEN) as f64;
                *best = best.min(ns);
            }
        }
        best
    };
    println!();
    println!(
        "softf32 summary: ns per operation, fastest of {ROUNDS} interleaved rounds over the same {LEN} operands"
    );
    let mut header = format!("{:<14}", "op");
    for name in names {
        header += &format!("{name:>11}");
    }
    header += &format!("{:>20}", "softf32/native");
    if names.len() > 2 {
        header += &format!("{:>20}", "softf32/SoftFloat");
    }
    println!("{header}");
    for op in ops {
        let (x, y) = operands.of(op);
        let ns = time(&op.kernels, x, y);
        let mut line = format!("{:<14}", op.name);
        for t in &ns {
            line += &format!("{t:>11.2}");
        }
        if ns.len() < names.len() {
            line += &format!("{:>11}", "-");
        }
        line += &format!("{:>20.2}", ns[1] / ns[0]);
        if let Some(softfloat) = ns.get(2) {
            line += &format!("{:>20.2}", ns[1] / softfloat);
        }
        println!("{line}");
    }
    if names.len() > 2 {
        println!("(SoftFloat: softfloat-sys's build, `cc` at this Cargo profile's opt-level, -O3 under `cargo bench`; flags in the bench's header)");
    }
    if names.len() == 2 {
        println!("(SoftFloat column: build with RUSTFLAGS=\"--cfg nxrs_softfloat\", see the bench's header)");
    }
}
