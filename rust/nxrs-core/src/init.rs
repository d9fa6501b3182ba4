//! How a run's parameters start (`docs/TRAINING.md` sections 4, 15.4 and 15.8): the
//! initialisations' names, the uniform draws of He, Glorot and PyTorch's bounds, and normal
//! draws (Marsaglia's polar method). The seed's own pattern is the MLP's ([`crate::mlp`]).

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
    (0..cells).map(|_| unit(stream) * a).collect()
}

/// A draw's top 24 bits as a value in `[-1, 1)`: `f32(k) * 2^-23` for `k` in `[-2^23, 2^23)`
/// (the product exact).
fn unit(stream: &mut Stream) -> F32 {
    let two_pow_minus_23 = F32::from_bits((127 - 23) << 23);
    let k = (stream.next_u64() >> 40) as i64 - (1 << 23);
    F32::from_i64(k) * two_pow_minus_23
}

/// `cells` values from `N(0, std)`, drawn from `stream` by Marsaglia's polar method (section
/// 15.8): pairs `u, v` in `[-1, 1)`, `q = u*u + v*v`, a pair with `q >= 1` or `q = 0` dropped,
/// else `f = sqrt((-2 * ln q) / q)` (correctly rounded `ln` and `sqrt`) gives `u*f` then `v*f`,
/// each times `std`.
pub fn normal(stream: &mut Stream, cells: usize, std: F32) -> Vec<F32> {
    let minus_two = F32::from_i32(-2);
    let mut values = Vec::with_capacity(cells + 1);
    while values.len() < cells {
        let (u, v) = (unit(stream), unit(stream));
        let q = (u * u) + (v * v);
        if !q.ieee_lt(F32::ONE) || q == F32::ZERO {
            continue;
        }
        let f = ((minus_two * q.ln()) / q).sqrt();
        values.extend([(u * f) * std, (v * f) * std]);
    }
    values.truncate(cells);
    values
}
