//! One layer's forward and backward pass over a block of samples: the dispatch from a checked
//! [`Layer`] to its kernels, on stored cells viewed as backend `R`'s values.

use super::attention;
use super::conv::{resized, Delta, Then, Weights};
use super::embedding;
use super::norm::{BatchNorm, BatchNormTensors, LayerNorm, Normalization};
use super::pointwise::{self, Dropout};
use super::pool::{self, Pooled};
use super::share::{by_samples, of};
use super::{Layer, Op};
use crate::arith::{cells, cells_mut, Real};
use crate::math::Math;
use crate::softf32::F32;
use crate::threads::Threads;

/// Training (batch statistics, dropout masks of this step) or evaluation mode (section 15.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The step's masks: the run's seed, the steps taken before this one, and the batch
    /// position of the block's first sample.
    Train {
        seed: i64,
        step: u64,
        first_sample: usize,
    },
    Eval,
}

/// What every layer of a pass computes with: the `math` setting, the mode, and the threads its
/// matrix products share their rows among (any count gives the same bits).
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    pub math: Math,
    pub mode: Mode,
    pub threads: &'a Threads,
}

/// The layers above a convolution that its forward pass takes over (`Layer::forward_then`).
#[derive(Debug)]
pub enum Above<'a> {
    Nothing,
    ReLU,
    /// A ReLU, then this max pooling layer (its [`Saved`] cells for its backward pass).
    ReLUMaxPool(&'a Layer, &'a mut Saved),
}

/// The neighbours' backward passes a layer's takes over (`Layer::backward_then`).
#[derive(Debug)]
pub enum Taken<'a> {
    Nothing,
    /// The derivative of the ReLU below (max pooling).
    ReLUBelow,
    /// The ReLU's and the max pooling's above (a convolution whose forward pass took them over):
    /// the pooling layer, what its forward pass kept and its outputs.
    ReLUMaxPoolAbove {
        pool: &'a Layer,
        saved: &'a Saved,
        y: &'a [F32],
    },
}

/// A layer's tensors as a pass reads and writes them.
#[derive(Debug, Default)]
pub struct Tensors<'a> {
    /// `(W, b)` or `(gamma, beta)`.
    pub params: Option<(&'a [F32], &'a [F32])>,
    /// BatchNorm's running `(mean, var)`, which evaluation mode reads.
    pub running: Option<(&'a [F32], &'a [F32])>,
    /// `Wᵀ` of a layer of one position (Dense), which its forward pass reads in place of `W`
    /// (a network's passes give it: [`super::transposed`]).
    pub transposed: Option<&'a [F32]>,
}

/// What a layer's forward pass keeps for its backward pass.
#[derive(Clone, Debug, Default)]
pub struct Saved {
    /// A convolution's columns; a normalisation's `x̂`; GELU's `Phi(x)`.
    cells: Vec<F32>,
    /// Max pooling's chosen cells.
    chosen: Vec<u32>,
    /// A normalisation's `r` per group.
    r: Vec<F32>,
    /// BatchNorm's block statistics for the running averages.
    statistics: Vec<F32>,
    /// What causal self-attention keeps.
    attention: attention::Kept,
}

/// About how many multiply-adds one cell's `exp` (Tanh, Sigmoid) or dropout mask costs: how
/// [`by_samples`] weighs those layers' samples against a thread's worth of work.
const EXP_WORK: usize = 16;
const MASK_WORK: usize = 8;

impl Layer {
    fn input_cells(&self) -> usize {
        self.input.iter().product()
    }

    fn output_cells(&self) -> usize {
        self.output.iter().product()
    }

    /// The outputs `y` of `rows` samples `x` (both channels first, sample after sample).
    pub fn forward<R: Real>(
        &self,
        context: Context<'_>,
        tensors: Tensors<'_>,
        x: &[F32],
        rows: usize,
        y: &mut [F32],
        saved: &mut Saved,
    ) {
        self.forward_then::<R>(context, tensors, x, rows, y, saved, Above::Nothing);
    }

    /// Whether this layer's forward pass can apply a ReLU above it to its outputs
    /// ([`Layer::forward_then`]).
    pub(super) fn rectifies_outputs(&self) -> bool {
        matches!(self.op, Op::Conv(_))
    }

    /// Whether this layer's forward pass can apply a ReLU and max pooling above it to its
    /// outputs (a convolution with positions to pool, not Dense).
    pub(super) fn pools_outputs(&self) -> bool {
        matches!(&self.op, Op::Conv(conv) if conv.window.positions() > 1)
    }

    /// Whether this layer's backward pass can apply the derivative of a ReLU below it to its
    /// input gradients ([`Layer::backward_then`]).
    pub(super) fn rectifies_input_gradients(&self) -> bool {
        matches!(self.op, Op::MaxPool(_))
    }

    /// [`Layer::forward`], then the layers above it that `then` names, on each part of the
    /// outputs while it is in the cache: `y` is then the last of those layers' outputs, bit for
    /// bit, and this layer's are not kept.
    #[allow(clippy::too_many_arguments)] // what `forward` takes, and the layers above
    pub(super) fn forward_then<R: Real>(
        &self,
        Context {
            math,
            mode,
            threads,
        }: Context<'_>,
        tensors: Tensors<'_>,
        x: &[F32],
        rows: usize,
        y: &mut [F32],
        saved: &mut Saved,
        then: Above<'_>,
    ) {
        let last = match &then {
            Above::ReLUMaxPool(pool, _) => pool,
            Above::Nothing | Above::ReLU => self,
        };
        let (n_in, n_out) = (rows * self.input_cells(), rows * last.output_cells());
        let x: &[R] = cells(&x[..n_in]);
        let y: &mut [R] = cells_mut(&mut y[..n_out]);
        // Dense and LayerNorm act on each token of a sequence: its tokens are their rows.
        let tokens = rows * self.sequence.unwrap_or(1);
        match &self.op {
            Op::Embedding { .. } => {
                let (table, _) = tensors.params.expect("an Embedding has E");
                embedding::embed(cells(table), self.output[1], x, y);
            }
            Op::Positional { .. } => {
                let (table, _) = tensors.params.expect("a PositionalEmbedding has P");
                embedding::add_positions(cells(table), self.input_cells(), x, y);
            }
            Op::Attention(a) => {
                let (wqkv, wo) = tensors.params.expect("attention has Wqkv and Wo");
                let weights = (cells(wqkv), cells(wo));
                a.forward(threads, math, weights, x, rows, &mut saved.attention, y);
            }
            Op::TiedHead { vocab } => {
                let (table, _) = tensors.params.expect("a tied head reads E");
                let sizes = (*vocab, self.input[1]);
                embedding::tied_forward(threads, cells(table), sizes, x, tokens, y);
            }
            Op::Conv(conv) => {
                let (w, b) = tensors.params.expect("a convolution has W and b");
                let w = match tensors.transposed {
                    Some(w_t) => Weights::Transposed(cells(w_t)),
                    None => Weights::AsTheyAre(cells(w)),
                };
                let params = (w, cells(b));
                let then = match then {
                    Above::Nothing => Then::Nothing,
                    Above::ReLU => Then::Rectify(math),
                    Above::ReLUMaxPool(pool, saved) => {
                        let Op::MaxPool(window) = &pool.op else {
                            unreachable!("the network pools only with max pooling")
                        };
                        saved.chosen.resize(rows * pool.output_cells(), 0);
                        Then::RectifyMaxPool(math, window, &mut saved.chosen)
                    }
                };
                conv.forward(threads, params, x, tokens, &mut saved.cells, y, then);
            }
            Op::MaxPool(w) => {
                saved.chosen.resize(n_out, 0);
                let (cells_in, cells_out) = (self.input_cells(), self.output_cells());
                let chosen = bytemuck::cast_slice_mut(&mut saved.chosen[..n_out]);
                let buffers = [(y, cells_out), (chosen, cells_out)];
                let touched = cells_in + 2 * cells_out;
                by_samples(
                    threads,
                    (rows, 1),
                    (cells_in, touched),
                    buffers,
                    |r, [y, chosen]| {
                        let chosen = bytemuck::cast_slice_mut(chosen);
                        pool::max_forward(w, of(x, &r, cells_in), r.len(), y, chosen);
                    },
                );
            }
            Op::AvgPool(w) => {
                let (cells_in, cells_out) = (self.input_cells(), self.output_cells());
                by_samples(
                    threads,
                    (rows, 1),
                    (cells_in, 2 * cells_out),
                    [(y, cells_out)],
                    |r, [y]| {
                        pool::avg_forward(w, of(x, &r, cells_in), r.len(), y);
                    },
                );
            }
            Op::Reshape => y.copy_from_slice(x),
            Op::ReLU => {
                let n = self.input_cells();
                by_samples(threads, (rows, 1), (n, 2 * n), [(y, n)], |r, [y]| {
                    let x = of(x, &r, n);
                    math.copy_where_positive(x, x, y);
                });
            }
            Op::Tanh => {
                let n = self.input_cells();
                by_samples(
                    threads,
                    (rows, 1),
                    (n * EXP_WORK, 2 * n),
                    [(y, n)],
                    |r, [y]| {
                        pointwise::tanh(math, of(x, &r, n), y);
                    },
                );
            }
            Op::Sigmoid => {
                let n = self.input_cells();
                by_samples(
                    threads,
                    (rows, 1),
                    (n * EXP_WORK, 2 * n),
                    [(y, n)],
                    |r, [y]| {
                        pointwise::sigmoid(math, of(x, &r, n), y);
                    },
                );
            }
            Op::GELU => {
                // `Phi(x)` kept for the backward pass, which needs it again.
                let n = self.input_cells();
                let cdf = cells_mut(resized(&mut saved.cells, n_in));
                by_samples(
                    threads,
                    (rows, 1),
                    (n * EXP_WORK, 3 * n),
                    [(y, n), (cdf, n)],
                    |r, [y, cdf]| {
                        pointwise::gelu(of(x, &r, n), cdf, y);
                    },
                );
            }
            Op::Fork { .. } | Op::Add { .. } => {
                unreachable!("the network's passes add a Residual's cells themselves")
            }
            Op::Dropout { p } => match mode {
                Mode::Train {
                    seed,
                    step,
                    first_sample,
                } => {
                    let dropout = Dropout::<R>::new(*p, seed, step, self.position);
                    let n = self.input_cells();
                    by_samples(
                        threads,
                        (rows, 1),
                        (n * MASK_WORK, 2 * n),
                        [(y, n)],
                        |r, [y]| {
                            dropout.forward(first_sample + r.start, n, of(x, &r, n), y);
                        },
                    );
                }
                Mode::Eval => y.copy_from_slice(x),
            },
            Op::BatchNorm(bn) => {
                let bn = batch_norm::<R>(bn);
                let (gamma, beta) = tensors.params.expect("a BatchNorm has gamma and beta");
                match mode {
                    Mode::Train { .. } => {
                        let xhat = cells_mut(resized(&mut saved.cells, n_in));
                        let r = cells_mut(resized(&mut saved.r, bn.channels));
                        let statistics = cells_mut(resized(&mut saved.statistics, 2 * bn.channels));
                        let params = (cells(gamma), cells(beta));
                        bn.forward_train(params, x, rows, xhat, r, statistics, y);
                    }
                    Mode::Eval => {
                        let (mean, var) =
                            tensors.running.expect("a BatchNorm has running statistics");
                        let t = BatchNormTensors {
                            gamma: cells(gamma),
                            beta: cells(beta),
                            mean: cells(mean),
                            var: cells(var),
                        };
                        bn.forward_eval(t, x, rows, y);
                    }
                }
            }
            Op::LayerNorm(ln) => {
                let ln = LayerNorm {
                    cells: ln.cells,
                    eps: R::from_f32(ln.eps),
                    bias: ln.bias,
                };
                let (gamma, beta) = tensors.params.expect("a LayerNorm has gamma and beta");
                let xhat = cells_mut(resized(&mut saved.cells, n_in));
                let r = cells_mut(resized(&mut saved.r, tokens));
                ln.forward(threads, (cells(gamma), cells(beta)), x, tokens, xhat, r, y);
            }
        }
    }

    /// The backward pass of `rows` samples after a training-mode [`Layer::forward`] of `x` to
    /// `y` (`saved` as it left it): from the output gradients `g`, the input gradients `gx`
    /// (when wanted) and the parameters' block gradients `grads` (a layer with parameters).
    #[allow(clippy::too_many_arguments)] // what the forward pass saw and kept, and both results
    pub fn backward<R: Real>(
        &self,
        context: Context<'_>,
        params: Option<(&[F32], &[F32])>,
        xyg: (&[F32], &[F32], &[F32]),
        rows: usize,
        saved: &mut Saved,
        gx: Option<&mut [F32]>,
        grads: Option<(&mut [F32], &mut [F32])>,
    ) {
        self.backward_then::<R>(context, params, xyg, rows, saved, gx, grads, Taken::Nothing);
    }

    /// [`Layer::backward`], and the backward passes of the layers `taken` names too, while the
    /// cells are in the cache: with [`Taken::ReLUBelow`] (a layer that
    /// [`Layer::rectifies_input_gradients`]) `gx` is the ReLU's input gradients, bit for bit;
    /// with [`Taken::ReLUMaxPoolAbove`] (a convolution whose forward pass took them over) `g`
    /// is the pooling's output gradients.
    #[allow(clippy::too_many_arguments)] // what `backward` takes, and the ReLU
    pub(super) fn backward_then<R: Real>(
        &self,
        Context {
            math,
            mode,
            threads,
        }: Context<'_>,
        params: Option<(&[F32], &[F32])>,
        (x, y, g): (&[F32], &[F32], &[F32]),
        rows: usize,
        saved: &mut Saved,
        gx: Option<&mut [F32]>,
        grads: Option<(&mut [F32], &mut [F32])>,
        taken: Taken<'_>,
    ) {
        let rectify = matches!(taken, Taken::ReLUBelow);
        debug_assert!(!rectify || self.rectifies_input_gradients());
        let (n_in, n_out) = (rows * self.input_cells(), rows * self.output_cells());
        let g_cells = match &taken {
            Taken::ReLUMaxPoolAbove { pool, .. } => rows * pool.output_cells(),
            Taken::Nothing | Taken::ReLUBelow => n_out,
        };
        let g: &[R] = cells(&g[..g_cells]);
        // Read only by the layers that need them: a ReLU's derivative is written with its
        // outputs, so the network keeps no outputs for a layer whose ReLU above took them over.
        let (x, y) = (
            || -> &[R] { cells(&x[..n_in]) },
            || -> &[R] { cells(&y[..n_out]) },
        );
        let mut gx = gx.map(|gx| cells_mut::<R>(&mut gx[..n_in]));
        let tokens = rows * self.sequence.unwrap_or(1);
        match &self.op {
            Op::Embedding { tied, .. } => {
                let (g_table, _) = grads.expect("an Embedding's gradient");
                let g_table = cells_mut::<R>(g_table);
                let width = self.output[1];
                if *tied {
                    // E's block gradient: the tied head's chain (already here) + this one's.
                    let mut own = vec![R::ZERO; g_table.len()];
                    embedding::embed_backward(threads, width, x(), g, &mut own);
                    for (sum, &own) in g_table.iter_mut().zip(&own) {
                        *sum = *sum + own;
                    }
                } else {
                    embedding::embed_backward(threads, width, x(), g, g_table);
                }
            }
            Op::Positional { .. } => {
                let (g_table, _) = grads.expect("a PositionalEmbedding's gradient");
                embedding::positions_backward(self.input_cells(), g, cells_mut(g_table));
                if let Some(gx) = gx {
                    gx.copy_from_slice(g);
                }
            }
            Op::Attention(a) => {
                let (wqkv, wo) = params.expect("attention has Wqkv and Wo");
                let (g_wqkv, g_wo) = grads.expect("attention's gradients");
                let weights = (cells(wqkv), cells(wo));
                let grads = (cells_mut(g_wqkv), cells_mut(g_wo));
                a.backward(
                    threads,
                    weights,
                    (x(), g),
                    rows,
                    &saved.attention,
                    gx,
                    grads,
                );
            }
            Op::TiedHead { vocab } => {
                let (table, _) = params.expect("a tied head reads E");
                let (g_table, _) = grads.expect("E's gradient");
                let sizes = (*vocab, self.input[1]);
                let (xg, g_table) = ((x(), g), cells_mut(g_table));
                embedding::tied_backward(threads, cells(table), sizes, xg, tokens, gx, g_table);
            }
            Op::Conv(conv) => {
                let (w, _) = params.expect("a convolution has W and b");
                let delta = match taken {
                    Taken::ReLUMaxPoolAbove { pool, saved, y } => {
                        let Op::MaxPool(window) = &pool.op else {
                            unreachable!("the network pools only with max pooling")
                        };
                        Delta::Pooled(Pooled {
                            window,
                            math,
                            g,
                            y: cells(&y[..g_cells]),
                            chosen: &saved.chosen[..g_cells],
                        })
                    }
                    Taken::Nothing | Taken::ReLUBelow => Delta::Given(g),
                };
                if let Some((gw, gb)) = grads {
                    let inputs = (x(), &saved.cells[..]);
                    let (gw, gb) = (cells_mut(gw), cells_mut(gb));
                    conv.block_gradient(threads, delta, inputs, tokens, gw, gb);
                }
                if let Some(gx) = gx.as_deref_mut() {
                    conv.input_gradient(threads, cells(w), delta, tokens, gx);
                }
            }
            Op::MaxPool(w) => {
                if let Some(gx) = gx {
                    let (cells_in, cells_out) = (self.input_cells(), self.output_cells());
                    let chosen = &saved.chosen[..n_out];
                    by_samples(
                        threads,
                        (rows, 1),
                        (cells_in, 2 * cells_in),
                        [(gx, cells_in)],
                        |r, [gx]| {
                            let (g, chosen) = (of(g, &r, cells_out), of(chosen, &r, cells_out));
                            let rectify = rectify.then(|| (math, of(y(), &r, cells_out)));
                            pool::max_backward(w, g, chosen, r.len(), gx, rectify);
                        },
                    );
                }
            }
            Op::AvgPool(w) => {
                if let Some(gx) = gx {
                    let (cells_in, cells_out) = (self.input_cells(), self.output_cells());
                    by_samples(
                        threads,
                        (rows, 1),
                        (cells_in, 2 * cells_in),
                        [(gx, cells_in)],
                        |r, [gx]| {
                            pool::avg_backward(w, of(g, &r, cells_out), r.len(), gx);
                        },
                    );
                }
            }
            Op::Reshape => {
                if let Some(gx) = gx {
                    gx.copy_from_slice(g);
                }
            }
            Op::ReLU => {
                if let Some(gx) = gx {
                    let n = self.input_cells();
                    by_samples(threads, (rows, 1), (n, 2 * n), [(gx, n)], |r, [gx]| {
                        // The outputs decide as the inputs would: `y` is positive where `x` is
                        // (section 15.3), and a ReLU whose forward pass its layer below applied
                        // has only its outputs.
                        math.copy_where_positive(of(y(), &r, n), of(g, &r, n), gx);
                    });
                }
            }
            Op::Tanh => {
                if let Some(gx) = gx {
                    let n = self.input_cells();
                    by_samples(threads, (rows, 1), (n, 2 * n), [(gx, n)], |r, [gx]| {
                        pointwise::tanh_backward(of(g, &r, n), of(y(), &r, n), gx);
                    });
                }
            }
            Op::Sigmoid => {
                if let Some(gx) = gx {
                    let n = self.input_cells();
                    by_samples(threads, (rows, 1), (n, 2 * n), [(gx, n)], |r, [gx]| {
                        pointwise::sigmoid_backward(of(g, &r, n), of(y(), &r, n), gx);
                    });
                }
            }
            Op::GELU => {
                if let Some(gx) = gx {
                    let n = self.input_cells();
                    by_samples(
                        threads,
                        (rows, 1),
                        (n * EXP_WORK, 2 * n),
                        [(gx, n)],
                        |r, [gx]| {
                            let (x, cdf) = (of(x(), &r, n), of(cells(&saved.cells), &r, n));
                            pointwise::gelu_backward(of(g, &r, n), (x, cdf), gx);
                        },
                    );
                }
            }
            Op::Fork { .. } | Op::Add { .. } => {
                unreachable!("the network's passes add a Residual's gradients themselves")
            }
            Op::Dropout { p } => {
                if let (
                    Some(gx),
                    Mode::Train {
                        seed,
                        step,
                        first_sample,
                    },
                ) = (gx, mode)
                {
                    let dropout = Dropout::<R>::new(*p, seed, step, self.position);
                    let n = self.input_cells();
                    by_samples(
                        threads,
                        (rows, 1),
                        (n * MASK_WORK, 2 * n),
                        [(gx, n)],
                        |r, [gx]| {
                            dropout.backward(first_sample + r.start, n, of(g, &r, n), gx);
                        },
                    );
                }
            }
            Op::BatchNorm(bn) => {
                let norm = batch_norm::<R>(bn);
                normalization_backward(threads, &norm, params, grads, saved, (g, n_in, rows), gx);
            }
            Op::LayerNorm(ln) => {
                let norm = LayerNorm {
                    cells: ln.cells,
                    eps: R::from_f32(ln.eps),
                    bias: ln.bias,
                };
                let given = (g, n_in, tokens);
                normalization_backward(threads, &norm, params, grads, saved, given, gx);
            }
        }
    }
}

impl Saved {
    /// BatchNorm's block statistics from its last training-mode forward pass.
    pub fn statistics(&self) -> &[F32] {
        &self.statistics
    }
}

impl Layer {
    /// A BatchNorm's running averages updated by a block of `rows` samples whose training-mode
    /// forward pass gave `statistics` ([`Saved::statistics`]; nothing for other layers).
    pub fn update_running<R: Real>(
        &self,
        rows: usize,
        statistics: &[F32],
        mean: &mut [F32],
        var: &mut [F32],
    ) {
        if let Op::BatchNorm(bn) = &self.op {
            let bn = batch_norm::<R>(bn);
            bn.update_running(rows, cells(statistics), cells_mut(mean), cells_mut(var));
        }
    }
}

/// A normalisation's backward pass (BatchNorm and LayerNorm alike): from the output gradient
/// `g` and what the forward pass kept, the block gradients of `gamma` and `beta` and, when
/// wanted, the input gradient.
fn normalization_backward<R: Real>(
    threads: &Threads,
    norm: &impl Normalization<R>,
    params: Option<(&[F32], &[F32])>,
    grads: Option<(&mut [F32], &mut [F32])>,
    saved: &Saved,
    (g, n_in, rows): (&[R], usize, usize),
    gx: Option<&mut [R]>,
) {
    let (gamma, _) = params.expect("a normalisation has gamma and beta");
    let (g_gamma, g_beta) = grads.expect("a normalisation's gradients");
    let mut d = vec![R::ZERO; n_in];
    // The input gradient is computed whether wanted or not (the parameters' need `d` anyway).
    let mut unused = Vec::new();
    let gx = gx.unwrap_or_else(|| {
        unused.resize(n_in, R::ZERO);
        &mut unused[..]
    });
    let kept = (cells(&saved.cells[..n_in]), cells(&saved.r));
    let grads = (cells_mut(g_gamma), cells_mut(g_beta));
    norm.backward(threads, cells(gamma), g, kept, rows, &mut d, grads, gx);
}

fn batch_norm<R: Real>(bn: &BatchNorm<F32>) -> BatchNorm<R> {
    BatchNorm {
        channels: bn.channels,
        positions: bn.positions,
        momentum: R::from_f32(bn.momentum),
        eps: R::from_f32(bn.eps),
    }
}
