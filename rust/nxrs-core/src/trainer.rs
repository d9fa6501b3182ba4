//! The training state and the trainer that advances it, step by step, as the seed's `train_run`.

use crate::adam::AdamConfig;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::hash;
use crate::mlp::{Mlp, Scratch};
use crate::nxck::tensors;
use crate::softf32::F32;
use crate::Integer;

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

    /// Checks the sizes ([`Mlp::new`]) and the hyperparameters ([`AdamConfig::validate`]);
    /// returns the model. `Error::Config` otherwise.
    fn validate(&self) -> Result<Mlp> {
        let mlp = Mlp::new(self.sizes.clone())?;
        self.adam.validate()?;
        Ok(mlp)
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
    /// A trainer at the seed's starting point: weights from the seed's `mk_state(seed)` (exact
    /// for every `i64` seed, see [`Mlp::init_params`]). `Error::Config` for a configuration
    /// that [`TrainerConfig`]'s checks refuse.
    pub fn new(config: &TrainerConfig, seed: i64) -> Result<Trainer> {
        let mlp = config.validate()?;
        let state = TrainState::fresh(mlp.init_params(seed));
        Trainer::assemble(mlp, config.adam, state)
    }

    /// A trainer continuing `state` (e.g. read from a checkpoint), without initialising weights
    /// that would be overwritten anyway. The configuration is checked as by [`Trainer::new`];
    /// the state's tensors must have the model's sizes.
    pub fn from_state(config: &TrainerConfig, state: TrainState) -> Result<Trainer> {
        Trainer::assemble(config.validate()?, config.adam, state)
    }

    fn assemble(mlp: Mlp, adam: AdamConfig, state: TrainState) -> Result<Trainer> {
        check_tensor_lens(&mlp, &state)?;
        let grads = zeroed_like(&state.params);
        let scratch = Scratch::new(&mlp);
        Ok(Trainer {
            mlp,
            adam,
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
    /// loss before the update. Does not change the epoch. The sample is checked as a dataset of
    /// one ([`Dataset::new`]: finite features, a label of any integer type in the model's
    /// classes) and must fit the model; `Error::Input` otherwise, and nothing changes.
    pub fn step<T: Integer>(&mut self, x: &[F32], label: T) -> Result<F32> {
        let sample = Dataset::new(x.len(), self.mlp.classes(), x.to_vec(), &[label])?;
        self.check_fits(&sample)?;
        let (x, label) = sample.sample(0);
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
    /// state with the same target continues the interrupted run exactly. `data` must fit the
    /// model (`Error::Input`, nothing changes).
    pub fn train_until(&mut self, data: &Dataset, target_epoch: i64) -> Result<()> {
        self.check_fits(data)?;
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

    /// The one check that data fits the model: as many features as the model's inputs, and
    /// labels (already checked against the dataset's classes) within the model's classes.
    fn check_fits(&self, data: &Dataset) -> Result<()> {
        if data.features() != self.mlp.inputs() {
            return Err(Error::Input(format!(
                "samples have {} features, the model takes {}",
                data.features(),
                self.mlp.inputs()
            )));
        }
        if data.classes() > self.mlp.classes() {
            return Err(Error::Input(format!(
                "the dataset's labels are in 0..{}, the model has {} classes",
                data.classes(),
                self.mlp.classes()
            )));
        }
        Ok(())
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
        let before = t.state_hash();
        let mut nan = [F32::ZERO; 6];
        nan[2] = F32::DEFAULT_NAN;
        assert!(matches!(t.step(&[F32::ZERO; 5], 0), Err(Error::Input(_))));
        assert!(matches!(t.step(&[F32::ZERO; 6], 4), Err(Error::Input(_))));
        assert!(matches!(t.step(&[F32::ZERO; 6], -1), Err(Error::Input(_))));
        assert!(matches!(t.step(&nan, 0), Err(Error::Input(_))));
        assert_eq!(t.state_hash(), before);
        assert!(t.step(&[F32::ZERO; 6], 3).is_ok());
    }

    #[test]
    fn data_must_fit_the_model() {
        let mut t = Trainer::new(&TrainerConfig::seed_model(), 1).unwrap();
        let before = t.state_hash();
        for data in [Dataset::seed(8, 5, 4), Dataset::seed(8, 6, 5)] {
            assert!(matches!(t.train_until(&data, 1), Err(Error::Input(_))));
        }
        assert_eq!(t.state_hash(), before);
        // Fewer classes than the model is fine.
        t.train_until(&Dataset::seed(8, 6, 3), 1).unwrap();
    }

    #[test]
    fn configurations_are_validated_by_new_and_from_state() {
        let bad = TrainerConfig {
            adam: AdamConfig {
                beta1: F32::ONE,
                ..AdamConfig::seed()
            },
            ..TrainerConfig::seed_model()
        };
        assert!(matches!(Trainer::new(&bad, 1), Err(Error::Config(_))));
        let state = Trainer::new(&TrainerConfig::seed_model(), 1)
            .unwrap()
            .state()
            .clone();
        assert!(matches!(
            Trainer::from_state(&bad, state),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn training_until_a_past_epoch_does_nothing() {
        let mut t = Trainer::new(&TrainerConfig::seed_model(), 1).unwrap();
        let before = t.state_hash();
        t.train_until(&Dataset::seed(8, 6, 4), 0).unwrap();
        assert_eq!(t.state_hash(), before);
    }
}
