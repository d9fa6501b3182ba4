//! Drawing the next token from a sequence model's logits (`docs/TRAINING.md` section 15.9): by
//! the largest logit at temperature 0, else from the softmax of the logits over the
//! temperature (among the `top_k` largest, when given), the draw read from the random stream
//! `(seed, SAMPLE, n)` of the `n`-th token drawn. Every operation is binary32 in a fixed
//! order, so one model, prompt and seed give the same text on every machine.

use crate::error::{Error, Result};
use crate::loss::argmax;
use crate::math::Math;
use crate::rng::{Domain, Stream};
use crate::softf32::F32;

/// How the next token is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampling {
    /// `0`: the largest logit; else the logits are divided by it (finite, `>= 0`).
    pub temperature: F32,
    /// Only the `top_k` largest logits may be drawn (`1..=vocab`).
    pub top_k: Option<usize>,
    /// Keys the draws' streams.
    pub seed: i64,
}

impl Sampling {
    /// Checks the temperature (finite, `>= 0`) and `top_k` (`1..=vocab`): `Error::Input`.
    pub fn check(&self, vocab: usize) -> Result<()> {
        let t = self.temperature;
        if !(t.is_finite() && F32::ZERO.ieee_le(t)) {
            return Err(Error::Input(format!(
                "temperature = {} must be finite and >= 0 (0 takes the most likely token)",
                f32::from_bits(t.to_bits())
            )));
        }
        match self.top_k {
            Some(k) if k == 0 || k > vocab => Err(Error::Input(format!(
                "top_k = {k} must be in 1..={vocab} (the vocabulary's size)"
            ))),
            _ => Ok(()),
        }
    }

    /// The `n`-th token drawn (counted from 0 in a generation) from the logits `z`.
    pub fn draw(&self, math: Math, z: &[F32], n: u64) -> usize {
        if self.temperature == F32::ZERO || self.temperature.to_bits() == 0x8000_0000 {
            return argmax(math, z);
        }
        // The candidates: every token, or the top_k largest logits, chosen one at a time as
        // the largest of those left by section 5's "ieee" rule (the first of equal ones; a NaN
        // only when it comes first), then taken in id order.
        let mut candidates: Vec<usize> = (0..z.len()).collect();
        if let Some(k) = self.top_k {
            let mut left = candidates;
            let mut chosen = Vec::with_capacity(k);
            for _ in 0..k {
                let best =
                    (1..left.len()).fold(
                        0,
                        |b, i| {
                            if z[left[b]].ieee_lt(z[left[i]]) {
                                i
                            } else {
                                b
                            }
                        },
                    );
                chosen.push(left.remove(best));
            }
            chosen.sort_unstable();
            candidates = chosen;
        }
        // The softmax of z / temperature over the candidates, in id order.
        let u: Vec<F32> = candidates
            .iter()
            .map(|&i| z[i] / self.temperature)
            .collect();
        let m = u[1..]
            .iter()
            .fold(u[0], |m, &x| if m.ieee_lt(x) { x } else { m });
        let w: Vec<F32> = u.iter().map(|&x| math.exp(x - m)).collect();
        let sum = w.iter().fold(F32::ZERO, |s, &x| s + x);
        // A point in [0, sum): 24 random bits as a fraction of one (exact), times the sum.
        let mut stream = Stream::new(self.seed, Domain::Sample, n);
        let bits = F32::from_i64((stream.next_u64() >> 40) as i64);
        let target = (bits * F32::from_bits((127 - 24) << 23)) * sum;
        let mut cumulative = F32::ZERO;
        for (k, &x) in w.iter().enumerate() {
            cumulative = cumulative + x;
            if target.ieee_lt(cumulative) {
                return candidates[k];
            }
        }
        candidates[candidates.len() - 1]
    }
}
