//! The backends the golden tests run under.

use nxrs_core::backend::{self, Backend};

/// Every backend these tests run under: softf32, and the hardware where it is available (it
/// must be on x86_64 and aarch64).
pub fn backends() -> Vec<Backend> {
    if backend::GUARDED_TARGET {
        backend::hardware().expect("the hardware backend is available on this target");
        vec![Backend::Soft, Backend::Hw]
    } else {
        // Straight to stderr, so the log shows it (libtest captures println! of a passing test).
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: the hardware backend (not available on this target): softf32 only\n",
        );
        vec![Backend::Soft]
    }
}
