//! The multilayer perceptron of the seed, with its sizes as parameters.
//!
//! Layers `[n0, n1, ..., nL]`: every layer computes `pre = b + W a` (accumulated from the bias,
//! input by input, in order), hidden layers apply ReLU, the last layer is a softmax with
//! cross-entropy loss. The seed model is `[6, 10, 4]`. Forward and backward follow the seed's
//! `fwd` and `bwd` operation for operation, because the order of float operations is part of the
//! result.

use crate::error::{Error, Result};
use crate::math::{seed_exp, seed_le, seed_log};
use crate::softf32::F32;
use crate::Integer;

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

/// Layer sizes of an MLP, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mlp {
    sizes: Vec<usize>,
}

/// The one check of layer sizes: at least two (inputs and classes), each in
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
    /// An MLP with the given layer sizes (inputs first, classes last), checked by
    /// [`layer_sizes`].
    pub fn new(sizes: Vec<usize>) -> Result<Mlp> {
        layer_sizes(&sizes)?;
        Ok(Mlp { sizes })
    }

    /// The seed's model: 6 inputs, 10 ReLU hidden units, 4 classes.
    pub fn seed_model() -> Mlp {
        Mlp {
            sizes: vec![6, 10, 4],
        }
    }

    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    pub fn inputs(&self) -> usize {
        self.sizes[0]
    }

    pub fn classes(&self) -> usize {
        self.sizes[self.sizes.len() - 1]
    }

    /// Number of weight layers.
    pub fn layers(&self) -> usize {
        self.sizes.len() - 1
    }

    /// `(outputs, inputs)` of layer `l`'s weight matrix (row-major, one row per output).
    pub fn weight_shape(&self, l: usize) -> (usize, usize) {
        (self.sizes[l + 1], self.sizes[l])
    }

    /// Cell counts of the parameter tensors in order `W1, b1, W2, b2, ...`.
    pub fn param_lens(&self) -> Vec<usize> {
        (0..self.layers())
            .flat_map(|l| {
                let (outputs, inputs) = self.weight_shape(l);
                [outputs * inputs, outputs]
            })
            .collect()
    }

    /// The seed's deterministic initialisation (`mk_state`): patterned weights, zero biases.
    /// Exact for every `i64` seed: `k * mul + seed` is computed in `i128`, where it cannot
    /// overflow (in `i64` it would for seeds near `i64::MAX`). `%` truncates toward zero, as the
    /// seed's C `%` does, so a negative seed gives negative remainders (the seed itself only
    /// uses seeds >= 0, where truncating and floored `%` agree).
    pub fn init_params(&self, seed: i64) -> Vec<Vec<F32>> {
        let fifty = F32::from_i32(50);
        (0..self.layers())
            .flat_map(|l| {
                let (outputs, inputs) = self.weight_shape(l);
                let (mul, modulus) = INIT_PATTERNS[l.min(INIT_PATTERNS.len() - 1)];
                let weights = (0..outputs * inputs)
                    .map(|k| {
                        let cell = (k as i128 * mul + i128::from(seed)) % modulus - modulus / 2;
                        // |cell| < 2 * modulus: the conversion cannot fail.
                        F32::from_i64(cell as i64) / fifty
                    })
                    .collect();
                [weights, vec![F32::ZERO; outputs]]
            })
            .collect()
    }
}

/// Per-sample working memory of forward and backward, allocated once per trainer.
#[derive(Clone, Debug)]
pub struct Scratch {
    /// Pre-activations of every layer (the last one holds the logits).
    pre: Vec<Vec<F32>>,
    /// ReLU outputs of the hidden layers.
    hidden: Vec<Vec<F32>>,
    /// Softmax probabilities.
    probs: Vec<F32>,
    /// The loss gradient with respect to the current layer's pre-activations, and the one being
    /// accumulated for the layer below.
    delta: Vec<F32>,
    delta_below: Vec<F32>,
}

impl Scratch {
    pub fn new(mlp: &Mlp) -> Scratch {
        let widest = mlp.sizes.iter().copied().max().unwrap_or(0);
        Scratch {
            pre: mlp.sizes[1..].iter().map(|&n| vec![F32::ZERO; n]).collect(),
            hidden: mlp.sizes[1..mlp.sizes.len() - 1]
                .iter()
                .map(|&n| vec![F32::ZERO; n])
                .collect(),
            probs: vec![F32::ZERO; mlp.classes()],
            delta: Vec::with_capacity(widest),
            delta_below: Vec::with_capacity(widest),
        }
    }
}

impl Mlp {
    /// The seed's `fwd`: returns the cross-entropy loss `-log p[label]` and leaves the
    /// activations and probabilities in `scratch`. `params` is `W1, b1, W2, b2, ...`.
    pub fn forward(&self, params: &[Vec<F32>], x: &[F32], label: usize, s: &mut Scratch) -> F32 {
        for l in 0..self.layers() {
            let (outputs, inputs) = self.weight_shape(l);
            let (weights, bias) = (&params[2 * l], &params[2 * l + 1]);
            let hidden_layers = s.hidden.len();
            let (below, this) = s.hidden.split_at_mut(l.min(hidden_layers));
            let input: &[F32] = if l == 0 { x } else { &below[l - 1] };
            for j in 0..outputs {
                let row = &weights[j * inputs..(j + 1) * inputs];
                let a = row
                    .iter()
                    .zip(input)
                    .fold(bias[j], |acc, (&w, &xi)| acc + w * xi);
                s.pre[l][j] = a;
                if l + 1 < self.layers() {
                    this[0][j] = relu(a);
                }
            }
        }
        softmax(&s.pre[self.layers() - 1], &mut s.probs);
        -seed_log(s.probs[label])
    }

    /// The seed's `bwd`: writes the gradients of the loss for the sample `forward` just saw into
    /// `grads` (same layout as `params`).
    pub fn backward(
        &self,
        params: &[Vec<F32>],
        x: &[F32],
        label: usize,
        s: &mut Scratch,
        grads: &mut [Vec<F32>],
    ) {
        // Softmax + cross-entropy: dL/dlogit = p - onehot(label).
        s.delta.clear();
        s.delta.extend_from_slice(&s.probs);
        s.delta[label] = s.probs[label] - F32::ONE;

        for l in (0..self.layers()).rev() {
            let (outputs, inputs) = self.weight_shape(l);
            let input: &[F32] = if l == 0 { x } else { &s.hidden[l - 1] };
            let weights = &params[2 * l];
            let (grad_w, grad_b) = split_pair(grads, 2 * l);
            // The seed starts the accumulation from +0 (so a lone -0 term becomes +0).
            s.delta_below.clear();
            s.delta_below
                .resize(if l > 0 { inputs } else { 0 }, F32::ZERO);
            for o in 0..outputs {
                let d = s.delta[o];
                grad_b[o] = d;
                for j in 0..inputs {
                    grad_w[o * inputs + j] = d * input[j];
                    if l > 0 {
                        s.delta_below[j] = s.delta_below[j] + weights[o * inputs + j] * d;
                    }
                }
            }
            if l > 0 {
                // ReLU's derivative by the seed's rule: zero where pre <= 0 (sign of difference).
                for (d, &pre) in s.delta_below.iter_mut().zip(&s.pre[l - 1]) {
                    if seed_le(pre, F32::ZERO) {
                        *d = F32::ZERO;
                    }
                }
                std::mem::swap(&mut s.delta, &mut s.delta_below);
            }
        }
    }
}

/// The seed's ReLU: `0` where `seed_le(a, 0)`, else `a`.
fn relu(a: F32) -> F32 {
    if seed_le(a, F32::ZERO) {
        F32::ZERO
    } else {
        a
    }
}

/// The seed's softmax: the maximum by `seed_le` (a later equal logit wins), `e = exp(l - max)`
/// summed from +0 in order, then each `e / sum`.
fn softmax(logits: &[F32], probs: &mut [F32]) {
    let max = logits[1..]
        .iter()
        .fold(logits[0], |mx, &l| if seed_le(mx, l) { l } else { mx });
    let mut sum = F32::ZERO;
    for (p, &l) in probs.iter_mut().zip(logits) {
        *p = seed_exp(l - max);
        sum = sum + *p;
    }
    for p in probs.iter_mut() {
        *p = *p / sum;
    }
}

/// Mutable access to `tensors[i]` and `tensors[i + 1]` at once.
fn split_pair(tensors: &mut [Vec<F32>], i: usize) -> (&mut [F32], &mut [F32]) {
    let (first, rest) = tensors[i..].split_at_mut(1);
    (&mut first[0], &mut rest[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_model_layout() {
        let mlp = Mlp::seed_model();
        assert_eq!(mlp.param_lens(), vec![60, 10, 40, 4]);
    }

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
    fn init_is_exact_at_the_ends_of_i64() {
        // W1[k] = ((k*7 + seed) % 13 - 6) / 50 with the remainder computed by hand:
        // i64::MAX = 2^63 - 1 = 13 * 709490156681136600 + 7, so k = 0 gives 7 - 6 = 1 and
        // k = 1 gives (7 + 7) % 13 - 6 = -5. i64::MIN = -(13 * 709490156681136600 + 8): k = 0
        // gives -8 - 6 = -14 (truncating %), k = 1 gives (7 - 8) - 6 = -7.
        let w = |seed: i64, k: usize| Mlp::seed_model().init_params(seed)[0][k];
        let fiftieths = |n: i32| F32::from_i32(n) / F32::from_i32(50);
        assert_eq!(w(i64::MAX, 0), fiftieths(1));
        assert_eq!(w(i64::MAX, 1), fiftieths(-5));
        assert_eq!(w(i64::MIN, 0), fiftieths(-14));
        assert_eq!(w(i64::MIN, 1), fiftieths(-7));
    }

    #[test]
    fn init_follows_the_seed_formula() {
        let params = Mlp::seed_model().init_params(1);
        // W1[0] = ((0*7 + 1) % 13 - 6) / 50 = -5/50; W2[3] = ((3*5 + 1) % 11 - 5) / 50 = 0.
        assert_eq!(params[0][0], F32::from_i32(-5) / F32::from_i32(50));
        assert_eq!(params[2][3], F32::ZERO);
        assert!(params[1].iter().all(|&b| b == F32::ZERO));
    }
}
