//! The hardware backend gives softf32's bits: for random small configurations (every loss,
//! math, init, optimiser, schedule and clipping, batch sizes 1..=64, gradient blocks, odd layer
//! sizes), wide ones (layers up to 300, batches up to 128) and random data (ordinary values, and
//! any finite binary32: subnormals, huge magnitudes), a run under `Backend::Hw` ends in the same
//! full state as under `Backend::Soft`, with the same step losses, evaluation and predictions;
//! and a run stopped under one backend, saved to v2 bytes and resumed under the other, ends there
//! too. Learning rates reach 50 and features 2^128, so some runs overflow into infinities and
//! NaNs, whose bits must agree as well. Where there is no hardware backend, each test says on
//! stderr that it skipped.

mod nxck_support;

use nxck_support::*;
use nxrs_core::arith::Real;
use nxrs_core::backend::{self, Backend};
use nxrs_core::checkpoint;
use nxrs_core::config::{Family, Value};
use nxrs_core::dataset::Dataset;
use nxrs_core::math::Math;
use nxrs_core::nxck::mapped::FileBytes;
use nxrs_core::nxck::v2::{Checkpoint, Verify};
use nxrs_core::nxck::Format;
use nxrs_core::optim::{Kind, StepScalars};
use nxrs_core::threads::Threads;
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
        max_work: usize::MAX,
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

/// The same, with layers up to 300 wide (past every vector group of the kernels: 8-lane
/// registers, 1 to 7 of them, groups of 64) and batches up to 128, a few steps.
fn wide_case() -> impl Strategy<Value = (TrainerConfig, Dataset, i64, i64)> {
    let shape = RunShape::WIDE;
    run_case(
        shape,
        useful_optimizer(prop_oneof![4 => 1..=50i32, 1 => 1..=50_000i32]),
    )
}

/// Says once per test that it was skipped (`false`) where there is no hardware backend;
/// where there must be one, its absence fails the test instead.
fn hardware_here(test: &str, said: &std::sync::Once) -> bool {
    if backend::GUARDED_TARGET {
        backend::hardware().expect("the hardware backend is available on this target");
        return true;
    }
    said.call_once(|| {
        say(&format!(
            "SKIPPED: {test}: no hardware backend on this target"
        ))
    });
    false
}

/// Writes a line to stderr directly: libtest swallows `eprintln!` output of a passing test.
fn say(line: &str) {
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{line}\n").as_bytes());
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

/// A run under `Backend::Hw` (and with threads) ends as under `Backend::Soft`, and a run
/// stopped under one backend and resumed under the other ends there too.
fn same_bits(
    config: &TrainerConfig,
    data: &Dataset,
    total: i64,
    stop: i64,
) -> Result<(), TestCaseError> {
    let mut soft = trainer(config, Backend::Soft);
    let mut hw = trainer(config, Backend::Hw);
    let losses = run_to(&mut soft, data, total);
    prop_assert_eq!(run_to(&mut hw, data, total), losses.clone());
    prop_assert_eq!(hw.state(), soft.state());
    prop_assert_eq!(hw.state_hash(), soft.state_hash());

    let (e_hw, e_soft) = (hw.evaluate(data).unwrap(), soft.evaluate(data).unwrap());
    let inputs: Vec<F32> = (0..data.len())
        .flat_map(|s| data.sample(s).0.to_vec())
        .collect();
    // Threads (each splitting the work as finely as it can) change no bit either.
    for (threads, backend) in [(2, Backend::Hw), (3, Backend::Soft), (4, Backend::Hw)] {
        let mut threaded = trainer(config, backend);
        threaded.set_threads(Threads::splitting_everything(threads).unwrap());
        prop_assert_eq!(run_to(&mut threaded, data, total), losses.clone());
        prop_assert_eq!(threaded.state(), soft.state());
        let e = threaded.evaluate(data).unwrap();
        prop_assert_eq!(
            (e.loss.to_bits(), e.correct),
            (e_soft.loss.to_bits(), e_soft.correct)
        );
        prop_assert_eq!(
            bits(&threaded.predict(&inputs).unwrap()),
            bits(&soft.predict(&inputs).unwrap())
        );
    }
    prop_assert_eq!(
        (e_hw.loss.to_bits(), e_hw.correct),
        (e_soft.loss.to_bits(), e_soft.correct)
    );
    prop_assert_eq!(
        bits(&hw.predict(&inputs).unwrap()),
        bits(&soft.predict(&inputs).unwrap())
    );

    // Stopped under one backend at `stop`, resumed under the other from v2 bytes.
    for (first, second) in [(Backend::Soft, Backend::Hw), (Backend::Hw, Backend::Soft)] {
        let mut part = trainer(config, first);
        run_to(&mut part, data, stop);
        let bytes = checkpoint::encode(&part, Format::V2).unwrap();
        let file = Checkpoint::from_bytes(FileBytes::from_vec(bytes), Verify::Full).unwrap();
        let mut resumed = checkpoint::trainer_from(&file, Verify::Full).unwrap();
        resumed.set_backend(second).unwrap();
        run_to(&mut resumed, data, total);
        prop_assert_eq!(resumed.state_hash(), soft.state_hash());
    }
    Ok(())
}

static NARROW: std::sync::Once = std::sync::Once::new();
static WIDE: std::sync::Once = std::sync::Once::new();
static OPTIMISERS: std::sync::Once = std::sync::Once::new();
static GELU: std::sync::Once = std::sync::Once::new();

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2500,
        ..ProptestConfig::default()
    })]

    #[test]
    fn hw_and_soft_give_the_same_bits((config, data, total, stop) in case()) {
        if hardware_here("hw_and_soft_give_the_same_bits", &NARROW) {
            same_bits(&config, &data, total, stop)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 100,
        ..ProptestConfig::default()
    })]

    #[test]
    fn hw_and_soft_give_the_same_bits_wide((config, data, total, stop) in wide_case()) {
        if hardware_here("hw_and_soft_give_the_same_bits_wide", &WIDE) {
            same_bits(&config, &data, total, stop)?;
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

/// One optimiser update (every optimiser and math setting, `steps` steps into the run so the
/// bias corrections vary) from random cells, special values among them, computed in `R`, for a
/// tensor weight decay applies to (`decays`) or not: the new `p`, `m` and `v` as bits.
fn optimiser_outputs<R: Real>(
    kind: Kind,
    math: Math,
    steps: usize,
    decays: bool,
    cells: &[[u32; 4]],
) -> [Vec<u32>; 3] {
    let (weight_decay, momentum) = match kind {
        Kind::Adam => (0.0, 0.0),
        Kind::AdamW => (0.1, 0.0),
        Kind::Sgd => (0.0, 0.9),
    };
    // The seed model's Adam hyperparameters (lr 0.01), as `kind`.
    let settings = [
        ("optimizer", Value::Str(kind.name().into())),
        ("weight_decay", Value::Float(weight_decay)),
        ("momentum", Value::Float(momentum)),
    ];
    let config = TrainerConfig::from_settings(Family::SeedModel, &settings)
        .unwrap()
        .optimizer;
    let (mut b1t, mut b2t) = (F32::ONE, F32::ONE);
    let mut step = StepScalars::advance(&config, F32::from_bits(0x3C23_D70A), &mut b1t, &mut b2t);
    for _ in 1..steps {
        step = StepScalars::advance(&config, step.lr, &mut b1t, &mut b2t);
    }
    let column = |k: usize| -> Vec<R> {
        cells
            .iter()
            .map(|c| R::from_f32(F32::from_bits(c[k])))
            .collect()
    };
    let (mut p, g, mut m, mut v) = (column(0), column(1), column(2), column(3));
    if !kind.has_second_moments() {
        v.clear();
    }
    config.update::<R>(math, &step, decays, &mut p, &g, &mut m, &mut v);
    [p, m, v].map(|x| x.iter().map(|c| c.to_f32().to_bits()).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// GELU and its derivative (`Φ`, `φ` from softf32, then the backend's product and sum)
    /// give softf32's bits, NaNs and infinities included (`-inf * +0` and `inf * +0` are
    /// invalid: the default NaN on both).
    #[test]
    fn gelu_gives_softf32s_bits(cells in prop::collection::vec(any_cell(), 1..64)) {
        if !hardware_here("gelu_gives_softf32s_bits", &GELU) {
            return Ok(());
        }
        let _env = backend::FpEnvGuard::new();
        for bits in cells {
            let (soft, hw) = (F32::from_bits(bits), backend::Native::from_f32(F32::from_bits(bits)));
            prop_assert_eq!(hw.gelu().to_f32(), soft.gelu(), "gelu({:#010x})", bits);
            prop_assert_eq!(
                hw.gelu_derivative().to_f32(),
                soft.gelu_derivative(),
                "gelu_derivative({:#010x})",
                bits
            );
        }
    }

    /// The optimisers' vector groups (64 cells computed without the NaN rule, kept only when no
    /// output is a NaN) give softf32's bits, for lengths around and between the group sizes.
    #[test]
    fn optimiser_updates_give_softf32s_bits(
        cells in prop::collection::vec([any_cell(), any_cell(), any_cell(), any_cell()], 0..200),
        kind in prop::sample::select(vec![Kind::Adam, Kind::AdamW, Kind::Sgd]),
        math in prop::sample::select(vec![Math::Seed, Math::Ieee]),
        steps in 1usize..4,
        decays: bool,
    ) {
        if !hardware_here("optimiser_updates_give_softf32s_bits", &OPTIMISERS) {
            return Ok(());
        }
        let _env = backend::FpEnvGuard::new();
        prop_assert_eq!(
            optimiser_outputs::<backend::Native>(kind, math, steps, decays, &cells),
            optimiser_outputs::<F32>(kind, math, steps, decays, &cells)
        );
    }
}
