//! The optimiser step (`docs/TRAINING.md`, section 5): a batch cut into gradient blocks, each
//! block's gradient summed over its samples, the blocks' sums added in order, the mean, optional
//! clipping and the optimiser's update, on the trainer's backend.

use super::epoch::StepReport;
use super::inference::is_correct;
use super::Trainer;
use crate::arith::{cells, cells_mut, Real};
use crate::backend::Compute;
use crate::config::TrainerConfig;
use crate::dataset::Dataset;
use crate::layers::network::Cells;
use crate::layers::pass::{Context, Mode};
use crate::layers::Network;
use crate::loss::Loss;
use crate::math::Math;
use crate::mlp::{BlockRecords, Layer, Mlp, Transposed};
use crate::model::Model;
use crate::optim::{clip_by_global_norm, StepScalars};
use crate::softf32::F32;
use crate::threads::{ranges, split, Threads};

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
    /// The block statistics of every BatchNorm (section 15.2), which update the running
    /// averages once per block, in block order, when the step is taken.
    pub statistics: Vec<Vec<F32>>,
}

/// Per-batch working memory.
#[derive(Clone, Debug)]
pub(super) struct Work {
    block_work: BlockWork,
    /// An MLP's current weights, transposed for the forward pass.
    transposed: Option<Transposed>,
    /// A layer model's cells for a block's passes.
    cells: Cells,
    /// A layer model's BatchNorm statistics of the block under way.
    statistics: Vec<Vec<F32>>,
    /// The batch's gradient (the first block's sum, then the total, then the mean).
    pub(super) total: Vec<Layer>,
    /// The sum of a block after the first.
    block: Vec<Layer>,
    /// The batch's sample losses, in order.
    pub(super) losses: Vec<F32>,
}

impl Work {
    /// Working memory for `model`'s batches.
    pub(super) fn new(model: &Model) -> Work {
        Work {
            block_work: BlockWork::default(),
            transposed: match model {
                Model::Mlp(mlp) => Some(Transposed::new(mlp)),
                Model::Network(_) => None,
            },
            cells: Cells::default(),
            statistics: Vec::new(),
            total: model.zeros(),
            block: Vec::new(),
            losses: Vec::new(),
        }
    }
}

/// What computing a block's gradient writes: the model's outputs for one sample per thread,
/// the block's records, and its samples' losses and whether each was classified correctly.
#[derive(Clone, Debug, Default)]
struct BlockWork {
    outputs: Vec<Vec<F32>>,
    records: BlockRecords,
    losses: Vec<F32>,
    correct: Vec<bool>,
}

impl Trainer {
    /// The step on the batch `samples`: its blocks' sums, combined and applied (see
    /// [`Trainer::update`]), on the trainer's backend. Advances `b1t`, `b2t` but no counters.
    pub(super) fn step_unchecked(&mut self, data: &Dataset, samples: &[usize]) -> StepReport {
        let backend = self.backend;
        let correct = backend.run(Step {
            trainer: self,
            data,
            samples,
        });
        self.step_report(samples.len(), correct)
    }

    /// The gradient block of `samples` at the current parameters, on the trainer's backend
    /// (see [`Trainer::block_gradient`]; the samples are checked).
    pub(super) fn block_gradient_unchecked(
        &self,
        data: &Dataset,
        samples: &[usize],
        first_sample: usize,
    ) -> BlockGradient {
        let mut block = BlockGradient {
            grads: self.model.zeros(),
            losses: Vec::with_capacity(samples.len()),
            correct: 0,
            statistics: Vec::new(),
        };
        block.correct = self.backend.run(BlockSum {
            trainer: self,
            data,
            samples,
            first_sample,
            block: &mut block,
        });
        block
    }

    /// The step of a batch from its blocks (checked by [`Trainer::apply_blocks`]), on the
    /// trainer's backend: the first block's sum, the others added in block order, then the
    /// mean and the update. Returns the step's report.
    pub(super) fn combine_blocks(&mut self, blocks: &[BlockGradient], batch: usize) -> StepReport {
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
        let backend = self.backend;
        backend.run(Combine {
            trainer: self,
            blocks,
            batch,
        });
        self.step_report(batch, correct)
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
        config.optimizer.apply::<R>(
            config.math,
            &scalars,
            &work.total,
            &mut s.params,
            &mut s.m,
            &mut s.v,
            &self.threads,
        );
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
}

/// [`Trainer::step_unchecked`]'s computation; returns the samples classified correctly (the
/// losses are left in `work.losses`).
struct Step<'a> {
    trainer: &'a mut Trainer,
    data: &'a Dataset,
    samples: &'a [usize],
}

impl Compute for Step<'_> {
    type Output = usize;

    fn compute<R: Real>(self) -> usize {
        let (t, data, samples) = (self.trainer, self.data, self.samples);
        let block_len = t.config.block_len();
        if samples.len() > block_len && t.work.block.is_empty() {
            t.work.block = t.model.zeros();
        }
        let work = &mut t.work;
        work.losses.clear();
        let mut correct = 0;
        for (k, block) in samples.chunks(block_len).enumerate() {
            let into = if k == 0 {
                &mut work.total
            } else {
                &mut work.block
            };
            correct += match &t.model {
                Model::Mlp(mlp) => {
                    let transposed = work.transposed.as_mut().expect("an MLP's work has them");
                    if k == 0 {
                        transposed.refresh(mlp, &t.state.params);
                    }
                    let view =
                        GradientView::new(mlp, &t.config, &t.threads, &t.state.params, transposed);
                    view.block_sum::<R>(data, block, &mut work.block_work, into, &mut work.losses)
                }
                Model::Network(net) => {
                    let pass = NetworkPass {
                        net,
                        config: &t.config,
                        state: &t.state,
                        threads: &t.threads,
                        first_sample: k * block_len,
                    };
                    let correct = pass.block_sum::<R>(
                        data,
                        block,
                        &mut work.cells,
                        into,
                        &mut work.losses,
                        &mut work.statistics,
                    );
                    net.update_running::<R>(block.len(), &work.statistics, &mut t.state.buffers);
                    correct
                }
            };
            if k > 0 {
                add_layers::<R>(&mut work.total, &work.block);
            }
        }
        t.update::<R>(samples.len());
        correct
    }
}

/// A layer model's gradient block: what it reads, and where its block lies in the batch (the
/// dropout masks' sample positions).
struct NetworkPass<'a> {
    net: &'a Network,
    config: &'a TrainerConfig,
    state: &'a crate::state::TrainState,
    threads: &'a Threads,
    first_sample: usize,
}

impl NetworkPass<'_> {
    /// Writes into `into` the block gradient of `samples` (one chain per parameter cell over
    /// the block's terms, section 15.3), appends their losses to `losses` and the block's
    /// BatchNorm statistics to `statistics`; returns how many were classified correctly.
    fn block_sum<R: Real>(
        &self,
        data: &Dataset,
        samples: &[usize],
        pass_cells: &mut Cells,
        into: &mut [Layer],
        losses: &mut Vec<F32>,
        statistics: &mut Vec<Vec<F32>>,
    ) -> usize {
        let (net, config) = (self.net, self.config);
        let (features, width, rows) = (
            net.input.iter().product::<usize>(),
            net.outputs(),
            samples.len(),
        );
        let mut x = Vec::with_capacity(rows * features);
        for &s in samples {
            x.extend_from_slice(data.sample(s).0);
        }
        let context = Context {
            math: config.math,
            mode: Mode::Train {
                seed: config.seed,
                step: self.state.step as u64,
                first_sample: self.first_sample,
            },
            threads: self.threads,
        };
        let tensors = (&self.state.params[..], &self.state.buffers[..]);
        let z = net
            .forward::<R>(context, tensors, &x, rows, pass_cells)
            .to_vec();
        let mut delta = vec![F32::ZERO; rows * width];
        let mut outputs = vec![F32::ZERO; width];
        let mut correct = 0;
        for ((z, delta), &s) in z
            .chunks_exact(width)
            .zip(delta.chunks_exact_mut(width))
            .zip(samples)
        {
            let target = data.sample(s).1.cells::<R>();
            let outputs = cells_mut::<R>(&mut outputs);
            let loss =
                config
                    .loss
                    .forward(config.math, cells(z), target, outputs, cells_mut(delta));
            losses.push(loss.to_f32());
            correct += usize::from(is_correct(config.math, outputs, target));
        }
        net.backward::<R>(
            context,
            &self.state.params,
            (&x, &delta),
            rows,
            pass_cells,
            into,
        );
        *statistics = net.statistics(pass_cells);
        correct
    }
}

/// [`Trainer::block_gradient_unchecked`]'s computation: the block's sum and losses written into
/// `block`; returns the samples classified correctly.
struct BlockSum<'a> {
    trainer: &'a Trainer,
    data: &'a Dataset,
    samples: &'a [usize],
    /// The block's first sample's position in its batch.
    first_sample: usize,
    block: &'a mut BlockGradient,
}

impl Compute for BlockSum<'_> {
    type Output = usize;

    fn compute<R: Real>(self) -> usize {
        let t = self.trainer;
        let block = self.block;
        match &t.model {
            Model::Mlp(mlp) => {
                let transposed = Transposed::of(mlp, &t.state.params);
                let view =
                    GradientView::new(mlp, &t.config, &t.threads, &t.state.params, &transposed);
                view.block_sum::<R>(
                    self.data,
                    self.samples,
                    &mut BlockWork::default(),
                    &mut block.grads,
                    &mut block.losses,
                )
            }
            Model::Network(net) => {
                let pass = NetworkPass {
                    net,
                    config: &t.config,
                    state: &t.state,
                    threads: &t.threads,
                    first_sample: self.first_sample,
                };
                pass.block_sum::<R>(
                    self.data,
                    self.samples,
                    &mut Cells::default(),
                    &mut block.grads,
                    &mut block.losses,
                    &mut block.statistics,
                )
            }
        }
    }
}

/// [`Trainer::combine_blocks`]'s computation: the batch total from the first block's sum (in
/// `work.total`) and the sums of the `added` blocks, in block order; then the mean and the
/// update.
struct Combine<'a> {
    trainer: &'a mut Trainer,
    /// Every block, the first one's sum already in `work.total`.
    blocks: &'a [BlockGradient],
    batch: usize,
}

impl Compute for Combine<'_> {
    type Output = ();

    fn compute<R: Real>(self) {
        let Combine {
            trainer: t,
            blocks,
            batch,
        } = self;
        let added = &blocks[1..];
        for block in added {
            add_layers::<R>(&mut t.work.total, &block.grads);
        }
        if let Model::Network(net) = &t.model {
            for block in blocks {
                let rows = block.losses.len();
                net.update_running::<R>(rows, &block.statistics, &mut t.state.buffers);
            }
        }
        t.update::<R>(batch);
    }
}

/// What computing a gradient reads: the model's sizes, its loss and arithmetic settings, its
/// parameters (and their weights transposed) and the threads to share the samples among.
struct GradientView<'a> {
    mlp: &'a Mlp,
    math: Math,
    loss: Loss,
    params: &'a [Layer],
    transposed: &'a Transposed,
    threads: &'a Threads,
}

impl<'a> GradientView<'a> {
    fn new(
        mlp: &'a Mlp,
        config: &TrainerConfig,
        threads: &'a Threads,
        params: &'a [Layer],
        transposed: &'a Transposed,
    ) -> GradientView<'a> {
        GradientView {
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
    /// correctly. The samples are shared out among the threads for the forward pass, the loss
    /// and the backward pass (each thread's samples through the whole model, as matrix
    /// products), then the layers' output rows for the weight gradients' sums (see
    /// [`Mlp::block_gradient`]).
    fn block_sum<R: Real>(
        &self,
        data: &Dataset,
        samples: &[usize],
        work: &mut BlockWork,
        into: &mut [Layer],
        losses: &mut Vec<F32>,
    ) -> usize {
        let (mlp, n) = (self.mlp, samples.len());
        let parts = self.threads.parts(n, mlp.parameters());
        let ranges = ranges(n, parts);
        work.outputs
            .resize_with(parts, || vec![F32::ZERO; mlp.outputs()]);
        work.losses.resize(n, F32::ZERO);
        work.correct.resize(n, false);
        work.records.start(mlp, n);
        let tasks = ranges
            .clone()
            .zip(work.records.passes(mlp, ranges.clone()))
            .zip(work.outputs.iter_mut())
            .zip(split(&mut work.losses[..], ranges.clone(), 1))
            .zip(split(&mut work.correct[..], ranges, 1));
        self.threads.run(
            tasks,
            |((((range, mut pass), outputs), losses), correct)| {
                let _env = R::environment();
                let samples = &samples[range];
                let (features, width) = (mlp.inputs(), mlp.outputs());
                for (x, &s) in pass.inputs[0].chunks_exact_mut(features).zip(samples) {
                    x.copy_from_slice(data.sample(s).0);
                }
                mlp.forward::<R>(self.math, self.params, self.transposed, &mut pass);
                let last = mlp.layers() - 1;
                let z = pass.pre[last].chunks_exact(width);
                let deltas = pass.deltas[last].chunks_exact_mut(width);
                for (k, ((z, delta), &s)) in z.zip(deltas).zip(samples).enumerate() {
                    let target = data.sample(s).1.cells::<R>();
                    let outputs = cells_mut::<R>(outputs);
                    let loss =
                        self.loss
                            .forward(self.math, cells(z), target, outputs, cells_mut(delta));
                    losses[k] = loss.to_f32();
                    correct[k] = is_correct(self.math, outputs, target);
                }
                mlp.backward::<R>(self.math, self.params, &mut pass);
            },
        );
        mlp.block_gradient::<R>(&work.records, into, self.threads);
        losses.extend_from_slice(&work.losses);
        work.correct.iter().filter(|&&c| c).count()
    }
}

/// `total = total + block`, cell by cell: a block's sum added to the blocks before it.
fn add_layers<R: Real>(total: &mut [Layer], block: &[Layer]) {
    for (total, block) in total.iter_mut().zip(block) {
        R::add_assign(cells_mut(&mut total.w), cells(&block.w));
        R::add_assign(cells_mut(&mut total.b), cells(&block.b));
    }
}
