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
        self.forward_on::<R>(self.setup.model, threads, x, cells)
    }

    /// [`On::forward`] through `model`: the setup's, or the same on fewer tokens
    /// ([`Model::on_fewer_tokens`]).
    fn forward_on<'c, R: Real>(
        &self,
        model: &Model,
        threads: &Threads,
        x: &'c [F32],
        cells: &'c mut Cells,
    ) -> &'c [F32] {
        let net = model.network();
        let rows = x.len() / model.inputs();
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
        // The model on each shorter window's length, built when first needed (`None` inside:
        // not the same model on fewer tokens, so the whole window is computed).
        let mut fewer: Vec<Option<Option<Model>>> = vec![None; t];
        let architecture = &on.setup.config.architecture;
        for n in 0..count {
            let recent = &ids[ids.len().saturating_sub(t)..];
            window.fill(F32::ZERO);
            for (w, &id) in window.iter_mut().zip(recent) {
                *w = F32::from_i64(id as i64);
            }
            let last = recent.len() - 1;
            let model = match fewer.get_mut(recent.len()) {
                Some(slot) => slot
                    .get_or_insert_with(|| {
                        on.setup.model.on_fewer_tokens(architecture, recent.len())
                    })
                    .as_ref(),
                None => None,
            };
            // One window (the padding's rows left out where the model allows it): its layers
            // share out their work among the threads.
            let z = match model {
                Some(model) => {
                    let x = &window[..recent.len()];
                    on.forward_on::<R>(model, on.setup.threads, x, &mut cells_)
                }
                None => on.forward::<R>(on.setup.threads, &window, &mut cells_),
            };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::hardware;
    use crate::config::{Family, TrainerConfig, Value};
    use crate::layers::LayerSpec;
    use crate::model::Architecture;
    use crate::trainer::Trainer;

    /// A GPT of `nxrs.layers.gpt(5, context=6, layers=1, heads=2, width=4)`'s form, with
    /// `tail` after its final LayerNorm in place of the tied head.
    fn gpt(tail: &[&str]) -> Vec<LayerSpec> {
        let texts = [
            r#"{"type": "Input", "shape": [6]}"#,
            r#"{"type": "Embedding", "vocab": 5, "width": 4, "std": 0.5}"#,
            r#"{"type": "PositionalEmbedding", "context": 6, "width": 4, "std": 0.5}"#,
            r#"{"type": "Residual", "layers": [{"type": "LayerNorm", "eps": 1e-05, "bias": false},
                {"type": "CausalSelfAttention", "heads": 2, "std": 0.5, "proj_std": 0.5}]}"#,
            r#"{"type": "Residual", "layers": [{"type": "LayerNorm", "eps": 1e-05, "bias": false},
                {"type": "Dense", "units": 16, "bias": false, "std": 0.5}, {"type": "GELU"},
                {"type": "Dense", "units": 4, "bias": false, "std": 0.5}]}"#,
            r#"{"type": "LayerNorm", "eps": 1e-05, "bias": false}"#,
        ];
        texts
            .iter()
            .chain(tail)
            .enumerate()
            .map(|(k, text)| LayerSpec::from_json_text(text, k).unwrap())
            .collect()
    }

    fn trainer(specs: Vec<LayerSpec>) -> Trainer {
        let settings = [("layers", Value::Layers(specs)), ("seed", Value::Int(7))];
        Trainer::new(TrainerConfig::from_settings(Family::General, &settings).unwrap()).unwrap()
    }

    /// Generation's shorter windows: through the model on fewer tokens, the logits of each of
    /// the window's tokens are the padded whole window's, bit for bit, on both backends (under
    /// causal attention nothing after a token reaches it). The ids are every vocabulary entry,
    /// and the padding (id 0) differs from what follows in the whole window.
    #[test]
    fn fewer_tokens_give_the_whole_windows_rows() {
        let t = trainer(gpt(&[r#"{"type": "TiedHead"}"#]));
        let setup = t.setup();
        let architecture = &setup.config.architecture;
        let ids = [3.0f32, 1.0, 4.0, 2.0, 0.0, 4.0].map(|x| F32::from_bits(x.to_bits()));
        let mut backends = vec![Backend::Soft];
        backends.extend(hardware().ok().map(|_| Backend::Hw));
        for backend in backends {
            for n in 1..6 {
                let mut window = ids;
                window[n..].fill(F32::ZERO);
                let whole = predict(backend, setup, &t.state, &window, true);
                let fewer = setup.model.on_fewer_tokens(architecture, n).unwrap();
                let short = Setup {
                    model: &fewer,
                    ..setup
                };
                let rows = predict(backend, short, &t.state, &ids[..n], true);
                let bits = |z: &[F32]| z.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&rows), bits(&whole[..rows.len()]), "{backend:?}, {n}");
                assert_eq!(rows.len(), n * 5);
            }
        }
    }

    /// A model whose tensors depend on the length (a Dense over the flattened tokens) has no
    /// model on fewer tokens, and neither has a layer-sizes model.
    #[test]
    fn only_the_same_model_runs_on_fewer_tokens() {
        let flat = trainer(gpt(&[
            r#"{"type": "Flatten"}"#,
            r#"{"type": "Dense", "units": 5}"#,
        ]));
        let architecture = &flat.config.architecture;
        assert!(flat.model.on_fewer_tokens(architecture, 3).is_none());
        let sizes = Trainer::new(TrainerConfig::seed_model()).unwrap();
        let layers = Architecture::Sizes(vec![6, 10, 4]);
        assert!(sizes.model.on_fewer_tokens(&layers, 3).is_none());
        let gpt = trainer(gpt(&[r#"{"type": "TiedHead"}"#]));
        assert!(gpt
            .model
            .on_fewer_tokens(&gpt.config.architecture, 3)
            .is_some());
    }
}
