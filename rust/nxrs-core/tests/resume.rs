//! Resuming is exact: for random small configurations (loss, math, init, optimizer, schedule,
//! clipping, batch size, gradient blocks, shuffling, drop_last) and random data, a run of `N`
//! steps straight and the same run stopped at a random step (mid-epoch too, or by the callback,
//! after an epoch's last step but before its end event), saved to v2 bytes, rebuilt from them
//! with `checkpoint::trainer_from` and continued, end in the same full-state hash.

mod nxck_support;

use nxck_support::*;
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

/// `n / d` in binary32.
fn ratio(n: i32, d: i32) -> F32 {
    F32::from_i32(n) / F32::from_i32(d)
}

/// Optimisers with hyperparameters a run would use (so that training moves the weights rather
/// than turning them into NaN, which would hide differences).
fn sane_optimizer() -> impl Strategy<Value = OptimizerConfig> {
    let kind = prop_oneof![Just(Kind::Adam), Just(Kind::AdamW), Just(Kind::Sgd)];
    (kind, 1..=50i32, 0..=20i32, 0..=9i32).prop_map(|(kind, lr, wd, momentum)| {
        let adam = OptimizerConfig::seed();
        OptimizerConfig {
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
            ..adam
        }
    })
}

fn sane_schedule() -> impl Strategy<Value = Schedule> {
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

/// A configuration, data that fits it (`n` samples, at least one batch per epoch), the steps of
/// the whole run and where it stops.
fn case() -> impl Strategy<Value = (TrainerConfig, Dataset, i64, i64, bool)> {
    let config = general_config_with(
        5,
        5,
        sane_optimizer(),
        sane_schedule(),
        (1..=20i32).prop_map(|c| ratio(c, 10)),
    );
    // With drop_last, at least one whole batch.
    let sized = config.prop_flat_map(|config| {
        let min = if config.drop_last {
            config.batch_size
        } else {
            1
        };
        (Just(config), min..=12usize)
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
            proptest::collection::vec(-8..=8i32, n * features),
            proptest::collection::vec(0..1000usize, targets),
            1..=30i64,
            any::<prop::sample::Index>(),
            any::<bool>(),
        )
            .prop_map(move |(config, x, y, total, stop, by_callback)| {
                let inputs = x.into_iter().map(|v| ratio(v, 4)).collect();
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
                (config, data, total, stop, by_callback)
            })
    })
}

fn run_to(t: &mut Trainer, data: &Dataset, until: Until) {
    let done = t
        .run(data, until, |_, _| ControlFlow::Continue(()))
        .unwrap();
    assert!(done.is_continue());
}

proptest! {
    #![proptest_config(cases(1000))]

    #[test]
    fn stopping_saving_and_resuming_changes_nothing(
        (config, data, total, stop, by_callback) in case()
    ) {
        let mut straight = Trainer::new(config.clone()).unwrap();
        run_to(&mut straight, &data, Until::Step(total));
        prop_assert_eq!(straight.state().step, total);

        let mut first = Trainer::new(config).unwrap();
        if by_callback {
            // Stop from the callback at its `stop`-th event (steps and epoch ends both count).
            let mut events = 0;
            let mut last_step = true;
            let flow = first
                .run(&data, Until::Step(total), |_, event| {
                    events += 1;
                    last_step = matches!(event, Event::Step(_));
                    if events > stop { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
                })
                .unwrap();
            prop_assert!(flow.is_break() || first.state().step == total);
        } else {
            run_to(&mut first, &data, Until::Step(stop));
            prop_assert_eq!(first.state().step, stop);
        }
        let bytes = checkpoint::encode(&first, Format::V2).unwrap();
        let file = Checkpoint::from_bytes(FileBytes::from_vec(bytes), Verify::Full).unwrap();
        let mut resumed = checkpoint::trainer_from(&file, Verify::Full).unwrap();
        prop_assert_eq!(resumed.state_hash(), first.state_hash());
        prop_assert_eq!(resumed.config(), first.config());
        run_to(&mut resumed, &data, Until::Step(total));
        prop_assert_eq!(resumed.state_hash(), straight.state_hash());
        prop_assert_eq!(resumed.state(), straight.state());
        // The interrupted trainer itself continues to the same state too.
        run_to(&mut first, &data, Until::Step(total));
        prop_assert_eq!(first.state_hash(), straight.state_hash());
    }
}

/// The seed model stopped mid-epoch (step 3 of 8) resumes exactly: v1 cannot hold that
/// position, v2 can.
#[test]
fn the_seed_model_resumes_mid_epoch_from_v2() {
    let data = Dataset::seed(8, 6, 4);
    let mut straight = Trainer::new(TrainerConfig::seed_model()).unwrap();
    straight.train_until(&data, 2).unwrap();
    let mut first = Trainer::new(TrainerConfig::seed_model()).unwrap();
    run_to(&mut first, &data, Until::Step(11));
    assert_eq!((first.state().epoch, first.state().batch), (1, 3));
    assert!(checkpoint::encode(&first, Format::V1).is_err());
    let mut resumed = trainer_of(&v2_bytes(&first)).unwrap();
    resumed.train_until(&data, 2).unwrap();
    assert_eq!(resumed.state_hash(), straight.state_hash());
}
