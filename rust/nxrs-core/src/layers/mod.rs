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

pub mod conv;
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
use crate::softf32::F32;
use conv::Conv;
use window::Window;

/// A layer as a user gives it (section 15.1's table), before its input shape is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerSpec {
    Input {
        shape: Vec<usize>,
    },
    /// `Dense(units, bias=False)` has no `b` (section 15.7).
    Dense {
        units: usize,
        bias: bool,
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
}

/// A layer of a checked list: its kernels' operation and both shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// The layer's position in the list (`Input` is 0).
    pub position: usize,
    pub op: Op,
    pub input: Vec<usize>,
    pub output: Vec<usize>,
}

impl Layer {
    /// The shapes of the layer's tensors in the state's order (section 15.4): `W`, `b` or
    /// `gamma`, `beta` (parameters; the second absent in a layer without biases), then `mean`,
    /// `var` (BatchNorm's running statistics).
    pub fn tensor_shapes(&self) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
        match &self.op {
            Op::Conv(conv) => {
                let w = &conv.window;
                let mut shape = vec![conv.out_channels, w.channels];
                match self.input.len() {
                    1 => {}
                    2 => shape.push(w.kernel[1]),
                    _ => shape.extend(w.kernel),
                }
                let b = conv.bias.then(|| vec![conv.out_channels]);
                ([Some(shape), b].into_iter().flatten().collect(), vec![])
            }
            Op::BatchNorm(bn) => {
                let c = vec![bn.channels];
                (vec![c.clone(), c.clone()], vec![c.clone(), c])
            }
            Op::LayerNorm(ln) => {
                let beta = ln.bias.then(|| self.input.clone());
                (
                    [Some(self.input.clone()), beta]
                        .into_iter()
                        .flatten()
                        .collect(),
                    vec![],
                )
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
        };
        let current = list.resolve(rest, shape.clone())?;
        if current.len() != 1 {
            return Err(Error::Config(format!(
                "the last layer's output must be flat (the loss reads a vector), got shape \
                 {current:?}: add Flatten() and a Dense layer"
            )));
        }
        Ok(Network {
            input: shape.clone(),
            layers: list.layers,
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
/// add), the last position given (depth first, section 15.7) and the parameter cells so far.
struct Resolved {
    layers: Vec<Layer>,
    position: usize,
    parameters: usize,
}

impl Resolved {
    /// Resolves `specs` on an input of shape `current`, appending their layers: their output
    /// shape.
    fn resolve(&mut self, specs: &[LayerSpec], mut current: Vec<usize>) -> Result<Vec<usize>> {
        for spec in specs {
            self.position += 1;
            let position = self.position;
            let what = format!("layer {position} ({})", spec.type_name());
            if let LayerSpec::Residual { layers } = spec {
                current = self.residual(&what, layers, current)?;
                continue;
            }
            let (op, output) = resolve(&what, spec, &current)?;
            check_shape(&what, &output)?;
            let layer = Layer {
                position,
                op,
                input: current,
                output: output.clone(),
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

    /// A Residual (`what`) of `branch` on an input of shape `input`: a fork, the branch, an add.
    fn residual(
        &mut self,
        what: &str,
        branch: &[LayerSpec],
        input: Vec<usize>,
    ) -> Result<Vec<usize>> {
        if branch.is_empty() {
            return Err(Error::Config(format!(
                "{what}: a residual branch needs at least one layer"
            )));
        }
        let position = self.position;
        let fork = self.layers.len();
        self.layers.push(Layer {
            position,
            op: Op::Fork { add: 0 }, // the add's index, known once the branch is resolved
            input: input.clone(),
            output: input.clone(),
        });
        let output = self.resolve(branch, input.clone())?;
        if output != input {
            return Err(Error::Config(format!(
                "{what}: a residual branch must keep its input's shape {input:?}, but gives \
                 {output:?}"
            )));
        }
        let add = self.layers.len();
        self.layers[fork].op = Op::Fork { add };
        self.layers.push(Layer {
            position,
            op: Op::Add { fork },
            input: input.clone(),
            output: input.clone(),
        });
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
    /// PyTorch's name of the layer, for messages.
    pub fn type_name(&self) -> String {
        let d = |n: usize| if n == 2 { "2d" } else { "1d" };
        match self {
            LayerSpec::Input { .. } => "Input".into(),
            LayerSpec::Dense { .. } => "Dense".into(),
            LayerSpec::GELU => "GELU".into(),
            LayerSpec::Residual { .. } => "Residual".into(),
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
        LayerSpec::Dense { units, bias } => {
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
        LayerSpec::Residual { .. } => unreachable!("Network::new resolves a Residual's list"),
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
