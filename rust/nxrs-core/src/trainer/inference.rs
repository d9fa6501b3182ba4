//! Evaluation and prediction: the forward pass over a data set or over inputs, the samples
//! shared out among the threads, on the trainer's backend. They change nothing.

use super::Trainer;
use crate::arith::{cells, cells_mut, Real};
use crate::backend::Compute;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::layers::network::Cells;
use crate::layers::pass::{Context, Mode};
use crate::loss::{argmax, Target};
use crate::math::Math;
use crate::mlp::{ForwardCells, Transposed};
use crate::model::Model;
use crate::softf32::F32;
use crate::threads::{ranges, split, Threads};

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
        let features = self.model.inputs();
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
        let transposed = transposed(t);
        let n = data.len();
        let mut losses = vec![F32::ZERO; n];
        let mut correct = vec![false; n];
        let ranges = ranges(n, t.threads.parts(n, t.model.work_per_sample()));
        let tasks = ranges
            .clone()
            .zip(split(&mut losses[..], ranges.clone(), 1))
            .zip(split(&mut correct[..], ranges, 1));
        t.threads.run(tasks, |((range, losses), correct)| {
            let _env = R::environment();
            let (features, width) = (t.model.inputs(), t.model.outputs());
            let mut cells_ = Forward::new(t, transposed.as_ref(), ROWS.min(range.len()));
            let mut outputs = vec![F32::ZERO; width];
            let mut delta = vec![F32::ZERO; width];
            let chunks = range
                .clone()
                .step_by(ROWS)
                .map(|s| s..(s + ROWS).min(range.end));
            for chunk in chunks {
                // The data set's rows are contiguous: the chunk's features are one slice.
                let x = &data.inputs()[chunk.start * features..chunk.end * features];
                let z = cells_.forward::<R>(t, x);
                for (s, z) in chunk.zip(z.chunks_exact(width)) {
                    let target = data.sample(s).1.cells::<R>();
                    let outputs = cells_mut::<R>(&mut outputs);
                    let loss = t.config.loss.forward(
                        math,
                        cells(z),
                        target,
                        outputs,
                        cells_mut(&mut delta),
                    );
                    let k = s - range.start;
                    losses[k] = loss.to_f32();
                    correct[k] = is_correct(math, outputs, target);
                }
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

/// Rows whose forward pass runs at once in evaluation and prediction: enough for the matrix
/// products' tiles and cache blocks, few enough for their cells to stay in cache.
const ROWS: usize = 1024;

/// [`Trainer::predict`]'s computation.
struct Predict<'a> {
    trainer: &'a Trainer,
    inputs: &'a [F32],
}

impl Compute for Predict<'_> {
    type Output = Vec<F32>;

    fn compute<R: Real>(self) -> Vec<F32> {
        let Predict { trainer: t, inputs } = self;
        let (features, width) = (t.model.inputs(), t.model.outputs());
        let transposed = transposed(t);
        let n = inputs.len() / features;
        let mut out = vec![F32::ZERO; n * width];
        let ranges = ranges(n, t.threads.parts(n, t.model.work_per_sample()));
        let tasks = split(inputs, ranges.clone(), features).zip(split(&mut out[..], ranges, width));
        t.threads.run(tasks, |(inputs, out)| {
            let _env = R::environment();
            let mut cells_ =
                Forward::new(t, transposed.as_ref(), ROWS.min(inputs.len() / features));
            for (x, out) in inputs
                .chunks(ROWS * features)
                .zip(out.chunks_mut(ROWS * width))
            {
                let z = cells_.forward::<R>(t, x);
                for (z, out) in z.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
                    t.config
                        .loss
                        .outputs(t.config.math, cells::<R>(z), cells_mut(out));
                }
            }
        });
        out
    }
}

/// An MLP's weights transposed for its forward passes (layer models read them as they are).
fn transposed(t: &Trainer) -> Option<Transposed> {
    match &t.model {
        Model::Mlp(mlp) => Some(Transposed::of(mlp, &t.state.params)),
        Model::Network(_) => None,
    }
}

/// A thread's cells for evaluation-mode forward passes of up to `rows` rows at a time.
enum Forward<'a> {
    Mlp(ForwardCells, &'a Transposed),
    Network(Cells),
}

impl<'a> Forward<'a> {
    fn new(t: &Trainer, transposed: Option<&'a Transposed>, rows: usize) -> Forward<'a> {
        match (&t.model, transposed) {
            (Model::Mlp(mlp), Some(transposed)) => {
                Forward::Mlp(ForwardCells::new(mlp, rows), transposed)
            }
            _ => Forward::Network(Cells::default()),
        }
    }

    /// The last layer's outputs for the row-major samples `x`, one row per sample.
    fn forward<'c, R: Real>(&'c mut self, t: &Trainer, x: &'c [F32]) -> &'c [F32] {
        let (math, params) = (t.config.math, &t.state.params[..]);
        match (self, &t.model) {
            (Forward::Mlp(cells, transposed), Model::Mlp(mlp)) => {
                cells.forward::<R>(mlp, math, params, transposed, x)
            }
            (Forward::Network(cells), Model::Network(net)) => {
                let rows = x.len() / net.input.iter().product::<usize>();
                // Evaluation shares out samples among the threads already: one thread each here.
                let context = Context {
                    math,
                    mode: Mode::Eval,
                    threads: &Threads::ONE,
                };
                net.forward::<R>(context, (params, &t.state.buffers), x, rows, cells)
            }
            _ => unreachable!("a forward pass's cells are its model's"),
        }
    }
}

/// Whether the maximum of the probabilities `p` (section 10's rule) is the sample's label.
pub(super) fn is_correct<R: Real>(math: Math, p: &[R], target: Target<'_, R>) -> bool {
    matches!(target, Target::Class(label) if argmax(math, p) == label)
}
