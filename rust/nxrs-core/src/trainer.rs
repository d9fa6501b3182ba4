//! The training state and the trainer that advances it, step by step, as the seed's `train_run`.

use crate::adam::AdamConfig;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::hash;
use crate::mlp::{Mlp, Scratch};
use crate::nxck::tensors;
use crate::softf32::F32;

/// What a [`Trainer`] is built from: the layer sizes and Adam's hyperparameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainerConfig {
    pub sizes: Vec<usize>,
    pub adam: AdamConfig,
}

impl TrainerConfig {
    /// The seed's model `[6, 10, 4]` with the seed's Adam hyperparameters.
    pub fn seed_model() -> TrainerConfig {
        TrainerConfig {
            sizes: Mlp::seed_model().sizes().to_vec(),
            adam: AdamConfig::seed(),
        }
    }
}

/// Everything a run needs to continue exactly: the parameters, Adam's moments, the epoch and
/// the running bias-correction powers. This is what a checkpoint holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainState {
    /// `W1, b1, W2, b2, ...`
    pub params: Vec<Vec<F32>>,
    /// Adam's first and second moments, one tensor per parameter tensor.
    pub m: Vec<Vec<F32>>,
    pub v: Vec<Vec<F32>>,
    /// Completed epochs (the seed's `scalars[0]`).
    pub epoch: i64,
    /// `beta1^t` and `beta2^t` after `t` steps (the seed's `scalars[1]`, `scalars[2]`).
    pub b1t: F32,
    pub b2t: F32,
}

impl TrainState {
    /// A state at the seed's starting point: `params`, zero moments, epoch 0, powers 1.
    pub fn fresh(params: Vec<Vec<F32>>) -> TrainState {
        TrainState {
            m: zeroed_like(&params),
            v: zeroed_like(&params),
            params,
            epoch: 0,
            b1t: F32::ONE,
            b2t: F32::ONE,
        }
    }

    /// All tensors in checkpoint order with their names:
    /// `W1 b1 W2 b2 ... mW1 vW1 mb1 vb1 mW2 vW2 ...` (the seed's 12 buffers for its model).
    pub fn tensors(&self) -> Vec<(String, &[F32])> {
        let names = tensor_names(self.params.len());
        let moments = self
            .m
            .iter()
            .zip(&self.v)
            .flat_map(|(m, v)| [m.as_slice(), v.as_slice()]);
        let cells = self.params.iter().map(Vec::as_slice).chain(moments);
        names.into_iter().zip(cells).collect()
    }

    /// The tensors of [`TrainState::tensors`], mutable, in the same order.
    pub fn tensors_mut(&mut self) -> Vec<&mut Vec<F32>> {
        let moments = self
            .m
            .iter_mut()
            .zip(self.v.iter_mut())
            .flat_map(|(m, v)| [m, v]);
        self.params.iter_mut().chain(moments).collect()
    }

    /// The seed's three scalars: epoch, and the bit patterns of `b1t` and `b2t`.
    pub fn scalars(&self) -> [i64; 3] {
        [
            self.epoch,
            i64::from(self.b1t.to_bits()),
            i64::from(self.b2t.to_bits()),
        ]
    }

    /// Sets the scalars from the seed's encoding, checking that each is in range.
    pub fn set_scalars(&mut self, [epoch, b1t, b2t]: [i64; 3]) -> Result<()> {
        let bits = |name: &str, value: i64| {
            u32::try_from(value).map(F32::from_bits).map_err(|_| {
                Error::Header(format!(
                    "scalar {name} = {value} is not a binary32 bit pattern"
                ))
            })
        };
        if epoch < 0 {
            return Err(Error::Header(format!("scalar epoch = {epoch} is negative")));
        }
        self.b1t = bits("b1t", b1t)?;
        self.b2t = bits("b2t", b2t)?;
        self.epoch = epoch;
        Ok(())
    }

    /// Cell counts in checkpoint order.
    pub fn tensor_lens(&self) -> Vec<usize> {
        self.tensors().iter().map(|(_, t)| t.len()).collect()
    }
}

/// Zero tensors of the sizes of `tensors`. Allocated zeroed (`calloc`), not filled: a large
/// one is fresh pages that cost nothing until first written (`vec![F32::ZERO; n]` would write
/// every cell, F32 not being a primitive that `vec!` knows to `calloc`).
fn zeroed_like(tensors: &[Vec<F32>]) -> Vec<Vec<F32>> {
    tensors
        .iter()
        .map(|t| bytemuck::zeroed_vec(t.len()))
        .collect()
}

/// Checks that `state` has the model's tensors: each parameter's length, and moments alike.
fn check_tensor_lens(mlp: &Mlp, state: &TrainState) -> Result<()> {
    let params = mlp.param_lens();
    let expected: Vec<usize> = params
        .iter()
        .copied()
        .chain(params.iter().flat_map(|&n| [n, n]))
        .collect();
    if state.tensor_lens() != expected {
        return Err(Error::Mismatch(format!(
            "tensor sizes {:?} do not fit the model's {expected:?}",
            state.tensor_lens()
        )));
    }
    Ok(())
}

/// Names of the tensors in checkpoint order for `n_params` parameter tensors (two per layer).
pub fn tensor_names(n_params: usize) -> Vec<String> {
    let layers = n_params / 2;
    (0..tensors::count(layers))
        .map(|k| tensors::name(k, layers))
        .collect()
}

/// An MLP with its Adam state: the seed's `train_run` as an object.
#[derive(Clone, Debug)]
pub struct Trainer {
    mlp: Mlp,
    adam: AdamConfig,
    state: TrainState,
    grads: Vec<Vec<F32>>,
    scratch: Scratch,
}

impl Trainer {
    /// A trainer at the seed's starting point: weights from the seed's `mk_state(seed)`.
    pub fn new(config: &TrainerConfig, seed: i64) -> Result<Trainer> {
        let mlp = Mlp::new(config.sizes.clone())?;
        Trainer::from_state(config, TrainState::fresh(mlp.init_params(seed)))
    }

    /// A trainer continuing `state` (e.g. read from a checkpoint), without initialising weights
    /// that would be overwritten anyway. The state's tensors must have the model's sizes.
    pub fn from_state(config: &TrainerConfig, state: TrainState) -> Result<Trainer> {
        let mlp = Mlp::new(config.sizes.clone())?;
        check_tensor_lens(&mlp, &state)?;
        let grads = zeroed_like(&state.params);
        let scratch = Scratch::new(&mlp);
        Ok(Trainer {
            mlp,
            adam: config.adam,
            state,
            grads,
            scratch,
        })
    }

    pub fn config(&self) -> TrainerConfig {
        TrainerConfig {
            sizes: self.mlp.sizes().to_vec(),
            adam: self.adam,
        }
    }

    pub fn mlp(&self) -> &Mlp {
        &self.mlp
    }

    pub fn state(&self) -> &TrainState {
        &self.state
    }

    /// Replaces the whole training state; its tensors must have this model's sizes.
    pub fn set_state(&mut self, state: TrainState) -> Result<()> {
        check_tensor_lens(&self.mlp, &state)?;
        self.state = state;
        Ok(())
    }

    /// One Adam step on one sample (the body of the seed's inner loop); returns the sample's
    /// loss before the update. Does not change the epoch.
    pub fn step(&mut self, x: &[F32], label: usize) -> Result<F32> {
        self.check_sample(x.len(), label)?;
        Ok(self.step_unchecked(x, label))
    }

    fn step_unchecked(&mut self, x: &[F32], label: usize) -> F32 {
        let params = &self.state.params;
        let loss = self.mlp.forward(params, x, label, &mut self.scratch);
        self.mlp
            .backward(params, x, label, &mut self.scratch, &mut self.grads);
        let s = &mut self.state;
        let bc = self.adam.advance(&mut s.b1t, &mut s.b2t);
        for (k, grads) in self.grads.iter().enumerate() {
            self.adam
                .update(&mut s.params[k], grads, &mut s.m[k], &mut s.v[k], bc);
        }
        loss
    }

    /// The seed's `train_run`: whole epochs over `data`, every sample in order, until the epoch
    /// counter reaches `target_epoch` (nothing happens if it already has). Resuming a restored
    /// state with the same target continues the interrupted run exactly.
    pub fn train_until(&mut self, data: &Dataset, target_epoch: i64) -> Result<()> {
        if data.features() != self.mlp.inputs() {
            return Err(Error::Input(format!(
                "samples have {} features, the model takes {}",
                data.features(),
                self.mlp.inputs()
            )));
        }
        if let Some(&label) = data.labels().iter().find(|&&y| y >= self.mlp.classes()) {
            return Err(self.label_error(label));
        }
        while self.state.epoch < target_epoch {
            for s in 0..data.len() {
                let (x, label) = data.sample(s);
                self.step_unchecked(x, label);
            }
            self.state.epoch += 1;
        }
        Ok(())
    }

    /// The seed's `hstate` of the current state (see [`hash::seed_hash`]).
    pub fn seed_hash(&self) -> u64 {
        hash::seed_hash(&self.state)
    }

    /// The hash of the whole state (see [`hash::state_hash`]).
    pub fn state_hash(&self) -> u64 {
        hash::state_hash(&self.state)
    }

    fn check_sample(&self, features: usize, label: usize) -> Result<()> {
        if features != self.mlp.inputs() {
            return Err(Error::Input(format!(
                "a sample has {features} features, the model takes {}",
                self.mlp.inputs()
            )));
        }
        if label >= self.mlp.classes() {
            return Err(self.label_error(label));
        }
        Ok(())
    }

    fn label_error(&self, label: usize) -> Error {
        Error::Input(format!(
            "label {label} is outside 0..{} (the model's classes)",
            self.mlp.classes()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_tensor_names_in_checkpoint_order() {
        let names = tensor_names(4);
        let expected = "W1 b1 W2 b2 mW1 vW1 mb1 vb1 mW2 vW2 mb2 vb2";
        assert_eq!(names.join(" "), expected);
    }

    #[test]
    fn step_checks_its_input() {
        let mut t = Trainer::new(&TrainerConfig::seed_model(), 1).unwrap();
        assert!(matches!(t.step(&[F32::ZERO; 5], 0), Err(Error::Input(_))));
        assert!(matches!(t.step(&[F32::ZERO; 6], 4), Err(Error::Input(_))));
        assert!(t.step(&[F32::ZERO; 6], 3).is_ok());
    }

    #[test]
    fn training_until_a_past_epoch_does_nothing() {
        let mut t = Trainer::new(&TrainerConfig::seed_model(), 1).unwrap();
        let before = t.state_hash();
        t.train_until(&Dataset::seed(8, 6, 4), 0).unwrap();
        assert_eq!(t.state_hash(), before);
    }
}
