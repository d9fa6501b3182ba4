//! A whole layer list's passes over a block of samples (`docs/TRAINING.md` sections 15.2-15.3):
//! each layer's forward pass in order, its outputs kept, the loss's gradients, then the backward
//! passes in reverse order into the block's gradients. MLPs (their Dense and ReLU layers) and
//! layer models alike: the one model engine.
//!
//! The threads share a block's work in one of two ways, with the same bits (every value is one
//! thread's, computed in order):
//! - **layer by layer**: each layer shares out its own work (samples, or a product's rows or
//!   columns: `share`), the way that serves layers which need the whole block at once
//!   (BatchNorm's statistics) or whose work is its own to split (convolutions, pooling);
//! - **the whole model per thread**, for lists of layers that act on each sample alone and keep
//!   nothing between the passes (Dense and the pointwise layers: every MLP): each thread takes
//!   its samples through the forward pass, the loss and the backward pass's input gradients at
//!   once (one share-out a step instead of several a layer), then every Dense layer's block
//!   gradient, a chain over all the block's samples, is shared out by its own rows or columns.

use super::conv::resized;
use super::pass::{Above, Context, Mode, Saved, Taken, Tensors};
use super::transposed::Transposed;
use super::{Layer, Network, Op};
use crate::arith::{self, Real};
use crate::params::Layer as Params;
use crate::softf32::F32;
use crate::threads::{ranges, split, Threads};
use core::ops::Range;

/// What a network's passes read of a state: the parameters, BatchNorm's running statistics
/// (`mean{n} var{n}`, which evaluation mode reads) and the Dense layers' weights transposed
/// from the parameters.
#[derive(Clone, Copy, Debug)]
pub struct Parameters<'a> {
    pub params: &'a [Params],
    pub running: &'a [Vec<F32>],
    pub transposed: &'a Transposed,
}

/// The working cells of a network's passes over a block: every layer's outputs and output
/// gradients, what its forward pass kept, the block's inputs and the loss's gradients. Kept
/// from block to block, so that a step allocates none of them once they have grown.
#[derive(Clone, Debug, Default)]
pub struct Cells {
    outputs: Vec<Vec<F32>>,
    gradients: Vec<Vec<F32>>,
    saved: Vec<Saved>,
    x: Vec<F32>,
    delta: Vec<F32>,
}

/// Where a layer's tensors are in the state: its parameters' index, its running statistics'
/// first index.
#[derive(Clone, Copy, Debug)]
struct Slots {
    params: Option<usize>,
    running: Option<usize>,
}

/// One share of a block's training pass: its samples, and its cells of every buffer (`None`
/// where it has no part: the gradients of a share that computes only input gradients).
struct Share<'a, T> {
    samples: Range<usize>,
    x: &'a mut [F32],
    delta: &'a mut [F32],
    outputs: Vec<&'a mut [F32]>,
    gradients: Vec<&'a mut [F32]>,
    results: &'a mut [T],
    /// The forward passes' saved cells (the block's, when it has one share).
    saved: Option<&'a mut [Saved]>,
    /// The parameters' block gradients, when this share computes them (the only share).
    grads: Option<&'a mut [Params]>,
}

impl Network {
    /// How many of the layers above layer `i` its forward pass takes over ([`Layer::forward_then`]):
    /// a ReLU (1), and max pooling above that (2), computed on each part of the outputs while it
    /// is in the cache. Their own forward passes are then skipped, and only the last one's
    /// outputs are written: no backward pass reads the others (a ReLU's derivative is written
    /// with its outputs, and max pooling's with its own).
    fn taken_over(&self, i: usize) -> usize {
        let above = |k: usize| self.layers.get(i + k).map(|layer| &layer.op);
        let layer = &self.layers[i];
        if !layer.rectifies_outputs() || !matches!(above(1), Some(Op::ReLU)) {
            return 0;
        }
        match above(2) {
            Some(Op::MaxPool(_)) if layer.pools_outputs() => 2,
            _ => 1,
        }
    }

    /// Whether layer `i` is a ReLU whose backward pass the layer above it applies
    /// ([`Layer::backward_then`]): the ReLU's pass is then only its output gradients taking
    /// the place of its input gradients.
    fn relu_applied_above(&self, i: usize) -> bool {
        matches!(self.layers[i].op, Op::ReLU)
            && self
                .layers
                .get(i + 1)
                .is_some_and(Layer::rectifies_input_gradients)
    }

    /// Whether the backward pass of layer `i` is done by the convolution below it, whose
    /// forward pass took over this ReLU's or max pooling's.
    fn pooled_below(&self, i: usize) -> bool {
        (1..=2).any(|k| i >= k && self.taken_over(i - k) == 2)
    }

    /// Whether every layer acts on each sample alone and keeps nothing for its backward pass,
    /// so that a thread can take its samples through the whole model: Dense (its columns the
    /// samples themselves) and the pointwise layers.
    fn acts_per_sample(&self) -> bool {
        self.layers.iter().all(|layer| match &layer.op {
            Op::Conv(conv) => conv.columns_are_inputs(),
            Op::ReLU
            | Op::Tanh
            | Op::Sigmoid
            | Op::GELU
            | Op::Dropout { .. }
            | Op::Reshape
            | Op::Fork { .. }
            | Op::Add { .. } => true,
            Op::MaxPool(_)
            | Op::AvgPool(_)
            | Op::BatchNorm(_)
            | Op::LayerNorm(_)
            | Op::Embedding { .. }
            | Op::Positional { .. }
            | Op::Attention(_)
            | Op::TiedHead { .. } => false,
        })
    }

    /// Multiply-adds of one sample's forward pass, roughly: how threads share out samples.
    pub fn work_per_sample(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match &l.op {
                Op::Conv(conv) => {
                    conv.window.positions() * conv.window.column() * conv.out_channels
                }
                _ => l.output.iter().product(),
            })
            .sum()
    }

    fn slots(&self) -> Vec<Slots> {
        let (mut p, mut b) = (0, 0);
        self.layers
            .iter()
            .map(|layer| {
                let (params, running) = layer.tensor_shapes();
                let slots = Slots {
                    // A tied head reads (and learns) the Embedding's `E`, the first slot.
                    params: match layer.op {
                        Op::TiedHead { .. } => Some(0),
                        _ => (!params.is_empty()).then_some(p),
                    },
                    running: (!running.is_empty()).then_some(b),
                };
                p += usize::from(!params.is_empty());
                b += running.len();
                slots
            })
            .collect()
    }

    /// The cells per sample of every layer's outputs that a forward pass writes (0 for those it
    /// does not: a layer's whose outputs the layer above applies its pass to), and of every
    /// layer's output gradients that a backward pass writes.
    fn widths(&self) -> (Vec<usize>, Vec<usize>) {
        let n = self.layers.len();
        let cells = |shape: &[usize]| shape.iter().product::<usize>();
        let mut outputs = vec![0; n];
        let mut i = 0;
        while i < n {
            let last = i + self.taken_over(i);
            outputs[last] = cells(&self.layers[last].output);
            i = last + 1;
        }
        let mut gradients = vec![0; n];
        for i in 1..n {
            if !self.pooled_below(i) {
                gradients[i - 1] = cells(&self.layers[i].input);
            }
        }
        (outputs, gradients)
    }

    /// The forward pass of `rows` samples `x` (row-major, the input's cells each): returns the
    /// last layer's outputs, `rows x outputs`.
    pub fn forward<'c, R: Real>(
        &self,
        context: Context<'_>,
        parameters: Parameters<'_>,
        x: &'c [F32],
        rows: usize,
        cells: &'c mut Cells,
    ) -> &'c [F32] {
        let (widths, _) = self.widths();
        let mut outputs = views(&mut cells.outputs, &widths, rows);
        cells.saved.resize_with(self.layers.len(), Saved::default);
        let slots = self.slots();
        let x = &x[..rows * self.input.iter().product::<usize>()];
        self.forward_share::<R>(
            context,
            parameters,
            &slots,
            x,
            &mut outputs,
            &mut cells.saved,
        );
        // Without layers the outputs are the inputs; the slice is taken only then (the inputs
        // of a model whose outputs are larger have fewer cells).
        let outputs = rows * self.outputs();
        match cells.outputs.last() {
            Some(y) => &y[..outputs],
            None => &x[..outputs],
        }
    }

    /// A block's training pass over `results.len()` samples: their inputs written by
    /// `input(samples, x)` (samples numbered from 0 in the block, `x` their rows), the forward
    /// pass, `loss(samples, z, delta, results)` writing the gradients `delta` of the loss with
    /// respect to the outputs `z` (and whatever the caller records of each sample), then the
    /// backward pass: every parameter's block gradient into `grads` (shaped like the
    /// parameters). `context`'s mode is training, with the block's first sample's position.
    #[allow(clippy::too_many_arguments)] // what the block reads, its two callbacks, its results
    pub fn train<R: Real, T: Send>(
        &self,
        context: Context<'_>,
        parameters: Parameters<'_>,
        cells: &mut Cells,
        input: impl Fn(Range<usize>, &mut [F32]) + Sync,
        loss: impl Fn(Range<usize>, &[R], &mut [R], &mut [T]) + Sync,
        results: &mut [T],
        grads: &mut [Params],
    ) {
        let rows = results.len();
        let threads = context.threads;
        let shares = if self.acts_per_sample() {
            threads.parts(rows, self.work_per_sample())
        } else {
            1
        };
        let (features, width) = (self.input.iter().product::<usize>(), self.outputs());
        let (out_widths, grad_widths) = self.widths();
        let n = self.layers.len();
        cells.saved.resize_with(n, Saved::default);
        let x = resized(&mut cells.x, rows * features);
        let delta = resized(&mut cells.delta, rows * width);
        let slots = self.slots();
        {
            let samples = || ranges(rows, shares);
            let mut x_parts = split(&mut x[..], samples(), features);
            let mut delta_parts = split(&mut delta[..], samples(), width);
            let mut result_parts = split(&mut results[..], samples(), 1);
            let mut output_parts: Vec<_> = views(&mut cells.outputs, &out_widths, rows)
                .into_iter()
                .zip(&out_widths)
                .map(|(cells, &w)| split(cells, samples(), w))
                .collect();
            let mut gradient_parts: Vec<_> = views(&mut cells.gradients, &grad_widths, rows)
                .into_iter()
                .zip(&grad_widths)
                .map(|(cells, &w)| split(cells, samples(), w))
                .collect();
            let (mut saved, mut grads) = match shares {
                1 => (Some(&mut cells.saved[..]), Some(&mut grads[..])),
                _ => (None, None),
            };
            let tasks = samples().map(|samples| Share {
                samples,
                x: x_parts.next().unwrap_or_default(),
                delta: delta_parts.next().unwrap_or_default(),
                outputs: output_parts
                    .iter_mut()
                    .map(|p| p.next().unwrap_or_default())
                    .collect(),
                gradients: gradient_parts
                    .iter_mut()
                    .map(|p| p.next().unwrap_or_default())
                    .collect(),
                results: result_parts.next().unwrap_or_default(),
                saved: saved.take(),
                grads: grads.take(),
            });
            // One share: each layer shares out its own work; several: each thread its share's
            // samples through the whole model, alone.
            let within = if shares == 1 { threads } else { &Threads::ONE };
            threads.run(tasks, |share| {
                let _env = R::environment();
                let Share {
                    samples,
                    x,
                    delta,
                    mut outputs,
                    mut gradients,
                    results,
                    saved,
                    grads,
                } = share;
                let context = Context {
                    threads: within,
                    mode: context.mode.for_share_at(samples.start),
                    ..context
                };
                let mut own = Vec::new();
                let saved = saved.unwrap_or_else(|| {
                    own.resize_with(n, Saved::default);
                    &mut own[..]
                });
                input(samples.clone(), x);
                self.forward_share::<R>(context, parameters, &slots, x, &mut outputs, saved);
                let z = outputs.last().map_or(&x[..], |z| &z[..]);
                loss(
                    samples,
                    arith::cells::<R>(z),
                    arith::cells_mut(delta),
                    results,
                );
                let outputs: Vec<&[F32]> = outputs.iter().map(|o| &o[..]).collect();
                let share = (&x[..], &delta[..], &outputs[..]);
                let grads = grads.map(|g| &mut g[..]);
                self.backward_share::<R>(
                    context,
                    parameters.params,
                    &slots,
                    share,
                    (&mut gradients, saved),
                    grads,
                );
            });
        }
        if shares > 1 {
            // The block gradients, each a chain over every share's samples: Dense's alone have
            // parameters here, and their backward passes read only inputs and gradients.
            let outputs: Vec<&[F32]> = cells.outputs.iter().map(|o| &o[..]).collect();
            for (i, layer) in self.layers.iter().enumerate() {
                let Some(k) = slots[i].params else { continue };
                let input = if i == 0 { &x[..] } else { outputs[i - 1] };
                let g = if i + 1 == n {
                    &delta[..]
                } else {
                    &cells.gradients[i][..]
                };
                let own = (&parameters.params[k].w[..], &parameters.params[k].b[..]);
                let grad = &mut grads[k];
                layer.backward::<R>(
                    context,
                    Some(own),
                    (input, &[], g),
                    rows,
                    &mut cells.saved[i],
                    None,
                    Some((&mut grad.w[..], &mut grad.b[..])),
                );
            }
        }
    }

    /// The forward passes of one share's samples `x` into `outputs` (the share's cells of every
    /// layer's, as [`Network::widths`] sizes them).
    fn forward_share<R: Real>(
        &self,
        context: Context<'_>,
        parameters: Parameters<'_>,
        slots: &[Slots],
        x: &[F32],
        outputs: &mut [&mut [F32]],
        saved: &mut [Saved],
    ) {
        let rows = x.len() / self.input.iter().product::<usize>();
        let n = self.layers.len();
        let mut i = 0;
        while i < n {
            let (layer, slots) = (&self.layers[i], slots[i]);
            let (params, running) = (parameters.params, parameters.running);
            let tensors = Tensors {
                params: slots.params.map(|k| (&params[k].w[..], &params[k].b[..])),
                running: slots
                    .running
                    .map(|k| (&running[k][..], &running[k + 1][..])),
                transposed: slots.params.and_then(|k| parameters.transposed.get(k)),
            };
            let taken = self.taken_over(i);
            let last = &self.layers[i + taken];
            let (below, above) = outputs.split_at_mut(i);
            let input = if i == 0 { x } else { &below[i - 1][..] };
            match layer.op {
                Op::Fork { .. } => {
                    above[0].copy_from_slice(&input[..above[0].len()]);
                    i += 1;
                    continue;
                }
                Op::Add { fork } => {
                    // `x + f(x)`: the fork's outputs (the Residual's input) first.
                    add_cells::<R>(&below[fork][..], input, &mut above[0][..]);
                    i += 1;
                    continue;
                }
                _ => {}
            }
            let (saved, saved_above) = saved[i..].split_at_mut(1);
            let then = match taken {
                0 => Above::Nothing,
                1 => Above::ReLU,
                _ => Above::ReLUMaxPool(last, &mut saved_above[1]),
            };
            let y = &mut above[taken][..];
            layer.forward_then::<R>(context, tensors, input, rows, y, &mut saved[0], then);
            i += taken + 1;
        }
    }

    /// The backward passes of one share after [`Network::forward_share`] (its inputs `x`, the
    /// loss's gradients `delta` and every layer's `outputs`): every layer's input gradients into
    /// `gradients` (but the first's, which nothing below learns from; `saved` is what the
    /// forward passes kept) and, when `grads` are given, the parameters' block gradients.
    fn backward_share<R: Real>(
        &self,
        context: Context<'_>,
        params: &[Params],
        slots: &[Slots],
        (x, delta, outputs): (&[F32], &[F32], &[&[F32]]),
        (gradients, saved): (&mut [&mut [F32]], &mut [Saved]),
        mut grads: Option<&mut [Params]>,
    ) {
        let rows = x.len() / self.input.iter().product::<usize>();
        let n = self.layers.len();
        // Gradients with respect to each layer's output; the last one's is `delta`.
        for i in (0..n).rev() {
            let layer = &self.layers[i];
            let (below, this) = gradients.split_at_mut(i);
            // A ReLU and max pooling whose backward passes the convolution below takes over, as
            // its forward pass took theirs.
            if self.pooled_below(i) {
                continue;
            }
            if self.relu_applied_above(i) {
                if i > 0 {
                    core::mem::swap(&mut below[i - 1], &mut this[0]);
                }
                continue;
            }
            let taken = if self.taken_over(i) == 2 { 2 } else { 0 };
            let g = if i + taken + 1 == n {
                delta
            } else {
                &this[taken][..]
            };
            match layer.op {
                // The branch's last layer receives the Residual's output gradient.
                Op::Add { .. } => {
                    below[i - 1].copy_from_slice(&g[..below[i - 1].len()]);
                    continue;
                }
                // The Residual's input gradient: the branch's first layer's, then the skip's.
                Op::Fork { add } => {
                    if i > 0 {
                        let skip = if add + 1 == n {
                            delta
                        } else {
                            &this[add - i][..]
                        };
                        add_cells::<R>(&this[0][..], skip, &mut below[i - 1][..]);
                    }
                    continue;
                }
                _ => {}
            }
            // The first layer's input gradient is not needed (nothing below it learns).
            let gx = (i > 0).then(|| &mut below[i - 1][..]);
            let input = if i == 0 { x } else { outputs[i - 1] };
            let k = slots[i].params;
            let own = k.map(|k| (&params[k].w[..], &params[k].b[..]));
            let grad = k.zip(grads.as_deref_mut()).map(|(k, grads)| {
                let g = &mut grads[k];
                (&mut g.w[..], &mut g.b[..])
            });
            let (saved, saved_above) = saved[i..].split_at_mut(1);
            let then = if taken == 2 {
                Taken::ReLUMaxPoolAbove {
                    pool: &self.layers[i + 2],
                    saved: &saved_above[1],
                    y: outputs[i + 2],
                }
            } else if i > 0 && self.relu_applied_above(i - 1) {
                Taken::ReLUBelow
            } else {
                Taken::Nothing
            };
            layer.backward_then::<R>(
                context,
                own,
                (input, outputs[i], g),
                rows,
                &mut saved[0],
                gx,
                grad,
                then,
            );
        }
    }

    /// The block statistics of every BatchNorm (in list order) that the training pass which
    /// left `cells` computed, into `statistics`: what [`Network::update_running`] needs.
    pub fn statistics(&self, cells: &Cells, statistics: &mut Vec<Vec<F32>>) {
        let norms = self
            .layers
            .iter()
            .zip(&cells.saved)
            .filter(|(layer, _)| matches!(layer.op, Op::BatchNorm(_)));
        statistics.resize_with(norms.clone().count(), Vec::new);
        for ((_, saved), into) in norms.zip(statistics.iter_mut()) {
            into.clear();
            into.extend_from_slice(saved.statistics());
        }
    }

    /// Every BatchNorm's running averages (`buffers`, the state's) updated by a block of
    /// `rows` samples with these [`Network::statistics`]: once per block, in block order.
    pub fn update_running<R: Real>(
        &self,
        rows: usize,
        statistics: &[Vec<F32>],
        buffers: &mut [Vec<F32>],
    ) {
        let norms = self
            .layers
            .iter()
            .zip(self.slots())
            .filter(|(l, _)| matches!(l.op, Op::BatchNorm(_)));
        for ((layer, slots), statistics) in norms.zip(statistics) {
            let k = slots.running.expect("a BatchNorm has running statistics");
            let (mean, var) = buffers[k..].split_at_mut(1);
            layer.update_running::<R>(rows, statistics, &mut mean[0], &mut var[0]);
        }
    }
}

impl Mode {
    /// The mode of a share of a block whose first sample is the block's `k`-th.
    fn for_share_at(self, k: usize) -> Mode {
        match self {
            Mode::Train {
                seed,
                step,
                first_sample,
            } => Mode::Train {
                seed,
                step,
                first_sample: first_sample + k,
            },
            Mode::Eval => Mode::Eval,
        }
    }
}

/// `z = a + b`, cell by cell (`a` the first operand), over `z`'s cells.
fn add_cells<R: Real>(a: &[F32], b: &[F32], z: &mut [F32]) {
    let n = z.len();
    let (a, b) = (arith::cells::<R>(&a[..n]), arith::cells::<R>(&b[..n]));
    for ((z, &a), &b) in arith::cells_mut::<R>(z).iter_mut().zip(a).zip(b) {
        *z = a + b;
    }
}

/// The first `rows * widths[i]` cells of each of `buffers` (grown if needed), one per layer.
fn views<'a>(buffers: &'a mut Vec<Vec<F32>>, widths: &[usize], rows: usize) -> Vec<&'a mut [F32]> {
    buffers.resize_with(widths.len(), Vec::new);
    buffers
        .iter_mut()
        .zip(widths)
        .map(|(buffer, &w)| resized(buffer, rows * w))
        .collect()
}
