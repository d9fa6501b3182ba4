//! Output layers and their losses (`docs/TRAINING.md`, section 5): softmax with cross-entropy
//! for classification, identity with mean squared error for regression. Each computes one
//! sample's loss and the gradient of that loss with respect to the last layer's outputs.

use crate::arith::{cells, Real};
use crate::math::Math;
use crate::softf32::F32;

crate::names::names! {
    /// The loss a model is trained with; recorded in every checkpoint.
    pub enum Loss {
        /// Softmax outputs, integer class labels.
        CrossEntropy = "cross_entropy",
        /// Identity outputs, float targets (one per output).
        Mse = "mse",
    }
}

/// One sample's target.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a, R> {
    Class(usize),
    Values(&'a [R]),
    /// A sequence model's label per token (section 15.8).
    Classes(&'a [usize]),
}

impl<'a> Target<'a, F32> {
    /// The target viewed in backend `R` (no copy).
    pub fn cells<R: Real>(self) -> Target<'a, R> {
        match self {
            Target::Class(label) => Target::Class(label),
            Target::Values(values) => Target::Values(cells(values)),
            Target::Classes(labels) => Target::Classes(labels),
        }
    }
}

impl Loss {
    /// The sample's loss. Leaves the model's outputs (probabilities or values) in `outputs` and
    /// the gradient with respect to `z` (the last layer's pre-activations) in `delta` (both as
    /// long as `z`).
    pub fn forward<R: Real>(
        self,
        math: Math,
        z: &[R],
        target: Target<'_, R>,
        outputs: &mut [R],
        delta: &mut [R],
    ) -> R {
        match (self, target) {
            (Loss::CrossEntropy, Target::Class(label)) => {
                let loss = softmax_cross_entropy(math, z, label, outputs);
                delta.copy_from_slice(outputs);
                delta[label] = outputs[label] - R::ONE;
                loss
            }
            (Loss::Mse, Target::Values(t)) => {
                outputs.copy_from_slice(z);
                mean_squared_error(z, t, delta)
            }
            _ => unreachable!("targets are checked against the loss when the data is bound"),
        }
    }

    /// A sample's loss and the outputs it scored correctly (section 10's rule; 0 for MSE):
    /// [`Loss::forward`], or for a sequence model's labels ([`Target::Classes`]) the same on
    /// each token's `z` (`z` holding the tokens' outputs one after another), the sample's loss
    /// the sum of its tokens' from the first (section 15.8).
    pub fn sample<R: Real>(
        self,
        math: Math,
        z: &[R],
        target: Target<'_, R>,
        outputs: &mut [R],
        delta: &mut [R],
    ) -> (R, usize) {
        let Target::Classes(labels) = target else {
            let loss = self.forward(math, z, target, outputs, delta);
            return (loss, usize::from(is_correct(math, outputs, target)));
        };
        let k = z.len() / labels.len();
        let rows = z
            .chunks_exact(k)
            .zip(outputs.chunks_exact_mut(k))
            .zip(delta.chunks_exact_mut(k));
        let (mut sum, mut correct) = (None, 0);
        for (((z, outputs), delta), &label) in rows.zip(labels) {
            let target = Target::Class(label);
            let loss = self.forward(math, z, target, outputs, delta);
            sum = Some(sum.map_or(loss, |sum| sum + loss));
            correct += usize::from(is_correct(math, outputs, target));
        }
        (sum.unwrap_or(R::ZERO), correct)
    }

    /// The model's outputs for `z`: probabilities (cross-entropy) or `z` itself (MSE), over
    /// each `classes` outputs (a sequence model's token; all of `z` otherwise).
    pub fn outputs<R: Real>(self, math: Math, z: &[R], classes: usize, outputs: &mut [R]) {
        for (z, outputs) in z
            .chunks_exact(classes)
            .zip(outputs.chunks_exact_mut(classes))
        {
            match self {
                Loss::CrossEntropy => {
                    softmax(math, z, outputs);
                }
                Loss::Mse => outputs.copy_from_slice(z),
            }
        }
    }
}

/// `correct / samples` in binary64, as section 10 defines accuracy: a reported statistic of
/// exact integer counts, not training arithmetic (which is all softf32).
#[allow(clippy::float_arithmetic)]
pub fn accuracy(correct: usize, samples: usize) -> f64 {
    correct as f64 / samples as f64
}

/// Whether the maximum of the probabilities `p` (section 10's rule) is the sample's label.
pub fn is_correct<R: Real>(math: Math, p: &[R], target: Target<'_, R>) -> bool {
    matches!(target, Target::Class(label) if argmax(math, p) == label)
}

/// The index of the largest value by the setting's rule: the seed's `le` lets a later equal
/// value win; IEEE `<` keeps the first maximum and never picks a NaN after the first value.
pub fn argmax<R: Real>(math: Math, z: &[R]) -> usize {
    let mut best = 0;
    for (o, &value) in z.iter().enumerate().skip(1) {
        let better = match math {
            Math::Seed => math.le(z[best], value),
            Math::Ieee => z[best].ieee_lt(value),
        };
        if better {
            best = o;
        }
    }
    best
}

/// `e_o = exp(z_o - max)`, summed from +0 in order, then `p_o = e_o / sum`. Returns the sum
/// and the maximum.
fn softmax<R: Real>(math: Math, z: &[R], p: &mut [R]) -> (R, R) {
    let max = z[argmax(math, z)];
    let p = &mut p[..z.len()];
    for (p, &zo) in p.iter_mut().zip(z) {
        *p = zo - max;
    }
    math.exps_in_place(p);
    let sum = p.iter().fold(R::ZERO, |sum, &e| sum + e);
    for p in p.iter_mut() {
        *p = *p / sum;
    }
    (sum, max)
}

/// The seed's loss is `-log p_label`; the IEEE setting computes `log(sum) - (z_label - max)`,
/// which stays finite when `p_label` underflows to 0.
fn softmax_cross_entropy<R: Real>(math: Math, z: &[R], label: usize, p: &mut [R]) -> R {
    let (sum, max) = softmax(math, z, p);
    match math {
        Math::Seed => -math.log(p[label]),
        Math::Ieee => math.log(sum) - (z[label] - max),
    }
}

/// `(Σ d_o^2 from +0) / K` with `d = z - t`; the gradient is `d_o * (2 / K)`.
fn mean_squared_error<R: Real>(z: &[R], t: &[R], delta: &mut [R]) -> R {
    let outputs = R::from_i64(z.len() as i64);
    let scale = R::from_i64(2) / outputs;
    let mut sum = R::ZERO;
    for ((&zo, &to), delta) in z.iter().zip(t).zip(delta.iter_mut()) {
        let d = zo - to;
        sum = sum + d * d;
        *delta = d * scale;
    }
    sum / outputs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(x: i32) -> F32 {
        F32::from_i32(x)
    }

    #[test]
    fn mse_of_small_integers_is_exact() {
        // z = (3, 1), t = (1, 1): d = (2, 0), loss = 4 / 2 = 2, gradient = (2 * 1, 0).
        let (z, t) = ([f(3), f(1)], [f(1), f(1)]);
        let (mut out, mut delta) = ([F32::ZERO; 2], [F32::ZERO; 2]);
        let loss = Loss::Mse.forward(Math::Ieee, &z, Target::Values(&t), &mut out, &mut delta);
        assert_eq!(loss, f(2));
        assert_eq!(delta, [f(2), F32::ZERO]);
        assert_eq!(out, z);
    }

    #[test]
    fn equal_logits_give_uniform_probabilities_and_log_k_loss() {
        let z = [f(5); 4];
        let (mut p, mut delta) = ([F32::ZERO; 4], [F32::ZERO; 4]);
        let loss = Loss::CrossEntropy.forward(Math::Ieee, &z, Target::Class(2), &mut p, &mut delta);
        let quarter = F32::ONE / f(4);
        assert_eq!(p, [quarter; 4]);
        assert_eq!(loss, f(4).ln());
        assert_eq!(delta[2], quarter - F32::ONE);
    }

    #[test]
    fn ieee_loss_stays_finite_when_the_probability_underflows() {
        let z = [f(0), f(-200)];
        let (mut p, mut delta) = ([F32::ZERO; 2], [F32::ZERO; 2]);
        let loss = Loss::CrossEntropy.forward(Math::Ieee, &z, Target::Class(1), &mut p, &mut delta);
        assert_eq!(p[1], F32::ZERO);
        // log(1 + e^-200) rounds to 0 in binary32, so the loss is exactly 200.
        assert_eq!(loss, f(200));
    }

    #[test]
    fn argmax_ties_follow_the_setting() {
        let z = [f(1), f(3), f(3)];
        assert_eq!(argmax(Math::Ieee, &z), 1);
        assert_eq!(argmax(Math::Seed, &z), 2);
    }
}
