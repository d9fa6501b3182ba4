//! Training from gradient blocks computed elsewhere (data-parallel workers) gives `run`'s bits:
//! for random configurations and data, a trainer driven by `batch_blocks` ->
//! `block_gradient` (on a replica holding only the parameters, on either backend) ->
//! `apply_blocks` ends every step in the same full state, with the same step and epoch reports,
//! as `run`.

mod nxck_support;

use nxck_support::*;
use nxrs_core::backend::{self, Backend};
use nxrs_core::dataset::Dataset;
use nxrs_core::error::Error;
use nxrs_core::trainer::{EpochReport, Event, StepReport, Until};
use nxrs_core::{Trainer, TrainerConfig};
use proptest::prelude::*;
use std::ops::ControlFlow;

fn case() -> impl Strategy<Value = (TrainerConfig, Dataset, i64, i64)> {
    let shape = RunShape {
        max_size: 7,
        max_batch: 24,
        max_work: usize::MAX,
        extra_samples: 30,
        amplitude: 64,
        divisor: 7,
        max_steps: 10,
    };
    run_case(shape, useful_optimizer(1..=50i32))
}

/// Layers up to 300 wide (past every vector group) and batches up to 128, a few steps.
fn wide_case() -> impl Strategy<Value = (TrainerConfig, Dataset, i64, i64)> {
    let shape = RunShape::WIDE;
    run_case(shape, useful_optimizer(1..=50i32))
}

/// What a report says, as comparable bits.
fn step_bits(r: &StepReport) -> (u32, usize, Option<usize>) {
    (r.loss.to_bits(), r.samples, r.correct)
}

fn epoch_bits(r: &EpochReport) -> (i64, u32, i64, Option<usize>, usize, bool) {
    (
        r.epoch,
        r.loss.to_bits(),
        r.steps,
        r.correct,
        r.samples,
        r.whole,
    )
}

/// Every step of a trainer driven by blocks from a replica gives `run`'s reports and state.
fn blocks_give_runs_bits(
    config: &TrainerConfig,
    data: &Dataset,
    total: i64,
) -> Result<(), TestCaseError> {
    let mut straight = Trainer::new(config.clone()).unwrap();
    let mut driven = Trainer::new(config.clone()).unwrap();
    let mut replica = Trainer::new(config.clone()).unwrap();
    if backend::GUARDED_TARGET {
        replica.set_backend(Backend::Hw).unwrap();
    }
    for _ in 0..total {
        let target = straight.state().step + 1;
        let mut reports = (None, None);
        let _ = straight
            .run(data, Until::Step(target), |_, event| {
                match event {
                    Event::Step(r) => reports.0 = Some(step_bits(r)),
                    Event::EpochEnd(r) => reports.1 = Some(epoch_bits(r)),
                }
                ControlFlow::Continue(())
            })
            .unwrap();

        // The replica knows only the parameters (workers are sent nothing else).
        let mut state = replica.state().clone();
        state.params = driven.state().params.clone();
        replica.set_state(state).unwrap();
        let batch = driven.batch_blocks(data).unwrap();
        let blocks: Vec<_> = batch
            .iter()
            .scan(0, |first, samples| {
                let block = replica.block_gradient(data, samples, *first).unwrap();
                *first += samples.len();
                Some(block)
            })
            .collect();
        let (step, end) = driven.apply_blocks(data, &blocks).unwrap();
        prop_assert_eq!(Some(step_bits(&step)), reports.0);
        prop_assert_eq!(end.as_ref().map(epoch_bits), reports.1);
        prop_assert_eq!(driven.state(), straight.state());
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(300))]

    #[test]
    fn blocks_from_a_replica_give_runs_bits((config, data, total, _stop) in case()) {
        blocks_give_runs_bits(&config, &data, total)?;
    }
}

proptest! {
    #![proptest_config(cases(100))]

    #[test]
    fn blocks_from_a_replica_give_runs_bits_wide((config, data, total, _stop) in wide_case()) {
        blocks_give_runs_bits(&config, &data, total)?;
    }
}

#[test]
fn apply_blocks_refuses_blocks_of_another_batch_and_changes_nothing() {
    let mut config = TrainerConfig::seed_style(vec![3, 4, 2], 1);
    config.batch_size = 5;
    config.grad_block = Some(2);
    let data = Dataset::new(
        3,
        2,
        (0..36).map(|k| ratio(k % 7, 5)).collect(),
        &[0u8, 1].repeat(6),
    )
    .unwrap();
    let mut t = Trainer::new(config).unwrap();
    let blocks: Vec<_> = t
        .batch_blocks(&data)
        .unwrap()
        .iter()
        .scan(0, |first, samples| {
            let block = t.block_gradient(&data, samples, *first).unwrap();
            *first += samples.len();
            Some(block)
        })
        .collect();
    assert_eq!(blocks.len(), 3);
    let before = t.state().clone();
    let short = &blocks[..2];
    assert!(matches!(t.apply_blocks(&data, short), Err(Error::Input(_))));
    let mut swapped = blocks.clone();
    swapped.swap(0, 2); // block 2 holds one sample, block 0 two
    assert!(matches!(
        t.apply_blocks(&data, &swapped),
        Err(Error::Input(_))
    ));
    let mut misshapen = blocks.clone();
    misshapen[1].grads[0].w.pop();
    assert!(matches!(
        t.apply_blocks(&data, &misshapen),
        Err(Error::Input(_))
    ));
    assert_eq!(t.state(), &before);
    t.apply_blocks(&data, &blocks).unwrap();
    assert_eq!(t.state().step, 1);
}
