//! Evaluation and prediction: the forward pass over a data set or over inputs, the samples
//! shared out among the threads, on the trainer's backend. They change nothing.

use super::Trainer;
use crate::arith::{cells, cells_mut, Real};
use crate::backend::Compute;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::loss::{argmax, Target};
use crate::math::Math;
use crate::mlp::Scratch;
use crate::softf32::F32;
use crate::threads::{ranges, split};

/// Loss and accuracy of a model on a data set.
#[derive(Clone, Copy, Debug)]
pub struct Evaluation {
    /// `(Σ sample losses in order) / f32(samples)`.
    pub loss: F32,
    pub correct: Option<usize>,
    pub samples: usize,
}

impl Trainer {
    /// The model's loss (and accuracy, for classification) on `data`. Changes nothing.
    pub fn evaluate(&self, data: &Dataset) -> Result<Evaluation> {
        self.check_data(data)?;
        Ok(self.backend.run(Evaluate {
            trainer: self,
            data,
        }))
    }

    /// The model's outputs for row-major `inputs`: probabilities (cross-entropy) or values
    /// (MSE), `outputs` per sample, row-major. Changes nothing.
    pub fn predict(&self, inputs: &[F32]) -> Result<Vec<F32>> {
        let features = self.mlp.inputs();
        if !inputs.len().is_multiple_of(features) {
            return Err(Error::Input(format!(
                "{} feature values do not make rows of {features}",
                inputs.len()
            )));
        }
        Ok(self.backend.run(Predict {
            trainer: self,
            inputs,
        }))
    }
}

/// [`Trainer::evaluate`]'s computation.
struct Evaluate<'a> {
    trainer: &'a Trainer,
    data: &'a Dataset,
}

impl Compute for Evaluate<'_> {
    type Output = Evaluation;

    fn compute<R: Real>(self) -> Evaluation {
        let Evaluate { trainer: t, data } = self;
        let math = t.config.math;
        let transposed = t.transposed();
        let n = data.len();
        let mut losses = vec![F32::ZERO; n];
        let mut correct = vec![false; n];
        let ranges = ranges(n, t.threads.parts(n, t.mlp.parameters()));
        let tasks = ranges
            .clone()
            .zip(split(&mut losses[..], ranges.clone(), 1))
            .zip(split(&mut correct[..], ranges, 1));
        t.threads.run(tasks, |((range, losses), correct)| {
            let _env = R::environment();
            let mut scratch = Scratch::new(&t.mlp);
            let mut delta = vec![F32::ZERO; t.mlp.outputs()];
            for (k, s) in range.enumerate() {
                let (x, target) = data.sample(s);
                let target = target.cells::<R>();
                t.mlp
                    .forward::<R>(math, &t.state.params, &transposed, cells(x), &mut scratch);
                let (z, outputs) = scratch.z_and_outputs::<R>();
                let loss = t
                    .config
                    .loss
                    .forward(math, z, target, outputs, cells_mut(&mut delta));
                losses[k] = loss.to_f32();
                correct[k] = is_correct(math, outputs, target);
            }
        });
        // The losses summed in sample order (softf32 gives every backend's bits).
        let sum = losses[1..].iter().fold(losses[0], |sum, &loss| sum + loss);
        Evaluation {
            loss: sum / F32::from_i64(n as i64),
            correct: t
                .classifies()
                .then(|| correct.iter().filter(|&&c| c).count()),
            samples: n,
        }
    }
}

/// [`Trainer::predict`]'s computation.
struct Predict<'a> {
    trainer: &'a Trainer,
    inputs: &'a [F32],
}

impl Compute for Predict<'_> {
    type Output = Vec<F32>;

    fn compute<R: Real>(self) -> Vec<F32> {
        let Predict { trainer: t, inputs } = self;
        let (features, width) = (t.mlp.inputs(), t.mlp.outputs());
        let transposed = t.transposed();
        let n = inputs.len() / features;
        let mut out = vec![F32::ZERO; n * width];
        let ranges = ranges(n, t.threads.parts(n, t.mlp.parameters()));
        let tasks = split(inputs, ranges.clone(), features).zip(split(&mut out[..], ranges, width));
        t.threads.run(tasks, |(inputs, out)| {
            let _env = R::environment();
            let mut scratch = Scratch::new(&t.mlp);
            for (x, out) in inputs.chunks(features).zip(out.chunks_mut(width)) {
                t.mlp.forward::<R>(
                    t.config.math,
                    &t.state.params,
                    &transposed,
                    cells(x),
                    &mut scratch,
                );
                let (z, outputs) = scratch.z_and_outputs::<R>();
                t.config.loss.outputs(t.config.math, z, outputs);
                out.copy_from_slice(&scratch.outputs);
            }
        });
        out
    }
}

/// Whether the maximum of the probabilities `p` (section 10's rule) is the sample's label.
pub(super) fn is_correct<R: Real>(math: Math, p: &[R], target: Target<'_, R>) -> bool {
    matches!(target, Target::Class(label) if argmax(math, p) == label)
}
