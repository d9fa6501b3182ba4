//! The epoch structure (`docs/TRAINING.md`, sections 4 and 13): where a run stops, the order of
//! an epoch's samples and its batches, the counters a step advances, and the running report of
//! the epoch under way.

use crate::config::TrainerConfig;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::rng::{Domain, Stream};
use crate::softf32::F32;
use crate::state::TrainState;

/// Where a run stops (besides a callback asking it to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// When `epoch` epochs are complete (nothing happens if they already are).
    Epoch(i64),
    /// When `step` optimiser steps have been taken in total.
    Step(i64),
}

impl Until {
    /// Whether a run whose state is `state` has reached this point.
    pub fn reached(self, state: &TrainState) -> bool {
        match self {
            Until::Epoch(epoch) => state.epoch >= epoch,
            Until::Step(step) => state.step >= step,
        }
    }
}

/// What the callback of `Trainer::run` hears about.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    /// A step is done; the state's counters already count it.
    Step(StepReport),
    /// An epoch is done (after its last step's event).
    EpochEnd(EpochReport),
}

#[derive(Clone, Copy, Debug)]
pub struct StepReport {
    /// The step's loss: the mean of its samples' losses (a sequence model's: of its tokens').
    pub loss: F32,
    /// Outputs scored in the step's batch: its samples, or a sequence model's tokens (section
    /// 15.8).
    pub samples: usize,
    /// Of those, the ones classified correctly (classification only), by section 10's rule.
    pub correct: Option<usize>,
}

/// The report of one epoch (`docs/TRAINING.md`, section 13): the steps this trainer ran in it
/// (all of them, unless it began mid-epoch, e.g. resumed from a checkpoint). Information: not
/// part of the state.
#[derive(Clone, Copy, Debug)]
pub struct EpochReport {
    /// The epoch's index (0-based); `epoch + 1` epochs are now complete.
    pub epoch: i64,
    /// The mean of the steps' losses: `(Σ step losses in order) / f32(steps)`.
    pub loss: F32,
    pub steps: i64,
    /// Samples classified correctly during the steps (classification only).
    pub correct: Option<usize>,
    pub samples: usize,
    /// Whether the trainer ran every step of the epoch (from its first batch).
    pub whole: bool,
}

impl EpochReport {
    /// The steps' accuracy ([`crate::loss::accuracy`]); None for regression.
    pub fn accuracy(&self) -> Option<f64> {
        self.correct.map(|c| crate::loss::accuracy(c, self.samples))
    }
}

/// The running report of the epoch under way (information, not state): it continues only while
/// the steps it sees follow each other, so a state replaced or resumed starts a new one.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tally {
    epoch: i64,
    /// The batch the next step of this tally must be.
    next_batch: i64,
    whole: bool,
    loss: F32,
    steps: i64,
    correct: usize,
    samples: usize,
}

/// Batches per epoch of `data` under `config`; `state`'s position must lie inside an epoch of
/// it (data with fewer batches is not the data the state was trained on: `Error::Input`, as any
/// data that does not fit; `Error::Mismatch` is for checkpoints of another run).
pub(super) fn batches_per_epoch(
    config: &TrainerConfig,
    state: &TrainState,
    data: &Dataset,
) -> Result<usize> {
    let batches = config.batches_per_epoch(data.len());
    if batches == 0 {
        return Err(Error::Input(format!(
            "drop_last with {} samples and batch_size {} leaves no batch",
            data.len(),
            config.batch_size
        )));
    }
    if state.batch as u64 >= batches as u64 {
        return Err(Error::Input(format!(
            "the state is at batch {} of its epoch, but an epoch of these {} samples has \
             only {batches} batches: this is not the data set it was trained on",
            state.batch,
            data.len()
        )));
    }
    Ok(batches)
}

/// The order of the samples of `state`'s epoch: the identity, or the epoch's permutation.
pub(super) fn sample_order(
    config: &TrainerConfig,
    state: &TrainState,
    samples: usize,
) -> Vec<usize> {
    if config.shuffle {
        Stream::new(config.seed, Domain::Shuffle, state.epoch as u64).permutation(samples)
    } else {
        (0..samples).collect()
    }
}

impl Tally {
    /// Counts a step of the epoch structure in `state` (an epoch has `batches` batches) and in
    /// the running report `tally`: `step` and `batch` advance, and after the epoch's last batch
    /// `epoch` does and `batch` returns to 0. Returns the epoch's report when it ended
    /// (`correct` counted when `classifies`).
    pub(super) fn count_step(
        tally: &mut Option<Tally>,
        state: &mut TrainState,
        (batches, classifies): (usize, bool),
        report: &StepReport,
    ) -> Option<EpochReport> {
        let s = state;
        let (epoch, batch) = (s.epoch, s.batch);
        s.step += 1;
        s.batch += 1;
        let correct = report.correct.unwrap_or(0);
        let next = match *tally {
            Some(t) if t.epoch == epoch && t.next_batch == batch => Tally {
                next_batch: batch + 1,
                loss: t.loss + report.loss,
                steps: t.steps + 1,
                correct: t.correct + correct,
                samples: t.samples + report.samples,
                ..t
            },
            _ => Tally {
                epoch,
                next_batch: batch + 1,
                whole: batch == 0,
                loss: report.loss,
                steps: 1,
                correct,
                samples: report.samples,
            },
        };
        if s.batch as u64 != batches as u64 {
            *tally = Some(next);
            return None;
        }
        s.epoch += 1;
        s.batch = 0;
        *tally = None;
        Some(EpochReport {
            epoch,
            loss: next.loss / F32::from_i64(next.steps),
            steps: next.steps,
            correct: classifies.then_some(next.correct),
            samples: next.samples,
            whole: next.whole,
        })
    }
}

/// The samples of batch `b` of an epoch's `order`.
pub(super) fn batch_of(order: &[usize], b: usize, batch_size: usize) -> &[usize] {
    &order[b * batch_size..((b + 1) * batch_size).min(order.len())]
}
