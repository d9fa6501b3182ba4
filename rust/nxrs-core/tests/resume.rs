//! Resuming is exact: for random small and wide (layers up to 300, batches up to 128)
//! configurations (loss, math, init, optimizer, schedule, clipping, batch size, gradient blocks,
//! shuffling, drop_last) and random data (ordinary values, or any finite binary32), a run of `N`
//! steps straight and the same run stopped at a random step (mid-epoch too, or by the callback,
//! after an epoch's last step but before its end event), saved to v2 bytes, rebuilt from them
//! with `checkpoint::trainer_from` and continued, end in the same full-state hash.

mod nxck_support;

use nxck_support::*;
use nxrs_core::checkpoint;
use nxrs_core::dataset::Dataset;
use nxrs_core::nxck::mapped::FileBytes;
use nxrs_core::nxck::v2::{Checkpoint, Verify};
use nxrs_core::nxck::Format;
use nxrs_core::trainer::{Event, Until};
use nxrs_core::{Trainer, TrainerConfig};
use proptest::prelude::*;
use std::ops::ControlFlow;

/// A configuration, data that fits it (at least one batch per epoch), the steps of the whole
/// run, where it stops, and whether the callback stops it.
fn case() -> impl Strategy<Value = (TrainerConfig, Dataset, i64, i64, bool)> {
    let shape = RunShape {
        max_size: 5,
        max_batch: 5,
        max_work: usize::MAX,
        extra_samples: 11,
        amplitude: 8,
        divisor: 4,
        max_steps: 30,
    };
    with_stop_kind(run_case(shape, useful_optimizer(1..=50i32)))
}

/// Layers up to 300 wide (past every vector group), batches up to 128, runs of up to 12 steps
/// (with small batches, over several epochs: they end, reshuffle and resume mid-epoch).
fn wide_case() -> impl Strategy<Value = (TrainerConfig, Dataset, i64, i64, bool)> {
    let shape = RunShape {
        max_size: 300,
        max_batch: 128,
        max_work: 100_000,
        extra_samples: 40,
        amplitude: 8,
        divisor: 4,
        max_steps: 12,
    };
    with_stop_kind(run_case(shape, useful_optimizer(1..=50i32)))
}

fn with_stop_kind(
    case: impl Strategy<Value = (TrainerConfig, Dataset, i64, i64)>,
) -> impl Strategy<Value = (TrainerConfig, Dataset, i64, i64, bool)> {
    (case, any::<bool>()).prop_map(|((config, data, total, stop), by_callback)| {
        (config, data, total, stop, by_callback)
    })
}

fn run_to(t: &mut Trainer, data: &Dataset, until: Until) {
    let done = t
        .run(data, until, |_, _| ControlFlow::Continue(()))
        .unwrap();
    assert!(done.is_continue());
}

/// A run of `total` steps straight, and stopped at `stop` (by the callback's `stop`-th event
/// or by `Until`), saved to v2 bytes, rebuilt and continued, end in the same state.
fn resumes_exactly(
    config: &TrainerConfig,
    data: &Dataset,
    total: i64,
    stop: i64,
    by_callback: bool,
) -> Result<(), TestCaseError> {
    let mut straight = Trainer::new(config.clone()).unwrap();
    run_to(&mut straight, data, Until::Step(total));
    prop_assert_eq!(straight.state().step, total);

    let mut first = Trainer::new(config.clone()).unwrap();
    if by_callback {
        // Stop from the callback at its `stop`-th event (steps and epoch ends both count).
        let mut events = 0;
        let mut last_step = true;
        let flow = first
            .run(data, Until::Step(total), |_, event| {
                events += 1;
                last_step = matches!(event, Event::Step(_));
                if events > stop {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .unwrap();
        prop_assert!(flow.is_break() || first.state().step == total);
    } else {
        run_to(&mut first, data, Until::Step(stop));
        prop_assert_eq!(first.state().step, stop);
    }
    let bytes = checkpoint::encode(&first, Format::V2).unwrap();
    let file = Checkpoint::from_bytes(FileBytes::from_vec(bytes), Verify::Full).unwrap();
    let mut resumed = checkpoint::trainer_from(&file, Verify::Full).unwrap();
    prop_assert_eq!(resumed.state_hash(), first.state_hash());
    prop_assert_eq!(resumed.config(), first.config());
    run_to(&mut resumed, data, Until::Step(total));
    prop_assert_eq!(resumed.state_hash(), straight.state_hash());
    prop_assert_eq!(resumed.state(), straight.state());
    // The interrupted trainer itself continues to the same state too.
    run_to(&mut first, data, Until::Step(total));
    prop_assert_eq!(first.state_hash(), straight.state_hash());
    Ok(())
}

proptest! {
    #![proptest_config(cases(1000))]

    #[test]
    fn stopping_saving_and_resuming_changes_nothing(
        (config, data, total, stop, by_callback) in case()
    ) {
        resumes_exactly(&config, &data, total, stop, by_callback)?;
    }
}

proptest! {
    #![proptest_config(cases(60))]

    #[test]
    fn stopping_saving_and_resuming_changes_nothing_wide(
        (config, data, total, stop, by_callback) in wide_case()
    ) {
        resumes_exactly(&config, &data, total, stop, by_callback)?;
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
