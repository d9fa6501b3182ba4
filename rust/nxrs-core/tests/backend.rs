//! The hardware backend gives softf32's bits: for random small configurations (every loss,
//! math, init, optimiser, schedule and clipping, batch sizes 1..=64, gradient blocks, odd layer
//! sizes) and random data, a run under `Backend::Hw` ends in the same full state as under
//! `Backend::Soft`, with the same step losses, evaluation and predictions; and a run stopped
//! under one backend, saved to v2 bytes and resumed under the other, ends there too. Learning
//! rates reach 50, so some runs overflow into infinities and NaNs, whose bits must agree as well.

mod nxck_support;

use nxck_support::*;
use nxrs_core::backend::{self, Backend};
use nxrs_core::checkpoint;
use nxrs_core::dataset::Dataset;
use nxrs_core::loss::Loss;
use nxrs_core::nxck::mapped::FileBytes;
use nxrs_core::nxck::v2::{Checkpoint, Verify};
use nxrs_core::nxck::Format;
use nxrs_core::optim::{Kind, OptimizerConfig};
use nxrs_core::schedule::{Decay, Schedule};
use nxrs_core::trainer::{Event, Until};
use nxrs_core::{Trainer, TrainerConfig, F32};
use proptest::prelude::*;
use std::ops::ControlFlow;

fn ratio(n: i32, d: i32) -> F32 {
    F32::from_i32(n) / F32::from_i32(d)
}

fn optimizer() -> impl Strategy<Value = OptimizerConfig> {
    let kind = prop_oneof![Just(Kind::Adam), Just(Kind::AdamW), Just(Kind::Sgd)];
    // Mostly useful rates, sometimes absurd ones (up to 50) that blow the run up.
    let lr = prop_oneof![4 => 1..=50i32, 1 => 1..=50_000i32];
    (kind, lr, 0..=20i32, 0..=9i32).prop_map(|(kind, lr, wd, momentum)| OptimizerConfig {
        kind,
        lr: ratio(lr, 1000),
        weight_decay: if kind == Kind::Adam {
            F32::ZERO
        } else {
            ratio(wd, 100)
        },
        momentum: if kind == Kind::Sgd {
            ratio(momentum, 10)
        } else {
            F32::ZERO
        },
        ..OptimizerConfig::seed()
    })
}

fn schedule() -> impl Strategy<Value = Schedule> {
    let decay = prop_oneof![
        Just(Decay::Constant),
        (1..=20u64).prop_map(|total_steps| Decay::Linear { total_steps }),
        (1..=5u64, 1..=9i32).prop_map(|(step_size, g)| Decay::Step {
            step_size,
            gamma: ratio(g, 10),
        }),
    ];
    (0..=4u64, decay).prop_map(|(warmup_steps, decay)| Schedule {
        warmup_steps,
        decay: match decay {
            Decay::Linear { total_steps } => Decay::Linear {
                total_steps: warmup_steps + total_steps,
            },
            other => other,
        },
    })
}

/// A configuration, data that fits it, the run's steps and where the resumed run stops.
fn case() -> impl Strategy<Value = (TrainerConfig, Dataset, i64, i64)> {
    let config = general_config_with(
        9,
        64,
        optimizer(),
        schedule(),
        (1..=20i32).prop_map(|c| ratio(c, 10)),
    );
    let sized = config.prop_flat_map(|config| {
        let min = if config.drop_last {
            config.batch_size
        } else {
            1
        };
        (Just(config), min..=(min + 40))
    });
    sized.prop_flat_map(|(config, n)| {
        let features = config.sizes[0];
        let outputs = *config.sizes.last().unwrap();
        let targets = match config.loss {
            Loss::CrossEntropy => n,
            Loss::Mse => n * outputs,
        };
        (
            Just(config),
            proptest::collection::vec(-64..=64i32, n * features),
            proptest::collection::vec(0..1000usize, targets),
            1..=12i64,
            any::<prop::sample::Index>(),
        )
            .prop_map(move |(config, x, y, total, stop)| {
                let inputs = x.into_iter().map(|v| ratio(v, 7)).collect();
                let data = match config.loss {
                    Loss::CrossEntropy => {
                        let labels: Vec<usize> = y.iter().map(|v| v % outputs).collect();
                        Dataset::new(features, outputs, inputs, &labels).unwrap()
                    }
                    Loss::Mse => {
                        let t = y.iter().map(|&v| ratio(v as i32 - 500, 250)).collect();
                        Dataset::regression(features, inputs, outputs, t).unwrap()
                    }
                };
                let stop = stop.index(total as usize + 1) as i64;
                (config, data, total, stop)
            })
    })
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
