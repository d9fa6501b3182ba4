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
//!
//! The parts: [`Native`] (the type, `native`), the environment guard (`fpenv`), the self-check
//! (`selfcheck`), what a user asks for and what it resolves to (`choice`, [`BackendChoice`]),
//! and, here, [`Backend`] with [`Backend::run`], the one place a computation is dispatched to
//! an arithmetic and its environment.

mod choice;
mod fpenv;
mod functions;
mod isa;
mod native;
mod selfcheck;

pub use choice::{BackendChoice, Resolved};
pub use fpenv::{default_control, read_control, write_control, FpEnvGuard, GUARDED_TARGET};
pub use isa::{Isa, ISA_VARIABLE};
pub use native::{Native, Unchecked};
pub use selfcheck::{
    check, check_kernels, hardware, product_cases, self_check_cases, Op, ProductCase, Unavailable,
    FAULT_VARIABLE, PRODUCT_OUTPUTS,
};

use crate::arith::Real;
use crate::softf32::F32;

crate::names::names! {
    /// Which arithmetic a trainer computes with. Not part of a run's configuration or state:
    /// both give the same bits, so a run checkpointed under one resumes under the other.
    #[derive(Default)]
    pub enum Backend {
        /// softf32, integer operations: the definition, on every target.
        #[default]
        Soft = "soft",
        /// [`Native`] under an [`FpEnvGuard`], where [`hardware`] allows it.
        Hw = "hw",
    }
}

impl Backend {
    /// Runs `task` in this backend's arithmetic: [`F32`] as it is, [`Native`] under an
    /// [`FpEnvGuard`] on the calling thread (threads the task hands work to set up their own,
    /// with [`Real::environment`]). The task is monomorphised for each arithmetic: no dynamic
    /// dispatch inside it.
    pub fn run<T: Compute>(self, task: T) -> T::Output {
        match self {
            Backend::Soft => compute_outlined::<F32, T>(task),
            Backend::Hw => {
                let _env = FpEnvGuard::new();
                compute_outlined::<Native, T>(task)
            }
        }
    }
}

/// A computation written once over [`Real`], for [`Backend::run`] to run in a backend's
/// arithmetic. A trait with a generic method, because a closure cannot be generic over `R`; the
/// implementing type holds the computation's inputs.
pub trait Compute {
    type Output;

    /// The computation in arithmetic `R`.
    fn compute<R: Real>(self) -> Self::Output;
}

/// `task` computed in `R` in a call that is never inlined: under [`Backend::run`]'s guard, all
/// its floating-point operations then happen inside the call, between the guard's two register
/// writes. The compiler assumes the default environment and could otherwise move an operation
/// whose operands it already has across them.
#[inline(never)]
fn compute_outlined<R: Real, T: Compute>(task: T) -> T::Output {
    task.compute::<R>()
}
