//! The peak float32 rate of one core without FMA: a register-only microbenchmark for
//! `bench/bench_train.py` (the speed table's "no-FMA peak"), which runs it with
//! `cargo run --release --example peak_flops -p nxrs-core` and reads the one JSON line it prints.
//!
//! Each kernel keeps independent accumulator chains in vector registers (no loads or stores
//! inside the loop): "mul_add" runs separate multiply chains (`p = p * m`) and add chains
//! (`s = s + a`) side by side, the instruction mix of a fixed-order, never-fused matrix
//! multiply; "fma" runs fused multiply-add chains (`p = p * m + a`, 2 flops per lane) for
//! comparison. There are more chains than a multiply's or an add's latency times the pipes that
//! run it on current x86 cores (Zen 2-4: latency 3-4, two pipes each), so the pipes, not the
//! latency, set the rate. The operands are hidden from the compiler with `black_box`, and the
//! values stay finite and normal (x * 1, then + 1 up to 2^24, where it stops growing), so no
//! special-value slow path is ever taken.
//!
//! Output, one line: `{"arch": ..., "features": {...}, "iters": N, "kernels": [{"name", "isa",
//! "fma", "flops", "ns"}, ...]}` with the fastest of `RUNS` timed runs (after one untimed) per
//! kernel; a kernel whose ISA the CPU lacks is left out. Integers only: the caller divides (the
//! workspace denies float arithmetic, and a microbenchmark needs none).

use std::time::Instant;

/// Loop iterations per timed run: ~20 ms per kernel at 3-4 GHz, short enough that some runs
/// fall between the time slices of other work on a shared machine.
const ITERS: u64 = 20_000_000;
/// Timed runs per kernel; the fastest counts (other work on the machine only slows a run).
const RUNS: usize = 25;

/// One kernel's best run.
struct Measured {
    name: &'static str,
    isa: &'static str,
    fma: bool,
    flops: u64,
    ns: u128,
}

/// Runs `kernel` once untimed (clock ramp-up), then `RUNS` times; the fastest time.
fn time_best(kernel: &dyn Fn(u64) -> f32) -> u128 {
    std::hint::black_box(kernel(ITERS));
    (0..RUNS)
        .map(|_| {
            let t0 = Instant::now();
            std::hint::black_box(kernel(ITERS));
            t0.elapsed().as_nanos()
        })
        .min()
        .unwrap_or(0)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// Separate chains per iteration of [`avx2_mul_add`]: 7 multiplies and 7 adds of 8 lanes
    /// (14 + 2 constants: all 16 ymm registers; with 6 + 6 the pipes idled now and then on
    /// Zen 3, 79 against 85 GFLOP/s).
    pub const AVX2_MUL_ADD_FLOPS: u64 = (7 + 7) * 8;
    /// [`avx2_fma`]: 10 FMA chains of 8 lanes, 2 flops each.
    pub const AVX2_FMA_FLOPS: u64 = 10 * 8 * 2;
    /// [`avx512_mul_add`]: 12 multiplies and 12 adds of 16 lanes (of 32 zmm registers).
    pub const AVX512_MUL_ADD_FLOPS: u64 = (12 + 12) * 16;
    /// [`avx512_fma`]: 16 FMA chains of 16 lanes, 2 flops each.
    pub const AVX512_FMA_FLOPS: u64 = 16 * 16 * 2;

    /// Applies `$f(v, args...)` to each accumulator `v`, as straight-line code (no arrays, so every chain
    /// lives in its own register).
    macro_rules! each {
        ($f:ident($a:expr); $($v:ident),+) => { $( $v = $f($v, $a); )+ };
        ($f:ident($a:expr, $b:expr); $($v:ident),+) => { $( $v = $f($v, $a, $b); )+ };
    }

    #[target_feature(enable = "avx2")]
    pub fn avx2_mul_add(iters: u64) -> f32 {
        let m = _mm256_set1_ps(black_box(1.0));
        let a = _mm256_set1_ps(black_box(1.0));
        let z = _mm256_set1_ps(black_box(0.0));
        let (mut p0, mut p1, mut p2, mut p3, mut p4, mut p5, mut p6) = (a, a, a, a, a, a, a);
        let (mut s0, mut s1, mut s2, mut s3, mut s4, mut s5, mut s6) = (z, z, z, z, z, z, z);
        for _ in 0..iters {
            each!(_mm256_mul_ps(m); p0, p1, p2, p3, p4, p5, p6);
            each!(_mm256_add_ps(a); s0, s1, s2, s3, s4, s5, s6);
        }
        let p = _mm256_add_ps(
            _mm256_add_ps(_mm256_add_ps(p0, p1), _mm256_add_ps(p2, p3)),
            _mm256_add_ps(p4, _mm256_add_ps(p5, p6)),
        );
        let s = _mm256_add_ps(
            _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)),
            _mm256_add_ps(s4, _mm256_add_ps(s5, s6)),
        );
        _mm_cvtss_f32(_mm256_castps256_ps128(_mm256_add_ps(p, s)))
    }

    #[target_feature(enable = "avx2,fma")]
    pub fn avx2_fma(iters: u64) -> f32 {
        let m = _mm256_set1_ps(black_box(1.0));
        let a = _mm256_set1_ps(black_box(1.0));
        let z = _mm256_set1_ps(black_box(0.0));
        let (mut p0, mut p1, mut p2, mut p3, mut p4) = (z, z, z, z, z);
        let (mut p5, mut p6, mut p7, mut p8, mut p9) = (z, z, z, z, z);
        for _ in 0..iters {
            each!(_mm256_fmadd_ps(m, a); p0, p1, p2, p3, p4, p5, p6, p7, p8, p9);
        }
        let p = _mm256_add_ps(
            _mm256_add_ps(
                _mm256_add_ps(_mm256_add_ps(p0, p1), _mm256_add_ps(p2, p3)),
                _mm256_add_ps(p4, p5),
            ),
            _mm256_add_ps(_mm256_add_ps(p6, p7), _mm256_add_ps(p8, p9)),
        );
        _mm_cvtss_f32(_mm256_castps256_ps128(p))
    }

    #[target_feature(enable = "avx512f")]
    pub fn avx512_mul_add(iters: u64) -> f32 {
        let m = _mm512_set1_ps(black_box(1.0));
        let a = _mm512_set1_ps(black_box(1.0));
        let z = _mm512_set1_ps(black_box(0.0));
        let (mut p0, mut p1, mut p2, mut p3, mut p4, mut p5) = (a, a, a, a, a, a);
        let (mut p6, mut p7, mut p8, mut p9, mut pa, mut pb) = (a, a, a, a, a, a);
        let (mut s0, mut s1, mut s2, mut s3, mut s4, mut s5) = (z, z, z, z, z, z);
        let (mut s6, mut s7, mut s8, mut s9, mut sa, mut sb) = (z, z, z, z, z, z);
        for _ in 0..iters {
            each!(_mm512_mul_ps(m); p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, pa, pb);
            each!(_mm512_add_ps(a); s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, sa, sb);
        }
        let mut acc = z;
        for v in [p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, pa, pb] {
            acc = _mm512_add_ps(acc, v);
        }
        for v in [s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, sa, sb] {
            acc = _mm512_add_ps(acc, v);
        }
        _mm_cvtss_f32(_mm512_castps512_ps128(acc))
    }

    #[target_feature(enable = "avx512f")]
    pub fn avx512_fma(iters: u64) -> f32 {
        let m = _mm512_set1_ps(black_box(1.0));
        let a = _mm512_set1_ps(black_box(1.0));
        let z = _mm512_set1_ps(black_box(0.0));
        let (mut p0, mut p1, mut p2, mut p3, mut p4, mut p5, mut p6, mut p7) =
            (z, z, z, z, z, z, z, z);
        let (mut p8, mut p9, mut pa, mut pb, mut pc, mut pd, mut pe, mut pf) =
            (z, z, z, z, z, z, z, z);
        for _ in 0..iters {
            each!(_mm512_fmadd_ps(m, a); p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, pa, pb, pc, pd, pe, pf);
        }
        let mut acc = z;
        for v in [
            p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, pa, pb, pc, pd, pe, pf,
        ] {
            acc = _mm512_add_ps(acc, v);
        }
        _mm_cvtss_f32(_mm512_castps512_ps128(acc))
    }
}

#[cfg(target_arch = "x86_64")]
fn measure() -> (String, Vec<Measured>) {
    let avx2 = std::arch::is_x86_feature_detected!("avx2");
    let fma = std::arch::is_x86_feature_detected!("fma");
    let avx512f = std::arch::is_x86_feature_detected!("avx512f");
    let features = format!(r#"{{"avx2": {avx2}, "fma": {fma}, "avx512f": {avx512f}}}"#);
    let mut out = Vec::new();
    let mut run = |name, isa, fused, per_iter: u64, kernel: &dyn Fn(u64) -> f32| {
        out.push(Measured {
            name,
            isa,
            fma: fused,
            flops: per_iter * ITERS,
            ns: time_best(kernel),
        });
    };
    if avx2 {
        // SAFETY: the CPU has AVX2 (detected above), the only feature the kernel enables.
        run(
            "avx2_mul_add",
            "avx2",
            false,
            x86::AVX2_MUL_ADD_FLOPS,
            &|n| unsafe { x86::avx2_mul_add(n) },
        );
    }
    if avx2 && fma {
        // SAFETY: the CPU has AVX2 and FMA (detected above), the features the kernel enables.
        run("avx2_fma", "avx2", true, x86::AVX2_FMA_FLOPS, &|n| unsafe {
            x86::avx2_fma(n)
        });
    }
    if avx512f {
        // SAFETY: the CPU has AVX-512F (detected above), the only feature the kernel enables.
        run(
            "avx512_mul_add",
            "avx512",
            false,
            x86::AVX512_MUL_ADD_FLOPS,
            &|n| unsafe { x86::avx512_mul_add(n) },
        );
        // SAFETY: as above; AVX-512F includes the 512-bit FMA.
        run(
            "avx512_fma",
            "avx512",
            true,
            x86::AVX512_FMA_FLOPS,
            &|n| unsafe { x86::avx512_fma(n) },
        );
    }
    (features, out)
}

#[cfg(not(target_arch = "x86_64"))]
fn measure() -> (String, Vec<Measured>) {
    ("{}".to_owned(), Vec::new())
}

fn main() {
    let (features, kernels) = measure();
    let kernels: Vec<String> = kernels
        .iter()
        .map(|k| {
            format!(
                r#"{{"name": "{}", "isa": "{}", "fma": {}, "flops": {}, "ns": {}}}"#,
                k.name, k.isa, k.fma, k.flops, k.ns
            )
        })
        .collect();
    println!(
        r#"{{"arch": "{}", "features": {features}, "iters": {ITERS}, "kernels": [{}]}}"#,
        std::env::consts::ARCH,
        kernels.join(", ")
    );
}
