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
use crate::mlp::{BlockRecords, Layer, Mlp, Scratch, Transposed};
use crate::optim::{clip_by_global_norm, StepScalars};
use crate::rng::{Domain, Stream};
use crate::softf32::F32;
use crate::state::{zeroed_like, TrainState};
use crate::threads::{ranges, split, Threads};
use std::ops::ControlFlow;

/// An optimiser update's work per cell, in multiply-adds, for sharing cells out among threads.
const CELL_WORK: usize = 16;

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

/// One gradient block of a batch (`docs/TRAINING.md`, section 5): what a worker computes in
/// data-parallel training, and what [`Trainer::apply_blocks`] combines.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockGradient {
    /// The sum of the block's per-sample gradients in sample order, shaped like the parameters.
    pub grads: Vec<Layer>,
    /// Each sample's loss, in order.
    pub losses: Vec<F32>,
    /// Samples classified correctly (0 for regression).
    pub correct: usize,
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
    block_work: BlockWork,
    /// The current parameters' weights, transposed for the forward pass.
    transposed: Transposed,
    /// The batch's gradient (the first block's sum, then the total, then the mean).
    total: Vec<Layer>,
    /// The sum of a block after the first.
    block: Vec<Layer>,
    /// The batch's sample losses, in order.
    losses: Vec<F32>,
}

/// The running report of the epoch under way (information, not state): it continues only while
/// the steps it sees follow each other, so a state replaced or resumed starts a new one.
#[derive(Clone, Copy, Debug)]
struct Tally {
    epoch: i64,
    /// The batch the next step of this tally must be.
    next_batch: i64,
    whole: bool,
    loss: F32,
    steps: i64,
    correct: usize,
    samples: usize,
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
    threads: Threads,
    tally: Option<Tally>,
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
            block_work: BlockWork::default(),
            transposed: Transposed::new(&mlp),
            total: state.params.iter().map(zeroed_like).collect(),
            block: Vec::new(),
            losses: Vec::new(),
        };
        Ok(Trainer {
            config,
            mlp,
            state,
            work,
            backend: Backend::Soft,
            threads: Threads::ONE,
            tally: None,
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

    /// The threads training and prediction use (not part of the state: any number gives the
    /// same bits). One unless set.
    pub fn threads(&self) -> &Threads {
        &self.threads
    }

    pub fn set_threads(&mut self, threads: Threads) {
        self.threads = threads;
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
        self.tally = None;
        Ok(())
    }

    /// Replaces the parameters (weights and biases) and nothing else: a data-parallel worker's
    /// replica following the driver's. They must have this model's shapes.
    pub fn set_params(&mut self, params: Vec<Layer>) -> Result<()> {
        self.mlp.check_shaped(&params, "parameters")?;
        self.state.params = params;
        self.tally = None;
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
        check_samples(data, samples)?;
        let report = self.step_unchecked(data, samples);
        self.state.step += 1;
        // A step outside the epoch structure: the epoch under way is no longer all the run's.
        self.tally = None;
        Ok(report.loss)
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
        while !self.reached(until) {
            let order = self.sample_order(data.len());
            for b in self.state.batch as usize..batches {
                let samples = batch_of(&order, b, self.config.batch_size);
                let report = self.step_unchecked(data, samples);
                let epoch_end = self.count_step(batches, &report);
                if on_event(self, &Event::Step(report)).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
                if let Some(end) = epoch_end {
                    if on_event(self, &Event::EpochEnd(end)).is_break() {
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

    /// The samples of the batch the state is at (batch `batch` of epoch `epoch`), cut into
    /// gradient blocks: what [`Trainer::apply_blocks`] expects the blocks of, in this order.
    pub fn batch_blocks(&self, data: &Dataset) -> Result<Vec<Vec<usize>>> {
        self.check_data(data)?;
        self.batches_per_epoch(data)?;
        let order = self.sample_order(data.len());
        let samples = batch_of(&order, self.state.batch as usize, self.config.batch_size);
        Ok(samples
            .chunks(self.config.block_len())
            .map(<[usize]>::to_vec)
            .collect())
    }

    /// The gradient block of `samples` (indices into `data`, in order) at the current
    /// parameters, on the trainer's backend. Changes nothing: it reads only the parameters, so a
    /// replica with the same parameters computes the same block.
    pub fn block_gradient(&self, data: &Dataset, samples: &[usize]) -> Result<BlockGradient> {
        self.check_data(data)?;
        check_samples(data, samples)?;
        let mut block = BlockGradient {
            grads: self.mlp.zeros(),
            losses: Vec::with_capacity(samples.len()),
            correct: 0,
        };
        let mut work = BlockWork::default();
        let transposed = self.transposed();
        let model = Model::new(
            &self.mlp,
            &self.config,
            &self.threads,
            &self.state.params,
            &transposed,
        );
        block.correct = match self.backend {
            Backend::Soft => model.block_sum::<F32>(
                data,
                samples,
                &mut work,
                &mut block.grads,
                &mut block.losses,
            ),
            Backend::Hw => {
                let _env = FpEnvGuard::new();
                model.block_sum::<Native>(
                    data,
                    samples,
                    &mut work,
                    &mut block.grads,
                    &mut block.losses,
                )
            }
        };
        Ok(block)
    }

    /// Takes the step of the batch the state is at from its blocks (those of
    /// [`Trainer::batch_blocks`], each computed by [`Trainer::block_gradient`] at the current
    /// parameters, given in block order) and advances the counters as [`Trainer::run`] does:
    /// the same bits as `run`'s step. Returns the step's report and, when the step ended an
    /// epoch, the epoch's.
    pub fn apply_blocks(
        &mut self,
        data: &Dataset,
        blocks: &[BlockGradient],
    ) -> Result<(StepReport, Option<EpochReport>)> {
        let expected = self.batch_blocks(data)?;
        if blocks.len() != expected.len() {
            return Err(Error::Input(format!(
                "the batch has {} gradient blocks, {} were given",
                expected.len(),
                blocks.len()
            )));
        }
        for (k, (block, samples)) in blocks.iter().zip(&expected).enumerate() {
            if block.losses.len() != samples.len() {
                return Err(Error::Input(format!(
                    "gradient block {k} holds {} sample losses, the block has {} samples",
                    block.losses.len(),
                    samples.len()
                )));
            }
            self.mlp.check_shaped(&block.grads, "gradient block")?;
        }
        let batch = expected.iter().map(Vec::len).sum();
        let work = &mut self.work;
        for (total, first) in work.total.iter_mut().zip(&blocks[0].grads) {
            total.w.copy_from_slice(&first.w);
            total.b.copy_from_slice(&first.b);
        }
        work.losses.clear();
        let mut correct = 0;
        for block in blocks {
            work.losses.extend_from_slice(&block.losses);
            correct += block.correct;
        }
        let added = blocks[1..].iter().map(|block| block.grads.as_slice());
        match self.backend {
            Backend::Soft => self.combine_and_update::<F32>(added, batch),
            Backend::Hw => {
                let _env = FpEnvGuard::new();
                self.combine_and_update::<Native>(added, batch)
            }
        }
        let report = self.step_report(batch, correct);
        let batches = self.batches_per_epoch(data)?;
        let epoch_end = self.count_step(batches, &report);
        Ok((report, epoch_end))
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
        let transposed = self.transposed();
        let n = data.len();
        let mut losses = vec![F32::ZERO; n];
        let mut correct = vec![false; n];
        let ranges = ranges(n, self.threads.parts(n, self.mlp.parameters()));
        let tasks = ranges
            .clone()
            .zip(split(&mut losses[..], ranges.clone(), 1))
            .zip(split(&mut correct[..], ranges, 1));
        self.threads.run(tasks, |((range, losses), correct)| {
            let _env = R::environment();
            let mut scratch = Scratch::new(&self.mlp);
            let mut delta = vec![F32::ZERO; self.mlp.outputs()];
            for (k, s) in range.enumerate() {
                let (x, target) = data.sample(s);
                let target = target.cells::<R>();
                self.mlp.forward::<R>(
                    math,
                    &self.state.params,
                    &transposed,
                    cells(x),
                    &mut scratch,
                );
                let (z, outputs) = scratch.z_and_outputs::<R>();
                let loss =
                    self.config
                        .loss
                        .forward(math, z, target, outputs, cells_mut(&mut delta));
                losses[k] = loss.to_f32();
                correct[k] = is_correct(math, outputs, target);
            }
        });
        // The losses summed in sample order (softf32 gives every backend's bits).
        let sum = losses[1..].iter().fold(losses[0], |sum, &loss| sum + loss);
        Evaluation {
            loss: sum / F32::from_i64(n as i64),
            correct: self
                .classifies()
                .then(|| correct.iter().filter(|&&c| c).count()),
            samples: n,
        }
    }

    /// The model's outputs for row-major `inputs`: probabilities (cross-entropy) or values
    /// (MSE), `outputs` per sample, row-major. Changes nothing.
    pub fn predict(&self, inputs: &[F32]) -> Result<Vec<F32>> {
        let features = self.mlp.inputs();
        if !inputs.len().is_multiple_of(features) {
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
        let (features, width) = (self.mlp.inputs(), self.mlp.outputs());
        let transposed = self.transposed();
        let n = inputs.len() / features;
        let mut out = vec![F32::ZERO; n * width];
        let ranges = ranges(n, self.threads.parts(n, self.mlp.parameters()));
        let tasks = split(inputs, ranges.clone(), features).zip(split(&mut out[..], ranges, width));
        self.threads.run(tasks, |(inputs, out)| {
            let _env = R::environment();
            let mut scratch = Scratch::new(&self.mlp);
            for (x, out) in inputs.chunks(features).zip(out.chunks_mut(width)) {
                self.mlp.forward::<R>(
                    self.config.math,
                    &self.state.params,
                    &transposed,
                    cells(x),
                    &mut scratch,
                );
                let (z, outputs) = scratch.z_and_outputs::<R>();
                self.config.loss.outputs(self.config.math, z, outputs);
                out.copy_from_slice(&scratch.outputs);
            }
        });
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

    /// The current weights, transposed for the forward pass.
    fn transposed(&self) -> Transposed {
        let mut transposed = Transposed::new(&self.mlp);
        transposed.refresh(&self.mlp, &self.state.params);
        transposed
    }

    /// The step on the batch `samples`: its blocks' sums, combined and applied (see
    /// [`Trainer::combine_and_update`]), on the trainer's backend. Advances `b1t`, `b2t` but no
    /// counters.
    fn step_unchecked(&mut self, data: &Dataset, samples: &[usize]) -> StepReport {
        let correct = match self.backend {
            Backend::Soft => self.step_in::<F32>(data, samples),
            Backend::Hw => {
                let _env = FpEnvGuard::new();
                self.step_in::<Native>(data, samples)
            }
        };
        self.step_report(samples.len(), correct)
    }

    /// [`Trainer::step_unchecked`] computing in `R`; returns the samples classified correctly
    /// (the losses are left in `work.losses`).
    #[inline(never)] // see `hardware_call`
    fn step_in<R: Real>(&mut self, data: &Dataset, samples: &[usize]) -> usize {
        let block_len = self.config.block_len();
        if samples.len() > block_len && self.work.block.is_empty() {
            self.work.block = self.mlp.zeros();
        }
        let work = &mut self.work;
        work.transposed.refresh(&self.mlp, &self.state.params);
        let model = Model::new(
            &self.mlp,
            &self.config,
            &self.threads,
            &self.state.params,
            &work.transposed,
        );
        work.losses.clear();
        let mut blocks = samples.chunks(block_len);
        let first = blocks.next().expect("a batch has at least one sample");
        let mut correct = model.block_sum::<R>(
            data,
            first,
            &mut work.block_work,
            &mut work.total,
            &mut work.losses,
        );
        for block in blocks {
            correct += model.block_sum::<R>(
                data,
                block,
                &mut work.block_work,
                &mut work.block,
                &mut work.losses,
            );
            add_layers::<R>(&mut work.total, &work.block);
        }
        self.update::<R>(samples.len());
        correct
    }

    /// The batch total from the first block's sum (in `work.total`) and the sums of the others,
    /// in block order; then the mean and the update. Computes in `R`.
    #[inline(never)] // see `hardware_call`
    fn combine_and_update<'a, R: Real>(
        &mut self,
        added: impl Iterator<Item = &'a [Layer]>,
        batch: usize,
    ) {
        for block in added {
            add_layers::<R>(&mut self.work.total, block);
        }
        self.update::<R>(batch);
    }

    /// From the batch total in `work.total`: the mean gradient `total / f32(batch)`, optional
    /// clipping, then the optimiser's update. Advances `b1t`, `b2t`.
    fn update<R: Real>(&mut self, batch: usize) {
        let config = &self.config;
        let work = &mut self.work;
        let batch = R::from_i64(batch as i64);
        R::vectorized(
            #[inline(always)]
            || {
                for layer in work.total.iter_mut() {
                    for tensor in [&mut layer.w, &mut layer.b] {
                        for g in cells_mut::<R>(tensor) {
                            *g = *g / batch;
                        }
                    }
                }
            },
        );
        if let Some(max_norm) = config.clip_norm {
            clip_by_global_norm::<R>(&mut work.total, max_norm);
        }
        let s = &mut self.state;
        let lr = config.schedule.rate(config.optimizer.lr, s.step as u64);
        let scalars = StepScalars::advance(&config.optimizer, lr, &mut s.b1t, &mut s.b2t);
        // Every tensor's cells cut into the same number of parts, part `p` of each tensor going
        // to thread `p` (a cell's update reads only its own values, so the cut changes no bit).
        let count = self.threads.parts(self.mlp.parameters(), CELL_WORK);
        let threads = if count > 1 {
            &self.threads
        } else {
            &Threads::ONE // too little work for any thread but this one
        };
        let mut second_moments = s.v.iter_mut();
        let tensors =
            work.total
                .iter()
                .zip(&mut s.params)
                .zip(&mut s.m)
                .flat_map(|((grad, p), m)| {
                    let (vw, vb): (&mut [F32], &mut [F32]) = match second_moments.next() {
                        Some(v) => (&mut v.w, &mut v.b),
                        None => (&mut [], &mut []),
                    };
                    [
                        (&mut p.w[..], &grad.w[..], &mut m.w[..], vw),
                        (&mut p.b[..], &grad.b[..], &mut m.b[..], vb),
                    ]
                });
        let parts = tensors.flat_map(|(p, g, m, v)| {
            let ranges = ranges(p.len(), count);
            let v_width = usize::from(!v.is_empty()); // SGD keeps no second moments
            split(p, ranges.clone(), 1)
                .zip(split(g, ranges.clone(), 1))
                .zip(split(m, ranges.clone(), 1))
                .zip(split(v, ranges, v_width))
                .map(|(((p, g), m), v)| (p, g, m, v))
        });
        threads.run(parts, |(p, g, m, v)| {
            let _env = R::environment();
            config.optimizer.update::<R>(
                config.math,
                &scalars,
                cells_mut(p),
                cells(g),
                cells_mut(m),
                cells_mut(v),
            );
        });
    }

    /// The report of the step whose sample losses are in `work.losses`: their sum in batch
    /// order over the batch size (section 5; softf32 gives every backend's bits).
    fn step_report(&self, samples: usize, correct: usize) -> StepReport {
        let losses = &self.work.losses;
        let sum = losses[1..].iter().fold(losses[0], |sum, &loss| sum + loss);
        StepReport {
            loss: sum / F32::from_i64(samples as i64),
            samples,
            correct: self.classifies().then_some(correct),
        }
    }

    /// Counts a step of the epoch structure (an epoch has `batches` batches): `step` and
    /// `batch` advance, and after the epoch's last batch `epoch` does and `batch` returns to 0.
    /// Returns the epoch's report when it ended.
    fn count_step(&mut self, batches: usize, report: &StepReport) -> Option<EpochReport> {
        let s = &mut self.state;
        let (epoch, batch) = (s.epoch, s.batch);
        s.step += 1;
        s.batch += 1;
        let correct = report.correct.unwrap_or(0);
        let tally = match self.tally {
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
            self.tally = Some(tally);
            return None;
        }
        s.epoch += 1;
        s.batch = 0;
        self.tally = None;
        Some(EpochReport {
            epoch,
            loss: tally.loss / F32::from_i64(tally.steps),
            steps: tally.steps,
            correct: self.classifies().then_some(tally.correct),
            samples: tally.samples,
            whole: tally.whole,
        })
    }
}

/// What computing a gradient reads: the model's sizes, its loss and arithmetic settings, and
/// its parameters.
struct Model<'a> {
    mlp: &'a Mlp,
    math: Math,
    loss: Loss,
    params: &'a [Layer],
    transposed: &'a Transposed,
    threads: &'a Threads,
}

impl<'a> Model<'a> {
    fn new(
        mlp: &'a Mlp,
        config: &TrainerConfig,
        threads: &'a Threads,
        params: &'a [Layer],
        transposed: &'a Transposed,
    ) -> Model<'a> {
        Model {
            mlp,
            math: config.math,
            loss: config.loss,
            params,
            transposed,
            threads,
        }
    }

    /// Writes into `into` the sum of the gradients of `samples` (in order, from the first
    /// sample's gradient), appends their losses to `losses`; returns how many were classified
    /// correctly. The samples' forward and backward passes are shared out among the threads,
    /// then the weight rows' sums (see [`Mlp::block_gradient`]).
    fn block_sum<R: Real>(
        &self,
        data: &Dataset,
        samples: &[usize],
        work: &mut BlockWork,
        into: &mut [Layer],
        losses: &mut Vec<F32>,
    ) -> usize {
        let n = samples.len();
        let parts = self.threads.parts(n, self.mlp.parameters());
        let ranges = ranges(n, parts);
        if work.scratches.len() < parts {
            work.scratches.resize_with(parts, || Scratch::new(self.mlp));
        }
        work.losses.resize(n, F32::ZERO);
        work.correct.resize(n, false);
        self.mlp.start_block(&mut work.records, n);
        let tasks = ranges
            .clone()
            .zip(work.records.parts(self.mlp, ranges.clone()))
            .zip(work.scratches.iter_mut())
            .zip(split(&mut work.losses[..], ranges.clone(), 1))
            .zip(split(&mut work.correct[..], ranges, 1));
        self.threads.run(
            tasks,
            |((((range, mut records), scratch), losses), correct)| {
                let _env = R::environment();
                for (k, &s) in samples[range].iter().enumerate() {
                    let (x, target) = data.sample(s);
                    let target = target.cells::<R>();
                    let loss = self.mlp.record_sample::<R>(
                        self.math,
                        self.loss,
                        self.params,
                        self.transposed,
                        cells(x),
                        target,
                        scratch,
                        &mut records,
                        k,
                    );
                    losses[k] = loss.to_f32();
                    correct[k] = is_correct(self.math, cells(&scratch.outputs), target);
                }
            },
        );
        self.mlp
            .block_gradient::<R>(&mut work.records, into, self.threads);
        losses.extend_from_slice(&work.losses);
        work.correct.iter().filter(|&&c| c).count()
    }
}

/// What computing a block's gradient writes: one scratch per thread, the block's records, and
/// its samples' losses and whether each was classified correctly.
#[derive(Clone, Debug, Default)]
struct BlockWork {
    scratches: Vec<Scratch>,
    records: BlockRecords,
    losses: Vec<F32>,
    correct: Vec<bool>,
}

/// The samples of batch `b` of an epoch's `order`.
fn batch_of(order: &[usize], b: usize, batch_size: usize) -> &[usize] {
    &order[b * batch_size..((b + 1) * batch_size).min(order.len())]
}

/// Checks that `samples` is a batch of `data`: not empty, every index inside it.
fn check_samples(data: &Dataset, samples: &[usize]) -> Result<()> {
    if samples.is_empty() {
        return Err(Error::Input("a step needs at least one sample".into()));
    }
    if let Some(&s) = samples.iter().find(|&&s| s >= data.len()) {
        return Err(Error::Input(format!(
            "sample index {s} is outside the data set's {} samples",
            data.len()
        )));
    }
    Ok(())
}

/// `total = total + block`, cell by cell: a block's sum added to the blocks before it.
fn add_layers<R: Real>(total: &mut [Layer], block: &[Layer]) {
    for (total, block) in total.iter_mut().zip(block) {
        R::add_assign(cells_mut(&mut total.w), cells(&block.w));
        R::add_assign(cells_mut(&mut total.b), cells(&block.b));
    }
}

/// Whether the maximum of the probabilities `p` (section 10's rule) is the sample's label.
fn is_correct<R: Real>(math: Math, p: &[R], target: Target<'_, R>) -> bool {
    matches!(target, Target::Class(label) if argmax(math, p) == label)
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
