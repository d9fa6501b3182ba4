//! The model a configuration describes (`docs/TRAINING.md` sections 4, 11 and 15.4): an MLP of
//! layer sizes or a list of layer objects, with what the state needs of either: its parameter
//! tensors (two per layer that has any, `W b` or `gamma beta`), their names and shapes, its
//! running statistics, and their initial values.

use crate::config::Architecture;
use crate::error::{Error, Result};
use crate::layers::{Network, Op};
use crate::mlp::{uniform, zeros, Init, Layer, Mlp};
use crate::rng::{Domain, Stream};
use crate::softf32::F32;
use crate::state::TensorSpec;

/// A checked model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Model {
    Mlp(Mlp),
    Network(Network),
}

impl Model {
    /// The model `architecture` describes, checked.
    pub fn new(architecture: &Architecture) -> Result<Model> {
        Ok(match architecture {
            Architecture::Sizes(sizes) => Model::Mlp(Mlp::new(sizes.clone())?),
            Architecture::Layers(specs) => Model::Network(Network::new(specs)?),
        })
    }

    /// Whether `init` applies: the seed's pattern to layer sizes only, PyTorch's bounds to layer
    /// objects only (section 15.4).
    pub fn check_init(&self, init: Init) -> Result<()> {
        match (self, init) {
            (Model::Mlp(_), Init::Torch) => Err(Error::Config(
                "init = \"torch\" is for layer objects; layer sizes take seed, he or glorot".into(),
            )),
            (Model::Network(_), Init::Seed) => Err(Error::Config(
                "init = \"seed\" is the seed model's pattern, for layer sizes; layer objects take \
                 torch, he or glorot"
                    .into(),
            )),
            _ => Ok(()),
        }
    }

    /// Layer sizes, inputs first; for layer objects the cells per sample at every layer
    /// boundary (the input's, then each layer's output's).
    pub fn sizes(&self) -> Vec<usize> {
        match self {
            Model::Mlp(mlp) => mlp.sizes().to_vec(),
            Model::Network(net) => std::iter::once(net.input.iter().product())
                .chain(net.layers.iter().map(|l| l.output.iter().product()))
                .collect(),
        }
    }

    /// A sample's shape (`[features]` for an MLP).
    pub fn input_shape(&self) -> Vec<usize> {
        match self {
            Model::Mlp(mlp) => vec![mlp.inputs()],
            Model::Network(net) => net.input.clone(),
        }
    }

    /// Features per sample.
    pub fn inputs(&self) -> usize {
        match self {
            Model::Mlp(mlp) => mlp.inputs(),
            Model::Network(net) => net.input.iter().product(),
        }
    }

    /// The length of the output vector the loss reads.
    pub fn outputs(&self) -> usize {
        match self {
            Model::Mlp(mlp) => mlp.outputs(),
            Model::Network(net) => net.outputs(),
        }
    }

    /// Multiply-adds of one sample's forward pass, roughly: how threads share out samples.
    pub fn work_per_sample(&self) -> usize {
        match self {
            Model::Mlp(mlp) => mlp.parameters(),
            Model::Network(net) => net
                .layers
                .iter()
                .map(|l| match &l.op {
                    Op::Conv(conv) => {
                        conv.window.positions() * conv.window.column() * conv.out_channels
                    }
                    _ => l.output.iter().product(),
                })
                .sum(),
        }
    }

    /// The parameter tensors' names and shapes, two per layer that has parameters, in the
    /// state's order (`W1 b1 W2 b2 ...`; section 15.4's numbering for layer objects).
    pub fn param_specs(&self) -> Vec<[TensorSpec; 2]> {
        match self {
            Model::Mlp(mlp) => (0..mlp.layers())
                .map(|l| {
                    let (outputs, inputs) = mlp.weight_shape(l);
                    let n = l + 1;
                    [
                        (format!("W{n}"), vec![outputs, inputs]),
                        (format!("b{n}"), vec![outputs]),
                    ]
                })
                .collect(),
            Model::Network(net) => numbered(net)
                .filter_map(|(n, layer)| {
                    let (params, _) = layer.tensor_shapes();
                    let [w, b]: [Vec<usize>; 2] = params.try_into().ok()?;
                    let (wn, bn) = match layer.op {
                        Op::Conv(_) => ("W", "b"),
                        _ => ("gamma", "beta"),
                    };
                    Some([(format!("{wn}{n}"), w), (format!("{bn}{n}"), b)])
                })
                .collect(),
        }
    }

    /// The running statistics' names and shapes (`mean{n} var{n}` of every BatchNorm), after
    /// the optimiser's slots in the state.
    pub fn buffer_specs(&self) -> Vec<TensorSpec> {
        match self {
            Model::Mlp(_) => Vec::new(),
            Model::Network(net) => numbered(net)
                .flat_map(|(n, layer)| {
                    let (_, buffers) = layer.tensor_shapes();
                    buffers
                        .into_iter()
                        .zip(["mean", "var"])
                        .map(move |(shape, name)| (format!("{name}{n}"), shape))
                })
                .collect(),
        }
    }

    /// Zero tensors shaped like the parameters (untouched pages until written: see
    /// `mlp::zeros`).
    pub fn zeros(&self) -> Vec<Layer> {
        self.param_specs()
            .iter()
            .map(|[(_, w), (_, b)]| Layer {
                w: zeros(w.iter().product()),
                b: zeros(b.iter().product()),
            })
            .collect()
    }

    /// Checks that `layers` (`what`: a name for messages) are shaped like the parameters: data
    /// that does not fit the run (`Error::Input`).
    pub fn check_shaped(&self, layers: &[Layer], what: &str) -> Result<()> {
        let expected: Vec<(usize, usize)> = self
            .param_specs()
            .iter()
            .map(|[(_, w), (_, b)]| (w.iter().product(), b.iter().product()))
            .collect();
        let actual: Vec<(usize, usize)> = layers.iter().map(|l| (l.w.len(), l.b.len())).collect();
        if actual == expected {
            Ok(())
        } else {
            Err(Error::Input(format!(
                "the {what}'s (weight, bias) sizes {actual:?} do not fit the model {:?}",
                self.sizes()
            )))
        }
    }

    /// The initial parameters and running statistics (sections 4 and 15.4).
    pub fn init(&self, init: Init, seed: i64) -> (Vec<Layer>, Vec<Vec<F32>>) {
        let net = match self {
            Model::Mlp(mlp) => return (mlp.init_params(init, seed), Vec::new()),
            Model::Network(net) => net,
        };
        let mut params = Vec::new();
        for (n, layer) in numbered(net) {
            match &layer.op {
                Op::Conv(conv) => {
                    let w = &conv.window;
                    let fan_in = w.column();
                    let fan_out = conv.out_channels * w.window_cells();
                    let a = init.bound(fan_in, fan_out);
                    let mut stream = Stream::new(seed, Domain::Init, n as u64 - 1);
                    let weights = uniform(&mut stream, conv.out_channels * fan_in, a);
                    let biases = match init {
                        Init::Torch => uniform(&mut stream, conv.out_channels, a),
                        _ => vec![F32::ZERO; conv.out_channels],
                    };
                    params.push(Layer {
                        w: weights,
                        b: biases,
                    });
                }
                Op::BatchNorm(bn) => params.push(Layer {
                    w: vec![F32::ONE; bn.channels],
                    b: vec![F32::ZERO; bn.channels],
                }),
                Op::LayerNorm(ln) => params.push(Layer {
                    w: vec![F32::ONE; ln.cells],
                    b: vec![F32::ZERO; ln.cells],
                }),
                _ => {}
            }
        }
        (params, self.fresh_buffers())
    }

    /// A fresh run's running statistics (section 15.4): `mean{n}` zeros and `var{n}` ones of
    /// every BatchNorm, in [`Model::buffer_specs`]'s order. Constants, whatever the seed and
    /// the initialisation: a run starting from given weights takes them from here.
    pub fn fresh_buffers(&self) -> Vec<Vec<F32>> {
        let Model::Network(net) = self else {
            return Vec::new();
        };
        numbered(net)
            .filter_map(|(_, layer)| match &layer.op {
                Op::BatchNorm(bn) => Some(bn.channels),
                _ => None,
            })
            .flat_map(|channels| [vec![F32::ZERO; channels], vec![F32::ONE; channels]])
            .collect()
    }
}

/// The layers that have tensors, with their numbers `1, 2, ...` (section 15.4).
fn numbered(net: &Network) -> impl Iterator<Item = (usize, &crate::layers::Layer)> {
    net.layers
        .iter()
        .filter(|l| matches!(l.op, Op::Conv(_) | Op::BatchNorm(_) | Op::LayerNorm(_)))
        .enumerate()
        .map(|(i, l)| (i + 1, l))
}
