//! The core's structure: the one dispatch of a computation to a backend
//! ([`Backend::run`]), and the split of `Error::Mismatch` (data that does not fit a run is
//! `Error::Input`; `Error::Mismatch` is a checkpoint of another run, never a file `load`
//! reads as the seed model).

use nxrs_core::arith::Real;
use nxrs_core::backend::{self, Backend, Compute, Native, GUARDED_TARGET};
use nxrs_core::checkpoint;
use nxrs_core::dataset::Dataset;
use nxrs_core::error::Error;
use nxrs_core::nxck::Format;
use nxrs_core::trainer::Until;
use nxrs_core::{Trainer, TrainerConfig, F32};
use std::any::TypeId;
use std::ops::ControlFlow;

/// What a task saw: its arithmetic and the thread's floating-point control register.
struct Probe;

impl Compute for Probe {
    type Output = (TypeId, u64);

    fn compute<R: Real>(self) -> (TypeId, u64) {
        (TypeId::of::<R>(), backend::read_control())
    }
}

#[test]
fn backend_run_computes_in_the_backends_arithmetic_under_its_guard() {
    let before = backend::read_control();
    // The environment another library may leave: flush-to-zero and denormals-are-zero on.
    let flushing = if cfg!(target_arch = "x86_64") {
        before | (1 << 15) | (1 << 6)
    } else if cfg!(target_arch = "aarch64") {
        before | (1 << 24)
    } else {
        before
    };
    backend::write_control(flushing);
    let flushing = backend::read_control();
    let soft = Backend::Soft.run(Probe);
    let hw = GUARDED_TARGET.then(|| Backend::Hw.run(Probe));
    let after = backend::read_control();
    backend::write_control(before);

    // softf32 touches no register: it computes in F32 in whatever environment it finds.
    assert_eq!(soft, (TypeId::of::<F32>(), flushing));
    if let Some((arith, control)) = hw {
        // MXCSR's status flags (bits 0-5) record what was computed meanwhile.
        let flags = if cfg!(target_arch = "x86_64") {
            0x3F
        } else {
            0
        };
        assert_eq!(arith, TypeId::of::<Native>());
        assert_eq!(
            control & !flags,
            backend::default_control(flushing) & !flags
        );
    }
    // The guard restored the register.
    assert_eq!(after, flushing);
}

#[test]
fn data_with_fewer_batches_than_the_state_has_done_is_an_input_error() {
    let mut t = Trainer::new(TrainerConfig::seed_model()).unwrap();
    let data = Dataset::seed(8, 6, 4);
    let flow = t.run(&data, Until::Step(3), |_, _| ControlFlow::Continue(()));
    assert!(flow.unwrap().is_continue());
    assert_eq!((t.state().epoch, t.state().batch), (0, 3));
    let before = t.state().clone();
    let fewer = Dataset::seed(2, 6, 4);
    let until = Until::Epoch(1);
    let refused = t.run(&fewer, until, |_, _| ControlFlow::Continue(()));
    assert!(
        matches!(&refused, Err(Error::Input(m)) if m.contains("not the data set it was trained on")),
        "{refused:?}"
    );
    assert!(matches!(t.batch_blocks(&fewer), Err(Error::Input(_))));
    assert_eq!(t.state(), &before);
}

#[test]
fn load_reads_a_v1_file_of_other_counts_as_a_header_defect_and_restore_as_a_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let t = Trainer::new(TrainerConfig::seed_model()).unwrap();
    let good = checkpoint::encode(&t, Format::V1).unwrap();
    let mut bad = good.clone();
    bad[4..8].copy_from_slice(&8u32.to_le_bytes()); // 8 buffers, the seed model has 6
    let path = dir.path().join("bad.ckpt");
    std::fs::write(&path, &bad).unwrap();
    let loaded = checkpoint::load(&path);
    assert!(
        matches!(&loaded, Err(Error::Header(m)) if m.contains("8 buffers")),
        "{:?}",
        loaded.err()
    );
    assert!(matches!(checkpoint::decode(&bad), Err(Error::Header(_))));
    let mut target = Trainer::new(TrainerConfig::seed_model()).unwrap();
    assert!(matches!(
        checkpoint::restore(&mut target, &path),
        Err(Error::Mismatch(_))
    ));
}
