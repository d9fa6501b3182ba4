//! The hardware backend gives softf32's bits: for random small configurations (every loss,
//! math, init, optimiser, schedule and clipping, batch sizes 1..=64, gradient blocks, odd layer
//! sizes) and random data, a run under `Backend::Hw` ends in the same full state as under
//! `Backend::Soft`, with the same step losses, evaluation and predictions; and a run stopped
//! under one backend, saved to v2 bytes and resumed under the other, ends there too. Learning
//! rates reach 50, so some runs overflow into infinities and NaNs, whose bits must agree as well.

mod nxck_support;

use nxck_support::*;
use nxrs_core::arith::Real;
use nxrs_core::backend::{self, Backend};
use nxrs_core::checkpoint;
use nxrs_core::dataset::Dataset;
use nxrs_core::nxck::mapped::FileBytes;
use nxrs_core::nxck::v2::{Checkpoint, Verify};
use nxrs_core::nxck::Format;
use nxrs_core::trainer::{Event, Until};
use nxrs_core::{Trainer, TrainerConfig, F32};
use proptest::prelude::*;
use std::ops::ControlFlow;

/// A configuration (some with absurd learning rates, up to 50, that blow the run up), data that
/// fits it, the run's steps and where the resumed run stops.
fn case() -> impl Strategy<Value = (TrainerConfig, Dataset, i64, i64)> {
    let shape = RunShape {
        max_size: 9,
        max_batch: 64,
        extra_samples: 40,
        amplitude: 64,
        divisor: 7,
        max_steps: 12,
    };
    run_case(
        shape,
        useful_optimizer(prop_oneof![4 => 1..=50i32, 1 => 1..=50_000i32]),
    )
}

fn trainer(config: &TrainerConfig, backend: Backend) -> Trainer {
    let mut t = Trainer::new(config.clone()).unwrap();
    t.set_backend(backend).unwrap();
    t
}

/// Runs to `step`, returning every step's loss bits.
fn run_to(t: &mut Trainer, data: &Dataset, step: i64) -> Vec<u32> {
    let mut losses = Vec::new();
    let done = t
        .run(data, Until::Step(step), |_, event| {
            if let Event::Step(report) = event {
                losses.push(report.loss.to_bits());
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    assert!(done.is_continue());
    losses
}

fn bits(cells: &[F32]) -> Vec<u32> {
    cells.iter().map(|c| c.to_bits()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2500,
        ..ProptestConfig::default()
    })]

    #[test]
    fn hw_and_soft_give_the_same_bits((config, data, total, stop) in case()) {
        if !backend::GUARDED_TARGET {
            return Ok(());
        }
        let mut soft = trainer(&config, Backend::Soft);
        let mut hw = trainer(&config, Backend::Hw);
        prop_assert_eq!(run_to(&mut hw, &data, total), run_to(&mut soft, &data, total));
        prop_assert_eq!(hw.state(), soft.state());
        prop_assert_eq!(hw.state_hash(), soft.state_hash());
        let (e_hw, e_soft) = (hw.evaluate(&data).unwrap(), soft.evaluate(&data).unwrap());
        prop_assert_eq!((e_hw.loss.to_bits(), e_hw.correct), (e_soft.loss.to_bits(), e_soft.correct));
        let inputs: Vec<F32> = (0..data.len()).flat_map(|s| data.sample(s).0.to_vec()).collect();
        prop_assert_eq!(
            bits(&hw.predict(&inputs).unwrap()),
            bits(&soft.predict(&inputs).unwrap())
        );

        // Stopped under one backend at `stop`, resumed under the other from v2 bytes.
        for (first, second) in [(Backend::Soft, Backend::Hw), (Backend::Hw, Backend::Soft)] {
            let mut part = trainer(&config, first);
            run_to(&mut part, &data, stop);
            let bytes = checkpoint::encode(&part, Format::V2).unwrap();
            let file = Checkpoint::from_bytes(FileBytes::from_vec(bytes), Verify::Full).unwrap();
            let mut resumed = checkpoint::trainer_from(&file, Verify::Full).unwrap();
            resumed.set_backend(second).unwrap();
            run_to(&mut resumed, &data, total);
            prop_assert_eq!(resumed.state_hash(), soft.state_hash());
        }
    }
}

/// A binary32 bit pattern, mostly ordinary values but often a special one: NaNs with payloads
/// and either sign, infinities, zeros, subnormals, and values near overflow.
fn any_cell() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => (0x3000_0000u32..0x5000_0000, any::<bool>()).prop_map(|(m, neg)| m | (u32::from(neg) << 31)),
        1 => any::<u32>(),
        1 => prop::sample::select(vec![
            0x7FC0_0000u32, 0xFFC0_0000, 0x7F80_0001, 0xFF80_1234, 0x7FBF_FFFF, 0x7F80_0000,
            0xFF80_0000, 0, 0x8000_0000, 1, 0x8000_0001, 0x007F_FFFF, 0x7F7F_FFFF, 0xFF7F_FFFF,
        ]),
    ]
}

/// The slice kernels of the hardware backend (groups of 32 and 8 elements with a NaN check,
/// then element by element) against softf32's, for lengths around the group sizes and up to
/// five rows: `out`, the rows (`rows x out.len()` cells) and the row scalars.
fn kernel_case() -> impl Strategy<Value = (Vec<u32>, Vec<u32>, Vec<u32>)> {
    (0usize..75, 0usize..6).prop_flat_map(|(n, rows)| {
        (
            prop::collection::vec(any_cell(), n),
            prop::collection::vec(any_cell(), n * rows),
            prop::collection::vec(any_cell(), rows),
        )
    })
}

fn kernels<R: Real>(out: &[u32], rows: &[u32], a: &[u32]) -> [Vec<u32>; 3] {
    let cells_of = |bits: &[u32]| -> Vec<R> {
        bits.iter()
            .map(|&b| R::from_f32(F32::from_bits(b)))
            .collect()
    };
    let bits_of =
        |cells: Vec<R>| -> Vec<u32> { cells.into_iter().map(|c| c.to_f32().to_bits()).collect() };
    let (rows, a) = (cells_of(rows), cells_of(a));
    let mut results = [cells_of(out), cells_of(out), cells_of(out)];
    R::add_row_products(&mut results[0], &rows, &a);
    R::scaled_rows_sum(&mut results[1], &a, &rows);
    R::add_assign(&mut results[2], &rows);
    results.map(bits_of)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn slice_kernels_give_softf32s_bits((out, rows, a) in kernel_case()) {
        if backend::hardware().is_err() {
            return Ok(());
        }
        let _env = backend::FpEnvGuard::new();
        prop_assert_eq!(kernels::<backend::Native>(&out, &rows, &a), kernels::<F32>(&out, &rows, &a));
    }
}
