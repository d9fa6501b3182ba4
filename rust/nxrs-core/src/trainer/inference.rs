//! Evaluation and prediction: the forward pass over a data set or over inputs, the samples
//! shared out among the threads, on the trainer's backend. They change nothing.

use super::setup::Setup;
use crate::arith::{cells, cells_mut, Real};
use crate::backend::{Backend, Compute};
use crate::dataset::Dataset;
use crate::layers::network::{Cells, Parameters};
use crate::layers::pass::{Context, Mode};
use crate::layers::transposed::Transposed;
use crate::loss::Loss;
use crate::model::Model;
use crate::sampling::Sampling;
use crate::softf32::F32;
use crate::state::TrainState;
use crate::threads::{ranges, split, Threads};

/// Loss and accuracy of a model on a data set.
#[derive(Clone, Copy, Debug)]
pub struct Evaluation {
    /// `(Σ sample losses in order) / f32(samples)`.
    pub loss: F32,
    pub correct: Option<usize>,
    /// The outputs scored: the samples, or a sequence model's tokens (section 15.8).
    pub samples: usize,
}

impl Evaluation {
    /// The accuracy on the data ([`crate::loss::accuracy`]); None for regression.
    pub fn accuracy(&self) -> Option<f64> {
        self.correct.map(|c| crate::loss::accuracy(c, self.samples))
    }
}

/// The model's loss (and accuracy, for classification) on `data` (checked by the caller), on
/// `backend`.
pub(super) fn evaluate(
    backend: Backend,
    setup: Setup<'_>,
    state: &TrainState,
    data: &Dataset,
) -> Evaluation {
    backend.run(Evaluate {
        on: On::of(setup, state),
        data,
    })
}

/// The model's outputs for row-major `inputs` (whole rows of its features, checked by the
/// caller), on `backend`: probabilities (cross-entropy) or values (MSE), `outputs` per sample.
/// With `raw`, the last layer's outputs as they are (before the loss's output function: a
/// classifier's logits).
pub(super) fn predict(
    backend: Backend,
    setup: Setup<'_>,
    state: &TrainState,
    inputs: &[F32],
    raw: bool,
) -> Vec<F32> {
    backend.run(Predict {
        on: On::of(setup, state),
        inputs,
        raw,
    })
}

/// Generates `count` tokens after `ids` (checked by the caller) with a sequence model of
/// context `t` on `backend` ([`super::Trainer::generate`]): each drawn by `sampling` from the
/// logits at the last position of the newest `t` ids, the positions after them holding id 0.
/// The weights are transposed and the cells allocated once for all the tokens: the forward
/// passes are the same as [`predict`]'s, one token's apart.
pub(super) fn generate(
    backend: Backend,
    setup: Setup<'_>,
    state: &TrainState,
    ids: Vec<usize>,
    count: usize,
    t: usize,
    sampling: &Sampling,
) -> Vec<usize> {
    backend.run(Generate {
        on: On::of(setup, state),
        ids,
        count,
        t,
        sampling,
    })
}

/// What evaluation and prediction read: the trainer's setup, the state, and its Dense weights
/// transposed once for all the threads' forward passes.
struct On<'a> {
    setup: Setup<'a>,
    state: &'a TrainState,
    transposed: Transposed,
}

impl<'a> On<'a> {
    fn of(setup: Setup<'a>, state: &'a TrainState) -> On<'a> {
        On {
            setup,
            state,
            transposed: Transposed::of(setup.model.network(), &state.params),
        }
    }

    /// The evaluation-mode forward pass of the row-major samples `x` with `cells`, its layers
    /// sharing their work among `threads`: the last layer's outputs, one row per sample.
    fn forward<'c, R: Real>(
        &self,
        threads: &Threads,
        x: &'c [F32],
        cells: &'c mut Cells,
    ) -> &'c [F32] {
        let net = self.setup.model.network();
        let rows = x.len() / self.setup.model.inputs();
        let context = Context {
            math: self.setup.config.math,
            mode: Mode::Eval,
            threads,
        };
        let parameters = Parameters {
            params: &self.state.params,
            running: &self.state.buffers,
            transposed: &self.transposed,
        };
        net.forward::<R>(context, parameters, x, rows, cells)
    }
}

/// [`evaluate`]'s computation.
struct Evaluate<'a> {
    on: On<'a>,
    data: &'a Dataset,
}

impl Compute for Evaluate<'_> {
    type Output = Evaluation;

    fn compute<R: Real>(self) -> Evaluation {
        let Evaluate { on, data } = self;
        let (config, model, threads) = (on.setup.config, on.setup.model, on.setup.threads);
        let math = config.math;
        let n = data.len();
        let mut losses = vec![F32::ZERO; n];
        let mut correct = vec![0; n];
        let ranges = ranges(n, threads.parts(n, model.work_per_sample()));
        let tasks = ranges
            .clone()
            .zip(split(&mut losses[..], ranges.clone(), 1))
            .zip(split(&mut correct[..], ranges, 1));
        threads.run(tasks, |((range, losses), correct)| {
            let _env = R::environment();
            let (features, width) = (model.inputs(), model.outputs());
            let mut cells_ = Cells::default();
            let mut outputs = vec![F32::ZERO; width];
            let mut delta = vec![F32::ZERO; width];
            let rows = rows(model);
            let chunks = range
                .clone()
                .step_by(rows)
                .map(|s| s..(s + rows).min(range.end));
            for chunk in chunks {
                // The data set's rows are contiguous: the chunk's features are one slice.
                let x = &data.inputs()[chunk.start * features..chunk.end * features];
                // The samples are shared out among the threads already: one thread each here.
                let z = on.forward::<R>(&Threads::ONE, x, &mut cells_);
                for (s, z) in chunk.zip(z.chunks_exact(width)) {
                    let target = data.sample(s).1.cells::<R>();
                    let outputs = cells_mut::<R>(&mut outputs);
                    let delta = cells_mut(&mut delta);
                    let (loss, right) = config.loss.sample(math, cells(z), target, outputs, delta);
                    let k = s - range.start;
                    losses[k] = loss.to_f32();
                    correct[k] = right;
                }
            }
        });
        // The losses summed in sample order (softf32 gives every backend's bits), over the
        // scored outputs: the samples, or a sequence model's tokens (section 15.8).
        let sum = losses[1..].iter().fold(losses[0], |sum, &loss| sum + loss);
        let scored = n * model.labels_per_sample();
        Evaluation {
            loss: sum / F32::from_i64(scored as i64),
            correct: (config.loss == Loss::CrossEntropy).then(|| correct.iter().sum()),
            samples: scored,
        }
    }
}

/// Rows whose forward pass runs at once in evaluation and prediction: enough for the matrix
/// products' tiles and cache blocks, few enough for their cells to stay in cache.
const ROWS: usize = 1024;

/// The samples of `model` whose forward pass runs at once: [`ROWS`] rows, a sequence model's
/// tokens each a row (its samples' cells are all kept until the last layer: 200 windows of
/// nanoGPT's character model at once would hold some 600 MB). Any count gives the same bits.
fn rows(model: &Model) -> usize {
    (ROWS / model.tokens().map_or(1, |t| t.tokens)).max(1)
}

/// [`generate`]'s computation.
struct Generate<'a> {
    on: On<'a>,
    ids: Vec<usize>,
    count: usize,
    t: usize,
    sampling: &'a Sampling,
}

impl Compute for Generate<'_> {
    type Output = Vec<usize>;

    fn compute<R: Real>(self) -> Vec<usize> {
        let Generate {
            on,
            mut ids,
            count,
            t,
            sampling,
        } = self;
        let _env = R::environment();
        let (math, classes) = (on.setup.config.math, on.setup.model.classes());
        let mut cells_ = Cells::default();
        let mut window = vec![F32::ZERO; t];
        for n in 0..count {
            let recent = &ids[ids.len().saturating_sub(t)..];
            window.fill(F32::ZERO);
            for (w, &id) in window.iter_mut().zip(recent) {
                *w = F32::from_i64(id as i64);
            }
            let last = recent.len() - 1;
            // One window: its layers share out their work among the threads.
            let z = on.forward::<R>(on.setup.threads, &window, &mut cells_);
            let id = sampling.draw(math, &z[last * classes..(last + 1) * classes], n as u64);
            ids.push(id);
        }
        ids
    }
}

/// [`predict`]'s computation.
struct Predict<'a> {
    on: On<'a>,
    inputs: &'a [F32],
    /// The last layer's outputs as they are (logits), not the loss's outputs.
    raw: bool,
}

impl Compute for Predict<'_> {
    type Output = Vec<F32>;

    fn compute<R: Real>(self) -> Vec<F32> {
        let Predict { on, inputs, raw } = self;
        let (config, model, threads) = (on.setup.config, on.setup.model, on.setup.threads);
        let (features, width, classes) = (model.inputs(), model.outputs(), model.classes());
        let n = inputs.len() / features;
        let mut out = vec![F32::ZERO; n * width];
        let ranges = ranges(n, threads.parts(n, model.work_per_sample()));
        let tasks = split(inputs, ranges.clone(), features).zip(split(&mut out[..], ranges, width));
        threads.run(tasks, |(inputs, out)| {
            let _env = R::environment();
            let mut cells_ = Cells::default();
            let rows = rows(model);
            for (x, out) in inputs
                .chunks(rows * features)
                .zip(out.chunks_mut(rows * width))
            {
                // The samples are shared out among the threads already: one thread each here.
                let z = on.forward::<R>(&Threads::ONE, x, &mut cells_);
                for (z, out) in z.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
                    if raw {
                        out.copy_from_slice(z);
                        continue;
                    }
                    config
                        .loss
                        .outputs(config.math, cells::<R>(z), classes, cells_mut(out));
                }
            }
        });
        out
    }
}
