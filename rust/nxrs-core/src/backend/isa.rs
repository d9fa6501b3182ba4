//! Which vector instructions the hardware backend computes with ([`Isa`]), and their registers
//! (the matrix product's tiles are made of them: `native`'s `Isa::matmul`).
//!
//! Every path gives the same bits (see [`crate::arith::matmul`]): lanes hold independent
//! elements, every product and sum is its own IEEE operation (multiply and add instructions,
//! never FMA: no `fma` feature is enabled anywhere). The widest path the CPU has is used, unless
//! [`ISA_VARIABLE`] names another (so that tests can run every path the CPU has); the
//! self-check runs the path in use.

use std::sync::OnceLock;

crate::names::names! {
    /// A set of vector instructions the hardware backend's kernels are compiled for.
    pub enum Isa {
        /// AVX-512F: 16 lanes, tiles of 8 rows x 32 columns.
        Avx512 = "avx512",
        /// AVX2: 8 lanes, tiles of 6 rows x 16 columns.
        Avx2 = "avx2",
        /// Arrays the compiler vectorises for the target's baseline (SSE2, NEON).
        Portable = "portable",
    }
}

/// The environment variable that picks the path (`avx512`, `avx2` or `portable`), read once per
/// process; unset or empty: the widest the CPU has.
pub const ISA_VARIABLE: &str = "NXRS_ISA";

impl Isa {
    /// Whether this CPU has the instructions (detected at run time).
    pub fn available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => false,
        }
    }

    /// Every path this CPU has, widest first.
    pub fn supported() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|isa| isa.available()).collect()
    }

    /// The path `value` (the variable's value, if set) asks for: a name this CPU has, or the
    /// widest it has when unset. An unknown name or one the CPU lacks is an error saying so.
    pub fn choose(value: Option<&str>) -> Result<Isa, String> {
        let Some(value) = value else {
            return Ok(Isa::supported()[0]);
        };
        let isa = Isa::from_name(value).ok_or_else(|| {
            format!(
                "{ISA_VARIABLE}={value:?} is not one of {}",
                Isa::NAMES.join(", ")
            )
        })?;
        if isa.available() {
            Ok(isa)
        } else {
            Err(format!(
                "{ISA_VARIABLE}={value} asks for instructions this CPU does not have (it has: {})",
                Isa::supported()
                    .iter()
                    .map(|isa| isa.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    }

    /// The path this process uses: [`Isa::choose`] of [`ISA_VARIABLE`], decided once.
    pub fn active() -> Result<Isa, &'static str> {
        static ACTIVE: OnceLock<Result<Isa, String>> = OnceLock::new();
        ACTIVE
            .get_or_init(|| {
                let value = std::env::var(ISA_VARIABLE).ok();
                Isa::choose(value.as_deref().filter(|v| !v.is_empty()))
            })
            .as_ref()
            .copied()
            .map_err(String::as_str)
    }

    /// [`Isa::active`], or the portable path when the variable is wrong (the hardware backend
    /// is then unavailable, see `selfcheck`, so only direct uses of `Native` get here).
    pub(super) fn in_use() -> Isa {
        Isa::active().unwrap_or(Isa::Portable)
    }

    /// Runs `f` compiled for this path's instructions, so that the loops inlined into it use
    /// its registers (only the lane width changes: no FMA is enabled).
    ///
    /// # Panics
    /// If the CPU does not have the instructions.
    #[inline(always)]
    pub(super) fn vectorized<T>(self, f: impl FnOnce() -> T) -> T {
        assert!(self.available(), "this CPU has no {}", self.name());
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512F (asserted above).
            Isa::Avx512 => unsafe { x86::with_avx512(f) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 (asserted above).
            Isa::Avx2 => unsafe { x86::with_avx2(f) },
            _ => f(),
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use crate::arith::matmul::Vector;
    use core::arch::x86_64::*;

    /// Defines a register type over an x86 vector type: its lanes, and its operations as
    /// the given intrinsics (separate multiply and add: no FMA). A value exists only where the
    /// CPU has the intrinsics' feature (it is built by `load`/`splat`, whose callers promise
    /// it; `ZERO` is only overwritten), so the safe operations are sound.
    macro_rules! x86_vector {
        (
            $(#[$doc:meta])*
            $name:ident($reg:ty, $lanes:literal):
            $load:ident, $set1:ident, $store:ident, $add:ident, $mul:ident, $has_nan:ident
        ) => {
            $(#[$doc])*
            #[derive(Clone, Copy)]
            pub(in crate::backend) struct $name($reg);

            impl Vector for $name {
                const LANES: usize = $lanes;
                const ZERO: $name = {
                    // SAFETY: the register is plain data; all zeros are +0 in every lane.
                    $name(unsafe { core::mem::transmute::<[u32; $lanes], $reg>([0; $lanes]) })
                };

                #[inline(always)]
                unsafe fn load(p: *const u32) -> $name {
                    // SAFETY: the caller's promise (LANES cells, the feature).
                    $name(unsafe { $load(p.cast()) })
                }

                #[inline(always)]
                unsafe fn splat(p: *const u32) -> $name {
                    // SAFETY: the caller's promise (one cell, the feature).
                    $name(unsafe { $set1(*p.cast::<f32>()) })
                }

                #[inline(always)]
                unsafe fn store(self, p: *mut u32) {
                    // SAFETY: the caller's promise (LANES cells, the feature).
                    unsafe { $store(p.cast(), self.0) }
                }

                #[inline(always)]
                fn add(self, rhs: $name) -> $name {
                    // SAFETY: a value exists only where the CPU has the feature (see above).
                    $name(unsafe { $add(self.0, rhs.0) })
                }

                #[inline(always)]
                fn mul(self, rhs: $name) -> $name {
                    // SAFETY: as `add`.
                    $name(unsafe { $mul(self.0, rhs.0) })
                }

                #[inline(always)]
                fn has_nan(self) -> bool {
                    // SAFETY: as `add`.
                    unsafe { $has_nan(self.0) }
                }
            }
        };
    }

    /// Whether a lane is a NaN (unordered with itself).
    ///
    /// # Safety
    /// The CPU has AVX.
    #[inline(always)]
    unsafe fn avx2_has_nan(x: __m256) -> bool {
        // SAFETY: the caller's promise.
        unsafe { _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(x, x)) != 0 }
    }

    /// Whether a lane is a NaN (unordered with itself).
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[inline(always)]
    unsafe fn avx512_has_nan(x: __m512) -> bool {
        // SAFETY: the caller's promise.
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x) != 0 }
    }

    x86_vector! {
        /// Eight lanes of AVX2.
        Avx2(__m256, 8):
        _mm256_loadu_ps, _mm256_set1_ps, _mm256_storeu_ps, _mm256_add_ps, _mm256_mul_ps,
        avx2_has_nan
    }

    x86_vector! {
        /// Sixteen lanes of AVX-512F.
        Avx512(__m512, 16):
        _mm512_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps, _mm512_add_ps, _mm512_mul_ps,
        avx512_has_nan
    }

    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn with_avx2<T>(f: impl FnOnce() -> T) -> T {
        f()
    }

    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn with_avx512<T>(f: impl FnOnce() -> T) -> T {
        f()
    }
}
