//! Optimisers (`docs/TRAINING.md`, sections 7 and 8): Adam (the seed's), AdamW and SGD with
//! momentum, their hyperparameters, and gradient clipping by global norm.
//!
//! The update kernels are written once over [`Real`]; the per-step scalars (learning rate,
//! bias corrections, decay factor) are computed in softf32 by the trainer and passed in.
//! [`OptimizerConfig::apply`] runs the update over a whole model's tensors and threads.

mod adam;
mod apply;
mod sgd;

pub use adam::BiasCorrection;

use crate::arith::{cells_mut, Real};
use crate::error::{Error, Result};
use crate::math::Math;
use crate::params::Layer;
use crate::softf32::F32;

crate::names::names! {
    /// Which optimiser a run uses; recorded in every checkpoint.
    pub enum Kind {
        Adam = "adam",
        AdamW = "adamw",
        Sgd = "sgd",
    }
}

crate::names::names! {
    /// Which parameter tensors weight decay (AdamW's decoupled, SGD's coupled) applies to.
    pub enum DecayParams {
        /// Every tensor.
        All = "all",
        /// The weight matrices and tables (Dense and convolution weights, attention's matrices,
        /// embedding tables), not biases and not normalisations' `gamma`, `beta`: nanoGPT's
        /// choice (by kind: its `p.dim() >= 2` where every norm is over a token's width).
        Matrices = "matrices",
    }
}

impl DecayParams {
    /// Whether weight decay applies to a parameter tensor, given whether it is a weight matrix
    /// or table (not a bias, not a normalisation's `gamma` or `beta`).
    pub fn decays(self, weight: bool) -> bool {
        match self {
            DecayParams::All => true,
            DecayParams::Matrices => weight,
        }
    }
}

impl Kind {
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
    /// The tensors `weight_decay` applies to.
    pub decay_params: DecayParams,
}

impl OptimizerConfig {
    /// The hyperparameters by name, in a fixed order (for messages and `hyperparameters`).
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

    /// The hyperparameter `name` given as binary64 (a Python float, a default of the schema),
    /// rounded to the nearest binary32 (ties to even), then checked for this optimiser as
    /// [`OptimizerConfig::validate`] does; an error names the value as given and as rounded
    /// (`lr = 1e40` rounds to `inf`).
    pub fn rounded(&self, name: &str, given: f64) -> Result<F32> {
        let value = F32::from_f64_bits(given.to_bits());
        self.accepted_range(name, value).map_err(|range| {
            Error::Config(format!(
                "{name} = {given:?} (binary32 {value}) is outside the accepted range: {range}"
            ))
        })?;
        Ok(value)
    }

    /// Checks that training with these hyperparameters can work (see `accepted_range`);
    /// `Error::Config` names the first one outside its range. `decay_params` other than "all"
    /// is refused for Adam, which has no weight decay to restrict.
    pub fn validate(&self) -> Result<()> {
        for (name, value) in self.named() {
            self.accepted_range(name, value).map_err(|range| {
                Error::Config(format!(
                    "{name} = {value} is outside the accepted range: {range}"
                ))
            })?;
        }
        if self.kind == Kind::Adam && self.decay_params != DecayParams::All {
            return Err(Error::Config(format!(
                "decay_params = {:?} is for adamw and sgd (adam has no weight decay)",
                self.decay_params.name()
            )));
        }
        Ok(())
    }

    /// The one check of a hyperparameter's range (binary32 values, after any rounding): `Err`
    /// holds the accepted range, for the message.
    ///
    /// - `beta1`, `beta2`, `momentum` in `[0, 1)`: at 1 Adam's bias correction `1 - beta^t` is 0
    ///   and every update is NaN; outside `[0, 1]` the moments are not averages and grow without
    ///   bound.
    /// - `lr`, `eps` finite, positive and normal (at least 2^-126): 0 or a negative `lr` does not
    ///   descend, 0 for `eps` divides 0 by 0 for a weight whose gradient has always been 0, and
    ///   an infinite one gives NaN. A subnormal is refused because binary32 holds it with fewer
    ///   than 24 significant bits, so the value in use can differ from the one given by far more
    ///   than a rounding (1e-45 becomes 1.4e-45); such a value is also far below any useful one.
    /// - `weight_decay` finite and `>= 0`.
    /// - A hyperparameter the optimiser does not use must be neutral: `weight_decay` 0 for Adam
    ///   (AdamW decays), `momentum` 0 except for SGD. `beta1`, `beta2` and `eps` are only checked
    ///   for Adam and AdamW (SGD ignores them).
    fn accepted_range(&self, name: &str, value: F32) -> std::result::Result<(), &'static str> {
        const UNIT: &str = "0 <= value < 1";
        const RATE: &str =
            "finite, positive and normal as binary32: 1.1754944e-38 (2^-126) ..= 3.4028235e38";
        // NaN compares false with everything, so it fails every range.
        let unit = F32::ZERO.ieee_le(value) && value.ieee_lt(F32::ONE);
        let rate = F32::MIN_POSITIVE.ieee_le(value) && value.ieee_le(F32::MAX);
        let adam_like = self.kind.has_second_moments();
        let (ok, range) = match name {
            "lr" => (rate, RATE),
            "beta1" | "beta2" => (!adam_like || unit, UNIT),
            "eps" => (!adam_like || rate, RATE),
            "weight_decay" if self.kind == Kind::Adam => (
                value.is_zero(),
                "0 for adam (use optimizer='adamw' for decoupled weight decay)",
            ),
            "weight_decay" => (
                F32::ZERO.ieee_le(value) && value.ieee_le(F32::MAX),
                "finite and >= 0",
            ),
            "momentum" if self.kind == Kind::Sgd => (unit, UNIT),
            _ => (value.is_zero(), "0 (momentum is an sgd setting)"),
        };
        if ok {
            Ok(())
        } else {
            Err(range)
        }
    }

    /// Updates one parameter tensor from its gradient `g` with this step's scalars, with
    /// weight decay when `decays` (the tensor is one `decay_params` names). `m` is the first
    /// moment (Adam) or momentum buffer (SGD); `v` the second moment (Adam only, empty for SGD).
    #[allow(clippy::too_many_arguments)] // the tensors and the step's scalars
    pub fn update<R: Real>(
        &self,
        math: Math,
        step: &StepScalars,
        decays: bool,
        p: &mut [R],
        g: &[R],
        m: &mut [R],
        v: &mut [R],
    ) {
        match self.kind {
            Kind::Adam | Kind::AdamW => adam::update(self, math, step, decays, p, g, m, v),
            Kind::Sgd => sgd::update(self, step, decays, p, g, m),
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
/// Computes in `R` on the stored cells.
pub fn clip_by_global_norm<R: Real>(grads: &mut [Layer], max_norm: F32) {
    let mut squares = R::ZERO;
    for layer in grads.iter_mut() {
        let (w, b): (&mut [R], &mut [R]) = (cells_mut(&mut layer.w), cells_mut(&mut layer.b));
        for &g in w.iter().chain(b.iter()) {
            squares = squares + g * g;
        }
    }
    let norm = squares.to_f32().sqrt();
    if max_norm.ieee_lt(norm) {
        let factor = R::from_f32(max_norm / norm);
        for layer in grads.iter_mut() {
            let (w, b): (&mut [R], &mut [R]) = (cells_mut(&mut layer.w), cells_mut(&mut layer.b));
            for g in w.iter_mut().chain(b.iter_mut()) {
                *g = *g * factor;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::{Family, Value};
    use crate::TrainerConfig;

    fn config_error(r: Result<OptimizerConfig>) -> String {
        match r {
            Err(Error::Config(message)) => message,
            other => panic!("expected Error::Config, got {other:?}"),
        }
    }

    /// The seed model's optimiser as `kind`, with hyperparameter `k` (in `named` order) given
    /// as `x`, through the configuration schema.
    fn with(kind: Kind, k: usize, x: f64) -> Result<OptimizerConfig> {
        let name = TrainerConfig::seed_model().optimizer.named()[k].0;
        let settings = [
            ("optimizer", Value::Str(kind.name().into())),
            (name, Value::Float(x)),
        ];
        TrainerConfig::from_settings(Family::SeedModel, &settings).map(|c| c.optimizer)
    }

    fn seed() -> OptimizerConfig {
        TrainerConfig::seed_model().optimizer
    }

    #[test]
    fn seed_hyperparameters_are_the_nearest_binary32() {
        let c = seed();
        assert_eq!(c.lr.to_bits(), 0x3C23_D70A); // 0.01
        assert_eq!(c.beta1.to_bits(), 0x3F66_6666); // 0.9
        assert_eq!(c.beta2.to_bits(), 0x3F7F_BE77); // 0.999
        assert_eq!(c.eps.to_bits(), 0x322B_CC77); // 1e-8
    }

    #[test]
    fn seed_hyperparameters_are_valid_and_are_built_as_the_seed_builds_them() {
        // The seed computes 1/100, 9/10, 999/1000 and 1/10^8 in binary32; the schema's decimal
        // defaults round to the same bits.
        seed().validate().unwrap();
        let ratio = |n, d| F32::from_i32(n) / F32::from_i32(d);
        let built = OptimizerConfig {
            kind: Kind::Adam,
            lr: ratio(1, 100),
            beta1: ratio(9, 10),
            beta2: ratio(999, 1000),
            eps: ratio(1, 100_000_000),
            weight_decay: F32::ZERO,
            momentum: F32::ZERO,
            decay_params: DecayParams::All,
        };
        assert_eq!(seed(), built);
    }

    #[test]
    fn out_of_range_hyperparameters_are_refused() {
        let bad_rates = [
            f64::NAN,
            f64::INFINITY,
            -0.01,
            0.0,
            -0.0,
            1e40,
            1e-40,
            1e-50,
        ];
        for bad in bad_rates {
            for k in [0, 3] {
                config_error(with(Kind::Adam, k, bad));
            }
        }
        for bad in [1.0, 1.5, -1.0, f64::NAN, 0.999_999_999, -1e-30] {
            for k in [1, 2] {
                config_error(with(Kind::Adam, k, bad));
            }
            config_error(with(Kind::Sgd, 5, bad));
        }
        let message = config_error(with(Kind::Adam, 0, 1e40));
        assert!(message.starts_with("lr = 1e40 (binary32 inf)"), "{message}");
        let message = config_error(with(Kind::Adam, 2, 0.999_999_999));
        assert!(
            message.starts_with("beta2 = 0.999999999 (binary32 1.0)"),
            "{message}"
        );
        // The edges: 0 for a beta, the smallest normal and the largest finite lr.
        with(Kind::Adam, 1, 0.0).unwrap();
        with(Kind::Adam, 0, 1.1754943508222875e-38).unwrap();
        with(Kind::Adam, 3, 3.4028234663852886e38).unwrap();
        // validate() checks configurations built without the schema (e.g. read from a file).
        let c = OptimizerConfig {
            beta1: F32::ONE,
            ..seed()
        };
        assert!(matches!(c.validate(), Err(Error::Config(m)) if m.starts_with("beta1 = 1.0 ")));
    }

    #[test]
    fn unused_hyperparameters_must_be_neutral() {
        config_error(with(Kind::Adam, 4, 0.01)); // weight decay belongs to adamw
        config_error(with(Kind::Adam, 5, 0.9)); // momentum belongs to sgd
        config_error(with(Kind::AdamW, 5, 0.9));
        with(Kind::AdamW, 4, 0.01).unwrap();
        with(Kind::Sgd, 4, 0.01).unwrap();
        with(Kind::Sgd, 5, 0.9).unwrap();
        config_error(with(Kind::Sgd, 4, -0.01));
        config_error(with(Kind::AdamW, 4, f64::INFINITY));
        // SGD ignores Adam's betas and eps.
        with(Kind::Sgd, 1, 1.0).unwrap();
        with(Kind::Sgd, 3, 0.0).unwrap();
    }
}
