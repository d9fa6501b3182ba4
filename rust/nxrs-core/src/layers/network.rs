//! A whole layer list's passes over a block of samples: each layer's forward pass in order,
//! its outputs kept, then the backward passes in reverse order into the block's gradients
//! (`docs/TRAINING.md` sections 15.2-15.3).

use super::pass::{Above, Context, Saved, Taken, Tensors};
use super::{Layer, Network, Op};
use crate::arith::Real;
use crate::mlp::Layer as Params;
use crate::softf32::F32;

/// The working cells of a block's pass: every layer's outputs and its output gradients, and
/// what its forward pass kept.
#[derive(Clone, Debug, Default)]
pub struct Cells {
    outputs: Vec<Vec<F32>>,
    gradients: Vec<Vec<F32>>,
    saved: Vec<Saved>,
}

/// Where a layer's tensors are in the state: its parameters' index, its running statistics'
/// first index.
#[derive(Clone, Copy, Debug)]
struct Slots {
    params: Option<usize>,
    running: Option<usize>,
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

    fn slots(&self) -> Vec<Slots> {
        let (mut p, mut b) = (0, 0);
        self.layers
            .iter()
            .map(|layer| {
                let (params, running) = layer.tensor_shapes();
                let slots = Slots {
                    params: (!params.is_empty()).then_some(p),
                    running: (!running.is_empty()).then_some(b),
                };
                p += usize::from(!params.is_empty());
                b += running.len();
                slots
            })
            .collect()
    }

    /// The forward pass of `rows` samples `x` (row-major, the input's cells each): returns the
    /// last layer's outputs, `rows x outputs`.
    pub fn forward<'c, R: Real>(
        &self,
        context: Context<'_>,
        (params, buffers): (&[Params], &[Vec<F32>]),
        x: &'c [F32],
        rows: usize,
        cells: &'c mut Cells,
    ) -> &'c [F32] {
        let n = self.layers.len();
        cells.outputs.resize_with(n, Vec::new);
        cells.saved.resize_with(n, Saved::default);
        let slots = self.slots();
        let mut i = 0;
        while i < n {
            let (layer, slots) = (&self.layers[i], slots[i]);
            let tensors = Tensors {
                params: slots.params.map(|k| (&params[k].w[..], &params[k].b[..])),
                running: slots
                    .running
                    .map(|k| (&buffers[k][..], &buffers[k + 1][..])),
            };
            let taken = self.taken_over(i);
            let last = &self.layers[i + taken];
            let (below, above) = cells.outputs.split_at_mut(i);
            let input = if i == 0 { x } else { &below[i - 1][..] };
            let y = &mut above[taken];
            y.resize(rows * last.output.iter().product::<usize>(), F32::ZERO);
            let (saved, saved_above) = cells.saved[i..].split_at_mut(1);
            let then = match taken {
                0 => Above::Nothing,
                1 => Above::ReLU,
                _ => Above::ReLUMaxPool(last, &mut saved_above[1]),
            };
            layer.forward_then::<R>(context, tensors, input, rows, y, &mut saved[0], then);
            i += taken + 1;
        }
        // Without layers the outputs are the inputs; the slice is taken only then (the inputs
        // of a model whose outputs are larger have fewer cells).
        let outputs = rows * self.outputs();
        match cells.outputs.last() {
            Some(y) => &y[..outputs],
            None => &x[..outputs],
        }
    }

    /// The backward pass after [`Network::forward`] of the same `x` (training mode): from the
    /// gradient `delta` of the loss with respect to the outputs, every parameter's block gradient
    /// into `grads` (shaped like the parameters).
    pub fn backward<R: Real>(
        &self,
        context: Context<'_>,
        params: &[Params],
        (x, delta): (&[F32], &[F32]),
        rows: usize,
        cells: &mut Cells,
        grads: &mut [Params],
    ) {
        let n = self.layers.len();
        cells.gradients.resize_with(n, Vec::new);
        let slots = self.slots();
        // Gradients with respect to each layer's output; the last one's is `delta`.
        for i in (0..n).rev() {
            let layer = &self.layers[i];
            let (below, this) = cells.gradients.split_at_mut(i);
            // A ReLU and max pooling whose backward passes the convolution below takes over, as
            // its forward pass took theirs.
            let pooled_below = |k: usize| i >= k && self.taken_over(i - k) == 2;
            if pooled_below(1) || pooled_below(2) {
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
            // The first layer's input gradient is not needed (nothing below it learns).
            let gx = (i > 0).then(|| {
                let gx = &mut below[i - 1];
                gx.resize(rows * layer.input.iter().product::<usize>(), F32::ZERO);
                &mut gx[..]
            });
            let input = if i == 0 { x } else { &cells.outputs[i - 1][..] };
            let k = slots[i].params;
            let own = k.map(|k| (&params[k].w[..], &params[k].b[..]));
            let grad = k.map(|k| {
                let g = &mut grads[k];
                (&mut g.w[..], &mut g.b[..])
            });
            let (saved, saved_above) = cells.saved[i..].split_at_mut(1);
            let then = if taken == 2 {
                Taken::ReLUMaxPoolAbove {
                    pool: &self.layers[i + 2],
                    saved: &saved_above[1],
                    y: &cells.outputs[i + 2],
                }
            } else if i > 0 && self.relu_applied_above(i - 1) {
                Taken::ReLUBelow
            } else {
                Taken::Nothing
            };
            layer.backward_then::<R>(
                context,
                own,
                (input, &cells.outputs[i], g),
                rows,
                &mut saved[0],
                gx,
                grad,
                then,
            );
        }
    }

    /// The block statistics of every BatchNorm (in list order) that the training-mode
    /// [`Network::forward`] which left `cells` computed: what [`Network::update_running`] needs.
    pub fn statistics(&self, cells: &Cells) -> Vec<Vec<F32>> {
        self.layers
            .iter()
            .zip(&cells.saved)
            .filter(|(layer, _)| matches!(layer.op, Op::BatchNorm(_)))
            .map(|(_, saved)| saved.statistics().to_vec())
            .collect()
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
