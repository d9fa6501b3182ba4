//! [`Native`]: the CPU's own binary32 arithmetic behind [`Real`], and [`Unchecked`], the same
//! without the NaN rule (see the module [`backend`](super) for why its bits are softf32's);
//! its matrix product on each [`Isa`]'s registers.

#![allow(clippy::float_arithmetic)] // the hardware backend: native binary32 is its point

use super::fpenv::FpEnvGuard;
use super::functions;
use super::isa::Isa;
use crate::arith::matmul::{self, MatMul};
use crate::arith::Real;
use crate::softf32::F32;
use core::ops::{Add, Div, Mul, Neg, Sub};

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
        /// softf32's `e^x`, by way of binary64 where a rounding test proves it (module `functions`).
        #[inline(always)]
        fn exp(self) -> Native {
            Native(functions::exp_f32(self.0))
        }

        /// softf32's `Φ`, by way of binary64 where a rounding test proves it (module `functions`).
        #[inline(always)]
        fn normal_cdf(self) -> Native {
            Native(functions::normal_cdf(self.0))
        }

        /// softf32's `φ`, by way of binary64 where a rounding test proves it (module `functions`).
        #[inline(always)]
        fn normal_pdf(self) -> Native {
            Native(functions::normal_pdf(self.0))
        }

        fn exps_in_place(x: &mut [Native]) {
            let x = bytemuck::cast_slice_mut(x);
            vector_call(
                #[inline(always)]
                || functions::exps_in_place(x),
            );
        }

        fn normal_cdfs(x: &[Native], out: &mut [Native]) {
            let (x, out) = (bytemuck::cast_slice(x), bytemuck::cast_slice_mut(out));
            vector_call(
                #[inline(always)]
                || functions::normal_cdfs(x, out),
            );
        }

        fn normal_pdfs(x: &[Native], out: &mut [Native]) {
            let (x, out) = (bytemuck::cast_slice(x), bytemuck::cast_slice_mut(out));
            vector_call(
                #[inline(always)]
                || functions::normal_pdfs(x, out),
            );
        }

        /// The blocked kernel on the path in use ([`Isa`]); NaN results recomputed in
        /// `Native`.
        fn matmul(mm: MatMul<'_, Native>) {
            Isa::in_use().matmul(mm);
        }

        #[inline(always)]
        fn add_assign(acc: &mut [Native], x: &[Native]) {
            Isa::in_use().vectorized(
                #[inline(always)]
                || {
                    for (acc, &x) in acc.iter_mut().zip(x) {
                        *acc = *acc + x;
                    }
                },
            );
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

/// Calls `f` compiled for the vector instructions in use ([`Isa`]: AVX-512 or AVX2 where the CPU
/// has them, detected at run time), so the loops inlined into `f` use 16 or 8 lanes instead of
/// the baseline's 4. Only the lane width changes, never FMA: every operation stays a separate
/// multiply or add (Rust does not contract them).
#[inline(always)]
fn vector_call<T>(f: impl FnOnce() -> T) -> T {
    Isa::in_use().vectorized(f)
}

impl Isa {
    /// Computes `mm` with this path's tiles of registers, NaN results recomputed in
    /// [`Native`]: the hardware backend's matrix product.
    ///
    /// # Panics
    /// If the CPU does not have the instructions.
    pub fn matmul(self, mm: MatMul<'_, Native>) {
        assert!(self.available(), "this CPU has no {}", self.name());
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512F (asserted above).
            Isa::Avx512 => unsafe { x86::matmul_avx512(mm) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 (asserted above).
            Isa::Avx2 => unsafe { x86::matmul_avx2(mm) },
            _ => matmul::portable(mm),
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::isa::x86::{Avx2, Avx512};
    use super::Native;
    use crate::arith::matmul::{blocked, MatMul};

    /// AVX2 tiles: 6 x 2 registers of accumulators, two of `B`, one broadcast of `A` and one
    /// product fill the 16 registers.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn matmul_avx2(mm: MatMul<'_, Native>) {
        // SAFETY: the CPU has AVX2 (the caller's promise).
        unsafe { blocked::<Native, Avx2, 6, 2>(mm) }
    }

    /// AVX-512 tiles: 8 x 2 registers of accumulators (of 32).
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn matmul_avx512(mm: MatMul<'_, Native>) {
        // SAFETY: the CPU has AVX-512F (the caller's promise).
        unsafe { blocked::<Native, Avx512, 8, 2>(mm) }
    }
}
