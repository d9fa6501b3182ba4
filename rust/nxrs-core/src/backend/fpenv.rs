//! The floating-point environment: [`FpEnvGuard`] and the control register it saves, sets and
//! restores (MXCSR on x86_64, FPCR on AArch64).

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Native;
    use std::hint::black_box;

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
