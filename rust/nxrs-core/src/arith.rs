//! The arithmetic the training kernels are written over.
//!
//! Every kernel (forward, backward, reduction, optimiser update) is written once, generic over
//! [`Real`], and instantiated for [`F32`] (softf32, the definition). A faster backend implements
//! the same trait and must give the same bits: it may only provide the operations below, each a
//! single IEEE binary32 operation rounded to nearest even, so a kernel's sequence of operations
//! (its order is part of the result) is the same whichever backend runs it.
//!
//! Tensors are stored as [`F32`] whatever the backend: a backend's type has `F32`'s layout
//! (`bytemuck::Pod`, 4 bytes, 4-byte aligned), and the kernels view the stored cells as their
//! own type with [`cells`] and [`cells_mut`], without copying.

use crate::softf32::F32;
use core::fmt::Debug;
use core::ops::{Add, Div, Mul, Neg, Sub};

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

    /// The value with these bits (no arithmetic).
    fn from_f32(x: F32) -> Self;

    /// This value's bits as an [`F32`] (no arithmetic).
    fn to_f32(self) -> F32;

    /// The correctly rounded square root.
    fn sqrt(self) -> Self;

    /// IEEE `<=` (false when either operand is NaN).
    fn ieee_le(self, rhs: Self) -> bool;

    /// IEEE `<` (false when either operand is NaN).
    fn ieee_lt(self, rhs: Self) -> bool;

    /// The integer `k` rounded to binary32 (an integer conversion, the same on every backend).
    fn from_i64(k: i64) -> Self {
        Self::from_f32(F32::from_i64(k))
    }
}

impl Real for F32 {
    const ZERO: F32 = F32::ZERO;
    const ONE: F32 = F32::ONE;

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
