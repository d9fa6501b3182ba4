//! Optimisers (`docs/TRAINING.md`, sections 7 and 8): Adam (the seed's), AdamW and SGD with
//! momentum, their hyperparameters, and gradient clipping by global norm.
//!
//! The update kernels are written once over [`Real`]; the per-step scalars (learning rate,
//! bias corrections, decay factor) are computed in softf32 by the trainer and passed in.

mod adam;
mod sgd;

pub use adam::BiasCorrection;

use crate::arith::Real;
use crate::error::{Error, Result};
use crate::math::Math;
use crate::mlp::Layer;
use crate::softf32::F32;

/// Which optimiser a run uses; recorded in every checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Adam,
    AdamW,
    Sgd,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Adam, Kind::AdamW, Kind::Sgd];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Adam => "adam",
            Kind::AdamW => "adamw",
            Kind::Sgd => "sgd",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the optimiser keeps second moments (and bias-correction powers).
    pub fn has_second_moments(self) -> bool {
        matches!(self, Kind::Adam | Kind::AdamW)
    }
}

/// An optimiser and its hyperparameters, as binary32 values. Fields an optimiser does not use
/// hold their neutral value (0 for `weight_decay` and `momentum`) and are refused otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptimizerConfig {
    pub kind: Kind,
    pub lr: F32,
    pub beta1: F32,
    pub beta2: F32,
    pub eps: F32,
    pub weight_decay: F32,
    pub momentum: F32,
}

impl OptimizerConfig {
    /// The seed's Adam, its values built as it builds them: `1/100`, `9/10`, `999/1000`, `1/10^8`.
    pub fn seed() -> OptimizerConfig {
        let ratio = |n, d| F32::from_i32(n) / F32::from_i32(d);
        OptimizerConfig {
            kind: Kind::Adam,
            lr: ratio(1, 100),
            beta1: ratio(9, 10),
            beta2: ratio(999, 1000),
            eps: ratio(1, 100_000_000),
            weight_decay: F32::ZERO,
            momentum: F32::ZERO,
        }
    }

    /// The hyperparameters by name, in a fixed order (for configurations and messages).
    pub fn named(&self) -> [(&'static str, F32); 6] {
        [
            ("lr", self.lr),
            ("beta1", self.beta1),
            ("beta2", self.beta2),
            ("eps", self.eps),
            ("weight_decay", self.weight_decay),
            ("momentum", self.momentum),
        ]
    }

    /// Checks every hyperparameter's range (after rounding to binary32, so `lr = 1e40`, which
    /// rounds to infinity, is refused) and that unused ones are neutral.
    pub fn validate(&self) -> Result<()> {
        let positive = |x: F32| F32::ZERO.ieee_lt(x) && x.ieee_lt(F32::INFINITY);
        let unit = |x: F32| F32::ZERO.ieee_le(x) && x.ieee_lt(F32::ONE);
        let non_negative = |x: F32| F32::ZERO.ieee_le(x) && x.ieee_lt(F32::INFINITY);
        let adam_like = self.kind.has_second_moments();
        let rules: [(&str, F32, bool, &str); 6] = [
            ("lr", self.lr, positive(self.lr), "finite and > 0"),
            ("beta1", self.beta1, !adam_like || unit(self.beta1), "in [0, 1)"),
            ("beta2", self.beta2, !adam_like || unit(self.beta2), "in [0, 1)"),
            ("eps", self.eps, !adam_like || positive(self.eps), "finite and > 0"),
            (
                "weight_decay",
                self.weight_decay,
                match self.kind {
                    Kind::Adam => self.weight_decay.is_zero(),
                    Kind::AdamW | Kind::Sgd => non_negative(self.weight_decay),
                },
                match self.kind {
                    Kind::Adam => "0 for adam (use adamw for decoupled weight decay)",
                    _ => "finite and >= 0",
                },
            ),
            (
                "momentum",
                self.momentum,
                match self.kind {
                    Kind::Sgd => unit(self.momentum),
                    _ => self.momentum.is_zero(),
                },
                match self.kind {
                    Kind::Sgd => "in [0, 1)",
                    _ => "0 (momentum is an sgd setting)",
                },
            ),
        ];
        match rules.into_iter().find(|&(_, _, ok, _)| !ok) {
            None => Ok(()),
            Some((name, value, _, range)) => Err(Error::Config(format!(
                "{name} = {} (as binary32) is not accepted by {}: it must be {range}",
                f32::from_bits(value.to_bits()),
                self.kind.name()
            ))),
        }
    }

    /// Updates one parameter tensor from its gradient `g` with this step's scalars. `m` is the
    /// first moment (Adam) or momentum buffer (SGD); `v` the second moment (Adam only, empty
    /// for SGD).
    #[allow(clippy::too_many_arguments)] // the tensors and the step's scalars
    pub fn update<R: Real>(
        &self,
        math: Math,
        step: &StepScalars,
        p: &mut [R],
        g: &[R],
        m: &mut [R],
        v: &mut [R],
    ) {
        match self.kind {
            Kind::Adam | Kind::AdamW => adam::update(self, math, step, p, g, m, v),
            Kind::Sgd => sgd::update(self, step, p, g, m),
        }
    }
}

/// What every cell of one step shares, computed once per step in softf32.
#[derive(Clone, Copy, Debug)]
pub struct StepScalars {
    /// The scheduled learning rate.
    pub lr: F32,
    /// Adam's bias-correction divisors (unused by SGD).
    pub bias: BiasCorrection,
    /// AdamW's `1 - lr * weight_decay` (unused otherwise).
    pub decay: F32,
}

impl StepScalars {
    /// Advances the running powers `b1t`, `b2t` (Adam keeps them as products, updated once per
    /// step before the update) and computes the step's scalars for the scheduled rate `lr`.
    pub fn advance(config: &OptimizerConfig, lr: F32, b1t: &mut F32, b2t: &mut F32) -> StepScalars {
        let bias = if config.kind.has_second_moments() {
            BiasCorrection::advance(config, b1t, b2t)
        } else {
            BiasCorrection::NONE
        };
        StepScalars {
            lr,
            bias,
            decay: F32::ONE - lr * config.weight_decay,
        }
    }
}

/// Scales the gradient so its global norm is at most `max_norm` (section 8): the squares of every
/// cell summed from +0 in tensor order (`W1, b1, W2, ...`), the correctly rounded square root,
/// and if it exceeds `max_norm`, every cell times `max_norm / norm`.
pub fn clip_by_global_norm<R: Real>(grads: &mut [Layer<R>], max_norm: F32) {
    let mut squares = R::ZERO;
    for layer in grads.iter() {
        for &g in layer.w.iter().chain(&layer.b) {
            squares = squares + g * g;
        }
    }
    let norm = squares.to_f32().sqrt();
    if max_norm.ieee_lt(norm) {
        let factor = R::from_f32(max_norm / norm);
        for layer in grads.iter_mut() {
            for g in layer.w.iter_mut().chain(layer.b.iter_mut()) {
                *g = *g * factor;
            }
        }
    }
}
