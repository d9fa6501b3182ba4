//! The trainer: a configuration, its model and the state it advances, step by step and epoch by
//! epoch, as `docs/TRAINING.md` defines them; the training loop, with a callback between steps
//! that can stop it (Ctrl-C, progress, checkpoints); evaluation and prediction.

use crate::arith::{cells, cells_mut, Real};
use crate::backend::{Backend, BackendChoice, FpEnvGuard, Native};
use crate::config::TrainerConfig;
use crate::dataset::{Dataset, Targets};
use crate::error::{Error, Result};
use crate::hash;
use crate::loss::{argmax, Loss, Target};
use crate::math::Math;
use crate::mlp::{Accumulate, Layer, Mlp, Scratch};
use crate::optim::{clip_by_global_norm, StepScalars};
use crate::rng::{Domain, Stream};
use crate::softf32::F32;
use crate::state::{zeroed_like, TrainState};
use std::ops::ControlFlow;

/// Where a run stops (besides a callback asking it to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// When `epoch` epochs are complete (nothing happens if they already are).
    Epoch(i64),
    /// When `step` optimiser steps have been taken in total.
    Step(i64),
}

/// What the callback of [`Trainer::run`] hears about.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    /// A step is done; the state's counters already count it.
    Step(StepReport),
    /// An epoch is done (after its last step's event).
    EpochEnd(EpochReport),
}

#[derive(Clone, Copy, Debug)]
pub struct StepReport {
    /// The step's loss: the mean of its samples' losses.
    pub loss: F32,
    /// Samples in the step's batch.
    pub samples: usize,
    /// Samples of the batch classified correctly (classification only), by section 10's rule.
    pub correct: Option<usize>,
}

/// The training loss and accuracy of one epoch, over the samples this run saw (all of them,
/// unless the run began mid-epoch from a checkpoint). Information: not part of the state.
#[derive(Clone, Copy, Debug)]
pub struct EpochReport {
    /// The epoch's index (0-based); `epoch + 1` epochs are now complete.
    pub epoch: i64,
    /// `(Σ sample losses in order) / f32(samples)`.
    pub loss: F32,
    /// Correctly classified samples (classification only).
    pub correct: Option<usize>,
    pub samples: usize,
}

/// Loss and accuracy of a model on a data set.
#[derive(Clone, Copy, Debug)]
pub struct Evaluation {
    /// `(Σ sample losses in order) / f32(samples)`.
    pub loss: F32,
    pub correct: Option<usize>,
    pub samples: usize,
}

/// Per-batch working memory.
#[derive(Clone, Debug)]
struct Work {
    scratch: Scratch,
    /// The batch's gradient (the first block's sum, then the total, then the mean).
    total: Vec<Layer>,
    /// The sum of a block after the first.
    block: Vec<Layer>,
}

/// Sums of one batch: the sample losses and correct predictions.
struct BatchSums {
    loss: F32,
    correct: usize,
}

/// An MLP with its optimiser state, and the backend it computes with (not part of the state:
/// every backend gives the same bits).
#[derive(Clone, Debug)]
pub struct Trainer {
    config: TrainerConfig,
    mlp: Mlp,
    state: TrainState,
    work: Work,
    backend: Backend,
}

impl Trainer {
    /// A trainer at the start of a run: weights from the configuration's `init` and `seed`.
    pub fn new(config: TrainerConfig) -> Result<Trainer> {
        let mlp = config.validate()?;
        let params = mlp.init_params(config.init, config.seed);
        let state = TrainState::fresh(params, config.optimizer.kind.has_second_moments());
        Trainer::from_state(config, state)
    }

    /// A trainer continuing `state` (e.g. read from a checkpoint). The state's tensors must have
    /// the model's sizes.
    pub fn from_state(config: TrainerConfig, state: TrainState) -> Result<Trainer> {
        let mlp = config.validate()?;
        state.check_fits(&mlp, config.optimizer.kind.has_second_moments())?;
        let work = Work {
            scratch: Scratch::new(&mlp),
            total: state.params.iter().map(zeroed_like).collect(),
            block: Vec::new(),
        };
        Ok(Trainer {
            config,
            mlp,
            state,
            work,
            backend: Backend::Soft,
        })
    }

    /// The backend training, evaluation and prediction compute with ([`Backend::Soft`] unless
    /// set).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Computes with `backend` from now on. [`Backend::Hw`] needs [`crate::backend::hardware`]:
    /// otherwise `Error::Config` says why not, and nothing changes.
    pub fn set_backend(&mut self, backend: Backend) -> Result<()> {
        if backend == Backend::Hw {
            BackendChoice::Hw.resolve()?;
        }
        self.backend = backend;
        Ok(())
    }

    /// Computes with the backend `choice` resolves to (see [`BackendChoice::resolve`]); returns
    /// the self-check's failure when `Auto` fell back to soft because of it.
    pub fn choose_backend(&mut self, choice: BackendChoice) -> Result<Option<&'static str>> {
        let (backend, warning) = choice.resolve()?;
        self.backend = backend;
        Ok(warning)
    }

    pub fn config(&self) -> &TrainerConfig {
        &self.config
    }

    pub fn mlp(&self) -> &Mlp {
        &self.mlp
    }

    pub fn state(&self) -> &TrainState {
        &self.state
    }

    /// Replaces the whole training state; its tensors must have this model's sizes.
    pub fn set_state(&mut self, state: TrainState) -> Result<()> {
        let second_moments = self.config.optimizer.kind.has_second_moments();
        state.check_fits(&self.mlp, second_moments)?;
        self.state = state;
        Ok(())
    }

    /// The seed's `hstate` of the current state (see [`hash::seed_hash`]).
    pub fn seed_hash(&self) -> u64 {
        hash::seed_hash(&self.state)
    }

    /// The hash of the whole state (see [`hash::state_hash`]).
    pub fn state_hash(&self) -> u64 {
        hash::state_hash(&self.state)
    }

    /// Checks that `data` fits the model and its loss: the feature count, and class labels for
    /// at most the model's outputs (cross-entropy; [`Dataset::new`] checked each label against
    /// its classes) or one target value per output (MSE).
    pub fn check_data(&self, data: &Dataset) -> Result<()> {
        if data.features() != self.mlp.inputs() {
            return Err(Error::Input(format!(
                "samples have {} features, the model takes {}",
                data.features(),
                self.mlp.inputs()
            )));
        }
        let outputs = self.mlp.outputs();
        match (self.config.loss, data.targets()) {
            (Loss::CrossEntropy, Targets::Labels { classes, .. }) if *classes <= outputs => Ok(()),
            (Loss::CrossEntropy, Targets::Labels { classes, .. }) => Err(Error::Input(format!(
                "labels of {classes} classes do not fit the model's {outputs} outputs"
            ))),
            (Loss::Mse, Targets::Values { width, .. }) if *width == outputs => Ok(()),
            (Loss::Mse, Targets::Values { width, .. }) => Err(Error::Input(format!(
                "targets have {width} values per sample, the model has {outputs} outputs"
            ))),
            (Loss::CrossEntropy, Targets::Values { .. }) => Err(Error::Input(
                "a cross-entropy model is trained on integer class labels, not float targets"
                    .into(),
            )),
            (Loss::Mse, Targets::Labels { .. }) => Err(Error::Input(
                "an mse model is trained on float targets, not class labels".into(),
            )),
        }
    }

    /// One optimiser step on the given samples of `data` (in that order), outside the epoch
    /// structure: the step counter advances, `epoch` and `batch` do not. Returns the step's loss.
    pub fn step(&mut self, data: &Dataset, samples: &[usize]) -> Result<F32> {
        self.check_data(data)?;
        if samples.is_empty() {
            return Err(Error::Input("a step needs at least one sample".into()));
        }
        if let Some(&s) = samples.iter().find(|&&s| s >= data.len()) {
            return Err(Error::Input(format!(
                "sample index {s} is outside the data set's {} samples",
                data.len()
            )));
        }
        let sums = self.step_unchecked(data, samples);
        self.state.step += 1;
        Ok(sums.loss / F32::from_i64(samples.len() as i64))
    }

    /// Trains on `data` from the state's position (epoch, batch) until `until`, or until
    /// `on_event` breaks (it is called after every step and at the end of every epoch, with
    /// the trainer in a consistent state that a checkpoint can save). Returns whether the run
    /// reached `until`.
    pub fn run(
        &mut self,
        data: &Dataset,
        until: Until,
        mut on_event: impl FnMut(&Trainer, &Event) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>> {
        self.check_data(data)?;
        let batches = self.batches_per_epoch(data)?;
        let batch_size = self.config.batch_size;
        let mut epoch_sums: Option<(BatchSums, usize)> = None;
        while !self.reached(until) {
            let order = self.sample_order(data.len());
            let first = self.state.batch as usize;
            for b in first..batches {
                let samples = &order[b * batch_size..((b + 1) * batch_size).min(data.len())];
                let sums = self.step_unchecked(data, samples);
                let loss = sums.loss / F32::from_i64(samples.len() as i64);
                let correct = sums.correct;
                epoch_sums = Some(match epoch_sums {
                    None => (sums, samples.len()),
                    Some((acc, n)) => (
                        BatchSums {
                            loss: acc.loss + sums.loss,
                            correct: acc.correct + sums.correct,
                        },
                        n + samples.len(),
                    ),
                });
                self.state.step += 1;
                self.state.batch += 1;
                let epoch_done = b + 1 == batches;
                if epoch_done {
                    self.state.epoch += 1;
                    self.state.batch = 0;
                }
                let step = Event::Step(StepReport {
                    loss,
                    samples: samples.len(),
                    correct: self.classifies().then_some(correct),
                });
                if on_event(self, &step).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
                if epoch_done {
                    let (sums, n) = epoch_sums.take().expect("a step was summed");
                    let end = Event::EpochEnd(EpochReport {
                        epoch: self.state.epoch - 1,
                        loss: sums.loss / F32::from_i64(n as i64),
                        correct: self.classifies().then_some(sums.correct),
                        samples: n,
                    });
                    if on_event(self, &end).is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                }
                if self.reached(until) {
                    return Ok(ControlFlow::Continue(()));
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The seed's `train_run`: whole epochs until `epoch` epochs are complete.
    pub fn train_until(&mut self, data: &Dataset, epoch: i64) -> Result<()> {
        self.run(data, Until::Epoch(epoch), |_, _| ControlFlow::Continue(()))
            .map(|_| ())
    }

    /// The model's loss (and accuracy, for classification) on `data`. Changes nothing.
    pub fn evaluate(&self, data: &Dataset) -> Result<Evaluation> {
        self.check_data(data)?;
        Ok(match self.backend {
            Backend::Soft => self.evaluate_in::<F32>(data),
            Backend::Hw => {
                let _env = FpEnvGuard::new();
                self.evaluate_in::<Native>(data)
            }
        })
    }

    #[inline(never)] // see `hardware_call`
    fn evaluate_in<R: Real>(&self, data: &Dataset) -> Evaluation {
        let math = self.config.math;
        let mut scratch = Scratch::new(&self.mlp);
        let mut delta = vec![F32::ZERO; self.mlp.outputs()];
        let mut loss_sum: Option<R> = None;
        let mut correct = 0;
        for s in 0..data.len() {
            let (x, target) = data.sample(s);
            let target = target.cells::<R>();
            self.mlp
                .forward::<R>(math, &self.state.params, cells(x), &mut scratch);
            let (z, outputs) = scratch.z_and_outputs::<R>();
            let loss = self
                .config
                .loss
                .forward(math, z, target, outputs, cells_mut(&mut delta));
            loss_sum = Some(loss_sum.map_or(loss, |sum| sum + loss));
            correct += usize::from(is_correct(math, outputs, target));
        }
        let loss = loss_sum.expect("data sets are not empty") / R::from_i64(data.len() as i64);
        Evaluation {
            loss: loss.to_f32(),
            correct: self.classifies().then_some(correct),
            samples: data.len(),
        }
    }

    /// The model's outputs for row-major `inputs`: probabilities (cross-entropy) or values
    /// (MSE), `outputs` per sample, row-major. Changes nothing.
    pub fn predict(&self, inputs: &[F32]) -> Result<Vec<F32>> {
        let features = self.mlp.inputs();
        if inputs.len() % features != 0 {
            return Err(Error::Input(format!(
                "{} feature values do not make rows of {features}",
                inputs.len()
            )));
        }
        Ok(match self.backend {
            Backend::Soft => self.predict_in::<F32>(inputs),
            Backend::Hw => {
                let _env = FpEnvGuard::new();
                self.predict_in::<Native>(inputs)
            }
        })
    }

    #[inline(never)] // see `hardware_call`
    fn predict_in<R: Real>(&self, inputs: &[F32]) -> Vec<F32> {
        let features = self.mlp.inputs();
        let mut scratch = Scratch::new(&self.mlp);
        let mut out = Vec::with_capacity(inputs.len() / features * self.mlp.outputs());
        for x in inputs.chunks(features) {
            self.mlp
                .forward::<R>(self.config.math, &self.state.params, cells(x), &mut scratch);
            let (z, outputs) = scratch.z_and_outputs::<R>();
            self.config.loss.outputs(self.config.math, z, outputs);
            out.extend_from_slice(&scratch.outputs);
        }
        out
    }

    fn classifies(&self) -> bool {
        self.config.loss == Loss::CrossEntropy
    }

    fn reached(&self, until: Until) -> bool {
        match until {
            Until::Epoch(epoch) => self.state.epoch >= epoch,
            Until::Step(step) => self.state.step >= step,
        }
    }

    /// Batches per epoch of `data`; the state's position must lie inside an epoch of it.
    fn batches_per_epoch(&self, data: &Dataset) -> Result<usize> {
        let batches = self.config.batches_per_epoch(data.len());
        if batches == 0 {
            return Err(Error::Input(format!(
                "drop_last with {} samples and batch_size {} leaves no batch",
                data.len(),
                self.config.batch_size
            )));
        }
        if self.state.batch as u64 >= batches as u64 {
            return Err(Error::Mismatch(format!(
                "the state is at batch {} of its epoch, but an epoch of these {} samples has \
                 only {batches} batches: this is not the data set it was trained on",
                self.state.batch,
                data.len()
            )));
        }
        Ok(batches)
    }

    /// The order of the current epoch's samples: the identity, or the epoch's permutation.
    fn sample_order(&self, samples: usize) -> Vec<usize> {
        if self.config.shuffle {
            Stream::new(self.config.seed, Domain::Shuffle, self.state.epoch as u64)
                .permutation(samples)
        } else {
            (0..samples).collect()
        }
    }

    // hardware_call: the `*_in` functions run under an [`FpEnvGuard`] for the hardware backend.
    // They are never inlined, so all their floating-point operations happen inside the call, between
    // the guard's two register writes: the compiler assumes the default environment and could
    // otherwise move an operation whose operands it already has across them.

    /// Gradient of the batch `samples` (blocked sums, then the mean), optional clipping, then
    /// the optimiser's update, on the trainer's backend. Advances `b1t`, `b2t` but no counters.
    fn step_unchecked(&mut self, data: &Dataset, samples: &[usize]) -> BatchSums {
        match self.backend {
            Backend::Soft => self.step_in::<F32>(data, samples),
            Backend::Hw => {
                let _env = FpEnvGuard::new();
                self.step_in::<Native>(data, samples)
            }
        }
    }

    /// [`Trainer::step_unchecked`] computing in `R` on the stored cells.
    #[inline(never)] // see `hardware_call`
    fn step_in<R: Real>(&mut self, data: &Dataset, samples: &[usize]) -> BatchSums {
        let config = &self.config;
        let (math, loss_kind) = (config.math, config.loss);
        let params = &self.state.params;
        let work = &mut self.work;
        let mut sums: Option<(R, usize)> = None;
        for (k, block) in samples.chunks(config.block_len()).enumerate() {
            if k == 1 && work.block.is_empty() {
                work.block = params.iter().map(zeroed_like).collect();
            }
            let into = if k == 0 {
                &mut work.total
            } else {
                &mut work.block
            };
            for (i, &s) in block.iter().enumerate() {
                let (x, target) = data.sample(s);
                let target = target.cells::<R>();
                let accumulate = if i == 0 {
                    Accumulate::Write
                } else {
                    Accumulate::Add
                };
                let loss = self.mlp.sample_gradient::<R>(
                    math,
                    loss_kind,
                    params,
                    cells(x),
                    target,
                    &mut work.scratch,
                    into,
                    accumulate,
                );
                let correct = usize::from(is_correct(math, cells(&work.scratch.outputs), target));
                sums = Some(match sums {
                    None => (loss, correct),
                    Some((loss_sum, correct_sum)) => (loss_sum + loss, correct_sum + correct),
                });
            }
            if k > 0 {
                for (total, block) in work.total.iter_mut().zip(&work.block) {
                    add_assign::<R>(cells_mut(&mut total.w), cells(&block.w));
                    add_assign::<R>(cells_mut(&mut total.b), cells(&block.b));
                }
            }
        }
        let batch = R::from_i64(samples.len() as i64);
        for layer in work.total.iter_mut() {
            let (w, b): (&mut [R], &mut [R]) = (cells_mut(&mut layer.w), cells_mut(&mut layer.b));
            for g in w.iter_mut().chain(b.iter_mut()) {
                *g = *g / batch;
            }
        }
        if let Some(max_norm) = config.clip_norm {
            clip_by_global_norm::<R>(&mut work.total, max_norm);
        }
        let s = &mut self.state;
        let lr = config.schedule.rate(config.optimizer.lr, s.step as u64);
        let scalars = StepScalars::advance(&config.optimizer, lr, &mut s.b1t, &mut s.b2t);
        for (l, grad) in work.total.iter().enumerate() {
            let (p, m) = (&mut s.params[l], &mut s.m[l]);
            let (vw, vb): (&mut [F32], &mut [F32]) = match s.v.get_mut(l) {
                Some(v) => (&mut v.w, &mut v.b),
                None => (&mut [], &mut []),
            };
            let update = |p: &mut [F32], g: &[F32], m: &mut [F32], v: &mut [F32]| {
                config.optimizer.update::<R>(
                    math,
                    &scalars,
                    cells_mut(p),
                    cells(g),
                    cells_mut(m),
                    cells_mut(v),
                );
            };
            update(&mut p.w, &grad.w, &mut m.w, vw);
            update(&mut p.b, &grad.b, &mut m.b, vb);
        }
        let (loss, correct) = sums.expect("a batch has at least one sample");
        BatchSums {
            loss: loss.to_f32(),
            correct,
        }
    }
}

/// Whether the maximum of the probabilities `p` (section 10's rule) is the sample's label.
fn is_correct<R: Real>(math: Math, p: &[R], target: Target<'_, R>) -> bool {
    matches!(target, Target::Class(label) if argmax(math, p) == label)
}

/// `total[i] = total[i] + x[i]`: a block's sum added to the blocks before it.
fn add_assign<R: Real>(total: &mut [R], x: &[R]) {
    for (t, &x) in total.iter_mut().zip(x) {
        *t = *t + x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_until_a_past_epoch_does_nothing() {
        let mut t = Trainer::new(TrainerConfig::seed_model()).unwrap();
        let before = t.state_hash();
        t.train_until(&Dataset::seed(8, 6, 4), 0).unwrap();
        assert_eq!(t.state_hash(), before);
    }

    #[test]
    fn step_checks_its_input() {
        let mut t = Trainer::new(TrainerConfig::seed_model()).unwrap();
        let data = Dataset::seed(8, 6, 4);
        let wrong = Dataset::seed(8, 5, 4);
        assert!(matches!(t.step(&wrong, &[0]), Err(Error::Input(_))));
        assert!(matches!(t.step(&data, &[8]), Err(Error::Input(_))));
        assert!(matches!(t.step(&data, &[]), Err(Error::Input(_))));
        assert!(t.step(&data, &[0]).is_ok());
        assert_eq!(t.state().step, 1);
    }
}
