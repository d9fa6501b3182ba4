//! The arithmetic the training kernels are written over.
//!
//! Every kernel (the matrix products of the forward and backward passes and the reduction,
//! [`matmul`]; the optimiser's update) is written once, generic over
//! [`Real`], and instantiated for [`F32`] (softf32, the definition). A faster backend implements
//! the same trait and must give the same bits: it may only provide the operations below, each a
//! single IEEE binary32 operation rounded to nearest even, so a kernel's sequence of operations
//! (its order is part of the result) is the same whichever backend runs it. The trait itself
//! provides `exp` and the normal distribution's `Φ` and `φ` (softf32's integer algorithms on the
//! bit pattern; a backend may reach their bits another way, as the hardware backend's binary64
//! with a rounding test does) and the GELU and its derivative, composed from them and the
//! backend's own operations.
//!
//! Tensors are stored as [`F32`] whatever the backend: a backend's type has `F32`'s layout
//! (`bytemuck::Pod`, 4 bytes, 4-byte aligned), and the kernels view the stored cells as their
//! own type with [`cells`] and [`cells_mut`], without copying.

pub mod matmul;

use crate::softf32::F32;
use core::fmt::Debug;
use core::ops::{Add, Div, Mul, Neg, Sub};
use matmul::MatMul;

/// An IEEE 754 binary32 arithmetic: `+ - * /` and `sqrt` correctly rounded to nearest even with
/// gradual underflow, negation flipping the sign bit, and conversion to and from the bit pattern.
/// Its values are binary32 bit patterns in memory (size and alignment 4), like [`F32`]'s.
pub trait Real:
    Copy
    + bytemuck::Pod
    + Debug
    + PartialEq
    + Send
    + Sync
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;

    /// The same arithmetic, except that a NaN result may be any NaN (the CPU's, not softf32's).
    /// Only for kernels in which every intermediate value reaches an output through operations
    /// that keep NaNs (`+ - * /`, `sqrt`; no comparisons): there, outputs without a NaN prove
    /// that every value was computed exactly, and a group of outputs with one is recomputed in
    /// `Self` (see `optim::adam`). softf32 is its own.
    type Fast: Real;

    /// What a thread holds while it computes in this arithmetic (the hardware backend's
    /// floating-point environment guard; nothing for softf32).
    type Environment;

    /// Sets up the calling thread to compute in this arithmetic, until the value is dropped.
    fn environment() -> Self::Environment;

    /// The value with these bits (no arithmetic).
    fn from_f32(x: F32) -> Self;

    /// This value's bits as an [`F32`] (no arithmetic).
    fn to_f32(self) -> F32;

    /// The correctly rounded square root.
    fn sqrt(self) -> Self;

    /// Whether this is a NaN (a bit test, no arithmetic).
    fn is_nan(self) -> bool {
        self.to_f32().is_nan()
    }

    /// IEEE `<=` (false when either operand is NaN).
    fn ieee_le(self, rhs: Self) -> bool;

    /// IEEE `<` (false when either operand is NaN).
    fn ieee_lt(self, rhs: Self) -> bool;

    /// `e^x`, correctly rounded: softf32's integer algorithm on the bit pattern ([`F32::exp`])
    /// on every backend (a backend may reach its bits another way).
    #[inline]
    fn exp(self) -> Self {
        Self::from_f32(self.to_f32().exp())
    }

    /// `Φ(x)`, the standard normal distribution function, correctly rounded: softf32's integer
    /// algorithm on the bit pattern ([`F32::normal_cdf`]), its bits on every backend, as for
    /// `exp`.
    #[inline]
    fn normal_cdf(self) -> Self {
        Self::from_f32(self.to_f32().normal_cdf())
    }

    /// `φ(x)`, the standard normal density, correctly rounded ([`F32::normal_pdf`]).
    #[inline]
    fn normal_pdf(self) -> Self {
        Self::from_f32(self.to_f32().normal_pdf())
    }

    /// `x[i] = e^x[i]` for every `i`, in place ([`Real::exp`]; a backend may compute several
    /// cells at once).
    #[inline]
    fn exps_in_place(x: &mut [Self]) {
        for x in x.iter_mut() {
            *x = x.exp();
        }
    }

    /// `out[i] = Φ(x[i])` for every `i` ([`Real::normal_cdf`]; a backend may compute several
    /// cells at once).
    #[inline]
    fn normal_cdfs(x: &[Self], out: &mut [Self]) {
        for (out, &x) in out.iter_mut().zip(x) {
            *out = x.normal_cdf();
        }
    }

    /// `out[i] = φ(x[i])` for every `i` ([`Real::normal_pdf`]; a backend may compute several
    /// cells at once).
    #[inline]
    fn normal_pdfs(x: &[Self], out: &mut [Self]) {
        for (out, &x) in out.iter_mut().zip(x) {
            *out = x.normal_pdf();
        }
    }

    /// The exact GELU, `x Φ(x)`: the correctly rounded `Φ(x)`, then one product in this
    /// arithmetic (`docs/TRAINING.md`, section 15.7). `Φ` makes it two roundings in all: the
    /// `erf` form would round `x/√2` first.
    #[inline]
    fn gelu(self) -> Self {
        self * self.normal_cdf()
    }

    /// GELU's derivative `Φ(x) + x φ(x)`, operation by operation: the correctly rounded `Φ(x)`
    /// and `φ(x)`, the product `x φ(x)`, then the sum.
    #[inline]
    fn gelu_derivative(self) -> Self {
        self.normal_cdf() + self * self.normal_pdf()
    }

    /// The integer `k` rounded to binary32 (an integer conversion, the same on every backend).
    fn from_i64(k: i64) -> Self {
        Self::from_f32(F32::from_i64(k))
    }

    /// Runs `f` compiled for the widest vector instructions the CPU has, where that is faster
    /// (the hardware backend; softf32's integer code runs `f` as it is). The loops in `f` must
    /// keep every value's own operations and their order, with lanes holding independent values
    /// only (the optimiser's update, ReLU's masks): vectorising them then changes no bit.
    #[inline(always)]
    fn vectorized<T>(f: impl FnOnce() -> T) -> T {
        f()
    }

    /// Computes `mm` (see [`matmul`]): the blocked kernel with this arithmetic's lanes; a
    /// backend with vector instructions runs its own tiles (they must give the same bits).
    fn matmul(mm: MatMul<'_, Self>) {
        matmul::portable(mm);
    }

    /// `acc[j] = acc[j] + x[j]` for every `j`.
    #[inline(always)]
    fn add_assign(acc: &mut [Self], x: &[Self]) {
        for (acc, &x) in acc.iter_mut().zip(x) {
            *acc = *acc + x;
        }
    }
}

impl Real for F32 {
    const ZERO: F32 = F32::ZERO;
    const ONE: F32 = F32::ONE;
    type Fast = F32;
    type Environment = ();

    fn environment() {}

    fn from_f32(x: F32) -> F32 {
        x
    }

    fn to_f32(self) -> F32 {
        self
    }

    fn sqrt(self) -> F32 {
        F32::sqrt(self)
    }

    fn ieee_le(self, rhs: F32) -> bool {
        F32::ieee_le(self, rhs)
    }

    fn ieee_lt(self, rhs: F32) -> bool {
        F32::ieee_lt(self, rhs)
    }
}

/// Stored cells viewed as backend `R`'s values (no copy).
#[inline]
pub fn cells<R: Real>(x: &[F32]) -> &[R] {
    bytemuck::cast_slice(x)
}

/// Stored cells viewed as backend `R`'s values, to write (no copy).
#[inline]
pub fn cells_mut<R: Real>(x: &mut [F32]) -> &mut [R] {
    bytemuck::cast_slice_mut(x)
}
