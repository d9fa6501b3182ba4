//! A bounded stretch of training: [`Trainer::run`] until `until`, at most so many steps, for
//! at most so long, or to the end of an epoch, tallying what it did. A caller that must act
//! between stretches (a Python binding releasing its lock and checking Ctrl-C) runs one after
//! another, adding each to the tally, until the limits say the run is over.

use super::{EpochReport, Event, Trainer, Until};
use crate::dataset::Dataset;
use crate::error::Result;
use crate::softf32::F32;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// When a bounded run stops.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Where the run ends.
    pub until: Until,
    /// At most this many steps in all.
    pub max_steps: Option<u64>,
    /// One stretch lasts at most this long (a step is never cut short).
    pub max_time: Duration,
    /// Keep every step's loss (else only the count).
    pub keep_losses: bool,
    /// Also stop at the end of an epoch.
    pub stop_after_epoch: bool,
}

/// What a bounded run did.
#[derive(Clone, Debug, Default)]
pub struct Chunk {
    /// The reports of the epochs that ended, in order.
    pub epochs: Vec<EpochReport>,
    /// The steps taken.
    pub steps: u64,
    /// Every step's loss, when the limits keep them.
    pub losses: Vec<F32>,
    /// Whether the trainer reached `until`.
    pub reached: bool,
}

impl Chunk {
    /// Whether the run that did this has nothing more to do under `limits`: every allowed
    /// step taken, `until` reached, or (when it stops there) an epoch ended.
    pub fn finished(&self, limits: &Limits) -> bool {
        limits.max_steps.is_some_and(|m| self.steps >= m)
            || self.reached
            || (limits.stop_after_epoch && !self.epochs.is_empty())
    }

    /// Adds `next`, the stretch that followed, to this tally.
    pub fn extend(&mut self, next: Chunk) {
        self.epochs.extend(next.epochs);
        self.steps += next.steps;
        self.losses.extend(next.losses);
        self.reached = next.reached;
    }
}

impl Trainer {
    /// One stretch of a run within `limits`, after `taken` steps of it: trains until `until`,
    /// the steps left, `max_time` or (with `stop_after_epoch`) an epoch's end. A stop that
    /// falls on an epoch's last step waits for the epoch's report, so the tally has it.
    pub fn run_chunk(&mut self, data: &Dataset, limits: &Limits, taken: u64) -> Result<Chunk> {
        let start = Instant::now();
        let max_steps = limits.max_steps.map(|m| m.saturating_sub(taken));
        let mut out = Chunk::default();
        if max_steps == Some(0) {
            out.reached = limits.until.reached(self.state());
            return Ok(out);
        }
        let mut stop_at_epoch_end = false;
        // Whether the run broke or reached `until`: `reached` below says which.
        let _ = self.run(data, limits.until, |t, event| match event {
            Event::Step(report) => {
                out.steps += 1;
                if limits.keep_losses {
                    out.losses.push(report.loss);
                }
                // Every step of `run` on a data set is in the epoch structure: batch 0 after
                // it means it ended its epoch, whose report is the next event. A token
                // stream has no epochs.
                let epoch_done = !data.is_stream() && t.state().batch == 0;
                let out_of_steps = max_steps.is_some_and(|m| out.steps >= m);
                let epoch_stop = epoch_done && limits.stop_after_epoch;
                if out_of_steps || epoch_stop || start.elapsed() >= limits.max_time {
                    if epoch_done {
                        stop_at_epoch_end = true;
                        return ControlFlow::Continue(());
                    }
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            }
            Event::EpochEnd(end) => {
                out.epochs.push(*end);
                if stop_at_epoch_end {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
        })?;
        out.reached = limits.until.reached(self.state());
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrainerConfig;

    /// A seed-model trainer with two steps an epoch (8 samples, batches of 4).
    fn trainer() -> (Trainer, Dataset) {
        let mut config = TrainerConfig::seed_model();
        config.batch_size = 4;
        (Trainer::new(config).unwrap(), Dataset::seed(8, 6, 4))
    }

    fn limits(until: Until, max_steps: Option<u64>, stop_after_epoch: bool) -> Limits {
        Limits {
            until,
            max_steps,
            max_time: Duration::MAX,
            keep_losses: true,
            stop_after_epoch,
        }
    }

    #[test]
    fn a_stretch_stops_at_its_steps_or_an_epochs_end_with_the_epochs_report() {
        let (mut t, data) = trainer();
        let three = limits(Until::Epoch(3), Some(3), false);
        let chunk = t.run_chunk(&data, &three, 0).unwrap();
        assert_eq!(
            (chunk.steps, chunk.epochs.len(), chunk.losses.len()),
            (3, 1, 3)
        );
        assert!(chunk.finished(&three) && !chunk.reached);
        // Nothing left after every allowed step.
        let none = t.run_chunk(&data, &three, 3).unwrap();
        assert_eq!((none.steps, none.epochs.len()), (0, 0));

        // A step limit on an epoch's last step still reports the epoch.
        let (mut t, data) = trainer();
        let two = limits(Until::Epoch(3), Some(2), false);
        let chunk = t.run_chunk(&data, &two, 0).unwrap();
        assert_eq!((chunk.steps, chunk.epochs.len()), (2, 1));

        let (mut t, data) = trainer();
        let epoch = limits(Until::Epoch(3), None, true);
        let chunk = t.run_chunk(&data, &epoch, 0).unwrap();
        assert_eq!((chunk.steps, chunk.epochs.len()), (2, 1));
        assert!(chunk.finished(&epoch));
    }

    #[test]
    fn stretches_out_of_time_add_up_to_the_run() {
        let (mut t, data) = trainer();
        let mut limits = limits(Until::Epoch(2), None, false);
        limits.max_time = Duration::ZERO;
        limits.keep_losses = false;
        let (mut total, mut stretches) = (Chunk::default(), 0);
        while !total.finished(&limits) {
            let chunk = t.run_chunk(&data, &limits, total.steps).unwrap();
            // Out of time after every step, unless it ends an epoch (its report follows).
            assert_eq!(chunk.steps, 1);
            total.extend(chunk);
            stretches += 1;
        }
        assert_eq!((stretches, total.steps, total.epochs.len()), (4, 4, 2));
        assert!(total.reached && total.losses.is_empty());
    }
}
