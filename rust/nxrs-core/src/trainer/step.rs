//! The optimiser step (`docs/TRAINING.md`, section 5): a batch cut into gradient blocks, each
//! block's gradient summed over its samples by the model's network, the blocks' sums added in
//! order, the mean, optional clipping and the optimiser's update, on the trainer's backend.

use super::epoch::StepReport;
use super::setup::Setup;
use crate::arith::{cells, cells_mut, Real};
use crate::backend::{Backend, Compute};
use crate::dataset::Dataset;
use crate::layers::network::{Cells, Parameters};
use crate::layers::pass::{Context, Mode};
use crate::layers::transposed::Transposed;
use crate::loss::Loss;
use crate::model::Model;
use crate::optim::{clip_by_global_norm, StepScalars};
use crate::params::Layer;
use crate::softf32::F32;
use crate::state::TrainState;
use core::ops::Range;

/// One gradient block of a batch (`docs/TRAINING.md`, section 5): what a worker computes in
/// data-parallel training, and what [`crate::Trainer::apply_blocks`] combines.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockGradient {
    /// The sum of the block's per-sample gradients in sample order, shaped like the parameters.
    pub grads: Vec<Layer>,
    /// Each sample's loss, in order.
    pub losses: Vec<F32>,
    /// Samples classified correctly (0 for regression).
    pub correct: usize,
    /// The block statistics of every BatchNorm (section 15.2), which update the running
    /// averages once per block, in block order, when the step is taken.
    pub statistics: Vec<Vec<F32>>,
}

/// A step's working memory, kept from step to step: nothing a step needs is allocated anew once
/// it has grown.
#[derive(Clone, Debug)]
pub(super) struct Work {
    /// The network's cells for a block's passes.
    cells: Cells,
    /// The current parameters' Dense weights transposed, refreshed once per step.
    transposed: Transposed,
    /// Each sample's loss, and how many of its outputs were classified correctly, of the block
    /// under way.
    results: Vec<(F32, usize)>,
    /// The BatchNorm statistics of the block under way.
    statistics: Vec<Vec<F32>>,
    /// The batch's gradient (the first block's sum, then the total, then the mean).
    total: Vec<Layer>,
    /// The sum of a block after the first.
    block: Vec<Layer>,
    /// The batch's sample losses, in order.
    losses: Vec<F32>,
}

impl Work {
    /// Working memory for `model`'s steps.
    pub(super) fn new(model: &Model) -> Work {
        Work {
            cells: Cells::default(),
            transposed: Transposed::new(model.network()),
            results: Vec::new(),
            statistics: Vec::new(),
            total: model.zeros(),
            block: Vec::new(),
            losses: Vec::new(),
        }
    }

    /// The step on the batch `samples`: its blocks' sums, combined, then the mean and the
    /// update, on `backend`. Advances `b1t`, `b2t` but no counters; returns the step's report.
    pub(super) fn step(
        &mut self,
        backend: Backend,
        setup: Setup<'_>,
        state: &mut TrainState,
        data: &Dataset,
        samples: &[usize],
    ) -> StepReport {
        let correct = backend.run(Step {
            setup,
            state,
            work: self,
            data,
            samples,
        });
        self.report(setup, samples.len(), correct)
    }

    /// The step of a batch of `batch` samples from its `blocks` (checked by the caller), on
    /// `backend`: the first block's sum, the others added in block order, then the mean and the
    /// update. Returns the step's report.
    pub(super) fn combine(
        &mut self,
        backend: Backend,
        setup: Setup<'_>,
        state: &mut TrainState,
        blocks: &[BlockGradient],
        batch: usize,
    ) -> StepReport {
        for (total, first) in self.total.iter_mut().zip(&blocks[0].grads) {
            total.w.copy_from_slice(&first.w);
            total.b.copy_from_slice(&first.b);
        }
        self.losses.clear();
        let mut correct = 0;
        for block in blocks {
            self.losses.extend_from_slice(&block.losses);
            correct += block.correct;
        }
        backend.run(Combine {
            setup,
            state,
            total: &mut self.total,
            blocks,
            batch,
        });
        self.report(setup, batch, correct)
    }

    /// The report of the step of `samples` whose sample losses are in `losses`: their sum in
    /// batch order over the scored outputs (section 5: the batch size; section 15.8: a
    /// sequence model's tokens; softf32 gives every backend's bits).
    fn report(&self, setup: Setup<'_>, samples: usize, correct: usize) -> StepReport {
        let losses = &self.losses;
        let sum = losses[1..].iter().fold(losses[0], |sum, &loss| sum + loss);
        let scored = samples * setup.model.labels_per_sample();
        StepReport {
            loss: sum / F32::from_i64(scored as i64),
            samples: scored,
            correct: (setup.config.loss == Loss::CrossEntropy).then_some(correct),
        }
    }
}

/// The gradient block of `samples` (the first at position `first_sample` of its batch) at
/// `state`'s parameters, on `backend`. Reads only the parameters and the step count.
pub(super) fn block_gradient(
    backend: Backend,
    setup: Setup<'_>,
    state: &TrainState,
    data: &Dataset,
    samples: &[usize],
    first_sample: usize,
) -> BlockGradient {
    let mut block = BlockGradient {
        grads: setup.model.zeros(),
        losses: Vec::with_capacity(samples.len()),
        correct: 0,
        statistics: Vec::new(),
    };
    let transposed = Transposed::of(setup.model.network(), &state.params);
    block.correct = backend.run(BlockSum {
        block: Block {
            setup,
            state,
            transposed: &transposed,
            data,
            samples,
            first_sample,
        },
        into: &mut block,
    });
    block
}

/// A block's gradient pass: what it reads, and where its samples lie in the batch (the dropout
/// masks' sample positions).
struct Block<'a> {
    setup: Setup<'a>,
    state: &'a TrainState,
    transposed: &'a Transposed,
    data: &'a Dataset,
    samples: &'a [usize],
    first_sample: usize,
}

impl Block<'_> {
    /// Writes into `into` the block gradient of the samples (one chain per parameter cell over
    /// the block's terms, sections 5 and 15.3), appends their losses to `losses` and leaves the
    /// block's BatchNorm statistics in `statistics`; returns how many were classified correctly.
    fn sum<R: Real>(
        &self,
        (cells, results): (&mut Cells, &mut Vec<(F32, usize)>),
        into: &mut [Layer],
        losses: &mut Vec<F32>,
        statistics: &mut Vec<Vec<F32>>,
    ) -> usize {
        let (config, net) = (self.setup.config, self.setup.model.network());
        let (features, width) = (self.setup.model.inputs(), net.outputs());
        let context = Context {
            math: config.math,
            mode: Mode::Train {
                seed: config.seed,
                step: self.state.step as u64,
                first_sample: self.first_sample,
            },
            threads: self.setup.threads,
        };
        let parameters = Parameters {
            params: &self.state.params,
            running: &self.state.buffers,
            transposed: self.transposed,
        };
        let samples = self.samples;
        let input = |range: Range<usize>, x: &mut [F32]| {
            for (x, &s) in x.chunks_exact_mut(features).zip(&samples[range]) {
                x.copy_from_slice(self.data.sample(s).0);
            }
        };
        let loss = |range: Range<usize>, z: &[R], delta: &mut [R], results: &mut [(F32, usize)]| {
            let mut outputs = vec![R::ZERO; width];
            let rows = z.chunks_exact(width).zip(delta.chunks_exact_mut(width));
            for ((z, delta), (result, &s)) in rows.zip(results.iter_mut().zip(&samples[range])) {
                let target = self.data.sample(s).1.cells::<R>();
                let (loss, correct) =
                    config
                        .loss
                        .sample(config.math, z, target, &mut outputs, delta);
                *result = (loss.to_f32(), correct);
            }
        };
        results.resize(samples.len(), (F32::ZERO, 0));
        net.train::<R, _>(context, parameters, cells, input, loss, results, into);
        net.statistics(cells, statistics);
        losses.extend(results.iter().map(|&(loss, _)| loss));
        results.iter().map(|&(_, correct)| correct).sum()
    }
}

/// [`Work::step`]'s computation; returns the samples classified correctly (the losses are left
/// in `work.losses`).
struct Step<'a> {
    setup: Setup<'a>,
    state: &'a mut TrainState,
    work: &'a mut Work,
    data: &'a Dataset,
    samples: &'a [usize],
}

impl Compute for Step<'_> {
    type Output = usize;

    fn compute<R: Real>(self) -> usize {
        let Step {
            setup,
            state,
            work,
            data,
            samples,
        } = self;
        let block_len = setup.config.block_len();
        if samples.len() > block_len && work.block.is_empty() {
            work.block = setup.model.zeros();
        }
        work.losses.clear();
        work.transposed.refresh(&state.params);
        let mut correct = 0;
        for (k, block) in samples.chunks(block_len).enumerate() {
            let into = if k == 0 {
                &mut work.total
            } else {
                &mut work.block
            };
            let pass = Block {
                setup,
                state,
                transposed: &work.transposed,
                data,
                samples: block,
                first_sample: k * block_len,
            };
            let cells = (&mut work.cells, &mut work.results);
            correct += pass.sum::<R>(cells, into, &mut work.losses, &mut work.statistics);
            let net = setup.model.network();
            net.update_running::<R>(block.len(), &work.statistics, &mut state.buffers);
            if k > 0 {
                add_layers::<R>(&mut work.total, &work.block);
            }
        }
        update::<R>(setup, state, &mut work.total, samples.len());
        correct
    }
}

/// [`block_gradient`]'s computation: the block's sum, losses and statistics written into
/// `into`; returns the samples classified correctly.
struct BlockSum<'a> {
    block: Block<'a>,
    into: &'a mut BlockGradient,
}

impl Compute for BlockSum<'_> {
    type Output = usize;

    fn compute<R: Real>(self) -> usize {
        let into = self.into;
        self.block.sum::<R>(
            (&mut Cells::default(), &mut Vec::new()),
            &mut into.grads,
            &mut into.losses,
            &mut into.statistics,
        )
    }
}

/// [`Work::combine`]'s computation: the batch total from the first block's sum (in `total`) and
/// the sums of the others, in block order; then the running statistics, the mean and the
/// update.
struct Combine<'a> {
    setup: Setup<'a>,
    state: &'a mut TrainState,
    total: &'a mut [Layer],
    /// Every block, the first one's sum already in `total`.
    blocks: &'a [BlockGradient],
    batch: usize,
}

impl Compute for Combine<'_> {
    type Output = ();

    fn compute<R: Real>(self) {
        let Combine {
            setup,
            state,
            total,
            blocks,
            batch,
        } = self;
        for block in &blocks[1..] {
            add_layers::<R>(total, &block.grads);
        }
        let net = setup.model.network();
        for block in blocks {
            let rows = block.losses.len();
            net.update_running::<R>(rows, &block.statistics, &mut state.buffers);
        }
        update::<R>(setup, state, total, batch);
    }
}

/// From the batch total in `total`: the mean gradient `total / f32(batch)` (`batch * T` for a
/// sequence model's `T` tokens, section 15.8), optional clipping, then the optimiser's update of
/// `state`. Advances `b1t`, `b2t`.
fn update<R: Real>(setup: Setup<'_>, state: &mut TrainState, total: &mut [Layer], batch: usize) {
    let config = setup.config;
    let batch = R::from_i64((batch * setup.model.labels_per_sample()) as i64);
    R::vectorized(
        #[inline(always)]
        || {
            for layer in total.iter_mut() {
                for tensor in [&mut layer.w, &mut layer.b] {
                    for g in cells_mut::<R>(tensor) {
                        *g = *g / batch;
                    }
                }
            }
        },
    );
    if let Some(max_norm) = config.clip_norm {
        clip_by_global_norm::<R>(total, max_norm);
    }
    let s = state;
    let lr = config.schedule.rate(config.optimizer.lr, s.step as u64);
    let scalars = StepScalars::advance(&config.optimizer, lr, &mut s.b1t, &mut s.b2t);
    let decayed = setup.model.decayed_tensors(config.optimizer.decay_params);
    config.optimizer.apply::<R>(
        config.math,
        &scalars,
        &decayed,
        total,
        &mut s.params,
        &mut s.m,
        &mut s.v,
        setup.threads,
    );
}

/// `total = total + block`, cell by cell: a block's sum added to the blocks before it.
fn add_layers<R: Real>(total: &mut [Layer], block: &[Layer]) {
    for (total, block) in total.iter_mut().zip(block) {
        R::add_assign(cells_mut(&mut total.w), cells(&block.w));
        R::add_assign(cells_mut(&mut total.b), cells(&block.b));
    }
}
