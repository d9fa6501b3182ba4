//! The training state (`docs/TRAINING.md`, section 11): everything a run needs to continue
//! exactly, what a checkpoint holds and what the full-state hash covers, with its tensors' names
//! and shapes.

use crate::error::{Error, Result};
use crate::model::{Model, TensorSpec};
use crate::params::Layer;
use crate::softf32::F32;

/// Parameters, optimiser slots and counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainState {
    /// `W1 b1`, `W2 b2`, ...
    pub params: Vec<Layer>,
    /// First moments (Adam, AdamW) or momentum buffers (SGD), shaped like the parameters.
    pub m: Vec<Layer>,
    /// Second moments (Adam, AdamW); empty for SGD.
    pub v: Vec<Layer>,
    /// Running statistics (`mean{n} var{n}` of every BatchNorm, section 15.4): not parameters.
    pub buffers: Vec<Vec<F32>>,
    /// Completed epochs.
    pub epoch: i64,
    /// Batches of the current epoch already done.
    pub batch: i64,
    /// Optimiser steps in total.
    pub step: i64,
    /// `beta1^t` and `beta2^t` after `t` steps (Adam, AdamW; 1 for SGD).
    pub b1t: F32,
    pub b2t: F32,
}

/// The scalars' names, in the order of the hash and of checkpoints.
pub const SCALAR_NAMES: [&str; 5] = ["epoch", "b1t_bits", "b2t_bits", "step", "batch"];

impl TrainState {
    /// A state at the start of a run: `params` and `buffers`, zero slots, counters 0, powers 1.
    pub fn fresh(params: Vec<Layer>, buffers: Vec<Vec<F32>>, second_moments: bool) -> TrainState {
        let zeros = || params.iter().map(zeroed_like).collect::<Vec<_>>();
        TrainState {
            m: zeros(),
            v: if second_moments { zeros() } else { Vec::new() },
            params,
            buffers,
            epoch: 0,
            batch: 0,
            step: 0,
            b1t: F32::ONE,
            b2t: F32::ONE,
        }
    }

    /// A state at the start of a run of `model` from given parameters (weights exported by
    /// another framework, or by nxrs): `tensors` are `W1 b1 W2 b2 ...` with their shapes, in
    /// [`TrainState::layout`]'s order and shapes, every value finite. `buffers`, when given, are
    /// the running statistics (`mean{n} var{n}` of every BatchNorm, in
    /// [`Model::buffer_specs`]'s order and shapes, finite) under the same rules; else they are
    /// a fresh run's, as is the rest. `Error::Input` names the first tensor that does not fit.
    pub fn starting_from(
        model: &Model,
        tensors: Vec<(Vec<F32>, Vec<usize>)>,
        buffers: Option<Vec<(Vec<F32>, Vec<usize>)>>,
        second_moments: bool,
    ) -> Result<TrainState> {
        let specs = model.param_specs();
        let layout: Vec<TensorSpec> = specs.iter().flatten().cloned().collect();
        let named = model.name();
        let mut cells = fitting(tensors, &layout, "parameter", &named)?.into_iter();
        let params = specs
            .iter()
            .map(|layer| Layer {
                w: cells.next().expect("a layer's first tensor"),
                b: match layer.len() {
                    2 => cells.next().expect("a layer's second tensor"),
                    _ => vec![], // a layer without biases
                },
            })
            .collect();
        let buffers = match buffers {
            Some(given) => {
                let specs = model.buffer_specs();
                let cells = fitting(given, &specs, "running statistics", &named)?;
                nonnegative_variances(&specs, &cells)?;
                cells
            }
            None => model.fresh_buffers(),
        };
        Ok(TrainState::fresh(params, buffers, second_moments))
    }

    /// What [`TrainState::starting_from`] calls given parameter tensor `k` (`W1 b1 W2 b2 ...`,
    /// counted from 0) and how many dimensions it must have, for reading it: the model's
    /// tensor's name and rank, or for one beyond the model's count an MLP's (`W{l}` of rank 2,
    /// `b{l}` of rank 1), which the count check then refuses.
    pub fn starting_param(model: &Model, k: usize) -> (String, usize) {
        let params: Vec<TensorSpec> = model.param_specs().into_iter().flatten().collect();
        let (prefix, rank) = if k.is_multiple_of(2) {
            ("W", 2)
        } else {
            ("b", 1)
        };
        given_spec(&params, k, || (format!("{prefix}{}", k / 2 + 1), rank))
    }

    /// What [`TrainState::starting_from`] calls given running statistic `k` and how many
    /// dimensions it must have: the model's tensor's name and rank, or `buffers[k]` of rank 1
    /// beyond the model's count.
    pub fn starting_buffer(model: &Model, k: usize) -> (String, usize) {
        given_spec(&model.buffer_specs(), k, || (format!("buffers[{k}]"), 1))
    }

    /// The names and shapes of the tensors of a state of `model` (with second moments or not):
    /// `W1 b1 W2 b2 ...`, then per parameter `m<p> v<p>` (the seed's `mW1 vW1 mb1 vb1 ...`),
    /// or `m<p>` alone without second moments, then the running statistics.
    pub fn layout(model: &Model, second_moments: bool) -> Vec<TensorSpec> {
        let params: Vec<TensorSpec> = model.param_specs().into_iter().flatten().collect();
        let prefixes: &[&str] = if second_moments { &["m", "v"] } else { &["m"] };
        let slots: Vec<TensorSpec> = params
            .iter()
            .flat_map(|(name, shape)| {
                prefixes
                    .iter()
                    .map(move |prefix| (format!("{prefix}{name}"), shape.clone()))
            })
            .collect();
        params
            .into_iter()
            .chain(slots)
            .chain(model.buffer_specs())
            .collect()
    }

    /// The tensors' cells in [`TrainState::layout`] order.
    pub fn tensors(&self) -> Vec<&[F32]> {
        let params = self.params.iter().flat_map(Layer::tensors);
        let m = self.m.iter().flat_map(Layer::tensors);
        let slots: Vec<&[F32]> = if self.v.is_empty() {
            m.collect()
        } else {
            let v = self.v.iter().flat_map(Layer::tensors);
            m.zip(v).flat_map(|(m, v)| [m, v]).collect()
        };
        let buffers = self.buffers.iter().map(|b| &b[..]);
        params.chain(slots).chain(buffers).collect()
    }

    /// The tensors of [`TrainState::tensors`], mutable, in the same order.
    pub fn tensors_mut(&mut self) -> Vec<&mut Vec<F32>> {
        let params = self.params.iter_mut().flat_map(Layer::tensors_mut);
        let m = self.m.iter_mut().flat_map(Layer::tensors_mut);
        let slots: Vec<&mut Vec<F32>> = if self.v.is_empty() {
            m.collect()
        } else {
            let v = self.v.iter_mut().flat_map(Layer::tensors_mut);
            m.zip(v).flat_map(|(m, v)| [m, v]).collect()
        };
        params.chain(slots).chain(self.buffers.iter_mut()).collect()
    }

    /// The scalars in [`SCALAR_NAMES`] order (binary32 values as their bit patterns).
    pub fn scalars(&self) -> [i64; 5] {
        [
            self.epoch,
            i64::from(self.b1t.to_bits()),
            i64::from(self.b2t.to_bits()),
            self.step,
            self.batch,
        ]
    }

    /// Sets the scalars from [`TrainState::scalars`]'s encoding, checking each is in range.
    pub fn set_scalars(&mut self, scalars: [i64; 5]) -> Result<()> {
        check_scalars(scalars)?;
        let [epoch, b1t, b2t, step, batch] = scalars;
        // In range: checked above.
        self.b1t = F32::from_bits(b1t as u32);
        self.b2t = F32::from_bits(b2t as u32);
        (self.epoch, self.step, self.batch) = (epoch, step, batch);
        Ok(())
    }

    /// Checks that the state has the tensors of [`TrainState::layout`] for `model`.
    pub fn check_fits(&self, model: &Model, second_moments: bool) -> Result<()> {
        let expected: Vec<usize> = TrainState::layout(model, second_moments)
            .iter()
            .map(|(_, shape)| shape.iter().product())
            .collect();
        let actual: Vec<usize> = self.tensors().iter().map(|t| t.len()).collect();
        if actual != expected {
            return Err(Error::Mismatch(format!(
                "tensor sizes {actual:?} do not fit the model's {expected:?}"
            )));
        }
        Ok(())
    }
}

/// Tensor `k` of `specs` as a name and rank, or `beyond` for one past the model's count.
fn given_spec(
    specs: &[TensorSpec],
    k: usize,
    beyond: impl FnOnce() -> (String, usize),
) -> (String, usize) {
    specs
        .get(k)
        .map_or_else(beyond, |(name, shape)| (name.clone(), shape.len()))
}

/// The cells of `tensors` when they are `layout`'s tensors (`what` they are: "parameter", ...)
/// in its order and shapes, every value finite; else `Error::Input` naming the first that is
/// not, and the model as `model` says: the one check of tensors given from outside
/// (`TrainState::starting_from`).
fn fitting(
    tensors: Vec<(Vec<F32>, Vec<usize>)>,
    layout: &[TensorSpec],
    what: &str,
    model: &str,
) -> Result<Vec<Vec<F32>>> {
    if tensors.len() != layout.len() {
        let names: Vec<&str> = layout.iter().map(|(name, _)| name.as_str()).collect();
        return Err(Error::Input(format!(
            "{} {what} tensors given, {model} has {} ({})",
            tensors.len(),
            names.len(),
            names.join(" ")
        )));
    }
    let mut cells = Vec::with_capacity(tensors.len());
    for ((values, shape), (name, expected)) in tensors.into_iter().zip(layout) {
        if &shape != expected {
            return Err(Error::Input(format!(
                "{name} has shape {shape:?}, {model} needs {expected:?}"
            )));
        }
        if let Some(k) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::Input(format!(
                "{name} value {k} (row-major) is {}: {what} values must be finite",
                f32::from_bits(values[k].to_bits())
            )));
        }
        cells.push(values);
    }
    Ok(cells)
}

/// Checks that no running variance (`var{n}` of `specs`, the buffers' names) is below zero:
/// evaluation takes its square root, so one would make every prediction NaN. It is refused
/// as a value that is not finite is (`fitting`); -0.0 is a zero.
fn nonnegative_variances(specs: &[TensorSpec], buffers: &[Vec<F32>]) -> Result<()> {
    let variances = specs
        .iter()
        .zip(buffers)
        .filter(|((name, _), _)| name.starts_with("var"));
    for ((name, _), values) in variances {
        // Above -0.0's bits: the sign bit and a magnitude, a negative number.
        if let Some(k) = values.iter().position(|v| v.to_bits() > 0x8000_0000) {
            return Err(Error::Input(format!(
                "{name} value {k} (row-major) is {}: a running variance is never negative",
                f32::from_bits(values[k].to_bits())
            )));
        }
    }
    Ok(())
}

/// Checks scalars in [`TrainState::scalars`]'s encoding (as a checkpoint holds them): the
/// counters `>= 0`, the powers binary32 bit patterns.
pub fn check_scalars([epoch, b1t, b2t, step, batch]: [i64; 5]) -> Result<()> {
    for (name, value) in [("epoch", epoch), ("step", step), ("batch", batch)] {
        if value < 0 {
            return Err(Error::Header(format!(
                "scalar {name} = {value} is negative"
            )));
        }
    }
    for (name, value) in [("b1t_bits", b1t), ("b2t_bits", b2t)] {
        if u32::try_from(value).is_err() {
            return Err(Error::Header(format!(
                "scalar {name} = {value} is not a binary32 bit pattern"
            )));
        }
    }
    Ok(())
}

/// Zeros shaped like `layer`, allocated zeroed (`calloc`) rather than filled: a large one is
/// fresh pages that cost nothing until first written (`vec![F32::ZERO; n]` would write every
/// cell, F32 not being a primitive that `vec!` knows to `calloc`).
pub fn zeroed_like(layer: &Layer) -> Layer {
    Layer {
        w: bytemuck::zeroed_vec(layer.w.len()),
        b: bytemuck::zeroed_vec(layer.b.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::LayerSpec;
    use crate::model::Architecture;

    fn mlp(sizes: &[usize]) -> Model {
        Model::new(&Architecture::Sizes(sizes.to_vec())).unwrap()
    }

    #[test]
    fn seed_tensor_names_in_checkpoint_order() {
        let mlp = mlp(&[6, 10, 4]);
        let names: Vec<String> = TrainState::layout(&mlp, true)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names.join(" "),
            "W1 b1 W2 b2 mW1 vW1 mb1 vb1 mW2 vW2 mb2 vb2"
        );
        let sgd: Vec<String> = TrainState::layout(&mlp, false)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(sgd.join(" "), "W1 b1 W2 b2 mW1 mb1 mW2 mb2");
    }

    #[test]
    fn given_tensors_are_read_by_the_models_names_and_ranks() {
        let names = |model: &Model, of: fn(&Model, usize) -> (String, usize), n: usize| {
            (0..n).map(|k| of(model, k)).collect::<Vec<_>>()
        };
        let owned = |v: &[(&str, usize)]| {
            v.iter()
                .map(|&(n, r)| (n.to_string(), r))
                .collect::<Vec<_>>()
        };
        // Beyond an MLP's count, more of an MLP's names.
        let sizes = mlp(&[3, 2]);
        assert_eq!(
            names(&sizes, TrainState::starting_param, 4),
            owned(&[("W1", 2), ("b1", 1), ("W2", 2), ("b2", 1)])
        );
        assert_eq!(
            names(&sizes, TrainState::starting_buffer, 1),
            owned(&[("buffers[0]", 1)])
        );
        let specs: Vec<LayerSpec> = [
            r#"{"type": "Input", "shape": [1, 4, 4]}"#,
            r#"{"type": "Conv2d", "out_channels": 2, "kernel_size": 3}"#,
            r#"{"type": "BatchNorm2d"}"#,
            r#"{"type": "Flatten"}"#,
            r#"{"type": "Dense", "units": 3}"#,
        ]
        .iter()
        .enumerate()
        .map(|(i, text)| LayerSpec::from_json_text(text, i).unwrap())
        .collect();
        let layers = Model::new(&Architecture::Layers(specs)).unwrap();
        assert_eq!(
            names(&layers, TrainState::starting_param, 7),
            owned(&[
                ("W1", 4),
                ("b1", 1),
                ("gamma2", 1),
                ("beta2", 1),
                ("W3", 2),
                ("b3", 1),
                ("W4", 2)
            ])
        );
        assert_eq!(
            names(&layers, TrainState::starting_buffer, 3),
            owned(&[("mean2", 1), ("var2", 1), ("buffers[2]", 1)])
        );
    }

    #[test]
    fn starting_from_checks_shapes_and_values() {
        let mlp = mlp(&[3, 2]);
        let w: Vec<F32> = (0..6).map(F32::from_i64).collect();
        let b = vec![F32::ONE, F32::ZERO];
        let good = vec![(w.clone(), vec![2, 3]), (b.clone(), vec![2])];
        let state = TrainState::starting_from(&mlp, good, None, true).unwrap();
        assert_eq!(
            state.params,
            vec![Layer {
                w: w.clone(),
                b: b.clone()
            }]
        );
        assert_eq!(state, {
            let mut fresh = TrainState::fresh(mlp.zeros(), Vec::new(), true);
            fresh.params = state.params.clone();
            fresh
        });
        let transposed = vec![(w.clone(), vec![3, 2]), (b.clone(), vec![2])];
        let err = TrainState::starting_from(&mlp, transposed, None, true).unwrap_err();
        assert!(
            matches!(&err, Error::Input(m) if m.starts_with("W1 has shape [3, 2]")),
            "{err}"
        );
        let missing = vec![(w.clone(), vec![2, 3])];
        assert!(TrainState::starting_from(&mlp, missing, None, true).is_err());
        let mut nan = b.clone();
        nan[1] = F32::from_bits(0x7FC0_0000);
        let err =
            TrainState::starting_from(&mlp, vec![(w, vec![2, 3]), (nan, vec![2])], None, false)
                .unwrap_err();
        assert!(
            matches!(&err, Error::Input(m) if m.starts_with("b1 value 1")),
            "{err}"
        );
    }

    #[test]
    fn starting_from_takes_running_statistics_under_the_same_checks() {
        use crate::layers::LayerSpec;
        let specs: Vec<LayerSpec> = [
            r#"{"type": "Input", "shape": [3]}"#,
            r#"{"type": "BatchNorm1d"}"#,
            r#"{"type": "Dense", "units": 2}"#,
        ]
        .iter()
        .enumerate()
        .map(|(i, text)| LayerSpec::from_json_text(text, i).unwrap())
        .collect();
        let net = Model::new(&Architecture::Layers(specs)).unwrap();
        let params = || {
            vec![
                (vec![F32::ONE; 3], vec![3]),
                (vec![F32::ZERO; 3], vec![3]),
                (vec![F32::ONE; 6], vec![2, 3]),
                (vec![F32::ZERO; 2], vec![2]),
            ]
        };
        let two = F32::from_i64(2);
        let stats = vec![(vec![two; 3], vec![3]), (vec![F32::ONE; 3], vec![3])];
        let state = TrainState::starting_from(&net, params(), Some(stats), true).unwrap();
        assert_eq!(state.buffers, vec![vec![two; 3], vec![F32::ONE; 3]]);
        let fresh = TrainState::starting_from(&net, params(), None, true).unwrap();
        assert_eq!(fresh.buffers, vec![vec![F32::ZERO; 3], vec![F32::ONE; 3]]);
        let one = vec![(vec![two; 3], vec![3])];
        let err = TrainState::starting_from(&net, params(), Some(one), true).unwrap_err();
        assert!(
            matches!(&err, Error::Input(m) if m.starts_with("1 running statistics tensors given, the model has 2 (mean1 var1)")),
            "{err}"
        );
        let mut inf = vec![F32::ONE; 3];
        inf[1] = F32::from_bits(0x7F80_0000);
        let bad = vec![(vec![two; 3], vec![3]), (inf, vec![3])];
        let err = TrainState::starting_from(&net, params(), Some(bad), true).unwrap_err();
        assert!(
            matches!(&err, Error::Input(m) if m.starts_with("var1 value 1")),
            "{err}"
        );
        // A negative variance is refused, a negative mean and a variance of -0.0 are not.
        let minus = |bits: u32| F32::from_bits(bits);
        let negative = vec![
            (vec![minus(0xBF80_0000); 3], vec![3]),
            (vec![F32::ONE, F32::ONE, minus(0xBF00_0000)], vec![3]),
        ];
        let err = TrainState::starting_from(&net, params(), Some(negative), true).unwrap_err();
        assert!(
            matches!(&err, Error::Input(m) if m.starts_with("var1 value 2 (row-major) is -0.5: a running variance is never negative")),
            "{err}"
        );
        let zero = vec![
            (vec![two; 3], vec![3]),
            (vec![minus(0x8000_0000); 3], vec![3]),
        ];
        assert!(TrainState::starting_from(&net, params(), Some(zero), true).is_ok());
    }

    #[test]
    fn tensors_follow_the_layout() {
        let mlp = mlp(&[3, 2]);
        let (params, buffers) = mlp.init(crate::init::Init::Seed, 1);
        let mut state = TrainState::fresh(params, buffers, true);
        state.m[0].b[1] = F32::ONE;
        let layout = TrainState::layout(&mlp, true);
        let tensors = state.tensors();
        assert_eq!(tensors.len(), layout.len());
        let mb1 = layout.iter().position(|(n, _)| n == "mb1").unwrap();
        assert_eq!(tensors[mb1], &[F32::ZERO, F32::ONE]);
        assert!(state.check_fits(&mlp, true).is_ok());
        assert!(state.check_fits(&mlp, false).is_err());
    }
}
