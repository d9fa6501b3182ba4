//! Adam, exactly as the seed's `adam1` and `train_run` apply it.

use crate::error::{Error, Result};
use crate::math::seed_sqrt_lanes;
use crate::softf32::F32;

/// How many cells share one run of the Newton square root (4 was fastest of 2, 4, 8 and 16 in
/// bench/bench_train.py on a 2-core x86_64 VM: 223 ms for the seed run, against 350 ms one by one).
const LANES: usize = 4;

/// Adam's hyperparameters, as binary32 values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdamConfig {
    pub lr: F32,
    pub beta1: F32,
    pub beta2: F32,
    pub eps: F32,
}

impl AdamConfig {
    /// The seed's values, built as it builds them: `1/100`, `9/10`, `999/1000`, `1/100000000`.
    pub fn seed() -> AdamConfig {
        let ratio = |n, d| F32::from_i32(n) / F32::from_i32(d);
        AdamConfig {
            lr: ratio(1, 100),
            beta1: ratio(9, 10),
            beta2: ratio(999, 1000),
            eps: ratio(1, 100_000_000),
        }
    }
}

impl AdamConfig {
    /// The hyperparameters by name, in the order lr, beta1, beta2, eps.
    pub fn named(&self) -> [(&'static str, F32); 4] {
        [
            ("lr", self.lr),
            ("beta1", self.beta1),
            ("beta2", self.beta2),
            ("eps", self.eps),
        ]
    }

    /// Hyperparameters given as binary64 (Python floats): each is rounded to the nearest binary32
    /// (ties to even), then checked as [`AdamConfig::validate`] does; an error names the value as
    /// given and as rounded (`lr = 1e40` rounds to `inf`).
    pub fn from_f64(lr: f64, beta1: f64, beta2: f64, eps: f64) -> Result<AdamConfig> {
        let binary32 = |x: f64| F32::from_f64_bits(x.to_bits());
        let config = AdamConfig {
            lr: binary32(lr),
            beta1: binary32(beta1),
            beta2: binary32(beta2),
            eps: binary32(eps),
        };
        for ((name, value), given) in config.named().into_iter().zip([lr, beta1, beta2, eps]) {
            accepted_range(name, value).map_err(|range| {
                Error::Config(format!(
                    "{name} = {given:?} (binary32 {}) is outside the accepted range: {range}",
                    shown(value)
                ))
            })?;
        }
        Ok(config)
    }

    /// Checks that training with these hyperparameters can work: `lr` and `eps` finite, positive
    /// and normal as binary32, `beta1` and `beta2` in `[0, 1)`. `Error::Config` names the first
    /// one outside its range.
    pub fn validate(&self) -> Result<()> {
        for (name, value) in self.named() {
            accepted_range(name, value).map_err(|range| {
                Error::Config(format!(
                    "{name} = {} is outside the accepted range: {range}",
                    shown(value)
                ))
            })?;
        }
        Ok(())
    }
}

/// The one check of a hyperparameter's range (binary32 values, after any rounding): `Err` holds
/// the accepted range, for the message.
///
/// - `beta1`, `beta2` in `[0, 1)`: at 1 the bias correction `1 - beta^t` is 0 and every update
///   is NaN; outside `[0, 1]` the moments are not averages and grow without bound.
/// - `lr`, `eps` finite, positive and normal (at least 2^-126): 0 or a negative `lr` does not
///   descend, 0 for `eps` divides 0 by 0 for a weight whose gradient has always been 0, and an
///   infinite one gives NaN. A subnormal is refused because binary32 holds it with fewer than
///   24 significant bits, so the value in use can differ from the one given by far more than a
///   rounding (1e-45 becomes 1.4e-45); such an `lr` or `eps` is also far below any useful one.
fn accepted_range(name: &str, value: F32) -> std::result::Result<(), &'static str> {
    // NaN compares false with everything, so it fails both ranges.
    let ok = match name {
        "beta1" | "beta2" => F32::ZERO.ieee_le(value) && value.ieee_lt(F32::ONE),
        _ => MIN_NORMAL.ieee_le(value) && value.ieee_le(MAX_FINITE),
    };
    match (ok, name) {
        (true, _) => Ok(()),
        (false, "beta1" | "beta2") => Err("0 <= value < 1"),
        (false, _) => {
            Err("finite, positive and normal as binary32: 1.1754944e-38 (2^-126) ..= 3.4028235e38")
        }
    }
}

/// Smallest positive normal and largest finite binary32.
const MIN_NORMAL: F32 = F32::from_bits(0x0080_0000);
const MAX_FINITE: F32 = F32::from_bits(0x7F7F_FFFF);

/// A binary32 value for a message: Rust's shortest round-trip form (`0.01`, `1e-45`, `inf`).
fn shown(value: F32) -> String {
    format!("{:?}", f32::from_bits(value.to_bits()))
}

/// The bias-correction divisors of one step, `1 - beta1^t` and `1 - beta2^t`.
#[derive(Clone, Copy, Debug)]
pub struct BiasCorrection {
    pub bc1: F32,
    pub bc2: F32,
}

impl AdamConfig {
    /// Advances the running powers `beta1^t`, `beta2^t` by one step (the seed keeps them as
    /// running products, updated once per step before the update) and returns the divisors.
    pub fn advance(&self, b1t: &mut F32, b2t: &mut F32) -> BiasCorrection {
        *b1t = *b1t * self.beta1;
        *b2t = *b2t * self.beta2;
        BiasCorrection {
            bc1: F32::ONE - *b1t,
            bc2: F32::ONE - *b2t,
        }
    }

    /// The seed's `adam1` over one tensor:
    /// `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= (lr m/bc1) / (seed_sqrt(v/bc2) + eps)`.
    pub fn update(
        &self,
        params: &mut [F32],
        grads: &[F32],
        m: &mut [F32],
        v: &mut [F32],
        bc: BiasCorrection,
    ) {
        let one_minus_beta1 = F32::ONE - self.beta1;
        let one_minus_beta2 = F32::ONE - self.beta2;
        // Cells go through the square root LANES at a time (see seed_sqrt_lanes); every cell's
        // own operations and their order are the seed's.
        let chunks = params
            .chunks_mut(LANES)
            .zip(grads.chunks(LANES))
            .zip(m.chunks_mut(LANES))
            .zip(v.chunks_mut(LANES));
        for (((p, g), m), v) in chunks {
            let mut m_hat = [F32::ZERO; LANES];
            let mut v_hat = [F32::ONE; LANES]; // lanes past the tensor's end are ignored
            for k in 0..p.len() {
                m[k] = self.beta1 * m[k] + one_minus_beta1 * g[k];
                v[k] = self.beta2 * v[k] + one_minus_beta2 * (g[k] * g[k]);
                m_hat[k] = m[k] / bc.bc1;
                v_hat[k] = v[k] / bc.bc2;
            }
            let root = seed_sqrt_lanes(v_hat);
            for k in 0..p.len() {
                p[k] = p[k] - (self.lr * m_hat[k]) / (root[k] + self.eps);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_hyperparameters_are_the_nearest_binary32() {
        let c = AdamConfig::seed();
        assert_eq!(c.lr.to_bits(), 0x3C23_D70A); // 0.01
        assert_eq!(c.beta1.to_bits(), 0x3F66_6666); // 0.9
        assert_eq!(c.beta2.to_bits(), 0x3F7F_BE77); // 0.999
        assert_eq!(c.eps.to_bits(), 0x322B_CC77); // 1e-8
    }

    #[test]
    fn seed_hyperparameters_are_valid_and_are_what_python_defaults_round_to() {
        AdamConfig::seed().validate().unwrap();
        assert_eq!(
            AdamConfig::from_f64(0.01, 0.9, 0.999, 1e-8).unwrap(),
            AdamConfig::seed()
        );
    }

    fn config_error(r: Result<AdamConfig>) -> String {
        match r {
            Err(Error::Config(message)) => message,
            other => panic!("expected Error::Config, got {other:?}"),
        }
    }

    #[test]
    fn out_of_range_hyperparameters_are_refused() {
        let with = |k: usize, x: f64| {
            let mut h = [0.01, 0.9, 0.999, 1e-8];
            h[k] = x;
            AdamConfig::from_f64(h[0], h[1], h[2], h[3])
        };
        for bad in [
            f64::NAN,
            f64::INFINITY,
            -0.01,
            0.0,
            -0.0,
            1e40,
            1e-40,
            1e-50,
        ] {
            for k in [0, 3] {
                config_error(with(k, bad));
            }
        }
        for bad in [1.0, 1.5, -1.0, f64::NAN, 0.999_999_999, -1e-30] {
            for k in [1, 2] {
                config_error(with(k, bad));
            }
        }
        let message = config_error(with(0, 1e40));
        assert!(message.starts_with("lr = 1e40 (binary32 inf)"), "{message}");
        let message = config_error(with(2, 0.999_999_999));
        assert!(
            message.starts_with("beta2 = 0.999999999 (binary32 1.0)"),
            "{message}"
        );
        // The edges: 0 for a beta, the smallest normal and the largest finite lr.
        with(1, 0.0).unwrap();
        with(0, 1.1754943508222875e-38).unwrap();
        with(3, 3.4028234663852886e38).unwrap();
        // validate() checks configurations built without from_f64 (e.g. read from a file).
        let c = AdamConfig {
            beta1: F32::ONE,
            ..AdamConfig::seed()
        };
        assert!(matches!(c.validate(), Err(Error::Config(m)) if m.starts_with("beta1 = 1.0 ")));
    }
}
