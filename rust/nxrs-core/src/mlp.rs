//! The multilayer perceptron (`docs/TRAINING.md`, sections 4 and 5): layer sizes, initialisation,
//! and one sample's forward and backward pass, written once over [`Real`].
//!
//! Layers `[n0, n1, ..., nL]`: every layer computes `z = b + W a` (accumulated from the bias,
//! input by input, in order), hidden layers apply ReLU, the last layer feeds the loss. The order
//! of float operations is part of the result; it is the seed's `fwd` and `bwd`.

use crate::arith::{cells, cells_mut, Real};
use crate::error::{Error, Result};
use crate::loss::{Loss, Target};
use crate::math::Math;
use crate::rng::{Domain, Stream};
use crate::softf32::F32;
use crate::threads::{ranges, split, Threads};
use crate::transpose::transpose;
use crate::Integer;
use core::ops::Range;

/// Largest size of one layer, and of all parameters together. They bound what a configuration
/// (and so a checkpoint header) can make nxrs allocate.
pub const MAX_LAYER_SIZE: usize = 1 << 24;
pub const MAX_PARAMETERS: usize = 1 << 28;
/// Most weight layers of an MLP. Parameters alone would allow 2^27 layers (of one unit each),
/// and a checkpoint header's `sizes` list of that length costs a gigabyte to hold before any
/// tensor is read; the deepest MLPs trained in practice have tens of layers. 4096 leaves
/// two orders of magnitude of room and bounds a header's `sizes` to 4097 numbers and its
/// tensor table to `6 * 4096` entries, whatever the header's length.
pub const MAX_LAYERS: usize = 4096;

/// The seed initialises layer `l`'s weight `k` (row-major) as
/// `(((k * mul + seed) % modulus) - modulus / 2) / 50`, with `(mul, modulus)` = (7, 13) for the
/// first layer and (5, 11) for the second; deeper layers reuse the last pattern.
const INIT_PATTERNS: [(i128, i128); 2] = [(7, 13), (5, 11)];

/// One layer's parameters (or anything shaped like them: gradients, optimiser moments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer<R = F32> {
    /// `outputs x inputs`, row-major.
    pub w: Vec<R>,
    pub b: Vec<R>,
}

impl<R: Real> Layer<R> {
    /// A layer of zeros with `shape`'s sizes.
    pub fn zeros(outputs: usize, inputs: usize) -> Layer<R> {
        Layer {
            w: zeros(outputs * inputs),
            b: zeros(outputs),
        }
    }
}

/// `n` zeros (+0). Where +0 is the all-zero bit pattern (binary32, so every `Real` nxrs has),
/// the allocation is zeroed (`calloc`): a large one is fresh pages that cost nothing until
/// first written, where `vec![R::ZERO; n]` writes every cell (`R` not being a primitive that
/// `vec!` knows to `calloc`). A trainer's transposed weights are such zeros until its first
/// step, so a trainer built from a loaded state does not write a third of its size for them.
fn zeros<R: Real>(n: usize) -> Vec<R> {
    if bytemuck::bytes_of(&R::ZERO).iter().all(|&b| b == 0) {
        bytemuck::zeroed_vec(n)
    } else {
        vec![R::ZERO; n]
    }
}

crate::names::names! {
    /// How the weights start (biases always start at +0).
    pub enum Init {
        /// The seed's `mk_state` pattern.
        Seed = "seed",
        /// Uniform on `[-a, a)`, `a = sqrt(6 / inputs)` (He et al., for ReLU networks).
        He = "he",
        /// Uniform on `[-a, a)`, `a = sqrt(6 / (inputs + outputs))` (Glorot and Bengio).
        Glorot = "glorot",
    }
}

/// Layer sizes of an MLP, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mlp {
    sizes: Vec<usize>,
}

/// The one check of layer sizes: at least two (inputs and outputs), each in
/// `1..=MAX_LAYER_SIZE`, at most `MAX_PARAMETERS` parameters together. Sizes of any integer type,
/// so a negative one from a user gets the same `Error::Config` as 0.
pub fn layer_sizes<T: Integer>(sizes: &[T]) -> Result<Vec<usize>> {
    if sizes.len() < 2 {
        return Err(Error::Config(format!(
            "an MLP needs at least an input and an output size, got {sizes:?}"
        )));
    }
    if sizes.len() > MAX_LAYERS + 1 {
        return Err(Error::Config(format!(
            "{} layer sizes describe more than {MAX_LAYERS} layers",
            sizes.len()
        )));
    }
    let checked = sizes
        .iter()
        .map(|&n| {
            n.try_into()
                .ok()
                .filter(|n| (1..=MAX_LAYER_SIZE).contains(n))
                .ok_or_else(|| {
                    Error::Config(format!(
                        "layer size {n} is outside 1..={MAX_LAYER_SIZE} (sizes {sizes:?})"
                    ))
                })
        })
        .collect::<Result<Vec<usize>>>()?;
    // Checked arithmetic: sizes come from users and checkpoint headers.
    let total = checked
        .windows(2)
        .try_fold(0usize, |sum, pair| {
            let layer = pair[0].checked_mul(pair[1])?.checked_add(pair[1])?;
            sum.checked_add(layer)
        })
        .filter(|&total| total <= MAX_PARAMETERS);
    if total.is_none() {
        return Err(Error::Config(format!(
            "the layer sizes {sizes:?} need more than {MAX_PARAMETERS} parameters"
        )));
    }
    Ok(checked)
}

impl Mlp {
    /// An MLP with the given layer sizes (inputs first, outputs last), checked by
    /// [`layer_sizes`].
    pub fn new(sizes: Vec<usize>) -> Result<Mlp> {
        layer_sizes(&sizes)?;
        Ok(Mlp { sizes })
    }

    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    pub fn inputs(&self) -> usize {
        self.sizes[0]
    }

    pub fn outputs(&self) -> usize {
        self.sizes[self.sizes.len() - 1]
    }

    /// Number of parameters (weights and biases).
    pub fn parameters(&self) -> usize {
        (0..self.layers())
            .map(|l| {
                let (outputs, inputs) = self.weight_shape(l);
                outputs * inputs + outputs
            })
            .sum()
    }

    /// Number of weight layers.
    pub fn layers(&self) -> usize {
        self.sizes.len() - 1
    }

    /// `(outputs, inputs)` of layer `l`'s weight matrix (row-major, one row per output).
    pub fn weight_shape(&self, l: usize) -> (usize, usize) {
        (self.sizes[l + 1], self.sizes[l])
    }

    /// Checks that `layers` (`what`: a name for messages) are shaped like the parameters.
    pub fn check_shaped(&self, layers: &[Layer], what: &str) -> Result<()> {
        let fits = layers.len() == self.layers()
            && layers.iter().enumerate().all(|(l, layer)| {
                let (outputs, inputs) = self.weight_shape(l);
                layer.w.len() == outputs * inputs && layer.b.len() == outputs
            });
        if fits {
            Ok(())
        } else {
            let sizes: Vec<(usize, usize)> =
                layers.iter().map(|l| (l.w.len(), l.b.len())).collect();
            Err(Error::Input(format!(
                "the {what}'s (weight, bias) sizes {sizes:?} do not fit the model {:?}",
                self.sizes
            )))
        }
    }

    /// Zero tensors shaped like the parameters.
    pub fn zeros<R: Real>(&self) -> Vec<Layer<R>> {
        (0..self.layers())
            .map(|l| {
                let (outputs, inputs) = self.weight_shape(l);
                Layer::zeros(outputs, inputs)
            })
            .collect()
    }

    /// The initial parameters: weights by `init` from `seed`, biases +0.
    pub fn init_params(&self, init: Init, seed: i64) -> Vec<Layer> {
        (0..self.layers())
            .map(|l| {
                let (outputs, inputs) = self.weight_shape(l);
                let w = match init {
                    Init::Seed => seed_pattern(l, outputs * inputs, seed),
                    Init::He => uniform(l, outputs * inputs, seed, inputs),
                    Init::Glorot => uniform(l, outputs * inputs, seed, inputs + outputs),
                };
                Layer {
                    w,
                    b: vec![F32::ZERO; outputs],
                }
            })
            .collect()
    }
}

/// The seed's `mk_state` weights of layer `l`, in exact integer arithmetic (i128: `k * mul + seed`
/// cannot overflow for any `i64` seed), `%` and `/` truncating as in the seed's language.
fn seed_pattern(l: usize, cells: usize, seed: i64) -> Vec<F32> {
    let fifty = F32::from_i32(50);
    let (mul, modulus) = INIT_PATTERNS[l.min(INIT_PATTERNS.len() - 1)];
    (0..cells)
        .map(|k| {
            let cell = (k as i128 * mul + i128::from(seed)) % modulus - modulus / 2;
            F32::from_i64(cell as i64) / fifty // |cell| < modulus
        })
        .collect()
}

/// Weights uniform on `[-a, a)` with `a = sqrt(6 / fan)`: each draw's top 24 bits give an integer
/// `k` in `[-2^23, 2^23)`, and the weight is `(k * 2^-23) * a` (the first product exact).
fn uniform(l: usize, cells: usize, seed: i64, fan: usize) -> Vec<F32> {
    let a = (F32::from_i32(6) / F32::from_i64(fan as i64)).sqrt();
    let two_pow_minus_23 = F32::from_bits((127 - 23) << 23);
    let mut stream = Stream::new(seed, Domain::Init, l as u64);
    (0..cells)
        .map(|_| {
            let k = (stream.next_u64() >> 40) as i64 - (1 << 23);
            (F32::from_i64(k) * two_pow_minus_23) * a
        })
        .collect()
}

/// One sample's working memory for forward and backward, allocated once per trainer. Stored as
/// [`F32`] cells, which the kernels view as their backend's values (see [`crate::arith::cells`]).
#[derive(Clone, Debug)]
pub struct Scratch {
    /// Pre-activations of every layer (the last one holds the model's raw outputs `z`).
    pre: Vec<Vec<F32>>,
    /// ReLU outputs of the hidden layers.
    hidden: Vec<Vec<F32>>,
    /// The model's outputs (probabilities or values).
    pub outputs: Vec<F32>,
    /// The loss gradient with respect to the current layer's pre-activations, and the one being
    /// accumulated for the layer below.
    delta: Vec<F32>,
    delta_below: Vec<F32>,
}

impl Scratch {
    pub fn new(mlp: &Mlp) -> Scratch {
        let widest = mlp.sizes.iter().copied().max().unwrap_or(0);
        let last = mlp.sizes.len() - 1;
        Scratch {
            pre: mlp.sizes[1..].iter().map(|&n| vec![F32::ZERO; n]).collect(),
            hidden: mlp.sizes[1..last]
                .iter()
                .map(|&n| vec![F32::ZERO; n])
                .collect(),
            outputs: vec![F32::ZERO; mlp.outputs()],
            delta: Vec::with_capacity(widest),
            delta_below: Vec::with_capacity(widest),
        }
    }

    /// The last layer's pre-activations of the last forward pass.
    pub fn z(&self) -> &[F32] {
        &self.pre[self.pre.len() - 1]
    }

    /// The last layer's pre-activations, and the outputs to write from them.
    pub fn z_and_outputs<R: Real>(&mut self) -> (&[R], &mut [R]) {
        let last = self.pre.len() - 1;
        (cells(&self.pre[last]), cells_mut(&mut self.outputs))
    }
}

/// The weights as the forward pass reads them: each layer's matrix transposed (row `j` holds
/// the weights of input `j` for every output), refreshed from the parameters once per step. A
/// layer then adds input `j`'s terms to all its outputs at once, lanes across outputs, while
/// every output's own sum still runs input by input (section 5's order).
#[derive(Clone, Debug)]
pub struct Transposed {
    w: Vec<Vec<F32>>,
}

impl Transposed {
    pub fn new(mlp: &Mlp) -> Transposed {
        Transposed {
            w: mlp
                .zeros::<F32>()
                .into_iter()
                .map(|layer| layer.w)
                .collect(),
        }
    }

    /// Copies `params`' weights in, transposed.
    pub fn refresh(&mut self, mlp: &Mlp, params: &[Layer]) {
        for (l, (t, layer)) in self.w.iter_mut().zip(params).enumerate() {
            let (outputs, inputs) = mlp.weight_shape(l);
            transpose(&layer.w, outputs, inputs, t);
        }
    }
}

/// A block's records (section 5's reduction): every sample's inputs to every layer and the
/// gradient with respect to every layer's pre-activations, kept until the block's weight
/// gradients are summed, weight row by weight row, over its samples in order.
#[derive(Clone, Debug, Default)]
pub struct BlockRecords {
    /// Per layer: the samples' inputs to the layer, sample after sample (`samples x inputs`).
    inputs: Vec<Vec<F32>>,
    /// Per layer: the gradient with respect to its pre-activations, sample after sample
    /// (`samples x outputs`), as the samples' tasks write them.
    deltas: Vec<Vec<F32>>,
    /// The same, output by output (`outputs x samples`: row `o` holds every sample's `δ_o`, in
    /// order), as the weight rows' sums read them.
    deltas_by_output: Vec<Vec<F32>>,
    samples: usize,
}

/// The records of some consecutive samples of a block: what one task writes.
pub struct RecordsPart<'a> {
    inputs: Vec<&'a mut [F32]>,
    deltas: Vec<&'a mut [F32]>,
}

impl BlockRecords {
    /// The records of the samples in `ranges` (consecutive, from the first), one part each.
    pub fn parts(
        &mut self,
        mlp: &Mlp,
        ranges: impl Iterator<Item = Range<usize>> + Clone,
    ) -> Vec<RecordsPart<'_>> {
        let mut parts: Vec<RecordsPart<'_>> = ranges
            .clone()
            .map(|_| RecordsPart {
                inputs: Vec::with_capacity(mlp.layers()),
                deltas: Vec::with_capacity(mlp.layers()),
            })
            .collect();
        for (l, (inputs, deltas)) in self.inputs.iter_mut().zip(&mut self.deltas).enumerate() {
            let (outputs, width) = mlp.weight_shape(l);
            let inputs = split(&mut inputs[..], ranges.clone(), width);
            let deltas = split(&mut deltas[..], ranges.clone(), outputs);
            for ((part, i), d) in parts.iter_mut().zip(inputs).zip(deltas) {
                part.inputs.push(i);
                part.deltas.push(d);
            }
        }
        parts
    }
}

/// Part of one layer's weight rows and their gradient sums: what one task of
/// [`Mlp::block_gradient`] writes.
struct RowsPart<'a> {
    /// The rows' gradients (`rows x width`) and biases.
    w: &'a mut [F32],
    b: &'a mut [F32],
    /// The rows' `δ`s, output by output (`rows x samples`).
    deltas: &'a [F32],
    /// The layer's inputs of every sample (`samples x width`).
    inputs: &'a [F32],
    width: usize,
}

impl Mlp {
    /// The forward pass up to the last layer's pre-activations (left in `s.z()`): the seed's
    /// `fwd`, with ReLU by the setting's `le`. Reads the biases from `params` and the weights
    /// from `transposed` (refreshed from the same parameters). Computes in `R` on the stored
    /// cells.
    pub fn forward<R: Real>(
        &self,
        math: Math,
        params: &[Layer],
        transposed: &Transposed,
        x: &[R],
        s: &mut Scratch,
    ) {
        for (l, layer) in params.iter().enumerate() {
            let weights_t: &[R] = cells(&transposed.w[l]);
            let hidden_layers = s.hidden.len();
            let (below, this) = s.hidden.split_at_mut(l.min(hidden_layers));
            let input: &[R] = if l == 0 { x } else { cells(&below[l - 1]) };
            let pre: &mut [R] = cells_mut(&mut s.pre[l]);
            // z[o] = ((b[o] + W[o,0] a[0]) + W[o,1] a[1]) + ...: every output starts from its
            // bias and adds input j's term at step j.
            pre.copy_from_slice(cells(&layer.b));
            R::add_row_products(pre, weights_t, input);
            if let Some(activations) = this.first_mut().filter(|_| l + 1 < self.layers()) {
                let activations = cells_mut::<R>(activations);
                activations.copy_from_slice(pre);
                math.zero_where_not_positive(pre, activations);
            }
        }
    }

    /// Starts a block of `samples` samples: [`Mlp::record_sample`] each, then
    /// [`Mlp::block_gradient`].
    pub fn start_block(&self, records: &mut BlockRecords, samples: usize) {
        records.samples = samples;
        for list in [
            &mut records.inputs,
            &mut records.deltas,
            &mut records.deltas_by_output,
        ] {
            list.resize_with(self.layers(), Vec::new);
        }
        for l in 0..self.layers() {
            let (outputs, inputs) = self.weight_shape(l);
            records.inputs[l].resize(samples * inputs, F32::ZERO);
            records.deltas[l].resize(samples * outputs, F32::ZERO);
            records.deltas_by_output[l].resize(samples * outputs, F32::ZERO);
        }
    }

    /// Forward, loss and backward for sample `k` of a block: returns its loss and records its
    /// inputs to every layer and its gradient with respect to every layer's pre-activations
    /// (the seed's `bwd` without the weight gradients, which [`Mlp::block_gradient`] sums).
    #[allow(clippy::too_many_arguments)] // each is a distinct input of the definition
    pub fn record_sample<R: Real>(
        &self,
        math: Math,
        loss: Loss,
        params: &[Layer],
        transposed: &Transposed,
        x: &[R],
        target: Target<'_, R>,
        s: &mut Scratch,
        records: &mut RecordsPart<'_>,
        k: usize,
    ) -> R {
        self.forward(math, params, transposed, x, s);
        let last = self.layers() - 1;
        s.delta.clear();
        s.delta.resize(self.outputs(), F32::ZERO);
        let value = loss.forward(
            math,
            cells::<R>(&s.pre[last]),
            target,
            cells_mut(&mut s.outputs),
            cells_mut(&mut s.delta),
        );
        for l in (0..self.layers()).rev() {
            let (outputs, inputs) = self.weight_shape(l);
            let input: &[R] = if l == 0 { x } else { cells(&s.hidden[l - 1]) };
            cells_mut::<R>(&mut records.inputs[l][k * inputs..(k + 1) * inputs])
                .copy_from_slice(input);
            records.deltas[l][k * outputs..(k + 1) * outputs].copy_from_slice(&s.delta);
            if l == 0 {
                break;
            }
            // The gradient with respect to this layer's inputs, accumulated from +0 over the
            // outputs in order (the seed starts from +0, so a lone -0 term becomes +0), then
            // ReLU's derivative: zero where the pre-activation was <= 0 by the setting's le.
            s.delta_below.clear();
            s.delta_below.resize(inputs, F32::ZERO);
            let below: &mut [R] = cells_mut(&mut s.delta_below);
            R::add_row_products(below, cells(&params[l].w), cells(&s.delta[..outputs]));
            math.zero_where_not_positive(cells(&s.pre[l - 1]), below);
            std::mem::swap(&mut s.delta, &mut s.delta_below);
        }
        value
    }

    /// Writes into `into` the block's gradient: for every weight and bias, the sum of its
    /// samples' terms in order, from the first sample's (section 5). Weight rows are shared
    /// out among `threads`.
    pub fn block_gradient<R: Real>(
        &self,
        records: &mut BlockRecords,
        into: &mut [Layer],
        threads: &Threads,
    ) {
        let n = records.samples;
        for (l, (by_sample, by_output)) in records
            .deltas
            .iter()
            .zip(&mut records.deltas_by_output)
            .enumerate()
        {
            let (outputs, _) = self.weight_shape(l);
            transpose(by_sample, n, outputs, by_output);
        }
        // Every layer's rows cut into the same number of parts, part `p` of each layer going
        // to the same task: equal work per task whatever the layers' widths.
        let work: usize = (0..self.layers())
            .map(|l| self.weight_shape(l).0 * self.weight_shape(l).1)
            .sum();
        let count = threads.parts(work, n);
        let mut parts: Vec<Vec<RowsPart<'_>>> = (0..count).map(|_| Vec::new()).collect();
        for (l, grad) in into.iter_mut().enumerate() {
            let (outputs, width) = self.weight_shape(l);
            let rows = ranges(outputs, count);
            let w = split(&mut grad.w[..], rows.clone(), width);
            let b = split(&mut grad.b[..], rows.clone(), 1);
            let deltas = split(&records.deltas_by_output[l][..], rows, n);
            for (part, ((w, b), deltas)) in parts.iter_mut().zip(w.zip(b).zip(deltas)) {
                part.push(RowsPart {
                    w,
                    b,
                    deltas,
                    inputs: &records.inputs[l],
                    width,
                });
            }
        }
        threads.run(parts, |part| {
            let _env = R::environment();
            for rows in part {
                let inputs: &[R] = cells(rows.inputs);
                let (w, b): (&mut [R], &mut [R]) = (cells_mut(rows.w), cells_mut(rows.b));
                for ((row, b), d) in w
                    .chunks_exact_mut(rows.width)
                    .zip(b.iter_mut())
                    .zip(cells::<R>(rows.deltas).chunks_exact(n))
                {
                    R::scaled_rows_sum(row, d, inputs);
                    *b = d[1..].iter().fold(d[0], |sum, &d| sum + d);
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_sizes() {
        assert!(Mlp::new(vec![3]).is_err());
        assert!(Mlp::new(vec![3, 0, 2]).is_err());
        assert!(Mlp::new(vec![MAX_LAYER_SIZE, MAX_LAYER_SIZE]).is_err());
        let message = match layer_sizes(&[-1i64, 4]) {
            Err(Error::Config(message)) => message,
            other => panic!("expected Error::Config, got {other:?}"),
        };
        assert!(
            message.starts_with("layer size -1 is outside 1..="),
            "{message}"
        );
        assert!(layer_sizes(&[i64::MAX, 4]).is_err());
        assert!(layer_sizes(&[MAX_LAYER_SIZE as i64 + 1, 4]).is_err());
        assert_eq!(layer_sizes(&[6i64, 10, 4]).unwrap(), vec![6, 10, 4]);
        assert!(Mlp::new(vec![1; MAX_LAYERS + 1]).is_ok());
        assert!(Mlp::new(vec![1; MAX_LAYERS + 2]).is_err());
    }

    #[test]
    fn seed_init_follows_the_seed_formula() {
        let params = Mlp::new(vec![6, 10, 4]).unwrap().init_params(Init::Seed, 1);
        // W1[0] = ((0*7 + 1) % 13 - 6) / 50 = -5/50; W2[3] = ((3*5 + 1) % 11 - 5) / 50 = 0.
        assert_eq!(params[0].w[0], F32::from_i32(-5) / F32::from_i32(50));
        assert_eq!(params[1].w[3], F32::ZERO);
        assert!(params.iter().all(|l| l.b.iter().all(|&b| b == F32::ZERO)));
    }

    #[test]
    fn seed_init_is_exact_for_extreme_seeds() {
        // k = 0: (i64::MAX % 13) - 6 = (9223372036854775807 mod 13 = 7) - 6 = 1 (C remainder);
        // i64::MIN: -9223372036854775808 rem 13 = -8, minus 6 = -14.
        let mlp = Mlp::new(vec![2, 1]).unwrap();
        let fifty = F32::from_i32(50);
        let w = |seed| mlp.init_params(Init::Seed, seed)[0].w[0];
        assert_eq!(w(i64::MAX), F32::from_i32(1) / fifty);
        assert_eq!(w(i64::MIN), F32::from_i32(-14) / fifty);
    }

    #[test]
    fn uniform_init_stays_in_its_range() {
        let mlp = Mlp::new(vec![6, 50]).unwrap();
        let a = (F32::from_i32(6) / F32::from_i32(6)).sqrt(); // He: sqrt(6 / 6) = 1
        let w = &mlp.init_params(Init::He, 3)[0].w;
        assert!(w.iter().all(|&x| x.ieee_lt(a) && (-a).ieee_le(x)));
        assert_ne!(w, &mlp.init_params(Init::He, 4)[0].w);
        assert_ne!(w, &mlp.init_params(Init::Glorot, 3)[0].w);
    }
}
