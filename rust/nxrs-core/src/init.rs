//! How a run's parameters start (`docs/TRAINING.md` sections 4 and 15.4): the initialisations'
//! names and the uniform draws of He, Glorot and PyTorch's bounds. The seed's own pattern is
//! the MLP's ([`crate::mlp`]).

use crate::rng::Stream;
use crate::softf32::F32;

crate::names::names! {
    /// How the weights start (biases at +0, except PyTorch's).
    pub enum Init {
        /// The seed's `mk_state` pattern.
        Seed = "seed",
        /// Uniform on `[-a, a)`, `a = sqrt(6 / inputs)` (He et al., for ReLU networks).
        He = "he",
        /// Uniform on `[-a, a)`, `a = sqrt(6 / (inputs + outputs))` (Glorot and Bengio).
        Glorot = "glorot",
        /// PyTorch's default bounds for layer objects (section 15.4): weights and biases
        /// uniform on `[-a, a)`, `a = sqrt(1 / fan_in)`.
        Torch = "torch",
    }
}

impl Init {
    /// The bound `a` of a uniform initialisation of a layer with `fan_in` inputs and `fan_out`
    /// outputs per weight (section 4; section 15.4 for convolutions); the seed's pattern has
    /// none (1).
    pub fn bound(self, fan_in: usize, fan_out: usize) -> F32 {
        let (numerator, fan) = match self {
            Init::He => (6, fan_in),
            Init::Glorot => (6, fan_in + fan_out),
            Init::Torch => (1, fan_in),
            Init::Seed => return F32::ONE,
        };
        (F32::from_i32(numerator) / F32::from_i64(fan as i64)).sqrt()
    }
}

/// `cells` values uniform on `[-a, a)`, drawn from `stream`: each draw's top 24 bits give an
/// integer `k` in `[-2^23, 2^23)`, and the value is `(k * 2^-23) * a` (the first product exact).
pub fn uniform(stream: &mut Stream, cells: usize, a: F32) -> Vec<F32> {
    let two_pow_minus_23 = F32::from_bits((127 - 23) << 23);
    (0..cells)
        .map(|_| {
            let k = (stream.next_u64() >> 40) as i64 - (1 << 23);
            (F32::from_i64(k) * two_pow_minus_23) * a
        })
        .collect()
}
