//! Layer models (`docs/TRAINING.md` section 15): the layer list, its shapes, and each layer's
//! forward and backward kernels over a block of samples, written once over [`Real`].
//!
//! - [`window`]: where convolution and pooling windows lie (1-D as 2-D of height 1);
//! - [`conv`]: Dense and convolutions as matrix products over im2col columns;
//! - [`pool`]: max and average pooling; [`norm`]: BatchNorm and LayerNorm;
//! - [`pointwise`]: ReLU, Sigmoid, Tanh and Dropout;
//! - [`pass`]: one layer's forward and backward pass, dispatched to those kernels;
//! - `share`: how a layer's work is shared out among threads;
//! - [`transposed`]: Dense layers' weights transposed for their forward passes;
//! - [`network`]: a whole list's passes over a block (MLPs' too: the one model engine).
//!
//! [`Real`]: crate::arith::Real

pub mod attention;
pub mod conv;
pub mod embedding;
mod json;
pub use json::Floats;
pub mod network;
pub mod norm;
pub mod pass;
pub mod pointwise;
pub mod pool;
mod share;
pub mod transposed;
pub mod window;

use crate::error::{Error, Result};
use crate::limits::{MAX_LAYERS, MAX_LAYER_SIZE, MAX_PARAMETERS};

/// The largest vocabulary: every id is then an exact binary32 integer (section 15.8).
pub const MAX_VOCAB: usize = 1 << 24;
use crate::softf32::F32;
use conv::Conv;
use window::Window;

/// A layer as a user gives it (section 15.1's table), before its input shape is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerSpec {
    Input {
        shape: Vec<usize>,
    },
    /// `Dense(units, bias=False)` has no `b` (section 15.7); `std` draws `W` from
    /// `N(0, std)` (section 15.8).
    Dense {
        units: usize,
        bias: bool,
        std: Option<F32>,
    },
    /// `Conv1d` (one size per list) or `Conv2d` (two).
    Conv {
        out_channels: usize,
        kernel_size: Vec<usize>,
        stride: Vec<usize>,
        padding: Vec<usize>,
    },
    /// `MaxPool1d/2d` (`max`) or `AvgPool1d/2d`; the stride defaults to the kernel size.
    Pool {
        max: bool,
        kernel_size: Vec<usize>,
        stride: Vec<usize>,
    },
    Flatten,
    ReLU,
    Tanh,
    Sigmoid,
    Dropout {
        p: F32,
    },
    /// `BatchNorm1d` (`dims` 1) or `BatchNorm2d` (`dims` 2).
    BatchNorm {
        dims: usize,
        momentum: F32,
        eps: F32,
    },
    /// `LayerNorm(bias=False)` has no `beta` (section 15.7).
    LayerNorm {
        eps: F32,
        bias: bool,
    },
    /// The exact GELU, `x * Phi(x)`.
    GELU,
    /// `x + f(x)`, `f` the nested list (section 15.7).
    Residual {
        layers: Vec<LayerSpec>,
    },
    /// Token ids to vectors (section 15.8).
    Embedding {
        vocab: usize,
        width: usize,
        std: Option<F32>,
    },
    /// Learned positions added to a sequence.
    PositionalEmbedding {
        context: usize,
        width: usize,
        std: Option<F32>,
    },
    /// Causal self-attention with its two projections (no biases).
    CausalSelfAttention {
        heads: usize,
        std: Option<F32>,
        proj_std: Option<F32>,
    },
    /// Logits against the list's Embedding's table.
    TiedHead,
}

/// A layer with its input shape resolved: what its kernels need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Conv(Conv),
    MaxPool(Window),
    AvgPool(Window),
    /// Flatten: the same cells.
    Reshape,
    ReLU,
    Tanh,
    Sigmoid,
    Dropout {
        p: F32,
    },
    BatchNorm(norm::BatchNorm<F32>),
    LayerNorm(norm::LayerNorm<F32>),
    GELU,
    /// Where a Residual starts: its outputs are its inputs, kept for the [`Op::Add`] that ends
    /// it (the layer whose index it names), which sends its output gradient back here.
    Fork {
        add: usize,
    },
    /// Where a Residual ends: its input (the branch's output) added to the [`Op::Fork`]'s
    /// output (the layer whose index it names), `fork + branch`.
    Add {
        fork: usize,
    },
    /// Token ids (a sequence of `T`) to rows of `E` (`vocab x width`); `tied` when a TiedHead
    /// reads `E` too (its block gradient is then the head's chain plus this one's).
    Embedding {
        vocab: usize,
        tied: bool,
    },
    /// `P` (`context x width`) added to a sequence.
    Positional {
        context: usize,
    },
    Attention(attention::Attention),
    /// Logits against `E` of the Embedding (layer 0, the network's first).
    TiedHead {
        vocab: usize,
    },
}

/// A layer of a checked list: its kernels' operation and both shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// The layer's position in the list (`Input` is 0).
    pub position: usize,
    pub op: Op,
    pub input: Vec<usize>,
    pub output: Vec<usize>,
    /// The tokens of a sample when the layer's input is a sequence (section 15.8): Dense and
    /// LayerNorm then act on each token alone.
    pub sequence: Option<usize>,
    /// The `std` of a layer whose matrices are drawn from `N(0, std)`, and of its second
    /// matrix (CausalSelfAttention's `Wo`).
    pub std: Option<(F32, F32)>,
}

impl Layer {
    /// The shapes of the layer's tensors in the state's order (section 15.4): `W`, `b` or
    /// `gamma`, `beta` (parameters; the second absent in a layer without biases), then `mean`,
    /// `var` (BatchNorm's running statistics).
    pub fn tensor_shapes(&self) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
        // A tensor of the state, or none (a layer without biases).
        let present = |shapes: [Option<Vec<usize>>; 2]| shapes.into_iter().flatten().collect();
        match &self.op {
            Op::Conv(conv) => {
                let w = &conv.window;
                let mut shape = vec![conv.out_channels, w.channels];
                // Dense (on a sequence too) has no kernel dimensions.
                match (self.sequence, self.input.len()) {
                    (Some(_), _) | (None, 1) => {}
                    (None, 2) => shape.push(w.kernel[1]),
                    _ => shape.extend(w.kernel),
                }
                let b = conv.bias.then(|| vec![conv.out_channels]);
                (present([Some(shape), b]), vec![])
            }
            Op::BatchNorm(bn) => {
                let c = vec![bn.channels];
                (vec![c.clone(), c.clone()], vec![c.clone(), c])
            }
            Op::LayerNorm(ln) => {
                // A token's cells on a sequence, else the sample's shape.
                let shape = match self.sequence {
                    Some(_) => vec![ln.cells],
                    None => self.input.clone(),
                };
                let beta = ln.bias.then(|| shape.clone());
                (present([Some(shape), beta]), vec![])
            }
            Op::Embedding { vocab, .. } => (vec![vec![*vocab, self.output[1]]], vec![]),
            Op::Positional { context } => (vec![vec![*context, self.input[1]]], vec![]),
            Op::Attention(a) => {
                let d = a.width;
                (vec![vec![3 * d, d], vec![d, d]], vec![])
            }
            _ => (vec![], vec![]),
        }
    }
}

/// The checked layer list: every layer after `Input`, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Network {
    pub input: Vec<usize>,
    pub layers: Vec<Layer>,
    /// A sequence model's tokens (section 15.8): `None` for every other model.
    pub tokens: Option<Tokens>,
}

/// What a sequence model reads and gives: `T` token ids per sample, each in `0..vocab`, and
/// (`per_token`) a `(T, K)` sequence of outputs, scored token by token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tokens {
    pub tokens: usize,
    pub vocab: usize,
    pub per_token: bool,
}

/// An activation's shape and whether it is a sequence (section 15.8).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Activation {
    shape: Vec<usize>,
    sequence: bool,
}

fn cells(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// `[height, width]` of a 1-D (height 1) or 2-D layer's sizes, checked to have `dims` of them.
fn pair(what: &str, name: &str, sizes: &[usize], dims: usize, pad: usize) -> Result<[usize; 2]> {
    match (dims, sizes) {
        (1, &[n]) => Ok([pad, n]),
        (2, &[h, w]) => Ok([h, w]),
        _ => Err(Error::Config(format!(
            "{what}: {name} needs {dims} size(s), got {sizes:?}"
        ))),
    }
}

impl Network {
    /// Checks a layer list and resolves every shape: the one place the rules of section 15.1
    /// are checked.
    pub fn new(specs: &[LayerSpec]) -> Result<Network> {
        let Some((LayerSpec::Input { shape }, rest)) = specs.split_first() else {
            return Err(Error::Config(
                "a layer list starts with Input(*shape)".into(),
            ));
        };
        let count = count_layers(rest);
        if count > MAX_LAYERS {
            return Err(Error::Config(format!(
                "{count} layers are more than {MAX_LAYERS}"
            )));
        }
        check_shape("layer 0 (Input)", shape)?;
        let mut list = Resolved {
            layers: Vec::with_capacity(count),
            position: 0,
            parameters: 0,
            vocab: None,
        };
        let input = Activation {
            shape: shape.clone(),
            sequence: false,
        };
        let last = list.resolve(rest, input)?;
        if last.shape.len() != 1 && !last.sequence {
            return Err(Error::Config(format!(
                "the last layer's output must be flat (the loss reads a vector) or a sequence \
                 (a loss per token), got shape {:?}: add Flatten() and a Dense layer",
                last.shape
            )));
        }
        let tokens = list.vocab.map(|vocab| Tokens {
            tokens: shape[0],
            vocab,
            per_token: last.sequence,
        });
        Ok(Network {
            input: shape.clone(),
            layers: list.layers,
            tokens,
        })
    }

    /// The output vector's length.
    pub fn outputs(&self) -> usize {
        self.layers
            .last()
            .map_or(cells(&self.input), |l| cells(&l.output))
    }
}

/// The layers a list holds, nested ones included, each Residual counted once with its branch's
/// (the count section 15.1's limit is on).
fn count_layers(specs: &[LayerSpec]) -> usize {
    specs
        .iter()
        .map(|spec| match spec {
            LayerSpec::Residual { layers } => 1 + count_layers(layers),
            _ => 1,
        })
        .sum()
}

/// A list being resolved: its layers so far (a Residual's as a fork, its branch's layers and an
/// add), the last position given (depth first, section 15.7), the parameter cells so far, and
/// the vocabulary of its Embedding (section 15.8).
struct Resolved {
    layers: Vec<Layer>,
    position: usize,
    parameters: usize,
    vocab: Option<usize>,
}

impl Resolved {
    /// Resolves `specs` on an input `current`, appending their layers: their output.
    fn resolve(&mut self, specs: &[LayerSpec], mut current: Activation) -> Result<Activation> {
        for spec in specs {
            self.position += 1;
            let position = self.position;
            let what = format!("layer {position} ({})", spec.type_name());
            if let LayerSpec::Residual { layers } = spec {
                current = self.residual(&what, layers, current)?;
                continue;
            }
            let first = self.layers.is_empty();
            let (op, output) = self.resolve_one(&what, spec, &current, first)?;
            check_shape(&what, &output.shape)?;
            let layer = Layer {
                position,
                op,
                input: current.shape,
                output: output.shape.clone(),
                sequence: current.sequence.then(|| output.shape[0]),
                std: spec.std(),
            };
            layer.check_working_cells(&what)?;
            let (params, _) = layer.tensor_shapes();
            self.parameters = params
                .iter()
                .try_fold(self.parameters, |sum, s| sum.checked_add(cells(s)))
                .filter(|&n| n <= MAX_PARAMETERS)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "{what}: the layers need more than {MAX_PARAMETERS} parameters"
                    ))
                })?;
            self.layers.push(layer);
            current = output;
        }
        Ok(current)
    }

    /// The operation and output of `spec` (`what`, the list's first layer when `first`) on
    /// `input`: the sequence layers here, every other by [`resolve`].
    fn resolve_one(
        &mut self,
        what: &str,
        spec: &LayerSpec,
        input: &Activation,
        first: bool,
    ) -> Result<(Op, Activation)> {
        let sequence = |shape: Vec<usize>| Activation {
            shape,
            sequence: true,
        };
        let needs_sequence = || -> Result<(usize, usize)> {
            match (input.sequence, &input.shape[..]) {
                (true, &[t, d]) => Ok((t, d)),
                _ => Err(Error::Config(format!(
                    "{what}: takes a (tokens, width) sequence, which an Embedding after Input \
                     makes, got an input of shape {:?}",
                    input.shape
                ))),
            }
        };
        let check_std = |name: &str, std: Option<F32>| match std {
            Some(s) if !(s.is_finite() && F32::ZERO.ieee_lt(s)) => Err(Error::Config(format!(
                "{what}: {name} must be finite and > 0, got {s}"
            ))),
            _ => Ok(()),
        };
        let at_least_one = |name: &str, n: usize| {
            if n == 0 {
                Err(Error::Config(format!("{what}: {name} must be >= 1")))
            } else {
                Ok(())
            }
        };
        Ok(match spec {
            LayerSpec::Embedding { vocab, width, std } => {
                let &[t] = &input.shape[..] else {
                    return Err(Error::Config(format!(
                        "{what}: takes (tokens) ids, got an input of shape {:?}",
                        input.shape
                    )));
                };
                if !first {
                    return Err(Error::Config(format!(
                        "{what}: an Embedding comes directly after Input (it reads token ids)"
                    )));
                }
                at_least_one("vocab", *vocab)?;
                at_least_one("width", *width)?;
                if *vocab > MAX_VOCAB {
                    return Err(Error::Config(format!(
                        "{what}: vocab {vocab} is more than {MAX_VOCAB} (ids are exact binary32 \
                         integers)"
                    )));
                }
                check_std("std", *std)?;
                self.vocab = Some(*vocab);
                let op = Op::Embedding {
                    vocab: *vocab,
                    tied: false,
                };
                (op, sequence(vec![t, *width]))
            }
            LayerSpec::PositionalEmbedding {
                context,
                width,
                std,
            } => {
                let (t, d) = needs_sequence()?;
                check_std("std", *std)?;
                if d != *width {
                    return Err(Error::Config(format!(
                        "{what}: width {width} does not match its input's width {d}"
                    )));
                }
                if t > *context {
                    return Err(Error::Config(format!(
                        "{what}: sequences of {t} tokens are longer than its context {context}"
                    )));
                }
                (Op::Positional { context: *context }, input.clone())
            }
            LayerSpec::CausalSelfAttention {
                heads,
                std,
                proj_std,
            } => {
                let (t, d) = needs_sequence()?;
                at_least_one("heads", *heads)?;
                if d % heads != 0 {
                    return Err(Error::Config(format!(
                        "{what}: {heads} heads do not divide the width {d}"
                    )));
                }
                check_std("std", *std)?;
                check_std("proj_std", *proj_std)?;
                if std.is_none() && proj_std.is_some() {
                    return Err(Error::Config(format!(
                        "{what}: proj_std is given without std (both matrices are drawn from \
                         normal distributions, or neither)"
                    )));
                }
                let attention = attention::Attention {
                    heads: *heads,
                    tokens: t,
                    width: d,
                };
                (Op::Attention(attention), input.clone())
            }
            LayerSpec::TiedHead => {
                let (t, d) = needs_sequence()?;
                let embedding = self
                    .layers
                    .first_mut()
                    .filter(|l| matches!(l.op, Op::Embedding { .. }));
                let Some(embedding) = embedding else {
                    return Err(Error::Config(format!(
                        "{what}: a tied head reads the table of the Embedding the list starts \
                         with, and this list has none"
                    )));
                };
                let (vocab, width) = (self.vocab.unwrap_or(0), embedding.output[1]);
                if d != width {
                    return Err(Error::Config(format!(
                        "{what}: its input's width {d} is not the Embedding's width {width}"
                    )));
                }
                embedding.op = Op::Embedding { vocab, tied: true };
                (Op::TiedHead { vocab }, sequence(vec![t, vocab]))
            }
            // Dense and LayerNorm act on each token of a sequence (section 15.8).
            LayerSpec::Dense { units, bias, std } if input.sequence => {
                let (t, n) = needs_sequence()?;
                check_std("std", *std)?;
                (
                    Op::Conv(Conv::dense(n, *units, *bias)),
                    sequence(vec![t, *units]),
                )
            }
            LayerSpec::LayerNorm { eps, bias } if input.sequence => {
                let (_, d) = needs_sequence()?;
                check_eps(what, *eps)?;
                let ln = norm::LayerNorm {
                    cells: d,
                    eps: *eps,
                    bias: *bias,
                };
                (Op::LayerNorm(ln), input.clone())
            }
            LayerSpec::Dense { std, .. } => {
                check_std("std", *std)?;
                let (op, shape) = resolve(what, spec, &input.shape)?;
                (
                    op,
                    Activation {
                        shape,
                        sequence: false,
                    },
                )
            }
            LayerSpec::Conv { .. } | LayerSpec::Pool { .. } | LayerSpec::BatchNorm { .. }
                if input.sequence =>
            {
                return Err(Error::Config(format!(
                    "{what}: takes channels, not a (tokens, width) sequence: on a sequence use \
                     Dense, LayerNorm, CausalSelfAttention or a pointwise layer, or Flatten() \
                     it first"
                )))
            }
            _ => {
                let (op, shape) = resolve(what, spec, &input.shape)?;
                // Pointwise layers keep a sequence one; Flatten ends it.
                let sequence = input.sequence && !matches!(spec, LayerSpec::Flatten);
                (op, Activation { shape, sequence })
            }
        })
    }

    /// A Residual (`what`) of `branch` on `input`: a fork, the branch, an add.
    fn residual(
        &mut self,
        what: &str,
        branch: &[LayerSpec],
        input: Activation,
    ) -> Result<Activation> {
        if branch.is_empty() {
            return Err(Error::Config(format!(
                "{what}: a residual branch needs at least one layer"
            )));
        }
        let position = self.position;
        let fork = self.layers.len();
        let structural = |op: Op| Layer {
            position,
            op,
            input: input.shape.clone(),
            output: input.shape.clone(),
            sequence: input.sequence.then(|| input.shape[0]),
            std: None,
        };
        // The add's index is known once the branch is resolved.
        self.layers.push(structural(Op::Fork { add: 0 }));
        let output = self.resolve(branch, input.clone())?;
        if output != input {
            return Err(Error::Config(format!(
                "{what}: a residual branch must keep its input's shape {:?}, but gives {:?}",
                input.shape, output.shape
            )));
        }
        let add = self.layers.len();
        self.layers[fork].op = Op::Fork { add };
        self.layers.push(structural(Op::Add { fork }));
        Ok(input)
    }
}

/// `sizes` multiplied, or None past `usize`.
fn product(sizes: &[usize]) -> Option<usize> {
    sizes.iter().try_fold(1usize, |n, &s| n.checked_mul(s))
}

impl Layer {
    /// The cells per sample of each working buffer a pass of this layer needs besides its
    /// activations, by name (None past `usize`): a convolution's columns (im2col) and the padded
    /// input they are gathered from, average pooling's table of its windows' cells.
    fn working_cells(&self) -> Vec<(&'static str, Option<usize>)> {
        let windows = |w: &Window| {
            product(&[
                w.output[0],
                w.output[1],
                w.channels,
                w.kernel[0],
                w.kernel[1],
            ])
        };
        match &self.op {
            Op::Conv(conv) => {
                let w = &conv.window;
                // Within usize: `Window::new` checked `input + 2 x padding`.
                let padded = [0, 1].map(|d| w.input[d] + 2 * w.padding[d]);
                vec![
                    ("columns (positions x channels x kernel cells)", windows(w)),
                    (
                        "padded input (channels x padded height x padded width)",
                        product(&[w.channels, padded[0], padded[1]]),
                    ),
                ]
            }
            Op::AvgPool(w) => vec![(
                "window table (positions x channels x kernel cells)",
                windows(w),
            )],
            Op::Attention(a) => vec![
                (
                    "queries, keys and values (tokens x 3 x width)",
                    product(&[a.tokens, 3, a.width]),
                ),
                (
                    "attention probabilities (heads x tokens x tokens)",
                    product(&[a.heads, a.tokens, a.tokens]),
                ),
            ],
            _ => vec![],
        }
    }

    /// Section 15.1's limit on working buffers: each at most [`MAX_LAYER_SIZE`] cells per
    /// sample, as an activation is. With it every buffer a pass allocates is bounded by the
    /// limits, whatever sizes a model file gives: a kernel and padding of a thousand on an 8 x 8
    /// image would otherwise ask for a terabyte of columns.
    fn check_working_cells(&self, what: &str) -> Result<()> {
        for (buffer, cells) in self.working_cells() {
            if cells.is_some_and(|n| n <= MAX_LAYER_SIZE) {
                continue;
            }
            let cells = cells.map_or_else(|| "more than 2^64".into(), |n| n.to_string());
            return Err(Error::Config(format!(
                "{what}: its {buffer} would have {cells} cells per sample, more than \
                 {MAX_LAYER_SIZE}: use a smaller kernel, padding or input, or a larger stride"
            )));
        }
        Ok(())
    }
}

fn check_shape(what: &str, shape: &[usize]) -> Result<()> {
    if shape.is_empty() || shape.len() > 3 || shape.contains(&0) {
        return Err(Error::Config(format!(
            "{what}: a shape has 1 to 3 sizes, each >= 1, got {shape:?}"
        )));
    }
    match shape.iter().try_fold(1usize, |n, &s| n.checked_mul(s)) {
        Some(n) if n <= MAX_LAYER_SIZE => Ok(()),
        _ => Err(Error::Config(format!(
            "{what}: shape {shape:?} has more than {MAX_LAYER_SIZE} cells"
        ))),
    }
}

impl LayerSpec {
    /// The `std` of a layer whose matrices are drawn from `N(0, std)` (section 15.8), with its
    /// second matrix's (CausalSelfAttention's `proj_std`, `std` when not given).
    fn std(&self) -> Option<(F32, F32)> {
        match self {
            LayerSpec::Dense { std, .. }
            | LayerSpec::Embedding { std, .. }
            | LayerSpec::PositionalEmbedding { std, .. } => std.map(|s| (s, s)),
            LayerSpec::CausalSelfAttention { std, proj_std, .. } => {
                std.map(|s| (s, proj_std.unwrap_or(s)))
            }
            _ => None,
        }
    }

    /// PyTorch's name of the layer, for messages.
    pub fn type_name(&self) -> String {
        let d = |n: usize| if n == 2 { "2d" } else { "1d" };
        match self {
            LayerSpec::Input { .. } => "Input".into(),
            LayerSpec::Dense { .. } => "Dense".into(),
            LayerSpec::GELU => "GELU".into(),
            LayerSpec::Residual { .. } => "Residual".into(),
            LayerSpec::Embedding { .. } => "Embedding".into(),
            LayerSpec::PositionalEmbedding { .. } => "PositionalEmbedding".into(),
            LayerSpec::CausalSelfAttention { .. } => "CausalSelfAttention".into(),
            LayerSpec::TiedHead => "TiedHead".into(),
            LayerSpec::Conv { kernel_size, .. } => format!("Conv{}", d(kernel_size.len())),
            LayerSpec::Pool {
                max, kernel_size, ..
            } => {
                format!(
                    "{}Pool{}",
                    if *max { "Max" } else { "Avg" },
                    d(kernel_size.len())
                )
            }
            LayerSpec::Flatten => "Flatten".into(),
            LayerSpec::ReLU => "ReLU".into(),
            LayerSpec::Tanh => "Tanh".into(),
            LayerSpec::Sigmoid => "Sigmoid".into(),
            LayerSpec::Dropout { .. } => "Dropout".into(),
            LayerSpec::BatchNorm { dims, .. } => format!("BatchNorm{}", d(*dims)),
            LayerSpec::LayerNorm { .. } => "LayerNorm".into(),
        }
    }
}

/// The operation and output shape of `spec` on an input of shape `input`.
fn resolve(what: &str, spec: &LayerSpec, input: &[usize]) -> Result<(Op, Vec<usize>)> {
    let wrong_input = |wants: &str| {
        Error::Config(format!(
            "{what}: takes {wants}, got an input of shape {input:?}"
        ))
    };
    // A window layer's input as channels x [height, width] (a 1-D one of height 1).
    let spatial = |dims: usize| -> Result<(usize, [usize; 2])> {
        match (dims, input) {
            (1, &[c, l]) => Ok((c, [1, l])),
            (2, &[c, h, w]) => Ok((c, [h, w])),
            (1, _) => Err(wrong_input("(channels, length)")),
            _ => Err(wrong_input("(channels, height, width)")),
        }
    };
    let output_of = |channels: usize, w: &Window, dims: usize| match dims {
        1 => vec![channels, w.output[1]],
        _ => vec![channels, w.output[0], w.output[1]],
    };
    Ok(match spec {
        LayerSpec::Input { .. } => {
            return Err(Error::Config(format!(
                "{what}: only the first layer is an Input"
            )))
        }
        LayerSpec::Dense { units, bias, .. } => {
            let &[n] = input else {
                return Err(wrong_input("a flat input (n): put Flatten() before it"));
            };
            (Op::Conv(Conv::dense(n, *units, *bias)), vec![*units])
        }
        LayerSpec::Conv {
            out_channels,
            kernel_size,
            stride,
            padding,
        } => {
            let dims = kernel_size.len();
            let (c, size) = spatial(dims)?;
            if *out_channels == 0 {
                return Err(Error::Config(format!("{what}: out_channels must be >= 1")));
            }
            let window = Window::new(
                what,
                c,
                size,
                pair(what, "kernel_size", kernel_size, dims, 1)?,
                pair(what, "stride", stride, dims, 1)?,
                pair(what, "padding", padding, dims, 0)?,
            )?;
            let output = output_of(*out_channels, &window, dims);
            (
                Op::Conv(Conv {
                    window,
                    out_channels: *out_channels,
                    bias: true,
                }),
                output,
            )
        }
        LayerSpec::Pool {
            max,
            kernel_size,
            stride,
        } => {
            let dims = kernel_size.len();
            let (c, size) = spatial(dims)?;
            let window = Window::new(
                what,
                c,
                size,
                pair(what, "kernel_size", kernel_size, dims, 1)?,
                pair(what, "stride", stride, dims, 1)?,
                [0, 0],
            )?;
            let output = output_of(c, &window, dims);
            (
                if *max {
                    Op::MaxPool(window)
                } else {
                    Op::AvgPool(window)
                },
                output,
            )
        }
        LayerSpec::Flatten => (Op::Reshape, vec![cells(input)]),
        LayerSpec::ReLU => (Op::ReLU, input.to_vec()),
        LayerSpec::GELU => (Op::GELU, input.to_vec()),
        LayerSpec::Residual { .. }
        | LayerSpec::Embedding { .. }
        | LayerSpec::PositionalEmbedding { .. }
        | LayerSpec::CausalSelfAttention { .. }
        | LayerSpec::TiedHead => unreachable!("Resolved::resolve_one resolves {what}"),
        LayerSpec::Tanh => (Op::Tanh, input.to_vec()),
        LayerSpec::Sigmoid => (Op::Sigmoid, input.to_vec()),
        LayerSpec::Dropout { p } => {
            if !(F32::ZERO.ieee_le(*p) && p.ieee_lt(F32::ONE)) {
                return Err(Error::Config(format!(
                    "{what}: p must be in [0, 1), got {p}"
                )));
            }
            (Op::Dropout { p: *p }, input.to_vec())
        }
        LayerSpec::BatchNorm {
            dims,
            momentum,
            eps,
        } => {
            let (channels, positions) = match (dims, input) {
                (1, &[c]) => (c, 1),
                (1, &[c, l]) => (c, l),
                (2, &[c, h, w]) => (c, h * w),
                (1, _) => return Err(wrong_input("(channels) or (channels, length)")),
                _ => return Err(wrong_input("(channels, height, width)")),
            };
            if !(momentum.ieee_le(F32::ONE) && F32::ZERO.ieee_le(*momentum)) {
                return Err(Error::Config(format!(
                    "{what}: momentum must be in [0, 1], got {momentum}"
                )));
            }
            check_eps(what, *eps)?;
            let bn = norm::BatchNorm {
                channels,
                positions,
                momentum: *momentum,
                eps: *eps,
            };
            (Op::BatchNorm(bn), input.to_vec())
        }
        LayerSpec::LayerNorm { eps, bias } => {
            check_eps(what, *eps)?;
            (
                Op::LayerNorm(norm::LayerNorm {
                    cells: cells(input),
                    eps: *eps,
                    bias: *bias,
                }),
                input.to_vec(),
            )
        }
    })
}

fn check_eps(what: &str, eps: F32) -> Result<()> {
    if eps.is_finite() && F32::ZERO.ieee_lt(eps) {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "{what}: eps must be finite and > 0, got {eps}"
        )))
    }
}
