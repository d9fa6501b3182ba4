//! The model a configuration describes (`docs/TRAINING.md` sections 4, 11 and 15.4): layer sizes
//! (an MLP) or a list of layer objects, computed as a layer network either way, with what the
//! state needs of it: its parameter tensors (two per layer that has any, `W b` or `gamma beta`),
//! their names and shapes, its running statistics, and their initial values.

use crate::error::{Error, Result};
use crate::init::{normal, uniform, Init};
use crate::layers::{LayerSpec, Network, Op, Tokens};
use crate::mlp::Mlp;
use crate::optim::DecayParams;
use crate::params::{zeros, Layer};
use crate::rng::{Domain, Stream};
use crate::softf32::F32;

/// The model a configuration describes: layer sizes (Dense and ReLU, sections 4-5) or a list of
/// layer objects (section 15).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// Layer sizes, inputs first.
    Sizes(Vec<usize>),
    /// Layer objects, `Input` first.
    Layers(Vec<LayerSpec>),
}

/// A tensor's name and shape, in checkpoint order.
pub type TensorSpec = (String, Vec<usize>);

/// A checked model: the layer network every pass computes, and the layer sizes it stands for
/// when it was given as an MLP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    network: Network,
    mlp: Option<Mlp>,
}

impl Model {
    /// The model `architecture` describes, checked.
    pub fn new(architecture: &Architecture) -> Result<Model> {
        Ok(match architecture {
            Architecture::Sizes(sizes) => {
                let mlp = Mlp::new(sizes.clone())?;
                Model {
                    network: mlp.network(),
                    mlp: Some(mlp),
                }
            }
            Architecture::Layers(specs) => Model {
                network: Network::new(specs)?,
                mlp: None,
            },
        })
    }

    /// The layers every pass computes.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// The layer sizes, when the model was given as an MLP.
    pub fn mlp(&self) -> Option<&Mlp> {
        self.mlp.as_ref()
    }

    /// Whether `init` applies: the seed's pattern to layer sizes only, PyTorch's bounds to layer
    /// objects only (section 15.4).
    pub fn check_init(&self, init: Init) -> Result<()> {
        match (&self.mlp, init) {
            (Some(_), Init::Torch) => Err(Error::Config(
                "init = \"torch\" is for layer objects; layer sizes take seed, he or glorot".into(),
            )),
            (None, Init::Seed) => Err(Error::Config(
                "init = \"seed\" is the seed model's pattern, for layer sizes; layer objects take \
                 torch, he or glorot"
                    .into(),
            )),
            _ => Ok(()),
        }
    }

    /// The model as messages name it: an MLP by its sizes.
    pub fn name(&self) -> String {
        match &self.mlp {
            Some(mlp) => format!("the model {:?}", mlp.sizes()),
            // A layer model's sizes (cells per layer) name nothing.
            None => "the model".to_string(),
        }
    }

    /// Layer sizes, inputs first; for layer objects the cells per sample at every layer
    /// boundary (the input's, then each layer's output's).
    pub fn sizes(&self) -> Vec<usize> {
        match &self.mlp {
            Some(mlp) => mlp.sizes().to_vec(),
            None => std::iter::once(self.inputs())
                .chain(
                    self.network
                        .layers
                        .iter()
                        .map(|l| l.output.iter().product()),
                )
                .collect(),
        }
    }

    /// A sample's shape (`[features]` for an MLP).
    pub fn input_shape(&self) -> &[usize] {
        &self.network.input
    }

    /// Features per sample.
    pub fn inputs(&self) -> usize {
        self.network.input.iter().product()
    }

    /// The length of the output vector the loss reads.
    pub fn outputs(&self) -> usize {
        self.network.outputs()
    }

    /// A sequence model's tokens and vocabulary (section 15.8); `None` for every other model.
    pub fn tokens(&self) -> Option<Tokens> {
        self.network.tokens
    }

    /// Whether the model's output is a sequence, scored token by token (section 15.8).
    pub fn per_token(&self) -> bool {
        self.network.tokens.is_some_and(|t| t.per_token)
    }

    /// This model on sequences of `tokens` ids (fewer than its own) where that is the same
    /// model: a layer list (not sizes) whose output is scored token by token, and whose
    /// tensors keep their shapes on the shorter sequence (learned positions keep their table;
    /// a Flatten over the tokens would not). Generation's windows before the context fills run
    /// through it: under causal attention a token's cells are the same bits whatever follows
    /// it, so the rows computed are the full window's.
    pub fn on_fewer_tokens(&self, architecture: &Architecture, tokens: usize) -> Option<Model> {
        let Architecture::Layers(specs) = architecture else {
            return None;
        };
        let mut specs = specs.clone();
        specs[0] = LayerSpec::Input {
            shape: vec![tokens],
        };
        let model = Model::new(&Architecture::Layers(specs)).ok()?;
        let same = model.per_token()
            && self.per_token()
            && model.param_specs() == self.param_specs()
            && model.classes() == self.classes();
        same.then_some(model)
    }

    /// The labels of a sample: one per token of a model whose output is a sequence, else one.
    pub fn labels_per_sample(&self) -> usize {
        match self.network.tokens {
            Some(t) if t.per_token => t.tokens,
            _ => 1,
        }
    }

    /// The outputs each label scores: a token's of a model whose output is a sequence, else
    /// all of them.
    pub fn classes(&self) -> usize {
        self.outputs() / self.labels_per_sample()
    }

    /// Checks that a sequence model's samples `inputs` (rows of its tokens, or one token
    /// `stream`) are token ids: each an integer in `0..vocab` (`Error::Input` naming the
    /// sample, the position and the value). Nothing to check for other models.
    pub fn check_token_ids(&self, inputs: &[F32], stream: bool) -> Result<()> {
        let Some(Tokens { tokens, vocab, .. }) = self.network.tokens else {
            return Ok(());
        };
        // vocab <= 2^24 (checked when the layer was built).
        match inputs
            .iter()
            .position(|&x| x.to_index(vocab as u32).is_none())
        {
            None => Ok(()),
            Some(k) => Err(Error::Input(format!(
                "token {} is {}: a token id is an integer in 0..{vocab} (the Embedding's vocab)",
                match stream {
                    true => format!("{k} of the stream"),
                    false => format!("{} of sample {}", k % tokens, k / tokens),
                },
                f32::from_bits(inputs[k].to_bits())
            ))),
        }
    }

    /// Multiply-adds of one sample's forward pass, roughly: how threads share out samples.
    pub fn work_per_sample(&self) -> usize {
        self.network.work_per_sample()
    }

    /// The parameter tensors' names and shapes per layer that has parameters (two, or one for a
    /// layer without biases), in the state's order (`W1 b1 W2 b2 ...`; section 15.4's
    /// numbering, an MLP's Dense layers numbered as its weight layers).
    pub fn param_specs(&self) -> Vec<Vec<TensorSpec>> {
        numbered(&self.network)
            .filter_map(|(n, layer)| {
                let (params, _) = layer.tensor_shapes();
                let names = match layer.op {
                    Op::Conv(_) => ["W", "b"],
                    Op::Embedding { .. } => ["E", ""],
                    Op::Positional { .. } => ["P", ""],
                    Op::Attention(_) => ["Wqkv", "Wo"],
                    _ => ["gamma", "beta"],
                };
                let specs: Vec<TensorSpec> = names
                    .iter()
                    .zip(params)
                    .map(|(name, shape)| (format!("{name}{n}"), shape))
                    .collect();
                (!specs.is_empty()).then_some(specs)
            })
            .collect()
    }

    /// The running statistics' names and shapes (`mean{n} var{n}` of every BatchNorm), after
    /// the optimiser's slots in the state.
    pub fn buffer_specs(&self) -> Vec<TensorSpec> {
        numbered(&self.network)
            .flat_map(|(n, layer)| {
                let (_, buffers) = layer.tensor_shapes();
                buffers
                    .into_iter()
                    .zip(["mean", "var"])
                    .map(move |(shape, name)| (format!("{name}{n}"), shape))
            })
            .collect()
    }

    /// Per layer that has parameters (as [`Model::param_specs`]), whether weight decay applies
    /// to each of its two tensors under `rule` (a missing tensor has no cells to decay): by
    /// kind, weight matrices and tables (`W`, `Wqkv`, `Wo`, `E`, `P`) being weights, biases and
    /// normalisations' `gamma`, `beta` not.
    pub fn decayed_tensors(&self, rule: DecayParams) -> Vec<[bool; 2]> {
        numbered(&self.network)
            .map(|(_, layer)| {
                let weights = match layer.op {
                    Op::Attention(_) => [true, true],
                    Op::Conv(_) | Op::Embedding { .. } | Op::Positional { .. } => [true, false],
                    _ => [false, false],
                };
                weights.map(|weight| rule.decays(weight))
            })
            .collect()
    }

    /// Zero tensors shaped like the parameters (untouched pages until written: see
    /// `params::zeros`).
    pub fn zeros(&self) -> Vec<Layer> {
        self.param_specs()
            .iter()
            .map(|specs| {
                let mut cells = specs.iter().map(|(_, shape)| shape.iter().product());
                Layer {
                    w: zeros(cells.next().unwrap_or(0)),
                    b: zeros(cells.next().unwrap_or(0)),
                }
            })
            .collect()
    }

    /// Checks that `layers` (`what`: a name for messages) are shaped like the parameters: data
    /// that does not fit the run (`Error::Input`).
    pub fn check_shaped(&self, layers: &[Layer], what: &str) -> Result<()> {
        let expected: Vec<(usize, usize)> = self
            .zeros()
            .iter()
            .map(|l| (l.w.len(), l.b.len()))
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

    /// The initial parameters and running statistics (sections 4 and 15.4): the seed's pattern
    /// for an MLP with `init = "seed"`, else each layer's by `init` (an MLP's Dense layers by
    /// section 4, which section 15.4 is for them).
    pub fn init(&self, init: Init, seed: i64) -> (Vec<Layer>, Vec<Vec<F32>>) {
        if let (Init::Seed, Some(mlp)) = (init, &self.mlp) {
            return (mlp.seed_params(seed), self.fresh_buffers());
        }
        let mut params = Vec::new();
        for (n, layer) in numbered(&self.network) {
            match &layer.op {
                Op::Conv(conv) => {
                    let w = &conv.window;
                    let fan_in = w.column();
                    let fan_out = conv.out_channels * w.window_cells();
                    let mut stream = Stream::new(seed, Domain::Init, n as u64 - 1);
                    let cells = conv.out_channels * fan_in;
                    let (weights, biases) = match layer.std {
                        Some((std, _)) => (normal(&mut stream, cells, std), None),
                        None => {
                            let a = init.bound(fan_in, fan_out);
                            let weights = uniform(&mut stream, cells, a);
                            let torch = init == Init::Torch;
                            let biases = torch.then(|| uniform(&mut stream, conv.out_channels, a));
                            (weights, biases)
                        }
                    };
                    let b = match (conv.bias, biases) {
                        (false, _) => vec![],
                        (true, Some(biases)) => biases,
                        (true, None) => vec![F32::ZERO; conv.out_channels],
                    };
                    params.push(Layer { w: weights, b });
                }
                Op::Embedding { .. } | Op::Positional { .. } => {
                    let (shapes, _) = layer.tensor_shapes();
                    let cells = shapes[0].iter().product();
                    let mut stream = Stream::new(seed, Domain::Init, n as u64 - 1);
                    // PyTorch's nn.Embedding draws N(0, 1) unless given a std.
                    let std = layer.std.map_or(F32::ONE, |(std, _)| std);
                    params.push(Layer {
                        w: normal(&mut stream, cells, std),
                        b: vec![],
                    });
                }
                Op::Attention(a) => {
                    let d = a.width;
                    let mut stream = Stream::new(seed, Domain::Init, n as u64 - 1);
                    let (wqkv, wo) = match layer.std {
                        Some((std, proj_std)) => (
                            normal(&mut stream, 3 * d * d, std),
                            normal(&mut stream, d * d, proj_std),
                        ),
                        // As two Dense layers without biases: D to 3D, then D to D.
                        None => (
                            uniform(&mut stream, 3 * d * d, init.bound(d, 3 * d)),
                            uniform(&mut stream, d * d, init.bound(d, d)),
                        ),
                    };
                    params.push(Layer { w: wqkv, b: wo });
                }
                Op::BatchNorm(bn) => params.push(Layer {
                    w: vec![F32::ONE; bn.channels],
                    b: vec![F32::ZERO; bn.channels],
                }),
                Op::LayerNorm(ln) => params.push(Layer {
                    w: vec![F32::ONE; ln.cells],
                    b: vec![F32::ZERO; if ln.bias { ln.cells } else { 0 }],
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
        numbered(&self.network)
            .filter_map(|(_, layer)| match &layer.op {
                Op::BatchNorm(bn) => Some(bn.channels),
                _ => None,
            })
            .flat_map(|channels| [vec![F32::ZERO; channels], vec![F32::ONE; channels]])
            .collect()
    }
}

/// One layer of a layer table: what `nxrs.layers.summary` shows of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerRow {
    /// The layer's position in the list (`Input` is 0, so rows start at 1).
    pub position: usize,
    /// PyTorch's name of the layer.
    pub type_name: String,
    /// How many Residuals the layer is inside (0 for a layer of the list itself).
    pub depth: usize,
    /// The shape of one sample going in.
    pub input: Vec<usize>,
    /// The shape of one sample coming out.
    pub output: Vec<usize>,
    /// The layer's tensors, names and shapes, in the state's order: parameters, then running
    /// statistics (section 15.4's numbering).
    pub tensors: Vec<TensorSpec>,
}

/// The checked layer list `specs` (`Input` first), one row per layer after `Input`: the
/// model's network with the tensors each layer owns in the state.
pub fn layer_table(specs: &[LayerSpec]) -> Result<Vec<LayerRow>> {
    let model = Model::new(&Architecture::Layers(specs.to_vec()))?;
    let mut params = model.param_specs().into_iter();
    let mut buffers = model.buffer_specs().into_iter();
    // A Residual's add is no layer of the list: the Residual's row is its fork's.
    let rows = model
        .network
        .layers
        .iter()
        .filter(|layer| !matches!(layer.op, Op::Add { .. }));
    Ok(rows
        .zip(depth_first(&specs[1..], 0))
        .map(|(layer, (spec, depth))| {
            let (p, b) = layer.tensor_shapes();
            // A layer with parameters owns the next pair, and one running statistic per
            // buffer shape it has.
            let owned = if p.is_empty() { None } else { params.next() };
            let tensors = owned
                .into_iter()
                .flatten()
                .chain(b.iter().filter_map(|_| buffers.next()))
                .collect();
            LayerRow {
                position: layer.position,
                type_name: spec.type_name(),
                depth,
                input: layer.input.clone(),
                output: layer.output.clone(),
                tensors,
            }
        })
        .collect())
}

/// Every layer of `specs` (a list inside `depth` Residuals), nested ones included, depth first (a
/// Residual before its branch's layers) with its depth: the order of the network's layers
/// (section 15.7).
fn depth_first(specs: &[LayerSpec], depth: usize) -> Vec<(&LayerSpec, usize)> {
    specs
        .iter()
        .flat_map(|spec| {
            let branch = match spec {
                LayerSpec::Residual { layers } => depth_first(layers, depth + 1),
                _ => vec![],
            };
            core::iter::once((spec, depth)).chain(branch)
        })
        .collect()
}

/// The layers that have tensors, with their numbers `1, 2, ...` (section 15.4).
fn numbered(net: &Network) -> impl Iterator<Item = (usize, &crate::layers::Layer)> {
    net.layers
        .iter()
        .filter(|l| !l.tensor_shapes().0.is_empty())
        .enumerate()
        .map(|(i, l)| (i + 1, l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_init_stays_in_its_range() {
        let mlp = Model::new(&Architecture::Sizes(vec![6, 50])).unwrap();
        let a = (F32::from_i32(6) / F32::from_i32(6)).sqrt(); // He: sqrt(6 / 6) = 1
        let w = |init, seed| mlp.init(init, seed).0.remove(0).w;
        let he = w(Init::He, 3);
        assert!(he.iter().all(|&x| x.ieee_lt(a) && (-a).ieee_le(x)));
        assert_ne!(he, w(Init::He, 4));
        assert_ne!(he, w(Init::Glorot, 3));
    }

    #[test]
    fn a_layer_table_gives_each_layer_its_own_tensors() {
        let specs: Vec<LayerSpec> = [
            r#"{"type": "Input", "shape": [1, 4, 4]}"#,
            r#"{"type": "Conv2d", "out_channels": 2, "kernel_size": 3}"#,
            r#"{"type": "BatchNorm2d"}"#,
            r#"{"type": "ReLU"}"#,
            r#"{"type": "Flatten"}"#,
            r#"{"type": "Dense", "units": 3}"#,
        ]
        .iter()
        .enumerate()
        .map(|(i, text)| LayerSpec::from_json_text(text, i).unwrap())
        .collect();
        let rows = layer_table(&specs).unwrap();
        type Shown<'a> = (usize, &'a str, Vec<usize>, Vec<usize>, Vec<String>);
        let shown: Vec<Shown> = rows
            .iter()
            .map(|r| {
                let names = r.tensors.iter().map(|(n, s)| format!("{n}{s:?}")).collect();
                (
                    r.position,
                    r.type_name.as_str(),
                    r.input.clone(),
                    r.output.clone(),
                    names,
                )
            })
            .collect();
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shown,
            vec![
                (
                    1,
                    "Conv2d",
                    vec![1, 4, 4],
                    vec![2, 2, 2],
                    names(&["W1[2, 1, 3, 3]", "b1[2]"])
                ),
                (
                    2,
                    "BatchNorm2d",
                    vec![2, 2, 2],
                    vec![2, 2, 2],
                    names(&["gamma2[2]", "beta2[2]", "mean2[2]", "var2[2]"])
                ),
                (3, "ReLU", vec![2, 2, 2], vec![2, 2, 2], vec![]),
                (4, "Flatten", vec![2, 2, 2], vec![8], vec![]),
                (5, "Dense", vec![8], vec![3], names(&["W3[3, 8]", "b3[3]"])),
            ]
        );
    }
}
