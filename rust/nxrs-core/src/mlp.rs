//! The multilayer perceptron (`docs/TRAINING.md`, sections 4 and 5): layer sizes, initialisation,
//! and the forward and backward passes of a block of samples, written once over [`Real`] as
//! matrix products ([`MatMul`]) whose every element is the definition's chain.
//!
//! Layers `[n0, n1, ..., nL]`: every layer computes `z = b + W a` (accumulated from the bias,
//! input by input, in order), hidden layers apply ReLU, the last layer feeds the loss. The order
//! of float operations is part of the result; it is the seed's `fwd` and `bwd`.

use crate::arith::matmul::{MatMul, Matrix, MatrixMut, Order, Start};
use crate::arith::{cells, cells_mut, Real};
use crate::error::{Error, Result};
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
pub(crate) fn zeros<R: Real>(n: usize) -> Vec<R> {
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
        /// PyTorch's default bounds for layer objects (section 15.4): weights and biases
        /// uniform on `[-a, a)`, `a = sqrt(1 / fan_in)`.
        Torch = "torch",
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
                    Init::He | Init::Glorot | Init::Torch => {
                        let a = init.bound(inputs, outputs);
                        uniform(
                            &mut Stream::new(seed, Domain::Init, l as u64),
                            outputs * inputs,
                            a,
                        )
                    }
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

impl Init {
    /// The bound `a` of a uniform initialisation of a layer with `fan_in` inputs and `fan_out`
    /// outputs per weight (section 4; section 15.4 for convolutions); the seed's pattern has
    /// none (1).
    pub fn bound(self, fan_in: usize, fan_out: usize) -> F32 {
        let (numerator, fan) = match self {
            Init::He => (6, fan_in),
            Init::Glorot => (6, fan_in + fan_out),
            Init::Torch => (1, fan_in),
            Init::Seed => return F32::ONE,
        };
        (F32::from_i32(numerator) / F32::from_i64(fan as i64)).sqrt()
    }
}

/// `cells` values uniform on `[-a, a)`, drawn from `stream`: each draw's top 24 bits give an
/// integer `k` in `[-2^23, 2^23)`, and the value is `(k * 2^-23) * a` (the first product exact).
pub fn uniform(stream: &mut Stream, cells: usize, a: F32) -> Vec<F32> {
    let two_pow_minus_23 = F32::from_bits((127 - 23) << 23);
    (0..cells)
        .map(|_| {
            let k = (stream.next_u64() >> 40) as i64 - (1 << 23);
            (F32::from_i64(k) * two_pow_minus_23) * a
        })
        .collect()
}

/// The weights as the forward pass reads them: each layer's matrix transposed (row `j` holds
/// the weights of input `j` for every output), refreshed from the parameters once per step and
/// shared by the threads. Its rows are the forward product's `B` rows, read as contiguous runs
/// of outputs (packing a transposed view instead would scatter every cell, in every thread).
#[derive(Clone, Debug)]
pub struct Transposed {
    w: Vec<Vec<F32>>,
}

impl Transposed {
    /// Zeros shaped like `mlp`'s transposed weights, until [`Transposed::refresh`] (they cost
    /// nothing until written, see `zeros`).
    pub fn new(mlp: &Mlp) -> Transposed {
        Transposed {
            w: mlp
                .zeros::<F32>()
                .into_iter()
                .map(|layer| layer.w)
                .collect(),
        }
    }

    /// The transposed weights of `params`.
    pub fn of(mlp: &Mlp, params: &[Layer]) -> Transposed {
        let mut t = Transposed::new(mlp);
        t.refresh(mlp, params);
        t
    }

    /// Copies `params`' weights in, transposed.
    pub fn refresh(&mut self, mlp: &Mlp, params: &[Layer]) {
        for (l, (t, layer)) in self.w.iter_mut().zip(params).enumerate() {
            let (outputs, inputs) = mlp.weight_shape(l);
            transpose(&layer.w, outputs, inputs, t);
        }
    }
}

/// The cells of a pass over some rows (samples): per layer, the pre-activations (`rows x
/// outputs`) and the gradient with respect to them, and the inputs to every layer (`rows x
/// inputs`; layer 0's are the samples' features, the others the ReLU outputs of the layer below).
/// Stored as [`F32`] cells, which the kernels view as their backend's values (see
/// [`crate::arith::cells`]).
pub struct Pass<'a> {
    pub inputs: Vec<&'a mut [F32]>,
    pub pre: Vec<&'a mut [F32]>,
    pub deltas: Vec<&'a mut [F32]>,
    pub rows: usize,
}

/// A block's records (section 5's reduction): every sample's inputs to every layer, its
/// pre-activations and its gradient with respect to them, kept until the block's weight
/// gradients are summed over its samples in order.
#[derive(Clone, Debug, Default)]
pub struct BlockRecords {
    /// Per layer, sample after sample (`samples x inputs`).
    inputs: Vec<Vec<F32>>,
    /// Per layer, sample after sample (`samples x outputs`).
    pre: Vec<Vec<F32>>,
    deltas: Vec<Vec<F32>>,
    samples: usize,
}

impl BlockRecords {
    /// Records for `samples` samples of `mlp`: [`BlockRecords::passes`] fills them, then
    /// [`Mlp::block_gradient`] sums them.
    pub fn start(&mut self, mlp: &Mlp, samples: usize) {
        self.samples = samples;
        for list in [&mut self.inputs, &mut self.pre, &mut self.deltas] {
            list.resize_with(mlp.layers(), Vec::new);
        }
        for l in 0..mlp.layers() {
            let (outputs, inputs) = mlp.weight_shape(l);
            self.inputs[l].resize(samples * inputs, F32::ZERO);
            self.pre[l].resize(samples * outputs, F32::ZERO);
            self.deltas[l].resize(samples * outputs, F32::ZERO);
        }
    }

    /// The records of the samples in `ranges` (consecutive, from the first), one pass each.
    pub fn passes(
        &mut self,
        mlp: &Mlp,
        ranges: impl Iterator<Item = Range<usize>> + Clone,
    ) -> Vec<Pass<'_>> {
        let mut passes: Vec<Pass<'_>> = ranges
            .clone()
            .map(|range| Pass {
                inputs: Vec::with_capacity(mlp.layers()),
                pre: Vec::with_capacity(mlp.layers()),
                deltas: Vec::with_capacity(mlp.layers()),
                rows: range.len(),
            })
            .collect();
        for (l, ((inputs, pre), deltas)) in self
            .inputs
            .iter_mut()
            .zip(&mut self.pre)
            .zip(&mut self.deltas)
            .enumerate()
        {
            let (outputs, width) = mlp.weight_shape(l);
            let inputs = split(&mut inputs[..], ranges.clone(), width);
            let pre = split(&mut pre[..], ranges.clone(), outputs);
            let deltas = split(&mut deltas[..], ranges.clone(), outputs);
            for (pass, ((i, p), d)) in passes.iter_mut().zip(inputs.zip(pre).zip(deltas)) {
                pass.inputs.push(i);
                pass.pre.push(p);
                pass.deltas.push(d);
            }
        }
        passes
    }
}

/// Working cells for the forward pass over up to `rows` rows at a time (evaluation and
/// prediction): a [`Pass`] without the gradients.
#[derive(Clone, Debug)]
pub struct ForwardCells {
    inputs: Vec<Vec<F32>>,
    pre: Vec<Vec<F32>>,
    rows: usize,
}

impl ForwardCells {
    pub fn new(mlp: &Mlp, rows: usize) -> ForwardCells {
        ForwardCells {
            inputs: (0..mlp.layers())
                .map(|l| vec![F32::ZERO; rows * mlp.weight_shape(l).1])
                .collect(),
            pre: (0..mlp.layers())
                .map(|l| vec![F32::ZERO; rows * mlp.weight_shape(l).0])
                .collect(),
            rows,
        }
    }

    /// The forward pass of the row-major samples `x` (at most `rows` of them): returns the
    /// last layer's pre-activations, one row per sample.
    pub fn forward<R: Real>(
        &mut self,
        mlp: &Mlp,
        math: Math,
        params: &[Layer],
        transposed: &Transposed,
        x: &[F32],
    ) -> &[F32] {
        let rows = x.len() / mlp.inputs();
        assert!(rows <= self.rows, "more rows than the cells hold");
        self.inputs[0][..x.len()].copy_from_slice(x);
        let mut pass = Pass {
            inputs: self.inputs.iter_mut().map(|v| &mut v[..]).collect(),
            pre: self.pre.iter_mut().map(|v| &mut v[..]).collect(),
            deltas: Vec::new(),
            rows,
        };
        mlp.forward::<R>(math, params, transposed, &mut pass);
        let last = mlp.layers() - 1;
        &self.pre[last][..rows * mlp.outputs()]
    }
}

impl Mlp {
    /// The forward pass of `pass.rows` samples (their features in `pass.inputs[0]`): the seed's
    /// `fwd`, with ReLU by the setting's `le`. Layer `l`'s pre-activations, each output's chain
    /// from its bias over the inputs in order (section 5), are `b + inputs x Wᵀ` (`Wᵀ` from
    /// `transposed`, refreshed from `params`); the hidden
    /// layers' ReLU outputs are the next layer's inputs. Computes in `R` on the stored cells.
    pub fn forward<R: Real>(
        &self,
        math: Math,
        params: &[Layer],
        transposed: &Transposed,
        pass: &mut Pass<'_>,
    ) {
        let rows = pass.rows;
        for (l, layer) in params.iter().enumerate() {
            let (outputs, inputs) = self.weight_shape(l);
            let (below, above) = pass.inputs.split_at_mut(l + 1);
            let pre: &mut [R] = cells_mut(&mut pass.pre[l][..rows * outputs]);
            // z[o] = ((b[o] + W[o,0] a[0]) + W[o,1] a[1]) + ...
            MatMul::new(
                MatrixMut::new(pre, rows, outputs),
                Start::Row(cells(&layer.b)),
                Matrix::new(cells::<R>(&below[l][..rows * inputs]), rows, inputs),
                Matrix::new(cells::<R>(&transposed.w[l]), inputs, outputs),
                Order::BA,
            )
            .run();
            if let Some(next) = above.first_mut() {
                let activations: &mut [R] = cells_mut(&mut next[..rows * outputs]);
                activations.copy_from_slice(pre);
                math.zero_where_not_positive(pre, activations);
            }
        }
    }

    /// The backward pass of `pass.rows` samples whose last layer's gradients are in
    /// `pass.deltas` (from the loss): the seed's `bwd` without the weight gradients, which
    /// [`Mlp::block_gradient`] sums. The gradient with respect to a layer's inputs is
    /// accumulated from +0 over the outputs in order (the seed starts from +0, so a lone -0
    /// term becomes +0), `0 + δ x W`, then ReLU's derivative: zero where the pre-activation
    /// was <= 0 by the setting's le.
    pub fn backward<R: Real>(&self, math: Math, params: &[Layer], pass: &mut Pass<'_>) {
        let rows = pass.rows;
        for l in (1..self.layers()).rev() {
            let (outputs, inputs) = self.weight_shape(l);
            let (below, this) = pass.deltas.split_at_mut(l);
            let below: &mut [R] = cells_mut(&mut below[l - 1][..rows * inputs]);
            MatMul::new(
                MatrixMut::new(below, rows, inputs),
                Start::Zero,
                Matrix::new(cells::<R>(&this[0][..rows * outputs]), rows, outputs),
                Matrix::new(cells::<R>(&params[l].w), outputs, inputs),
                Order::BA,
            )
            .run();
            math.zero_where_not_positive(cells(&pass.pre[l - 1][..rows * inputs]), below);
        }
    }

    /// Writes into `into` the block's gradient: for every weight and bias, the sum of its
    /// samples' terms in order, from the first sample's (section 5): `δᵀ x inputs` from the
    /// first term. Every layer's output rows are shared out among `threads`.
    pub fn block_gradient<R: Real>(
        &self,
        records: &BlockRecords,
        into: &mut [Layer],
        threads: &Threads,
    ) {
        let n = records.samples;
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
            for (part, ((w, b), rows)) in parts.iter_mut().zip(w.zip(b).zip(rows)) {
                part.push(RowsPart {
                    w,
                    b,
                    rows,
                    deltas: &records.deltas[l],
                    inputs: &records.inputs[l],
                    shape: (outputs, width),
                });
            }
        }
        threads.run(parts, |part| {
            let _env = R::environment();
            for p in part {
                let ((outputs, width), rows) = (p.shape, p.rows.clone());
                let deltas = Matrix::new(cells::<R>(p.deltas), n, outputs);
                MatMul::new(
                    MatrixMut::new(cells_mut::<R>(p.w), rows.len(), width),
                    Start::FirstTerm,
                    deltas.t().rows(rows.clone()),
                    Matrix::new(cells::<R>(p.inputs), n, width),
                    Order::AB,
                )
                .run();
                // The biases' sums, sample after sample, for the part's outputs at once.
                let b: &mut [R] = cells_mut(p.b);
                let deltas: &[R] = cells(p.deltas);
                b.copy_from_slice(&deltas[rows.clone()]);
                for s in 1..n {
                    R::add_assign(b, &deltas[s * outputs..][rows.clone()]);
                }
            }
        });
    }
}

/// Some output rows of one layer's weight and bias gradients, and what their sums read: what
/// one task of [`Mlp::block_gradient`] writes.
struct RowsPart<'a> {
    /// The rows' weight gradients (`rows x width`) and biases.
    w: &'a mut [F32],
    b: &'a mut [F32],
    rows: Range<usize>,
    /// The layer's `δ`s (`samples x outputs`) and inputs (`samples x width`).
    deltas: &'a [F32],
    inputs: &'a [F32],
    shape: (usize, usize),
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
