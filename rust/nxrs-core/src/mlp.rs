//! What is the MLP's own (`docs/TRAINING.md`, sections 1, 4 and 5): layer sizes
//! `[n0, n1, ..., nL]` and their limits, the seed's initialisation pattern, and the layer network
//! the sizes stand for: `Dense(n1), ReLU, ..., Dense(nL)`, which computes every pass (the
//! [`crate::layers`] engine gives the seed's `fwd` and `bwd` bit for bit).

use crate::error::{Error, Result};
use crate::layers::conv::Conv;
use crate::layers::{Layer, Network, Op};
use crate::limits::{MAX_LAYERS, MAX_LAYER_SIZE, MAX_PARAMETERS};
use crate::params;
use crate::softf32::F32;
use crate::Integer;

/// The seed initialises layer `l`'s weight `k` (row-major) as
/// `(((k * mul + seed) % modulus) - modulus / 2) / 50`, with `(mul, modulus)` = (7, 13) for the
/// first layer and (5, 11) for the second; deeper layers reuse the last pattern.
const INIT_PATTERNS: [(i128, i128); 2] = [(7, 13), (5, 11)];

/// Layer sizes of an MLP, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mlp {
    sizes: Vec<usize>,
}

/// The one check of layer sizes: at least two (inputs and outputs), each in
/// `1..=MAX_LAYER_SIZE`, at most `MAX_PARAMETERS` parameters together. Sizes of any integer type,
/// so a negative one from a user gets the same `Error::Config` as 0.
pub fn layer_sizes<T: Integer>(sizes: &[T]) -> Result<Vec<usize>> {
    if sizes.len() < 2 {
        return Err(Error::Config(format!(
            "an MLP needs at least an input and an output size, got {sizes:?}"
        )));
    }
    if sizes.len() > MAX_LAYERS + 1 {
        return Err(Error::Config(format!(
            "{} layer sizes describe more than {MAX_LAYERS} layers",
            sizes.len()
        )));
    }
    let checked = sizes
        .iter()
        .map(|&n| {
            n.try_into()
                .ok()
                .filter(|n| (1..=MAX_LAYER_SIZE).contains(n))
                .ok_or_else(|| {
                    Error::Config(format!(
                        "layer size {n} is outside 1..={MAX_LAYER_SIZE} (sizes {sizes:?})"
                    ))
                })
        })
        .collect::<Result<Vec<usize>>>()?;
    // Checked arithmetic: sizes come from users and checkpoint headers.
    let total = checked
        .windows(2)
        .try_fold(0usize, |sum, pair| {
            let layer = pair[0].checked_mul(pair[1])?.checked_add(pair[1])?;
            sum.checked_add(layer)
        })
        .filter(|&total| total <= MAX_PARAMETERS);
    if total.is_none() {
        return Err(Error::Config(format!(
            "the layer sizes {sizes:?} need more than {MAX_PARAMETERS} parameters"
        )));
    }
    Ok(checked)
}

impl Mlp {
    /// An MLP with the given layer sizes (inputs first, outputs last), checked by
    /// [`layer_sizes`].
    pub fn new(sizes: Vec<usize>) -> Result<Mlp> {
        layer_sizes(&sizes)?;
        Ok(Mlp { sizes })
    }

    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// The layer network the sizes stand for (section 15): `Dense(n1), ReLU, ..., Dense(nL)`,
    /// no ReLU after the last, its layers at positions `1, 2, ...` after `Input(n0)`. Built
    /// from the checked sizes, whose limits are the network's (counted in weight layers: the
    /// ReLUs between are not layers of the MLP).
    pub fn network(&self) -> Network {
        let flat = |n: usize| vec![n];
        let mut layers = Vec::with_capacity(2 * self.sizes.len());
        for (l, pair) in self.sizes.windows(2).enumerate() {
            let (inputs, outputs) = (pair[0], pair[1]);
            if l > 0 {
                layers.push(Layer {
                    position: layers.len() + 1,
                    op: Op::ReLU,
                    input: flat(inputs),
                    output: flat(inputs),
                    sequence: None,
                    std: None,
                });
            }
            layers.push(Layer {
                position: layers.len() + 1,
                op: Op::Conv(Conv::dense(inputs, outputs, true)),
                input: flat(inputs),
                output: flat(outputs),
                sequence: None,
                std: None,
            });
        }
        Network {
            input: flat(self.sizes[0]),
            layers,
            tokens: None,
        }
    }

    /// The seed's `mk_state` parameters (`init = "seed"`, section 4): each layer's weights by
    /// its pattern, in exact integer arithmetic (i128: `k * mul + seed` cannot overflow for any
    /// `i64` seed), `%` and `/` truncating as in the seed's language; biases +0.
    pub fn seed_params(&self, seed: i64) -> Vec<params::Layer> {
        let fifty = F32::from_i32(50);
        self.sizes
            .windows(2)
            .enumerate()
            .map(|(l, pair)| {
                let (mul, modulus) = INIT_PATTERNS[l.min(INIT_PATTERNS.len() - 1)];
                let w = (0..pair[0] * pair[1])
                    .map(|k| {
                        let cell = (k as i128 * mul + i128::from(seed)) % modulus - modulus / 2;
                        F32::from_i64(cell as i64) / fifty // |cell| < modulus
                    })
                    .collect();
                params::Layer {
                    w,
                    b: vec![F32::ZERO; pair[1]],
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_sizes() {
        assert!(Mlp::new(vec![3]).is_err());
        assert!(Mlp::new(vec![3, 0, 2]).is_err());
        assert!(Mlp::new(vec![MAX_LAYER_SIZE, MAX_LAYER_SIZE]).is_err());
        let message = match layer_sizes(&[-1i64, 4]) {
            Err(Error::Config(message)) => message,
            other => panic!("expected Error::Config, got {other:?}"),
        };
        assert!(
            message.starts_with("layer size -1 is outside 1..="),
            "{message}"
        );
        assert!(layer_sizes(&[i64::MAX, 4]).is_err());
        assert!(layer_sizes(&[MAX_LAYER_SIZE as i64 + 1, 4]).is_err());
        assert_eq!(layer_sizes(&[6i64, 10, 4]).unwrap(), vec![6, 10, 4]);
        assert!(Mlp::new(vec![1; MAX_LAYERS + 1]).is_ok());
        assert!(Mlp::new(vec![1; MAX_LAYERS + 2]).is_err());
    }

    #[test]
    fn the_network_is_the_dense_and_relu_layers_of_section_15() {
        use crate::layers::LayerSpec::{Dense, Input, ReLU};
        let specs = [
            Input { shape: vec![6] },
            Dense {
                units: 10,
                bias: true,
                std: None,
            },
            ReLU,
            Dense {
                units: 7,
                bias: true,
                std: None,
            },
            ReLU,
            Dense {
                units: 4,
                bias: true,
                std: None,
            },
        ];
        let net = Mlp::new(vec![6, 10, 7, 4]).unwrap().network();
        assert_eq!(net, Network::new(&specs).unwrap());
    }

    #[test]
    fn seed_init_follows_the_seed_formula() {
        let params = Mlp::new(vec![6, 10, 4]).unwrap().seed_params(1);
        // W1[0] = ((0*7 + 1) % 13 - 6) / 50 = -5/50; W2[3] = ((3*5 + 1) % 11 - 5) / 50 = 0.
        assert_eq!(params[0].w[0], F32::from_i32(-5) / F32::from_i32(50));
        assert_eq!(params[1].w[3], F32::ZERO);
        assert!(params.iter().all(|l| l.b.iter().all(|&b| b == F32::ZERO)));
    }

    #[test]
    fn seed_init_is_exact_for_extreme_seeds() {
        // k = 0: (i64::MAX % 13) - 6 = (9223372036854775807 mod 13 = 7) - 6 = 1 (C remainder);
        // i64::MIN: -9223372036854775808 rem 13 = -8, minus 6 = -14.
        let mlp = Mlp::new(vec![2, 1]).unwrap();
        let fifty = F32::from_i32(50);
        let w = |seed| mlp.seed_params(seed)[0].w[0];
        assert_eq!(w(i64::MAX), F32::from_i32(1) / fifty);
        assert_eq!(w(i64::MIN), F32::from_i32(-14) / fifty);
    }
}
