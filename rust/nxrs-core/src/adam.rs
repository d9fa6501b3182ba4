//! Adam, exactly as the seed's `adam1` and `train_run` apply it.

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
}
