//! The trainer: a configuration, its model and the state it advances, step by step and epoch by
//! epoch, as `docs/TRAINING.md` defines them; the training loop, with a callback between steps
//! that can stop it (Ctrl-C, progress, checkpoints); evaluation and prediction.
//!
//! This module holds the [`Trainer`] type and its API; the others hold its parts, each knowing
//! nothing of the `Trainer` itself: `step` the optimiser step (a batch's gradient blocks, their
//! sum, the update), `epoch` the epoch structure (counters, sample order, the epoch's report), `chunk` a bounded
//! stretch of the training loop (its stop rules and tally),
//! `inference` evaluation and prediction, and `setup` what they read besides the state. Every
//! computation runs on the trainer's backend through [`Backend::run`].

mod chunk;
mod epoch;
mod inference;
mod setup;
mod step;

pub use chunk::{Chunk, Limits};
pub use epoch::{EpochReport, Event, StepReport, Until};
pub use inference::Evaluation;
pub use step::BlockGradient;

use crate::backend::{Backend, BackendChoice};
use crate::config::TrainerConfig;
use crate::dataset::{Dataset, Targets};
use crate::error::{Error, Result};
use crate::loss::Loss;
use crate::model::Model;
use crate::params::Layer;
use crate::rng::{Domain, Stream};
use crate::sampling::Sampling;
use crate::softf32::F32;
use crate::state::TrainState;
use crate::threads::Threads;
use crate::{digest, hash};
use epoch::{batch_of, Tally};
use setup::Setup;
use std::ops::ControlFlow;
use step::Work;

/// A model with its optimiser state, and the backend it computes with (not part of the state:
/// every backend gives the same bits).
#[derive(Clone, Debug)]
pub struct Trainer {
    config: TrainerConfig,
    model: Model,
    state: TrainState,
    work: Work,
    backend: Backend,
    threads: Threads,
    tally: Option<Tally>,
}

impl Trainer {
    /// A trainer at the start of a run: weights from the configuration's `init` and `seed`.
    pub fn new(config: TrainerConfig) -> Result<Trainer> {
        let model = config.validate()?;
        let (params, buffers) = model.init(config.init, config.seed);
        let second_moments = config.optimizer.kind.has_second_moments();
        let state = TrainState::fresh(params, buffers, second_moments);
        Trainer::from_state(config, state)
    }

    /// A trainer continuing `state` (e.g. read from a checkpoint). The state's tensors must have
    /// the model's sizes.
    pub fn from_state(config: TrainerConfig, state: TrainState) -> Result<Trainer> {
        let model = config.validate()?;
        state.check_fits(&model, config.optimizer.kind.has_second_moments())?;
        let work = Work::new(&model);
        Ok(Trainer {
            config,
            model,
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

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn state(&self) -> &TrainState {
        &self.state
    }

    /// Replaces the whole training state; its tensors must have this model's sizes.
    pub fn set_state(&mut self, state: TrainState) -> Result<()> {
        let second_moments = self.config.optimizer.kind.has_second_moments();
        state.check_fits(&self.model, second_moments)?;
        self.state = state;
        self.tally = None;
        Ok(())
    }

    /// Replaces the parameters (weights and biases) and the step count and nothing else: a
    /// data-parallel worker's replica following the driver's (the step keys dropout's masks).
    /// They must have this model's shapes.
    pub fn set_params(&mut self, params: Vec<Layer>, step: i64) -> Result<()> {
        self.model.check_shaped(&params, "parameters")?;
        if step < 0 {
            return Err(Error::Input(format!("step {step} is negative")));
        }
        self.state.params = params;
        self.state.step = step;
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

    /// The SHA-256 digest of the whole state and the configuration (see
    /// [`digest::state_digest`]).
    pub fn state_digest(&self) -> digest::Digest {
        let second_moments = self.config.optimizer.kind.has_second_moments();
        let layout = TrainState::layout(&self.model, second_moments);
        digest::state_digest(&self.config, &layout, &self.state)
    }

    /// Checks that `data` fits the model and its loss: the feature count, a sequence model's
    /// token ids, and class labels for at most the model's outputs (cross-entropy, one per
    /// sample or a sequence model's one per token; [`Dataset::new`] checked each label against
    /// its classes) or one target value per output (MSE).
    pub fn check_data(&self, data: &Dataset) -> Result<()> {
        if data.features() != self.model.inputs() {
            return Err(Error::Input(format!(
                "samples have {} features, the model takes {}",
                data.features(),
                self.model.inputs()
            )));
        }
        // A token stream's ids were checked against its classes when it was built, and `fit`
        // passes the same stream again for every chunk of steps: the scan (a million ids) is
        // needed only where the model's vocabulary is smaller than those classes.
        let ids_checked = match data.targets() {
            Targets::Labels { classes, .. } => {
                data.is_stream() && self.model.tokens().is_some_and(|t| *classes <= t.vocab)
            }
            Targets::Values { .. } => false,
        };
        if !ids_checked {
            self.model
                .check_token_ids(data.inputs(), data.is_stream())?;
        }
        let (outputs, per_sample) = (self.model.classes(), self.model.labels_per_sample());
        match (self.config.loss, data.targets()) {
            (Loss::CrossEntropy, Targets::Labels { per_sample: n, .. }) if *n != per_sample => {
                Err(Error::Input(format!(
                    "{n} label(s) per sample given, the model scores {per_sample} (one per token \
                     of a model whose output is a sequence, else one)"
                )))
            }
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
        if data.is_stream() {
            return self.run_stream(data, until, on_event);
        }
        let batches = self.batches_per_epoch(data)?;
        while !until.reached(&self.state) {
            let order = epoch::sample_order(&self.config, &self.state, data.len());
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
                if until.reached(&self.state) {
                    return Ok(ControlFlow::Continue(()));
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// [`Trainer::run`] on a token stream (section 15.8): no epochs, each step on the
    /// windows its step number draws ([`Trainer::stream_batch`]); only `step` counts.
    fn run_stream(
        &mut self,
        data: &Dataset,
        until: Until,
        mut on_event: impl FnMut(&Trainer, &Event) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>> {
        if let Until::Epoch(_) = until {
            return Err(Error::Input(
                "a token stream trains by steps, not epochs: give the steps".into(),
            ));
        }
        while !until.reached(&self.state) {
            let samples = self.stream_batch(data);
            let report = self.step_unchecked(data, &samples);
            self.state.step += 1;
            if on_event(self, &Event::Step(report)).is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The windows of a token stream the state's step trains on (section 15.8):
    /// `batch_size` draws `below(windows)` from the stream `(seed, WINDOW, step)`, in order.
    fn stream_batch(&self, data: &Dataset) -> Vec<usize> {
        let mut stream = Stream::new(self.config.seed, Domain::Window, self.state.step as u64);
        let windows = data.len() as u64;
        (0..self.config.batch_size)
            .map(|_| stream.below(windows) as usize)
            .collect()
    }

    /// `count` windows of the token stream `data` drawn from the stream `(seed, EVALUATE,
    /// part)` (`below(windows)` each, in order) as a data set of their own: the same windows
    /// at every evaluation, drawn from a stream no step reads (section 15.8).
    pub fn stream_windows(&self, data: &Dataset, count: usize, part: u64) -> Result<Dataset> {
        if !data.is_stream() {
            return Err(Error::Input("windows are drawn from a token stream".into()));
        }
        self.check_data(data)?;
        let mut stream = Stream::new(self.config.seed, Domain::Evaluate, part);
        let windows = data.len() as u64;
        let positions: Vec<usize> = (0..count).map(|_| stream.below(windows) as usize).collect();
        Ok(data.samples_at(&positions))
    }

    /// The samples of the batch the state is at (batch `batch` of epoch `epoch`, or a token
    /// stream's step's windows), cut into gradient blocks: what [`Trainer::apply_blocks`]
    /// expects the blocks of, in this order.
    pub fn batch_blocks(&self, data: &Dataset) -> Result<Vec<Vec<usize>>> {
        self.check_data(data)?;
        if data.is_stream() {
            let samples = self.stream_batch(data);
            return Ok(samples
                .chunks(self.config.block_len())
                .map(<[usize]>::to_vec)
                .collect());
        }
        self.batches_per_epoch(data)?;
        let order = epoch::sample_order(&self.config, &self.state, data.len());
        let samples = batch_of(&order, self.state.batch as usize, self.config.batch_size);
        Ok(samples
            .chunks(self.config.block_len())
            .map(<[usize]>::to_vec)
            .collect())
    }

    /// The gradient block of `samples` (indices into `data`, in order; the first at position
    /// `first_sample` of its batch, which dropout's masks read) at the current parameters, on
    /// the trainer's backend. Changes nothing: it reads only the parameters and the step count,
    /// so a replica with the same ones computes the same block.
    pub fn block_gradient(
        &self,
        data: &Dataset,
        samples: &[usize],
        first_sample: usize,
    ) -> Result<BlockGradient> {
        self.check_data(data)?;
        check_samples(data, samples)?;
        let setup = self.setup();
        Ok(step::block_gradient(
            self.backend,
            setup,
            &self.state,
            data,
            samples,
            first_sample,
        ))
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
            self.model.check_shaped(&block.grads, "gradient block")?;
        }
        let batch = expected.iter().map(Vec::len).sum();
        // A token stream has no epochs: only the step counts.
        let batches = match data.is_stream() {
            true => None,
            false => Some(self.batches_per_epoch(data)?),
        };
        let backend = self.backend;
        let (setup, state, work) = self.parts();
        let report = work.combine(backend, setup, state, blocks, batch);
        let epoch_end = match batches {
            Some(batches) => self.count_step(batches, &report),
            None => {
                self.state.step += 1;
                None
            }
        };
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
        if data.is_stream() {
            return Err(Error::Input(
                "a token stream is evaluated on windows drawn from it (stream_windows)".into(),
            ));
        }
        let setup = self.setup();
        Ok(inference::evaluate(self.backend, setup, &self.state, data))
    }

    /// Generates `count` tokens after `prompt` (token ids) with a sequence model scored per
    /// token (section 15.9): each from the logits at the last position of the newest `T` ids
    /// (fewer at first, the positions after them holding id 0, which a causal model does not
    /// read), drawn by `sampling`. Returns the prompt followed by the new ids. Changes
    /// nothing.
    pub fn generate(
        &self,
        prompt: &[usize],
        count: usize,
        sampling: &Sampling,
    ) -> Result<Vec<usize>> {
        let Some(tokens) = self.model.tokens().filter(|t| t.per_token) else {
            return Err(Error::Input(
                "generate needs a model whose output is a sequence scored token by token (such \
                 as nxrs.layers.gpt's)"
                    .into(),
            ));
        };
        let (t, classes) = (tokens.tokens, self.model.classes());
        sampling.check(classes)?;
        if prompt.is_empty() {
            return Err(Error::Input(
                "the prompt is empty: generation continues at least one token".into(),
            ));
        }
        if let Some((k, &id)) = prompt
            .iter()
            .enumerate()
            .find(|&(_, &id)| id >= tokens.vocab)
        {
            return Err(Error::Input(format!(
                "prompt token {k} is {id}, not an id in 0..{} (the Embedding's vocab)",
                tokens.vocab
            )));
        }
        if classes > tokens.vocab {
            return Err(Error::Input(format!(
                "the model has {classes} classes per token but a vocabulary of {}: a drawn \
                 class would not be a token to continue with",
                tokens.vocab
            )));
        }
        let setup = self.setup();
        let ids = prompt.to_vec();
        Ok(inference::generate(
            self.backend,
            setup,
            &self.state,
            ids,
            count,
            t,
            sampling,
        ))
    }

    /// The model's outputs for row-major `inputs`: probabilities (cross-entropy) or values
    /// (MSE), `outputs` per sample, row-major. Changes nothing.
    pub fn predict(&self, inputs: &[F32]) -> Result<Vec<F32>> {
        let features = self.model.inputs();
        if !inputs.len().is_multiple_of(features) {
            return Err(Error::Input(format!(
                "{} feature values do not make rows of {features}",
                inputs.len()
            )));
        }
        let setup = self.setup();
        Ok(inference::predict(
            self.backend,
            setup,
            &self.state,
            inputs,
            false,
        ))
    }

    /// The step on the batch `samples`: its blocks' sums, combined and applied, on the
    /// trainer's backend. Advances `b1t`, `b2t` but no counters.
    fn step_unchecked(&mut self, data: &Dataset, samples: &[usize]) -> StepReport {
        let backend = self.backend;
        let (setup, state, work) = self.parts();
        work.step(backend, setup, state, data, samples)
    }

    /// Batches per epoch of `data`; the state's position must lie inside an epoch of it.
    fn batches_per_epoch(&self, data: &Dataset) -> Result<usize> {
        epoch::batches_per_epoch(&self.config, &self.state, data)
    }

    /// Counts a step of the epoch structure (an epoch has `batches` batches); the epoch's
    /// report when the step ended it.
    fn count_step(&mut self, batches: usize, report: &StepReport) -> Option<EpochReport> {
        let classifies = self.config.loss == Loss::CrossEntropy;
        Tally::count_step(
            &mut self.tally,
            &mut self.state,
            (batches, classifies),
            report,
        )
    }

    fn setup(&self) -> Setup<'_> {
        Setup {
            config: &self.config,
            model: &self.model,
            threads: &self.threads,
        }
    }

    /// What a step reads, the state it changes and its working memory.
    fn parts(&mut self) -> (Setup<'_>, &mut TrainState, &mut Work) {
        let setup = Setup {
            config: &self.config,
            model: &self.model,
            threads: &self.threads,
        };
        (setup, &mut self.state, &mut self.work)
    }
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
